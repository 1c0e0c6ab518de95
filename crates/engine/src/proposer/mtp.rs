//! The target's own multi-token-prediction head as a drafter (Qwen3.5, Qwen3-Next): from the
//! target's final hidden state at a position and the token after it, one more decoder layer
//! predicts the token after that. The head runs the committed positions it has not seen (the
//! target's hidden states of its committed rows, handed over after every step), then chains its
//! guesses, each from its own previous output. It draws with the target's keyed noise, as a
//! draft model does. Its keys and values live in its own one-layer cache under the sequences'
//! block ids. Whatever it guesses, the committed tokens are the target's draws.

use super::{Proposer, SeqView, SourceId};
use crate::sampler::{greedy_token, Sampler};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tf_core::{SeqId, TokenId};
use tf_kernels::kv::{KvCache, KvFormat, BLOCK_SIZE};
use tf_kernels::ThreadPool;
use tf_models::{Model, Row};

#[derive(Default)]
struct MtpSeq {
    /// The target's final hidden state at committed positions the head has not run yet.
    hidden: BTreeMap<usize, Vec<f32>>,
    /// The head's cache holds committed rows for positions below this one.
    valid: usize,
}

pub struct Mtp {
    model: Arc<Model>,
    pool: Arc<ThreadPool>,
    kv: KvCache,
    seqs: HashMap<SeqId, MtpSeq>,
    sampler: Sampler,
    guess_secs: Option<f64>,
    catch_up_secs: Option<(usize, f64)>,
    /// Output-head columns the guesses are drawn from (`None`: all).
    head: Option<Vec<std::ops::Range<usize>>>,
    /// The last proposal's other branch (its runner-up first token and the guess after it).
    branch: Vec<TokenId>,
}

impl Mtp {
    /// The head of `model` (which must have one), with a cache of `kv_blocks` blocks under the
    /// target's block ids.
    pub fn new(model: Arc<Model>, pool: Arc<ThreadPool>, kv_blocks: usize) -> Mtp {
        let c = &model.config;
        let kv = KvCache::new(1, c.n_kv_heads, c.head_dim, kv_blocks, KvFormat::default());
        Mtp {
            model,
            pool,
            kv,
            seqs: HashMap::new(),
            sampler: Sampler::new(),
            guess_secs: None,
            catch_up_secs: None,
            head: None,
            branch: Vec::new(),
        }
    }

    /// Guesses are drawn from the output-head columns in `head` only (see
    /// `Model::pruned_head`): each guess reads that part of the head, and a guess only changes
    /// speed.
    pub fn with_head(mut self, head: Vec<std::ops::Range<usize>>) -> Mtp {
        self.head = Some(head);
        self
    }
}

impl Proposer for Mtp {
    fn id(&self) -> SourceId {
        SourceId::Mtp
    }

    fn costs_forward(&self) -> bool {
        true
    }

    fn takes_hidden(&self) -> bool {
        true
    }

    fn hidden(&mut self, id: SeqId, first: usize, rows: &[f32]) {
        let d = self.model.config.d_model;
        let s = self.seqs.entry(id).or_default();
        for (i, h) in rows.chunks_exact(d).enumerate() {
            s.hidden.insert(first + i, h.to_vec());
        }
        // A sequence run again from an earlier position (sent back to wait) restarts there.
        s.valid = s.valid.min(first);
    }

    fn behind(&self, seq: &SeqView) -> usize {
        let last = seq.tokens.len().saturating_sub(1);
        let valid = self.seqs.get(&seq.id).map_or(0, |s| s.valid);
        last.saturating_sub(valid).saturating_sub(1)
    }

    fn last_guess_secs(&self) -> Option<f64> {
        self.guess_secs
    }

    fn last_catch_up(&self) -> Option<(usize, f64)> {
        self.catch_up_secs
    }

    fn release(&mut self, id: SeqId) {
        self.seqs.remove(&id);
    }

    fn branches(&mut self) -> Vec<Vec<TokenId>> {
        let b = std::mem::take(&mut self.branch);
        if b.is_empty() {
            Vec::new()
        } else {
            vec![b]
        }
    }

    fn propose(&mut self, seq: &SeqView, max: usize) -> Vec<TokenId> {
        self.catch_up_secs = None;
        self.branch.clear();
        let n = seq.tokens.len();
        if max == 0 || n < 2 || seq.table.len() * BLOCK_SIZE < n + max {
            return Vec::new();
        }
        // The pending token sits at `last`; the head's first row pairs the hidden state at
        // `last - 1` with it.
        let last = n - 1;
        let Some(s) = self.seqs.get_mut(&seq.id) else {
            return Vec::new();
        };
        if !s.hidden.contains_key(&(last - 1)) {
            return Vec::new();
        }
        // Committed rows from the first position whose hidden states run unbroken to `last - 1`
        // (earlier ones, e.g. a prefix resumed from the cache, keep whatever the head's cache
        // holds there: a worse guess at most).
        let mut from = last - 1;
        while from > s.valid && s.hidden.contains_key(&(from - 1)) {
            from -= 1;
        }
        let d = self.model.config.d_model;
        let mut hidden = Vec::with_capacity((last - from) * d);
        let rows: Vec<Row> = (from..last)
            .map(|p| {
                hidden.extend_from_slice(&s.hidden[&p]);
                Row {
                    token: seq.tokens[p + 1],
                    pos: p,
                    seq: seq.id,
                    keep: true,
                    table: seq.table,
                    logits: p + 1 == last,
                    tree: None,
                }
            })
            .collect();
        let started = std::time::Instant::now();
        let Ok((logits, out)) = self.model.forward_mtp(
            &self.pool,
            &rows,
            &hidden,
            &mut self.kv,
            self.head.as_deref(),
        ) else {
            return Vec::new();
        };
        s.valid = last;
        s.hidden = s.hidden.split_off(&last);
        if rows.len() > 1 {
            self.catch_up_secs = Some((rows.len(), started.elapsed().as_secs_f64()));
        }
        let draw = |sampler: &mut Sampler, l: &[f32], position: usize, out: &[TokenId]| {
            if seq.params.draws_greedy() {
                return greedy_token(l);
            }
            let mut history = seq.tokens[seq.prompt_len..].to_vec();
            history.extend_from_slice(out);
            sampler.sample(l, seq.params, seq.seed, position as u64, &history)
        };
        let mut guesses = vec![draw(&mut self.sampler, &logits, n, &[])];
        let mut h = out[out.len() - d..].to_vec();
        // A greedy request's tree: the runner-up first token, the head's next guess after it.
        let runner_up = match seq.params.draws_greedy() && max >= 2 {
            true => second_best(&logits, guesses[0]),
            false => None,
        };
        let first_hidden = h.clone();
        let mut one_row = (0usize, 0f64);
        while guesses.len() < max {
            let t = std::time::Instant::now();
            let pos = last + guesses.len() - 1;
            let row = Row {
                token: *guesses.last().expect("one guess at least"),
                pos,
                seq: seq.id,
                keep: false,
                table: seq.table,
                logits: true,
                tree: None,
            };
            let head = self.head.as_deref();
            let Ok((l, o)) = (self.model).forward_mtp(&self.pool, &[row], &h, &mut self.kv, head)
            else {
                break;
            };
            let g = draw(&mut self.sampler, &l, n + guesses.len(), &guesses);
            guesses.push(g);
            h = o;
            one_row = (one_row.0 + 1, one_row.1 + t.elapsed().as_secs_f64());
        }
        if let Some(alt) = runner_up {
            let row = Row {
                token: alt,
                pos: last,
                seq: seq.id,
                keep: false,
                table: seq.table,
                logits: true,
                tree: None,
            };
            let head = self.head.as_deref();
            let model = &self.model;
            if let Ok((l, _)) =
                model.forward_mtp(&self.pool, &[row], &first_hidden, &mut self.kv, head)
            {
                self.branch = vec![alt, greedy_token(&l)];
            }
        }
        let first = started.elapsed().as_secs_f64() - one_row.1;
        let per = (first / rows.len().max(1) as f64 + one_row.1) / (1 + one_row.0) as f64;
        self.guess_secs = Some(per);
        guesses
    }
}

/// The highest finite logit's token other than `best`.
fn second_best(logits: &[f32], best: TokenId) -> Option<TokenId> {
    let mut pick: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if i as TokenId == best || !v.is_finite() {
            continue;
        }
        if pick.is_none_or(|(_, p)| v > p) {
            pick = Some((i, v));
        }
    }
    pick.map(|(i, _)| i as TokenId)
}
