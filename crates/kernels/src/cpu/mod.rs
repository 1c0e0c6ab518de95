//! Run-time CPU feature detection. The level is chosen once per process (or forced for tests);
//! every level computes the same bits, so the choice only changes speed.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// Portable Rust, the oracle.
    Scalar,
    /// AVX2 + FMA (+ F16C).
    Avx2,
    /// AVX-512 F/BW/VL with VNNI.
    Avx512Vnni,
}

impl SimdLevel {
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Avx2 => "avx2+fma",
            SimdLevel::Avx512Vnni => "avx512+vnni",
        }
    }

    /// All levels this CPU can run, slowest first.
    pub fn available() -> Vec<SimdLevel> {
        let best = detect();
        [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512Vnni]
            .into_iter()
            .filter(|l| *l <= best)
            .collect()
    }
}

/// The best level this CPU supports, unless `TENSORFOLD_SIMD` (scalar|avx2|avx512) asks for less.
pub fn detect() -> SimdLevel {
    let hw = detect_hw();
    match std::env::var("TENSORFOLD_SIMD").ok().as_deref() {
        Some("scalar") => SimdLevel::Scalar,
        Some("avx2") => hw.min(SimdLevel::Avx2),
        _ => hw,
    }
}

#[cfg(target_arch = "x86_64")]
fn detect_hw() -> SimdLevel {
    if is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("fma")
    {
        SimdLevel::Avx512Vnni
    } else if is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
    {
        SimdLevel::Avx2
    } else {
        SimdLevel::Scalar
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_hw() -> SimdLevel {
    SimdLevel::Scalar
}
