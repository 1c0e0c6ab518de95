//! Shared test helpers: locating real models and reference files, greedy decoding.
#![allow(dead_code)]

use std::path::PathBuf;
use tf_kernels::kv::{KvCache, KvFormat, BLOCK_SIZE};
use tf_kernels::ThreadPool;
use tf_models::{Model, Row};

/// The model cache (`$TENSORFOLD_CACHE/models`, default `~/.cache/tensorfold/models`).
pub fn model_path(file: &str) -> PathBuf {
    let base = std::env::var_os("TENSORFOLD_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|x| PathBuf::from(x).join("tensorfold")))
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/tensorfold")
        });
    let p = base.join("models").join(file);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-test-models (or `tensorfold pull`) first",
        p.display()
    );
    p
}

pub fn reference_dir() -> PathBuf {
    if let Some(s) = std::env::var_os("TENSORFOLD_SHARED") {
        return PathBuf::from(s).join("reference");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference")
}

pub fn kv_for(model: &Model, positions: usize) -> (KvCache, Vec<u32>) {
    let blocks = positions.div_ceil(BLOCK_SIZE);
    // f32: the oracle's keys and values are not rounded.
    let kv = KvCache::new(
        model.plan.kv_layers(),
        model.config.n_kv_heads,
        model.config.head_dim,
        blocks,
        KvFormat::F32,
    );
    (kv, (0..blocks as u32).collect())
}

pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for i in 1..v.len() {
        if v[i] > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Prefills `prompt` in chunks of `chunk` rows, then decodes `n` tokens greedily, returning the
/// tokens and the logits of every decoding step.
pub fn greedy(
    model: &Model,
    pool: &ThreadPool,
    prompt: &[u32],
    n: usize,
    chunk: usize,
) -> (Vec<u32>, Vec<Vec<f32>>) {
    let (mut kv, table) = kv_for(model, prompt.len() + n + 1);
    let mut last = Vec::new();
    let mut start = 0;
    while start < prompt.len() {
        let end = (start + chunk).min(prompt.len());
        let rows: Vec<Row> = (start..end)
            .map(|p| Row {
                token: prompt[p],
                pos: p,
                seq: 0,
                keep: true,
                table: &table,
                logits: p == prompt.len() - 1,
                tree: None,
            })
            .collect();
        last = model.forward(pool, &rows, &mut kv).unwrap();
        start = end;
    }
    let mut out = Vec::new();
    let mut steps = Vec::new();
    for i in 0..n {
        let t = argmax(&last);
        out.push(t);
        steps.push(last.clone());
        if i + 1 == n {
            break;
        }
        let row = Row {
            token: t,
            pos: prompt.len() + i,
            seq: 0,
            keep: true,
            table: &table,
            logits: true,
            tree: None,
        };
        last = model.forward(pool, &[row], &mut kv).unwrap();
    }
    (out, steps)
}
