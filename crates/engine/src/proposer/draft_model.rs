//! A small draft model with the target's tokenizer. It samples with the target's keyed noise
//! (same seed, same absolute positions, same parameters), so at temperature > 0 draft and target
//! draw the same token whenever their distributions are close (coupled drafting). Its KV cache
//! uses the sequence's block ids and is rolled back with the target's commits. It remembers which
//! token prefix each of its full blocks holds (by the prefix cache's chain hash), so a sequence
//! that the target resumes from cached blocks starts with the draft's keys and values of those
//! blocks too, instead of running the whole prompt through the draft again.
//!
//! A long catch-up (a cold prompt of thousands of tokens) runs only a window of the draft:
//! the sequence's first block and its last [`DEFAULT_WINDOW`] or so tokens, which the draft then
//! sees as one shorter sequence (positions renumbered, blocks unchanged). Its guesses lose the
//! far context; the replies lose nothing, since every committed token is the target's draw.

use super::SourceId;
use super::{Proposer, SeqView};
use crate::blocks::BlockHash;
use crate::draw::{Ask, RoundOut};
use crate::runner::{ModelRunner, Runner};
use crate::sampler::{NoiseKey, Sampler};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use tf_core::{BlockId, SeqId, TokenId};
use tf_kernels::kv::BLOCK_SIZE;
use tf_kernels::ThreadPool;
use tf_models::{Model, Row};

/// A round's first forward takes the tokens committed since the draft's last one: the target's
/// own token and the last accepted guess (never fed back), about a row's cost. More than this
/// (copies were accepted meanwhile, or the draft sat out rounds) is a catch-up, run as its own
/// forward so that it never counts as the cost of a guess.
const ROUND_ROWS: usize = 2;

/// Tokens of a long catch-up that the draft runs (besides the first block): about the cost of
/// a couple of seconds on a 2-core CPU, a small part of the target's prefill of the same prompt.
pub const DEFAULT_WINDOW: usize = 1024;

/// Where a windowed sequence's positions sit in the draft's cache: positions below `keep` as
/// they are, positions from `start` on straight after them (`keep` and `start` are multiples of
/// [`BLOCK_SIZE`], `keep < start`; positions in between are never run). A position keeps its
/// block id and its offset in the block, so the draft's cache needs no blocks of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    keep: usize,
    start: usize,
}

impl Window {
    /// The position the draft runs absolute position `p` at (`p < keep` or `p >= start`).
    fn pos(&self, p: usize) -> usize {
        if p < self.keep {
            p
        } else {
            p - (self.start - self.keep)
        }
    }

    /// The block table the draft sees: the kept blocks, then the window's.
    fn table(&self, table: &[BlockId]) -> Vec<BlockId> {
        let keep = (self.keep / BLOCK_SIZE).min(table.len());
        let start = (self.start / BLOCK_SIZE).min(table.len());
        table[..keep]
            .iter()
            .chain(&table[start..])
            .copied()
            .collect()
    }
}

/// What a proposal runs before its round's own rows: the positions (in up to two ranges), and
/// the window the sequence's rows sit in from then on.
struct CatchUp {
    ranges: [std::ops::Range<usize>; 2],
    window: Option<Window>,
}

impl CatchUp {
    fn len(&self) -> usize {
        self.ranges.iter().map(|r| r.len()).sum()
    }
}

/// The draft's row of absolute position `p`, in the `table` of its `window` (see [`Window`]).
/// A committed token's row has `keep` (a guess's has not).
fn row(
    window: Option<Window>,
    table: &[BlockId],
    (seq, p): (SeqId, usize),
    token: TokenId,
    (logits, keep): (bool, bool),
) -> Row<'_> {
    Row {
        token,
        pos: window.map_or(p, |w| w.pos(p)),
        seq,
        keep,
        table,
        logits,
        tree: None,
    }
}

pub struct DraftModel {
    /// The draft model with a KV cache of as many blocks as the target's.
    runner: Box<dyn Runner>,
    /// Positions of each sequence whose draft KV holds committed tokens.
    valid: HashMap<SeqId, usize>,
    /// Full blocks of the draft's cache known to hold the keys and values of a token prefix:
    /// block id -> the prefix's chain hash. Set for a sequence's blocks of committed tokens
    /// once the draft has run them, dropped whenever a forward writes into the block.
    held: HashMap<BlockId, BlockHash>,
    /// Sequences whose draft cache holds a window of their positions.
    windows: HashMap<SeqId, Window>,
    /// Tokens a long catch-up runs besides the first block (0: every token).
    window: usize,
    sampler: Sampler,
    /// The last forward's logits or greedy ids, reused across calls.
    round: RoundOut,
    /// Seconds per guess of the last call's one-row forwards (the catch-up left out).
    guess_secs: Option<f64>,
    /// Rows and seconds of the last call's catch-up forward, if it ran one.
    catch_up_secs: Option<(usize, f64)>,
}

impl DraftModel {
    /// A draft model whose cache mirrors a target cache of `kv_blocks` blocks.
    pub fn new(model: Arc<Model>, pool: Arc<ThreadPool>, kv_blocks: usize) -> DraftModel {
        let context = model.config.context_len;
        let runner = ModelRunner::new(model, pool, kv_blocks * BLOCK_SIZE, context);
        DraftModel::with_runner(Box::new(runner))
    }

    /// A draft model behind any runner (e.g. on a GPU); its cache must have as many blocks as
    /// the target's, since it uses the sequences' block ids.
    pub fn with_runner(runner: Box<dyn Runner>) -> DraftModel {
        DraftModel {
            runner,
            valid: HashMap::new(),
            held: HashMap::new(),
            windows: HashMap::new(),
            window: DEFAULT_WINDOW,
            sampler: Sampler::new(),
            round: RoundOut::default(),
            guess_secs: None,
            catch_up_secs: None,
        }
    }

    /// Tokens a long catch-up runs besides the sequence's first block (0: every token).
    pub fn with_window(mut self, tokens: usize) -> DraftModel {
        self.window = tokens;
        self
    }
}

impl DraftModel {
    /// The positions of `seq` that a proposal first runs as a catch-up forward:
    /// from the first one the draft's KV lacks up to the last token, when that is more than
    /// a round's own rows ([`ROUND_ROWS`]); none otherwise (an empty range where the round's
    /// rows start). When that is longer than the window, only the first block (unless the
    /// draft holds more of the prefix) and the last `window` tokens or so, in a new [`Window`].
    ///
    /// A window's blocks may be shared with another sequence through the prefix cache (those
    /// the draft does not hold for this one); rewriting them at this window's positions can
    /// only make that sequence's guesses worse, never a committed token different.
    fn catch_up(&self, seq: &SeqView) -> CatchUp {
        let n = seq.tokens.len();
        let window = self.windows.get(&seq.id).copied();
        let from = self.known(seq).min(n.saturating_sub(1));
        if n - from <= ROUND_ROWS {
            return CatchUp {
                ranges: [from..from, 0..0],
                window,
            };
        }
        // A window whose catch-up ran only in part (a prefill in parts) goes on as a window:
        // the positions between its kept blocks and its start are never run.
        let unfinished = window.is_some_and(|w| from < w.start);
        if !unfinished && (self.window == 0 || n - 1 - from <= self.window + 2 * BLOCK_SIZE) {
            return CatchUp {
                ranges: [from..n - 1, 0..0],
                window,
            };
        }
        // The draft keeps what it already holds at its own positions (or else the first
        // block): a window's start, or the leading full blocks it has run.
        let keep = match window {
            Some(w) => w.keep,
            None => (from / BLOCK_SIZE * BLOCK_SIZE).max(BLOCK_SIZE),
        };
        let start = (n - 1 - self.window) / BLOCK_SIZE * BLOCK_SIZE;
        CatchUp {
            ranges: [from.min(keep)..keep, start..n - 1],
            window: Some(Window { keep, start }),
        }
    }

    /// How the draft runs `seq`: its window, if it has one, and the block table it sees.
    fn layout<'a>(&self, seq: &SeqView<'a>) -> (Option<Window>, Cow<'a, [BlockId]>) {
        match self.windows.get(&seq.id) {
            Some(w) => (Some(*w), Cow::Owned(w.table(seq.table))),
            None => (None, Cow::Borrowed(seq.table)),
        }
    }

    /// Runs `seq`'s catch-up (if it has one) and returns its rows, or `None` if the forward
    /// failed.
    fn run_catch_up(&mut self, seq: &SeqView, catch_up: &CatchUp) -> Option<usize> {
        if let Some(w) = catch_up.window {
            self.windows.insert(seq.id, w);
        }
        let (window, table) = self.layout(seq);
        let rows: Vec<Row> = catch_up
            .ranges
            .iter()
            .flat_map(|r| r.clone())
            .map(|p| row(window, &table, (seq.id, p), seq.tokens[p], (false, true)))
            .collect();
        if rows.is_empty() {
            return Some(0);
        }
        self.forward(&rows).then_some(rows.len())
    }

    /// Positions of `seq` whose draft keys and values hold its committed tokens: as recorded for
    /// a sequence the draft has seen, else the leading blocks the draft holds for the same
    /// prefix (the blocks the target took from its prefix cache, written earlier by the draft
    /// for another sequence).
    fn known(&self, seq: &SeqView) -> usize {
        if let Some(&v) = self.valid.get(&seq.id) {
            return v;
        }
        let blocks = seq
            .hashes
            .iter()
            .zip(seq.table)
            .take_while(|(h, b)| self.held.get(b) == Some(h))
            .count();
        (blocks * BLOCK_SIZE).min(seq.tokens.len())
    }

    /// Runs `rows` through the draft, first forgetting what the blocks they write held.
    fn forward(&mut self, rows: &[Row]) -> bool {
        self.forget(rows);
        self.runner.forward(rows).is_ok()
    }

    fn forget(&mut self, rows: &[Row]) {
        for r in rows {
            if let Some(b) = r.table.get(r.pos / BLOCK_SIZE) {
                self.held.remove(b);
            }
        }
    }

    /// Records the blocks of `seq` whose committed tokens the draft's cache now holds.
    fn remember(&mut self, seq: &SeqView) {
        let mut committed = self.known(seq).min(seq.tokens.len());
        if let Some(w) = self.windows.get(&seq.id) {
            // A window's blocks hold keys and values at other positions than a prefix's.
            committed = committed.min(w.keep);
        }
        for (h, b) in seq
            .hashes
            .iter()
            .zip(seq.table)
            .take(committed / BLOCK_SIZE)
        {
            self.held.insert(*b, *h);
        }
    }
}

impl Proposer for DraftModel {
    fn id(&self) -> SourceId {
        SourceId::DraftModel
    }

    fn costs_forward(&self) -> bool {
        true
    }

    fn last_guess_secs(&self) -> Option<f64> {
        self.guess_secs
    }

    fn last_catch_up(&self) -> Option<(usize, f64)> {
        self.catch_up_secs
    }

    fn behind(&self, seq: &SeqView) -> usize {
        self.catch_up(seq).len()
    }

    fn prefill(&mut self, seq: &SeqView, max_rows: usize) -> (usize, usize) {
        let n = seq.tokens.len();
        let from = self.known(seq);
        if n < 2 || from + 1 >= n {
            if from > 0 && !self.valid.contains_key(&seq.id) {
                self.valid.insert(seq.id, from.min(n - 1));
            }
            return (0, 0);
        }
        // Everything but the last token, which the first proposal feeds (with its logits).
        let mut catch_up = self.catch_up(seq);
        if catch_up.len() == 0 {
            catch_up.ranges[0] = from..n - 1;
        }
        let total = catch_up.len();
        let mut room = max_rows;
        for r in &mut catch_up.ranges {
            r.end = r.start + r.len().min(room);
            room -= r.len();
        }
        let reached = catch_up
            .ranges
            .iter()
            .rev()
            .find(|r| !r.is_empty())
            .map(|r| r.end);
        match (self.run_catch_up(seq, &catch_up), reached) {
            (Some(rows), Some(reached)) => {
                self.valid.insert(seq.id, reached);
                self.remember(seq);
                (rows, total - rows)
            }
            (Some(_), None) => (0, total),
            // A failed forward: the first proposal catches up instead.
            (None, _) => (0, 0),
        }
    }

    fn propose(&mut self, seq: &SeqView, max: usize) -> Vec<TokenId> {
        let n = seq.tokens.len();
        if max == 0 || n == 0 {
            return Vec::new();
        }
        let catch_up = self.catch_up(seq);
        let mut from = catch_up.ranges[0].start;
        self.catch_up_secs = None;
        if catch_up.len() > 0 {
            let started = std::time::Instant::now();
            let Some(rows) = self.run_catch_up(seq, &catch_up) else {
                self.guess_secs = None;
                return Vec::new();
            };
            self.catch_up_secs = Some((rows, started.elapsed().as_secs_f64()));
            self.valid.insert(seq.id, n - 1);
            from = n - 1;
        }
        let (window, table) = self.layout(seq);
        let rows: Vec<Row> = (from..n)
            .map(|p| {
                row(
                    window,
                    &table,
                    (seq.id, p),
                    seq.tokens[p],
                    (p == n - 1, true),
                )
            })
            .collect();
        // Greedy requests take the draft's tokens as ids, plain temperature ones as picks (on a
        // GPU, only those come back).
        let ask = |position: usize| {
            if seq.params.draws_greedy() {
                Ask::Greedy
            } else if seq.params.draws_plain() {
                Ask::Picks(vec![NoiseKey {
                    seed: seq.seed,
                    position: position as u64,
                    temperature: seq.params.temperature,
                }])
            } else {
                Ask::Logits
            }
        };
        let mut history = seq.tokens.to_vec();
        let mut out = Vec::with_capacity(max);
        let mut next = rows;
        let mut one_row = (0usize, 0f64);
        let mut started = std::time::Instant::now();
        self.forget(&next);
        while let Ok(drawn) = self
            .round
            .forward(self.runner.as_mut(), &next, &ask(n + out.len()))
        {
            let t = drawn.token(
                &mut self.sampler,
                0,
                seq.params,
                seq.seed,
                (n + out.len()) as u64,
                &history[seq.prompt_len..],
            );
            one_row = (one_row.0 + 1, one_row.1 + started.elapsed().as_secs_f64());
            out.push(t);
            history.push(t);
            if out.len() == max {
                break;
            }
            started = std::time::Instant::now();
            next = vec![row(
                window,
                &table,
                (seq.id, n - 1 + out.len()),
                t,
                (true, false),
            )];
            self.forget(&next);
        }
        self.guess_secs = (one_row.0 > 0).then(|| one_row.1 / one_row.0 as f64);
        if out.is_empty() {
            return out;
        }
        // Positions up to n-1 hold committed tokens; the drafts fed back are only guesses.
        self.valid.insert(seq.id, n + out.len() - 1);
        self.remember(seq);
        out
    }

    fn commit(&mut self, id: SeqId, committed: usize) {
        if let Some(v) = self.valid.get_mut(&id) {
            // Drafts that were accepted are committed tokens now; the first rejected one is not.
            *v = (*v).min(committed.saturating_sub(1));
        }
    }

    fn release(&mut self, id: SeqId) {
        self.valid.remove(&id);
        self.windows.remove(&id);
    }
}
