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
    /// Per-tensor type overrides by full GGUF name (`blk.3.ffn_down.weight`), as llama.cpp's
    /// mixed quantizations (Q4_K_M) give some layers more bits. Default: none.
    pub overrides: Vec<(String, DType)>,
    /// Embed a minimal valid byte-level BPE tokenizer (256 byte tokens, one merge, fillers up
    /// to `vocab`, an end-of-text token last), so the file loads like a real model. Default:
    /// false.
    pub tokenizer: bool,
    /// `{arch}.attention.sliding_window` (the family decides which layers slide).
    pub sliding_window: Option<usize>,
    /// Rotary frequency divisors written as `rope_freqs.weight`, as llama.cpp's converter writes
    /// Llama 3.x's scaling.
    pub rope_freqs: Option<Vec<f32>>,
    /// A mixture of experts in every layer: (experts, used per token), each expert `ffn_dim`
    /// wide, stored as llama.cpp does (`ffn_{gate,up,down}_exps` of all experts, an F32
    /// router `ffn_gate_inp`). Default: none (dense).
    pub experts: Option<(usize, usize)>,
    /// Type of the experts' matrices (default: `matrix_dtype`, `down_dtype` for down).
    pub expert_dtype: Option<DType>,
    /// YaRN scaling written as llama.cpp's converter does: (factor, original context).
    pub yarn: Option<(f32, usize)>,
    /// Rotated dimensions of each head (`rope.dimension_count`; default: all).
    pub rope_dim: Option<usize>,
    /// Gated DeltaNet layers (families that have them, e.g. `qwen35`); default: none.
    pub delta: Option<SynthDelta>,
    /// A multi-token-prediction layer after the decoder, as converters write it (`block_count`
    /// counts it, `nextn_predict_layers` says so); default: none.
    pub mtp: bool,
}

/// The linear-attention shape of a synthetic hybrid model: every `interval`-th layer is full
/// attention, the others Gated DeltaNet.
#[derive(Clone, Copy, Debug)]
pub struct SynthDelta {
    pub k_heads: usize,
    pub v_heads: usize,
    pub dk: usize,
    pub dv: usize,
    pub kernel: usize,
    pub interval: usize,
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
            overrides: Vec::new(),
            tokenizer: false,
            sliding_window: None,
            rope_freqs: None,
            experts: None,
            expert_dtype: None,
            yarn: None,
            rope_dim: None,
            delta: None,
            mtp: false,
        }
    }

    /// A model of the given shape with every matrix of one type, no overrides, no tokenizer.
    #[allow(clippy::too_many_arguments)]
    pub fn shaped(
        arch: &'static str,
        n_layers: usize,
        d_model: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        ffn_dim: usize,
        vocab: usize,
        context_len: usize,
        rope_base: f32,
        dtype: DType,
    ) -> SynthSpec {
        SynthSpec {
            arch,
            n_layers,
            d_model,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            vocab,
            context_len,
            rope_base,
            ..SynthSpec::tiny(arch, dtype)
        }
    }

    fn dtype_of(&self, name: &str, default: DType) -> DType {
        self.overrides
            .iter()
            .find(|(n, _)| n == name)
            .map_or(default, |(_, t)| *t)
    }
}

/// What a synthetic tensor holds.
enum Fill {
    /// `random_blocks(dtype, n, seed)`.
    Random(u64),
    /// A norm weight: `1 + (i % 7) * 0.05`.
    Norm,
    /// These F32 values.
    Values(Vec<f32>),
}

struct Planned {
    name: String,
    dims: Vec<usize>,
    dtype: DType,
    fill: Fill,
}

impl Planned {
    fn elems(&self) -> usize {
        self.dims.iter().product()
    }

    fn bytes(&self) -> Vec<u8> {
        match self.fill {
            Fill::Random(seed) => random_blocks(self.dtype, self.elems(), seed),
            Fill::Norm => (0..self.elems())
                .flat_map(|i| (1.0f32 + (i % 7) as f32 * 0.05).to_le_bytes())
                .collect(),
            Fill::Values(ref v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    fn len(&self) -> usize {
        let n = self.elems();
        n.div_ceil(self.dtype.block_elems()) * self.dtype.block_bytes()
    }
}

/// The GGUF of `spec` (metadata and tensors; a tokenizer only if `spec.tokenizer`), in memory.
pub fn synth_gguf(spec: &SynthSpec) -> GgufWriter {
    let (mut w, plan) = metadata_and_plan(spec);
    for t in &plan {
        w.tensor(&t.name, &t.dims, t.dtype, t.bytes());
    }
    w
}

/// Writes the GGUF of `spec` to `path` one tensor at a time (a 7B-shaped model never has two
/// tensors in memory). Same bytes as `synth_gguf(spec).write(path)`.
pub fn write_synth_gguf(spec: &SynthSpec, path: &std::path::Path) -> tf_weights::Result<()> {
    let (mut w, plan) = metadata_and_plan(spec);
    for t in &plan {
        w.tensor_deferred(&t.name, &t.dims, t.dtype, t.len());
    }
    let mut next = plan.iter();
    w.write_streaming(path, |name| {
        let t = next.next().expect("one fill per deferred tensor");
        debug_assert_eq!(t.name, name);
        t.bytes()
    })
}

/// Long on purpose: it is a table, every GGUF key and tensor a synthetic file carries, in the
/// order a real file of the family has them.
fn metadata_and_plan(spec: &SynthSpec) -> (GgufWriter, Vec<Planned>) {
    let mut w = GgufWriter::new();
    let a = spec.arch;
    w.meta("general.architecture", MetaValue::String(a.to_string()));
    w.meta("general.name", MetaValue::String(format!("synthetic {a}")));
    let u = |v: usize| MetaValue::U32(v as u32);
    w.meta(
        &format!("{a}.block_count"),
        u(spec.n_layers + usize::from(spec.mtp)),
    );
    if spec.mtp {
        w.meta(&format!("{a}.nextn_predict_layers"), u(1));
    }
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
    if let Some((experts, used)) = spec.experts {
        w.meta(&format!("{a}.expert_count"), u(experts));
        w.meta(&format!("{a}.expert_used_count"), u(used));
        w.meta(&format!("{a}.expert_feed_forward_length"), u(spec.ffn_dim));
    }
    if let Some((factor, original)) = spec.yarn {
        w.meta(
            &format!("{a}.rope.scaling.type"),
            MetaValue::String("yarn".into()),
        );
        w.meta(&format!("{a}.rope.scaling.factor"), MetaValue::F32(factor));
        w.meta(
            &format!("{a}.rope.scaling.original_context_length"),
            u(original),
        );
    }
    if let Some(win) = spec.sliding_window {
        w.meta(&format!("{a}.attention.sliding_window"), u(win));
    }
    if let Some(r) = spec.rope_dim {
        w.meta(&format!("{a}.rope.dimension_count"), u(r));
    }
    if a == "qwen35" {
        // Qwen3.5's multimodal RoPE sections (llama.cpp requires them); a text position is the
        // same in every section, so they change nothing here.
        let pairs = spec.rope_dim.unwrap_or(spec.head_dim) / 2;
        let sections = match pairs {
            32 => [11, 11, 10, 0],
            p => [p - 2 * (p / 3), p / 3, p / 3, 0],
        };
        let arr = sections.iter().map(|&v| MetaValue::I32(v as i32)).collect();
        w.meta(
            &format!("{a}.rope.dimension_sections"),
            MetaValue::Array(arr),
        );
    }
    if let Some(dn) = spec.delta {
        w.meta(&format!("{a}.ssm.conv_kernel"), u(dn.kernel));
        w.meta(&format!("{a}.ssm.state_size"), u(dn.dk));
        w.meta(&format!("{a}.ssm.group_count"), u(dn.k_heads));
        w.meta(&format!("{a}.ssm.time_step_rank"), u(dn.v_heads));
        w.meta(&format!("{a}.ssm.inner_size"), u(dn.v_heads * dn.dv));
        w.meta(&format!("{a}.full_attention_interval"), u(dn.interval));
    }
    if spec.tokenizer {
        put_tokenizer(&mut w, spec.vocab);
    }
    // The family's tensors (an unknown architecture gets the Llama layout, for tests of the
    // refusal).
    let fam = crate::registry::by_gguf_arch(a).unwrap_or(&crate::Family::LLAMA_LIKE);
    let mut plan = Vec::new();
    let mut seed = spec.seed;
    let mut tensor = |plan: &mut Vec<Planned>, name: &str, dims: &[usize], dtype: DType| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        plan.push(Planned {
            name: name.to_string(),
            dims: dims.to_vec(),
            dtype: spec.dtype_of(name, dtype),
            fill: Fill::Random(seed),
        });
    };
    let norm = |plan: &mut Vec<Planned>, name: &str, n: usize| {
        plan.push(Planned {
            name: name.to_string(),
            dims: vec![n],
            dtype: DType::F32,
            fill: Fill::Norm,
        });
    };
    let (d, q, kv, f) = (
        spec.d_model,
        spec.n_heads * spec.head_dim,
        spec.n_kv_heads * spec.head_dim,
        spec.ffn_dim,
    );
    let p = &mut plan;
    if let Some(f) = &spec.rope_freqs {
        p.push(Planned {
            name: "rope_freqs.weight".into(),
            dims: vec![f.len()],
            dtype: DType::F32,
            fill: Fill::Values(f.clone()),
        });
    }
    tensor(p, "token_embd.weight", &[d, spec.vocab], spec.embed_dtype);
    norm(p, "output_norm.weight", d);
    if let Some(t) = spec.output_dtype {
        tensor(p, "output.weight", &[d, spec.vocab], t);
    }
    for i in 0..spec.n_layers + usize::from(spec.mtp) {
        let n = |s: &str| format!("blk.{i}.{s}");
        if i == spec.n_layers {
            tensor(
                p,
                &n("nextn.eh_proj.weight"),
                &[2 * d, d],
                spec.matrix_dtype,
            );
            norm(p, &n("nextn.enorm.weight"), d);
            norm(p, &n("nextn.hnorm.weight"), d);
            norm(p, &n("nextn.shared_head_norm.weight"), d);
        }
        norm(p, &n("attn_norm.weight"), d);
        norm(p, &n(fam.gguf_ffn_norm), d);
        if fam.post_norms {
            norm(p, &n("post_attention_norm.weight"), d);
            norm(p, &n("post_ffw_norm.weight"), d);
        }
        let recurrent = spec
            .delta
            .filter(|dn| i < spec.n_layers && !(i + 1).is_multiple_of(dn.interval.max(1)));
        if let Some(dn) = recurrent {
            let (hv, vw) = (dn.v_heads, dn.v_heads * dn.dv);
            let ch = 2 * dn.k_heads * dn.dk + vw;
            tensor(p, &n("attn_qkv.weight"), &[d, ch], spec.matrix_dtype);
            tensor(p, &n("attn_gate.weight"), &[d, vw], spec.matrix_dtype);
            tensor(p, &n("ssm_beta.weight"), &[d, hv], spec.matrix_dtype);
            tensor(p, &n("ssm_alpha.weight"), &[d, hv], spec.matrix_dtype);
            tensor(p, &n("ssm_out.weight"), &[vw, d], spec.matrix_dtype);
            tensor(p, &n("ssm_conv1d.weight"), &[dn.kernel, ch], DType::F32);
            let rates = (0..hv).map(|h| -(0.05 + 0.02 * h as f32)).collect();
            p.push(Planned {
                name: n("ssm_a"),
                dims: vec![hv],
                dtype: DType::F32,
                fill: Fill::Values(rates),
            });
            p.push(Planned {
                name: n("ssm_dt.bias"),
                dims: vec![hv],
                dtype: DType::F32,
                fill: Fill::Values(vec![0.5; hv]),
            });
            norm(p, &n("ssm_norm.weight"), dn.dv);
        } else if fam.gated_attention {
            tensor(p, &n("attn_q.weight"), &[d, 2 * q], spec.matrix_dtype);
            tensor(p, &n("attn_k.weight"), &[d, kv], spec.matrix_dtype);
            tensor(p, &n("attn_v.weight"), &[d, kv], spec.matrix_dtype);
        } else if fam.fused {
            tensor(
                p,
                &n("attn_qkv.weight"),
                &[d, q + 2 * kv],
                spec.matrix_dtype,
            );
        } else {
            tensor(p, &n("attn_q.weight"), &[d, q], spec.matrix_dtype);
            tensor(p, &n("attn_k.weight"), &[d, kv], spec.matrix_dtype);
            tensor(p, &n("attn_v.weight"), &[d, kv], spec.matrix_dtype);
        }
        if recurrent.is_none() {
            tensor(p, &n("attn_output.weight"), &[q, d], spec.matrix_dtype);
        }
        if fam.gpt_oss_biases {
            tensor(p, &n("attn_output.bias"), &[d], DType::F32);
        }
        if fam.sinks {
            tensor(p, &n("attn_sinks.weight"), &[spec.n_heads], DType::F32);
        }
        if let Some((e, _)) = spec.experts {
            let (gate_t, down_t) = match spec.expert_dtype {
                Some(t) => (t, t),
                None => (spec.matrix_dtype, spec.down_dtype),
            };
            tensor(p, &n("ffn_gate_inp.weight"), &[d, e], DType::F32);
            tensor(p, &n("ffn_gate_exps.weight"), &[d, f, e], gate_t);
            tensor(p, &n("ffn_up_exps.weight"), &[d, f, e], gate_t);
            tensor(p, &n("ffn_down_exps.weight"), &[f, d, e], down_t);
            if fam.gpt_oss_biases {
                tensor(p, &n("ffn_gate_inp.bias"), &[e], DType::F32);
                tensor(p, &n("ffn_gate_exps.bias"), &[f, e], DType::F32);
                tensor(p, &n("ffn_up_exps.bias"), &[f, e], DType::F32);
                tensor(p, &n("ffn_down_exps.bias"), &[d, e], DType::F32);
            }
        } else if fam.fused {
            tensor(p, &n("ffn_up.weight"), &[d, 2 * f], spec.matrix_dtype);
        } else {
            tensor(p, &n("ffn_gate.weight"), &[d, f], spec.matrix_dtype);
            tensor(p, &n("ffn_up.weight"), &[d, f], spec.matrix_dtype);
        }
        if spec.experts.is_none() {
            tensor(p, &n("ffn_down.weight"), &[f, d], spec.down_dtype);
        }
        if fam.qkv_bias {
            tensor(p, &n("attn_q.bias"), &[q], DType::F32);
            tensor(p, &n("attn_k.bias"), &[kv], DType::F32);
            tensor(p, &n("attn_v.bias"), &[kv], DType::F32);
        }
        if fam.qk_norm && recurrent.is_none() {
            let (qn, kn) = match fam.qk_norm_full {
                true => (q, kv),
                false => (spec.head_dim, spec.head_dim),
            };
            norm(p, &n("attn_q_norm.weight"), qn);
            norm(p, &n("attn_k_norm.weight"), kn);
        }
    }
    (w, plan)
}

/// GPT-2's byte-to-character map of byte-level BPE.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + n).expect("valid char")
}

/// A minimal byte-level BPE vocabulary of `vocab` tokens: the 256 bytes (ids 0..256), one
/// merged token, filler tokens, and `<|endoftext|>` (control, end of sequence) last.
fn put_tokenizer(w: &mut GgufWriter, vocab: usize) {
    assert!(
        vocab >= 258,
        "a synthetic tokenizer needs at least 258 tokens"
    );
    let s = |v: &str| MetaValue::String(v.to_string());
    let mut tokens: Vec<MetaValue> = (0..=255u8).map(|b| s(&byte_char(b).to_string())).collect();
    let space_t = format!("{}t", byte_char(b' '));
    tokens.push(s(&space_t));
    for i in tokens.len()..vocab - 1 {
        tokens.push(s(&format!("<|synth_{i}|>")));
    }
    tokens.push(s("<|endoftext|>"));
    let mut types = vec![MetaValue::I32(1); vocab];
    types[vocab - 1] = MetaValue::I32(3);
    w.meta("tokenizer.ggml.model", s("gpt2"));
    w.meta("tokenizer.ggml.pre", s("qwen2"));
    w.meta("tokenizer.ggml.tokens", MetaValue::Array(tokens));
    w.meta("tokenizer.ggml.token_type", MetaValue::Array(types));
    w.meta(
        "tokenizer.ggml.merges",
        MetaValue::Array(vec![s(&format!("{} t", byte_char(b' ')))]),
    );
    w.meta(
        "tokenizer.ggml.eos_token_id",
        MetaValue::U32((vocab - 1) as u32),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_write_equals_in_memory_bytes() {
        let mut spec = SynthSpec::tiny("qwen2", DType::Q4K);
        spec.overrides
            .push(("blk.1.ffn_down.weight".to_string(), DType::Q6K));
        spec.tokenizer = true;
        let dir = std::env::temp_dir().join(format!("tf-synth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.gguf");
        write_synth_gguf(&spec, &path).unwrap();
        let streamed = std::fs::read(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(streamed, synth_gguf(&spec).to_bytes());
        let g = tf_weights::GgufFile::from_bytes(streamed, "m.gguf").unwrap();
        let t = |n: &str| g.tensor_info(n).unwrap().dtype;
        assert_eq!(t("blk.1.ffn_down.weight"), DType::Q6K);
        assert_eq!(t("blk.0.ffn_down.weight"), DType::Q4K);
        assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    }
}
