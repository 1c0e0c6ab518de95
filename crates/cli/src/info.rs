//! `tensorfold info MODEL`: what a model is and what it needs, without downloading anything.

use anyhow::Result;
use clap::Args;
use tf_kernels::kv::KvCache;

use crate::load::{self, gib, human_bytes};
use crate::GlobalArgs;

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Model: a catalogue name (must be cached already), a GGUF file or a Hugging Face model
    /// directory.
    #[arg(value_name = "MODEL")]
    pub model: String,
}

pub fn run(args: &InfoArgs, global: &GlobalArgs) -> Result<()> {
    let path = load::locate(&args.model, global)?;
    let loaded = load::load(&path)?;
    let model = &loaded.model;
    let cfg = &model.config;

    let kv_per_token =
        KvCache::bytes_per_position(cfg.n_layers, cfg.kv_dim(), global.kv_type) as u64;
    let weight_bytes = model.weight_bytes() as u64;
    let full_context = weight_bytes + kv_per_token * cfg.context_len as u64;
    let types = model
        .tensor_types()
        .iter()
        .map(|(dtype, count)| format!("{dtype} x{count}"))
        .collect::<Vec<_>>()
        .join(", ");
    let yes_no = |b: bool| if b { "yes" } else { "no" };

    let rows: Vec<(&str, String)> = vec![
        ("path", path.display().to_string()),
        ("architecture", cfg.family.name.to_string()),
        ("layers", cfg.n_layers.to_string()),
        ("d_model", cfg.d_model.to_string()),
        (
            "heads / kv heads",
            format!("{} / {}", cfg.n_heads, cfg.n_kv_heads),
        ),
        ("head_dim", cfg.head_dim.to_string()),
        ("ffn", cfg.ffn_dim.to_string()),
        ("vocab", cfg.vocab.to_string()),
        ("trained context", cfg.context_len.to_string()),
        ("rope base", format!("{}", cfg.rope_base)),
        ("layer plan", model.plan.summary()),
        ("tensor types", types),
        (
            "weights",
            format!("{:.3} GiB ({weight_bytes} bytes)", gib(weight_bytes)),
        ),
        (
            "KV per token",
            format!(
                "{} ({} keys and values, --kv-type)",
                human_bytes(kv_per_token),
                global.kv_type.name()
            ),
        ),
        (
            "memory at full context",
            format!(
                "{:.3} GiB (weights + KV for {} positions)",
                gib(full_context),
                cfg.context_len
            ),
        ),
        ("SIMD level", model.level.name().to_string()),
        (
            "chat template",
            yes_no(loaded.tokenizer.chat_template().is_some()).to_string(),
        ),
        ("tokenizer", load::tokenizer_kind(model)),
        ("tied output", yes_no(model.tied_output()).to_string()),
    ];
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in rows {
        println!("{key:<width$}  {value}");
    }
    Ok(())
}
