//! Shared by the engine tests over real forward passes: tiny synthetic GGUF models, engines over
//! them, requests, and runs checked against their receipts.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
pub use tf_core::SplitMix64;
use tf_core::{DType, SeqId, TokenId};
use tf_engine::cost::CostModel;
use tf_engine::proposer::{DraftModel, Proposer};
use tf_engine::runner::Row;
#[allow(unused_imports)]
pub use tf_engine::SourceId;
use tf_engine::{
    Engine, EngineConfig, EngineError, Event, ModelRunner, Receipt, Request, Runner, SamplingParams,
};
use tf_kernels::kv::KvFormat;
use tf_kernels::ThreadPool;
use tf_models::synth::{synth_gguf, SynthSpec};
use tf_models::Model;
use tf_weights::GgufFile;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// Vocabulary of every tiny model (`SynthSpec::tiny`).
pub const VOCAB: usize = 384;
/// The tiny models' context.
pub const CONTEXT: usize = 512;
/// Room for 16 sequences of up to 256 slots each.
pub const KV_POSITIONS: usize = 16 * 256;
/// Stop tokens of every request (prompts never hold them): some replies end early.
pub const STOP: [TokenId; 6] = [0, 1, 2, 3, 4, 5];
/// `centring` of the targets (see [`centre`]): zero-mean weights, replies sensitive to the context.
pub const CENTRED: f32 = 1.0;
/// `centring` of the targets of the copies test: replies that repeat themselves now and then.
pub const REPETITIVE: f32 = 0.95;

/// A tiny model of `arch` with matrices of `dtype` (Q4_K files keep `ffn_down` and the output
/// head in Q6_K, as Q4_K_M does, so both 8-row kernels run). The same `seed` and `dtype` with
/// fewer layers gives the first layers of the same model: a draft model that agrees with its
/// target often, not always.
pub fn tiny(
    arch: &'static str,
    dtype: DType,
    seed: u64,
    n_layers: usize,
    centring: f32,
) -> Arc<Model> {
    let mut spec = SynthSpec::tiny(arch, dtype);
    spec.seed = seed;
    spec.n_layers = n_layers;
    if dtype == DType::Q4K {
        spec.down_dtype = DType::Q6K;
        spec.output_dtype = Some(DType::Q6K);
    }
    assert_eq!(spec.vocab, VOCAB);
    assert!(spec.context_len >= CONTEXT);
    let mut bytes = synth_gguf(&spec).to_bytes();
    centre(&mut bytes, seed, centring);
    let gguf = GgufFile::from_bytes(bytes, "tiny.gguf").unwrap();
    Arc::new(Model::from_gguf(gguf).unwrap())
}

/// Makes the Q4_K and Q4_1 weights of a synthetic GGUF zero-mean (`centring` 1) or nearly so.
/// `random_blocks` gives them positive scales and mins, hence weights with a large common offset:
/// every hidden state then points the same way and greedy decoding repeats one token whatever the
/// context, which would leave a wrong key or value unnoticed. With `w = d*(sc*q - m)` and uniform
/// 4-bit codes q, `m = 7.5*sc` centres the weights. A slight offset left in (`centring` 0.95)
/// makes replies that depend on the context yet fall into repeats now and then (so copies hit).
pub fn centre(bytes: &mut [u8], seed: u64, centring: f32) {
    let gguf = GgufFile::from_bytes(bytes.to_vec(), "tiny.gguf").unwrap();
    let mut rng = SplitMix64::new(seed ^ 0xC3A5_C85C_97CB_3127);
    for t in gguf.tensors() {
        let data = &mut bytes[t.offset..t.offset + t.n_bytes];
        match t.dtype {
            DType::Q4K => {
                for b in data.chunks_exact_mut(144) {
                    let d = f16_bits(1e-3 + 3e-3 * rng.next_f32());
                    b[0..2].copy_from_slice(&d.to_le_bytes());
                    b[2..4].copy_from_slice(&d.to_le_bytes());
                    let sc: Vec<u8> = (0..8).map(|_| 1 + rng.below(8) as u8).collect();
                    let m: Vec<u8> = sc
                        .iter()
                        .map(|&s| (s as f32 * 7.5 * centring).round() as u8)
                        .collect();
                    // The 6-bit scale and min packing of Q4_K (inverse of `get_scale_min_k4`).
                    let q = &mut b[4..16];
                    for j in 0..4 {
                        q[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
                        q[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
                        q[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
                    }
                }
            }
            DType::Q4_1 => {
                for b in data.chunks_exact_mut(20) {
                    let d = 1e-2 + 3e-2 * rng.next_f32();
                    b[0..2].copy_from_slice(&f16_bits(d).to_le_bytes());
                    b[2..4].copy_from_slice(&f16_bits(-7.5 * d * centring).to_le_bytes());
                }
            }
            _ => {}
        }
    }
}

/// f16 bits of `v` (truncated; `v` must lie in the normal f16 range).
pub fn f16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    let exp = ((bits >> 23) & 0xFF) as i32 - 127 + 15;
    assert!((1..31).contains(&exp), "{v} is not a normal f16");
    ((bits >> 16) & 0x8000) as u16 | ((exp as u16) << 10) | ((bits >> 13) & 0x3FF) as u16
}

/// A target and its draft model (same vocabulary).
pub struct Pair {
    pub name: String,
    pub target: Arc<Model>,
    pub draft: Arc<Model>,
}

/// (arch, target type, draft type): a draft of the target's type is the target's first layer
/// (agrees often); one of another type is another random model (almost never agrees).
pub const CELLS: [(&str, DType, DType); 4] = [
    ("llama", DType::Q4K, DType::Q4K),
    ("qwen2", DType::Q8_0, DType::Q4_1),
    ("qwen3", DType::Q4_1, DType::Q4_1),
    ("qwen2", DType::Q4K, DType::Q8_0),
];

pub fn pairs(centring: f32) -> Vec<Pair> {
    CELLS
        .iter()
        .enumerate()
        .map(|(i, &(arch, t, d))| {
            let seed = 10 + i as u64;
            let draft_seed = if d == t { seed } else { 100 + seed };
            Pair {
                name: format!("{arch} {t:?} (draft {d:?})"),
                target: tiny(arch, t, seed, 2, centring),
                draft: tiny(arch, d, draft_seed, 1, centring),
            }
        })
        .collect()
}

/// An engine and the number of KV blocks it started with.
pub struct Bench {
    pub engine: Engine,
    pub blocks: usize,
}

thread_local! {
    /// The KV format of the targets that [`bench_with`] builds on this thread (each test runs
    /// on its own thread).
    static KV: std::cell::Cell<KvFormat> = std::cell::Cell::new(KvFormat::default());
}

/// Runs `f` with every engine this thread builds storing its target's keys and values in
/// `format`.
pub fn with_kv_format<T>(format: KvFormat, f: impl FnOnce() -> T) -> T {
    let before = KV.with(|k| k.replace(format));
    let out = f();
    KV.with(|k| k.set(before));
    out
}

/// An engine over `target` (KV for `kv_positions` positions, a pool of `threads` threads), with
/// `draft` as its draft model.
pub fn bench(
    target: &Arc<Model>,
    draft: Option<&Arc<Model>>,
    threads: usize,
    config: EngineConfig,
    kv_positions: usize,
) -> Bench {
    bench_with(target, threads, config, kv_positions, |pool, blocks| {
        draft.map(|d| Box::new(DraftModel::new(d.clone(), pool, blocks)) as Box<dyn Proposer>)
    })
}

/// Like [`bench`], with the draft model made by `draft(pool, kv_blocks)`. Engines that size their
/// windows by cost (`min_drafts` 0) are calibrated first: `CostModel::flat` only stays flat for
/// the row counts never observed, so after a few one-row steps every window looks thousands of
/// times dearer than it is and nothing is drafted. (Calibration also leaves its keys and values
/// in blocks that requests get later.)
pub fn bench_with(
    target: &Arc<Model>,
    threads: usize,
    config: EngineConfig,
    kv_positions: usize,
    draft: impl FnOnce(Arc<ThreadPool>, usize) -> Option<Box<dyn Proposer>>,
) -> Bench {
    let pool = Arc::new(ThreadPool::new(threads));
    let format = KV.with(|k| k.get());
    let runner =
        ModelRunner::with_format(target.clone(), pool.clone(), kv_positions, CONTEXT, format);
    let blocks = runner.kv_blocks();
    let calibrate = config.drafts && config.min_drafts == 0;
    let mut engine = Engine::new(Box::new(runner), config, CostModel::flat());
    if let Some(d) = draft(pool, blocks) {
        engine.add_draft_model(d);
    }
    if calibrate {
        engine.calibrate().unwrap();
    }
    assert_eq!(engine.free_blocks(), blocks);
    Bench { engine, blocks }
}

pub fn serial_config() -> EngineConfig {
    EngineConfig {
        drafts: false,
        ..EngineConfig::default()
    }
}

pub fn drafting(min_drafts: usize) -> EngineConfig {
    EngineConfig {
        min_drafts,
        ..EngineConfig::default()
    }
}

/// A prompt with repeated stretches (a motif every 16 tokens), so that copies find matches.
pub fn prompt(seed: u64, len: usize) -> Vec<TokenId> {
    let mut r = SplitMix64::new(seed);
    let mut token = || 6 + r.below(VOCAB - 6) as TokenId;
    let motif: Vec<TokenId> = (0..8).map(|_| token()).collect();
    (0..len)
        .map(|i| if i % 16 < 8 { motif[i % 8] } else { token() })
        .collect()
}

pub fn request(seed: u64, sampled: bool, prompt_len: usize, max_tokens: usize) -> Request {
    let mut req = Request::new(prompt(seed, prompt_len), max_tokens);
    req.stop_tokens = STOP.to_vec();
    if sampled {
        req.params = SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            seed: Some(seed * 31 + 7),
            ..SamplingParams::greedy()
        };
    }
    req
}

#[derive(Clone)]
pub struct Run {
    pub id: SeqId,
    pub tokens: Vec<TokenId>,
    /// One per token where the request asked for log-probabilities.
    pub logprobs: Vec<tf_engine::TokenLogprob>,
    /// One per prompt token after the first where the request asked for them.
    pub prompt_logprobs: Vec<tf_engine::TokenLogprob>,
    pub receipt: Receipt,
}

/// Runs `reqs` (each submitted before the step of its index) to completion; checks the events
/// against the receipts and that every KV block came back.
pub fn run_all(b: &mut Bench, reqs: Vec<(usize, Request)>) -> Vec<Run> {
    let e = &mut b.engine;
    let mut pending: Vec<(usize, usize, Request)> = reqs
        .into_iter()
        .enumerate()
        .map(|(i, (at, r))| (at, i, r))
        .collect();
    pending.sort_by_key(|p| p.0);
    let n = pending.len();
    let mut rxs: HashMap<usize, (SeqId, UnboundedReceiver<Event>)> = HashMap::new();
    let mut acc: HashMap<usize, Vec<TokenId>> = HashMap::new();
    let mut lps: HashMap<usize, Vec<tf_engine::TokenLogprob>> = HashMap::new();
    let mut prompt_lps: HashMap<usize, Vec<tf_engine::TokenLogprob>> = HashMap::new();
    let mut done: HashMap<usize, Run> = HashMap::new();
    let mut step = 0;
    while done.len() < n {
        while pending.first().is_some_and(|p| p.0 <= step) {
            let (_, i, r) = pending.remove(0);
            let (tx, rx) = unbounded_channel();
            let id = e.submit(r, tx).unwrap();
            rxs.insert(i, (id, rx));
        }
        e.step().unwrap();
        step += 1;
        for (i, (id, rx)) in rxs.iter_mut() {
            while let Ok(ev) = rx.try_recv() {
                match ev {
                    Event::Tokens(t) => {
                        let tokens = acc.entry(*i).or_default();
                        tokens.extend(t);
                        let got = lps.get(i).map_or(0, Vec::len);
                        assert!(
                            got == 0 || got == tokens.len(),
                            "one log-probability a token"
                        );
                    }
                    Event::Logprobs(l) => lps.entry(*i).or_default().extend(l),
                    Event::PromptLogprobs(l) => prompt_lps.entry(*i).or_default().extend(l),
                    Event::Error(err) => panic!("engine error: {err}"),
                    Event::Done(receipt) => {
                        let tokens = acc.remove(i).unwrap_or_default();
                        let run = Run {
                            id: *id,
                            tokens,
                            logprobs: lps.remove(i).unwrap_or_default(),
                            prompt_logprobs: prompt_lps.remove(i).unwrap_or_default(),
                            receipt,
                        };
                        assert!(done.insert(*i, run).is_none());
                    }
                }
            }
        }
        assert!(step < 100_000, "engine made no progress");
    }
    assert!(e.is_idle());
    assert_eq!(e.free_blocks(), b.blocks, "KV blocks leaked");
    let runs: Vec<Run> = (0..n).map(|i| done.remove(&i).unwrap()).collect();
    for r in &runs {
        assert_eq!(tf_engine::token_sha(&r.tokens), r.receipt.token_sha);
        assert_eq!(r.tokens.len(), r.receipt.completion_tokens);
    }
    runs
}

/// One request alone on a fresh engine with a two-thread pool.
pub fn solo(
    target: &Arc<Model>,
    draft: Option<&Arc<Model>>,
    config: EngineConfig,
    req: &Request,
) -> Run {
    let mut b = bench(target, draft, 2, config, KV_POSITIONS);
    run_all(&mut b, vec![(0, req.clone())]).pop().unwrap()
}

/// The serial reference, on a one-thread pool (the other runs use two: the thread count must not
/// change a bit either).
pub fn serial(target: &Arc<Model>, req: &Request) -> Run {
    let mut b = bench(target, None, 1, serial_config(), KV_POSITIONS);
    let run = run_all(&mut b, vec![(0, req.clone())]).pop().unwrap();
    if run.receipt.rounds > 0 {
        assert_eq!(
            run.receipt.min_rows, 1,
            "serial runs verify one row a round"
        );
    }
    assert_eq!(run.receipt.drafted, 0);
    run
}

pub fn assert_same(got: &Run, want: &Run, what: &str) {
    assert_eq!(got.tokens, want.tokens, "{what}: tokens differ");
    assert_eq!(got.receipt.token_sha, want.receipt.token_sha, "{what}");
    assert_eq!(got.receipt.finish, want.receipt.finish, "{what}: finish");
}

/// Forced drafts widen every decode round to 2+ rows. (`rounds` is 0 only when the token drawn
/// at the end of the prefill already ended the reply.)
pub fn assert_forced(run: &Run, min_drafts: usize, what: &str) {
    if min_drafts > 0 && run.receipt.rounds > 0 {
        assert!(
            run.receipt.min_rows >= 2,
            "{what}: min_drafts {min_drafts} but a round verified {} row(s)",
            run.receipt.min_rows
        );
    }
}

/// (drafted, accepted) of the sources whose name starts with `prefix`.
pub fn source(r: &Receipt, prefix: &str) -> (usize, usize) {
    r.sources
        .iter()
        .filter(|s| s.name().starts_with(prefix))
        .fold((0, 0), |(d, a), s| (d + s.drafted, a + s.accepted))
}

/// A runner that counts the rows it runs, and keeps its largest forward's rows.
pub struct Counting {
    inner: ModelRunner,
    rows: Arc<AtomicUsize>,
    largest: Arc<AtomicUsize>,
}

impl Runner for Counting {
    fn vocab(&self) -> usize {
        self.inner.vocab()
    }
    fn kv_blocks(&self) -> usize {
        self.inner.kv_blocks()
    }
    fn context_len(&self) -> usize {
        self.inner.context_len()
    }
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<f32>, EngineError> {
        self.rows.fetch_add(rows.len(), Ordering::Relaxed);
        self.largest.fetch_max(rows.len(), Ordering::Relaxed);
        self.inner.forward(rows)
    }
    fn copy_slots(&mut self, seq: u64, table: &[tf_core::BlockId], moves: &[(usize, usize)]) {
        self.inner.copy_slots(seq, table, moves)
    }
    fn release(&mut self, seq: u64) {
        self.inner.release(seq)
    }
    fn resumable(&self, b: tf_core::BlockId) -> bool {
        self.inner.resumable(b)
    }
    fn recurrent(&self) -> bool {
        self.inner.recurrent()
    }
    fn keep_hidden(&mut self, on: bool) -> bool {
        self.inner.keep_hidden(on)
    }
    fn hidden(&self) -> &[f32] {
        self.inner.hidden()
    }
}

/// A draft model (`model` itself) whose runner counts its rows into `rows`.
pub fn counted_draft(
    model: &Arc<Model>,
    pool: Arc<ThreadPool>,
    blocks: usize,
    rows: &Arc<AtomicUsize>,
) -> DraftModel {
    counted_draft_largest(model, pool, blocks, rows, &Arc::new(AtomicUsize::new(0)))
}

/// Like [`counted_draft`], also keeping its largest forward's rows in `largest`.
pub fn counted_draft_largest(
    model: &Arc<Model>,
    pool: Arc<ThreadPool>,
    blocks: usize,
    rows: &Arc<AtomicUsize>,
    largest: &Arc<AtomicUsize>,
) -> DraftModel {
    let inner = ModelRunner::new(
        model.clone(),
        pool,
        blocks * tf_kernels::kv::BLOCK_SIZE,
        CONTEXT,
    );
    DraftModel::with_runner(Box::new(Counting {
        inner,
        rows: rows.clone(),
        largest: largest.clone(),
    }))
}

/// A sequence as a proposer sees it: `tokens` with the last one the prompt's end, seed 5.
pub fn seq_view<'a>(
    id: u64,
    tokens: &'a [TokenId],
    table: &'a [u32],
    hashes: &'a [tf_engine::blocks::BlockHash],
    params: &'a SamplingParams,
) -> tf_engine::proposer::SeqView<'a> {
    tf_engine::proposer::SeqView {
        id,
        tokens,
        prompt_len: tokens.len() - 1,
        params,
        seed: 5,
        table,
        hashes,
    }
}
