//! The prefix cache's disk tier over real forward passes (tiny synthetic GGUF models): blocks
//! evicted from a small RAM cache come back from disk, in the same engine or in a restarted one,
//! and every reply equals the same request served fresh; damaged files are caught, deleted and
//! recomputed; the disk budget holds; a store of another salt sees nothing.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tf_core::TokenId;
use tf_engine::blocks::{chain_hashes, BlockHash};
use tf_engine::spill::{CHECKSUM_BYTES, HEADER_BYTES};
use tf_engine::{EngineConfig, EngineHandle, Event, Request, SpillStats, SpillStore};
use tf_kernels::kv::BLOCK_SIZE;
use tf_models::Model;

/// A fresh directory under the system's temporary directory, removed on drop (also when a test
/// fails).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "tf-spill-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }

    /// A copy of this directory's files in a new one.
    fn copy(&self, tag: &str) -> TempDir {
        let d = TempDir::new(tag);
        std::fs::create_dir_all(&d.0).unwrap();
        for f in files(&self.0) {
            std::fs::copy(self.0.join(&f), d.0.join(&f)).unwrap();
        }
        d
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const BIG: u64 = 1 << 30;

/// Bytes of one block file of the tiny models: 2 layers × (keys, values) × 16 positions × a
/// kv_dim of 128 bf16 values, plus header and checksum.
const FILE_BYTES: u64 = (HEADER_BYTES + 2 * 2 * BLOCK_SIZE * 128 * 2 + CHECKSUM_BYTES) as u64;

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn dir_bytes(dir: &Path) -> u64 {
    files(dir)
        .iter()
        .map(|f| std::fs::metadata(dir.join(f)).unwrap().len())
        .sum()
}

/// An engine over `target` with a disk tier in `dir` (`budget` bytes).
fn spill_bench(
    target: &Arc<Model>,
    draft: Option<&Arc<Model>>,
    config: EngineConfig,
    dir: &Path,
    budget: u64,
) -> Bench {
    let mut b = bench(target, draft, 2, config, KV_POSITIONS);
    let store = SpillStore::open(dir, budget, b.engine.salt()).unwrap();
    b.engine.set_spill(store).unwrap();
    b
}

fn spill_stats(b: &Bench) -> SpillStats {
    b.engine.spill_stats().expect("a disk tier")
}

/// The next turn of an agent-style conversation: the previous prompt, its reply, and a new
/// message of 10–60 tokens.
fn next_turn(req: &Request, reply: &[TokenId], seed: u64) -> Request {
    let mut rng = SplitMix64::new(seed);
    let mut r = req.clone();
    r.prompt = [
        req.prompt.clone(),
        reply.to_vec(),
        prompt(seed * 1000, 10 + rng.below(50)),
    ]
    .concat();
    r
}

/// Runs a conversation of up to `turns` turns on `b`, calling `after` after each.
fn conversation(
    b: &mut Bench,
    first: &Request,
    turns: usize,
    seed: u64,
    mut after: impl FnMut(&mut Bench, usize),
) -> Vec<(Request, Run)> {
    let mut out = Vec::new();
    let mut req = first.clone();
    for turn in 0..turns {
        let run = run_all(b, vec![(0, req.clone())]).pop().unwrap();
        after(b, turn);
        out.push((req.clone(), run.clone()));
        req = next_turn(&req, &run.tokens, seed * 100 + turn as u64);
        if req.prompt.len() + req.max_tokens + 16 > 500 {
            break;
        }
    }
    out
}

/// Runs an unrelated request on `b`: it takes the blocks the last turn freed (the pool hands out
/// the most recently freed first) and overwrites them, so that a block loaded from disk can
/// never happen to hold the right keys and values already.
fn scramble(b: &mut Bench, seed: u64) {
    run_all(b, vec![(0, request(seed, false, 200, 4))]);
}

/// Prompt tokens a turn must at least find cached: the previous turn's full prompt blocks (its
/// keys and values were all computed and committed).
fn floor_blocks(prev_prompt: usize) -> usize {
    prev_prompt / BLOCK_SIZE * BLOCK_SIZE
}

#[test]
fn a_conversation_over_a_tiny_ram_cache_continues_from_disk_and_stays_exact() {
    for (p, pair) in pairs(CENTRED).iter().enumerate() {
        for (mode, draft, config) in [
            ("serial", false, serial_config()),
            ("copies forced", false, drafting(3)),
            ("draft model", true, drafting(0)),
        ] {
            for sampled in [false, true] {
                let what = format!("{} {mode} sampled={sampled}", pair.name);
                let dir = TempDir::new("conversation");
                let mut b = spill_bench(
                    &pair.target,
                    draft.then_some(&pair.draft),
                    config.clone(),
                    &dir.0,
                    BIG,
                );
                b.engine.set_cache_budget(2);
                let first = request(700 + p as u64, sampled, 40, 20);
                // Disk reads after each turn; after odd turns an unrelated request takes the
                // RAM cache and the freed blocks.
                let mut reads = Vec::new();
                let turns = conversation(&mut b, &first, 12, 55 + p as u64, |b, t| {
                    assert!(b.engine.cached_blocks() <= 2);
                    reads.push(spill_stats(b).reads as usize);
                    if t % 2 == 1 {
                        scramble(b, 9000 + t as u64);
                    }
                });
                assert!(turns.len() >= 6, "{what}: too few turns");
                for (t, (req, run)) in turns.iter().enumerate() {
                    let what = format!("{what} turn {t}");
                    assert_same(run, &serial(&pair.target, req), &what);
                    let cached = run.receipt.cached_tokens;
                    if t == 0 {
                        assert_eq!(cached, 0, "{what}");
                        continue;
                    }
                    let want = floor_blocks(turns[t - 1].0.prompt.len());
                    assert!(cached >= want, "{what}: {cached} cached, want {want}+");
                    if t >= 2 {
                        assert!(cached > 2 * BLOCK_SIZE, "{what}: only the RAM budget");
                    }
                    // The RAM cache holds the first two blocks of the previous turn unless the
                    // unrelated request took it; the rest came from disk.
                    let from_ram = if t % 2 == 0 { 0 } else { 2 * BLOCK_SIZE };
                    let from_disk = (reads[t] - reads[t - 1]) * BLOCK_SIZE;
                    assert_eq!(cached, from_ram + from_disk, "{what}");
                }
                let st = spill_stats(&b);
                assert!(st.writes > 0 && st.reads > 0, "{what}: {st:?}");
                assert_eq!(st.failures, 0, "{what}");
                assert_eq!(st.bytes, dir_bytes(&dir.0), "{what}");
                assert_eq!(st.files as usize, files(&dir.0).len(), "{what}");
                assert!(b.engine.cache_stats().hits >= turns.len() as u64 - 1);
            }
        }
    }
}

#[test]
fn blocks_that_grow_evicts_reach_disk_before_they_are_overwritten() {
    // A KV pool little larger than one request needs, and no cache budget: two conversations
    // take turns, each turn's `grow` takes the other conversation's cached blocks (evicting
    // them), and that turn's prefill then overwrites them.
    for (p, pair) in pairs(CENTRED).iter().enumerate() {
        let dir = TempDir::new("grow");
        let mut b = bench(&pair.target, None, 2, drafting(2), 40 * BLOCK_SIZE);
        let store = SpillStore::open(&dir.0, BIG, b.engine.salt()).unwrap();
        b.engine.set_spill(store).unwrap();
        let mut reqs = [
            request(1100 + p as u64, true, 40, 20),
            request(1150 + p as u64, false, 60, 20),
        ];
        let mut prev = [0usize; 2];
        let mut turns = 0;
        while reqs
            .iter()
            .all(|r| r.prompt.len() + r.max_tokens + 16 <= 500)
        {
            for (c, req) in reqs.iter_mut().enumerate() {
                let what = format!("{} conversation {c} turn {turns}", pair.name);
                let run = run_all(&mut b, vec![(0, req.clone())]).pop().unwrap();
                assert_same(&run, &serial(&pair.target, req), &what);
                assert!(run.receipt.cached_tokens >= prev[c], "{what}");
                prev[c] = floor_blocks(req.prompt.len());
                *req = next_turn(req, &run.tokens, (p * 100 + c * 10 + turns) as u64);
            }
            turns += 1;
        }
        assert!(turns >= 4, "{}: {turns} turns", pair.name);
        let st = spill_stats(&b);
        let evictions = b.engine.cache_stats().evictions;
        assert!(evictions > 0, "{}: no eviction", pair.name);
        // Each eviction is written unless the block is on disk already (loaded from there).
        assert!(
            st.writes > 0 && st.writes <= evictions,
            "{}: {st:?}",
            pair.name
        );
        assert!(st.reads > 0, "{}: {st:?}", pair.name);
    }
}

#[test]
fn with_no_ram_budget_blocks_live_on_disk_only() {
    let pair = &pairs(CENTRED)[2];
    let dir = TempDir::new("disk-only");
    let mut b = spill_bench(&pair.target, None, drafting(2), &dir.0, BIG);
    b.engine.set_cache_budget(0);
    let first = request(811, true, 50, 16);
    let turns = conversation(&mut b, &first, 6, 3, |b, t| {
        assert_eq!(b.engine.cached_blocks(), 0);
        scramble(b, 9100 + t as u64);
    });
    assert!(turns.len() >= 4);
    for (t, (req, run)) in turns.iter().enumerate().skip(1) {
        assert_same(run, &serial(&pair.target, req), &format!("turn {t}"));
        let want = floor_blocks(turns[t - 1].0.prompt.len());
        assert!(run.receipt.cached_tokens >= want, "turn {t}");
    }
    // Nothing stays in RAM: every cached block came from disk (the scrambling requests share
    // no prefix with anything).
    let from_disk: usize = turns.iter().map(|t| t.1.receipt.cached_tokens).sum();
    assert_eq!(spill_stats(&b).reads as usize * BLOCK_SIZE, from_disk);
}

/// Turn 1 on an engine with a disk tier in `dir`, its cache then written out; the request of
/// turn 2, and the chain hashes of turn 2's reusable prompt blocks.
fn first_turn_on_disk(
    target: &Arc<Model>,
    first: &Request,
    dir: &Path,
) -> (Request, Vec<BlockHash>) {
    let mut a = spill_bench(target, None, drafting(2), dir, BIG);
    let run = run_all(&mut a, vec![(0, first.clone())]).pop().unwrap();
    assert_eq!(spill_stats(&a).writes, 0, "nothing evicted yet");
    let written = a.engine.spill_all();
    let full = (first.prompt.len() + run.tokens.len()) / BLOCK_SIZE;
    assert!(
        written >= first.prompt.len() / BLOCK_SIZE,
        "{written} written"
    );
    assert!(written <= full);
    assert_eq!(a.engine.spill_all(), 0, "everything is on disk already");
    assert_eq!(files(dir).len(), written);
    let second = next_turn(first, &run.tokens, 4242);
    let reusable = (second.prompt.len() - 1) / BLOCK_SIZE;
    let hashes = chain_hashes(&a.engine.salt(), &[], &second.prompt, reusable);
    (second, hashes)
}

#[test]
fn a_restarted_engine_finds_its_blocks_on_disk() {
    for (p, pair) in pairs(CENTRED).iter().enumerate() {
        let dir = TempDir::new("restart");
        let first = request(1200 + p as u64, p % 2 == 0, 70, 24);
        let (second, _) = first_turn_on_disk(&pair.target, &first, &dir.0);
        let mut b = spill_bench(&pair.target, None, serial_config(), &dir.0, BIG);
        let held = b.engine.spill().unwrap().len();
        assert!(held > 0);
        let run = run_all(&mut b, vec![(0, second.clone())]).pop().unwrap();
        assert_same(&run, &serial(&pair.target, &second), &pair.name);
        let cached = run.receipt.cached_tokens;
        assert!(cached >= floor_blocks(first.prompt.len()), "{}", pair.name);
        // A fresh engine has nothing in RAM: every cached block came from disk.
        assert_eq!(spill_stats(&b).reads as usize * BLOCK_SIZE, cached);
        assert_eq!(spill_stats(&b).failures, 0);
    }
}

#[test]
fn the_engine_thread_writes_its_cache_out_when_its_handles_are_gone() {
    let pair = &pairs(CENTRED)[0];
    let dir = TempDir::new("handle");
    let first = request(1300, true, 60, 16);
    let b = spill_bench(&pair.target, None, serial_config(), &dir.0, BIG);
    let (handle, join) = EngineHandle::spawn(b.engine);
    let (_, mut events) = handle.submit(first.clone()).unwrap();
    let mut reply = Vec::new();
    loop {
        match events.blocking_recv().expect("a Done event") {
            Event::Tokens(t) => reply.extend(t),
            Event::Done(_) => break,
            Event::Logprobs(_) | Event::PromptLogprobs(_) => {}
            Event::Error(e) => panic!("{e}"),
        }
    }
    assert_eq!(handle.stats().unwrap().spill.unwrap().writes, 0);
    assert!(files(&dir.0).is_empty());
    drop(handle);
    join.join().unwrap();
    assert!(files(&dir.0).len() >= first.prompt.len() / BLOCK_SIZE);
    let second = next_turn(&first, &reply, 77);
    let mut b = spill_bench(&pair.target, None, serial_config(), &dir.0, BIG);
    let run = run_all(&mut b, vec![(0, second.clone())]).pop().unwrap();
    assert_same(&run, &serial(&pair.target, &second), "after restart");
    assert!(run.receipt.cached_tokens >= floor_blocks(first.prompt.len()));
}

fn flip_payload_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[HEADER_BYTES + 1000] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

fn truncate(path: &Path) {
    let len = std::fs::metadata(path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
}

#[test]
fn damaged_files_are_caught_deleted_and_recomputed() {
    let pair = &pairs(CENTRED)[1];
    let base = TempDir::new("damaged");
    let first = request(1400, true, 70, 20);
    let (second, hashes) = first_turn_on_disk(&pair.target, &first, &base.0);
    // Block 4 must be on disk too (case "flipped before open" needs the block after it).
    assert!(hashes.len() >= 5);
    for h in &hashes[..5] {
        let name = format!(
            "{}.kvb",
            h.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        assert!(base.0.join(name).exists());
    }
    let fresh = serial(&pair.target, &second);
    // (damage, the block damaged, damaged before the store is opened?)
    type Damage = fn(&Path);
    let cases: [(&str, Damage, usize, bool); 4] = [
        ("flipped payload byte", flip_payload_byte, 1, false),
        ("truncated", truncate, 0, false),
        ("truncated before open", truncate, 2, true),
        ("flipped before open", flip_payload_byte, 3, true),
    ];
    for (what, damage, at, before_open) in cases {
        let dir = base.copy("damaged-case");
        let store_path = |h: &BlockHash| {
            dir.0.join(format!(
                "{}.kvb",
                h.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ))
        };
        let bad = store_path(&hashes[at]);
        assert!(bad.exists(), "{what}");
        if before_open {
            damage(&bad);
        }
        let mut b = spill_bench(&pair.target, None, serial_config(), &dir.0, BIG);
        if !before_open {
            damage(&bad);
        }
        let run = run_all(&mut b, vec![(0, second.clone())]).pop().unwrap();
        assert_same(&run, &fresh, what);
        let st = spill_stats(&b);
        assert_eq!(st.failures, 1, "{what}: {st:?}");
        assert_eq!(run.receipt.cached_tokens, at * BLOCK_SIZE, "{what}");
        assert_eq!(st.reads as usize, at, "{what}");
        assert!(!bad.exists(), "{what}: the bad file is still there");
        assert!(
            store_path(&hashes[at + 1]).exists(),
            "{what}: only the bad file goes"
        );
    }
}

#[test]
fn a_wrong_block_that_passes_every_check_changes_the_reply() {
    // The exactness assertions can fail: a block file rewritten with other values (and a valid
    // checksum) is loaded, and the reply is no longer the fresh one.
    for (p, pair) in pairs(CENTRED).iter().enumerate() {
        let dir = TempDir::new("poison");
        let first = request(1500 + p as u64, true, 70, 20);
        let (second, hashes) = first_turn_on_disk(&pair.target, &first, &dir.0);
        let mut store = SpillStore::open(&dir.0, BIG, salt_of(&pair.target)).unwrap();
        let mut data = store.get(&hashes[2]).unwrap();
        // The lowest exponent bit of every bf16 value: each one doubled or halved.
        for x in data.iter_mut().skip(1).step_by(2) {
            *x ^= 0x01;
        }
        assert!(store.remove(&hashes[2]));
        assert!(store.put(&hashes[2], &data));
        drop(store);
        let mut b = spill_bench(&pair.target, None, serial_config(), &dir.0, BIG);
        let run = run_all(&mut b, vec![(0, second.clone())]).pop().unwrap();
        assert!(run.receipt.cached_tokens >= 3 * BLOCK_SIZE);
        assert_eq!(spill_stats(&b).failures, 0);
        assert_ne!(
            run.tokens,
            serial(&pair.target, &second).tokens,
            "{}: a wrong block went unnoticed",
            pair.name
        );
    }
}

/// The salt an engine over `target` uses.
fn salt_of(target: &Arc<Model>) -> BlockHash {
    bench(target, None, 1, serial_config(), 64).engine.salt()
}

#[test]
fn the_disk_budget_holds() {
    let pair = &pairs(REPETITIVE)[3];
    let dir = TempDir::new("budget");
    let budget = 6 * FILE_BYTES + FILE_BYTES / 2;
    let mut b = spill_bench(&pair.target, None, drafting(2), &dir.0, budget);
    b.engine.set_cache_budget(2);
    let first = request(1600, false, 40, 24);
    let mut peak = 0;
    let turns = conversation(&mut b, &first, 10, 9, |b, t| {
        let on_disk = dir_bytes(&dir.0);
        assert!(on_disk <= budget, "turn {t}: {on_disk} bytes on disk");
        assert_eq!(on_disk, spill_stats(b).bytes, "turn {t}");
        peak = peak.max(on_disk);
        if t > 0 {
            b.engine.spill_all();
            assert!(dir_bytes(&dir.0) <= budget, "turn {t}: after spill_all");
        }
    });
    assert!(turns.len() >= 6);
    for (t, (req, run)) in turns.iter().enumerate() {
        assert_same(run, &serial(&pair.target, req), &format!("turn {t}"));
    }
    let st = spill_stats(&b);
    assert!(st.evictions > 0, "the budget never bound: {st:?}");
    assert_eq!(peak, 6 * FILE_BYTES, "the budget was used");
    assert!(files(&dir.0).iter().all(|f| f.ends_with(".kvb")));
    // Reopening with a smaller budget trims to it.
    drop(b);
    let store = SpillStore::open(&dir.0, 2 * FILE_BYTES, salt_of(&pair.target)).unwrap();
    assert_eq!(store.len(), 2);
    assert_eq!(dir_bytes(&dir.0), 2 * FILE_BYTES);
}

#[test]
fn a_store_of_another_salt_finds_nothing() {
    let pairs = pairs(CENTRED);
    let pair = &pairs[0];
    let dir = TempDir::new("salt");
    let first = request(1700, false, 70, 16);
    let (second, hashes) = first_turn_on_disk(&pair.target, &first, &dir.0);
    let held = files(&dir.0);
    assert!(!held.is_empty());
    let salt = salt_of(&pair.target);
    let mut other_salt = salt;
    other_salt[0] ^= 1;
    let mut other = SpillStore::open(&dir.0, BIG, other_salt).unwrap();
    assert!(other.is_empty());
    assert!(hashes.iter().all(|h| other.get(h).is_none()));
    assert_eq!(other.stats(), SpillStats::default());
    // An engine refuses a store of another salt.
    let mut b = bench(&pair.target, None, 2, serial_config(), KV_POSITIONS);
    assert!(b.engine.set_spill(other).is_err());
    // Another model (another salt) on the same directory: no hit, nothing deleted.
    let stranger = &pairs[1].target;
    assert_ne!(salt_of(stranger), salt);
    let mut b = spill_bench(stranger, None, serial_config(), &dir.0, BIG);
    assert!(b.engine.spill().unwrap().is_empty());
    let run = run_all(&mut b, vec![(0, second.clone())]).pop().unwrap();
    assert_eq!(run.receipt.cached_tokens, 0);
    assert_same(&run, &serial(stranger, &second), "another model");
    assert_eq!(files(&dir.0), held);
    // The owner still finds them.
    let mut store = SpillStore::open(&dir.0, BIG, salt).unwrap();
    assert_eq!(store.len(), held.len());
    assert!(store.get(&hashes[0]).is_some());
}

/// A sliding-window model whose conversation outgrew the pool: after a restart its next turn's
/// cached prefix is on disk and larger than the whole pool, so it is prefilled instead of
/// loaded (waiting for room would never end), and the reply equals a fresh one.
#[test]
fn a_windowed_prefix_larger_than_the_pool_is_prefilled_not_awaited() {
    let mut spec = tf_models::synth::SynthSpec::tiny("phi3", tf_core::DType::Q4K);
    spec.seed = 43;
    spec.sliding_window = Some(21);
    let mut bytes = tf_models::synth::synth_gguf(&spec).to_bytes();
    centre(&mut bytes, 43, CENTRED);
    let gguf = tf_weights::GgufFile::from_bytes(bytes, "tiny.gguf").unwrap();
    let target = Arc::new(Model::from_gguf(gguf).unwrap());
    let config = EngineConfig {
        max_step_rows: 32,
        ..drafting(2)
    };
    let dir = TempDir::new("windowed");
    // 16 blocks: 256 positions.
    let mut b = bench(&target, None, 2, config.clone(), 16 * 16);
    let store = SpillStore::open(&dir.0, BIG, b.engine.salt()).unwrap();
    b.engine.set_spill(store).unwrap();
    let mut first = request(70, false, 40, 300);
    first.ignore_eos = true;
    let one = run_all(&mut b, vec![(0, first.clone())]).remove(0);
    assert!(spill_stats(&b).writes > 0, "nothing reached the disk tier");
    let mut next = first.clone();
    next.prompt.extend(&one.tokens);
    next.prompt.extend(prompt(71, 12));
    next.max_tokens = 16;
    // A restarted engine finds the whole prefix, 21 blocks, on disk only.
    b.engine.spill_all();
    drop(b);
    let mut b = bench(&target, None, 2, config.clone(), 16 * 16);
    let store = SpillStore::open(&dir.0, BIG, b.engine.salt()).unwrap();
    b.engine.set_spill(store).unwrap();
    let resumed = run_all(&mut b, vec![(0, next.clone())]).remove(0);
    let fresh = solo(&target, None, config, &next);
    assert_same(&resumed, &fresh, "the next turn");
    assert!(resumed.receipt.cached_tokens < 16 * 16);
}
