use std::time::Instant;
use tf_core::DType;
use tf_kernels::actq::{ActBlock, QuantAct};
use tf_kernels::matmul::{matmul, Activations, WeightMatrix};
use tf_kernels::{SimdLevel, ThreadPool};

fn main() {
    // Quantizer: tiny amax with a zero element.
    let mut x = vec![1e-38f32; 32];
    x[3] = 0.0;
    x[5] = -1e-38;
    let a = QuantAct::new(SimdLevel::Scalar, ActBlock::B32, &x, 1, 32);
    let b = QuantAct::new(SimdLevel::Avx2, ActBlock::B32, &x, 1, 32);
    println!("quant scalar {:?}\nquant avx2   {:?}", &a.qs[..8], &b.qs[..8]);

    let pool = ThreadPool::new(1);
    let (k, n) = (1536usize, 1000usize);
    let mut s = 1u64;
    let mut r = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 33) as u32
    };
    let xs: Vec<f32> = (0..k).map(|_| (r() % 2000) as f32 / 1000.0 - 1.0).collect();
    for dtype in DType::ALL.into_iter().filter(|d| d.block_elems() > 1) {
        let bytes = dtype.bytes_for(k * n).unwrap();
        let mut wb: Vec<u8> = (0..bytes).map(|_| r() as u8).collect();
        // sane f16 scales: overwrite everything f16 with 0x2000-ish (small positive)
        let bb = dtype.block_bytes();
        let at: &[usize] = match dtype {
            DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => &[0],
            DType::Q4_1 | DType::Q5_1 | DType::Q4K | DType::Q5K => &[0, 2],
            DType::Q2K => &[80, 82],
            DType::Q3K => &[108],
            DType::Q6K => &[208],
            _ => &[],
        };
        for blk in wb.chunks_exact_mut(bb) {
            for &o in at {
                blk[o] = 0x00;
                blk[o + 1] = 0x20;
            }
        }
        let w = WeightMatrix::new(dtype, k, n, &wb).unwrap();
        let mut line = format!("{dtype:6}");
        let mut base = 0.0;
        let mut first: Option<Vec<f32>> = None;
        for level in SimdLevel::available() {
            let acts = Activations::new(level, &xs, 1, k);
            let mut out = vec![0f32; n];
            matmul(&pool, &w, &acts, &mut out); // warm + quantize
            let reps = if level == SimdLevel::Scalar { 5 } else { 50 };
            let t = Instant::now();
            for _ in 0..reps {
                matmul(&pool, &w, &acts, &mut out);
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
            if level == SimdLevel::Scalar {
                base = us;
            }
            match &first {
                None => first = Some(out.clone()),
                Some(f) => assert!(f.iter().zip(&out).all(|(a, b)| a.to_bits() == b.to_bits())),
            }
            line += &format!("  {}: {:8.1} us ({:5.1}x)", level.name(), us, base / us);
        }
        println!("{line}");
    }
}
