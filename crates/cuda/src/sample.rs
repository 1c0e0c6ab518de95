//! Plain temperature draws decided on the host from shortlists found on the GPU
//! (`kernels/sample.cu`, `tf_engine::Shortlist`).

use cudarc::driver::{CudaSlice, LaunchConfig};
use tf_core::TokenId;
use tf_engine::{NoiseKey, Shortlist};

use crate::{CudaError, Gpu, Result};

/// Threads per block, blocks per row, candidates per block and 32-bit words per block record of
/// `gumbel_shortlist` (`SL_THREADS`, `SL_BLOCKS`, `SL_KEEP`, `SL_WORDS`).
const SL_THREADS: u32 = 256;
pub const SL_BLOCKS: usize = 16;
const SL_KEEP: usize = 4;
pub const SL_WORDS: usize = 3 + 4 * SL_KEEP;

/// Words of one row's records.
pub const ROW_WORDS: usize = SL_BLOCKS * SL_WORDS;

/// The kernel's noise key words of `key`: seed low, high, position low, high.
pub fn key_words(key: &NoiseKey) -> [u32; 4] {
    [
        key.seed as u32,
        (key.seed >> 32) as u32,
        key.position as u32,
        (key.position >> 32) as u32,
    ]
}

/// A row's shortlist from its records (`ROW_WORDS` words) and its greedy token `top`.
pub fn decode(words: &[u32], key: NoiseKey, top: TokenId) -> Shortlist {
    let f64_at = |i: usize| f64::from_bits(u64::from(words[i]) | (u64::from(words[i + 1]) << 32));
    let recs = || (0..SL_BLOCKS).map(|rec| rec * SL_WORDS);
    // A NaN spill (not expected) makes the shortlist decline.
    let spill = recs().map(f64_at).fold(f64::NEG_INFINITY, |a, s| {
        if a.is_nan() || s.is_nan() {
            f64::NAN
        } else {
            a.max(s)
        }
    });
    let candidates = recs()
        .flat_map(|at| (0..SL_KEEP).map(move |q| at + 3 + 4 * q))
        .filter(|&c| words[c + 2] != u32::MAX)
        .map(|c| {
            (
                f64_at(c),
                words[c + 2] as TokenId,
                f32::from_bits(words[c + 3]),
            )
        })
        .collect();
    Shortlist {
        key,
        top,
        m: f32::from_bits(words[2]),
        candidates,
        spill,
    }
}

impl Gpu {
    /// Shortlists of rows `first .. first + rows` of `logits` (`vocab` values each) into `out`
    /// (`ROW_WORDS` per row): `top[r]` is row r's greedy token (`argmax_rows`), `keys` four
    /// words per row ([`key_words`]) and `inv_t` its 1 / temperature.
    #[allow(clippy::too_many_arguments)]
    pub fn gumbel_shortlist(
        &self,
        logits: &CudaSlice<f32>,
        vocab: usize,
        first: usize,
        rows: usize,
        top: &CudaSlice<i32>,
        keys: &CudaSlice<u32>,
        inv_t: &CudaSlice<f64>,
        out: &mut CudaSlice<u32>,
    ) -> Result<()> {
        if vocab == 0
            || (first + rows) * vocab > logits.len()
            || top.len() < rows
            || keys.len() < 4 * rows
            || inv_t.len() < rows
            || out.len() < rows * ROW_WORDS
        {
            return Err(CudaError::Usage("gumbel_shortlist: buffer sizes".into()));
        }
        if rows == 0 {
            return Ok(());
        }
        let f = self.function("gumbel_shortlist")?;
        let (v, fi) = (vocab as i32, first as i32);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, SL_BLOCKS as u32, 1),
            block_dim: (SL_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = self.launcher(&f);
        l.arg(logits)
            .arg(&v)
            .arg(&fi)
            .arg(top)
            .arg(keys)
            .arg(inv_t)
            .arg(out);
        // SAFETY: every buffer was checked against the rows the kernel reads and writes above.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One block record as `gumbel_shortlist` writes it.
    fn record(spill: f64, m: f32, cands: &[(f64, u32, f32)]) -> Vec<u32> {
        let mut w = vec![spill.to_bits() as u32, (spill.to_bits() >> 32) as u32];
        w.push(m.to_bits());
        for q in 0..SL_KEEP {
            let (s, id, z) = cands
                .get(q)
                .copied()
                .unwrap_or((f64::NEG_INFINITY, u32::MAX, 0.0));
            w.extend([
                s.to_bits() as u32,
                (s.to_bits() >> 32) as u32,
                id,
                z.to_bits(),
            ]);
        }
        assert_eq!(w.len(), SL_WORDS);
        w
    }

    #[test]
    fn records_decode_into_the_shortlist() {
        let key = NoiseKey {
            seed: 0x1234_5678_9abc_def0,
            position: (1 << 33) + 7,
            temperature: 0.7,
        };
        let words = key_words(&key);
        assert_eq!(u64::from(words[0]) | u64::from(words[1]) << 32, key.seed);
        assert_eq!(
            u64::from(words[2]) | u64::from(words[3]) << 32,
            key.position
        );

        let mut recs = Vec::new();
        for b in 0..SL_BLOCKS {
            let cands: Vec<(f64, u32, f32)> = match b {
                0 => vec![(3.5, 10, 1.25), (-0.5, 11, 0.5)],
                5 => vec![(7.25, 42, 2.0)],
                _ => vec![],
            };
            let spill = if b == 5 { 1.0 } else { f64::NEG_INFINITY };
            recs.extend(record(spill, 2.0, &cands));
        }
        let list = decode(&recs, key, 42);
        assert_eq!((list.top, list.m, list.spill), (42, 2.0, 1.0));
        assert_eq!(
            list.candidates,
            vec![(3.5, 10, 1.25), (-0.5, 11, 0.5), (7.25, 42, 2.0)]
        );
        assert_eq!(list.key, key);

        // A NaN spill in any block makes the list decline.
        recs[3 * SL_WORDS] = f64::NAN.to_bits() as u32;
        recs[3 * SL_WORDS + 1] = (f64::NAN.to_bits() >> 32) as u32;
        let list = decode(&recs, key, 42);
        assert!(list.spill.is_nan());
        assert_eq!(list.token(), None);
    }
}
