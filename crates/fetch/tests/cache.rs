//! Local paths and the cache: what counts as a hit, and what never does.

mod common;

use std::fs;
use std::time::{Duration, SystemTime};

use common::{entry, mirror_of, options, sha256_hex, test_bytes, TempDir, TEST_HUB};
use tf_fetch::{
    entry_path, fetch_entry, locate, partial_path, resolve, stamp_path, verify_cached_entry,
    FetchError, Source, Verified,
};

/// A catalogue entry whose mirror checksum is that of `bytes`.
fn entry_for(file_name: &str, bytes: &[u8]) -> &'static tf_fetch::CatalogueEntry {
    entry(
        file_name,
        bytes.len() as u64,
        TEST_HUB,
        Some(mirror_of(Vec::new(), &sha256_hex(bytes))),
    )
}

fn failed_sources(err: &FetchError) -> Vec<(Source, String)> {
    match err {
        FetchError::AllSourcesFailed { failures, .. } => failures
            .iter()
            .map(|f| (f.source, f.error.to_string()))
            .collect(),
        other => panic!("expected AllSourcesFailed, got {other}"),
    }
}

#[test]
fn an_existing_path_is_used_as_is() {
    let dir = TempDir::new("local");
    let file = dir.path().join("weights.gguf");
    fs::write(&file, b"GGUF").unwrap();
    let opts = options(&dir.path().join("cache"));
    let spec = file.to_str().unwrap();
    assert_eq!(resolve(spec, &opts).unwrap(), file);
    assert_eq!(locate(spec, &opts.cache_dir), Some(file));
    assert!(!opts.cache_dir.exists(), "a local hit touches no cache");
}

#[test]
fn a_missing_path_is_an_error_not_a_fetch() {
    let dir = TempDir::new("missing");
    let opts = options(dir.path());
    let missing = dir.path().join("nope.gguf");
    let err = resolve(missing.to_str().unwrap(), &opts).unwrap_err();
    assert!(matches!(err, FetchError::MissingLocalFile(_)), "{err}");
    assert!(err.to_string().contains("nope.gguf"));
}

#[test]
fn a_verified_cache_file_is_hashed_once_then_trusted_by_its_stamp() {
    let cache = TempDir::new("hit");
    let bytes = test_bytes(300_000, 1);
    let entry = entry_for("hit.gguf", &bytes);
    let path = entry_path(entry, cache.path());
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, &bytes).unwrap();

    assert_eq!(
        verify_cached_entry(entry, &path, false).unwrap(),
        Verified::Hashed
    );
    let stamp = fs::read_to_string(stamp_path(&path)).unwrap();
    assert!(stamp.starts_with(&sha256_hex(&bytes)), "{stamp}");
    assert_eq!(
        verify_cached_entry(entry, &path, false).unwrap(),
        Verified::Stamp
    );

    // fetch_entry with no network source allowed still finds it.
    assert_eq!(fetch_entry(entry, &options(cache.path())).unwrap(), path);
}

#[test]
fn a_cached_file_of_the_wrong_size_is_not_used() {
    let cache = TempDir::new("size");
    let bytes = test_bytes(4096, 2);
    let entry = entry_for("size.gguf", &bytes);
    let path = entry_path(entry, cache.path());
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, &bytes[..4000]).unwrap();

    let err = fetch_entry(entry, &options(cache.path())).unwrap_err();
    let failures = failed_sources(&err);
    assert_eq!(failures[0].0, Source::Cache);
    assert!(
        failures[0].1.contains("size 4000 bytes, expected 4096"),
        "{err}"
    );
    assert_eq!(failures[1], (Source::Hub, "skipped (offline)".into()));
    assert_eq!(failures[2], (Source::Mirror, "skipped (offline)".into()));
    assert!(!stamp_path(&path).exists());
}

#[test]
fn a_cached_file_with_the_wrong_hash_is_not_used() {
    let cache = TempDir::new("hash");
    let bytes = test_bytes(4096, 3);
    let entry = entry_for("hash.gguf", &bytes);
    let path = entry_path(entry, cache.path());
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut corrupted = bytes.clone();
    corrupted[1234] ^= 1;
    fs::write(&path, &corrupted).unwrap();

    let err = verify_cached_entry(entry, &path, false).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, FetchError::CorruptCache { .. }), "{message}");
    assert!(message.contains(&sha256_hex(&corrupted)) && message.contains(&sha256_hex(&bytes)));
    assert!(fetch_entry(entry, &options(cache.path())).is_err());
    assert!(!stamp_path(&path).exists());
}

#[test]
fn a_stamp_does_not_vouch_for_a_file_changed_after_it() {
    let cache = TempDir::new("stale");
    let bytes = test_bytes(4096, 4);
    let entry = entry_for("stale.gguf", &bytes);
    let path = entry_path(entry, cache.path());
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, &bytes).unwrap();
    verify_cached_entry(entry, &path, false).unwrap();

    // Same size, different bytes, and an mtime surely different from the stamped one.
    let mut corrupted = bytes.clone();
    corrupted[0] ^= 0xff;
    fs::write(&path, &corrupted).unwrap();
    let file = fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    drop(file);

    assert!(matches!(
        verify_cached_entry(entry, &path, false),
        Err(FetchError::CorruptCache { .. })
    ));
}

#[test]
fn a_leftover_partial_file_never_counts() {
    let cache = TempDir::new("partial");
    let bytes = test_bytes(4096, 5);
    let entry = entry_for("partial.gguf", &bytes);
    let path = entry_path(entry, cache.path());
    let partial = partial_path(&path);
    assert_eq!(partial.file_name().unwrap(), ".partial.gguf.partial");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    // Even complete and correct, a partial file is not the model.
    fs::write(&partial, &bytes).unwrap();

    let err = fetch_entry(entry, &options(cache.path())).unwrap_err();
    assert!(
        matches!(
            &failed_sources(&err)[0],
            (Source::Cache, message) if message.starts_with("not in the cache")
        ),
        "{err}"
    );
    assert!(!path.exists());
}

#[test]
fn a_cached_hub_file_is_found_without_network() {
    let cache = TempDir::new("hubhit");
    let path = cache.path().join("models/some-org/some-repo/file.gguf");
    let opts = options(cache.path());
    let spec = "some-org/some-repo/file.gguf";
    assert_eq!(locate(spec, cache.path()), None);
    let err = resolve(spec, &opts).unwrap_err();
    assert_eq!(
        failed_sources(&err)[1],
        (Source::Hub, "skipped (offline)".into())
    );

    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, b"GGUF").unwrap();
    assert_eq!(resolve(spec, &opts).unwrap(), path);
    assert_eq!(locate(spec, cache.path()), Some(path));
}

#[test]
fn offline_catalogue_miss_lists_every_source() {
    let cache = TempDir::new("offline");
    let err = resolve("smollm2-135m", &options(cache.path())).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("could not get smollm2-135m:"),
        "{message}"
    );
    for line in [
        "\n  cache: not in the cache",
        "\n  hub: skipped (offline)",
        "\n  mirror: skipped (offline)",
    ] {
        assert!(message.contains(line), "{message}");
    }
    assert_eq!(locate("smollm2-135m", cache.path()), None);
}
