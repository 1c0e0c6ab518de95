//! The candidate set: rank order, scaled logits, weights and exact probability mass, top-k and
//! top-p selection.
//!
//! Everything here is defined by IEEE-exact f64 operations (no FMA, no libm) and integer sums, so
//! the fast selections below give bit-for-bit the result of sorting the whole vocabulary, and a
//! port (SIMD, CUDA) that sums in any order still agrees.

use std::cmp::Ordering;
use tf_core::TokenId;
use tf_kernels::ThreadPool;

/// Rank order of the candidate set: logit descending, then id ascending. `z` holds no NaN.
#[inline]
pub(crate) fn rank_cmp(z: &[f32], a: TokenId, b: TokenId) -> Ordering {
    let (za, zb) = (z[a as usize], z[b as usize]);
    zb.partial_cmp(&za)
        .unwrap_or(Ordering::Equal)
        .then(a.cmp(&b))
}

/// Scaled logit relative to the best candidate: `x = (z - m) * (1 / T)` in f64, where m is the
/// logit of rank 0 and T the temperature. x <= 0, x = 0 for rank 0, and x is monotone in z.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scale {
    m: f64,
    inv_t: f64,
}

impl Scale {
    pub(crate) fn new(m: f32, temperature: f32) -> Self {
        Scale {
            m: f64::from(m),
            inv_t: 1.0 / f64::from(temperature),
        }
    }

    #[inline(always)]
    pub(crate) fn x(self, z: f32) -> f64 {
        (f64::from(z) - self.m) * self.inv_t
    }
}

const LOG2E: f64 = std::f64::consts::LOG2_E;
/// fdlibm's split of ln 2: `LN2_HI` has 32 significant bits, so `k * LN2_HI` is exact.
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
/// 1.5 * 2^52: adding it rounds to an integer (ties to even) whose value sits in the low bits.
const ROUND_SHIFT: f64 = 6_755_399_441_055_744.0;
const TWO_52: f64 = 4_503_599_627_370_496.0;
/// Taylor coefficients 1/12! .. 1/0! for exp on |r| <= ln2 / 2 (truncation error < 2e-16).
const EXP_TAYLOR: [f64; 13] = [
    1.0 / 479_001_600.0,
    1.0 / 39_916_800.0,
    1.0 / 3_628_800.0,
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// The sampler's exponential for x <= 0: `x = k ln2 + r` (Cody–Waite), a degree-12 Horner
/// polynomial in r, times 2^k built from bits. Plain f64 multiplies and adds only (Rust never
/// contracts them into FMA), so it is bit-reproducible and vectorizes. `exp_nonpos(0) == 1`
/// exactly; x < -708 (and -inf) gives 0. Relative error about 1e-15.
#[inline(always)]
pub(crate) fn exp_nonpos(x: f64) -> f64 {
    let xc = if x < -708.0 { -708.0 } else { x };
    let t = xc * LOG2E + ROUND_SHIFT;
    let kf = t - ROUND_SHIFT;
    let k = (t.to_bits() as i64).wrapping_sub(ROUND_SHIFT.to_bits() as i64);
    let r = (xc - kf * LN2_HI) - kf * LN2_LO;
    let mut p = EXP_TAYLOR[0];
    for &c in &EXP_TAYLOR[1..] {
        p = p * r + c;
    }
    let scale = f64::from_bits((k.wrapping_add(1023) as u64) << 52);
    if x < -708.0 {
        0.0
    } else {
        p * scale
    }
}

/// Exact probability mass of a weight `w` in [0, 1]: `round_half_even(w * 2^52)`, an integer in
/// [0, 2^52]. Masses are summed as integers, so a sum does not depend on its order.
#[inline(always)]
pub(crate) fn mass_q(w: f64) -> u64 {
    (w * TWO_52 + TWO_52)
        .to_bits()
        .wrapping_sub(TWO_52.to_bits())
}

/// The mass a top-p prefix must reach: `ceil(total * top_p)`, computed in f64.
#[inline]
pub(crate) fn top_p_target(total: u128, top_p: f32) -> u128 {
    ((total as f64) * f64::from(top_p)).ceil() as u128
}

/// Number of histogram buckets for the top-p search over the whole vocabulary.
pub(crate) const BUCKETS: usize = 256;

/// Bucket of a scaled logit: `round_half_even(min(-x * 8, 255))`. Monotone (non-increasing) in
/// x, so every set "bucket < b" is a prefix of the rank order, ties included.
#[inline(always)]
pub(crate) fn bucket_of(x: f64) -> u8 {
    ((-x * 8.0).min((BUCKETS - 1) as f64) + TWO_52)
        .to_bits()
        .wrapping_sub(TWO_52.to_bits()) as u8
}

/// The largest value of `z`, in 16 independent lanes so that it vectorizes; the maximum of
/// values does not depend on the order. A NaN is never greater, so it counts as -inf.
#[inline]
pub(crate) fn max_value(z: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let mut chunks = z.chunks_exact(16);
    for c in &mut chunks {
        for l in 0..16 {
            acc[l] = if c[l] > acc[l] { c[l] } else { acc[l] };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &v in acc.iter().chain(chunks.remainder()) {
        m = if v > m { v } else { m };
    }
    m
}

/// Every token's mass and bucket, and the total mass. Chunked u64 sums cannot overflow:
/// 1024 * 2^52 < 2^64.
#[inline(always)]
fn mass_pass_body(z: &[f32], scale: Scale, masses: &mut [u64], buckets: &mut [u8]) -> u128 {
    let mut total: u128 = 0;
    for ((zc, qc), bc) in z
        .chunks(1024)
        .zip(masses.chunks_mut(1024))
        .zip(buckets.chunks_mut(1024))
    {
        let mut s: u64 = 0;
        for ((&zi, qi), bi) in zc.iter().zip(qc.iter_mut()).zip(bc.iter_mut()) {
            let x = scale.x(zi);
            let q = mass_q(exp_nonpos(x));
            *qi = q;
            *bi = bucket_of(x);
            s += q;
        }
        total += u128::from(s);
    }
    total
}

/// The same computation compiled for wider vectors. Only IEEE multiplies, adds and bit
/// operations are involved (Rust never fuses them into FMA), so every variant gives identical
/// bits; the tests compare them.
#[cfg(target_arch = "x86_64")]
mod wide {
    use super::*;

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn mass_pass_avx2(
        z: &[f32],
        scale: Scale,
        masses: &mut [u64],
        buckets: &mut [u8],
    ) -> u128 {
        mass_pass_body(z, scale, masses, buckets)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    pub(super) unsafe fn mass_pass_avx512(
        z: &[f32],
        scale: Scale,
        masses: &mut [u64],
        buckets: &mut [u8],
    ) -> u128 {
        mass_pass_body(z, scale, masses, buckets)
    }
}

/// Which compiled variant of the mass pass runs; `Portable` is always available.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    Portable,
    Avx2,
    Avx512,
}

impl Isa {
    pub(crate) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512dq")
            {
                return Isa::Avx512;
            }
            if is_x86_feature_detected!("avx2") {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }
}

/// [`mass_pass_body`] through the variant `isa` names (which must be supported: it comes from
/// [`Isa::detect`], or is `Portable`).
pub(crate) fn mass_pass_with(
    isa: Isa,
    z: &[f32],
    scale: Scale,
    masses: &mut [u64],
    buckets: &mut [u8],
) -> u128 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only produced by `detect` after checking the CPU has AVX2.
        Isa::Avx2 => unsafe { wide::mass_pass_avx2(z, scale, masses, buckets) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` is only produced by `detect` after checking every feature enabled.
        Isa::Avx512 => unsafe { wide::mass_pass_avx512(z, scale, masses, buckets) },
        _ => mass_pass_body(z, scale, masses, buckets),
    }
}

fn mass_pass(z: &[f32], scale: Scale, masses: &mut [u64], buckets: &mut [u8]) -> u128 {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    mass_pass_with(*ISA.get_or_init(Isa::detect), z, scale, masses, buckets)
}

/// The `k` best tokens of `z` in rank order, written to `out` (0 < k < z.len()).
///
/// A single ascending scan keeps at most `2k + 256` candidates; whenever the buffer fills, a
/// selection keeps the k best and their worst logit becomes the admission threshold. A later
/// token equal to that threshold has a higher id than the k-th candidate, so it ranks below all
/// k and can be skipped: only strictly greater logits are admitted.
pub(crate) fn top_k_sorted(z: &[f32], k: usize, out: &mut Vec<TokenId>) {
    const CHUNK: usize = 64;
    let cap = 2 * k + 256;
    out.clear();
    let mut threshold = f32::NEG_INFINITY;
    let mut have_threshold = false;
    for (c, chunk) in z.chunks(CHUNK).enumerate() {
        if have_threshold && max_value(chunk) <= threshold {
            continue;
        }
        let base = c * CHUNK;
        for (j, &v) in chunk.iter().enumerate() {
            if have_threshold && v <= threshold {
                continue;
            }
            out.push((base + j) as TokenId);
            if out.len() == cap {
                out.select_nth_unstable_by(k - 1, |&a, &b| rank_cmp(z, a, b));
                out.truncate(k);
                threshold = out
                    .iter()
                    .fold(f32::INFINITY, |a, &id| a.min(z[id as usize]));
                have_threshold = true;
            }
        }
    }
    if out.len() > k {
        out.select_nth_unstable_by(k - 1, |&a, &b| rank_cmp(z, a, b));
        out.truncate(k);
    }
    out.sort_unstable_by(|&a, &b| rank_cmp(z, a, b));
}

/// Top-p over candidates already in rank order with their masses: the length of the smallest
/// prefix whose mass reaches `top_p_target(total, top_p)` (all of them if rounding never gets
/// there).
pub(crate) fn top_p_prefix_len(masses: &[u64], top_p: f32) -> usize {
    let total: u128 = masses.iter().map(|&q| u128::from(q)).sum();
    let target = top_p_target(total, top_p);
    let mut cum: u128 = 0;
    for (j, &q) in masses.iter().enumerate() {
        cum += u128::from(q);
        if cum >= target {
            return j + 1;
        }
    }
    masses.len()
}

/// Top-p over the whole vocabulary without sorting it.
///
/// One vectorizable pass computes every token's mass and bucket; a histogram of masses by bucket
/// (exact integers) locates the bucket where the rank-order running mass reaches the target;
/// only that bucket is sorted. The kept set is every token of a lower bucket plus the returned
/// prefix of the crossing bucket, exactly the prefix a full sort would keep.
pub(crate) struct TopPFull {
    /// Tokens of buckets below `crossing` are kept.
    pub(crate) crossing: u8,
    /// The kept tokens of the crossing bucket, in rank order.
    pub(crate) tail: Vec<TokenId>,
}

/// Every token's mass and bucket (pass 1) and the masses summed by bucket (pass 2, four
/// interleaved copies to break store-to-load chains on runs of tokens in one bucket).
fn mass_histogram(
    z: &[f32],
    scale: Scale,
    masses: &mut [u64],
    buckets: &mut [u8],
) -> [u128; BUCKETS] {
    mass_pass(z, scale, masses, buckets);
    let n = z.len();
    let mut hist = [[0u128; BUCKETS]; 4];
    let mut quads = buckets.chunks_exact(4).zip(masses.chunks_exact(4));
    for (b, q) in &mut quads {
        for l in 0..4 {
            hist[l][b[l] as usize] += u128::from(q[l]);
        }
    }
    let rem = n - n % 4;
    for i in rem..n {
        hist[0][buckets[i] as usize] += u128::from(masses[i]);
    }
    let mut sum = [0u128; BUCKETS];
    for (b, s) in sum.iter_mut().enumerate() {
        *s = hist[0][b] + hist[1][b] + hist[2][b] + hist[3][b];
    }
    sum
}

/// A pointer that may cross threads; each user touches a disjoint range.
struct Shared<T>(*mut T);
// SAFETY: only used to hand disjoint ranges of one buffer to pool threads (`mass_histogram_par`).
unsafe impl<T> Sync for Shared<T> {}

/// [`mass_histogram`] over ranges of the vocabulary on `pool`: the ranges' masses and buckets
/// are disjoint, their histograms are integers, so the sum is the sequential one.
fn mass_histogram_par(
    pool: &ThreadPool,
    z: &[f32],
    scale: Scale,
    masses: &mut [u64],
    buckets: &mut [u8],
) -> [u128; BUCKETS] {
    let (mp, bp) = (Shared(masses.as_mut_ptr()), Shared(buckets.as_mut_ptr()));
    let total = std::sync::Mutex::new([0u128; BUCKETS]);
    pool.for_ranges(z.len(), 1024, &|r| {
        let (mp, bp) = (&mp, &bp);
        // SAFETY: `for_ranges` hands out disjoint ranges within `z.len()`, the length of
        // `masses` and `buckets`, which outlive the call.
        let (m, b) = unsafe {
            (
                std::slice::from_raw_parts_mut(mp.0.add(r.start), r.len()),
                std::slice::from_raw_parts_mut(bp.0.add(r.start), r.len()),
            )
        };
        let h = mass_histogram(&z[r], scale, m, b);
        let mut t = total.lock().unwrap_or_else(|e| e.into_inner());
        for (a, x) in t.iter_mut().zip(h) {
            *a += x;
        }
    });
    total.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// `pool`, when given, runs the whole-vocabulary passes in parallel (the same result).
pub(crate) fn top_p_full(
    z: &[f32],
    scale: Scale,
    top_p: f32,
    buckets: &mut Vec<u8>,
    masses: &mut Vec<u64>,
    tail: Vec<TokenId>,
    pool: Option<&ThreadPool>,
) -> TopPFull {
    let n = z.len();
    // Every entry is written by the mass pass: only a new length is filled.
    buckets.resize(n, 0);
    masses.resize(n, 0);
    let hist = match pool {
        Some(pool) if pool.threads() > 1 => mass_histogram_par(pool, z, scale, masses, buckets),
        _ => mass_histogram(z, scale, masses, buckets),
    };
    let target = top_p_target(hist.iter().sum(), top_p);
    let mut before: u128 = 0;
    let mut crossing = BUCKETS - 1;
    for (b, &h) in hist.iter().enumerate() {
        if before + h >= target {
            crossing = b;
            break;
        }
        before += h;
    }
    // Pass 3: sort the crossing bucket and walk it in rank order.
    let crossing = crossing as u8;
    let mut tail = tail;
    tail.clear();
    tail.extend(
        buckets
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b == crossing)
            .map(|(i, _)| i as TokenId),
    );
    tail.sort_unstable_by(|&a, &b| rank_cmp(z, a, b));
    let mut cum = before;
    let mut keep = tail.len();
    for (j, &id) in tail.iter().enumerate() {
        cum += u128::from(masses[id as usize]);
        if cum >= target {
            keep = j + 1;
            break;
        }
    }
    tail.truncate(keep);
    TopPFull { crossing, tail }
}
