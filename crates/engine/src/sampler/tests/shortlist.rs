//! Draws decided from shortlists ([`Shortlist::token`]) are the sampler's draws.

use super::{random_logits, SplitMix64};
use crate::sampler::{NoiseKey, Sampler, SamplingParams, Shortlist, SHORTLIST_SLACK};

fn plain(temperature: f32) -> SamplingParams {
    SamplingParams {
        temperature,
        ..SamplingParams::default()
    }
}

/// Rows with NaN, infinities, ties and all-(-inf), random rows of up to 3,000 tokens, four
/// temperatures: a shortlist of any length either decides the sampler's token or declines, one
/// that lists everything always decides, and scores moved by a thousandth of the slack (a
/// device's different `ln`) decide the same way.
#[test]
fn shortlist_tokens_are_the_sampler_tokens() {
    let mut rng = SplitMix64::new(31);
    let mut sampler = Sampler::new();
    let mut rows: Vec<Vec<f32>> = vec![
        vec![1.0, 3.0, 2.0, 3.0],
        vec![f32::NAN, 0.5, 0.5, f32::NAN],
        vec![f32::NAN, f32::NEG_INFINITY, f32::NAN],
        vec![f32::NEG_INFINITY, f32::INFINITY, f32::NAN, f32::INFINITY],
        vec![0.0; 50],
    ];
    for case in 0..200 {
        let vocab = 1 + rng.below(3000);
        rows.push(random_logits(
            &mut rng,
            vocab,
            [1.0, 8.0, 30.0][case % 3],
            case % 2 == 0,
        ));
    }
    let (mut decided, mut declined) = (0, 0);
    for (case, logits) in rows.iter().enumerate() {
        let temperature = [0.05, 0.7, 1.0, 2.0][case % 4];
        let key = NoiseKey {
            seed: rng.next_u64(),
            position: rng.below(100_000) as u64,
            temperature,
        };
        let params = plain(temperature);
        assert!(params.draws_plain());
        let want = sampler.sample(logits, &params, key.seed, key.position, &[]);
        let all = Shortlist::of_row(logits, key, logits.len());
        assert_eq!(all.token(), Some(want), "case {case}: the whole row listed");
        for keep in [0, 1, 2, 4] {
            let mut list = Shortlist::of_row(logits, key, keep);
            match list.token() {
                Some(t) => {
                    assert_eq!(t, want, "case {case}, keep {keep}");
                    decided += usize::from(keep > 0);
                }
                None => declined += usize::from(keep > 0),
            }
            let nudge = |s: &mut f64, i: usize| {
                *s += if i.is_multiple_of(2) { 1e-3 } else { -1e-3 } * SHORTLIST_SLACK;
            };
            for (i, c) in list.candidates.iter_mut().enumerate() {
                nudge(&mut c.0, i);
            }
            nudge(&mut list.spill, keep);
            if let Some(t) = list.token() {
                assert_eq!(t, want, "case {case}, keep {keep}, nudged");
            }
        }
    }
    // Most rows are decided by a short list.
    assert!(
        decided > 3 * declined,
        "{decided} decided, {declined} declined"
    );
}

/// A list that leaves out a token scoring within twice the slack of its best declines.
#[test]
fn a_close_score_left_out_declines() {
    let key = NoiseKey {
        seed: 5,
        position: 9,
        temperature: 1.0,
    };
    let logits = [0.5f32, 2.0, 1.0];
    let mut list = Shortlist::of_row(&logits, key, 1);
    assert!(list.token().is_some());
    list.spill = list.candidates[0].0 - SHORTLIST_SLACK;
    assert_eq!(list.token(), None);
    list.spill = f64::NAN;
    assert_eq!(list.token(), None);
}

#[test]
fn draws_plain_is_temperature_alone() {
    assert!(SamplingParams::default().draws_plain());
    let not = [
        SamplingParams::greedy(),
        SamplingParams {
            top_k: 5,
            ..SamplingParams::default()
        },
        SamplingParams {
            top_p: 0.9,
            ..SamplingParams::default()
        },
        SamplingParams {
            min_p: 0.05,
            ..SamplingParams::default()
        },
        SamplingParams {
            presence_penalty: 0.1,
            ..SamplingParams::default()
        },
        SamplingParams {
            repetition_penalty: 1.2,
            ..SamplingParams::default()
        },
    ];
    assert!(not.iter().all(|p| !p.draws_plain()));
}
