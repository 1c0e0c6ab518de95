//! The Hub source, against a canned HTTP server on 127.0.0.1.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{entry, mirror_of, names_in, options, serve, sha256_hex, test_bytes, Canned, TempDir};
use tf_fetch::{
    fetch_entry, hub_file_path, resolve, stamp_path, verify_cached_entry, FetchError, HubSource,
    PullOptions, Source, Verified,
};

const SPEC: &str = "test-org/test-repo/model.gguf";
const RESOLVE_PATH: &str = "/test-org/test-repo/resolve/main/model.gguf";

fn online(cache: &std::path::Path, endpoint: &str) -> PullOptions {
    let mut opts = options(cache);
    opts.offline = false;
    opts.hub_endpoint = endpoint.to_string();
    opts
}

fn quoted(sha: &str) -> String {
    format!("\"{sha}\"")
}

#[test]
fn downloads_and_verifies_against_x_linked_etag() {
    let body = test_bytes(3 << 20, 10);
    let etag = quoted(&sha256_hex(&body));
    let server = serve(vec![(
        RESOLVE_PATH,
        Canned::ok(
            body.clone(),
            &[("x-linked-etag", &etag), ("etag", "\"not-a-sha\"")],
        ),
    )]);
    let cache = TempDir::new("hub-ok");
    let path = resolve(SPEC, &online(cache.path(), &server.endpoint)).unwrap();

    assert_eq!(
        path,
        hub_file_path("test-org/test-repo", "model.gguf", cache.path())
    );
    assert_eq!(fs::read(&path).unwrap(), body);
    assert!(fs::read_to_string(stamp_path(&path))
        .unwrap()
        .starts_with(&sha256_hex(&body)));
    assert_eq!(
        names_in(path.parent().unwrap()),
        ["model.gguf", "model.gguf.sha256"]
    );

    // Now cached: served without asking the Hub again.
    let requests = server.seen.lock().unwrap().len();
    assert_eq!(
        resolve(SPEC, &online(cache.path(), &server.endpoint)).unwrap(),
        path
    );
    assert_eq!(server.seen.lock().unwrap().len(), requests);
}

#[test]
fn follows_the_lfs_redirect_to_a_cdn_without_the_token() {
    let body = test_bytes(100_000, 11);
    let cdn = serve(vec![(
        "/blobs/abc",
        // A CDN's own ETag is not the file's SHA-256; the Hub's x-linked-etag is what counts.
        Canned::ok(
            body.clone(),
            &[("etag", "\"d41d8cd98f00b204e9800998ecf8427e\"")],
        ),
    )]);
    let location = format!("{}/blobs/abc", cdn.endpoint);
    let size = body.len().to_string();
    let etag = quoted(&sha256_hex(&body));
    let hub = serve(vec![(
        RESOLVE_PATH,
        Canned::status(
            302,
            &[
                ("location", &location),
                ("x-linked-etag", &etag),
                ("x-linked-size", &size),
            ],
        ),
    )]);
    let cache = TempDir::new("hub-redirect");
    let mut opts = online(cache.path(), &hub.endpoint);
    opts.hub_token = Some("hf_secret".into());
    let path = resolve(SPEC, &opts).unwrap();

    assert_eq!(fs::read(&path).unwrap(), body);
    let hub_seen = hub.seen.lock().unwrap();
    assert_eq!(
        hub_seen[0].headers.get("authorization").map(String::as_str),
        Some("Bearer hf_secret")
    );
    let cdn_seen = cdn.seen.lock().unwrap();
    assert_eq!(cdn_seen.len(), 1);
    assert!(!cdn_seen[0].headers.contains_key("authorization"));
}

#[test]
fn a_checksum_mismatch_is_rejected_and_leaves_nothing() {
    let body = test_bytes(200_000, 12);
    let wrong = sha256_hex(b"something else");
    let server = serve(vec![(
        RESOLVE_PATH,
        Canned::ok(body.clone(), &[("x-linked-etag", &quoted(&wrong))]),
    )]);
    let cache = TempDir::new("hub-mismatch");
    let err = resolve(SPEC, &online(cache.path(), &server.endpoint)).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("checksum mismatch"), "{message}");
    assert!(
        message.contains(&format!("expected sha256 {wrong}")),
        "{message}"
    );
    assert!(
        message.contains(&format!("got {}", sha256_hex(&body))),
        "{message}"
    );

    let dir = cache.path().join("models/test-org/test-repo");
    assert!(
        names_in(&dir).is_empty(),
        "left behind: {:?}",
        names_in(&dir)
    );
}

#[test]
fn a_download_without_a_sha256_is_refused() {
    let server = serve(vec![(
        RESOLVE_PATH,
        Canned::ok(
            b"GGUF".to_vec(),
            &[("etag", "\"0123456789abcdef0123456789abcdef01234567\"")],
        ),
    )]);
    let cache = TempDir::new("hub-nosha");
    let err = resolve(SPEC, &online(cache.path(), &server.endpoint)).unwrap_err();
    assert!(err.to_string().contains("no SHA-256"), "{err}");
    assert!(names_in(&cache.path().join("models/test-org/test-repo")).is_empty());
}

#[test]
fn http_errors_say_what_happened() {
    let server = serve(vec![]);
    let cache = TempDir::new("hub-404");
    let err = resolve(SPEC, &online(cache.path(), &server.endpoint)).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("HTTP 404") && message.contains(RESOLVE_PATH),
        "{message}"
    );
}

#[test]
fn a_closed_port_fails_fast_and_says_offline_or_unreachable() {
    let cache = TempDir::new("hub-closed");
    let opts = online(cache.path(), &common::closed_port_endpoint());
    let start = Instant::now();
    let err = resolve(SPEC, &opts).unwrap_err();
    // Generous bound: a refused connection takes milliseconds; this only catches hangs.
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "took {:?}",
        start.elapsed()
    );
    match &err {
        FetchError::AllSourcesFailed { failures, .. } => {
            assert_eq!(failures[1].source, Source::Hub);
            assert!(matches!(failures[1].error, FetchError::Unreachable { .. }));
        }
        other => panic!("{other}"),
    }
    assert!(
        err.to_string()
            .contains("hub: offline or unreachable: http://127.0.0.1:"),
        "{err}"
    );
}

#[test]
fn a_catalogue_entry_from_the_hub_is_trusted_by_its_stamp() {
    // The Hub's file may differ from the mirror's (size and hash): the stamp records that it was
    // verified against the Hub, so later starts neither reject nor rehash it.
    let body = test_bytes(50_000, 13);
    let server = serve(vec![(
        "/test-org/cat-repo/resolve/main/cat.gguf",
        Canned::ok(
            body.clone(),
            &[("x-linked-etag", &quoted(&sha256_hex(&body)))],
        ),
    )]);
    let hub = HubSource {
        repo: "test-org/cat-repo",
        file: "cat.gguf",
    };
    let entry = entry(
        "cat-local-name.gguf",
        999,
        hub,
        Some(mirror_of(Vec::new(), &"0".repeat(64))),
    );
    let cache = TempDir::new("hub-entry");
    let path = fetch_entry(entry, &online(cache.path(), &server.endpoint)).unwrap();

    assert_eq!(path, cache.path().join("models/cat-local-name.gguf"));
    assert_eq!(fs::read(&path).unwrap(), body);
    assert_eq!(
        verify_cached_entry(entry, &path, false).unwrap(),
        Verified::Stamp
    );
    let mut offline = options(cache.path());
    offline.offline = true;
    assert_eq!(fetch_entry(entry, &offline).unwrap(), path);
}
