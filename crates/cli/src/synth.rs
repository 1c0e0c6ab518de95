//! `tensorfold synth`: a model with the real shapes and tensor types of a known checkpoint and
//! random weights (deterministic from a seed), for speed and exactness checks on machines that
//! lack the real weights (issue 6).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use tf_core::DType;
use tf_models::config::RopeScaling;
use tf_models::synth::{write_synth_gguf, SynthDelta, SynthSpec};

use crate::GlobalArgs;

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Shape to copy: qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, smollm2-135m, llama3.2-1b (with
    /// its RoPE scaling), gemma3-270m, qwen3-30b-a3b (128 experts, 8 per token) or gpt-oss-20b
    /// (MXFP4 experts, 32, 4 per token; Q8_0 elsewhere, as ggml-org's file), qwen3.5-0.8b,
    /// qwen3.5-2b or qwen3.5-4b (Gated DeltaNet hybrids).
    /// With q4_k_m, gpt-oss-20b keeps that mix (its width, 2880, takes no k-quant).
    #[arg(long, value_name = "MODEL")]
    pub like: String,
    /// Keep only the first N layers of the shape (a model too big for this machine's memory,
    /// measured at the same width; say so with its figures).
    #[arg(long, value_name = "N")]
    pub layers: Option<usize>,
    /// Tensor types: q4_k_m (llama.cpp's mix, per tensor), q8_0 or f16.
    #[arg(long, value_name = "QUANT", default_value = "q4_k_m")]
    pub quant: String,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output GGUF file.
    pub out: PathBuf,
}

/// The shape of a known model (the real checkpoint's GGUF metadata).
fn shape(like: &str) -> Result<(SynthSpec, bool)> {
    let f32 = DType::F32;
    // (spec, tied output head)
    Ok(match like {
        "qwen2.5-0.5b" => (
            SynthSpec::shaped("qwen2", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1e6, f32),
            false,
        ),
        "qwen2.5-1.5b" => (
            SynthSpec::shaped("qwen2", 28, 1536, 12, 2, 128, 8960, 151936, 32768, 1e6, f32),
            false,
        ),
        "qwen2.5-7b" => (
            SynthSpec::shaped(
                "qwen2", 28, 3584, 28, 4, 128, 18944, 152064, 32768, 1e6, f32,
            ),
            false,
        ),
        "smollm2-135m" => (
            SynthSpec::shaped("llama", 30, 576, 9, 3, 64, 1536, 49152, 8192, 1e5, f32),
            true,
        ),
        "llama3.2-1b" => {
            let mut s =
                SynthSpec::shaped("llama", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 5e5, f32);
            // Llama 3.2's scaling, as its converted GGUF carries it: a frequency divisor per pair.
            let scaling = RopeScaling::Llama3 {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_context: 8192.0,
            };
            let f = scaling.factors(64, 5e5);
            s.rope_freqs = Some(f.iter().map(|&v| v as f32).collect());
            (s, true)
        }
        "gemma3-270m" => {
            let mut s =
                SynthSpec::shaped("gemma3", 18, 640, 4, 1, 256, 2048, 262144, 32768, 1e6, f32);
            s.sliding_window = Some(512);
            (s, true)
        }
        "gpt-oss-20b" => {
            let mut s = SynthSpec::shaped(
                "gpt-oss", 24, 2880, 64, 8, 64, 2880, 201088, 131072, 150000.0, f32,
            );
            s.experts = Some((32, 4));
            s.expert_dtype = Some(DType::MXFP4);
            s.sliding_window = Some(128);
            s.yarn = Some((32.0, 4096));
            (s, false)
        }
        "qwen3-30b-a3b" => {
            let mut s = SynthSpec::shaped(
                "qwen3moe", 48, 2048, 32, 4, 128, 768, 151936, 40960, 1e6, f32,
            );
            s.experts = Some((128, 8));
            (s, false)
        }
        // Qwen3.5 dense: head 256 (64 rotary dims), [3 Gated DeltaNet, 1 gated attention] x n,
        // 16 key heads of 128, conv 4 (the 4B's value heads map 2:1 onto key heads).
        "qwen3.5-0.8b" | "qwen3.5-2b" | "qwen3.5-4b" => {
            let (d, layers, heads, kv, hv, ffn, tied) = match like {
                "qwen3.5-0.8b" => (1024, 24, 8, 2, 16, 3584, true),
                "qwen3.5-2b" => (2048, 24, 8, 2, 16, 6144, true),
                _ => (2560, 32, 16, 4, 32, 9216, true),
            };
            let mut s = SynthSpec::shaped(
                "qwen35", layers, d, heads, kv, 256, ffn, 248320, 262144, 1e7, f32,
            );
            s.rope_dim = Some(64);
            s.delta = Some(SynthDelta {
                k_heads: 16,
                v_heads: hv,
                dk: 128,
                dv: 128,
                kernel: 4,
                interval: 4,
            });
            // Released with one multi-token-prediction layer, which conversions keep.
            s.mtp = true;
            (s, tied)
        }
        other => bail!(
            "unknown --like {other:?}: qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, smollm2-135m, \
             llama3.2-1b, gemma3-270m, qwen3-30b-a3b, gpt-oss-20b, qwen3.5-0.8b, qwen3.5-2b or \
             qwen3.5-4b"
        ),
    })
}

/// llama.cpp's `use_more_bits`, applied (as llama.cpp's counters are) in the order the tensors
/// come in the file, whose layers sort as strings (0, 1, 10, 11, ..., 2, 20, ...). Checked
/// against Qwen2.5-Coder-1.5B-Instruct Q4_K_M: attn_v and ffn_down are Q6_K in layers 0, 1,
/// 5-10, 13, 16, 19, 21, 24, 27 of 28.
fn more_bits_layers(n_layers: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n_layers).collect();
    order.sort_by_key(|i| i.to_string());
    let n = n_layers;
    order
        .into_iter()
        .enumerate()
        .filter(|&(p, _)| p < n / 8 || p >= 7 * n / 8 || (p - n / 8) % 3 == 2)
        .map(|(_, layer)| layer)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// llama.cpp's fallback when a row length is not a multiple of 256 (k-quants impossible).
fn fit(dtype: DType, k: usize) -> DType {
    if k.is_multiple_of(256) {
        return dtype;
    }
    match dtype {
        DType::Q4K => DType::Q5_0,
        DType::Q5K => DType::Q5_1,
        DType::Q6K => DType::Q8_0,
        other => other,
    }
}

fn spec_for(like: &str, quant: &str, seed: u64, layers: Option<usize>) -> Result<SynthSpec> {
    let (mut spec, tied) = shape(like)?;
    if let Some(n) = layers {
        if n == 0 || n > spec.n_layers {
            bail!("--layers {n}: {like} has 1..={} layers", spec.n_layers);
        }
        spec.n_layers = n;
    }
    let d = spec.d_model;
    let f = spec.ffn_dim;
    spec.seed = seed;
    spec.tokenizer = true;
    if spec.expert_dtype == Some(DType::MXFP4) {
        // gpt-oss as released (ggml-org's GGUF): MXFP4 experts, Q8_0 everything else.
        spec.matrix_dtype = DType::Q8_0;
        spec.down_dtype = DType::Q8_0;
        spec.embed_dtype = DType::Q8_0;
        spec.output_dtype = (!tied).then_some(DType::Q8_0);
        return Ok(spec);
    }
    match quant {
        "q8_0" | "f16" => {
            let t = if quant == "q8_0" {
                DType::Q8_0
            } else {
                DType::F16
            };
            spec.matrix_dtype = t;
            spec.down_dtype = t;
            spec.embed_dtype = t;
            spec.output_dtype = (!tied).then_some(t);
        }
        "q4_k_m" => {
            spec.matrix_dtype = fit(DType::Q4K, d);
            spec.down_dtype = fit(DType::Q4K, f);
            if tied {
                // The embedding doubles as the output head: llama.cpp gives it the head's Q6_K.
                spec.embed_dtype = fit(DType::Q6K, d);
                spec.output_dtype = None;
            } else {
                spec.embed_dtype = fit(DType::Q4K, d);
                spec.output_dtype = Some(fit(DType::Q6K, d));
            }
            for i in more_bits_layers(spec.n_layers) {
                spec.overrides
                    .push((format!("blk.{i}.attn_v.weight"), fit(DType::Q6K, d)));
                let down = if spec.experts.is_some() {
                    "ffn_down_exps"
                } else {
                    "ffn_down"
                };
                spec.overrides
                    .push((format!("blk.{i}.{down}.weight"), fit(DType::Q6K, f)));
            }
        }
        other => bail!("unknown --quant {other:?}: q4_k_m, q8_0 or f16"),
    }
    Ok(spec)
}

pub fn run(args: &SynthArgs, _global: &GlobalArgs) -> Result<()> {
    let spec = spec_for(&args.like, &args.quant, args.seed, args.layers)?;
    let start = std::time::Instant::now();
    write_synth_gguf(&spec, &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    let bytes = std::fs::metadata(&args.out).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "synth: {} ({} {}{}, seed {}): {:.2} GiB in {:.1} s",
        args.out.display(),
        args.like,
        args.quant,
        args.layers
            .map_or(String::new(), |n| format!(", first {n} layers")),
        args.seed,
        bytes as f64 / (1u64 << 30) as f64,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_layers_match_the_real_qwen_file() {
        assert_eq!(
            more_bits_layers(28),
            vec![0, 1, 5, 6, 7, 8, 9, 10, 13, 16, 19, 21, 24, 27]
        );
    }
}
