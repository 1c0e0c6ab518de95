//! The engine's contract on a hybrid recurrent model (a tiny synthetic Qwen3.5: three Gated
//! DeltaNet layers, then a gated full-attention layer): drafted replies equal serial ones
//! (context copies forced, tree branches forced, a transformer draft model), concurrent requests
//! equal their solo runs (prefill chunks shared with other sequences' windows, a pool so small
//! that sequences are sent back to wait), and a conversation resumed from the prefix cache (the
//! state snapshots in RAM, then on disk) equals the same conversation served fresh, all by
//! `token_sha`. And the runner's rollback directly: after a window whose guesses were rejected,
//! or accepted along a tree branch, the next rows equal those of a run that never saw the
//! rejected ones, bit for bit.

mod common;

use common::*;
use std::path::PathBuf;
use std::sync::Arc;
use tf_core::{DType, TokenId};
use tf_engine::proposer::{Mtp, Proposer};
use tf_engine::runner::{ModelRunner, Runner, TreeRow};
use tf_engine::spill::SpillStore;
use tf_engine::{EngineConfig, Request};
use tf_kernels::attention::KeyRemap;
use tf_kernels::ThreadPool;
use tf_models::synth::{synth_gguf, SynthDelta, SynthSpec};
use tf_models::{Model, Row};
use tf_weights::GgufFile;

fn tiny(arch: &'static str, seed: u64, layers: usize, delta: bool) -> Arc<Model> {
    tiny_with(arch, seed, layers, delta, false)
}

fn tiny_with(arch: &'static str, seed: u64, layers: usize, delta: bool, mtp: bool) -> Arc<Model> {
    let mut spec = SynthSpec::tiny(arch, DType::Q8_0);
    spec.seed = seed;
    spec.n_layers = layers;
    spec.mtp = mtp;
    if delta {
        spec.rope_dim = Some(16);
        spec.delta = Some(SynthDelta {
            k_heads: 2,
            v_heads: 4,
            dk: 32,
            dv: 64,
            kernel: 4,
            interval: 4,
        });
    }
    let mut bytes = synth_gguf(&spec).to_bytes();
    centre(&mut bytes, seed, CENTRED);
    let gguf = GgufFile::from_bytes(bytes, "tiny.gguf").unwrap();
    Arc::new(Model::from_gguf(gguf).unwrap())
}

fn hybrid() -> Arc<Model> {
    let m = tiny("qwen35", 71, 4, true);
    assert_eq!(m.plan.recurrent().len(), 3);
    assert_eq!(m.plan.kv_layers(), 1);
    m
}

/// A transformer draft model of the same vocabulary.
fn draft() -> Arc<Model> {
    tiny("qwen3", 72, 1, false)
}

fn trees(min_drafts: usize) -> EngineConfig {
    EngineConfig {
        force_trees: true,
        tree_branches: 2,
        ..drafting(min_drafts)
    }
}

#[test]
fn drafted_equals_serial_on_a_hybrid_model() {
    let (target, d) = (hybrid(), draft());
    let mut drafted = 0;
    for sampled in [false, true] {
        for seed in 1..3u64 {
            let req = request(seed, sampled, 30 + 41 * seed as usize, 40);
            let want = serial(&target, &req);
            for (mode, with_draft, config) in [
                ("copies forced", false, drafting(3)),
                ("trees forced", false, trees(3)),
                ("draft model", true, drafting(0)),
                ("draft model forced", true, drafting(2)),
            ] {
                let what = format!("seed {seed} sampled {sampled} {mode}");
                let min = config.min_drafts;
                let got = solo(&target, with_draft.then_some(&d), config, &req);
                assert_same(&got, &want, &what);
                assert_forced(&got, min, &what);
                drafted += got.receipt.drafted;
            }
        }
    }
    assert!(drafted > 0, "nothing was drafted");
}

#[test]
fn concurrent_equals_solo_on_a_hybrid_model() {
    let target = hybrid();
    let mut rng = SplitMix64::new(19);
    let reqs: Vec<Request> = (0..6)
        .map(|i| request(710 + i, i % 2 == 1, 8 + rng.below(120), 12 + rng.below(30)))
        .collect();
    let want: Vec<Run> = reqs.iter().map(|r| serial(&target, r)).collect();
    for (mode, positions) in [("roomy", KV_POSITIONS), ("tight", 24 * 16)] {
        let config = EngineConfig {
            max_step_rows: 24,
            ..trees(2)
        };
        let mut b = bench(&target, None, 2, config, positions);
        let arrivals = reqs.iter().map(|r| (rng.below(20), r.clone())).collect();
        let runs = run_all(&mut b, arrivals);
        for (i, (run, want)) in runs.iter().zip(&want).enumerate() {
            assert_same(run, want, &format!("{mode}: request {i}"));
        }
    }
}

/// Long replies in a pool too small for them all: sequences are sent back to wait and start
/// again (from a state snapshot or from nothing), and their replies do not change.
#[test]
fn sequences_sent_back_to_wait_resume_exactly_on_a_hybrid_model() {
    let target = hybrid();
    let reqs: Vec<Request> = (0..4u64)
        .map(|i| {
            let mut r = request(30 + i, i % 2 == 1, 50 + 7 * i as usize, 180);
            r.ignore_eos = true;
            r
        })
        .collect();
    let want: Vec<Run> = reqs.iter().map(|r| serial(&target, r)).collect();
    let mut b = bench(&target, None, 2, drafting(2), 32 * 16);
    let runs = run_all(&mut b, reqs.iter().map(|r| (0, r.clone())).collect());
    assert!(b.engine.preemptions() > 0, "nothing was sent back to wait");
    for (i, (run, want)) in runs.iter().zip(&want).enumerate() {
        assert_same(run, want, &format!("request {i}"));
    }
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn resumed_equals_fresh_on_a_hybrid_model_from_ram_and_disk() {
    let target = hybrid();
    for tier in ["ram", "disk"] {
        let dir =
            TempDir(std::env::temp_dir().join(format!("tf-hybrid-{tier}-{}", std::process::id())));
        let mut b = bench(&target, None, 2, drafting(2), KV_POSITIONS);
        if tier == "disk" {
            let store = SpillStore::open(&dir.0, 1 << 30, b.engine.salt()).unwrap();
            b.engine.set_spill(store).unwrap();
            b.engine.set_cache_budget(0);
        }
        let mut req = request(820, tier == "disk", 40, 20);
        for turn in 0..5u64 {
            let run = run_all(&mut b, vec![(0, req.clone())]).pop().unwrap();
            let what = format!("{tier} turn {turn}");
            assert_same(&run, &serial(&target, &req), &what);
            if turn > 0 {
                assert!(run.receipt.cached_tokens >= 16, "{what}: nothing resumed");
            }
            let mut next: Vec<TokenId> = req.prompt.clone();
            next.extend(&run.tokens);
            next.extend(prompt(910 + turn, 15 + 7 * turn as usize));
            req.prompt = next;
        }
    }
}

fn row(seq: u64, table: &[u32], pos: usize, token: TokenId, keep: bool) -> Row<'_> {
    Row {
        token,
        pos,
        seq,
        keep,
        table,
        logits: true,
        tree: None,
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A window whose guesses are rejected (all, or after the first) leaves the state as if they
/// never ran; a tree branch's accepted rows become the sequence's, moved like their keys.
#[test]
fn rejected_guesses_leave_no_trace_and_tree_branches_commit_exactly() {
    let target = hybrid();
    let pool = Arc::new(ThreadPool::new(2));
    let tokens = prompt(5, 40);
    let table: Vec<u32> = (0..4).collect();
    // The reference: every token committed, one call.
    let mut fresh = ModelRunner::new(target.clone(), pool.clone(), 16 * 16, CONTEXT);
    let rows: Vec<Row> = (0..40)
        .map(|p| row(1, &table, p, tokens[p], true))
        .collect();
    let want = fresh.forward(&rows).unwrap();
    let vocab = target.config.vocab;
    let want_row = |p: usize| &want[p * vocab..(p + 1) * vocab];

    // Prefill 20, then a window at 20 guessing tokens[21] right and then two wrong tokens.
    let mut r = ModelRunner::new(target.clone(), pool.clone(), 16 * 16, CONTEXT);
    let pre: Vec<Row> = (0..20)
        .map(|p| row(1, &table, p, tokens[p], true))
        .collect();
    r.forward(&pre).unwrap();
    let window = [
        row(1, &table, 20, tokens[20], true),
        row(1, &table, 21, tokens[21], false),
        row(1, &table, 22, 7, false),
        row(1, &table, 23, 8, false),
    ];
    let out = r.forward(&window).unwrap();
    assert_eq!(
        bits(&out[vocab..2 * vocab]),
        bits(want_row(21)),
        "guess row"
    );
    // Accepted: tokens[21]. The next call starts at 22 with the true token.
    let next: Vec<Row> = (22..30)
        .map(|p| row(1, &table, p, tokens[p], true))
        .collect();
    let got = r.forward(&next).unwrap();
    for (i, p) in (22..30).enumerate() {
        let g = &got[i * vocab..(i + 1) * vocab];
        assert_eq!(
            bits(g),
            bits(want_row(p)),
            "position {p} after a rejected guess"
        );
    }
    // Every guess rejected: the next call starts right after the window's committed row.
    let window = [
        row(1, &table, 30, tokens[30], true),
        row(1, &table, 31, 9, false),
        row(1, &table, 32, 10, false),
    ];
    r.forward(&window).unwrap();
    let got = r.forward(&[row(1, &table, 31, tokens[31], true)]).unwrap();
    assert_eq!(
        bits(&got),
        bits(want_row(31)),
        "after a wholly rejected window"
    );

    // A tree: the chain guesses wrong at 32, a branch (slots 50, 51) guesses 32 and 33 right.
    let slots = [50usize, 51];
    let mut rows = vec![row(1, &table, 32, 11, false), row(1, &table, 33, 12, false)];
    for j in 0..2 {
        rows.push(Row {
            tree: Some(TreeRow {
                slot: slots[j],
                remap: KeyRemap {
                    base: 32,
                    slots: &slots[..=j],
                },
            }),
            ..row(1, &table, 32 + j, tokens[32 + j], false)
        });
    }
    // (A tree round starts with its committed row; here the committed state is already at 31.)
    let out = r.forward(&rows).unwrap();
    assert_eq!(
        bits(&out[3 * vocab..4 * vocab]),
        bits(want_row(33)),
        "branch row"
    );
    r.copy_slots(1, &table, &[(50, 32), (51, 33)]);
    let next: Vec<Row> = (34..40)
        .map(|p| row(1, &table, p, tokens[p], true))
        .collect();
    let got = r.forward(&next).unwrap();
    for (i, p) in (34..40).enumerate() {
        let g = &got[i * vocab..(i + 1) * vocab];
        assert_eq!(
            bits(g),
            bits(want_row(p)),
            "position {p} after a tree branch"
        );
    }

    // Another sequence resumes at block 2 from the snapshot the first one left there (the
    // blocks shared, as the prefix cache shares them), and equals the fresh run.
    assert!(
        r.resumable(table[1]),
        "the last block a call crossed keeps its state"
    );
    let table2 = [table[0], table[1], 9, 10];
    let rows: Vec<Row> = (32..40)
        .map(|p| row(2, &table2, p, tokens[p], true))
        .collect();
    let got = r.forward(&rows).unwrap();
    for (i, p) in (32..40).enumerate() {
        let g = &got[i * vocab..(i + 1) * vocab];
        assert_eq!(bits(g), bits(want_row(p)), "resumed at {p}");
    }
    // A sequence whose earlier positions were never run is an error, not a panic.
    let err = r.forward(&[row(3, &table2, 5, 1, true)]).unwrap_err();
    assert!(err.to_string().contains("no recurrent state"), "{err}");
    // Released: the sequence starts again from nothing.
    r.release(1);
    let again = r.forward(&[row(1, &table, 0, tokens[0], true)]).unwrap();
    assert_eq!(bits(&again), bits(want_row(0)));
}

/// The model's own multi-token-prediction head as the drafter: replies equal the serial ones
/// (the head guesses from the target's hidden states of committed rows, chained), and its
/// guesses were verified.
#[test]
fn the_mtp_head_drafts_and_replies_equal_serial() {
    let target = tiny_with("qwen35", 73, 4, true, true);
    assert!(target.weights().mtp.is_some() && target.plan.mtp.is_some());
    let mut drafted = 0;
    for sampled in [false, true] {
        for seed in 1..3u64 {
            let req = request(40 + seed, sampled, 30 + 23 * seed as usize, 40);
            let want = serial(&target, &req);
            // Costed, forced, and forced with the head's runner-up branch (greedy requests).
            for (mode, config) in [("", drafting(0)), ("", drafting(3)), (" trees", trees(3))] {
                let min_drafts = config.min_drafts;
                let mut b = bench_with(&target, 2, config, KV_POSITIONS, |pool, blocks| {
                    Some(Box::new(Mtp::new(target.clone(), pool, blocks)) as Box<dyn Proposer>)
                });
                let got = run_all(&mut b, vec![(0, req.clone())]).pop().unwrap();
                let what = format!("seed {seed} sampled {sampled} min_drafts {min_drafts}{mode}");
                assert_same(&got, &want, &what);
                drafted += source(&got.receipt, "mtp").0;
            }
        }
    }
    assert!(drafted > 0, "the head guessed nothing");
}

/// The head's rows are row-exact: its catch-up over a prompt in one call or one row at a time
/// gives the same bits.
#[test]
fn the_mtp_head_is_row_exact() {
    let target = tiny_with("qwen35", 74, 4, true, true);
    let pool = ThreadPool::new(2);
    let (d, vocab) = (target.config.d_model, target.config.vocab);
    let tokens = prompt(9, 33);
    let table: Vec<u32> = (0..3).collect();
    let mut r = ModelRunner::new(target.clone(), Arc::new(ThreadPool::new(2)), 48, CONTEXT);
    assert!(r.keep_hidden(true));
    let rows: Vec<Row> = (0..32)
        .map(|p| row(1, &table, p, tokens[p], true))
        .collect();
    r.forward(&rows).unwrap();
    let hidden = r.hidden().to_vec();
    assert_eq!(hidden.len(), 32 * d);
    let mtp_rows: Vec<Row> = (0..32)
        .map(|p| row(1, &table, p, tokens[p + 1], true))
        .collect();
    let mut kv = tf_kernels::kv::KvCache::new(1, 2, 64, 3, tf_kernels::kv::KvFormat::Bf16);
    let (whole, out) = target
        .forward_mtp(&pool, &mtp_rows, &hidden, &mut kv, None)
        .unwrap();
    let mut kv = tf_kernels::kv::KvCache::new(1, 2, 64, 3, tf_kernels::kv::KvFormat::Bf16);
    for (p, one) in mtp_rows.iter().enumerate() {
        let h = &hidden[p * d..(p + 1) * d];
        let (l, o) = target
            .forward_mtp(&pool, std::slice::from_ref(one), h, &mut kv, None)
            .unwrap();
        assert_eq!(
            bits(&l),
            bits(&whole[p * vocab..(p + 1) * vocab]),
            "row {p}"
        );
        assert_eq!(bits(&o), bits(&out[p * d..(p + 1) * d]), "hidden {p}");
    }
}

/// The Mamba-2 hybrid (the Nemotron-H oracle fixture: Mamba-2, MLP and attention blocks, F32):
/// drafted == serial (copies and trees forced), concurrent == solo, resumed == fresh.
#[test]
fn a_mamba2_hybrid_keeps_the_contract() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/tests/fixtures/families/nemotron_h/model.gguf");
    let target = Arc::new(Model::load(&path).unwrap());
    assert_eq!(target.plan.recurrent_sizes().len(), 3);
    let vocab = target.config.vocab;
    let req = |seed: u64, sampled: bool, len: usize, max: usize| {
        let mut r = SplitMix64::new(seed);
        let motif: Vec<TokenId> = (0..6).map(|_| 3 + r.below(vocab - 3) as TokenId).collect();
        let tokens = (0..len)
            .map(|i| match i % 12 < 6 {
                true => motif[i % 6],
                false => 3 + r.below(vocab - 3) as TokenId,
            })
            .collect();
        let mut q = Request::new(tokens, max);
        if sampled {
            q.params.temperature = 0.8;
            q.params.seed = Some(seed);
        }
        q
    };
    let mut checked = 0;
    for (seed, sampled) in [(1, false), (2, true)] {
        let q = req(seed, sampled, 40 + 9 * seed as usize, 32);
        let want = serial(&target, &q);
        for config in [drafting(3), trees(3)] {
            assert_same(
                &solo(&target, None, config, &q),
                &want,
                &format!("seed {seed}"),
            );
            checked += 1;
        }
    }
    let reqs: Vec<Request> = (0..4)
        .map(|i| req(30 + i, i % 2 == 1, 20 + 13 * i as usize, 24))
        .collect();
    let want: Vec<Run> = reqs.iter().map(|r| serial(&target, r)).collect();
    let config = EngineConfig {
        max_step_rows: 24,
        ..drafting(2)
    };
    let mut b = bench(&target, None, 2, config, KV_POSITIONS);
    let runs = run_all(
        &mut b,
        reqs.iter()
            .enumerate()
            .map(|(i, r)| (3 * i, r.clone()))
            .collect(),
    );
    for (i, (run, want)) in runs.iter().zip(&want).enumerate() {
        assert_same(run, want, &format!("concurrent {i}"));
        checked += 1;
    }
    let mut b = bench(&target, None, 2, drafting(2), KV_POSITIONS);
    let mut q = req(50, false, 40, 16);
    for turn in 0..3u64 {
        let run = run_all(&mut b, vec![(0, q.clone())]).pop().unwrap();
        assert_same(&run, &serial(&target, &q), &format!("turn {turn}"));
        if turn > 0 {
            assert!(
                run.receipt.cached_tokens >= 16,
                "turn {turn}: nothing resumed"
            );
        }
        q.prompt.extend(&run.tokens);
        q.prompt.extend(req(60 + turn, false, 11, 1).prompt);
        checked += 1;
    }
    assert_eq!(checked, 11);
}

/// For a greedy request the head also offers its runner-up first token and the guess after it
/// (a tree branch), once per proposal.
#[test]
fn the_mtp_head_offers_its_runner_up_as_a_branch() {
    let target = tiny_with("qwen35", 75, 4, true, true);
    let pool = Arc::new(ThreadPool::new(2));
    let tokens = prompt(11, 30);
    let table: Vec<u32> = (0..4).collect();
    let mut r = ModelRunner::new(target.clone(), pool.clone(), 64, CONTEXT);
    assert!(r.keep_hidden(true));
    let rows: Vec<Row> = (0..29)
        .map(|p| row(1, &table, p, tokens[p], true))
        .collect();
    r.forward(&rows).unwrap();
    let mut head = Mtp::new(target.clone(), pool, 4);
    head.hidden(1, 0, r.hidden());
    let params = tf_engine::SamplingParams::greedy();
    let view = seq_view(1, &tokens, &table, &[], &params);
    let guesses = head.propose(&view, 3);
    assert_eq!(guesses.len(), 3);
    let branches = head.branches();
    assert_eq!(branches.len(), 1);
    assert_eq!(branches[0].len(), 2);
    assert_ne!(
        branches[0][0], guesses[0],
        "the runner-up differs from the guess"
    );
    assert!(head.branches().is_empty(), "taken once");
}
