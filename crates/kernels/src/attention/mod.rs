//! Attention over the paged KV cache with the canonical key-chunk order (ARCHITECTURE.md, exactness rule 3).
//!
//! For a query at position p the keys at positions 0..=p are visited in chunks of [`KEY_CHUNK`]
//! positions from position 0 (a tree-draft row reads some positions from other KV slots, but the
//! order is always by position, so it computes exactly what the serial row would). Inside a chunk: scores by the canonical dot, the chunk max, `e = exp(s - m)`, the chunk sum
//! and value sums in ascending key order (one FMA per key and dimension). Chunks are merged in
//! ascending order with one formula. Decode, verify and chunked prefill all run exactly this, so a
//! row's output does not depend on what else is in the call.
//!
//! A sliding-window row sees only the keys `first..=p`: it visits the same grid of chunks (fixed
//! by absolute position), starting at the chunk that holds `first`, and skips the keys before
//! `first` in that chunk, so the window changes which keys are read, never the order. (AVX-512
//! runs such a row alone, its skipped keys as -inf scores, whose exponentials are exactly 0.)
//!
//! Attention sinks (gpt-oss) are one more logit per head with a value of zero: merged after the
//! last chunk by the chunk-merge formula, so they scale a row down without touching its order.
//! Calls with sinks or soft-capping run the portable body.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use crate::canon;
use crate::kv::{KvLayer, PlaneRef};
use crate::pool::{SharedOut, ThreadPool};
use crate::SimdLevel;
use tf_core::BlockId;

/// Keys per canonical chunk.
pub const KEY_CHUNK: usize = 32;

/// What one query row attends to.
#[derive(Clone, Copy)]
pub struct RowKeys<'a> {
    /// The sequence's block table.
    pub table: &'a [BlockId],
    /// Keys at positions `first..n_keys` (the row's own position is `n_keys - 1`): `first` is 0
    /// for full attention and `n_keys - window` for a sliding window of `window` keys.
    pub first: usize,
    pub n_keys: usize,
    /// Where positions live in the cache: `None` = position p in slot p. Tree drafts place
    /// branch tokens in other slots.
    pub remap: Option<KeyRemap<'a>>,
}

/// Positions `base..` read from `slots[p - base]` instead of slot p.
#[derive(Clone, Copy, Debug)]
pub struct KeyRemap<'a> {
    pub base: usize,
    pub slots: &'a [usize],
}

impl RowKeys<'_> {
    /// Whether the row sees fewer keys than its position's whole prefix.
    #[inline(always)]
    pub fn windowed(&self) -> bool {
        self.first > 0
    }

    /// The canonical chunks the row visits: `(chunk start, first key read in it)`.
    #[inline(always)]
    pub fn chunks(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let start = self.first / KEY_CHUNK * KEY_CHUNK;
        (start..self.n_keys)
            .step_by(KEY_CHUNK)
            .map(|c0| (c0, c0.max(self.first)))
    }

    #[inline(always)]
    pub fn slot(&self, pos: usize) -> usize {
        match self.remap {
            Some(r) if pos >= r.base => r.slots[pos - r.base],
            _ => pos,
        }
    }
}

pub struct AttnShape<'a> {
    /// Scores become `cap * tanh(score / cap)` (Gemma 2's attention-logit soft-capping), with
    /// [`canon::tanh`]; such calls run the portable body.
    pub softcap: Option<f32>,
    /// One logit per query head that joins every row's softmax with a zero value (gpt-oss's
    /// attention sinks); such calls run the portable body.
    pub sinks: Option<&'a [f32]>,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
}

/// Query heads per KV head handled together at most (grouped-query attention): each key and value
/// row is loaded once for the whole group.
const MAX_GROUP: usize = 16;

/// `out[r]` = attention of query row `q[r]` (all heads) over its keys. Jobs are (row, KV head),
/// on AVX-512 (rows of one sequence, KV head) (`attention_avx512`): the query heads sharing a KV
/// head read each key and value once, and each of them runs exactly the operations of
/// [`attention_reference`]'s one-head jobs (the same bits).
pub fn attention(
    pool: &ThreadPool,
    level: SimdLevel,
    shape: &AttnShape,
    q: &[f32],
    rows: &[RowKeys],
    kv: KvLayer,
    out: &mut [f32],
) {
    let group = shape.n_heads / shape.n_kv_heads;
    if group > MAX_GROUP {
        return attention_reference(pool, level, shape, q, rows, kv, out);
    }
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx512Vnni
        && avx512::supports(shape.head_dim)
        && shape.softcap.is_none()
        && shape.sinks.is_none()
    {
        return attention_avx512(pool, shape, q, rows, kv, out);
    }
    head_jobs(pool, level, shape, q, rows, kv, out, group);
}

/// The row width of `shape`, checked against the query and output buffers of `rows`.
fn row_width(shape: &AttnShape, q: &[f32], rows: &[RowKeys], out: &[f32]) -> usize {
    let qd = shape.n_heads * shape.head_dim;
    assert_eq!(q.len(), rows.len() * qd);
    assert_eq!(out.len(), rows.len() * qd);
    qd
}

/// Jobs of (row, `per` consecutive query heads of one KV head): `per` = the group (each key and
/// value row loaded once for the group) or 1 ([`attention_reference`]).
#[allow(clippy::too_many_arguments)]
fn head_jobs(
    pool: &ThreadPool,
    level: SimdLevel,
    shape: &AttnShape,
    q: &[f32],
    rows: &[RowKeys],
    kv: KvLayer,
    out: &mut [f32],
    per: usize,
) {
    let qd = row_width(shape, q, rows, out);
    let (hd, group) = (shape.head_dim, shape.n_heads / shape.n_kv_heads);
    let per_row = shape.n_heads / per;
    let dst = SharedOut(out.as_mut_ptr());
    pool.for_ranges(rows.len() * per_row, 1, &|range| {
        let mut o = vec![0f32; per * hd];
        for job in range {
            let (r, h0) = (job / per_row, job % per_row * per);
            let qg = &q[r * qd + h0 * hd..r * qd + (h0 + per) * hd];
            group_heads(level, shape, qg, h0, group, &rows[r], &kv, &mut o);
            for (d, v) in o.iter().enumerate() {
                // SAFETY: each job writes its own heads' slice of `out`.
                unsafe { dst.write(r * qd + h0 * hd + d, *v) };
            }
        }
    });
}

/// [`attention`] with AVX-512: jobs are (rows of one sequence, KV head), each row's heads
/// computed exactly as alone.
#[cfg(target_arch = "x86_64")]
fn attention_avx512(
    pool: &ThreadPool,
    shape: &AttnShape,
    q: &[f32],
    rows: &[RowKeys],
    kv: KvLayer,
    out: &mut [f32],
) {
    row_width(shape, q, rows, out);
    let kvn = shape.n_kv_heads;
    let groups = row_groups(rows, avx512::ROW_GROUP);
    if groups.len() * kvn < pool.threads() && groups.iter().any(|g| splits(&rows[g.start], g)) {
        return attention_spans(pool, shape, q, rows, kv, out, &groups);
    }
    let dst = SharedOut(out.as_mut_ptr());
    pool.for_ranges(groups.len() * kvn, 1, &|range| {
        let mut job = GroupJob::new(shape);
        for j in range {
            job.run(shape, q, rows, &kv, groups[j / kvn].clone(), j % kvn, dst);
        }
    });
}

/// One thread's buffers for (row group, KV head) jobs of [`avx512::rows`].
#[cfg(target_arch = "x86_64")]
struct GroupJob {
    qg: Vec<f32>,
    o: Vec<f32>,
    wide: Vec<f32>,
}

#[cfg(target_arch = "x86_64")]
impl GroupJob {
    fn new(shape: &AttnShape) -> GroupJob {
        let w = shape.n_heads / shape.n_kv_heads * shape.head_dim;
        GroupJob {
            qg: vec![0f32; avx512::ROW_GROUP * w],
            o: vec![0f32; avx512::ROW_GROUP * w],
            wide: vec![0f32; KEY_CHUNK * shape.head_dim],
        }
    }

    /// The query heads of KV head `kvh` for the rows `rr` (one group): gathered, computed and
    /// written to their places in `dst` (the call's output).
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        shape: &AttnShape,
        q: &[f32],
        rows: &[RowKeys],
        kv: &KvLayer,
        rr: std::ops::Range<usize>,
        kvh: usize,
        dst: SharedOut,
    ) {
        let qd = shape.n_heads * shape.head_dim;
        let w = shape.n_heads / shape.n_kv_heads * shape.head_dim;
        let (h0, n) = (kvh * w, rr.len() * w);
        for (i, r) in rr.clone().enumerate() {
            self.qg[i * w..(i + 1) * w].copy_from_slice(&q[r * qd + h0..r * qd + h0 + w]);
        }
        let (qg, o) = (&self.qg[..n], &mut self.o[..n]);
        // SAFETY: the level includes AVX-512 F; `supports(head_dim)` was checked.
        unsafe { avx512::rows(shape, qg, kvh, &rows[rr.clone()], kv, o, &mut self.wide) };
        for (i, r) in rr.enumerate() {
            for (d, v) in o[i * w..(i + 1) * w].iter().enumerate() {
                // SAFETY: each (row, KV head) pair belongs to one job, which writes its slice.
                unsafe { dst.write(r * qd + h0 + d, *v) };
            }
        }
    }
}

/// Keys a row alone needs before its (row, KV head) jobs are split over threads.
#[cfg(target_arch = "x86_64")]
const SPLIT_KEYS: usize = 16 * KEY_CHUNK;

/// Whether the row group `g` (first row `row`) is one long row, whose chunks can be computed on
/// several threads.
#[cfg(target_arch = "x86_64")]
fn splits(row: &RowKeys, g: &std::ops::Range<usize>) -> bool {
    g.len() == 1 && row.n_keys - row.first >= SPLIT_KEYS
}

/// [`attention_avx512`] when its jobs are fewer than the threads (a long sequence's decode on
/// a model with few KV heads): each long row's chunks are cut into one span per thread, each
/// span's chunks computed apart (their max, sum and value sums per head written down), then
/// merged in ascending chunk order by the formula a job alone applies as it goes, so every row
/// gets the bits it gets alone.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn attention_spans(
    pool: &ThreadPool,
    shape: &AttnShape,
    q: &[f32],
    rows: &[RowKeys],
    kv: KvLayer,
    out: &mut [f32],
    groups: &[std::ops::Range<usize>],
) {
    row_width(shape, q, rows, out);
    let kvn = shape.n_kv_heads;
    let (group, per) = (shape.n_heads / kvn, avx512::record_len(shape.head_dim));
    let jobs = groups.len() * kvn;
    let parts = pool.threads().div_ceil(jobs);
    // Work items: (job, chunk starts span, where its records go); a job that is not split is
    // one item without records.
    let mut items: Vec<(usize, std::ops::Range<usize>, Option<usize>)> = Vec::new();
    // Split jobs: (job, first chunk start, chunks, where their records start).
    let mut split: Vec<(usize, usize, usize, usize)> = Vec::new();
    let mut rec_len = 0;
    for job in 0..jobs {
        let g = &groups[job / kvn];
        let row = &rows[g.start];
        if !splits(row, g) {
            items.push((job, 0..usize::MAX, None));
            continue;
        }
        let c_first = row.first / KEY_CHUNK * KEY_CHUNK;
        let chunks = (row.n_keys - c_first).div_ceil(KEY_CHUNK);
        split.push((job, c_first, chunks, rec_len));
        for p in 0..parts {
            let (a, b) = (chunks * p / parts, chunks * (p + 1) / parts);
            let span = c_first + a * KEY_CHUNK..c_first + b * KEY_CHUNK;
            items.push((job, span, Some(rec_len + a * group * per)));
        }
        rec_len += chunks * group * per;
    }
    // The records live in a buffer the calling thread keeps from call to call (a 32k-key row
    // has about 3 MB of them per layer); every record is written before it is read.
    RECORDS.with_borrow_mut(|rec| {
        if rec.len() < rec_len {
            rec.resize(rec_len, 0.0);
        }
        spans_with(
            pool,
            shape,
            q,
            rows,
            kv,
            out,
            groups,
            &items,
            &split,
            &mut rec[..rec_len],
        );
    });
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// [`attention_spans`]'s records, kept by each calling thread.
    static RECORDS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`attention_spans`]' two passes over its work `items` and `split` jobs, with `rec` for the
/// records.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn spans_with(
    pool: &ThreadPool,
    shape: &AttnShape,
    q: &[f32],
    rows: &[RowKeys],
    kv: KvLayer,
    out: &mut [f32],
    groups: &[std::ops::Range<usize>],
    items: &[(usize, std::ops::Range<usize>, Option<usize>)],
    split: &[(usize, usize, usize, usize)],
    rec: &mut [f32],
) {
    let qd = shape.n_heads * shape.head_dim;
    let (hd, kvn) = (shape.head_dim, shape.n_kv_heads);
    let (group, per) = (shape.n_heads / kvn, avx512::record_len(shape.head_dim));
    let recs = SharedOut(rec.as_mut_ptr());
    let dst = SharedOut(out.as_mut_ptr());
    let w = group * hd;
    let job_q = |job: usize| {
        let (r, kvh) = (groups[job / kvn].start, job % kvn);
        (r, kvh, &q[r * qd + kvh * w..r * qd + (kvh + 1) * w])
    };
    pool.for_ranges(items.len(), 1, &|range| {
        let mut job = GroupJob::new(shape);
        for (j, span, at) in items[range].iter().cloned() {
            let (rr, kvh) = (groups[j / kvn].clone(), j % kvn);
            let Some(at) = at else {
                job.run(shape, q, rows, &kv, rr, kvh, dst);
                continue;
            };
            let (r, _, qh) = job_q(j);
            let len = span.len().div_ceil(KEY_CHUNK) * group * per;
            // SAFETY: each item's records are its own span of `rec`, which outlives the call;
            // the level includes AVX-512 F and `supports(head_dim)` was checked.
            unsafe {
                let d = recs.slice(at, len);
                avx512::row_span(shape, qh, kvh, &rows[r], &kv, span, d, &mut job.wide);
            }
        }
    });
    pool.for_ranges(split.len(), 1, &|range| {
        let mut o = vec![0f32; w];
        for &(job, c_first, chunks, at) in &split[range] {
            let (r, kvh, _) = job_q(job);
            let c0s = (0..chunks).map(|c| c_first + c * KEY_CHUNK);
            let len = chunks * group * per;
            // SAFETY: AVX-512 F; the records were all written by the call above.
            unsafe { avx512::merge_records(hd, c0s, &rec[at..at + len], &mut o) };
            for (d, v) in o.iter().enumerate() {
                // SAFETY: each split job writes its own row's heads.
                unsafe { dst.write(r * qd + kvh * w + d, *v) };
            }
        }
    });
}

/// `rows` cut into runs of at most `max` consecutive rows of one sequence (the same block table,
/// one more key each, no remapped positions, no window), which can share each chunk's loads.
fn row_groups(rows: &[RowKeys], max: usize) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    for r in 1..=rows.len() {
        let joins = r < rows.len() && r - start < max && {
            let (a, b) = (&rows[r - 1], &rows[r]);
            a.remap.is_none()
                && b.remap.is_none()
                && !a.windowed()
                && !b.windowed()
                && std::ptr::eq(a.table, b.table)
                && b.n_keys == a.n_keys + 1
        };
        if !joins {
            groups.push(start..r);
            start = r;
        }
    }
    groups
}

/// Asks for the keys and values of KV head `kvh` at positions `at` (as `keys` places them) to be
/// brought into L2. Changes no result.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_keys(kv: &KvLayer, keys: &RowKeys, kvh: usize, hd: usize, at: std::ops::Range<usize>) {
    for p in at {
        let off = kv.head_at(keys.table, keys.slot(p), kvh);
        kv.k.prefetch(off, hd);
        kv.v.prefetch(off, hd);
    }
}

/// Points `rp[i]` at the rows (KV head `kvh`, `hd` values) of `plane` at positions `c0 + i` for
/// `i < n`, as `keys` places them: into the cache when it stores f32, else into `buf` (row i at
/// `i * hd`), where they are widened to f32 first.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn chunk_rows(
    kv: &KvLayer,
    plane: PlaneRef,
    keys: &RowKeys,
    kvh: usize,
    hd: usize,
    c0: usize,
    n: usize,
    rp: &mut [*const f32; KEY_CHUNK],
    buf: &mut [f32],
) {
    for (i, p) in rp.iter_mut().enumerate().take(n) {
        let off = kv.head_at(keys.table, keys.slot(c0 + i), kvh);
        *p = match plane.as_f32() {
            Some(x) => x[off..off + hd].as_ptr(),
            None => {
                let b = &mut buf[i * hd..(i + 1) * hd];
                plane.widen(off, b);
                b.as_ptr()
            }
        };
    }
}

/// The same result with one job per (row, head) (a group of one): the reference the grouped jobs
/// must equal bit for bit, so that sharing loads between heads can never leak between them.
pub fn attention_reference(
    pool: &ThreadPool,
    level: SimdLevel,
    shape: &AttnShape,
    q: &[f32],
    rows: &[RowKeys],
    kv: KvLayer,
    out: &mut [f32],
) {
    head_jobs(pool, level, shape, q, rows, kv, out, 1);
}

/// Query heads `h0..` (those of `q`, all of one KV head; `group` query heads per KV head).
#[allow(clippy::too_many_arguments)]
fn group_heads(
    level: SimdLevel,
    shape: &AttnShape,
    q: &[f32],
    h0: usize,
    group: usize,
    keys: &RowKeys,
    kv: &KvLayer,
    out: &mut [f32],
) {
    let kvh = h0 / group;
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 {
        let plain = shape.softcap.is_none() && shape.sinks.is_none();
        if avx2::supports(shape.head_dim) && !keys.windowed() && plain {
            // SAFETY: AVX2+FMA were detected; the head size was checked.
            unsafe { avx2::heads(shape, q, kvh, keys, kv, out) };
        } else {
            // SAFETY: AVX2+FMA were detected; the body is the same portable code compiled
            // with FMA.
            unsafe { group_fma(level, shape, q, h0, group, keys, kv, out) };
        }
        return;
    }
    group_body(level, shape, q, h0, group, keys, kv, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn group_fma(
    level: SimdLevel,
    shape: &AttnShape,
    q: &[f32],
    h0: usize,
    group: usize,
    keys: &RowKeys,
    kv: &KvLayer,
    out: &mut [f32],
) {
    group_body(level, shape, q, h0, group, keys, kv, out)
}

/// The canonical algorithm for the query heads of one KV head (one or more): per head, the same
/// operations in the same order whatever the group size; only key and value loads are shared.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn group_body(
    level: SimdLevel,
    shape: &AttnShape,
    q: &[f32],
    h0: usize,
    group: usize,
    keys: &RowKeys,
    kv: &KvLayer,
    out: &mut [f32],
) {
    let kvh = h0 / group;
    let hd = shape.head_dim;
    let g_n = q.len() / hd;
    let mut big_m = [f32::NEG_INFINITY; MAX_GROUP];
    let mut big_l = [0f32; MAX_GROUP];
    let mut m = [f32::NEG_INFINITY; MAX_GROUP];
    let mut l = [0f32; MAX_GROUP];
    let mut scores = [[0f32; KEY_CHUNK]; MAX_GROUP];
    let mut oc = vec![0f32; g_n * hd];
    let mut row = vec![0f32; hd];
    out.fill(0.0);
    let mut first = true;
    for (c0, from) in keys.chunks() {
        let c1 = (c0 + KEY_CHUNK).min(keys.n_keys);
        m[..g_n].fill(f32::NEG_INFINITY);
        for p in from..c1 {
            let off = kv.head_at(keys.table, keys.slot(p), kvh);
            let k = kv.k.row(off, hd, &mut row);
            for g in 0..g_n {
                let mut s = canon::dot(level, &q[g * hd..(g + 1) * hd], k) * shape.scale;
                if let Some(cap) = shape.softcap {
                    s = cap * canon::tanh(s / cap);
                }
                scores[g][p - c0] = s;
                m[g] = m[g].max(s);
            }
        }
        l[..g_n].fill(0.0);
        oc.fill(0.0);
        for p in from..c1 {
            let off = kv.head_at(keys.table, keys.slot(p), kvh);
            let v = kv.v.row(off, hd, &mut row);
            for g in 0..g_n {
                let e = canon::exp(scores[g][p - c0] - m[g]);
                l[g] += e;
                let o = &mut oc[g * hd..(g + 1) * hd];
                for d in 0..hd {
                    o[d] = e.mul_add(v[d], o[d]);
                }
            }
        }
        for g in 0..g_n {
            let o = &mut out[g * hd..(g + 1) * hd];
            let c = &oc[g * hd..(g + 1) * hd];
            if first {
                big_m[g] = m[g];
                big_l[g] = l[g];
                o.copy_from_slice(c);
            } else {
                let nm = big_m[g].max(m[g]);
                let a = canon::exp(big_m[g] - nm);
                let b = canon::exp(m[g] - nm);
                big_l[g] = big_l[g] * a + l[g] * b;
                for d in 0..hd {
                    o[d] = o[d] * a + c[d] * b;
                }
                big_m[g] = nm;
            }
        }
        first = false;
    }
    if let Some(sinks) = shape.sinks {
        // The sink: one more chunk of a single score and a zero value.
        for g in 0..g_n {
            let s = sinks[h0 + g];
            let nm = big_m[g].max(s);
            let a = canon::exp(big_m[g] - nm);
            let b = canon::exp(s - nm);
            big_l[g] = big_l[g] * a + b;
            for v in out[g * hd..(g + 1) * hd].iter_mut() {
                *v *= a;
            }
            big_m[g] = nm;
        }
    }
    for g in 0..g_n {
        if big_l[g] > 0.0 {
            for v in out[g * hd..(g + 1) * hd].iter_mut() {
                *v /= big_l[g];
            }
        }
    }
}
