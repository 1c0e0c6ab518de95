//! Mixture-of-experts routing and combining, exact per row: a row's chosen experts and their
//! weights depend on its router scores alone, ties go to the lower expert id, and the chosen
//! experts' outputs are summed in one fixed order (rank order).

use crate::canon;

/// How a router turns a row's scores into the chosen experts' weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Routing {
    /// Experts chosen per row.
    pub used: usize,
    /// The chosen experts' softmax probabilities are divided by their sum.
    pub norm_topk: bool,
    pub gating: Gating,
}

/// Where the softmax goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// Over every expert's score, then the top `used` (Mixtral, Qwen3-MoE).
    Softmax,
    /// Over the top `used` scores only (gpt-oss).
    TopKSoftmax,
}

/// One chosen expert of a row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    pub expert: usize,
    pub weight: f32,
}

/// Routes one row: softmax over all `scores` (max subtracted, the canonical exponential, the
/// sum taken in expert order), the `used` highest probabilities (ties to the lower id; a NaN
/// score counts as the lowest), then each weight divided by the chosen ones' sum (summed in
/// rank order) where `norm_topk` says. `out` gets the choices in rank order.
///
/// With [`Gating::TopKSoftmax`]: the `used` highest scores (same ties), then a softmax over them
/// (their max subtracted, summed in rank order).
pub fn route(scores: &[f32], r: Routing, out: &mut Vec<Choice>) {
    out.clear();
    let clean = |s: f32| if s.is_nan() { f32::NEG_INFINITY } else { s };
    if r.gating == Gating::TopKSoftmax {
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| clean(scores[b]).total_cmp(&clean(scores[a])));
        let top = &order[..r.used.min(order.len())];
        let max = top.first().map_or(0.0, |&e| clean(scores[e]));
        out.extend(top.iter().map(|&e| Choice {
            expert: e,
            weight: canon::exp(clean(scores[e]) - max),
        }));
        let sum: f32 = out.iter().map(|c| c.weight).sum();
        out.iter_mut().for_each(|c| c.weight /= sum);
        return;
    }
    let max = scores
        .iter()
        .map(|&s| clean(s))
        .fold(f32::NEG_INFINITY, f32::max);
    let probs: Vec<f32> = scores.iter().map(|&s| canon::exp(clean(s) - max)).collect();
    let total: f32 = probs.iter().sum();
    let mut order: Vec<usize> = (0..scores.len()).collect();
    // Stable, so equal probabilities keep id order.
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
    out.extend(order.iter().take(r.used).map(|&e| Choice {
        expert: e,
        weight: probs[e] / total,
    }));
    if r.norm_topk {
        let sum: f32 = out.iter().map(|c| c.weight).sum();
        if sum > 0.0 {
            out.iter_mut().for_each(|c| c.weight /= sum);
        }
    }
}

/// `out = sum over ranks j of weights[j] * ys[j]`, in rank order from zero (`ys`: the chosen
/// experts' outputs back to back, `out.len()` values each).
pub fn combine(choices: &[Choice], ys: &[f32], out: &mut [f32]) {
    let d = out.len();
    out.fill(0.0);
    for (c, y) in choices.iter().zip(ys.chunks_exact(d)) {
        for (o, v) in out.iter_mut().zip(y) {
            *o += c.weight * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chosen(scores: &[f32], used: usize, norm_topk: bool) -> Vec<Choice> {
        let mut out = Vec::new();
        let gating = Gating::Softmax;
        route(
            scores,
            Routing {
                used,
                norm_topk,
                gating,
            },
            &mut out,
        );
        out
    }

    #[test]
    fn picks_the_highest_scores_in_rank_order() {
        let c = chosen(&[0.1, 2.0, -1.0, 1.5, 0.3], 2, false);
        assert_eq!(c.iter().map(|c| c.expert).collect::<Vec<_>>(), [1, 3]);
        // Unnormalized: the softmax over all five.
        let total: f64 = [0.1f64, 2.0, -1.0, 1.5, 0.3]
            .iter()
            .map(|s| (s - 2.0).exp())
            .sum();
        assert!((c[0].weight as f64 - 1.0 / total).abs() < 1e-6);
        assert!((c[1].weight as f64 - (-0.5f64).exp() / total).abs() < 1e-6);
    }

    #[test]
    fn normalized_weights_sum_to_one() {
        let c = chosen(&[0.1, 2.0, -1.0, 1.5, 0.3], 3, true);
        let sum: f32 = c.iter().map(|c| c.weight).sum();
        assert!((sum - 1.0).abs() < 1e-6, "{sum}");
        let ratio = c[1].weight / c[0].weight;
        assert!((ratio as f64 - (-0.5f64).exp()).abs() < 1e-6);
    }

    #[test]
    fn ties_go_to_the_lower_expert_id() {
        // Experts 2 and 5 tie for second place; 6 and 7 tie below them.
        let c = chosen(&[0.0, 3.0, 1.0, -2.0, 0.5, 1.0, 0.7, 0.7], 2, true);
        assert_eq!(c.iter().map(|c| c.expert).collect::<Vec<_>>(), [1, 2]);
        let c = chosen(&[0.0, 3.0, 1.0, -2.0, 0.5, 1.0, 0.7, 0.7], 4, true);
        assert_eq!(c.iter().map(|c| c.expert).collect::<Vec<_>>(), [1, 2, 5, 6]);
        let c = chosen(&[1.0; 8], 3, true);
        assert_eq!(c.iter().map(|c| c.expert).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(c.iter().all(|x| x.weight == c[0].weight));
    }

    #[test]
    fn nan_and_infinite_scores_do_not_poison_the_choice() {
        let c = chosen(&[f32::NAN, 1.0, f32::NEG_INFINITY, 2.0], 2, true);
        assert_eq!(c.iter().map(|c| c.expert).collect::<Vec<_>>(), [3, 1]);
        assert!(c.iter().all(|c| c.weight.is_finite()));
    }

    #[test]
    fn top_k_then_softmax_weighs_only_the_chosen() {
        let mut c = Vec::new();
        let r = Routing {
            used: 2,
            norm_topk: false,
            gating: Gating::TopKSoftmax,
        };
        route(&[0.5, 2.0, 2.0, -1.0, 1.0], r, &mut c);
        assert_eq!(c.iter().map(|c| c.expert).collect::<Vec<_>>(), [1, 2]);
        assert_eq!((c[0].weight, c[1].weight), (0.5, 0.5));
        route(&[0.0, 1.0, f32::NAN, 3.0], r, &mut c);
        assert_eq!(c.iter().map(|c| c.expert).collect::<Vec<_>>(), [3, 1]);
        let e = (-2.0f64).exp();
        assert!((c[0].weight as f64 - 1.0 / (1.0 + e)).abs() < 1e-6);
        assert!((c[1].weight as f64 - e / (1.0 + e)).abs() < 1e-6);
    }

    #[test]
    fn combine_sums_in_rank_order() {
        let choices = [
            Choice {
                expert: 4,
                weight: 0.75,
            },
            Choice {
                expert: 1,
                weight: 0.25,
            },
        ];
        let ys = [1.0, 2.0, 4.0, 8.0];
        let mut out = [9.0; 2];
        combine(&choices, &ys, &mut out);
        assert_eq!(out, [0.75 + 0.25 * 4.0, 1.5 + 0.25 * 8.0]);
    }
}
