//! Whole-model exactness on tiny synthetic models: a row's logits are the same bits whatever the
//! call around it (prefill chunking, other sequences' rows, thread count); GGUF and safetensors
//! copies of one model agree; bad models are refused with clear errors.

use tf_core::DType;
use tf_kernels::kv::{KvCache, KvFormat, BLOCK_SIZE};
use tf_kernels::ThreadPool;
use tf_models::synth::{synth_gguf, SynthSpec};
use tf_models::{Model, ModelError, Row};
use tf_weights::{GgufFile, MetaValue};

fn model(spec: &SynthSpec) -> Model {
    let bytes = synth_gguf(spec).to_bytes();
    Model::from_gguf(GgufFile::from_bytes(bytes, "synthetic.gguf").unwrap()).unwrap()
}

fn tokens(n: usize, seed: u64, vocab: usize) -> Vec<u32> {
    (0..n)
        .map(|i| ((i as u64 * 2654435761 + seed * 97) % vocab as u64) as u32)
        .collect()
}

/// A KV cache of `blocks` blocks in `format` for model `m`.
fn cache(m: &Model, blocks: usize, format: KvFormat) -> KvCache {
    let c = &m.config;
    KvCache::new(c.n_layers, c.n_kv_heads, c.head_dim, blocks, format)
}

/// Logits of every position of `toks`, prefilled in the given chunk sizes (cycled).
fn run_chunked(m: &Model, pool: &ThreadPool, toks: &[u32], chunks: &[usize]) -> Vec<f32> {
    run_chunked_in(KvFormat::default(), m, pool, toks, chunks)
}

/// [`run_chunked`] with keys and values stored in `format`.
fn run_chunked_in(
    format: KvFormat,
    m: &Model,
    pool: &ThreadPool,
    toks: &[u32],
    chunks: &[usize],
) -> Vec<f32> {
    let blocks = toks.len().div_ceil(BLOCK_SIZE);
    let mut kv = cache(m, blocks, format);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut out = Vec::new();
    let (mut at, mut ci) = (0, 0);
    while at < toks.len() {
        let n = chunks[ci % chunks.len()].min(toks.len() - at);
        ci += 1;
        let rows: Vec<Row> = (at..at + n)
            .map(|p| Row {
                token: toks[p],
                pos: p,
                seq: 0,
                keep: true,
                table: &table,
                logits: true,
                tree: None,
            })
            .collect();
        out.extend(m.forward(pool, &rows, &mut kv).unwrap());
        at += n;
    }
    out
}

/// A tiny model of one type, but Q6_K for `ffn_down` when the type is Q4_K (as Q4_K_M files).
fn q4k_m_like(arch: &'static str, dtype: DType) -> SynthSpec {
    let mut spec = SynthSpec::tiny(arch, dtype);
    if dtype == DType::Q4K {
        spec.down_dtype = DType::Q6K;
    }
    spec
}

/// A tiny mixture of experts: `experts` experts of width 256, `used` per token.
fn moe_like(arch: &'static str, dtype: DType, experts: usize, used: usize) -> SynthSpec {
    let mut spec = q4k_m_like(arch, dtype);
    spec.ffn_dim = 256;
    spec.experts = Some((experts, used));
    spec
}

/// A tiny gpt-oss: MXFP4 experts with biases, attention sinks, alternating sliding-window
/// (21 keys) and full layers, YaRN.
fn gpt_oss_like() -> SynthSpec {
    let mut spec = moe_like("gpt-oss", DType::Q8_0, 4, 2);
    spec.expert_dtype = Some(DType::MXFP4);
    spec.sliding_window = Some(21);
    spec.yarn = Some((32.0, 16));
    spec
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn chunking_and_threads_do_not_change_a_bit() {
    let dense = [
        ("qwen2", DType::Q4K),
        ("llama", DType::Q4_1),
        ("qwen3", DType::Q6K),
        ("qwen2", DType::Q5_0),
        ("llama", DType::Q8_0),
        ("qwen3", DType::F16),
    ]
    .map(|(arch, dtype)| q4k_m_like(arch, dtype));
    // Mixtures of experts: a row's experts and their sum do not depend on the call either.
    let moe = [
        moe_like("qwen3moe", DType::Q4K, 8, 3),
        moe_like("llama", DType::Q8_0, 4, 2),
        moe_like("olmoe", DType::Q4K, 8, 2),
        gpt_oss_like(),
    ];
    // Every KV format on the first model, the default on the others.
    let runs = dense
        .into_iter()
        .chain(moe)
        .enumerate()
        .flat_map(|(i, spec)| {
            let formats = if i == 0 {
                &KvFormat::ALL[..]
            } else {
                &[KvFormat::Bf16][..]
            };
            formats.iter().map(move |&f| (spec.clone(), f))
        });
    for (spec, format) in runs {
        let (arch, dtype) = (spec.arch, spec.matrix_dtype);
        let m = model(&spec);
        if format.check(m.config.head_dim).is_err() {
            continue;
        }
        let toks = tokens(75, 3, spec.vocab);
        let p1 = ThreadPool::new(1);
        let one = run_chunked_in(format, &m, &p1, &toks, &[1]);
        assert!(one.iter().all(|v| v.is_finite()));
        for (threads, chunks) in [
            (1usize, vec![75usize]),
            (2, vec![7, 1, 33]),
            (3, vec![16, 5]),
            (2, vec![64, 2]),
        ] {
            let pool = ThreadPool::new(threads);
            let got = run_chunked_in(format, &m, &pool, &toks, &chunks);
            assert!(
                same_bits(&got, &one),
                "{arch} {dtype} KV {format:?}: chunks {chunks:?} threads {threads} differ"
            );
        }
    }
}

/// The CPU's panel layout (AMX, VNNI and AVX2 panel kernels) gives the bits of the stored layout's
/// kernels, for every quantized type a panel form exists for, at prefill and decode shapes.
#[test]
fn panel_layout_gives_the_stored_layouts_bits() {
    let pool = ThreadPool::new(2);
    for (arch, dtype) in [
        ("qwen2", DType::Q4K),
        ("llama", DType::Q4_1),
        ("qwen3", DType::Q6K),
        ("qwen2", DType::Q5_0),
        ("llama", DType::Q8_0),
        ("qwen2", DType::Q4_0),
        ("llama", DType::Q5_1),
        ("qwen3moe", DType::Q4K),
    ] {
        let spec = match arch {
            "qwen3moe" => moe_like(arch, dtype, 8, 2),
            _ => q4k_m_like(arch, dtype),
        };
        let plain = model(&spec);
        let panels = model(&spec);
        assert!(plain.prepare_cpu_with(false));
        assert!(panels.prepare_cpu_with(true));
        let toks = tokens(40, 5, spec.vocab);
        for chunks in [&[40usize][..], &[1], &[16, 3, 9]] {
            let a = run_chunked(&plain, &pool, &toks, chunks);
            let b = run_chunked(&panels, &pool, &toks, chunks);
            assert!(same_bits(&a, &b), "{arch} {dtype} chunks {chunks:?}");
        }
    }
}

#[test]
fn rows_of_other_sequences_do_not_change_a_bit() {
    for spec in [
        SynthSpec::tiny("qwen2", DType::Q4K),
        moe_like("qwen3moe", DType::Q4K, 8, 2),
        gpt_oss_like(),
    ] {
        rows_of_other_sequences_keep_their_bits(&spec);
    }
}

fn rows_of_other_sequences_keep_their_bits(spec: &SynthSpec) {
    let m = model(spec);
    let pool = ThreadPool::new(2);
    let seqs: Vec<Vec<u32>> = (0..4)
        .map(|s| tokens(20 + 9 * s, s as u64 + 10, spec.vocab))
        .collect();
    let solo: Vec<Vec<f32>> = seqs
        .iter()
        .map(|t| run_chunked(&m, &pool, t, &[1]))
        .collect();
    // All sequences advance together, one row each per call, in one shared KV cache.
    let per_seq_blocks = 64usize.div_ceil(BLOCK_SIZE);
    let mut kv = cache(&m, per_seq_blocks * seqs.len(), KvFormat::default());
    let tables: Vec<Vec<u32>> = (0..seqs.len())
        .map(|s| {
            (0..per_seq_blocks as u32)
                .map(|b| (b * seqs.len() as u32) + s as u32)
                .collect()
        })
        .collect();
    let mut got: Vec<Vec<f32>> = vec![Vec::new(); seqs.len()];
    let longest = seqs.iter().map(Vec::len).max().unwrap();
    let mut p = 0;
    while p < longest {
        // A few positions of every live sequence per call, in varying order.
        let step = 1 + p % 3;
        let mut rows = Vec::new();
        let mut owner = Vec::new();
        for s in (0..seqs.len()).rev() {
            let end = (p + step).min(seqs[s].len());
            for (q, &token) in seqs[s].iter().enumerate().take(end).skip(p) {
                rows.push(Row {
                    token,
                    pos: q,
                    seq: 0,
                    keep: true,
                    table: &tables[s],
                    logits: true,
                    tree: None,
                });
                owner.push(s);
            }
        }
        let logits = m.forward(&pool, &rows, &mut kv).unwrap();
        for (i, s) in owner.iter().enumerate() {
            got[*s].extend_from_slice(&logits[i * spec.vocab..(i + 1) * spec.vocab]);
        }
        p += step;
    }
    for s in 0..seqs.len() {
        assert!(
            same_bits(&got[s], &solo[s]),
            "sequence {s} differs when batched with others"
        );
    }
}

#[test]
fn gguf_and_safetensors_copies_agree() {
    for arch in ["qwen2", "qwen3", "llama"] {
        let spec = SynthSpec::tiny(arch, DType::F32);
        let gguf = GgufFile::from_bytes(synth_gguf(&spec).to_bytes(), "tiny.gguf").unwrap();
        let dir = tempdir(arch);
        write_hf_twin(&gguf, &spec, &dir);
        let a = Model::from_gguf(gguf).unwrap();
        let b = Model::load(&dir).unwrap();
        let pool = ThreadPool::new(2);
        let toks = tokens(30, 5, spec.vocab);
        let la = run_chunked(&a, &pool, &toks, &[30]);
        let lb = run_chunked(&b, &pool, &toks, &[30]);
        if arch == "llama" {
            // GGUF llama stores q/k rows permuted for interleaved RoPE: the same math in another
            // element order, so equal up to rounding.
            let worst = la
                .iter()
                .zip(&lb)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "llama twins differ by {worst}");
        } else {
            assert!(
                same_bits(&la, &lb),
                "{arch}: GGUF and safetensors logits differ"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tf-models-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes the Hugging Face layout of a synthetic F32 GGUF model.
fn write_hf_twin(g: &GgufFile, spec: &SynthSpec, dir: &std::path::Path) {
    use tf_weights::TensorSource;
    let hd = spec.head_dim;
    let mut tensors = Vec::new();
    for name in g.tensor_names() {
        let t = g.tensor(name).unwrap();
        let mut data = t.data.to_vec();
        let hf = gguf_to_hf(name);
        // Undo the llama q/k permutation: GGUF row h*hd + 2j + i holds HF row h*hd + i*hd/2 + j.
        if spec.arch == "llama"
            && (name.ends_with("attn_q.weight") || name.ends_with("attn_k.weight"))
        {
            let row = t.dims[0] * 4;
            let mut hf_rows = vec![0u8; data.len()];
            for r in 0..t.dims[1] {
                let (h, w) = (r / hd, r % hd);
                let (j, i) = (w / 2, w % 2);
                let dst = h * hd + i * hd / 2 + j;
                hf_rows[dst * row..(dst + 1) * row].copy_from_slice(&data[r * row..(r + 1) * row]);
            }
            data = hf_rows;
        }
        let shape: Vec<usize> = t.dims.iter().rev().copied().collect();
        tensors.push((hf, DType::F32, shape, data));
    }
    let refs: Vec<(&str, DType, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), *d, s.clone(), b.clone()))
        .collect();
    tf_weights::write_safetensors(&dir.join("model.safetensors"), &refs).unwrap();
    let arch = match spec.arch {
        "llama" => "LlamaForCausalLM",
        "qwen2" => "Qwen2ForCausalLM",
        _ => "Qwen3ForCausalLM",
    };
    let config = serde_json::json!({
        "architectures": [arch],
        "hidden_size": spec.d_model, "intermediate_size": spec.ffn_dim,
        "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_kv_heads, "head_dim": spec.head_dim,
        "vocab_size": spec.vocab, "rms_norm_eps": 1e-6, "rope_theta": spec.rope_base,
        "max_position_embeddings": spec.context_len, "tie_word_embeddings": false,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

fn gguf_to_hf(name: &str) -> String {
    match name {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        "output.weight" => return "lm_head.weight".into(),
        _ => {}
    }
    let rest = name.strip_prefix("blk.").unwrap();
    let (i, what) = rest.split_once('.').unwrap();
    let hf = match what {
        "attn_norm.weight" => "input_layernorm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "attn_q.bias" => "self_attn.q_proj.bias",
        "attn_k.bias" => "self_attn.k_proj.bias",
        "attn_v.bias" => "self_attn.v_proj.bias",
        "attn_q_norm.weight" => "self_attn.q_norm.weight",
        "attn_k_norm.weight" => "self_attn.k_norm.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        other => panic!("unmapped {other}"),
    };
    format!("model.layers.{i}.{hf}")
}

#[test]
fn tied_output_head_uses_the_embedding() {
    let mut spec = SynthSpec::tiny("llama", DType::Q8_0);
    spec.output_dtype = None;
    let m = model(&spec);
    assert!(m.tied_output());
    let pool = ThreadPool::new(1);
    let l = run_chunked(&m, &pool, &tokens(5, 1, spec.vocab), &[5]);
    assert!(l.iter().all(|v| v.is_finite()));
}

#[test]
fn unsupported_architecture_is_refused_before_weights() {
    let mut w = synth_gguf(&SynthSpec::tiny("qwen2", DType::F32));
    w.meta("general.architecture", MetaValue::String("mamba".into()));
    let err = Model::from_gguf(GgufFile::from_bytes(w.to_bytes(), "m.gguf").unwrap())
        .err()
        .unwrap();
    assert!(matches!(err, ModelError::UnsupportedArchitecture { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("mamba") && msg.contains("qwen2") && msg.contains("m.gguf"),
        "{msg}"
    );
}

#[test]
fn missing_and_misshapen_tensors_are_named() {
    let spec = SynthSpec::tiny("qwen2", DType::F32);
    // Rebuild without one tensor: write a copy of the metadata and all tensors but attn_k.bias of layer 1.
    let full = GgufFile::from_bytes(synth_gguf(&spec).to_bytes(), "full.gguf").unwrap();
    let mut w = tf_weights::GgufWriter::new();
    for (k, v) in full.metadata() {
        w.meta(k, v.clone());
    }
    use tf_weights::TensorSource;
    for name in full.tensor_names() {
        let t = full.tensor(name).unwrap();
        if name == "blk.1.attn_k.bias" {
            continue;
        }
        if name == "blk.0.ffn_up.weight" {
            w.tensor(
                name,
                &[t.dims[0], t.dims[1] - 1],
                t.dtype,
                t.data[..t.data.len() - t.dims[0] * 4].to_vec(),
            );
            continue;
        }
        w.tensor(name, t.dims, t.dtype, t.data.to_vec());
    }
    let err = Model::from_gguf(GgufFile::from_bytes(w.to_bytes(), "broken.gguf").unwrap())
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains("broken.gguf") && msg.contains("blk.0.ffn_up.weight"),
        "{msg}"
    );
}

#[test]
fn bad_rows_are_errors_not_panics() {
    let spec = SynthSpec::tiny("qwen2", DType::F32);
    let m = model(&spec);
    let pool = ThreadPool::new(1);
    let mut kv = cache(&m, 1, KvFormat::default());
    let table = vec![0u32];
    let bad_token = Row {
        token: 10_000,
        pos: 0,
        seq: 0,
        keep: true,
        table: &table,
        logits: true,
        tree: None,
    };
    assert!(matches!(
        m.forward(&pool, &[bad_token], &mut kv),
        Err(ModelError::InvalidToken { .. })
    ));
    let bad_pos = Row {
        token: 1,
        pos: BLOCK_SIZE,
        seq: 0,
        keep: true,
        table: &table,
        logits: true,
        tree: None,
    };
    assert!(matches!(
        m.forward(&pool, &[bad_pos], &mut kv),
        Err(ModelError::PositionOutOfRange { .. })
    ));
}

#[test]
fn tree_rows_in_other_slots_give_the_serial_bits() {
    use tf_kernels::attention::KeyRemap;
    use tf_models::TreeRow;
    let spec = SynthSpec::tiny("qwen2", DType::Q4K);
    let m = model(&spec);
    let pool = ThreadPool::new(2);
    let toks = tokens(40, 9, spec.vocab);
    let n = toks.len();
    let serial = run_chunked(&m, &pool, &toks, &[n]);
    let blocks = (n + 16).div_ceil(BLOCK_SIZE);
    let mut kv = cache(&m, blocks, KvFormat::default());
    let table: Vec<u32> = (0..blocks as u32).collect();
    let base = n - 3;
    let rows: Vec<Row> = (0..base)
        .map(|p| Row {
            token: toks[p],
            pos: p,
            seq: 0,
            keep: true,
            table: &table,
            logits: false,
            tree: None,
        })
        .collect();
    m.forward(&pool, &rows, &mut kv).unwrap();
    // The last three positions as a branch in slots n+2.., beside a decoy chain in slots base..
    // holding other tokens.
    let slots: Vec<usize> = (0..3).map(|j| n + 2 + j).collect();
    let mut rows: Vec<Row> = (0..3)
        .map(|j| Row {
            token: (toks[base + j] + 1) % spec.vocab as u32,
            pos: base + j,
            seq: 0,
            keep: true,
            table: &table,
            logits: false,
            tree: None,
        })
        .collect();
    for j in 0..3 {
        rows.push(Row {
            token: toks[base + j],
            pos: base + j,
            seq: 0,
            keep: true,
            table: &table,
            logits: true,
            tree: Some(TreeRow {
                slot: slots[j],
                remap: KeyRemap {
                    base,
                    slots: &slots[..=j],
                },
            }),
        });
    }
    let got = m.forward(&pool, &rows, &mut kv).unwrap();
    assert!(
        same_bits(&got, &serial[base * spec.vocab..]),
        "tree rows differ from the serial rows"
    );
}

/// A pruned output head (draft models): the kept columns are the full head's bits, every other
/// logit is -inf, and the control tokens of a GGUF vocabulary are kept.
#[test]
fn pruned_head_keeps_its_columns_bits() {
    let pool = ThreadPool::new(2);
    let mut spec = SynthSpec::tiny("qwen2", DType::Q8_0);
    spec.tokenizer = true;
    let m = model(&spec);
    let head = m.pruned_head(100);
    let vocab = spec.vocab;
    assert_eq!(head[0], 0..112, "16-column panels");
    assert!(
        head.iter().any(|r| r.contains(&(vocab - 1))),
        "the end-of-text token (last id) is kept: {head:?}"
    );
    assert_eq!(m.pruned_head(vocab), vec![0..vocab]);
    let toks = tokens(20, 9, vocab);
    let blocks = toks.len().div_ceil(BLOCK_SIZE);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let rows: Vec<Row> = (0..toks.len())
        .map(|p| Row {
            token: toks[p],
            pos: p,
            seq: 0,
            keep: true,
            table: &table,
            logits: p % 3 == 0,
            tree: None,
        })
        .collect();
    let mut kv = cache(&m, blocks, KvFormat::default());
    let full = m.forward(&pool, &rows, &mut kv).unwrap();
    let mut kv = cache(&m, blocks, KvFormat::default());
    let pruned = m.forward_head(&pool, &rows, &mut kv, Some(&head)).unwrap();
    assert_eq!(full.len(), pruned.len());
    for (i, (a, b)) in full.iter().zip(&pruned).enumerate() {
        let id = i % vocab;
        if head.iter().any(|r| r.contains(&id)) {
            assert_eq!(a.to_bits(), b.to_bits(), "id {id}");
        } else {
            assert_eq!(*b, f32::NEG_INFINITY, "id {id}");
        }
    }
}

/// A draft model requantized to Q4_0: its wider matrices become Q4_0 (Q4_K stays), it loads
/// and runs, its logits stay close to the original's (a draft guesses; it need not be exact),
/// and two requantizations give the same bits.
#[test]
fn requantized_draft_is_q4_0_and_close() {
    let pool = ThreadPool::new(2);
    let mut spec = SynthSpec::tiny("qwen2", DType::Q8_0);
    spec.down_dtype = DType::Q4K;
    let m = model(&spec);
    let q = m.requantized_q4_0().unwrap();
    let again = m.requantized_q4_0().unwrap();
    let types = q.tensor_types();
    assert!(types.iter().any(|(d, _)| *d == DType::Q4_0), "{types:?}");
    assert!(types.iter().any(|(d, _)| *d == DType::Q4K), "{types:?}");
    assert!(!types.iter().any(|(d, _)| *d == DType::Q8_0), "{types:?}");
    assert!(q.weight_bytes() < m.weight_bytes());
    let toks = tokens(24, 4, spec.vocab);
    let a = run_chunked(&m, &pool, &toks, &[24]);
    let b = run_chunked(&q, &pool, &toks, &[24]);
    let c = run_chunked(&again, &pool, &toks, &[7, 17]);
    assert!(same_bits(&b, &c));
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(&b) {
        num += ((x - y) as f64).powi(2);
        den += (*x as f64).powi(2);
    }
    // Random weights amplify a 4-bit model's error (0.26 relative here); a broken requantizer
    // (wrong scales, codes or layout) gives errors of 1 and more.
    assert!(num / den < 0.25, "relative error {}", (num / den).sqrt());
}
