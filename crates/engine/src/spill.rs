//! The prefix cache's disk tier: KV blocks that the RAM cache evicts are written to files named
//! by their chain hash, and a later request (or a restarted server with the same model) whose
//! prompt continues a cached prefix loads them back instead of recomputing them.
//!
//! A file `<hash>.kvb` (the chain hash in lowercase hex) holds, little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 8 | magic `TFKVBLK\0` |
//! | 4 | format version (2: a byte payload in the cache's KV format) |
//! | 4 | reserved (0) |
//! | 32 | salt (the runner's model and kernel identity) |
//! | 32 | the block's chain hash (equal to the file name) |
//! | 8 | payload length in bytes |
//! | n | payload: the block's stored keys and values (`Runner::block_data`), as stored |
//! | 32 | SHA-256 of everything above |
//!
//! The checksum is SHA-256 because the crate already has it (with the CPU's SHA extensions where
//! there are some) and because it is cheap next to what a hit saves: hashing a block costs about
//! a millisecond per MB, recomputing it costs a forward over 16 positions. A torn or corrupted
//! file is therefore caught whatever the damage, and since the payload is the exact bits a
//! fresh prefill writes, a block that passes is exactly what a recompute would give.
//!
//! Files are written atomically (a temporary name in the same directory, then a rename), without
//! fsync: a crash can at worst leave a damaged file, which fails its checksum and is deleted.
//! The directory is scanned at `open` (stale temporary files removed, files of other salts or
//! other names left alone); files are evicted least recently used first (in memory; the initial
//! order is by modification time, which a read refreshes) to keep the total under the budget.
//! Nothing here panics on a bad file: a missing, short or corrupt file is deleted, counted in
//! [`SpillStats::failures`], and reads as a miss.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::blocks::BlockHash;

const MAGIC: [u8; 8] = *b"TFKVBLK\0";
const VERSION: u32 = 2;
/// Magic, version, reserved, salt, hash, payload length.
pub const HEADER_BYTES: usize = 8 + 4 + 4 + 32 + 32 + 8;
pub const CHECKSUM_BYTES: usize = 32;
const EXT: &str = "kvb";
const TMP: &str = ".tmp-";

/// Disk tier counters, since the store was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpillStats {
    /// Blocks written to disk.
    pub writes: u64,
    /// Blocks read back and verified.
    pub reads: u64,
    /// Files found missing, short or corrupt (each deleted), blocks the runner refused, and
    /// writes that failed.
    pub failures: u64,
    /// Files deleted to stay under the budget.
    pub evictions: u64,
    /// Bytes of the files held now.
    pub bytes: u64,
    /// Files held now.
    pub files: u64,
}

struct Entry {
    bytes: u64,
    tick: u64,
}

pub struct SpillStore {
    dir: PathBuf,
    budget: u64,
    salt: BlockHash,
    entries: HashMap<BlockHash, Entry>,
    /// Files by last use (tick → hash).
    lru: BTreeMap<u64, BlockHash>,
    tick: u64,
    stats: SpillStats,
}

/// Distinguishes the temporary files of one process.
static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

fn hex(h: &BlockHash) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// The hash a file name `<64 hex digits>.kvb` stands for.
fn parse_name(name: &str) -> Option<BlockHash> {
    let stem = name.strip_suffix(".kvb")?;
    // Lowercase only: the name must be the one `path_of` gives.
    if stem.len() != 64 || !stem.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut h = [0u8; 32];
    for (i, byte) in h.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&stem[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(h)
}

/// A temporary file of ours: `<64 hex digits>.kvb.tmp-<digits and dashes>`.
fn is_tmp_name(name: &str) -> bool {
    let Some((file, tail)) = name.split_once(TMP) else {
        return false;
    };
    parse_name(file).is_some()
        && !tail.is_empty()
        && tail.bytes().all(|c| c.is_ascii_digit() || c == b'-')
}

/// What the header of a file says.
struct Header {
    version: u32,
    salt: BlockHash,
    hash: BlockHash,
    payload: u64,
}

/// None if the bytes are too short or do not start with the magic.
fn parse_header(b: &[u8]) -> Option<Header> {
    if b.len() < HEADER_BYTES || b[..8] != MAGIC {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    Some(Header {
        version: u32_at(8),
        salt: b[16..48].try_into().expect("32 bytes"),
        hash: b[48..80].try_into().expect("32 bytes"),
        payload: u64::from_le_bytes(b[80..88].try_into().expect("8 bytes")),
    })
}

/// The bytes of a file holding `data` as block `hash` under `salt`.
pub fn encode(salt: &BlockHash, hash: &BlockHash, data: &[u8]) -> Vec<u8> {
    let payload = data.len();
    let mut out = Vec::with_capacity(HEADER_BYTES + payload + CHECKSUM_BYTES);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(salt);
    out.extend_from_slice(hash);
    out.extend_from_slice(&(payload as u64).to_le_bytes());
    out.extend_from_slice(data);
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// The payload of a file's bytes if every field and the checksum are right; else why not.
pub fn decode(salt: &BlockHash, hash: &BlockHash, b: &[u8]) -> Result<Vec<u8>, &'static str> {
    let h = parse_header(b).ok_or("short file or bad magic")?;
    if h.version != VERSION {
        return Err("format version");
    }
    if h.salt != *salt {
        return Err("salt");
    }
    if h.hash != *hash {
        return Err("block hash");
    }
    let body = b.len() - HEADER_BYTES;
    if body < CHECKSUM_BYTES || h.payload != (body - CHECKSUM_BYTES) as u64 {
        return Err("payload length");
    }
    let (content, sum) = b.split_at(b.len() - CHECKSUM_BYTES);
    if Sha256::digest(content).as_slice() != sum {
        return Err("checksum");
    }
    Ok(content[HEADER_BYTES..].to_vec())
}

impl SpillStore {
    /// Opens (creating it if needed) the spill directory `dir`, keeping at most `budget_bytes`
    /// of block files there; `salt` must be the engine's (`Engine::salt`). Blocks left by an
    /// earlier run under the same salt are found again (least recently modified evicted first
    /// if they exceed the budget); stale temporary files are removed; other files are left
    /// alone and not counted.
    pub fn open(
        dir: impl AsRef<Path>,
        budget_bytes: u64,
        salt: BlockHash,
    ) -> io::Result<SpillStore> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        let mut store = SpillStore {
            dir,
            budget: budget_bytes,
            salt,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            stats: SpillStats::default(),
        };
        let mut found: Vec<(SystemTime, String, BlockHash, u64)> = Vec::new();
        for entry in fs::read_dir(&store.dir)? {
            let Ok(entry) = entry else { continue };
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            if is_tmp_name(&name) {
                let _ = fs::remove_file(entry.path());
                continue;
            }
            let Some(hash) = parse_name(&name) else {
                continue;
            };
            let mut head = Vec::with_capacity(HEADER_BYTES);
            let read = open_regular(&entry.path(), false)
                .and_then(|f| f.take(HEADER_BYTES as u64).read_to_end(&mut head));
            if read.is_err() {
                continue;
            }
            let Some(h) = parse_header(&head) else {
                // Named like ours but not a block file of any salt: damaged.
                eprintln!(
                    "prompt cache: {} is damaged: deleted",
                    entry.path().display()
                );
                store.delete_file(&hash);
                store.stats.failures += 1;
                continue;
            };
            if h.version != VERSION || h.salt != salt {
                // Another format or another model's block: not ours to count or delete.
                continue;
            }
            let size = meta.len();
            if h.hash != hash || h.payload + (HEADER_BYTES + CHECKSUM_BYTES) as u64 != size {
                eprintln!(
                    "prompt cache: {} is truncated or misnamed: deleted",
                    entry.path().display()
                );
                store.delete_file(&hash);
                store.stats.failures += 1;
                continue;
            }
            let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((mtime, name, hash, size));
        }
        found.sort();
        for (_, _, hash, size) in found {
            store.insert(hash, size);
        }
        store.make_room(0);
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn salt(&self) -> &BlockHash {
        &self.salt
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    pub fn stats(&self) -> SpillStats {
        self.stats
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The path of block `hash`'s file (whether or not it exists).
    pub fn path_of(&self, hash: &BlockHash) -> PathBuf {
        self.dir.join(format!("{}.{EXT}", hex(hash)))
    }

    /// Whether a file for `hash` is known (it is only verified when read).
    pub fn contains(&self, hash: &BlockHash) -> bool {
        self.entries.contains_key(hash)
    }

    /// Marks `hash` as just used (it is evicted last).
    pub fn touch(&mut self, hash: &BlockHash) {
        if let Some(e) = self.entries.get_mut(hash) {
            self.lru.remove(&e.tick);
            self.tick += 1;
            e.tick = self.tick;
            self.lru.insert(self.tick, *hash);
        }
    }

    fn insert(&mut self, hash: BlockHash, bytes: u64) {
        self.tick += 1;
        self.lru.insert(self.tick, hash);
        self.entries.insert(
            hash,
            Entry {
                bytes,
                tick: self.tick,
            },
        );
        self.stats.bytes += bytes;
        self.stats.files += 1;
    }

    /// Forgets `hash` and deletes its file.
    fn remove_entry(&mut self, hash: &BlockHash) -> bool {
        let Some(e) = self.entries.remove(hash) else {
            return false;
        };
        self.lru.remove(&e.tick);
        self.stats.bytes -= e.bytes;
        self.stats.files -= 1;
        self.delete_file(hash);
        true
    }

    fn delete_file(&self, hash: &BlockHash) {
        let _ = fs::remove_file(self.path_of(hash));
    }

    /// Evicts least recently used files until `extra` more bytes fit in the budget.
    fn make_room(&mut self, extra: u64) {
        while self.stats.bytes + extra > self.budget {
            let Some((_, hash)) = self.lru.pop_first() else {
                break;
            };
            let e = self.entries.remove(&hash).expect("lru and entries agree");
            self.stats.bytes -= e.bytes;
            self.stats.files -= 1;
            self.stats.evictions += 1;
            self.delete_file(&hash);
        }
    }

    /// Writes block `hash` (a block already held is only marked used). False if it does not
    /// fit in the budget at all or the write failed.
    pub fn put(&mut self, hash: &BlockHash, data: &[u8]) -> bool {
        if self.contains(hash) {
            self.touch(hash);
            return true;
        }
        let size = (HEADER_BYTES + data.len() + CHECKSUM_BYTES) as u64;
        if size > self.budget {
            return false;
        }
        self.make_room(size);
        let bytes = encode(&self.salt, hash, data);
        let path = self.path_of(hash);
        let written = self.write_file(&path, &bytes) || {
            // The directory itself may be gone (removed under us): what it held went with
            // it. Forget that (so the byte gauge tells the truth), make it again, retry once.
            self.dir_lost() && self.write_file(&path, &bytes)
        };
        if !written {
            eprintln!("prompt cache: cannot write {}", path.display());
            self.stats.failures += 1;
            return false;
        }
        self.insert(*hash, size);
        self.stats.writes += 1;
        true
    }

    /// Writes `bytes` to `path` through a temporary file (a reader never sees half a file).
    fn write_file(&self, path: &Path, bytes: &[u8]) -> bool {
        let mut tmp = path.to_path_buf().into_os_string();
        tmp.push(format!(
            "{TMP}{}-{}",
            std::process::id(),
            TMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = PathBuf::from(tmp);
        let ok = fs::write(&tmp, bytes)
            .and_then(|_| fs::rename(&tmp, path))
            .is_ok();
        if !ok {
            let _ = fs::remove_file(&tmp);
        }
        ok
    }

    /// If the spill directory no longer exists: forgets every block (their files are gone),
    /// creates the directory again and says true; otherwise false.
    fn dir_lost(&mut self) -> bool {
        if self.dir.is_dir() {
            return false;
        }
        eprintln!(
            "prompt cache: {} was removed: its {} blocks are forgotten; the directory is made \
             again",
            self.dir.display(),
            self.stats.files
        );
        self.entries.clear();
        self.lru.clear();
        self.stats.bytes = 0;
        self.stats.files = 0;
        fs::create_dir_all(&self.dir).is_ok()
    }

    /// The payload of block `hash`, verified (magic, version, salt, hash, length, checksum). A
    /// block not held is a miss; a held one whose file is missing, short or corrupt is deleted,
    /// counted in `failures`, and a miss too.
    pub fn get(&mut self, hash: &BlockHash) -> Option<Vec<u8>> {
        if !self.contains(hash) {
            return None;
        }
        let path = self.path_of(hash);
        let expected = self.entries.get(hash).map_or(0, |e| e.bytes);
        let data = read_block_file(&path, expected)
            .map_err(|e| e.to_string())
            .and_then(|b| decode(&self.salt, hash, &b).map_err(str::to_string));
        match data {
            Ok(d) => {
                self.stats.reads += 1;
                self.touch(hash);
                // So that the next run's initial order reflects this use (best effort).
                if let Ok(f) = open_regular(&path, true) {
                    let _ = f.set_modified(SystemTime::now());
                }
                Some(d)
            }
            Err(_) if self.dir_lost() => None,
            Err(why) => {
                eprintln!(
                    "prompt cache: {} is unusable ({why}): deleted; the request prefills those \
                     positions instead",
                    path.display()
                );
                self.discard(hash);
                None
            }
        }
    }

    /// Deletes block `hash` as unusable (counted in `failures`), e.g. a block the runner
    /// refused.
    pub fn discard(&mut self, hash: &BlockHash) {
        if self.remove_entry(hash) {
            self.stats.failures += 1;
        }
    }

    /// Deletes block `hash` (not counted as a failure or an eviction). False if not held.
    pub fn remove(&mut self, hash: &BlockHash) -> bool {
        self.remove_entry(hash)
    }
}

/// Opens `path` only if it is a regular file: without following a symbolic link and without
/// blocking (a FIFO or a device planted in the cache directory would otherwise wedge the
/// engine thread that reads it).
fn open_regular(path: &Path, write: bool) -> io::Result<fs::File> {
    let mut options = fs::File::options();
    options.read(!write).write(write);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// The bytes of a block file that must be `expected` bytes long, read only if it is a regular
/// file of exactly that length (a huge file is refused, not read).
fn read_block_file(path: &Path, expected: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path, false)?;
    let len = file.metadata()?.len();
    if len != expected {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{len} bytes where {expected} were written"),
        ));
    }
    let mut data = Vec::with_capacity(expected as usize);
    file.take(expected).read_to_end(&mut data)?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory, removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "tf-spill-unit-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&p);
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const SALT: BlockHash = [5; 32];

    fn hash(i: u8) -> BlockHash {
        let mut h = [0u8; 32];
        h[0] = i;
        h[31] = 0xAB;
        h
    }

    /// 256 bytes: 64 f32 values, a NaN payload and -0 among them.
    fn block(i: u8) -> Vec<u8> {
        let mut d: Vec<f32> = (0..64).map(|j| i as f32 * 1000.0 + j as f32).collect();
        d[0] = f32::from_bits(0x7FC0_0000 | i as u32);
        d[1] = -0.0;
        d.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
    }

    fn bits(d: &[u8]) -> Vec<u8> {
        d.to_vec()
    }

    const SIZE: u64 = (HEADER_BYTES + 64 * 4 + CHECKSUM_BYTES) as u64;

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn names_parse_only_when_well_formed() {
        let h = hash(7);
        let name = format!("{}.kvb", hex(&h));
        assert_eq!(parse_name(&name), Some(h));
        assert_eq!(
            parse_name(&name.to_uppercase().replace(".KVB", ".kvb")),
            None
        );
        assert_eq!(parse_name(&name[1..]), None);
        assert_eq!(parse_name(&format!("{}.kvc", hex(&h))), None);
        assert_eq!(parse_name(&format!("{}g.kvb", &hex(&h)[..63])), None);
        assert!(is_tmp_name(&format!("{name}.tmp-123-4")));
        assert!(!is_tmp_name(&format!("{name}.tmp-")));
        assert!(!is_tmp_name(&format!("{name}.tmp-12x")));
        assert!(!is_tmp_name("notes.txt.tmp-1"));
    }

    #[test]
    fn blocks_round_trip_bit_for_bit_and_survive_a_reopen() {
        let d = TempDir::new("roundtrip");
        let mut s = SpillStore::open(&d.0, 1 << 20, SALT).unwrap();
        assert!(s.put(&hash(1), &block(1)));
        assert!(s.put(&hash(2), &block(2)));
        assert!(
            s.put(&hash(2), &block(9)),
            "a held block is kept, not rewritten"
        );
        assert_eq!(bits(&s.get(&hash(1)).unwrap()), bits(&block(1)));
        assert_eq!(bits(&s.get(&hash(2)).unwrap()), bits(&block(2)));
        assert_eq!(s.get(&hash(3)), None);
        let st = s.stats();
        assert_eq!((st.writes, st.reads, st.failures), (2, 2, 0));
        assert_eq!((st.bytes, st.files), (2 * SIZE, 2));
        assert_eq!(fs::metadata(s.path_of(&hash(1))).unwrap().len(), SIZE);
        // A stale temporary file is removed; other files are left alone and not counted.
        let tmp = d.0.join(format!("{}.kvb.tmp-999-0", hex(&hash(4))));
        fs::write(&tmp, b"partial").unwrap();
        fs::write(d.0.join("README"), b"mine").unwrap();
        drop(s);
        let mut s = SpillStore::open(&d.0, 1 << 20, SALT).unwrap();
        assert!(!tmp.exists());
        assert!(d.0.join("README").exists());
        assert_eq!(s.len(), 2);
        assert_eq!(s.stats().bytes, 2 * SIZE);
        assert_eq!(bits(&s.get(&hash(2)).unwrap()), bits(&block(2)));
        assert_eq!(s.stats().failures, 0);
    }

    /// The spill directory removed under a running store: the blocks it held are forgotten (the
    /// byte gauge says what is on disk), the directory is made again and new blocks go there.
    #[test]
    fn a_removed_directory_is_forgotten_and_made_again() {
        let d = TempDir::new("removed");
        let mut s = SpillStore::open(&d.0, 1 << 20, SALT).unwrap();
        assert!(s.put(&hash(1), &block(1)) && s.put(&hash(2), &block(2)));
        assert_eq!(s.stats().bytes, 2 * SIZE);
        fs::remove_dir_all(&d.0).unwrap();
        // A read of a block that went with the directory is a miss, and the store knows it.
        assert_eq!(s.get(&hash(1)), None);
        assert_eq!((s.stats().bytes, s.stats().files, s.len()), (0, 0, 0));
        assert!(d.0.is_dir());
        fs::remove_dir_all(&d.0).unwrap();
        // A write finds the directory gone: forgotten, made again, written.
        assert!(s.put(&hash(3), &block(3)));
        assert_eq!((s.stats().bytes, s.stats().files), (SIZE, 1));
        assert_eq!(bits(&s.get(&hash(3)).unwrap()), bits(&block(3)));
        assert_eq!(files(&d.0).len(), 1);
    }

    /// A FIFO, a symbolic link or a huge file put where a block file was is refused at once
    /// (never read, never waited on), deleted and counted; the store goes on.
    #[cfg(unix)]
    #[test]
    fn planted_files_are_refused_without_blocking() {
        let d = TempDir::new("planted");
        let mut s = SpillStore::open(&d.0, 1 << 20, SALT).unwrap();
        for (i, what) in ["fifo", "symlink", "huge"].into_iter().enumerate() {
            let h = hash(10 + i as u8);
            assert!(s.put(&h, &block(1)));
            let path = s.path_of(&h);
            fs::remove_file(&path).unwrap();
            match what {
                "fifo" => {
                    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
                    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
                }
                "symlink" => {
                    let target = d.0.join("elsewhere");
                    fs::write(&target, encode(&SALT, &h, &block(1))).unwrap();
                    std::os::unix::fs::symlink(&target, &path).unwrap();
                }
                _ => {
                    let f = fs::File::create(&path).unwrap();
                    f.set_len(1 << 40).unwrap();
                }
            }
            assert_eq!(s.get(&h), None, "{what}");
            assert!(!s.contains(&h), "{what}: forgotten");
        }
        assert_eq!(s.stats().failures, 3);
        assert!(s.put(&hash(20), &block(2)));
        assert_eq!(bits(&s.get(&hash(20)).unwrap()), bits(&block(2)));
    }

    #[test]
    fn every_damaged_field_is_caught_and_the_file_deleted() {
        let good = encode(&SALT, &hash(1), &block(1));
        assert_eq!(
            bits(&decode(&SALT, &hash(1), &good).unwrap()),
            bits(&block(1))
        );
        let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
        // One flipped bit anywhere: magic, version, reserved, salt, hash, length, payload, sum.
        for at in [0, 9, 13, 20, 60, 81, HEADER_BYTES + 5, good.len() - 1] {
            let mut b = good.clone();
            b[at] ^= 0x10;
            cases.push(("flipped bit", b));
        }
        cases.push(("truncated", good[..good.len() - 7].to_vec()));
        cases.push(("header only", good[..HEADER_BYTES].to_vec()));
        cases.push(("empty", Vec::new()));
        let mut longer = good.clone();
        longer.extend_from_slice(&[0; 4]);
        cases.push(("longer", longer));
        // Well-formed and checksummed, but for another salt or another block.
        cases.push(("other salt", encode(&[6; 32], &hash(1), &block(1))));
        cases.push(("other hash", encode(&SALT, &hash(2), &block(1))));
        for (what, bytes) in cases {
            assert!(decode(&SALT, &hash(1), &bytes).is_err(), "{what}");
            let d = TempDir::new("damaged");
            let mut s = SpillStore::open(&d.0, 1 << 20, SALT).unwrap();
            assert!(s.put(&hash(1), &block(1)));
            fs::write(s.path_of(&hash(1)), &bytes).unwrap();
            assert_eq!(s.get(&hash(1)), None, "{what}");
            assert_eq!(s.stats().failures, 1, "{what}");
            assert!(
                !s.path_of(&hash(1)).exists(),
                "{what}: the bad file is gone"
            );
            assert_eq!((s.stats().bytes, s.stats().files), (0, 0), "{what}");
            assert_eq!(s.get(&hash(1)), None);
            assert_eq!(s.stats().failures, 1, "{what}: counted once");
        }
        // A file deleted behind the store's back.
        let d = TempDir::new("missing");
        let mut s = SpillStore::open(&d.0, 1 << 20, SALT).unwrap();
        assert!(s.put(&hash(1), &block(1)));
        fs::remove_file(s.path_of(&hash(1))).unwrap();
        assert_eq!(s.get(&hash(1)), None);
        assert_eq!(s.stats().failures, 1);
    }

    #[test]
    fn open_drops_files_whose_header_or_length_is_wrong() {
        let d = TempDir::new("scan");
        let mut s = SpillStore::open(&d.0, 1 << 20, SALT).unwrap();
        for i in 1..=4 {
            assert!(s.put(&hash(i), &block(i)));
        }
        drop(s);
        let path = |i: u8| d.0.join(format!("{}.kvb", hex(&hash(i))));
        let good = fs::read(path(1)).unwrap();
        fs::write(path(2), &good[..good.len() - 1]).unwrap(); // truncated
        fs::write(path(3), &good).unwrap(); // the header names block 1
        fs::write(path(4), b"TFKV").unwrap(); // not even a header
        let mut s = SpillStore::open(&d.0, 1 << 20, SALT).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s.stats().failures, 3);
        assert_eq!(files(&d.0), vec![format!("{}.kvb", hex(&hash(1)))]);
        assert_eq!(bits(&s.get(&hash(1)).unwrap()), bits(&block(1)));
    }

    #[test]
    fn another_salt_sees_nothing_and_deletes_nothing() {
        let d = TempDir::new("salt");
        let mut s = SpillStore::open(&d.0, 1 << 20, SALT).unwrap();
        assert!(s.put(&hash(1), &block(1)));
        drop(s);
        let mut other = SpillStore::open(&d.0, 1 << 20, [6; 32]).unwrap();
        assert!(other.is_empty());
        assert_eq!(other.get(&hash(1)), None);
        assert_eq!(other.stats(), SpillStats::default());
        drop(other);
        let mut s = SpillStore::open(&d.0, 1 << 20, SALT).unwrap();
        assert_eq!(bits(&s.get(&hash(1)).unwrap()), bits(&block(1)));
    }

    #[test]
    fn the_budget_evicts_the_least_recently_used() {
        let d = TempDir::new("budget");
        let mut s = SpillStore::open(&d.0, 3 * SIZE, SALT).unwrap();
        for i in 1..=3 {
            assert!(s.put(&hash(i), &block(i)));
        }
        assert!(s.get(&hash(1)).is_some()); // 2 is now the oldest
        assert!(s.put(&hash(4), &block(4)));
        assert!(!s.contains(&hash(2)) && !s.path_of(&hash(2)).exists());
        assert!(s.contains(&hash(1)) && s.contains(&hash(3)) && s.contains(&hash(4)));
        assert_eq!(s.stats().evictions, 1);
        assert_eq!(s.stats().bytes, 3 * SIZE);
        let on_disk: u64 = files(&d.0)
            .iter()
            .map(|f| fs::metadata(d.0.join(f)).unwrap().len())
            .sum();
        assert_eq!(on_disk, 3 * SIZE);
        // A block larger than the whole budget is not written (and evicts nothing).
        let big = vec![0u8; 4 * 64 * 4];
        assert!(!s.put(&hash(9), &big));
        assert_eq!(s.len(), 3);
        // A smaller budget at reopen evicts the least recently modified files.
        drop(s);
        let old = SystemTime::now() - std::time::Duration::from_secs(3600);
        for (i, age) in [(1u8, 3), (3, 1), (4, 2)] {
            let f = fs::File::options()
                .write(true)
                .open(d.0.join(format!("{}.kvb", hex(&hash(i)))))
                .unwrap();
            f.set_modified(old - std::time::Duration::from_secs(age * 60))
                .unwrap();
        }
        let s = SpillStore::open(&d.0, 2 * SIZE, SALT).unwrap();
        assert_eq!(s.stats().evictions, 1);
        assert!(!s.contains(&hash(1)), "the oldest file went first");
        assert!(s.contains(&hash(3)) && s.contains(&hash(4)));
    }
}
