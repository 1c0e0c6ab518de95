//! Attention: every SIMD level gives the scalar level's bits; a query row's output does not depend
//! on the other rows of the call or the thread count; the canonical chunked algorithm agrees with
//! a plain softmax computed in f64; masked keys are skipped.

mod common;
use common::*;
use tf_kernels::attention::{attention, attention_reference, AttnShape, RowKeys, KEY_CHUNK};
use tf_kernels::kv::{KvCache, KvFormat, BLOCK_SIZE};
use tf_kernels::{SimdLevel, ThreadPool};

struct Setup {
    kv: KvCache,
    table: Vec<u32>,
    shape: AttnShape<'static>,
    q: Vec<f32>,
    n: usize,
    /// The keys and values written, per position, before conversion to the cache's format.
    written: Vec<(Vec<f32>, Vec<f32>)>,
}

fn setup(n: usize, head_dim: usize) -> Setup {
    setup_in(KvFormat::F32, n, head_dim)
}

/// The formats that can hold rows of `head_dim` values of two KV heads.
fn formats(head_dim: usize) -> impl Iterator<Item = KvFormat> {
    KvFormat::ALL
        .into_iter()
        .filter(move |f| f.check(head_dim).is_ok())
}

fn setup_in(format: KvFormat, n: usize, head_dim: usize) -> Setup {
    let (n_heads, n_kv_heads) = (6, 2);
    let kv_dim = n_kv_heads * head_dim;
    let blocks = n.div_ceil(BLOCK_SIZE);
    let mut kv = KvCache::new(1, n_kv_heads, head_dim, blocks + 3, format);
    // A scattered block table, as a real sequence gets.
    let table: Vec<u32> = (0..blocks as u32)
        .map(|b| (b * 7 + 2) % (blocks as u32 + 3))
        .collect();
    let mut rng = SplitMix64::new(n as u64 * 13 + head_dim as u64);
    let mut written = Vec::new();
    for p in 0..n {
        let k: Vec<f32> = (0..kv_dim).map(|_| rng.next_f32_signed()).collect();
        let v: Vec<f32> = (0..kv_dim).map(|_| rng.next_f32_signed()).collect();
        kv.write(0, &table, p, &k, &v);
        written.push((k, v));
    }
    let q: Vec<f32> = (0..n * n_heads * head_dim)
        .map(|_| rng.next_f32_signed() * 3.0)
        .collect();
    Setup {
        kv,
        table,
        shape: AttnShape {
            softcap: None,
            sinks: None,
            n_heads,
            n_kv_heads,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
        },
        q,
        n,
        written,
    }
}

fn run(
    s: &Setup,
    level: SimdLevel,
    pool: &ThreadPool,
    rows: std::ops::Range<usize>,
    remap: Option<tf_kernels::attention::KeyRemap>,
) -> Vec<f32> {
    run_window(s, level, pool, rows, remap, usize::MAX)
}

/// [`run`] with a sliding window of `window` keys per row.
fn run_window(
    s: &Setup,
    level: SimdLevel,
    pool: &ThreadPool,
    rows: std::ops::Range<usize>,
    remap: Option<tf_kernels::attention::KeyRemap>,
    window: usize,
) -> Vec<f32> {
    let qd = s.shape.n_heads * s.shape.head_dim;
    let keys: Vec<RowKeys> = rows
        .clone()
        .map(|p| RowKeys {
            table: &s.table,
            first: (p + 1).saturating_sub(window),
            n_keys: p + 1,
            remap,
        })
        .collect();
    let mut out = vec![0f32; keys.len() * qd];
    attention(
        pool,
        level,
        &s.shape,
        &s.q[rows.start * qd..rows.end * qd],
        &keys,
        s.kv.layer(0),
        &mut out,
    );
    out
}

#[test]
fn levels_rows_and_threads_agree_bitwise() {
    for (head_dim, format) in [64usize, 128, 40, 256]
        .into_iter()
        .flat_map(|hd| formats(hd).map(move |f| (hd, f)))
    {
        let s = setup_in(format, 3 * KEY_CHUNK + 5, head_dim);
        let qd = s.shape.n_heads * head_dim;
        let p1 = ThreadPool::new(1);
        let want = run(&s, SimdLevel::Scalar, &p1, 0..s.n, None);
        for level in SimdLevel::available() {
            for threads in [1, 2, 3] {
                let pool = ThreadPool::new(threads);
                assert!(
                    bits_eq(&run(&s, level, &pool, 0..s.n, None), &want),
                    "{format:?} {level:?} x{threads}"
                );
            }
            // Each row alone, and inside a window at an offset.
            for p in [0usize, 31, 32, 33, s.n - 1] {
                let got = run(&s, level, &p1, p..p + 1, None);
                assert!(
                    bits_eq(&got, &want[p * qd..(p + 1) * qd]),
                    "row {p} alone, {format:?} {level:?}"
                );
            }
            let got = run(&s, level, &p1, 20..57, None);
            assert!(bits_eq(&got, &want[20 * qd..57 * qd]));
        }
    }
}

/// A long row alone on more threads than its (row, KV head) jobs has its chunks split over
/// the threads and merged in order: the bits of the scalar row on one thread, for one and two
/// KV heads, windowed or not, every format and head size that takes the AVX-512 kernel.
#[test]
fn a_long_row_split_over_threads_keeps_its_bits() {
    for (head_dim, format) in [64usize, 128, 256]
        .into_iter()
        .flat_map(|hd| formats(hd).map(move |f| (hd, f)))
    {
        let mut s = setup_in(format, 23 * KEY_CHUNK + 7, head_dim);
        let qd = s.shape.n_heads * head_dim;
        let p1 = ThreadPool::new(1);
        let last = s.n - 1;
        for kv_heads in [2, 1] {
            // One KV head: the six query heads all read the cache's head 0.
            s.shape.n_kv_heads = kv_heads;
            for window in [usize::MAX, 600] {
                let want = run_window(&s, SimdLevel::Scalar, &p1, last..s.n, None, window);
                for level in SimdLevel::available() {
                    for threads in [2, 3, 5] {
                        let pool = ThreadPool::new(threads);
                        let got = run_window(&s, level, &pool, last..s.n, None, window);
                        assert!(
                            bits_eq(&got, &want),
                            "{format:?} hd {head_dim} kv {kv_heads} w{window} {level:?} x{threads}"
                        );
                    }
                }
                // The long row in one call with a short row (their jobs split and not).
                let short = run_window(&s, SimdLevel::Scalar, &p1, 3..4, None, window);
                let keys: Vec<RowKeys> = [3usize, last]
                    .iter()
                    .map(|&p| RowKeys {
                        table: &s.table,
                        first: (p + 1).saturating_sub(window),
                        n_keys: p + 1,
                        remap: None,
                    })
                    .collect();
                let q = [&s.q[3 * qd..4 * qd], &s.q[last * qd..s.n * qd]].concat();
                let mut got = vec![0f32; 2 * qd];
                let pool = ThreadPool::new(5);
                attention(
                    &pool,
                    tf_kernels::detect(),
                    &s.shape,
                    &q,
                    &keys,
                    s.kv.layer(0),
                    &mut got,
                );
                assert!(
                    bits_eq(&got[..qd], &short),
                    "short row, kv {kv_heads} w{window}"
                );
                assert!(
                    bits_eq(&got[qd..], &want),
                    "long row, kv {kv_heads} w{window}"
                );
            }
        }
    }
}

/// Sliding-window rows (windows shorter and longer than a chunk, starting inside a chunk and on
/// its edge): every level, thread count and grouping of rows gives the scalar bits of the row
/// alone, on head sizes that take each kernel.
#[test]
fn sliding_window_rows_agree_bitwise() {
    for (head_dim, format) in [64usize, 40, 256]
        .into_iter()
        .flat_map(|hd| formats(hd).map(move |f| (hd, f)))
    {
        let s = setup_in(format, 3 * KEY_CHUNK + 5, head_dim);
        let qd = s.shape.n_heads * head_dim;
        let p1 = ThreadPool::new(1);
        for window in [1usize, 5, KEY_CHUNK, KEY_CHUNK + 1, 40, 2 * KEY_CHUNK] {
            let want = run_window(&s, SimdLevel::Scalar, &p1, 0..s.n, None, window);
            for level in SimdLevel::available() {
                for threads in [1, 3] {
                    let pool = ThreadPool::new(threads);
                    let got = run_window(&s, level, &pool, 0..s.n, None, window);
                    assert!(
                        bits_eq(&got, &want),
                        "w{window} {format:?} {level:?} x{threads}"
                    );
                }
                for p in [0usize, window, 33, s.n - 1] {
                    let p = p.min(s.n - 1);
                    let got = run_window(&s, level, &p1, p..p + 1, None, window);
                    let alone = &want[p * qd..(p + 1) * qd];
                    assert!(bits_eq(&got, alone), "w{window} row {p} alone, {level:?}");
                }
                let got = run_window(&s, level, &p1, 20..57, None, window);
                assert!(
                    bits_eq(&got, &want[20 * qd..57 * qd]),
                    "w{window} {level:?}"
                );
            }
        }
    }
}

#[test]
fn matches_plain_softmax() {
    for format in KvFormat::ALL {
        plain_softmax_in(format, usize::MAX, None, None);
    }
}

#[test]
fn sliding_window_matches_plain_softmax() {
    for window in [1usize, 7, 40] {
        plain_softmax_check(window, None, None);
    }
}

/// One sink logit per query head (gpt-oss), near and far above the scores.
const SINKS: [f32; 6] = [0.5, -2.0, 3.0, 0.0, 12.0, -30.0];

/// Attention sinks: against the float64 formula, and every level, thread count and row
/// grouping gives the bits of the scalar rows alone, windowed or not.
#[test]
fn attention_sinks() {
    plain_softmax_check(usize::MAX, None, Some(&SINKS));
    plain_softmax_check(9, Some(2.0), Some(&SINKS));
    for window in [usize::MAX, 20] {
        let mut s = setup(2 * KEY_CHUNK + 3, 64);
        s.shape.sinks = Some(&SINKS);
        let qd = s.shape.n_heads * 64;
        let p1 = ThreadPool::new(1);
        let want = run_window(&s, SimdLevel::Scalar, &p1, 0..s.n, None, window);
        let mut plain = setup(2 * KEY_CHUNK + 3, 64);
        plain.shape.sinks = None;
        let without = run_window(&plain, SimdLevel::Scalar, &p1, 0..s.n, None, window);
        assert!(!bits_eq(&want, &without), "the sinks change nothing");
        for level in SimdLevel::available() {
            let pool = ThreadPool::new(3);
            let all = run_window(&s, level, &pool, 0..s.n, None, window);
            assert!(bits_eq(&all, &want), "{level:?}");
            let got = run_window(&s, level, &p1, 40..41, None, window);
            assert!(bits_eq(&got, &want[40 * qd..41 * qd]), "{level:?}");
        }
    }
}

/// Soft-capped scores (Gemma 2): against the float64 formula, and every level, thread count
/// and row grouping gives the bits of the scalar rows alone.
#[test]
fn soft_capped_scores() {
    plain_softmax_check(usize::MAX, Some(0.7), None);
    plain_softmax_check(9, Some(2.0), None);
    let mut s = setup(2 * KEY_CHUNK + 3, 64);
    s.shape.softcap = Some(1.5);
    let qd = s.shape.n_heads * 64;
    let p1 = ThreadPool::new(1);
    let want = run_window(&s, SimdLevel::Scalar, &p1, 0..s.n, None, 20);
    for level in SimdLevel::available() {
        let pool = ThreadPool::new(3);
        assert!(bits_eq(
            &run_window(&s, level, &pool, 0..s.n, None, 20),
            &want
        ));
        let got = run_window(&s, level, &p1, 40..41, None, 20);
        assert!(bits_eq(&got, &want[40 * qd..41 * qd]), "{level:?}");
    }
}

/// The kernel against a float64 softmax over each row's visible keys (and its head's sink).
fn plain_softmax_check(window: usize, softcap: Option<f32>, sinks: Option<&'static [f32]>) {
    plain_softmax_in(KvFormat::F32, window, softcap, sinks)
}

/// [`plain_softmax_check`] over a cache in `format`, against the keys and values it holds.
fn plain_softmax_in(
    format: KvFormat,
    window: usize,
    softcap: Option<f32>,
    sinks: Option<&'static [f32]>,
) {
    let mut s = setup_in(format, 150, 64);
    s.shape.softcap = softcap;
    s.shape.sinks = sinks;
    let pool = ThreadPool::new(2);
    let hd = s.shape.head_dim;
    let qd = s.shape.n_heads * hd;
    let got = run_window(&s, tf_kernels::detect(), &pool, 0..s.n, None, window);
    let layer = s.kv.layer(0);
    let widen = |plane: tf_kernels::kv::PlaneRef, off: usize| {
        let mut x = vec![0f32; hd];
        plane.widen(off, &mut x);
        x
    };
    for p in [0usize, 1, 77, 149] {
        let lo = (p + 1).saturating_sub(window);
        for h in 0..s.shape.n_heads {
            let kvh = h / (s.shape.n_heads / s.shape.n_kv_heads);
            let q = &s.q[p * qd + h * hd..p * qd + (h + 1) * hd];
            let scores: Vec<f64> = (lo..=p)
                .map(|j| {
                    let off = layer.head_at(&s.table, j, kvh);
                    q.iter()
                        .zip(&widen(layer.k, off))
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>()
                        * s.shape.scale as f64
                })
                .map(|x| softcap.map_or(x, |c| c as f64 * (x / c as f64).tanh()))
                .collect();
            let sink = sinks.map(|s| s[h] as f64);
            let m = scores.iter().cloned().chain(sink).fold(f64::MIN, f64::max);
            let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = w.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - m).exp());
            for d in 0..hd {
                let want: f64 = (lo..=p)
                    .map(|j| {
                        let v = widen(layer.v, layer.head_at(&s.table, j, kvh));
                        w[j - lo] * v[d] as f64
                    })
                    .sum::<f64>()
                    / z;
                let g = got[p * qd + h * hd + d] as f64;
                assert!((g - want).abs() < 1e-5, "p={p} h={h} d={d}: {g} vs {want}");
            }
        }
    }
}

#[test]
fn remapped_positions_give_the_serial_bits() {
    // A tree-draft row reads its last positions from other slots: it must compute exactly what the
    // same row computes when those positions sit in their own slots.
    use tf_kernels::attention::KeyRemap;
    let n = 70;
    for format in KvFormat::ALL {
        let s = setup_in(format, n, 64);
        let pool = ThreadPool::new(1);
        let qd = s.shape.n_heads * 64;
        let serial = run(&s, SimdLevel::Scalar, &pool, n - 1..n, None);
        // Copy positions 60..70 to slots 90..100 in reverse, scribble over the originals.
        let base = 60;
        let slots: Vec<usize> = (base..n).map(|p| 90 + (n - 1 - p)).collect();
        let blocks = 100usize.div_ceil(BLOCK_SIZE);
        let mut kv = KvCache::new(1, s.kv.kv_heads, s.kv.head_dim, blocks, format);
        let table: Vec<u32> = (0..blocks as u32).collect();
        let kvd = s.kv.kv_dim;
        for p in 0..n {
            let (k, v) = &s.written[p];
            let slot = if p >= base { slots[p - base] } else { p };
            kv.write(0, &table, slot, k, v);
            if p >= base {
                kv.write(0, &table, p, &vec![9.0; kvd], &vec![-9.0; kvd]);
            }
        }
        for level in SimdLevel::available() {
            let keys = [RowKeys {
                table: &table,
                first: 0,
                n_keys: n,
                remap: Some(KeyRemap {
                    base,
                    slots: &slots,
                }),
            }];
            let mut out = vec![0f32; qd];
            attention(
                &pool,
                level,
                &s.shape,
                &s.q[(n - 1) * qd..n * qd],
                &keys,
                kv.layer(0),
                &mut out,
            );
            assert!(bits_eq(&out, &serial), "{format:?} {level:?}");
        }
    }
}

/// Grouped-query jobs (all query heads of a KV head together) equal one job per head, bit for
/// bit, at every level, for groups of 1 to 7 heads and several head sizes.
#[test]
fn grouped_heads_equal_one_head_jobs() {
    for (n_heads, n_kv_heads, head_dim) in [
        (6, 2, 64),
        (14, 2, 64),
        (12, 12, 40),
        (28, 4, 128),
        (9, 3, 64),
        (10, 2, 128),
        (8, 2, 64),
        (10, 2, 64),
    ] {
        let mut s = setup(2 * KEY_CHUNK + 9, head_dim);
        s.shape.n_heads = n_heads;
        s.shape.n_kv_heads = n_kv_heads;
        let kv_dim = n_kv_heads * head_dim;
        let blocks = s.n.div_ceil(BLOCK_SIZE);
        s.kv = KvCache::new(1, n_kv_heads, head_dim, blocks + 3, KvFormat::Bf16);
        let mut rng = SplitMix64::new(n_heads as u64 * 101 + head_dim as u64);
        for p in 0..s.n {
            let k: Vec<f32> = (0..kv_dim).map(|_| rng.next_f32_signed()).collect();
            let v: Vec<f32> = (0..kv_dim).map(|_| rng.next_f32_signed()).collect();
            s.kv.write(0, &s.table, p, &k, &v);
        }
        let qd = n_heads * head_dim;
        s.q = (0..s.n * qd).map(|_| rng.next_f32_signed() * 3.0).collect();
        let keys: Vec<RowKeys> = (0..s.n)
            .map(|p| RowKeys {
                table: &s.table,
                first: 0,
                n_keys: p + 1,
                remap: None,
            })
            .collect();
        let pool = ThreadPool::new(2);
        for level in SimdLevel::available() {
            let mut want = vec![0f32; s.n * qd];
            attention_reference(
                &pool,
                level,
                &s.shape,
                &s.q,
                &keys,
                s.kv.layer(0),
                &mut want,
            );
            let mut got = vec![f32::NAN; s.n * qd];
            attention(&pool, level, &s.shape, &s.q, &keys, s.kv.layer(0), &mut got);
            assert!(
                bits_eq(&got, &want),
                "{n_heads}/{n_kv_heads} heads of {head_dim}, {level:?}"
            );
        }
    }
}

/// Rows of two sequences interleaved in one call (as a shared step gives them), a sequence's
/// rows out of order and runs longer than a row group: each row equals itself alone.
#[test]
fn rows_of_several_sequences_equal_each_alone() {
    let s = setup(2 * KEY_CHUNK + 21, 128);
    let qd = s.shape.n_heads * s.shape.head_dim;
    // A second sequence over the same cache: the blocks in another order.
    let other: Vec<u32> = s.table.iter().rev().copied().collect();
    let pool = ThreadPool::new(2);
    let p1 = ThreadPool::new(1);
    let mut order: Vec<(usize, usize)> = Vec::new(); // (table 0 or 1, position)
    for p in 40..s.n {
        order.push((0, p));
        if p % 3 != 0 {
            order.push((1, p));
        }
    }
    order.extend([(0, 5), (0, 4), (1, 0), (1, 64), (1, 65)]);
    let tables = [&s.table, &other];
    let keys: Vec<RowKeys> = order
        .iter()
        .map(|&(t, p)| RowKeys {
            table: tables[t],
            first: 0,
            n_keys: p + 1,
            remap: None,
        })
        .collect();
    let q: Vec<f32> = order
        .iter()
        .flat_map(|&(_, p)| s.q[p * qd..(p + 1) * qd].iter().copied())
        .collect();
    for level in SimdLevel::available() {
        let mut got = vec![0f32; keys.len() * qd];
        attention(&pool, level, &s.shape, &q, &keys, s.kv.layer(0), &mut got);
        for (i, key) in keys.iter().enumerate() {
            let mut alone = vec![0f32; qd];
            let one = [*key];
            let qi = &q[i * qd..(i + 1) * qd];
            attention(
                &p1,
                SimdLevel::Scalar,
                &s.shape,
                qi,
                &one,
                s.kv.layer(0),
                &mut alone,
            );
            assert!(
                bits_eq(&got[i * qd..(i + 1) * qd], &alone),
                "row {i} {:?}, {level:?}",
                order[i]
            );
        }
    }
}
