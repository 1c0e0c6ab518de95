//! The working copy of a logits row: NaN cleaned up, then repetition, frequency and presence
//! penalties applied from the committed history.

use super::SamplingParams;
use tf_core::TokenId;

/// Copies `logits` into `z` with every NaN replaced by negative infinity, so that every later
/// comparison is a total order on values (-0.0 and +0.0 still compare equal; ties go to the
/// lower id).
pub(crate) fn sanitized_copy(logits: &[f32], z: &mut Vec<f32>) {
    z.clear();
    z.extend(
        logits
            .iter()
            .map(|&v| if v.is_nan() { f32::NEG_INFINITY } else { v }),
    );
}

/// Whether `params` change any logit at all.
pub(crate) fn penalties_active(params: &SamplingParams) -> bool {
    params.repetition_penalty != 1.0
        || params.presence_penalty != 0.0
        || params.frequency_penalty != 0.0
}

/// Applies the penalties to `z` in place, reading only `history` (the committed tokens).
///
/// For each distinct token t of `history` (ids outside the vocabulary are ignored), with c = its
/// number of occurrences, all in f32:
/// 1. repetition (CTRL / Hugging Face): `z[t] = z[t] / r` if `z[t] > 0`, else `z[t] * r`;
/// 2. frequency and presence (OpenAI): `z[t] = z[t] - frequency * c`, then `z[t] - presence`.
///
/// `counts` is scratch of any length; it is returned all zero.
pub(crate) fn apply_penalties(
    z: &mut [f32],
    params: &SamplingParams,
    history: &[TokenId],
    counts: &mut Vec<u32>,
) {
    if history.is_empty() || !penalties_active(params) {
        return;
    }
    if counts.len() < z.len() {
        counts.resize(z.len(), 0);
    }
    let vocab = z.len();
    for &t in history {
        let t = t as usize;
        if t < vocab {
            counts[t] += 1;
        }
    }
    let r = params.repetition_penalty;
    for &t in history {
        let t = t as usize;
        if t >= vocab || counts[t] == 0 {
            continue; // out of vocabulary, or already applied
        }
        let c = counts[t];
        counts[t] = 0;
        let mut v = z[t];
        if r != 1.0 {
            v = if v > 0.0 { v / r } else { v * r };
        }
        v -= params.frequency_penalty * c as f32;
        v -= params.presence_penalty;
        // A penalty can turn -inf into NaN only through -inf * 0 or inf - inf; keep the
        // no-NaN invariant of the working copy.
        z[t] = if v.is_nan() { f32::NEG_INFINITY } else { v };
    }
}
