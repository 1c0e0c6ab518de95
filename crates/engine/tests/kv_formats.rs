//! Every KV format keeps the engine's promises: drafted == serial, concurrent == solo and
//! resumed == fresh hold with keys and values stored as f32, bf16 or q8_0 (the other engine
//! tests run the default, bf16); and a 32k-token conversation resumed from the disk tier equals
//! the same conversation served fresh.

mod common;

use std::sync::Arc;

use common::*;
use tf_core::{DType, TokenId};
use tf_engine::cost::CostModel;
use tf_engine::{Engine, EngineConfig, ModelRunner, Request, Runner, SpillStore};
use tf_kernels::kv::{KvFormat, BLOCK_SIZE};
use tf_kernels::ThreadPool;
use tf_models::synth::{synth_gguf, SynthSpec};
use tf_models::Model;
use tf_weights::GgufFile;

#[test]
fn every_format_keeps_drafted_concurrent_and_resumed_replies_exact() {
    let pair = &pairs(REPETITIVE)[1];
    for format in KvFormat::ALL {
        with_kv_format(format, || {
            let reqs: Vec<Request> = (0..3)
                .map(|i| request(700 + i, i % 2 == 1, 40 + 9 * i as usize, 24))
                .collect();
            let serial_runs: Vec<Run> = reqs.iter().map(|r| serial(&pair.target, r)).collect();
            // Drafted alone: forced copies, and the draft model.
            for (i, (req, want)) in reqs.iter().zip(&serial_runs).enumerate() {
                let what = format!("{format:?} request {i}");
                let copies = solo(&pair.target, None, drafting(3), req);
                assert_forced(&copies, 3, &what);
                assert_same(&copies, want, &format!("{what}, copies"));
                let drafted = solo(&pair.target, Some(&pair.draft), drafting(0), req);
                assert_same(&drafted, want, &format!("{what}, draft model"));
            }
            // Concurrent, drafted: each equals its serial run.
            let mut b = bench(
                &pair.target,
                Some(&pair.draft),
                2,
                drafting(0),
                KV_POSITIONS,
            );
            let runs = run_all(&mut b, reqs.iter().cloned().enumerate().collect());
            for (i, (got, want)) in runs.iter().zip(&serial_runs).enumerate() {
                assert_same(got, want, &format!("{format:?} concurrent request {i}"));
            }
            // Resumed: each turn continues the last from the prefix cache.
            let mut b = bench(&pair.target, None, 2, drafting(3), KV_POSITIONS);
            let mut req = reqs[0].clone();
            for turn in 0..4 {
                let run = run_all(&mut b, vec![(0, req.clone())]).pop().unwrap();
                let what = format!("{format:?} turn {turn}");
                assert_same(&run, &serial(&pair.target, &req), &what);
                if turn > 0 {
                    assert!(
                        run.receipt.cached_tokens >= BLOCK_SIZE,
                        "{what}: no cache hit"
                    );
                }
                let mut next: Vec<TokenId> = req.prompt.clone();
                next.extend(&run.tokens);
                next.extend(prompt(900 + turn, 17));
                req.prompt = next;
            }
        });
    }
}

/// Positions of the long conversation's first prompt.
const LONG: usize = 32 * 1024;
const LONG_CONTEXT: usize = LONG + 256;

/// A one-layer model (one KV head of 64) trained for a context past [`LONG`].
fn long_model() -> Arc<Model> {
    let mut spec = SynthSpec::tiny("qwen2", DType::Q8_0);
    spec.n_layers = 1;
    spec.d_model = 128;
    spec.n_heads = 2;
    spec.n_kv_heads = 1;
    spec.ffn_dim = 256;
    spec.context_len = LONG_CONTEXT;
    spec.seed = 32;
    let gguf = GgufFile::from_bytes(synth_gguf(&spec).to_bytes(), "long.gguf").unwrap();
    Arc::new(Model::from_gguf(gguf).unwrap())
}

fn long_bench(model: &Arc<Model>, config: EngineConfig, spill: Option<&std::path::Path>) -> Bench {
    let pool = Arc::new(ThreadPool::new(2));
    let runner = ModelRunner::new(model.clone(), pool, LONG_CONTEXT + 64, LONG_CONTEXT);
    let blocks = runner.kv_blocks();
    let mut engine = Engine::new(Box::new(runner), config, CostModel::flat());
    if let Some(dir) = spill {
        let store = SpillStore::open(dir, 1 << 30, engine.salt()).unwrap();
        engine.set_spill(store).unwrap();
    }
    Bench { engine, blocks }
}

#[test]
fn a_32k_conversation_resumed_from_disk_equals_a_fresh_one() {
    let model = long_model();
    let dir = std::env::temp_dir().join(format!("tf-kv-long-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let first = request(31, true, LONG, 12);
    // Turn one, drafted, then everything written to disk as at a shutdown.
    let mut a = long_bench(&model, drafting(2), Some(&dir));
    let one = run_all(&mut a, vec![(0, first.clone())]).pop().unwrap();
    assert!(a.engine.spill_all() >= LONG / BLOCK_SIZE);
    drop(a);
    // Turn two on a new engine over the same directory: its prefix comes from disk.
    let mut second = first.clone();
    second.prompt = [first.prompt.clone(), one.tokens.clone(), prompt(32, 40)].concat();
    let mut b = long_bench(&model, drafting(2), Some(&dir));
    let resumed = run_all(&mut b, vec![(0, second.clone())]).pop().unwrap();
    assert!(
        resumed.receipt.cached_tokens >= LONG,
        "only {} tokens came from the cache",
        resumed.receipt.cached_tokens
    );
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
    // The same turn served fresh, serially.
    let mut c = long_bench(&model, serial_config(), None);
    let fresh = run_all(&mut c, vec![(0, second)]).pop().unwrap();
    assert_eq!(fresh.receipt.cached_tokens, 0);
    assert_same(
        &resumed,
        &fresh,
        "32k-token conversation, resumed from disk",
    );
}
