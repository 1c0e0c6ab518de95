//! The sampler's definition written the slow, obvious way: a full sort of the vocabulary, a
//! counting map for penalties, no pruning. The fast path must equal it bit for bit.

use super::super::filter::{exp_nonpos, mass_q};
use super::super::{gumbel, SamplingParams};
use std::cmp::Ordering;
use std::collections::BTreeMap;

pub(super) fn penalized_reference(
    logits: &[f32],
    params: &SamplingParams,
    history: &[u32],
) -> Vec<f32> {
    let mut z: Vec<f32> = logits
        .iter()
        .map(|&v| if v.is_nan() { f32::NEG_INFINITY } else { v })
        .collect();
    let mut counts: BTreeMap<usize, u32> = BTreeMap::new();
    for &t in history {
        if (t as usize) < z.len() {
            *counts.entry(t as usize).or_default() += 1;
        }
    }
    let penalized = params.repetition_penalty != 1.0
        || params.presence_penalty != 0.0
        || params.frequency_penalty != 0.0;
    if penalized {
        for (&t, &c) in &counts {
            let mut v = z[t];
            let r = params.repetition_penalty;
            if r != 1.0 {
                v = if v > 0.0 { v / r } else { v * r };
            }
            v -= params.frequency_penalty * c as f32;
            v -= params.presence_penalty;
            z[t] = if v.is_nan() { f32::NEG_INFINITY } else { v };
        }
    }
    z
}

fn greedy_reference(z: &[f32]) -> u32 {
    let mut best = 0;
    for i in 1..z.len() {
        if z[i] > z[best] {
            best = i;
        }
    }
    best as u32
}

pub(super) fn sample_reference(
    logits: &[f32],
    params: &SamplingParams,
    seed: u64,
    position: u64,
    history: &[u32],
) -> u32 {
    let z = penalized_reference(logits, params, history);
    let t = params.temperature;
    if !(t > 0.0 && t.is_finite()) {
        return greedy_reference(&z);
    }
    let mut order: Vec<u32> = (0..z.len() as u32).collect();
    order.sort_by(|&a, &b| {
        z[b as usize]
            .partial_cmp(&z[a as usize])
            .unwrap_or(Ordering::Equal)
            .then(a.cmp(&b))
    });
    let m = z[order[0] as usize];
    if !m.is_finite() {
        return order[0];
    }
    if params.top_k > 0 && params.top_k < order.len() {
        order.truncate(params.top_k);
    }
    let inv_t = 1.0 / f64::from(t);
    let x: Vec<f64> = order
        .iter()
        .map(|&id| (f64::from(z[id as usize]) - f64::from(m)) * inv_t)
        .collect();
    let w: Vec<f64> = x.iter().map(|&x| exp_nonpos(x)).collect();
    let mut keep = order.len();
    if params.top_p < 1.0 {
        let total: u128 = w.iter().map(|&w| u128::from(mass_q(w))).sum();
        let target = ((total as f64) * f64::from(params.top_p)).ceil() as u128;
        let mut cum = 0u128;
        for (j, &wj) in w.iter().enumerate() {
            cum += u128::from(mass_q(wj));
            if cum >= target {
                keep = j + 1;
                break;
            }
        }
    }
    let min_p = f64::from(params.min_p.min(1.0));
    let mut best: Option<(f64, u32)> = None;
    for j in 0..keep {
        if params.min_p > 0.0 && w[j] < min_p {
            continue;
        }
        let id = order[j];
        let score = x[j] + gumbel(seed, position, id);
        let better = match best {
            None => true,
            Some((s, b)) => score > s || (score == s && id < b),
        };
        if better {
            best = Some((score, id));
        }
    }
    best.expect("rank 0 is always kept").1
}
