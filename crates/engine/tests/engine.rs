//! Engine exactness with a fake target whose next token depends on the whole history it can see
//! in its KV cache: drafted == serial, concurrent == solo, whatever the proposers guess, the
//! window sizes and the arrival order; cancellation frees every block.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tf_core::SplitMix64;
use tf_core::{SeqId, TokenId};
use tf_engine::cost::CostModel;
use tf_engine::fake::FakeRunner;
use tf_engine::proposer::{Copies, Proposer, SeqView};
use tf_engine::runner::Row;
use tf_engine::SourceId;
use tf_engine::{
    greedy_token, Engine, EngineConfig, EngineError, Event, NoiseKey, Pick, Receipt, Request,
    Runner, SamplingParams, Shortlist,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// The scripted proposer of these tests.
const PROPHET: SourceId = SourceId::Other("prophet");

const VOCAB: usize = 64;
const BLOCKS: usize = 512;

fn engine(config: EngineConfig) -> Engine {
    Engine::new(
        Box::new(FakeRunner::new(VOCAB, BLOCKS)),
        config,
        CostModel::flat(),
    )
}

fn serial_config() -> EngineConfig {
    EngineConfig {
        drafts: false,
        ..EngineConfig::default()
    }
}

/// A prompt with repeated stretches, so that copies find matches.
fn prompt(seed: u64, len: usize) -> Vec<TokenId> {
    let mut r = SplitMix64::new(seed);
    let motif: Vec<TokenId> = (0..8).map(|_| r.below(VOCAB) as TokenId).collect();
    (0..len)
        .map(|i| {
            if i % 16 < 8 {
                motif[i % 8]
            } else {
                r.below(VOCAB) as TokenId
            }
        })
        .collect()
}

fn request(seed: u64, sampled: bool, max_tokens: usize) -> Request {
    let mut req = Request::new(prompt(seed, 20 + (seed as usize % 30)), max_tokens);
    req.stop_tokens = vec![0];
    if sampled {
        req.params = SamplingParams {
            temperature: 0.9,
            top_k: 20,
            top_p: 0.95,
            seed: Some(seed * 7),
            ..SamplingParams::greedy()
        };
    }
    req
}

struct Run {
    tokens: Vec<TokenId>,
    receipt: Receipt,
}

fn collect(rx: &mut UnboundedReceiver<Event>) -> Option<Run> {
    let mut tokens = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        match ev {
            Event::Tokens(t) => tokens.extend(t),
            Event::Logprobs(_) | Event::PromptLogprobs(_) => {}
            Event::Error(e) => panic!("engine error: {e}"),
            Event::Done(receipt) => return Some(Run { tokens, receipt }),
        }
    }
    None
}

/// Runs `reqs` (submitted at the given steps) to completion on one engine.
fn run_all(e: &mut Engine, reqs: Vec<(usize, Request)>) -> Vec<Run> {
    let mut pending: Vec<(usize, usize, Request)> = reqs
        .into_iter()
        .enumerate()
        .map(|(i, (at, r))| (at, i, r))
        .collect();
    pending.sort_by_key(|p| p.0);
    let n = pending.len();
    let mut rxs: HashMap<usize, UnboundedReceiver<Event>> = HashMap::new();
    let mut acc: HashMap<usize, Vec<TokenId>> = HashMap::new();
    let mut done: HashMap<usize, Run> = HashMap::new();
    let mut step = 0;
    while done.len() < n {
        while pending.first().is_some_and(|p| p.0 <= step) {
            let (_, i, r) = pending.remove(0);
            let (tx, rx) = unbounded_channel();
            e.submit(r, tx).unwrap();
            rxs.insert(i, rx);
        }
        e.step().unwrap();
        step += 1;
        for (i, rx) in rxs.iter_mut() {
            while let Ok(ev) = rx.try_recv() {
                match ev {
                    Event::Tokens(t) => acc.entry(*i).or_default().extend(t),
                    Event::Logprobs(_) | Event::PromptLogprobs(_) => {}
                    Event::Error(err) => panic!("{err}"),
                    Event::Done(receipt) => {
                        let tokens = acc.remove(i).unwrap_or_default();
                        done.insert(*i, Run { tokens, receipt });
                    }
                }
            }
        }
        assert!(step < 100_000, "engine made no progress");
    }
    (0..n).map(|i| done.remove(&i).unwrap()).collect()
}

fn solo(config: EngineConfig, req: Request) -> Run {
    let mut e = engine(config);
    run_all(&mut e, vec![(0, req)]).pop().unwrap()
}

/// Like [`solo`] on a target whose next token depends on the last `context` tokens only.
fn solo_short(config: EngineConfig, req: Request, context: usize) -> Run {
    let mut fake = FakeRunner::new(VOCAB, BLOCKS);
    fake.context = context;
    let mut e = Engine::new(Box::new(fake), config, CostModel::flat());
    run_all(&mut e, vec![(0, req)]).pop().unwrap()
}

#[test]
fn drafted_equals_serial_with_copies_and_filler() {
    for sampled in [false, true] {
        for seed in 1..12u64 {
            let req = request(seed, sampled, 60);
            let serial = solo(serial_config(), req.clone());
            assert_eq!(serial.receipt.min_rows, 1);
            for min_drafts in [0usize, 1, 3, 8] {
                let cfg = EngineConfig {
                    min_drafts,
                    ..EngineConfig::default()
                };
                let drafted = solo(cfg, req.clone());
                assert_eq!(
                    drafted.tokens, serial.tokens,
                    "seed {seed} sampled {sampled} min_drafts {min_drafts}"
                );
                assert_eq!(drafted.receipt.token_sha, serial.receipt.token_sha);
                assert_eq!(drafted.receipt.finish, serial.receipt.finish);
                if min_drafts > 0 && drafted.receipt.rounds > 0 {
                    assert!(
                        drafted.receipt.min_rows >= 2,
                        "forced drafts must verify 2+ rows"
                    );
                }
            }
        }
    }
}

/// Knows the serial reply and guesses it right for `right` tokens, then wrong.
struct Prophet {
    replies: HashMap<Vec<TokenId>, Vec<TokenId>>,
    right: usize,
    rng: SplitMix64,
}

impl Proposer for Prophet {
    fn id(&self) -> SourceId {
        PROPHET
    }
    fn propose(&mut self, seq: &SeqView, max: usize) -> Vec<TokenId> {
        let (prompt, reply) = self
            .replies
            .iter()
            .find(|(p, _)| seq.tokens.starts_with(p))
            .expect("known prompt");
        let done = seq.tokens.len() - prompt.len();
        let want = 1 + self.rng.below(max.max(1));
        (0..want)
            .map(|j| {
                let truth = reply.get(done + j).copied().unwrap_or(1);
                if j < self.right {
                    truth
                } else {
                    (truth + 1 + self.rng.below(VOCAB - 1) as TokenId) % VOCAB as TokenId
                }
            })
            .collect()
    }
    fn costs_forward(&self) -> bool {
        true
    }
}

#[test]
fn proposers_right_for_k_then_wrong_never_change_a_token() {
    for sampled in [false, true] {
        let reqs: Vec<Request> = (20..26).map(|s| request(s, sampled, 50)).collect();
        let serial: Vec<Run> = reqs
            .iter()
            .map(|r| solo(serial_config(), r.clone()))
            .collect();
        let replies: HashMap<Vec<TokenId>, Vec<TokenId>> = reqs
            .iter()
            .zip(&serial)
            .map(|(r, s)| (r.prompt.clone(), s.tokens.clone()))
            .collect();
        for right in [0usize, 1, 2, 5, 16] {
            let mut e = engine(EngineConfig {
                min_drafts: 1,
                ..EngineConfig::default()
            });
            e.add_draft_model(Box::new(Prophet {
                replies: replies.clone(),
                right,
                rng: SplitMix64::new(right as u64),
            }));
            let runs = run_all(&mut e, reqs.iter().cloned().map(|r| (0, r)).collect());
            for (i, (run, want)) in runs.iter().zip(&serial).enumerate() {
                assert_eq!(
                    run.tokens, want.tokens,
                    "request {i}, right for {right}, sampled {sampled}"
                );
            }
            let accepted: usize = runs.iter().map(|r| r.receipt.accepted).sum();
            if right >= 2 {
                assert!(accepted > 0, "correct guesses must be accepted");
            }
        }
    }
}

#[test]
fn concurrent_equals_solo_in_any_arrival_order() {
    let mut rng = SplitMix64::new(99);
    for trial in 0..4 {
        let n = 1 + trial * 5; // 1, 6, 11, 16 sequences
        let reqs: Vec<Request> = (0..n)
            .map(|i| request(100 + i as u64, i % 2 == 0, 20 + (i * 7) % 40))
            .collect();
        let solos: Vec<Run> = reqs
            .iter()
            .map(|r| solo(serial_config(), r.clone()))
            .collect();
        for drafts in [false, true] {
            let mut cfg = if drafts {
                EngineConfig {
                    min_drafts: rng.below(4),
                    ..EngineConfig::default()
                }
            } else {
                serial_config()
            };
            cfg.max_step_rows = 16 + rng.below(64); // prefill in chunks while others decode
            let mut e = engine(cfg);
            let arrivals: Vec<(usize, Request)> =
                reqs.iter().cloned().map(|r| (rng.below(30), r)).collect();
            let runs = run_all(&mut e, arrivals);
            for (i, (run, want)) in runs.iter().zip(&solos).enumerate() {
                assert_eq!(
                    run.receipt.token_sha, want.receipt.token_sha,
                    "request {i} of {n}, drafts {drafts}"
                );
            }
            assert_eq!(e.free_blocks(), BLOCKS, "blocks leaked");
        }
    }
}

#[test]
fn dropping_the_stream_mid_window_frees_everything() {
    let mut e = engine(EngineConfig {
        min_drafts: 4,
        ..EngineConfig::default()
    });
    let mut rxs: Vec<(SeqId, UnboundedReceiver<Event>)> = (0..6)
        .map(|i| {
            let (tx, rx) = unbounded_channel();
            let id = e.submit(request(300 + i, i % 2 == 1, 500), tx).unwrap();
            (id, rx)
        })
        .collect();
    for _ in 0..5 {
        e.step().unwrap();
    }
    // Drop half the streams, cancel one explicitly, keep the rest.
    let cancelled = rxs[0].0;
    e.cancel(cancelled);
    rxs.retain(|(id, _)| id % 2 == 0);
    let mut guard = 0;
    while !e.is_idle() {
        e.step().unwrap();
        guard += 1;
        assert!(guard < 10_000);
    }
    for (id, rx) in rxs.iter_mut() {
        let run = collect(rx).expect("a Done event");
        if *id == cancelled {
            assert_eq!(run.receipt.finish, tf_engine::FinishReason::Cancelled);
        }
    }
    assert_eq!(e.free_blocks(), BLOCKS);
}

#[test]
fn bad_requests_are_refused_up_front() {
    let mut e = engine(EngineConfig::default());
    let (tx, _rx) = unbounded_channel();
    assert!(e.submit(Request::new(vec![], 5), tx.clone()).is_err());
    assert!(e
        .submit(Request::new(vec![VOCAB as TokenId], 5), tx.clone())
        .is_err());
    assert!(e.submit(Request::new(vec![1], 0), tx.clone()).is_err());
    let mut bad = Request::new(vec![1], 5);
    bad.params.temperature = -1.0;
    assert!(e.submit(bad, tx).is_err());
}

#[test]
fn tree_drafts_equal_serial_and_get_accepted() {
    let mut tree_hits = 0;
    for sampled in [false, true] {
        for seed in 40..52u64 {
            let req = request(seed, sampled, 80);
            let context = 1 + (seed as usize % 2);
            let serial = solo_short(serial_config(), req.clone(), context);
            for min_drafts in [1usize, 2, 4] {
                let cfg = EngineConfig {
                    min_drafts,
                    tree_branches: 3,
                    force_trees: true,
                    ..EngineConfig::default()
                };
                let run = solo_short(cfg, req.clone(), context);
                assert_eq!(
                    run.tokens, serial.tokens,
                    "seed {seed} sampled {sampled} min_drafts {min_drafts}"
                );
                tree_hits += run
                    .receipt
                    .sources
                    .iter()
                    .filter(|s| s.source == SourceId::CopiesTree)
                    .map(|s| s.accepted)
                    .sum::<usize>();
            }
        }
    }
    assert!(
        tree_hits > 0,
        "no tree branch was ever accepted: the tree path went untested"
    );
}

/// The fake target, counting the rounds that asked for greedy ids and the logits rows it
/// returned through `forward`; with `keep`, it also answers plain rounds with picks decided
/// from host shortlists of `keep` candidates (counting the rows, and those that fell back to
/// logits).
struct Counting {
    inner: FakeRunner,
    id_calls: Arc<AtomicUsize>,
    logit_rows: Arc<AtomicUsize>,
    keep: Option<usize>,
    pick_rows: Arc<AtomicUsize>,
    fallbacks: Arc<AtomicUsize>,
    /// Tree-draft rows among the rows of picked rounds.
    tree_rows: Arc<AtomicUsize>,
}

impl Counting {
    fn new(keep: Option<usize>) -> Counting {
        Counting {
            inner: FakeRunner::new(VOCAB, BLOCKS),
            id_calls: Arc::default(),
            logit_rows: Arc::default(),
            keep,
            pick_rows: Arc::default(),
            fallbacks: Arc::default(),
            tree_rows: Arc::default(),
        }
    }
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
    fn copy_slots(&mut self, seq: u64, table: &[u32], moves: &[(usize, usize)]) {
        self.inner.copy_slots(seq, table, moves)
    }
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<f32>, EngineError> {
        let wanted = rows.iter().filter(|r| r.logits).count();
        self.logit_rows.fetch_add(wanted, Ordering::Relaxed);
        self.inner.forward(rows)
    }
    fn forward_greedy(
        &mut self,
        rows: &[Row],
        _logits: &mut Vec<f32>,
        ids: &mut Vec<TokenId>,
    ) -> Result<(), EngineError> {
        self.id_calls.fetch_add(1, Ordering::Relaxed);
        let vocab = self.vocab();
        *ids = self
            .inner
            .forward(rows)?
            .chunks_exact(vocab)
            .map(greedy_token)
            .collect();
        Ok(())
    }
    fn forward_picks(
        &mut self,
        rows: &[Row],
        keys: &[NoiseKey],
        picks: &mut Vec<Pick>,
    ) -> Result<bool, EngineError> {
        let Some(keep) = self.keep else {
            return Ok(false);
        };
        let vocab = self.vocab();
        let trees = rows.iter().filter(|r| r.tree.is_some()).count();
        self.tree_rows.fetch_add(trees, Ordering::Relaxed);
        let logits = self.inner.forward(rows)?;
        assert_eq!(
            logits.len(),
            keys.len() * vocab,
            "one key per row with logits"
        );
        picks.clear();
        for (row, &key) in logits.chunks_exact(vocab).zip(keys) {
            self.pick_rows.fetch_add(1, Ordering::Relaxed);
            picks.push(match Shortlist::of_row(row, key, keep).token() {
                Some(t) => Pick::Token(key, t),
                None => {
                    self.fallbacks.fetch_add(1, Ordering::Relaxed);
                    Pick::Logits(row.to_vec())
                }
            });
        }
        Ok(true)
    }
}

/// An engine that drafts at least two guesses a window, or the serial one.
fn drafting_or_serial(drafts: bool) -> EngineConfig {
    if drafts {
        EngineConfig {
            min_drafts: 2,
            ..EngineConfig::default()
        }
    } else {
        serial_config()
    }
}

#[test]
fn greedy_rounds_take_ids_and_others_logits() {
    for drafts in [false, true] {
        let cfg = drafting_or_serial(drafts);
        for sampled in [false, true] {
            let req = request(7, sampled, 40);
            let want = solo(serial_config(), req.clone());
            let runner = Counting::new(None);
            let (id_calls, logit_rows) = (runner.id_calls.clone(), runner.logit_rows.clone());
            let mut e = Engine::new(Box::new(runner), cfg.clone(), CostModel::flat());
            let got = run_all(&mut e, vec![(0, req)]).pop().unwrap();
            assert_eq!(got.receipt.token_sha, want.receipt.token_sha);
            let (ids, rows) = (
                id_calls.load(Ordering::Relaxed),
                logit_rows.load(Ordering::Relaxed),
            );
            // Every round here has a window (the prompt fits one step): a sampled request's
            // rounds all return logits, a greedy one's all ids.
            let n = got.tokens.len();
            assert!(n > 1, "a reply of {n} tokens");
            if sampled {
                assert!(
                    ids == 0 && rows >= n,
                    "sampled: {ids} id calls, {rows} logit rows"
                );
            } else {
                assert!(
                    ids > 0 && rows == 0,
                    "greedy: {ids} id calls, {rows} logit rows"
                );
            }
        }
    }
}

/// Plain temperature requests (no truncation, no penalty) whose rounds come back as picks
/// decided from shortlists give the serial replies: with shortlists of 3 candidates (almost
/// every row decided from the list), of 1 (some rows fall back to their logits), and of none
/// (every row falls back), drafted and not, alone and four at once.
#[test]
fn plain_rounds_decided_from_shortlists_equal_serial() {
    let plain = |seed: u64, temperature: f32| {
        let mut req = request(seed, false, 40);
        req.params = SamplingParams {
            temperature,
            seed: Some(seed * 11),
            ..SamplingParams::default()
        };
        assert!(req.params.draws_plain());
        req
    };
    for keep in [3, 1, 0] {
        for drafts in [false, true] {
            let cfg = drafting_or_serial(drafts);
            let reqs: Vec<(usize, Request)> = (0..4u64)
                .map(|i| (i as usize, plain(20 + i, [0.3, 1.0, 1.7, 0.05][i as usize])))
                .collect();
            let runner = Counting::new(Some(keep));
            let (picks, fallbacks, logit_rows) = (
                runner.pick_rows.clone(),
                runner.fallbacks.clone(),
                runner.logit_rows.clone(),
            );
            let mut e = Engine::new(Box::new(runner), cfg, CostModel::flat());
            let got = run_all(&mut e, reqs.clone());
            for ((_, req), run) in reqs.into_iter().zip(got) {
                let want = solo(serial_config(), req);
                assert_eq!(run.receipt.token_sha, want.receipt.token_sha, "keep {keep}");
            }
            let (picks, fallbacks) = (
                picks.load(Ordering::Relaxed),
                fallbacks.load(Ordering::Relaxed),
            );
            assert!(picks > 0, "no round asked for picks");
            assert_eq!(
                logit_rows.load(Ordering::Relaxed),
                0,
                "a plain round asked for logits"
            );
            match keep {
                0 => assert_eq!(fallbacks, picks, "an empty shortlist decided a row"),
                _ => assert!(
                    fallbacks < picks,
                    "keep {keep}: {fallbacks} of {picks} fell back"
                ),
            }
        }
    }
}

/// Plain requests with tree drafts: every row's key (branch rows included) is the position it
/// draws, so picks give the serial replies.
#[test]
fn plain_picks_with_tree_drafts_equal_serial() {
    let mut tree_rows = 0;
    for seed in 40..48u64 {
        let mut req = request(seed, false, 80);
        req.params = SamplingParams {
            temperature: 0.6,
            seed: Some(seed),
            ..SamplingParams::default()
        };
        let context = 1 + (seed as usize % 2);
        let serial = solo_short(serial_config(), req.clone(), context);
        let cfg = EngineConfig {
            min_drafts: 2,
            tree_branches: 3,
            force_trees: true,
            ..EngineConfig::default()
        };
        let mut runner = Counting::new(Some(3));
        runner.inner.context = context;
        let trees = runner.tree_rows.clone();
        let mut e = Engine::new(Box::new(runner), cfg, CostModel::flat());
        let run = run_all(&mut e, vec![(0, req)]).pop().unwrap();
        assert_eq!(run.tokens, serial.tokens, "seed {seed}");
        tree_rows += trees.load(Ordering::Relaxed);
    }
    assert!(tree_rows > 0, "no picked round carried tree rows");
}

/// A proposer that reports each guess as free (a draft model far cheaper than its target),
/// whatever the test machine's timings.
struct Timed(Prophet);

impl Proposer for Timed {
    fn id(&self) -> SourceId {
        self.0.id()
    }
    fn propose(&mut self, seq: &SeqView, max: usize) -> Vec<TokenId> {
        self.0.propose(seq, max)
    }
    fn costs_forward(&self) -> bool {
        true
    }
    fn last_guess_secs(&self) -> Option<f64> {
        Some(0.0)
    }
}

/// A 600-token request (no stop tokens) to an engine whose next token hangs on the last one
/// only, its serial run, and its reply by prompt for a [`Prophet`].
fn copying_reply(seed: u64, sampled: bool) -> (Request, Run, HashMap<Vec<TokenId>, Vec<TokenId>>) {
    let mut req = request(seed, sampled, 600);
    req.stop_tokens.clear();
    let want = solo_short(serial_config(), req.clone(), 1);
    let replies = std::iter::once((req.prompt.clone(), want.tokens.clone())).collect();
    (req, want, replies)
}

/// An engine over a fake target whose next token hangs on the last one only.
fn copying_engine(cost: CostModel) -> Engine {
    let mut fake = FakeRunner::new(VOCAB, BLOCKS);
    fake.context = 1;
    Engine::new(Box::new(fake), EngineConfig::default(), cost)
}

/// Guesses drafted by the sources whose names start with `prefix`.
fn drafted_by(run: &Run, prefix: &str) -> usize {
    run.receipt
        .sources
        .iter()
        .filter(|s| s.name().starts_with(prefix))
        .map(|s| s.drafted)
        .sum()
}

/// A draft model that once looked far too dear (one guess measured at eight forwards) is
/// probed again even while copies take every round (on a flat cost, a one-token copy always
/// pays), measured cheap, and back in use within the same reply; the reply stays serial's.
#[test]
fn a_dear_looking_draft_model_is_probed_while_copies_win() {
    // The next token hangs on the last one only: a one-token copy is often right, never always.
    let (req, want, replies) = copying_reply(40, true);
    let mut cost = CostModel::flat();
    cost.observe_propose(PROPHET, 1, 8.0);
    assert!(!cost.can_ever_pay(0, cost.propose_secs(PROPHET)));
    let mut e = copying_engine(cost);
    e.add_draft_model(Box::new(Timed(Prophet {
        replies,
        right: 16,
        rng: SplitMix64::new(3),
    })));
    let run = run_all(&mut e, vec![(0, req)]).pop().unwrap();
    assert_eq!(run.tokens, want.tokens, "drafted == serial");
    let prophet = drafted_by(&run, "prophet");
    assert!(
        drafted_by(&run, "copies") > 0,
        "copies proposed: {:?}",
        run.receipt.sources
    );
    assert!(
        prophet > 50,
        "the draft model earned its way back: {:?}",
        run.receipt.sources
    );
}

/// A draft model that is far behind once the reply has started: each use would first catch up
/// over 1,000 tokens.
/// It keeps the tokens of every sequence it was asked to guess for while behind.
struct FarBehind {
    inner: Timed,
    asked: Arc<Mutex<Vec<Vec<TokenId>>>>,
}

impl Proposer for FarBehind {
    fn id(&self) -> SourceId {
        self.inner.id()
    }
    fn propose(&mut self, seq: &SeqView, max: usize) -> Vec<TokenId> {
        if self.behind(seq) > 0 {
            self.asked.lock().unwrap().push(seq.tokens.to_vec());
        }
        self.inner.propose(seq, max)
    }
    fn costs_forward(&self) -> bool {
        true
    }
    fn last_guess_secs(&self) -> Option<f64> {
        self.inner.last_guess_secs()
    }
    fn behind(&self, seq: &SeqView) -> usize {
        // Up to date with the prompt (so that it is not left out of the request).
        if seq.tokens.len() > seq.prompt_len + 1 {
            1000
        } else {
            0
        }
    }
}

/// A copying reply (request 41) served with a [`FarBehind`] draft model whose catch-up costs
/// `catch_up` forwards a row: the run, its serial twin, and the token counts at which the model
/// was asked while behind.
fn far_behind_run(sampled: bool, catch_up: f64) -> (Run, Run, Vec<Vec<TokenId>>) {
    let (req, want, replies) = copying_reply(41, sampled);
    let mut cost = CostModel::flat();
    cost.observe_catch_up(PROPHET, 1, catch_up);
    let mut e = copying_engine(cost);
    let asked = Arc::new(Mutex::new(Vec::new()));
    e.add_draft_model(Box::new(FarBehind {
        inner: Timed(Prophet {
            replies,
            right: 16,
            rng: SplitMix64::new(4),
        }),
        asked: asked.clone(),
    }));
    let run = run_all(&mut e, vec![(0, req)]).pop().unwrap();
    let asked = asked.lock().unwrap().clone();
    (run, want, asked)
}

/// A draft model whose catch-up would cost many steps (copies committed the tokens it has not
/// seen, as in an edit) is not probed in place of a round that copies took: every round it is
/// asked for is one where the context offered no copy. Copies still draft; the reply stays
/// serial's.
#[test]
fn a_draft_model_far_behind_is_not_probed_in_place_of_copies() {
    // Greedy, the next token hanging on the last one only: the reply soon runs in a cycle,
    // which copies guess right every round. A catch-up row costs as much as a step.
    let (run, want, asked) = far_behind_run(false, 1.0);
    assert_eq!(run.tokens, want.tokens, "drafted == serial");
    assert!(
        drafted_by(&run, "copies") > 0,
        "copies proposed: {:?}",
        run.receipt.sources
    );
    let lookup = Copies::default();
    for tokens in &asked {
        assert!(
            lookup.lookup(tokens, 1).is_empty(),
            "the draft model was probed at {} tokens, where copies had a guess",
            tokens.len()
        );
    }
}

/// A draft model whose catch-up would cost far more than the rounds between probes (here a
/// thousand forwards, as a far-behind draft model on a GPU) is never probed, not even in rounds
/// that no copy takes: the probe would slow the reply more than drafting could win back. The
/// reply stays serial's.
#[test]
fn a_draft_model_whose_catch_up_costs_more_than_probes_can_absorb_is_not_probed() {
    // Sampled: copies are often wrong, so many rounds go without any guess.
    let (run, want, asked) = far_behind_run(true, 1.0);
    assert_eq!(run.tokens, want.tokens, "drafted == serial");
    assert!(
        asked.is_empty(),
        "probed {} times while 1,000 tokens behind",
        asked.len()
    );
}
