//! `gpu-check` of paged attention: the GPU kernels (tiled and one block per row, one pass and
//! split with the merge) against `tf_kernels::attention` on the CPU, bitwise, for calls that
//! mix sequences, tree rows with remapped positions and partial key chunks, and rows of up to
//! 64 chunks (the merge in pieces), plain and with sliding windows and soft-capped scores; and
//! their time for a 512-row prefill call over 2048 keys.

use crate::rowops::{AttnDims, AttnKeys, AttnSplit};
use crate::Gpu;
use crate::Result;
use tf_core::BlockId;
use tf_kernels::actq::{ActBlock, QuantAct};
use tf_kernels::attention::{self, AttnShape, KeyRemap, RowKeys, KEY_CHUNK};
use tf_kernels::kv::{bf16_from_f32, KvFormat, KvLayer, PlaneRef, BLOCK_SIZE};
use tf_kernels::pool::ThreadPool;
use tf_kernels::SimdLevel;

use super::ops::{activations, bits_equal, quant_equal, time, Row};

/// (query heads, KV heads, head dimension): Qwen2.5 1.5B, 7B and 0.5B, SmolLM2-135M, Gemma 3
/// 270M, and the tiny test checkpoints.
const SHAPES: [(usize, usize, usize); 6] = [
    (12, 2, 128),
    (28, 4, 128),
    (14, 2, 64),
    (9, 3, 64),
    (4, 1, 256),
    (4, 2, 16),
];

/// (sliding window, score soft-cap, sinks): plain, windows that cut inside a chunk and on its
/// edge, soft-capping alone and with a window, attention sinks alone and with a window
/// (gpt-oss).
const VARIANTS: [(Option<usize>, Option<f32>, bool); 7] = [
    (None, None, false),
    (Some(100), None, false),
    (Some(64), None, false),
    (None, Some(30.0), false),
    (Some(40), Some(5.0), false),
    (None, None, true),
    (Some(100), None, true),
];

/// One test row: sequence, position, optional remap (base, slots).
struct TestRow {
    seq: usize,
    pos: usize,
    remap: Option<(usize, Vec<usize>)>,
}

fn span(seq: usize, from: usize, to: usize) -> impl Iterator<Item = TestRow> {
    (from..to).map(move |pos| TestRow {
        seq,
        pos,
        remap: None,
    })
}

/// Tree rows of sequence 0 (330 keys written): positions 328.. read from spare slots 331..335.
fn tree_rows() -> Vec<TestRow> {
    vec![
        TestRow {
            seq: 0,
            pos: 328,
            remap: Some((328, vec![333])),
        },
        TestRow {
            seq: 0,
            pos: 329,
            remap: Some((328, vec![333, 331])),
        },
        TestRow {
            seq: 0,
            pos: 330,
            remap: Some((328, vec![333, 334, 335])),
        },
    ]
}

/// Long on purpose: the attention forms and variants are checked in one sweep over the same
/// shapes and row sets, in the order the table prints them.
pub fn run(
    gpu: &mut Gpu,
    level: SimdLevel,
    pool: &ThreadPool,
    seed: u64,
    table: &mut Vec<Row>,
) -> Result<()> {
    // Sequences: 0 with 336 slots (330 positions + spare slots for tree rows), 1 with 48, 2
    // with 2048; block tables interleaved over the cache.
    let att_few = gpu.att_few;
    let lens = [336usize, 48, 2048];
    let n_blocks: usize = lens.iter().map(|l| l / BLOCK_SIZE).sum();
    let mut tables: Vec<Vec<BlockId>> = vec![Vec::new(); 3];
    let mut next = 0;
    while tables
        .iter()
        .zip(lens)
        .any(|(t, l)| t.len() < l / BLOCK_SIZE)
    {
        for (t, l) in tables.iter_mut().zip(lens) {
            if t.len() < l / BLOCK_SIZE {
                t.push(((next * 7) % n_blocks) as BlockId);
                next += 1;
            }
        }
    }
    let cases: Vec<(&str, Vec<TestRow>)> = vec![
        (
            "mixed",
            span(0, 250, 330)
                .chain(span(1, 0, 40))
                .chain(tree_rows())
                .collect(),
        ),
        (
            "verify",
            span(0, 318, 330)
                .chain(span(1, 36, 40))
                .chain(tree_rows())
                .collect(),
        ),
        ("decode", span(0, 329, 330).collect()),
        ("decode short", span(1, 40, 41).collect()),
        (
            "verify short",
            span(0, 60, 62).chain(span(1, 44, 46)).collect(),
        ),
        ("tree", tree_rows()),
        // The split form's merge over more than one piece of 32 chunks: 64 chunks, and rows of
        // 35 chunks with a partial second piece next to rows of another sequence.
        ("decode long", span(2, 2047, 2048).collect()),
        (
            "verify long",
            span(2, 1090, 1100).chain(span(0, 320, 324)).collect(),
        ),
        ("prefill 2k", span(2, 1536, 2048).collect()),
    ];
    for (h, kvh, hd) in SHAPES {
        let kv_dim = kvh * hd;
        let slots = n_blocks * BLOCK_SIZE;
        let k = activations(slots, kv_dim, seed ^ 0xA0 ^ hd as u64);
        let v = activations(slots, kv_dim, seed ^ 0xB0 ^ hd as u64);
        // The GPU program's cache format: f32 as they are, or bf16 (rounded as the CPU cache
        // rounds, two to an f32-sized unit of the buffer); the CPU cache holds each block head
        // by head.
        let bf16 = gpu.kv == KvFormat::Bf16;
        let (k16, v16): (Vec<u16>, Vec<u16>) = (
            k.iter().map(|&x| bf16_from_f32(x)).collect(),
            v.iter().map(|&x| bf16_from_f32(x)).collect(),
        );
        let (dk, dv) = if bf16 {
            (gpu.upload(&packed(&k16))?, gpu.upload(&packed(&v16))?)
        } else {
            (gpu.upload(&k)?, gpu.upload(&v)?)
        };
        let (hk, hv) = (head_major(&k, kvh, hd), head_major(&v, kvh, hd));
        let (hk16, hv16) = (head_major(&k16, kvh, hd), head_major(&v16, kvh, hd));
        let flat: Vec<i32> = tables.iter().flatten().map(|&b| b as i32).collect();
        let toff = [0, lens[0] / BLOCK_SIZE, (lens[0] + lens[1]) / BLOCK_SIZE];
        let dtables = gpu.upload(&flat)?;
        let scale = 1.0 / (hd as f32).sqrt();
        // Sink logits around the scores' size (some above every score of a row).
        let sinks: Vec<f32> = (0..h).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        let dsinks = gpu.upload(&sinks)?;
        for ((name, rows), (window, softcap, sink)) in cases
            .iter()
            .flat_map(|c| VARIANTS.iter().map(move |v| (c, *v)))
        {
            let variant = format!(
                "{}{}{}",
                window.map_or(String::new(), |w| format!(" window {w}")),
                softcap.map_or(String::new(), |c| format!(" cap {c}")),
                if sink { " sinks" } else { "" }
            );
            let m = rows.len();
            let qd = h * hd;
            // Every fifth row is scaled up so that some exponentials reach their cut-off.
            let mut q = activations(m, qd, seed ^ 0xC0 ^ m as u64);
            for (r, row) in q.chunks_mut(qd).enumerate() {
                if r % 5 == 0 {
                    row.iter_mut().for_each(|x| *x *= 8.0);
                }
            }
            let keys: Vec<RowKeys> = rows
                .iter()
                .map(|r| RowKeys {
                    table: &tables[r.seq],
                    first: window.map_or(0, |w| (r.pos + 1).saturating_sub(w)),
                    n_keys: r.pos + 1,
                    remap: r.remap.as_ref().map(|(base, s)| KeyRemap {
                        base: *base,
                        slots: s,
                    }),
                })
                .collect();
            let shape = AttnShape {
                softcap,
                sinks: sink.then_some(&sinks[..]),
                n_heads: h,
                n_kv_heads: kvh,
                head_dim: hd,
                scale,
            };
            let mut want = vec![0f32; m * qd];
            let (pk, pv) = if bf16 {
                (PlaneRef::Bf16(&hk16), PlaneRef::Bf16(&hv16))
            } else {
                (PlaneRef::F32(&hk), PlaneRef::F32(&hv))
            };
            let kv = KvLayer {
                k: pk,
                v: pv,
                kv_heads: kvh,
                head_dim: hd,
            };
            attention::attention(pool, level, &shape, &q, &keys, kv, &mut want);

            let (mut meta, mut remaps) = (Vec::new(), Vec::new());
            for r in rows {
                let (base, roff) = match &r.remap {
                    Some((base, s)) => {
                        let o = remaps.len() as i32;
                        remaps.extend(s.iter().map(|&x| x as i32));
                        (*base as i32, o)
                    }
                    None => (-1, 0),
                };
                meta.extend([toff[r.seq] as i32, r.pos as i32 + 1, base, roff]);
            }
            remaps.push(0);
            // Each row's own position is the slot its call would write.
            let fresh: Vec<i32> = rows
                .iter()
                .map(|r| {
                    let s = match &r.remap {
                        Some((base, sl)) if r.pos >= *base => sl[r.pos - base],
                        _ => r.pos,
                    };
                    (tables[r.seq][s / BLOCK_SIZE] as usize * BLOCK_SIZE + s % BLOCK_SIZE) as i32
                })
                .collect();
            let (dq, dmeta, dremaps) = (gpu.upload(&q)?, gpu.upload(&meta)?, gpu.upload(&remaps)?);
            let dfresh = gpu.upload(&fresh)?;
            let dkeys = AttnKeys {
                kc: &dk,
                vc: &dv,
                meta: &dmeta,
                tables: &dtables,
                remaps: &dremaps,
                fresh: &dfresh,
                sinks: sink.then_some(&dsinks),
            };
            let dims = AttnDims {
                rows: m,
                n_heads: h,
                n_kv_heads: kvh,
                head_dim: hd,
                scale,
                window,
                softcap,
            };
            let max_keys = rows.iter().map(|r| r.pos + 1).max().unwrap_or(1);
            let max_chunks = max_keys.div_ceil(KEY_CHUNK);
            let mut part_ml = gpu.zeros::<f32>(2 * m * h * max_chunks)?;
            let mut part_o = gpu.zeros::<f32>(m * h * max_chunks * hd)?;
            let mut out = gpu.zeros::<f32>(m * qd)?;
            // The tiled kernel, one block per row, and (split only) the few-rows kernel.
            for form in ["tile", "row", "few"] {
                gpu.att_tile = form == "tile";
                gpu.att_few = if form == "few" { m } else { 0 };
                for split in [false, true] {
                    if split && m > 64 || form == "few" && !split {
                        continue;
                    }
                    let splits = gpu.attention_splits(&dims, max_chunks);
                    let mut launch = || -> Result<()> {
                        let sp = split.then_some(AttnSplit {
                            max_chunks,
                            splits,
                            part_ml: &mut part_ml,
                            part_o: &mut part_o,
                        });
                        gpu.attention(dims, &dq, &dkeys, sp, &mut out, None)
                    };
                    launch()?;
                    let micros = match variant.is_empty() {
                        true => time(gpu, &mut launch)?,
                        false => 0.0,
                    };
                    let got = gpu.download(&out)?;
                    let (eq, md) = bits_equal(&got, &want);
                    table.push(Row {
                        op: format!(
                            "attention {form}{}{}",
                            if split { " split" } else { "" },
                            if bf16 { " bf16" } else { "" }
                        ),
                        ty: format!("{name} {h}/{kvh}x{hd}{variant}"),
                        rows: m,
                        equal: eq,
                        total: m * qd,
                        max_diff: md,
                        micros,
                    });
                    // The merge that also quantizes (the o matmul's input), every block size
                    // the row length allows, against the CPU's quantization of its result.
                    for block in [ActBlock::B32, ActBlock::B256] {
                        if !split || form != "few" || qd % block.values() != 0 {
                            continue;
                        }
                        let mut act = gpu.act_buffer(block, m, qd)?;
                        let sp = AttnSplit {
                            max_chunks,
                            splits,
                            part_ml: &mut part_ml,
                            part_o: &mut part_o,
                        };
                        gpu.attention(dims, &dq, &dkeys, Some(sp), &mut out, Some(&mut act))?;
                        let want_q = QuantAct::new(SimdLevel::Scalar, block, &want, m, qd);
                        let (equal, total, max_diff) = quant_equal(gpu, &act, &want_q, m)?;
                        table.push(Row {
                            op: format!("attention merge_q B{}", block.values()),
                            ty: format!("{name} {h}/{kvh}x{hd}{variant}"),
                            rows: m,
                            equal,
                            total,
                            max_diff,
                            micros: 0.0,
                        });
                    }
                }
            }
            gpu.att_tile = true;
            gpu.att_few = att_few;
        }
    }
    Ok(())
}

/// Slot-major rows (`[slot][kv head][head_dim]`, the GPU cache's layout) rearranged as the CPU
/// cache holds them: per block of `BLOCK_SIZE` slots, head by head.
fn head_major<T: Copy + Default>(x: &[T], kv_heads: usize, hd: usize) -> Vec<T> {
    let kv_dim = kv_heads * hd;
    let mut out = vec![T::default(); x.len()];
    for (slot, row) in x.chunks_exact(kv_dim).enumerate() {
        let (b, p) = (slot / BLOCK_SIZE, slot % BLOCK_SIZE);
        for (h, head) in row.chunks_exact(hd).enumerate() {
            let at = ((b * kv_heads + h) * BLOCK_SIZE + p) * hd;
            out[at..at + hd].copy_from_slice(head);
        }
    }
    out
}

/// bf16 values two to an f32-sized unit (the first in the low half), as the GPU buffer holds
/// them: the f32s are only carriers of bits, never computed with.
fn packed(x: &[u16]) -> Vec<f32> {
    x.chunks(2)
        .map(|c| f32::from_bits(c[0] as u32 | (c.get(1).copied().unwrap_or(0) as u32) << 16))
        .collect()
}
