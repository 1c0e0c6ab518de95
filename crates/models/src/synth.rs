//! Synthetic models: real shapes and tensor types, random weights (deterministic from a seed).
//! Used by tests (tiny models) and for speed and exactness checks on machines without the real
//! checkpoints.

use tf_core::DType;
use tf_weights::{random_blocks, GgufWriter, MetaValue};

#[derive(Clone, Debug)]
pub struct SynthSpec {
    /// GGUF architecture name (`llama`, `qwen2`, `qwen3`).
    pub arch: &'static str,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub vocab: usize,
    pub context_len: usize,
    pub rope_base: f32,
    /// Type of the attention and FFN matrices.
    pub matrix_dtype: DType,
    /// Type of `ffn_down` (Q4_K_M files use Q6_K there).
    pub down_dtype: DType,
    pub embed_dtype: DType,
    /// `None` = output head tied to the embedding.
    pub output_dtype: Option<DType>,
    pub seed: u64,
}

impl SynthSpec {
    /// A tiny model for tests: every dimension a multiple of 256 so k-quants fit.
    pub fn tiny(arch: &'static str, dtype: DType) -> SynthSpec {
        SynthSpec {
            arch,
            n_layers: 2,
            d_model: 256,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 64,
            ffn_dim: 512,
            vocab: 384,
            context_len: 512,
            rope_base: 10000.0,
            matrix_dtype: dtype,
            down_dtype: dtype,
            embed_dtype: dtype,
            output_dtype: Some(dtype),
            seed: 1,
        }
    }
}

/// The GGUF of `spec` (metadata and tensors; no tokenizer).
pub fn synth_gguf(spec: &SynthSpec) -> GgufWriter {
    let mut w = GgufWriter::new();
    let a = spec.arch;
    w.meta("general.architecture", MetaValue::String(a.to_string()));
    w.meta("general.name", MetaValue::String(format!("synthetic {a}")));
    let u = |v: usize| MetaValue::U32(v as u32);
    w.meta(&format!("{a}.block_count"), u(spec.n_layers));
    w.meta(&format!("{a}.embedding_length"), u(spec.d_model));
    w.meta(&format!("{a}.feed_forward_length"), u(spec.ffn_dim));
    w.meta(&format!("{a}.attention.head_count"), u(spec.n_heads));
    w.meta(&format!("{a}.attention.head_count_kv"), u(spec.n_kv_heads));
    w.meta(&format!("{a}.attention.key_length"), u(spec.head_dim));
    w.meta(&format!("{a}.attention.value_length"), u(spec.head_dim));
    w.meta(&format!("{a}.context_length"), u(spec.context_len));
    w.meta(
        &format!("{a}.rope.freq_base"),
        MetaValue::F32(spec.rope_base),
    );
    w.meta(
        &format!("{a}.attention.layer_norm_rms_epsilon"),
        MetaValue::F32(1e-6),
    );
    let mut seed = spec.seed;
    let mut tensor = |w: &mut GgufWriter, name: &str, dims: &[usize], dtype: DType| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let n: usize = dims.iter().product();
        w.tensor(name, dims, dtype, random_blocks(dtype, n, seed));
    };
    let norm = |w: &mut GgufWriter, name: &str, n: usize| {
        let data: Vec<u8> = (0..n)
            .flat_map(|i| (1.0f32 + (i % 7) as f32 * 0.05).to_le_bytes())
            .collect();
        w.tensor(name, &[n], DType::F32, data);
    };
    let (d, q, kv, f) = (
        spec.d_model,
        spec.n_heads * spec.head_dim,
        spec.n_kv_heads * spec.head_dim,
        spec.ffn_dim,
    );
    tensor(
        &mut w,
        "token_embd.weight",
        &[d, spec.vocab],
        spec.embed_dtype,
    );
    norm(&mut w, "output_norm.weight", d);
    if let Some(t) = spec.output_dtype {
        tensor(&mut w, "output.weight", &[d, spec.vocab], t);
    }
    for i in 0..spec.n_layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        norm(&mut w, &p("attn_norm.weight"), d);
        norm(&mut w, &p("ffn_norm.weight"), d);
        tensor(&mut w, &p("attn_q.weight"), &[d, q], spec.matrix_dtype);
        tensor(&mut w, &p("attn_k.weight"), &[d, kv], spec.matrix_dtype);
        tensor(&mut w, &p("attn_v.weight"), &[d, kv], spec.matrix_dtype);
        tensor(&mut w, &p("attn_output.weight"), &[q, d], spec.matrix_dtype);
        tensor(&mut w, &p("ffn_gate.weight"), &[d, f], spec.matrix_dtype);
        tensor(&mut w, &p("ffn_up.weight"), &[d, f], spec.matrix_dtype);
        tensor(&mut w, &p("ffn_down.weight"), &[f, d], spec.down_dtype);
        if a == "qwen2" {
            tensor(&mut w, &p("attn_q.bias"), &[q], DType::F32);
            tensor(&mut w, &p("attn_k.bias"), &[kv], DType::F32);
            tensor(&mut w, &p("attn_v.bias"), &[kv], DType::F32);
        }
        if a == "qwen3" {
            norm(&mut w, &p("attn_q_norm.weight"), spec.head_dim);
            norm(&mut w, &p("attn_k_norm.weight"), spec.head_dim);
        }
    }
    w
}
