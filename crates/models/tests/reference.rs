//! Greedy decoding of the three catalogue models against llama.cpp's recorded continuations
//! (`shared/reference/`): the same tokens up to the first step where llama.cpp's own top-2 are
//! within 0.1 nats (and at least 16 tokens where there is no such near-tie), and at every matched
//! step log-probabilities close to llama.cpp's.
//!
//! Tolerances. llama.cpp itself is not exact. An independent float64 NumPy forward of the
//! dequantized weights (`scripts/gen_reference_oracle.py`, committed output in tests/fixtures/,
//! teacher-forced on llama.cpp's tokens) differs from llama.cpp's recorded log-probabilities by up
//! to 0.124 (1.5B), 0.065 (0.5B) and 0.171 (SmolLM2) on the chosen token, and by up to 0.66, 0.40
//! and 1.16 on top-5 entries. Exact arithmetic can therefore not meet tighter bounds than those,
//! and where the exact top-2 are within 0.1 nats (SmolLM2 chat-prime step 12: 0.02) llama.cpp's pick
//! is as arbitrary as ours. So the test checks:
//! - tokens: equal to llama.cpp's up to the first near-tie of llama.cpp's or of exact arithmetic;
//! - against the exact oracle (our real accuracy, q8 activations included): chosen token within
//!   0.25, top-5 within 0.6 (measured worst: 0.197 and 0.526, both SmolLM2, whose small width makes
//!   activation quantization count most; llama.cpp is 0.171 and 1.16 from the same oracle there);
//! - against llama.cpp: chosen token within 0.25, top-5 within 1.25.

mod common;
use common::*;
use serde_json::Value;
use tf_kernels::ThreadPool;
use tf_models::Model;

fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, b| a.max(*b)) as f64;
    let s: f64 = logits.iter().map(|v| (*v as f64 - m).exp()).sum();
    let ls = s.ln();
    logits.iter().map(|v| *v as f64 - m - ls).collect()
}

fn check(model_file: &str, reference: &str, oracle_file: &str) {
    let oracle: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/tests/fixtures/{oracle_file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    let model = Model::load(&model_path(model_file)).unwrap();
    let pool = ThreadPool::with_available_parallelism();
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(reference_dir().join(reference)).unwrap())
            .unwrap();
    let mut all = Vec::new();
    for case in doc["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let ids = |k: &str| -> Vec<u32> {
            case[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect()
        };
        let prompt = ids("prompt_ids");
        let want = ids("completion_ids");
        let steps = case["steps"].as_array().unwrap();
        let (got, logits) = greedy(&model, &pool, &prompt, want.len(), 64);
        // The first step where llama.cpp itself was nearly tied.
        let tie = steps.iter().position(|s| {
            let top = s["top"].as_array().unwrap();
            top.len() > 1 && (top[0][1].as_f64().unwrap() - top[1][1].as_f64().unwrap()).abs() < 0.1
        });
        // Where exact arithmetic is itself nearly tied, llama.cpp's pick is arbitrary too.
        let ocase = oracle["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap();
        let osteps = ocase["steps"].as_array().unwrap();
        let exact_tie = osteps.iter().position(|s| {
            let top = s["top"].as_array().unwrap();
            (top[0][1].as_f64().unwrap() - top[1][1].as_f64().unwrap()).abs() < 0.1
        });
        let tie = match (tie, exact_tie) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let must = tie.unwrap_or(want.len());
        assert!(tie.is_some() || must >= 16.min(want.len()));
        let mut matched = 0;
        let (mut worst_chosen, mut worst_top) = (0f64, 0f64);
        let mut worst_oracle_chosen = 0f64;
        let mut worst_oracle = 0f64;
        for i in 0..want.len() {
            if got[i] != want[i] {
                assert!(
                    i >= must,
                    "{model_file} {name}: token {i} is {} but llama.cpp chose {} (no near-tie before step {must})",
                    got[i],
                    want[i]
                );
                break;
            }
            let lp = log_softmax(&logits[i]);
            let step = &steps[i];
            worst_chosen =
                worst_chosen.max((lp[want[i] as usize] - step["logprob"].as_f64().unwrap()).abs());
            for pair in step["top"].as_array().unwrap() {
                let (id, l) = (
                    pair[0].as_u64().unwrap() as usize,
                    pair[1].as_f64().unwrap(),
                );
                worst_top = worst_top.max((lp[id] - l).abs());
            }
            let ostep = &osteps[i];
            worst_oracle_chosen = worst_oracle_chosen
                .max((lp[want[i] as usize] - ostep["llama_id_logprob"].as_f64().unwrap()).abs());
            for pair in ostep["top"].as_array().unwrap() {
                let (id, l) = (
                    pair[0].as_u64().unwrap() as usize,
                    pair[1].as_f64().unwrap(),
                );
                worst_oracle = worst_oracle.max((lp[id] - l).abs());
            }
            matched += 1;
        }
        eprintln!("{model_file} {name}: {matched}/{} match (tie {tie:?}); worst chosen {worst_chosen:.4}, worst top-5 {worst_top:.4}; vs exact f64 oracle: chosen {worst_oracle_chosen:.4}, top-5 {worst_oracle:.4}", want.len());
        all.push((
            name.to_string(),
            [worst_chosen, worst_top, worst_oracle_chosen, worst_oracle],
        ));
    }
    for (name, [chosen, top, o_chosen, o_top]) in all {
        assert!(
            o_chosen < 0.25 && o_top < 0.6,
            "{model_file} {name}: {o_chosen} / {o_top} from exact arithmetic"
        );
        assert!(
            chosen < 0.25 && top < 1.25,
            "{model_file} {name}: {chosen} / {top} from llama.cpp"
        );
    }
}

#[test]
fn qwen25_coder_15b_matches_llama_cpp() {
    check(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "llama.cpp-greedy-qwen2.5-coder-1.5b-q4_k_m.json",
        "oracle-qwen2.5-coder-1.5b-q4_k_m.json",
    );
}

#[test]
fn qwen25_coder_05b_matches_llama_cpp() {
    check(
        "qwen2.5-coder-0.5b-instruct.gguf",
        "llama.cpp-greedy-qwen2.5-coder-0.5b.json",
        "oracle-qwen2.5-coder-0.5b.json",
    );
}

#[test]
fn smollm2_135m_matches_llama_cpp() {
    check(
        "smollm2-135m-instruct-q4_1.gguf",
        "llama.cpp-greedy-smollm2-135m-q4_1.json",
        "oracle-smollm2-135m-q4_1.json",
    );
}
