//! Where models live on disk, and whether a cached file can be trusted.
//!
//! A catalogue file is trusted when its size and full SHA-256 match the catalogue. Hashing 1 GB on
//! every start is slow, so a verified file gets a stamp `<file>.sha256` beside it recording the
//! hash together with the file's size and modification time; while those still match, the stamp
//! stands in for the hash.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use crate::catalogue::CatalogueEntry;
use crate::error::FetchError;
use crate::progress;

/// The cache root: `flag` > `$TENSORFOLD_CACHE` > `$XDG_CACHE_HOME/tensorfold` > `~/.cache/tensorfold`.
pub fn cache_dir(flag: Option<&Path>) -> PathBuf {
    cache_dir_from(
        flag,
        std::env::var_os("TENSORFOLD_CACHE"),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
}

fn cache_dir_from(
    flag: Option<&Path>,
    tensorfold_cache: Option<OsString>,
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> PathBuf {
    if let Some(flag) = flag {
        return flag.to_path_buf();
    }
    let non_empty = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = non_empty(tensorfold_cache) {
        return dir;
    }
    // The XDG spec says relative values are invalid and must be ignored.
    if let Some(xdg) = non_empty(xdg_cache_home).filter(|p| p.is_absolute()) {
        return xdg.join("tensorfold");
    }
    match non_empty(home) {
        Some(home) => home.join(".cache").join("tensorfold"),
        None => std::env::temp_dir().join("tensorfold"),
    }
}

/// `<cache>/models`.
pub fn models_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("models")
}

/// Where a catalogue entry's file lives in the cache.
pub fn entry_path(entry: &CatalogueEntry, cache_dir: &Path) -> PathBuf {
    models_dir(cache_dir).join(entry.file_name)
}

/// Where a Hub file `owner/repo/file` lives in the cache: `<cache>/models/owner/repo/file`.
pub fn hub_file_path(repo: &str, file: &str, cache_dir: &Path) -> PathBuf {
    let mut path = models_dir(cache_dir);
    path.extend(repo.split('/'));
    path.extend(file.split('/'));
    path
}

/// The stamp file beside `path`.
pub fn stamp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(".sha256");
    path.with_file_name(name)
}

/// How a cached file's checksum was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verified {
    /// A stamp matching the file's size and mtime vouched for it: nothing was read.
    Stamp,
    /// The whole file was hashed now (and a stamp written, if the directory allows it).
    Hashed,
}

/// Which source produced a file; recorded in its stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StampOrigin {
    /// Matched the catalogue's mirror checksum.
    Catalogue,
    /// Matched the checksum the Hub announced when it was downloaded.
    Hub,
}

impl StampOrigin {
    fn as_str(self) -> &'static str {
        match self {
            StampOrigin::Catalogue => "catalogue",
            StampOrigin::Hub => "hub",
        }
    }
}

struct Stamp {
    sha256: String,
    size: u64,
    mtime_ns: u128,
    origin: String,
}

fn mtime_ns(meta: &fs::Metadata) -> u128 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

fn read_stamp(path: &Path) -> Option<Stamp> {
    let text = fs::read_to_string(stamp_path(path)).ok()?;
    let mut lines = text.lines();
    let sha256 = lines.next()?.split_whitespace().next()?.to_string();
    let mut stamp = Stamp {
        sha256,
        size: 0,
        mtime_ns: 0,
        origin: String::new(),
    };
    for field in lines.flat_map(str::split_whitespace) {
        match field.split_once('=')? {
            ("size", v) => stamp.size = v.parse().ok()?,
            ("mtime_ns", v) => stamp.mtime_ns = v.parse().ok()?,
            ("origin", v) => stamp.origin = v.to_string(),
            _ => {}
        }
    }
    Some(stamp)
}

/// Records that `path` (as it is now) has SHA-256 `sha256`. Best effort: a cache the user cannot
/// write to still works, it is just hashed again next time.
pub(crate) fn write_stamp(path: &Path, sha256: &str, origin: StampOrigin) {
    let Ok(meta) = fs::metadata(path) else { return };
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let text = format!(
        "{sha256}  {file_name}\nsize={} mtime_ns={} origin={}\n",
        meta.len(),
        mtime_ns(&meta),
        origin.as_str()
    );
    let stamp = stamp_path(path);
    let tmp = crate::atomic::partial_path(&stamp);
    if fs::write(&tmp, text).is_ok() && fs::rename(&tmp, &stamp).is_err() {
        let _ = fs::remove_file(&tmp);
    }
}

/// Checks the cached copy of a catalogue entry at `path` (see the module docs).
pub fn verify_cached_entry(
    entry: &CatalogueEntry,
    path: &Path,
    show_progress: bool,
) -> Result<Verified, FetchError> {
    let meta = match fs::metadata(path) {
        Ok(meta) if meta.is_file() => meta,
        Ok(_) => return Err(corrupt(path, "not a regular file".into())),
        Err(_) => return Err(FetchError::NotCached(path.to_path_buf())),
    };
    let expected_sha = entry.mirror.map(|m| m.sha256);
    if let Some(stamp) = read_stamp(path) {
        let current = stamp.size == meta.len() && stamp.mtime_ns == mtime_ns(&meta);
        let from_catalogue =
            expected_sha.is_some_and(|sha| stamp.sha256 == sha && meta.len() == entry.size_bytes);
        // A Hub download was verified against the Hub's checksum, which we cannot know offline.
        let from_hub = stamp.origin == StampOrigin::Hub.as_str();
        if current && (from_catalogue || from_hub) {
            return Ok(Verified::Stamp);
        }
    }
    let Some(expected_sha) = expected_sha else {
        return Err(corrupt(path, "no valid checksum stamp".into()));
    };
    if meta.len() != entry.size_bytes {
        return Err(corrupt(
            path,
            format!("size {} bytes, expected {}", meta.len(), entry.size_bytes),
        ));
    }
    let actual = hash_file(path, show_progress)?;
    if actual != expected_sha {
        return Err(corrupt(
            path,
            format!("sha256 {actual}, expected {expected_sha}"),
        ));
    }
    write_stamp(path, &actual, StampOrigin::Catalogue);
    Ok(Verified::Hashed)
}

fn corrupt(path: &Path, reason: String) -> FetchError {
    FetchError::CorruptCache {
        path: path.to_path_buf(),
        reason,
    }
}

/// SHA-256 (lowercase hex) of a whole file.
pub fn hash_file(path: &Path, show_progress: bool) -> Result<String, FetchError> {
    let context = || format!("reading {}", path.display());
    let mut file = fs::File::open(path).map_err(|e| FetchError::io(context(), e))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = progress::bar(
        show_progress,
        len,
        format!("verifying {}", file_label(path)),
    );
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; progress::CHUNK_BYTES];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| FetchError::io(context(), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    Ok(hex(&hasher.finalize()))
}

pub(crate) fn file_label(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    #[test]
    fn precedence_flag_env_xdg_home() {
        let flag = Path::new("/flag");
        assert_eq!(
            cache_dir_from(Some(flag), os("/tf"), os("/xdg"), os("/home/u")),
            PathBuf::from("/flag")
        );
        assert_eq!(
            cache_dir_from(None, os("/tf"), os("/xdg"), os("/home/u")),
            PathBuf::from("/tf")
        );
        assert_eq!(
            cache_dir_from(None, None, os("/xdg"), os("/home/u")),
            PathBuf::from("/xdg/tensorfold")
        );
        assert_eq!(
            cache_dir_from(None, os(""), os("relative"), os("/home/u")),
            PathBuf::from("/home/u/.cache/tensorfold")
        );
    }

    #[test]
    fn stamp_sits_beside_the_file() {
        assert_eq!(
            stamp_path(Path::new("/c/models/a.gguf")),
            PathBuf::from("/c/models/a.gguf.sha256")
        );
    }
}
