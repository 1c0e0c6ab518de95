mod reference;
mod shortlist;

use super::filter::{exp_nonpos, mass_pass_with, mass_q, rank_cmp, top_k_sorted, Isa, Scale};
use super::philox::gumbel_prefix_bounds;
use super::philox::NoiseCache;
use super::*;
use reference::{penalized_reference, sample_reference};
use std::sync::Arc;
use tf_core::SplitMix64;
use tf_kernels::ThreadPool;

// Random123 `tests/kat_vectors`, the three "philox4x32 10" lines: counter (4 words), key
// (2 words), expected output (4 words).
const PHILOX_KAT: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
    (
        [0; 4],
        [0; 2],
        [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
    ),
    (
        [0xffffffff; 4],
        [0xffffffff; 2],
        [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
    ),
    (
        [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
        [0xa4093822, 0x299f31d0],
        [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
    ),
];

#[test]
fn philox_known_answers() {
    for (counter, key, expected) in PHILOX_KAT {
        assert_eq!(
            philox4x32_10(counter, key),
            expected,
            "counter {counter:x?} key {key:x?}"
        );
    }
}

#[test]
fn batched_philox_words_equal_one_call_per_block() {
    let cases = [
        (0u64, 0u32, [0u32, 0u32]),
        (7, 16, [0xDEAD_BEEF, 0x1234_5678]),
        (u64::MAX, u32::MAX - 5, [u32::MAX, 1]),
        (1 << 40, 37_984, [42, 0]),
    ];
    for (position, block, key) in cases {
        let words = super::philox::philox_words64(position, block, key);
        for i in 0..16u32 {
            let b = block.wrapping_add(i);
            let one = philox4x32_10([position as u32, (position >> 32) as u32, b, 0], key);
            assert_eq!(
                &words[4 * i as usize..4 * i as usize + 4],
                &one,
                "{position} {b}"
            );
        }
    }
}

#[test]
fn gumbel_is_the_documented_mapping() {
    let seed = 0x0123_4567_89ab_cdef_u64;
    let position = (7u64 << 32) | 11;
    for token in [0u32, 1, 2, 3, 4, 5, 151_935] {
        let words = philox4x32_10([11, 7, token / 4, 0], [0x89ab_cdef, 0x0123_4567]);
        let u = (f64::from(words[(token % 4) as usize]) + 0.5) / 4_294_967_296.0;
        assert_eq!(gumbel(seed, position, token), -(-u.ln()).ln());
    }
    let mut cache = NoiseCache::new(seed, position);
    for token in (0..300u32).chain([77, 3, 151_935, 2]) {
        assert_eq!(cache.gumbel(token), gumbel(seed, position, token));
    }
}

#[test]
fn uniform_stays_open_and_gumbel_under_its_bound() {
    assert_eq!(uniform_open01(0), 2f64.powi(-33));
    assert_eq!(uniform_open01(u32::MAX), 1.0 - 2f64.powi(-33));
    let hi = gumbel_from_word(u32::MAX);
    let lo = gumbel_from_word(0);
    assert!(
        hi.is_finite() && hi < GUMBEL_UPPER_BOUND && hi > 22.0,
        "{hi}"
    );
    assert!(lo.is_finite() && lo < -3.0, "{lo}");
}

#[test]
fn prefix_bounds_cover_every_word_of_their_prefix() {
    let bounds = gumbel_prefix_bounds();
    for b in 0..256u32 {
        let lo = b << 24;
        for word in [
            lo,
            lo + 1,
            lo | 0x0080_0000,
            lo | 0x00FF_FFFE,
            lo | 0x00FF_FFFF,
        ] {
            assert!(
                gumbel_from_word(word) <= bounds[b as usize],
                "word {word:#x}"
            );
        }
    }
    let mut rng = SplitMix64::new(6);
    for _ in 0..100_000 {
        let word = rng.next_u64() as u32;
        assert!(gumbel_from_word(word) <= bounds[(word >> 24) as usize]);
    }
    assert!(bounds[255] <= GUMBEL_UPPER_BOUND);
}

/// The mass pass gives the same bits through every compiled variant this CPU runs.
#[test]
fn mass_pass_variants_agree() {
    let mut isas = vec![Isa::Portable];
    match Isa::detect() {
        Isa::Avx512 => isas.extend([Isa::Avx2, Isa::Avx512]),
        Isa::Avx2 => isas.push(Isa::Avx2),
        Isa::Portable => {}
    }
    let mut rng = SplitMix64::new(7);
    for case in 0..40 {
        let vocab = 1 + rng.below(20_000);
        let z: Vec<f32> = random_logits(&mut rng, vocab, [1.0, 30.0, 300.0][case % 3], false)
            .into_iter()
            .map(|v| if v.is_nan() { f32::NEG_INFINITY } else { v })
            .collect();
        let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if !m.is_finite() {
            continue;
        }
        let scale = Scale::new(m, [0.05, 1.0, 2.0][case % 3]);
        let mut results = Vec::new();
        for &isa in &isas {
            let (mut q, mut b) = (vec![0u64; vocab], vec![0u8; vocab]);
            let total = mass_pass_with(isa, &z, scale, &mut q, &mut b);
            results.push((total, q, b));
        }
        for r in &results[1..] {
            assert!(*r == results[0], "case {case}");
        }
    }
}

fn stream(seed: u64, position: u64) -> Vec<f64> {
    (0..64).map(|t| gumbel(seed, position, t)).collect()
}

#[test]
fn noise_streams_are_independent() {
    let (s, p) = (1234u64, 5678u64);
    let base = stream(s, p);
    for (s2, p2) in [
        (s, p + 1),
        (s + 1, p),
        (s + 1, p - 1), // would collide if the key were seed + position
        (s - 1, p + 1),
        (s, p + (1 << 32)),
        (s + (1 << 32), p),
        (p, s),
    ] {
        let other = stream(s2, p2);
        let same = base.iter().zip(&other).filter(|(a, b)| a == b).count();
        assert_eq!(
            same, 0,
            "seed {s2} position {p2} repeats seed {s} position {p}"
        );
    }
    // Tokens of one stream differ from each other, too.
    let mut sorted = base.clone();
    sorted.sort_by(f64::total_cmp);
    sorted.dedup();
    assert_eq!(sorted.len(), base.len());
}

#[test]
fn default_seed_is_fnv1a_of_le_bytes() {
    assert_eq!(default_seed(&[]), 0xcbf2_9ce4_8422_2325);
    // Independently computed (Python) FNV-1a 64 over the bytes 01 00 00 00 02 00 00 00 ...
    assert_eq!(default_seed(&[1, 2, 3, 151_935]), 0xcb60_bfee_88dc_9497);
    assert_ne!(default_seed(&[1, 2]), default_seed(&[2, 1]));
    let params = SamplingParams::default();
    assert_eq!(params.seed_for(&[1, 2]), default_seed(&[1, 2]));
    let seeded = SamplingParams {
        seed: Some(9),
        ..params
    };
    assert_eq!(seeded.seed_for(&[1, 2]), 9);
}

#[test]
fn greedy_takes_the_lowest_id_on_ties_and_ignores_nan() {
    let g = SamplingParams::greedy();
    assert_eq!(sample(&[1.0, 3.0, 2.0, 3.0], &g, 0, 0, &[]), 1);
    assert_eq!(sample(&[f32::NAN, 0.5, 0.5, f32::NAN], &g, 0, 0, &[]), 1);
    assert_eq!(sample(&[-0.0, 0.0], &g, 0, 0, &[]), 0);
    assert_eq!(sample(&[f32::NAN; 3], &g, 0, 0, &[]), 0);
    assert_eq!(sample(&[f32::NEG_INFINITY, -1e30], &g, 0, 0, &[]), 1);
    // A NaN never wins at any temperature, and an infinite maximum is drawn greedily.
    let hot = SamplingParams::default();
    for pos in 0..50 {
        assert_ne!(sample(&[f32::NAN, 0.0, 0.0], &hot, 3, pos, &[]), 0);
        assert_eq!(
            sample(&[0.0, f32::INFINITY, f32::INFINITY], &hot, 3, pos, &[]),
            1
        );
    }
}

fn random_logits(rng: &mut SplitMix64, vocab: usize, spread: f32, ties: bool) -> Vec<f32> {
    (0..vocab)
        .map(|_| {
            let v = (rng.next_f32() - 0.5) * 2.0 * spread;
            match rng.below(200) {
                0 => f32::NAN,
                1 => f32::NEG_INFINITY,
                _ if ties => (v * 2.0).round() / 2.0,
                _ => v,
            }
        })
        .collect()
}

#[test]
fn greedy_token_is_what_greedy_parameters_draw() {
    let mut rng = SplitMix64::new(7);
    let mut sampler = Sampler::new();
    let edge: [&[f32]; 6] = [
        &[1.0, 3.0, 2.0, 3.0],
        &[f32::NAN, 0.5, 0.5, f32::NAN],
        &[-0.0, 0.0],
        &[0.0, -0.0, f32::NAN],
        &[f32::NAN, f32::NEG_INFINITY, f32::NAN],
        &[f32::NEG_INFINITY, f32::INFINITY, f32::NAN, f32::INFINITY],
    ];
    let mut rows: Vec<Vec<f32>> = edge.iter().map(|r| r.to_vec()).collect();
    for case in 0..300 {
        let vocab = 1 + rng.below(3000);
        rows.push(random_logits(&mut rng, vocab, 8.0, case % 2 == 0));
    }
    let mut all_low = vec![f32::NEG_INFINITY; 40];
    all_low[17] = f32::NAN;
    rows.push(all_low);
    for (case, logits) in rows.iter().enumerate() {
        let history: Vec<u32> = (0..rng.below(20)).map(|_| rng.below(3000) as u32).collect();
        for params in [
            SamplingParams::greedy(),
            SamplingParams {
                temperature: [0.3, 1.0, 2.0][case % 3],
                top_k: 1,
                top_p: 0.5,
                ..SamplingParams::default()
            },
        ] {
            assert!(params.draws_greedy());
            let want = sampler.sample(logits, &params, case as u64, 3, &history);
            assert_eq!(greedy_token(logits), want, "case {case}, {params:?}");
        }
    }
    // Anything that changes a logit or draws noise is not greedy.
    let not = [
        SamplingParams::default(),
        SamplingParams {
            presence_penalty: 0.5,
            ..SamplingParams::greedy()
        },
        SamplingParams {
            frequency_penalty: -0.1,
            ..SamplingParams::greedy()
        },
        SamplingParams {
            repetition_penalty: 1.1,
            top_k: 1,
            ..SamplingParams::default()
        },
    ];
    assert!(not.iter().all(|p| !p.draws_greedy()));
}

#[test]
fn top_k_one_is_greedy_at_any_temperature() {
    let mut rng = SplitMix64::new(1);
    let mut sampler = Sampler::new();
    for case in 0..200 {
        let vocab = 1 + rng.below(3000);
        let logits = random_logits(&mut rng, vocab, 8.0, case % 2 == 0);
        let history: Vec<u32> = (0..rng.below(20)).map(|_| rng.below(3000) as u32).collect();
        let params = SamplingParams {
            temperature: [0.01, 0.7, 1.0, 2.0][case % 4],
            top_k: 1,
            repetition_penalty: 1.3,
            presence_penalty: 0.5,
            ..SamplingParams::default()
        };
        let greedy = SamplingParams {
            temperature: 0.0,
            ..params
        };
        let want = sampler.sample(&logits, &greedy, 0, 0, &history);
        for pos in 0..5 {
            assert_eq!(
                sampler.sample(&logits, &params, case as u64, pos, &history),
                want
            );
        }
    }
}

#[test]
fn top_k_selection_equals_full_sort() {
    let mut rng = SplitMix64::new(2);
    for case in 0..300 {
        let vocab = 2 + rng.below(5000);
        let z: Vec<f32> = random_logits(&mut rng, vocab, 4.0, case % 2 == 0)
            .into_iter()
            .map(|v| if v.is_nan() { f32::NEG_INFINITY } else { v })
            .collect();
        let k = 1 + rng.below(vocab - 1);
        let mut all: Vec<u32> = (0..vocab as u32).collect();
        all.sort_by(|&a, &b| rank_cmp(&z, a, b));
        let mut fast = Vec::new();
        top_k_sorted(&z, k, &mut fast);
        assert_eq!(fast, all[..k], "vocab {vocab} k {k}");
    }
}

#[test]
fn exp_nonpos_is_accurate_and_exact_at_zero() {
    assert_eq!(exp_nonpos(0.0), 1.0);
    assert_eq!(exp_nonpos(-0.0), 1.0);
    assert_eq!(exp_nonpos(f64::NEG_INFINITY), 0.0);
    assert_eq!(exp_nonpos(-709.0), 0.0);
    assert_eq!(mass_q(1.0), 1 << 52);
    assert_eq!(mass_q(0.0), 0);
    let mut x = -700.0;
    while x < 0.0 {
        let (got, want) = (exp_nonpos(x), x.exp());
        assert!(
            ((got - want) / want).abs() < 4e-15,
            "x {x}: {got} vs {want}"
        );
        x += 0.0137;
    }
}

/// The fast path against the full-sort definition over many random rows and parameter sets.
#[test]
fn fast_path_equals_reference() {
    let mut rng = SplitMix64::new(3);
    let mut sampler = Sampler::new();
    // The passes over the whole vocabulary split over 2, 3 and 5 threads: the same tokens.
    let mut pooled: Vec<Sampler> = [2, 3, 5]
        .map(|t| Sampler::with_pool(Arc::new(ThreadPool::new(t))))
        .into();
    let mut checked = 0;
    for case in 0..600 {
        let vocab = [1, 2, 7, 64, 300, 1000, 4099][case % 7];
        let spread = [0.5, 4.0, 20.0, 80.0][rng.below(4)];
        let ties = rng.below(2) == 0;
        let logits = random_logits(&mut rng, vocab, spread, ties);
        let history: Vec<u32> = (0..rng.below(30))
            .map(|_| rng.below(vocab + 3) as u32)
            .collect();
        let params = SamplingParams {
            temperature: [0.0, 1e-6, 0.3, 0.7, 1.0, 1.5, 2.0][rng.below(7)],
            top_k: [0, 0, 1, 2, 5, 40, vocab.saturating_sub(1), vocab, vocab + 7][rng.below(9)],
            top_p: [1.0, 1.0, 0.95, 0.9, 0.5, 0.1, 1e-6][rng.below(7)],
            min_p: [0.0, 0.0, 0.01, 0.1, 0.5, 1.0][rng.below(6)],
            seed: None,
            presence_penalty: [0.0, 0.0, 0.5, -1.0][rng.below(4)],
            frequency_penalty: [0.0, 0.0, 0.3, -0.2][rng.below(4)],
            repetition_penalty: [1.0, 1.0, 1.2, 0.8][rng.below(4)],
        };
        params.validate().unwrap();
        let seed = rng.next_u64();
        for pos in 0..8 {
            let position = rng.next_u64() >> rng.below(64);
            let want = sample_reference(&logits, &params, seed, position, &history);
            let got = sampler.sample(&logits, &params, seed, position, &history);
            assert_eq!(got, want, "case {case} pos {pos} params {params:?}");
            let p = &mut pooled[pos % 3];
            let par = p.sample(&logits, &params, seed, position, &history);
            assert_eq!(par, want, "pooled: case {case} pos {pos} params {params:?}");
            checked += 1;
        }
    }
    assert_eq!(checked, 4800);
}

/// Full vocabulary size, with LLM-like logits (a few high, a long low tail) and with flat ones
/// (a crossing bucket holding thousands of tokens).
#[test]
fn fast_path_equals_reference_at_full_vocab() {
    const VOCAB: usize = 151_936;
    let mut rng = SplitMix64::new(4);
    let mut sampler = Sampler::new();
    let mut pooled = Sampler::with_pool(Arc::new(ThreadPool::new(4)));
    for case in 0..12 {
        let mut logits: Vec<f32> = (0..VOCAB).map(|_| (rng.next_f32() - 0.5) * 6.0).collect();
        if case % 2 == 0 {
            for _ in 0..50 {
                logits[rng.below(VOCAB)] = 8.0 + rng.next_f32() * 12.0;
            }
        }
        let history: Vec<u32> = (0..200).map(|_| rng.below(VOCAB) as u32).collect();
        for (top_k, top_p, min_p) in [
            (40, 1.0, 0.0),
            (0, 0.9, 0.0),
            (0, 0.5, 0.05),
            (0, 1.0, 0.1),
            (0, 1.0, 0.0),
            (1000, 0.95, 0.0),
        ] {
            let params = SamplingParams {
                temperature: [0.6, 1.0, 1.9][case % 3],
                top_k,
                top_p,
                min_p,
                repetition_penalty: 1.1,
                ..SamplingParams::default()
            };
            let position = rng.next_u64();
            let want = sample_reference(&logits, &params, 77, position, &history);
            let got = sampler.sample(&logits, &params, 77, position, &history);
            assert_eq!(got, want, "case {case} params {params:?}");
            let par = pooled.sample(&logits, &params, 77, position, &history);
            assert_eq!(par, want, "pooled: case {case} params {params:?}");
        }
    }
}

#[test]
fn sampling_is_deterministic_and_keyed() {
    let mut rng = SplitMix64::new(5);
    let logits = random_logits(&mut rng, 500, 2.0, false);
    let params = SamplingParams {
        top_p: 0.95,
        ..SamplingParams::default()
    };
    let mut reused = Sampler::new();
    let draws: Vec<u32> = (0..100)
        .map(|p| reused.sample(&logits, &params, 42, p, &[]))
        .collect();
    let again: Vec<u32> = (0..100)
        .map(|p| sample(&logits, &params, 42, p, &[]))
        .collect();
    assert_eq!(draws, again);
    // Out of order, positions give the same tokens.
    for p in (0..100).rev() {
        assert_eq!(
            reused.sample(&logits, &params, 42, p, &[]),
            draws[p as usize]
        );
    }
    let other_seed: Vec<u32> = (0..100)
        .map(|p| sample(&logits, &params, 43, p, &[]))
        .collect();
    assert_ne!(draws, other_seed);
}

/// At T = 1 without truncation the draws over positions follow the softmax; with top-k and
/// temperature, the softmax renormalized over the k best.
#[test]
fn empirical_distribution_matches_softmax() {
    let logits = [1.0f32, 0.5, 0.0, -0.5, -1.0, 2.0, -3.0];
    let cases = [(1.0f32, 0usize, &logits[..]), (0.5, 3, &logits[..])];
    const N: u64 = 200_000;
    for (t, k, row) in cases {
        let params = SamplingParams {
            temperature: t,
            top_k: k,
            ..SamplingParams::default()
        };
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        let kept = if k == 0 { row.len() } else { k };
        let mut want = vec![0.0f64; row.len()];
        for &i in &order[..kept] {
            want[i] = (f64::from(row[i]) / f64::from(t)).exp();
        }
        let total: f64 = want.iter().sum();
        want.iter_mut().for_each(|p| *p /= total);
        let mut counts = vec![0u64; row.len()];
        let mut sampler = Sampler::new();
        for pos in 0..N {
            counts[sampler.sample(row, &params, 2024, pos, &[]) as usize] += 1;
        }
        for (i, (&c, &p)) in counts.iter().zip(&want).enumerate() {
            let freq = c as f64 / N as f64;
            let sigma = (p * (1.0 - p) / N as f64).sqrt().max(1e-9);
            assert!(
                (freq - p).abs() < 5.0 * sigma,
                "T {t} k {k} token {i}: {freq} vs {p}"
            );
        }
    }
}

#[test]
fn penalties_read_only_the_history() {
    let logits = [2.0f32, 1.9, -1.0, 0.5];
    let g = SamplingParams {
        repetition_penalty: 2.0,
        ..SamplingParams::greedy()
    };
    assert_eq!(sample(&logits, &g, 0, 0, &[]), 0);
    assert_eq!(sample(&logits, &g, 0, 0, &[0]), 1); // 2.0 / 2 = 1.0 < 1.9
    assert_eq!(sample(&logits, &g, 0, 0, &[0, 9_999]), 1); // out-of-vocabulary ids are ignored
    let z = penalized_reference(&logits, &g, &[0, 2, 2]);
    assert_eq!(z, [1.0, 1.9, -2.0, 0.5]);
    let freq = SamplingParams {
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        ..SamplingParams::greedy()
    };
    let z = penalized_reference(&logits, &freq, &[3, 3, 3, 1]);
    assert_eq!(z, [2.0, 1.9 - 0.5 - 0.25, -1.0, 0.5 - 1.5 - 0.25]);
    // The fast path's working copy equals the reference's, and depends on nothing but history.
    let mut sampler = Sampler::new();
    sampler.sample(&logits, &freq, 0, 0, &[3, 3, 3, 1]);
    assert_eq!(sampler.z, z);
    assert!(sampler.counts.iter().all(|&c| c == 0));
    let hot = SamplingParams {
        frequency_penalty: 2.0,
        ..SamplingParams::default()
    };
    for pos in 0..20 {
        let a = sampler.sample(&logits, &hot, 5, pos, &[0, 0]);
        let b = sampler.sample(&logits, &hot, 5, pos, &[0, 0]);
        assert_eq!(a, b);
    }
}

#[test]
fn validation_names_the_bad_parameter() {
    assert!(SamplingParams::default().validate().is_ok());
    assert!(SamplingParams::greedy().validate().is_ok());
    let bad = |p: SamplingParams| p.validate().unwrap_err().to_string();
    let d = SamplingParams::default();
    assert_eq!(
        bad(SamplingParams {
            temperature: 2.5,
            ..d
        }),
        "temperature must be in [0, 2], got 2.5"
    );
    assert!(bad(SamplingParams {
        temperature: f32::NAN,
        ..d
    })
    .starts_with("temperature"));
    assert!(bad(SamplingParams { top_p: 0.0, ..d }).starts_with("top_p must be in (0, 1]"));
    assert!(bad(SamplingParams { top_p: 1.01, ..d }).starts_with("top_p"));
    assert!(bad(SamplingParams { min_p: -0.1, ..d }).starts_with("min_p must be in [0, 1]"));
    assert!(bad(SamplingParams {
        presence_penalty: 2.1,
        ..d
    })
    .starts_with("presence_penalty"));
    assert!(bad(SamplingParams {
        frequency_penalty: -3.0,
        ..d
    })
    .starts_with("frequency_penalty"));
    assert_eq!(
        bad(SamplingParams {
            repetition_penalty: 0.0,
            ..d
        }),
        "repetition_penalty must be a finite number > 0, got 0"
    );
    assert!(SamplingParams {
        temperature: 2.0,
        top_p: 1.0,
        min_p: 1.0,
        ..d
    }
    .validate()
    .is_ok());
}

/// Two tokens whose Philox words collide at one position tie exactly in score when their logits
/// are equal: the lower id must win, in the fast path and in the definition.
#[test]
fn exact_score_ties_go_to_the_lower_id() {
    const VOCAB: u32 = 151_936;
    let mut found = 0;
    for seed in 0..8u64 {
        let mut words: Vec<(u32, u32)> = (0..VOCAB)
            .map(|t| {
                let w = philox4x32_10([0, 0, t / 4, 0], [seed as u32, 0]);
                (w[(t % 4) as usize], t)
            })
            .collect();
        words.sort_unstable();
        for pair in words.windows(2) {
            if pair[0].0 != pair[1].0 {
                continue;
            }
            let (a, b) = (pair[0].1, pair[1].1);
            assert_eq!(gumbel(seed, 0, a), gumbel(seed, 0, b));
            let mut logits = vec![f32::NEG_INFINITY; VOCAB as usize];
            logits[a as usize] = 1.5;
            logits[b as usize] = 1.5;
            let params = SamplingParams::default();
            assert_eq!(sample(&logits, &params, seed, 0, &[]), a.min(b));
            assert_eq!(sample_reference(&logits, &params, seed, 0, &[]), a.min(b));
            found += 1;
        }
    }
    assert!(found > 0, "no Philox word collision found to test with");
}
