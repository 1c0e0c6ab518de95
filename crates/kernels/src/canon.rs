//! The canonical float reductions. Every f32 dot product in the project (attention scores, RMSNorm,
//! float-weight matmuls) is defined as this 16-lane FMA chain, and every exponential as
//! [`exp`]; SIMD versions replay exactly these operations, so scalar, AVX2 and AVX-512 agree
//! bit for bit, and a GPU kernel written the same way can too.

use crate::SimdLevel;

/// Lanes of the canonical dot product.
pub const LANES: usize = 16;

/// Canonical dot product: element i accumulates into lane `i % 16` with one FMA, in ascending i,
/// the input zero-padded to a multiple of 16; then lanes are folded as a tree (8, 4, 2, 1).
pub fn dot_ref(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len();
    let mut acc = [0f32; LANES];
    for i in 0..n.div_ceil(LANES) * LANES {
        let (x, y) = if i < n { (a[i], b[i]) } else { (0.0, 0.0) };
        acc[i % LANES] = x.mul_add(y, acc[i % LANES]);
    }
    fold(&mut acc)
}

/// The canonical lane fold: `acc[l] += acc[l + s]` for s = 8, 4, 2, 1.
#[inline(always)]
pub fn fold(acc: &mut [f32; LANES]) -> f32 {
    let mut s = LANES / 2;
    while s > 0 {
        for l in 0..s {
            acc[l] += acc[l + s];
        }
        s /= 2;
    }
    acc[0]
}

/// Canonical dot product at the given SIMD level (same bits at every level).
#[inline]
pub fn dot(level: SimdLevel, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the level was detected on this CPU.
        SimdLevel::Avx512Vnni => unsafe { x86::dot_avx512(a, b) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        SimdLevel::Avx2 => unsafe { x86::dot_avx2(a, b) },
        _ => dot_ref(a, b),
    }
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
const EXP_C: [f32; 7] = [
    1.0,
    1.0,
    0.5,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
];

/// The canonical exponential: range reduction by ln 2 and a degree-6 polynomial, each step a
/// fixed FMA, so SIMD lanes reproduce it exactly. Inputs at or below -87 (and NaN) give 0; inputs
/// above 88 saturate. Relative error about 3e-7.
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)] // deliberately true for NaN too
pub fn exp(x: f32) -> f32 {
    if !(x > -87.0) {
        return 0.0;
    }
    let x = x.min(88.0);
    let n = (x * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = EXP_C[6];
    p = p.mul_add(r, EXP_C[5]);
    p = p.mul_add(r, EXP_C[4]);
    p = p.mul_add(r, EXP_C[3]);
    p = p.mul_add(r, EXP_C[2]);
    p = p.mul_add(r, EXP_C[1]);
    p = p.mul_add(r, EXP_C[0]);
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// The canonical natural logarithm of a positive finite `x`: `x = m * 2^e` with `m` in
/// [sqrt(1/2), sqrt(2)), then `ln m = 2 atanh(s)`, `s = (m - 1) / (m + 1)`, by a fixed odd
/// polynomial of degree 11, each step a fixed FMA. Relative error about 2e-7. `x <= 0` or NaN
/// gives -inf or NaN as `f32::ln` would; infinity gives infinity.
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    // Subnormals: scale into the normal range first.
    let (x, bias) = if x < f32::MIN_POSITIVE {
        (x * 8_388_608.0, -23)
    } else {
        (x, 0)
    };
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 127 + bias;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    if m >= std::f32::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p: f32 = 1.0 / 11.0;
    p = p.mul_add(s2, 1.0 / 9.0);
    p = p.mul_add(s2, 1.0 / 7.0);
    p = p.mul_add(s2, 1.0 / 5.0);
    p = p.mul_add(s2, 1.0 / 3.0);
    p = p.mul_add(s2, 1.0);
    let ln_m = 2.0 * s * p;
    (e as f32).mul_add(LN2_HI, (e as f32).mul_add(LN2_LO, ln_m))
}

/// `ln(1 + exp(x))` with the canonical [`exp`] and [`ln`]; `x` itself above 20 (where the two
/// agree to f32 precision).
#[inline(always)]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        ln(1.0 + exp(x))
    }
}

/// `1 / (1 + exp(-x))` with the canonical [`exp`].
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `tanh(x) = 1 - 2 / (1 + exp(2x))` with the canonical [`exp`] (absolute error about 3e-7;
/// saturates to ±1). For soft-capping (`cap * tanh(x / cap)`).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (1.0 + exp(2.0 * x))
}

/// `x / (1 + exp(-x))`, the SiLU used by SwiGLU.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let mut acc = _mm512_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            let x = _mm512_loadu_ps(a.as_ptr().add(i));
            let y = _mm512_loadu_ps(b.as_ptr().add(i));
            acc = _mm512_fmadd_ps(x, y, acc);
            i += 16;
        }
        if i < n {
            let m: __mmask16 = (1u32 << (n - i)) as u16 - 1;
            let x = _mm512_maskz_loadu_ps(m, a.as_ptr().add(i));
            let y = _mm512_maskz_loadu_ps(m, b.as_ptr().add(i));
            acc = _mm512_fmadd_ps(x, y, acc);
        }
        fold512(acc)
    }

    /// The canonical fold of 16 lanes held in one register.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fold512(acc: __m512) -> f32 {
        let lo = _mm512_castps512_ps256(acc);
        // (The upper half through the 64-bit extract, which AVX-512 F has: the same bits.)
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc)));
        fold256(lo, hi)
    }

    /// The canonical fold of lanes 0..8 (`lo`) and 8..16 (`hi`).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fold256(lo: __m256, hi: __m256) -> f32 {
        let s8 = _mm256_add_ps(lo, hi);
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2));
        _mm_cvtss_f32(s1)
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let mut lo = _mm256_setzero_ps();
        let mut hi = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            lo = _mm256_fmadd_ps(
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
                lo,
            );
            hi = _mm256_fmadd_ps(
                _mm256_loadu_ps(a.as_ptr().add(i + 8)),
                _mm256_loadu_ps(b.as_ptr().add(i + 8)),
                hi,
            );
            i += 16;
        }
        if i < n {
            let mut ta = [0f32; 16];
            let mut tb = [0f32; 16];
            ta[..n - i].copy_from_slice(&a[i..]);
            tb[..n - i].copy_from_slice(&b[i..]);
            lo = _mm256_fmadd_ps(
                _mm256_loadu_ps(ta.as_ptr()),
                _mm256_loadu_ps(tb.as_ptr()),
                lo,
            );
            hi = _mm256_fmadd_ps(
                _mm256_loadu_ps(ta.as_ptr().add(8)),
                _mm256_loadu_ps(tb.as_ptr().add(8)),
                hi,
            );
        }
        fold256(lo, hi)
    }

    /// Eight lanes of [`exp`](super::exp), op for op.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp256(x: __m256) -> __m256 {
        let keep = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(-87.0));
        let x = _mm256_min_ps(x, _mm256_set1_ps(88.0));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x);
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
        let mut p = _mm256_set1_ps(EXP_C[6]);
        for c in [EXP_C[5], EXP_C[4], EXP_C[3], EXP_C[2], EXP_C[1], EXP_C[0]] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep)
    }

    /// Sixteen lanes of [`exp`](super::exp), op for op.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn exp512(x: __m512) -> __m512 {
        let keep = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_set1_ps(-87.0));
        let x = _mm512_min_ps(x, _mm512_set1_ps(88.0));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
        );
        let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), x);
        let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
        let mut p = _mm512_set1_ps(EXP_C[6]);
        for c in [EXP_C[5], EXP_C[4], EXP_C[3], EXP_C[2], EXP_C[1], EXP_C[0]] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(n),
            _mm512_set1_epi32(127),
        ));
        _mm512_maskz_mov_ps(keep, _mm512_mul_ps(p, _mm512_castsi512_ps(e)))
    }
}

/// `out[i] = silu(gate[i]) * up[i]`, the SwiGLU activation, at any SIMD level with the same bits.
pub fn swiglu(level: SimdLevel, gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(gate.len() == up.len() && up.len() == out.len());
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 {
        // SAFETY: AVX2+FMA were detected.
        unsafe { swiglu_avx2(gate, up, out) };
        return;
    }
    let _ = level;
    for i in 0..out.len() {
        out[i] = silu(gate[i]) * up[i];
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn swiglu_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = out.len();
    let mut i = 0;
    while i + 8 <= n {
        let g = _mm256_loadu_ps(gate.as_ptr().add(i));
        let u = _mm256_loadu_ps(up.as_ptr().add(i));
        let e = x86::exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
        let s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0), e));
        _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_mul_ps(s, u));
        i += 8;
    }
    for j in i..n {
        out[j] = silu(gate[j]) * up[j];
    }
}

/// `sqrt(2 / pi)` and the cubic coefficient of the tanh approximation of GELU.
const GELU_C: f32 = 0.797_884_6;
const GELU_K: f32 = 0.044_715;

/// GELU, tanh form (`gelu_pytorch_tanh`): `0.5 x (1 + tanh(u))` with `u = c (x + k x^3)`,
/// written as `x / (1 + exp(-2u))` (the same function) so that it needs only the canonical
/// [`exp`]; each step a plain multiply or add, so SIMD lanes reproduce it exactly.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    let x3 = (x * x) * x;
    let u = GELU_C * (x + GELU_K * x3);
    x / (1.0 + exp(-2.0 * u))
}

/// `out[i] = gelu_tanh(gate[i]) * up[i]`, the GeGLU activation (Gemma), at any SIMD level with
/// the same bits.
pub fn geglu(level: SimdLevel, gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(gate.len() == up.len() && up.len() == out.len());
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 {
        // SAFETY: AVX2+FMA were detected.
        unsafe { geglu_avx2(gate, up, out) };
        return;
    }
    let _ = level;
    for i in 0..out.len() {
        out[i] = gelu_tanh(gate[i]) * up[i];
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn geglu_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = out.len();
    let (c, k) = (_mm256_set1_ps(GELU_C), _mm256_set1_ps(GELU_K));
    let (one, m2) = (_mm256_set1_ps(1.0), _mm256_set1_ps(-2.0));
    let mut i = 0;
    while i + 8 <= n {
        let x = _mm256_loadu_ps(gate.as_ptr().add(i));
        let x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        let u = _mm256_mul_ps(c, _mm256_add_ps(x, _mm256_mul_ps(k, x3)));
        let e = x86::exp256(_mm256_mul_ps(m2, u));
        let g = _mm256_div_ps(x, _mm256_add_ps(one, e));
        let y = _mm256_mul_ps(g, _mm256_loadu_ps(up.as_ptr().add(i)));
        _mm256_storeu_ps(out.as_mut_ptr().add(i), y);
        i += 8;
    }
    for j in i..n {
        out[j] = gelu_tanh(gate[j]) * up[j];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
            })
            .collect()
    }

    #[test]
    fn dot_levels_agree_bitwise() {
        for n in [0usize, 1, 3, 15, 16, 17, 31, 64, 100, 128, 1000, 1536] {
            let a = rand_vec(n, n as u64 + 1);
            let b = rand_vec(n, n as u64 + 99);
            let r = dot_ref(&a, &b);
            for level in SimdLevel::available() {
                assert_eq!(dot(level, &a, &b).to_bits(), r.to_bits(), "n={n} {level:?}");
            }
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((r as f64 - exact).abs() < 1e-3 * (1.0 + exact.abs()));
        }
    }

    #[test]
    fn exp_is_accurate() {
        let mut x = -86.9f32;
        while x < 88.0 {
            let e = exp(x) as f64;
            let t = (x as f64).exp();
            assert!(((e - t) / t).abs() < 1e-6, "x={x} {e} {t}");
            x += 0.0137;
        }
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(f32::NAN), 0.0);
        assert!(exp(1000.0).is_finite());
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn exp_lanes_are_the_scalar_exp() {
        if SimdLevel::available().last() != Some(&SimdLevel::Avx512Vnni) {
            return;
        }
        let mut xs: Vec<f32> = (0..20_000).map(|i| -90.0 + i as f32 * 0.0091).collect();
        xs.extend([
            -87.0,
            -86.999,
            88.0,
            88.5,
            1e9,
            -1e9,
            0.0,
            -0.0,
            f32::NAN,
            f32::INFINITY,
        ]);
        xs.extend(rand_vec(1000, 3));
        for chunk in xs.chunks(16) {
            let mut lanes = [0f32; 16];
            lanes[..chunk.len()].copy_from_slice(chunk);
            let mut got = [0f32; 16];
            // SAFETY: AVX-512 was detected (the Avx512Vnni level).
            unsafe {
                use std::arch::x86_64::*;
                let v = x86::exp512(_mm512_loadu_ps(lanes.as_ptr()));
                _mm512_storeu_ps(got.as_mut_ptr(), v);
            }
            for (x, g) in lanes.iter().zip(got) {
                assert_eq!(g.to_bits(), exp(*x).to_bits(), "x={x}");
            }
        }
    }

    #[test]
    fn swiglu_levels_agree_bitwise() {
        let g = rand_vec(1003, 5);
        let u = rand_vec(1003, 6);
        let mut want = vec![0f32; 1003];
        swiglu(SimdLevel::Scalar, &g, &u, &mut want);
        for level in SimdLevel::available() {
            let mut got = vec![0f32; 1003];
            swiglu(level, &g, &u, &mut got);
            assert!(got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }

    #[test]
    fn geglu_levels_agree_bitwise_and_match_tanh_gelu() {
        let mut g = rand_vec(1003, 7);
        g.extend([0.0, -0.0, 30.0, -30.0, 1e20, -1e20, 1e-30]);
        let u = rand_vec(g.len(), 8);
        let mut want = vec![0f32; g.len()];
        geglu(SimdLevel::Scalar, &g, &u, &mut want);
        for level in SimdLevel::available() {
            let mut got = vec![0f32; g.len()];
            geglu(level, &g, &u, &mut got);
            assert!(got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        // Against the textbook formula in f64.
        for (i, &x) in g.iter().enumerate().filter(|(_, x)| x.abs() < 1e6) {
            let xd = x as f64;
            let t = ((2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd * xd * xd)).tanh();
            let exact = 0.5 * xd * (1.0 + t) * u[i] as f64;
            let err = (want[i] as f64 - exact).abs();
            assert!(
                err <= 1e-6 * (1.0 + exact.abs()),
                "x={x}: {} vs {exact}",
                want[i]
            );
        }
    }
}
