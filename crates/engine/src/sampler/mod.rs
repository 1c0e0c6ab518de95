//! The keyed sampler (ARCHITECTURE.md, exactness rule 4): a drawn token is a pure function of
//! (logits row, params, seed, absolute position, committed history).
//!
//! # Definition
//!
//! [`Sampler::sample`] computes exactly this (the tests hold a full-sort implementation of it):
//!
//! 1. **Working copy** `z`: the logits with NaN replaced by -inf, then the penalties applied for
//!    the tokens of `history` (see `penalties.rs`; penalties read nothing else).
//! 2. **Greedy** when `temperature` is 0 (or not a positive finite number): the highest `z`,
//!    lowest id on ties. Also when the highest `z` is ±inf (a degenerate row).
//! 3. **Rank order**: all tokens sorted by (`z` descending, id ascending); rank 0 is the greedy
//!    token, m its logit. **Top-k** (`top_k > 0`) keeps the first k.
//! 4. Scaled logits `x = (z - m) * (1 / T)` in f64, weights `w = exp_nonpos(x)` (an IEEE-exact
//!    f64 exponential, `w = 1` at rank 0), masses `q = round(w * 2^52)` as integers.
//! 5. **Top-p** (`top_p < 1`): keep the shortest rank-order prefix whose summed mass reaches
//!    `ceil(Q * top_p)`, Q the integer total mass of the top-k candidates (at least one token).
//!    Integer masses make the total independent of summation order.
//! 6. **Min-p** (`min_p > 0`): drop candidates with `w < min(min_p, 1)`, i.e. probability below
//!    `min_p` times the top probability (the normalizer cancels). Rank 0 always stays.
//! 7. **Gumbel-max**: the kept candidate with the highest `x + gumbel(seed, position, id)`
//!    (f64; lowest id on ties). This draws from the softmax at temperature T renormalized over
//!    the kept candidates, with noise keyed by (seed, position, token).
//!
//! Only `gumbel`'s `ln` comes from libm; everything else is IEEE-exact or integer, so the choice
//! of fast path (partial selection, histograms, pruning) never changes a token.

mod filter;
mod par;
mod penalties;
mod philox;
mod shortlist;

#[cfg(test)]
mod tests;

pub use philox::{gumbel, gumbel_from_word, philox4x32_10, uniform_open01, GUMBEL_UPPER_BOUND};
pub use shortlist::{NoiseKey, Pick, Shortlist, SHORTLIST_SLACK};

use filter::{exp_nonpos, mass_q, max_value, top_k_sorted, top_p_full, top_p_prefix_len, Scale};
use philox::{gumbel_prefix_bounds, NoiseCache};
use std::ops::Range;
use std::sync::Arc;
use tf_core::TokenId;
use tf_kernels::ThreadPool;

/// A request's sampling parameters (OpenAI-compatible ranges, see [`SamplingParams::validate`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy. Range [0, 2].
    pub temperature: f32,
    /// Keep the k best tokens; 0 = off.
    pub top_k: usize,
    /// Keep the smallest prefix whose probability mass reaches p; 1 = off. Range (0, 1].
    pub top_p: f32,
    /// Drop tokens below `min_p` times the top probability; 0 = off. Range [0, 1].
    pub min_p: f32,
    /// Noise key; `None` = [`default_seed`] of the prompt.
    pub seed: Option<u64>,
    /// Subtracted once from every token seen in the history. Range [-2, 2].
    pub presence_penalty: f32,
    /// Subtracted per occurrence in the history. Range [-2, 2].
    pub frequency_penalty: f32,
    /// Divides positive / multiplies negative logits of tokens in the history; 1 = off. > 0.
    pub repetition_penalty: f32,
}

impl Default for SamplingParams {
    /// OpenAI's defaults: temperature 1, no truncation, no penalties.
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: None,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
        }
    }
}

/// A sampling parameter outside its range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SamplerError {
    #[error("{name} must be {expected}, got {value}")]
    OutOfRange {
        name: &'static str,
        expected: &'static str,
        value: f32,
    },
}

impl SamplingParams {
    /// Greedy decoding: temperature 0, everything else off.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }

    /// Checks every range; NaN is always out of range.
    pub fn validate(&self) -> Result<(), SamplerError> {
        fn check(
            ok: bool,
            name: &'static str,
            expected: &'static str,
            value: f32,
        ) -> Result<(), SamplerError> {
            if ok {
                Ok(())
            } else {
                Err(SamplerError::OutOfRange {
                    name,
                    expected,
                    value,
                })
            }
        }
        let t = self.temperature;
        check((0.0..=2.0).contains(&t), "temperature", "in [0, 2]", t)?;
        let p = self.top_p;
        check(p > 0.0 && p <= 1.0, "top_p", "in (0, 1]", p)?;
        let mp = self.min_p;
        check((0.0..=1.0).contains(&mp), "min_p", "in [0, 1]", mp)?;
        let pp = self.presence_penalty;
        check(
            (-2.0..=2.0).contains(&pp),
            "presence_penalty",
            "in [-2, 2]",
            pp,
        )?;
        let fp = self.frequency_penalty;
        check(
            (-2.0..=2.0).contains(&fp),
            "frequency_penalty",
            "in [-2, 2]",
            fp,
        )?;
        let rp = self.repetition_penalty;
        check(
            rp > 0.0 && rp.is_finite(),
            "repetition_penalty",
            "a finite number > 0",
            rp,
        )
    }

    /// Whether every token these parameters draw is the [`greedy_token`] of the raw logits row,
    /// whatever the seed, position and history: temperature 0 (or not a positive finite number)
    /// or top-k 1, and no penalty that changes a logit. A runner can then take the maximum where
    /// the logits are (`Runner::forward_greedy`) and copy back one id per row.
    pub fn draws_greedy(&self) -> bool {
        let t = self.temperature;
        let greedy = !(t > 0.0 && t.is_finite()) || self.top_k == 1;
        greedy && !penalties::penalties_active(self)
    }

    /// Whether every token these parameters draw is the Gumbel-max over the whole vocabulary of
    /// the raw logits at this temperature (no truncation, no penalty): a positive finite
    /// temperature, top-k 0, top-p 1, min-p 0. A runner can then find the
    /// contenders where the logits are (`Runner::forward_picks`, [`Shortlist`]).
    pub fn draws_plain(&self) -> bool {
        let t = self.temperature;
        t > 0.0
            && t.is_finite()
            && self.top_k == 0
            && self.top_p >= 1.0
            && self.min_p <= 0.0
            && !penalties::penalties_active(self)
    }

    /// The seed the noise is keyed by: the request's, else [`default_seed`] of the prompt.
    pub fn seed_for(&self, prompt_ids: &[TokenId]) -> u64 {
        self.seed.unwrap_or_else(|| default_seed(prompt_ids))
    }
}

/// The seed of a request that names none: FNV-1a 64 (offset basis 0xcbf29ce484222325, prime
/// 0x100000001b3) over the little-endian bytes of the prompt token ids, in order. The same
/// prompt always draws the same reply; a different prompt draws independent noise.
pub fn default_seed(prompt_ids: &[TokenId]) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = FNV_OFFSET;
    for id in prompt_ids {
        for byte in id.to_le_bytes() {
            h ^= u64::from(byte);
            h = h.wrapping_mul(FNV_PRIME);
        }
    }
    h
}

/// Draws one token with a throwaway [`Sampler`]; see the module docs for the definition.
/// Hot loops should keep a `Sampler` to reuse its buffers.
pub fn sample(
    logits: &[f32],
    params: &SamplingParams,
    seed: u64,
    position: u64,
    history: &[TokenId],
) -> TokenId {
    Sampler::new().sample(logits, params, seed, position, history)
}

/// The keyed sampler with its scratch buffers (a few bytes per vocabulary entry), reused across
/// calls. Holds no state that affects results.
#[derive(Default)]
pub struct Sampler {
    z: Vec<f32>,
    counts: Vec<u32>,
    masses: Vec<u64>,
    buckets: Vec<u8>,
    candidates: Vec<TokenId>,
    tail: Vec<TokenId>,
    /// Runs the passes over the whole vocabulary in parallel (`par.rs`), if any.
    pool: Option<Arc<ThreadPool>>,
}

impl Sampler {
    pub fn new() -> Self {
        Sampler::default()
    }

    /// A sampler whose passes over the whole vocabulary (the Gumbel-max scan, top-p's masses)
    /// run on `pool`'s threads: the same tokens, sooner (`par.rs`).
    pub fn with_pool(pool: Arc<ThreadPool>) -> Self {
        Sampler {
            pool: Some(pool),
            ..Sampler::default()
        }
    }

    /// The token at absolute `position` for this logits row (module docs: the definition).
    /// `history` holds the committed tokens the penalties count. `params` should be validated;
    /// out-of-range values still give a deterministic token.
    ///
    /// # Panics
    /// If `logits` is empty (the vocabulary size comes from the model, never from a request).
    pub fn sample(
        &mut self,
        logits: &[f32],
        params: &SamplingParams,
        seed: u64,
        position: u64,
        history: &[TokenId],
    ) -> TokenId {
        assert!(!logits.is_empty(), "sampling from an empty logits row");
        penalties::sanitized_copy(logits, &mut self.z);
        penalties::apply_penalties(&mut self.z, params, history, &mut self.counts);
        let z = &self.z[..];
        let (top, m) = argmax_lowest(z);
        let t = params.temperature;
        if !(t > 0.0 && t.is_finite() && m.is_finite()) {
            return top;
        }
        let scale = Scale::new(m, t);
        let top_k_active = params.top_k > 0 && params.top_k < z.len();
        let top_p_active = params.top_p < 1.0;
        let min_p = if params.min_p > 0.0 {
            Some(f64::from(params.min_p.min(1.0)))
        } else {
            None
        };
        let pool = self.pool.as_deref().filter(|p| p.threads() > 1);
        let mut best = Best::new(seed, position, scale, min_p);
        // Rank 0 is always kept: seeding the search with it lets the bound prune early.
        best.offer(top, z[top as usize]);
        if top_k_active {
            if params.top_k == 1 {
                return top;
            }
            top_k_sorted(z, params.top_k, &mut self.candidates);
            let mut keep = self.candidates.len();
            if top_p_active {
                self.masses.clear();
                self.masses.extend(
                    self.candidates
                        .iter()
                        .map(|&id| mass_q(exp_nonpos(scale.x(z[id as usize])))),
                );
                keep = top_p_prefix_len(&self.masses, params.top_p);
            }
            for &id in &self.candidates[..keep] {
                best.offer(id, z[id as usize]);
            }
        } else if top_p_active {
            let kept = top_p_full(
                z,
                scale,
                params.top_p,
                &mut self.buckets,
                &mut self.masses,
                std::mem::take(&mut self.tail),
                pool,
            );
            let buckets = &self.buckets;
            let keep = |i: usize| buckets[i] < kept.crossing;
            match pool {
                Some(pool) => par::scan(pool, &mut best, z, Some(&keep)),
                None => best.scan(z, 0..z.len(), keep),
            }
            for &id in &kept.tail {
                best.offer(id, z[id as usize]);
            }
            self.tail = kept.tail;
        } else {
            match pool {
                Some(pool) => par::scan(pool, &mut best, z, None),
                None => best.scan_all(z, 0..z.len()),
            }
        }
        best.id
    }
}

/// The greedy token of a logits row: the highest value, NaN counting as -inf, the lowest id
/// among equal maxima (-0.0 equals +0.0), id 0 when no value is above -inf. What
/// [`Sampler::sample`] draws for parameters with [`SamplingParams::draws_greedy`].
///
/// # Panics
/// If `logits` is empty.
pub fn greedy_token(logits: &[f32]) -> TokenId {
    assert!(!logits.is_empty(), "greedy token of an empty logits row");
    // A NaN is never greater than anything, so the maximum skips it as it would skip -inf.
    let m = max_value(logits);
    if m == f32::NEG_INFINITY {
        return 0;
    }
    logits.iter().position(|&v| v == m).unwrap_or(0) as TokenId
}

/// The highest value and the lowest id holding it. `z` holds no NaN; an all -inf row gives id 0.
fn argmax_lowest(z: &[f32]) -> (TokenId, f32) {
    let m = max_value(z);
    let id = z.iter().position(|&v| v == m).unwrap_or(0);
    (id as TokenId, z[id])
}

/// Tokens per chunk of a scan: 16 Philox blocks.
const SCAN_CHUNK: usize = 4 * philox::BATCH_BLOCKS;

/// The running Gumbel-max over kept candidates: best score so far, ties to the lowest id.
#[derive(Clone)]
struct Best {
    id: TokenId,
    score: f64,
    noise: NoiseCache,
    prefix_bounds: &'static [f64; 256],
    scale: Scale,
    min_p: Option<f64>,
}

impl Best {
    fn new(seed: u64, position: u64, scale: Scale, min_p: Option<f64>) -> Self {
        Best {
            id: TokenId::MAX,
            score: f64::NEG_INFINITY,
            noise: NoiseCache::new(seed, position),
            prefix_bounds: gumbel_prefix_bounds(),
            scale,
            min_p,
        }
    }

    /// Considers a candidate that survived top-k and top-p. A candidate whose score cannot reach
    /// the best is skipped early: first if even the largest noise cannot lift it
    /// (`x + g <= x + GUMBEL_UPPER_BOUND` in f64, rounding being monotone), then if the bound for
    /// its Philox word's top bits cannot. Skipping a loser never changes the winner.
    #[inline]
    fn offer(&mut self, id: TokenId, z: f32) {
        let x = self.scale.x(z);
        if x + GUMBEL_UPPER_BOUND < self.score {
            return;
        }
        let word = self.noise.word(id);
        self.offer_word(id, x, word);
    }

    /// [`offer`](Self::offer) past the first bound, with the candidate's scaled logit `x` and
    /// its Philox word.
    #[inline]
    fn offer_word(&mut self, id: TokenId, x: f64, word: u32) {
        if x + self.prefix_bounds[(word >> 24) as usize] < self.score {
            return;
        }
        if let Some(min_p) = self.min_p {
            if exp_nonpos(x) < min_p {
                return;
            }
        }
        let score = x + gumbel_from_word(word);
        if score > self.score || (score == self.score && id < self.id) {
            self.score = score;
            self.id = id;
        }
    }

    /// Offers every token `i` of `range` (starting at a multiple of [`SCAN_CHUNK`]) with
    /// `kept(i)`, in ascending id order, skipping whole chunks whose best logit cannot reach the
    /// current best score.
    fn scan(&mut self, z: &[f32], range: Range<usize>, kept: impl Fn(usize) -> bool) {
        let start = range.start;
        debug_assert!(start.is_multiple_of(SCAN_CHUNK));
        for (c, chunk) in z[range].chunks(SCAN_CHUNK).enumerate() {
            if self.scale.x(max_value(chunk)) + GUMBEL_UPPER_BOUND < self.score {
                continue;
            }
            let base = start + c * SCAN_CHUNK;
            for (j, &v) in chunk.iter().enumerate() {
                if kept(base + j) {
                    self.offer((base + j) as TokenId, v);
                }
            }
        }
    }

    /// [`scan`](Self::scan) of every token (no truncation): a chunk that survives takes its 64
    /// Philox words in one batch ([`NoiseCache::words64`], the same words) once one of its
    /// tokens passes the first bound.
    fn scan_all(&mut self, z: &[f32], range: Range<usize>) {
        let start = range.start;
        debug_assert!(start.is_multiple_of(SCAN_CHUNK));
        for (c, chunk) in z[range].chunks(SCAN_CHUNK).enumerate() {
            if self.scale.x(max_value(chunk)) + GUMBEL_UPPER_BOUND < self.score {
                continue;
            }
            let base = start + c * SCAN_CHUNK;
            let mut words = None;
            for (j, &v) in chunk.iter().enumerate() {
                let x = self.scale.x(v);
                if x + GUMBEL_UPPER_BOUND >= self.score {
                    let w = words.get_or_insert_with(|| self.noise.words64((base / 4) as u32));
                    let word = w[j];
                    self.offer_word((base + j) as TokenId, x, word);
                }
            }
        }
    }
}
