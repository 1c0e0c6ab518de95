//! The engine's contract on every family the layer plan adds (tiny synthetic GGUF models of each
//! family's layout and tensor types, sliding windows shorter than the prompts): drafted replies
//! equal serial ones (context copies forced, a draft model), concurrent requests equal their
//! solo runs, and a conversation resumed from the prefix cache equals the same conversation
//! served fresh, all by `token_sha`. Mixtures of experts (Qwen3-MoE, a Mixtral-style Llama) keep
//! the same contract: a row's experts and their sum depend on that row alone.

mod common;

use common::*;
use std::sync::Arc;
use tf_core::{DType, TokenId};
use tf_engine::{EngineConfig, Request};
use tf_models::synth::{synth_gguf, SynthSpec};
use tf_models::Model;
use tf_weights::GgufFile;

/// Keys a sliding layer sees: shorter than every prompt below, not a multiple of the KV block
/// or the attention chunk.
const WINDOW: usize = 21;

/// A tiny model of `arch` (`layers` layers; a draft of the same seed with fewer layers is its
/// first layers): with a sliding window, or with `experts` (experts, used per token) instead.
fn family_model(
    arch: &'static str,
    dtype: DType,
    seed: u64,
    layers: usize,
    experts: Option<(usize, usize)>,
) -> Arc<Model> {
    let mut spec = SynthSpec::tiny(arch, dtype);
    spec.seed = seed;
    spec.n_layers = layers;
    match experts {
        Some(e) => {
            spec.experts = Some(e);
            spec.ffn_dim = 256;
        }
        None => spec.sliding_window = Some(WINDOW),
    }
    if arch == "gpt-oss" {
        // MXFP4 experts with biases, sinks, alternating windows, YaRN.
        spec.expert_dtype = Some(DType::MXFP4);
        spec.sliding_window = Some(WINDOW);
        spec.yarn = Some((32.0, 16));
    }
    let mut bytes = synth_gguf(&spec).to_bytes();
    centre(&mut bytes, seed, CENTRED);
    let gguf = GgufFile::from_bytes(bytes, "tiny.gguf").unwrap();
    Arc::new(Model::from_gguf(gguf).unwrap())
}

/// (family, tensor type, layers, experts): Gemma 3 with five sliding layers and a global one,
/// Gemma 2 alternating, Phi-3's fused tensors with every layer sliding; Qwen3-MoE with 8
/// experts, 3 per token, a Mixtral-style Llama with 4, 2 per token, and gpt-oss (MXFP4
/// experts, sinks, a sliding and a full layer, YaRN) and OLMoE (q/k norms over the whole
/// projection, weights not renormalized).
type Experts = Option<(usize, usize)>;
const FAMILIES: [(&str, DType, usize, Experts); 7] = [
    ("gemma3", DType::Q4K, 6, None),
    ("gemma2", DType::Q8_0, 2, None),
    ("phi3", DType::Q4_1, 2, None),
    ("qwen3moe", DType::Q4K, 2, Some((8, 3))),
    ("llama", DType::Q8_0, 2, Some((4, 2))),
    ("gpt-oss", DType::Q8_0, 2, Some((4, 2))),
    ("olmoe", DType::Q4K, 2, Some((8, 2))),
];

fn families() -> Vec<Pair> {
    FAMILIES
        .iter()
        .enumerate()
        .map(|(i, &(arch, dtype, layers, experts))| {
            let seed = 60 + i as u64;
            let target = family_model(arch, dtype, seed, layers, experts);
            let slides = (0..layers)
                .filter(|&l| target.config.layer_slides(l))
                .count();
            assert!(slides > 0 || experts.is_some(), "{arch}: no sliding layer");
            assert_eq!(target.config.moe.is_some(), experts.is_some(), "{arch}");
            Pair {
                name: format!(
                    "{arch} {dtype:?}{}",
                    if experts.is_some() { " MoE" } else { "" }
                ),
                draft: family_model(arch, dtype, seed, 1, experts),
                target,
            }
        })
        .collect()
}

#[test]
fn drafted_equals_serial_on_every_family() {
    for pair in families() {
        let mut drafted = 0;
        for sampled in [false, true] {
            for seed in 1..3u64 {
                let req = request(seed, sampled, 30 + 41 * seed as usize, 40);
                let want = serial(&pair.target, &req);
                for (mode, draft, min_drafts) in [
                    ("copies forced", false, 3),
                    ("draft model", true, 0),
                    ("draft model forced", true, 2),
                ] {
                    let what = format!("{} seed {seed} sampled {sampled} {mode}", pair.name);
                    let d = draft.then_some(&pair.draft);
                    let got = solo(&pair.target, d, drafting(min_drafts), &req);
                    assert_same(&got, &want, &what);
                    assert_forced(&got, min_drafts, &what);
                    drafted += got.receipt.drafted;
                }
            }
        }
        assert!(drafted > 0, "{}: nothing was drafted", pair.name);
    }
}

#[test]
fn concurrent_equals_solo_on_every_family() {
    let mut rng = SplitMix64::new(17);
    for pair in families() {
        let reqs: Vec<Request> = (0..6)
            .map(|i| request(700 + i, i % 2 == 1, 8 + rng.below(120), 12 + rng.below(30)))
            .collect();
        let want: Vec<Run> = reqs.iter().map(|r| serial(&pair.target, r)).collect();
        for (mode, draft, min_drafts) in [("copies", false, 2), ("draft model", true, 0)] {
            let config = EngineConfig {
                max_step_rows: 24,
                ..drafting(min_drafts)
            };
            let mut b = bench(
                &pair.target,
                draft.then_some(&pair.draft),
                2,
                config,
                KV_POSITIONS,
            );
            let arrivals = reqs.iter().map(|r| (rng.below(20), r.clone())).collect();
            let runs = run_all(&mut b, arrivals);
            for (i, (run, want)) in runs.iter().zip(&want).enumerate() {
                assert_same(run, want, &format!("{} {mode}: request {i}", pair.name));
            }
        }
    }
}

#[test]
fn resumed_equals_fresh_on_every_family() {
    for (p, pair) in families().iter().enumerate() {
        let mut b = bench(
            &pair.target,
            Some(&pair.draft),
            2,
            drafting(0),
            KV_POSITIONS,
        );
        let mut req = request(800 + p as u64, p % 2 == 0, 40, 20);
        for turn in 0..5u64 {
            let run = run_all(&mut b, vec![(0, req.clone())]).pop().unwrap();
            let what = format!("{} turn {turn}", pair.name);
            assert_same(&run, &serial(&pair.target, &req), &what);
            if turn > 0 {
                assert!(run.receipt.cached_tokens >= 16, "{what}: nothing resumed");
            }
            let mut next: Vec<TokenId> = req.prompt.clone();
            next.extend(&run.tokens);
            next.extend(prompt(900 + turn, 15 + 7 * turn as usize));
            req.prompt = next;
        }
    }
}

/// A model whose every layer slides (Phi-3 here) gives back the blocks behind its window as a
/// reply grows, and its replies stay those of the serial run, alone and concurrent, and when a
/// conversation resumes from the prefix cache. The pool is smaller than one whole reply.
#[test]
fn all_sliding_models_free_the_blocks_behind_the_window() {
    let target = family_model("phi3", DType::Q4K, 41, 2, None);
    let reqs: Vec<Request> = (0..3u64)
        .map(|i| {
            let mut r = request(60 + i, i == 1, 40 + 9 * i as usize, 300);
            r.ignore_eos = true;
            r
        })
        .collect();
    let serials: Vec<Run> = reqs.iter().map(|r| serial(&target, r)).collect();
    // 16 blocks: 256 positions, fewer than one reply's 340.
    let config = EngineConfig {
        max_step_rows: 32,
        ..drafting(2)
    };
    let mut b = bench(&target, None, 2, config.clone(), 16 * 16);
    let runs = run_all(&mut b, reqs.iter().map(|r| (0, r.clone())).collect());
    assert!(b.engine.window_frees() > 0, "nothing was freed");
    for (i, (got, want)) in runs.iter().zip(&serials).enumerate() {
        assert_same(got, want, &format!("request {i}"));
        assert_eq!(got.tokens.len(), 300);
    }
    // The next turn of the first conversation, on this engine and on a fresh one.
    let mut next = reqs[0].clone();
    next.prompt.extend(&runs[0].tokens);
    next.prompt.extend(prompt(99, 12));
    next.max_tokens = 24;
    let resumed = run_all(&mut b, vec![(0, next.clone())]).remove(0);
    let fresh = solo(&target, None, config, &next);
    assert_same(&resumed, &fresh, "resumed");
}
