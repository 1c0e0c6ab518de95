//! Log-probabilities of the tokens a reply drew (`logprobs` / `top_logprobs` of the OpenAI
//! APIs): the log-softmax of the row's raw logits (before temperature, truncation or penalties:
//! the model's own distribution), and the row's most likely tokens. A function of one logits
//! row alone, computed in one fixed order, so a drafted reply's log-probabilities equal its
//! serial twin's bit for bit (the rows' logits do).

use tf_core::TokenId;

/// Alternatives a request may ask for per token (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// One drawn token's log-probability, and the row's `top` most likely tokens with theirs
/// (highest first, ties to the lower id).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: TokenId,
    pub logprob: f32,
    pub top: Vec<(TokenId, f32)>,
}

/// The log-softmax normalizer of `row`: its largest value and `ln Σ exp(v - max)`, summed in
/// f64 in index order. NaN counts as -inf (as the sampler reads it).
fn normalizer(row: &[f32]) -> (f64, f64) {
    let clean = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
    let max = row
        .iter()
        .map(|&v| clean(v))
        .fold(f32::NEG_INFINITY, f32::max) as f64;
    if max == f64::NEG_INFINITY {
        return (0.0, f64::INFINITY);
    }
    let sum: f64 = row.iter().map(|&v| (clean(v) as f64 - max).exp()).sum();
    (max, sum.ln())
}

fn logprob_of(v: f32, (max, ln_sum): (f64, f64)) -> f32 {
    if v.is_nan() {
        return f32::NEG_INFINITY;
    }
    ((v as f64 - max) - ln_sum) as f32
}

/// `token`'s log-probability in `row` and the row's `top` most likely tokens (at most
/// [`MAX_TOP_LOGPROBS`]).
pub fn token_logprob(row: &[f32], token: TokenId, top: usize) -> TokenLogprob {
    let norm = normalizer(row);
    let logprob = row
        .get(token as usize)
        .map_or(f32::NEG_INFINITY, |&v| logprob_of(v, norm));
    let n = top.min(MAX_TOP_LOGPROBS).min(row.len());
    let mut best: Vec<TokenId> = Vec::new();
    if n > 0 {
        // Order: larger logit first, then lower id; NaN last.
        let key = |i: TokenId| {
            let v = row[i as usize];
            (if v.is_nan() { f32::NEG_INFINITY } else { v }, i)
        };
        let worse = |a: &TokenId, b: &TokenId| {
            let (va, ia) = key(*a);
            let (vb, ib) = key(*b);
            vb.total_cmp(&va).then(ia.cmp(&ib))
        };
        best = (0..row.len() as TokenId).collect();
        best.select_nth_unstable_by(n - 1, worse);
        best.truncate(n);
        best.sort_by(worse);
    }
    TokenLogprob {
        token,
        logprob,
        top: best
            .into_iter()
            .map(|t| (t, logprob_of(row[t as usize], norm)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_against_a_direct_computation() {
        let row = [1.0f32, 3.0, -2.0, 3.0, 0.5];
        let lp = token_logprob(&row, 4, 3);
        let z: f64 = row.iter().map(|&v| (v as f64).exp()).sum();
        let want = |i: usize| ((row[i] as f64).exp() / z).ln();
        assert!((lp.logprob as f64 - want(4)).abs() < 1e-6);
        // Ties to the lower id.
        let ids: Vec<TokenId> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 3, 0]);
        for (t, l) in &lp.top {
            assert!((*l as f64 - want(*t as usize)).abs() < 1e-6);
        }
        let total: f64 = (0..5)
            .map(|t| (token_logprob(&row, t, 0).logprob as f64).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
    }

    #[test]
    fn pruned_and_nan_entries_have_no_mass() {
        let row = [f32::NEG_INFINITY, 0.0, f32::NAN, 0.0];
        let lp = token_logprob(&row, 1, 4);
        assert!((lp.logprob as f64 - 0.5f64.ln()).abs() < 1e-7);
        assert_eq!(token_logprob(&row, 0, 0).logprob, f32::NEG_INFINITY);
        assert_eq!(token_logprob(&row, 2, 0).logprob, f32::NEG_INFINITY);
        let ids: Vec<TokenId> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 3, 0, 2]);
        // A token outside the row has no probability, and asks for more than the row are
        // capped.
        assert_eq!(token_logprob(&row, 9, 30).top.len(), 4);
        assert_eq!(token_logprob(&row, 9, 0).logprob, f32::NEG_INFINITY);
    }
}
