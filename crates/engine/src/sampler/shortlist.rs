//! Plain temperature draws decided from a shortlist found where the logits are (a GPU).
//!
//! For [`SamplingParams::draws_plain`] parameters the sampler's draw is the token with the highest
//! `x + gumbel(seed, position, id)` over the whole vocabulary (`x = (z - m) / T`, lowest id on
//! ties). A runner that holds the logits on a device computes every score there, in f64 but with
//! its own `ln`, and sends back only a [`Shortlist`]: the best scores it found, with their ids and
//! logits, and the highest score it left out (`spill`). The host then decides with its own
//! arithmetic, exactly as [`Sampler::sample`](super::Sampler::sample), among the listed tokens
//! whose device score is within `2 * SHORTLIST_SLACK` of the best.
//!
//! Why that is the sampler's token: the device's score of any token that could win differs from
//! the host's by far less than `SHORTLIST_SLACK` (both take f64 steps on exactly converted
//! floats; each `ln` is within an ulp or two, and a winner's `|x|` stays below 27 because its
//! score beats the greedy token's, at least -3.2). So the host's winner `w` has a device score
//! of at least `G - 2 * SHORTLIST_SLACK`, `G` the best device score. If every token left out
//! scored below that, `w` is listed, and the host's own comparison over the listed candidates
//! finds it. Otherwise ([`Shortlist::token`] returns `None`) the caller samples the row's logits.

use super::filter::Scale;
use super::Best;
use tf_core::TokenId;

/// Bound on how far a device's score of a contending token may be from the host's.
pub const SHORTLIST_SLACK: f64 = 1e-9;

/// The noise key and temperature of one drawn row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoiseKey {
    pub seed: u64,
    /// Absolute position of the drawn token.
    pub position: u64,
    pub temperature: f32,
}

impl NoiseKey {
    /// `1 / T` in f64, as the host's scaled logits use it.
    pub fn inv_temperature(&self) -> f64 {
        1.0 / f64::from(self.temperature)
    }
}

/// What a runner found for one row (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Shortlist {
    pub key: NoiseKey,
    /// The row's greedy token ([`greedy_token`](super::greedy_token)) and its logit `m` (NaN as
    /// -inf).
    pub top: TokenId,
    pub m: f32,
    /// (device score, id, logit) of the listed tokens, any order.
    pub candidates: Vec<(f64, TokenId, f32)>,
    /// The highest device score of a token not listed (-inf if none).
    pub spill: f64,
}

impl Shortlist {
    /// The token [`Sampler::sample`](super::Sampler::sample) draws for this row with
    /// [`draws_plain`](super::SamplingParams::draws_plain) parameters of this key's temperature,
    /// or `None` when the list cannot show which it is.
    pub fn token(&self) -> Option<TokenId> {
        let t = self.key.temperature;
        if !(t > 0.0 && t.is_finite() && self.m.is_finite()) {
            return Some(self.top);
        }
        let best_score = self
            .candidates
            .iter()
            .map(|c| c.0)
            .fold(f64::NEG_INFINITY, f64::max);
        let floor = best_score - 2.0 * SHORTLIST_SLACK;
        if !best_score.is_finite() || self.spill >= floor || self.spill.is_nan() {
            return None;
        }
        let mut best = Best::new(
            self.key.seed,
            self.key.position,
            Scale::new(self.m, t),
            None,
        );
        best.offer(self.top, self.m);
        for &(score, id, z) in &self.candidates {
            if score >= floor {
                best.offer(id, z);
            }
        }
        Some(best.id)
    }

    /// The shortlist of a logits row computed on the host (scores as a device computes them,
    /// with this machine's `ln`), keeping the `keep` best: for runners without a device and for
    /// tests.
    pub fn of_row(logits: &[f32], key: NoiseKey, keep: usize) -> Shortlist {
        let top = super::greedy_token(logits);
        let m = sanitize(logits[top as usize]);
        let inv_t = key.inv_temperature();
        let mut scored: Vec<(f64, TokenId, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &z)| {
                let z = sanitize(z);
                let x = (f64::from(z) - f64::from(m)) * inv_t;
                let g = super::gumbel(key.seed, key.position, i as u32);
                (x + g, i as TokenId, z)
            })
            .filter(|c| c.0 > f64::NEG_INFINITY)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let spill = scored.get(keep).map_or(f64::NEG_INFINITY, |c| c.0);
        scored.truncate(keep);
        Shortlist {
            key,
            top,
            m,
            candidates: scored,
            spill,
        }
    }
}

fn sanitize(z: f32) -> f32 {
    if z.is_nan() {
        f32::NEG_INFINITY
    } else {
        z
    }
}

/// How a runner answered for one row of a plain round: the drawn token, or the row's logits
/// where its shortlist could not decide.
#[derive(Clone, Debug, PartialEq)]
pub enum Pick {
    Token(NoiseKey, TokenId),
    Logits(Vec<f32>),
}
