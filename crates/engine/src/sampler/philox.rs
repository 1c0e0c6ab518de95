//! Counter-based noise: Philox4x32-10 and the Gumbel noise keyed by (seed, position, token).
//!
//! Philox is a pure function of (counter, key), so the noise of any (seed, position, token) can be
//! computed in any order, on any thread or device, without carrying generator state. That is what
//! makes a token drawn at a verify row equal to the token drawn by the serial path.

/// Philox4x32 round multipliers (Salmon et al. 2011; Random123 `PHILOX_M4x32_0/1`).
const PHILOX_M0: u32 = 0xD251_1F53;
const PHILOX_M1: u32 = 0xCD9E_8D57;
/// Key schedule increments (Weyl sequence: golden ratio and sqrt(3) - 1; `PHILOX_W32_0/1`).
const PHILOX_W0: u32 = 0x9E37_79B9;
const PHILOX_W1: u32 = 0xBB67_AE85;

#[inline(always)]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// Philox4x32 with 10 rounds, exactly as Random123's `philox4x32_R(10, ctr, key)`:
/// each round is `(hi0, lo0) = M0 * c0`, `(hi1, lo1) = M1 * c2`,
/// `c = [hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0]`, and the key is bumped by the Weyl constants
/// between rounds.
#[inline]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(PHILOX_W0);
            k[1] = k[1].wrapping_add(PHILOX_W1);
        }
        let (hi0, lo0) = mulhilo(PHILOX_M0, c[0]);
        let (hi1, lo1) = mulhilo(PHILOX_M1, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// Counter blocks per [`philox_words64`] call: 64 tokens.
pub(crate) const BATCH_BLOCKS: usize = 16;

/// The words of [`philox4x32_10`] for the 16 counter blocks `block .. block + 16` at
/// `position` under `key`, in token order (word `4 i + j` is word `j` of block `block + i`):
/// the same integers as 16 separate calls, computed lane by lane so that the 16 independent
/// chains run side by side (and vectorize) instead of one after another.
pub(crate) fn philox_words64(position: u64, block: u32, key: [u32; 2]) -> [u32; 64] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked above).
            return unsafe { words64_avx512(position, block, key) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked above).
            return unsafe { words64_avx2(position, block, key) };
        }
    }
    words64(position, block, key)
}

/// [`words64`] compiled for AVX-512 (the same integer operations, wider vectors).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn words64_avx512(position: u64, block: u32, key: [u32; 2]) -> [u32; 64] {
    words64(position, block, key)
}

/// [`words64`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn words64_avx2(position: u64, block: u32, key: [u32; 2]) -> [u32; 64] {
    words64(position, block, key)
}

#[inline(always)]
fn words64(position: u64, block: u32, key: [u32; 2]) -> [u32; 64] {
    const L: usize = BATCH_BLOCKS;
    let mut c0 = [position as u32; L];
    let mut c1 = [(position >> 32) as u32; L];
    let mut c2: [u32; L] = std::array::from_fn(|i| block.wrapping_add(i as u32));
    let mut c3 = [0u32; L];
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(PHILOX_W0);
            k[1] = k[1].wrapping_add(PHILOX_W1);
        }
        for i in 0..L {
            let p0 = u64::from(PHILOX_M0) * u64::from(c0[i]);
            let p1 = u64::from(PHILOX_M1) * u64::from(c2[i]);
            c0[i] = ((p1 >> 32) as u32) ^ c1[i] ^ k[0];
            c1[i] = p1 as u32;
            c2[i] = ((p0 >> 32) as u32) ^ c3[i] ^ k[1];
            c3[i] = p0 as u32;
        }
    }
    let mut out = [0u32; 64];
    for i in 0..L {
        out[4 * i..4 * i + 4].copy_from_slice(&[c0[i], c1[i], c2[i], c3[i]]);
    }
    out
}

/// The Philox key for a seed: its low and high 32-bit halves.
#[inline(always)]
fn seed_key(seed: u64) -> [u32; 2] {
    [seed as u32, (seed >> 32) as u32]
}

/// The Philox counter of the block of four tokens `4 * block .. 4 * block + 3` at `position`.
/// Position and token live in separate counter words, never mixed with the seed: keying on
/// `seed + position` would make seed s at position p equal seed s + 1 at position p - 1.
#[inline(always)]
fn noise_counter(position: u64, block: u32) -> [u32; 4] {
    [position as u32, (position >> 32) as u32, block, 0]
}

/// Maps a 32-bit word to the open interval (0, 1): `(word + 0.5) / 2^32`.
///
/// Every step is exact in f64 (a 32-bit integer plus one half needs 33 bits; dividing by a power
/// of two only moves the exponent), so the uniform is bit-identical everywhere. The smallest value
/// is 2^-33 and the largest 1 - 2^-33, so both logarithms below are finite.
#[inline(always)]
pub fn uniform_open01(word: u32) -> f64 {
    (f64::from(word) + 0.5) * (1.0 / 4_294_967_296.0)
}

/// Gumbel(0, 1) noise from one 32-bit word: `-ln(-ln(u))` with `u = uniform_open01(word)`.
///
/// The logarithm is `f64::ln` from std, i.e. the platform libm. That is the one non-IEEE-exact
/// step of the sampler: bit-identical noise across machines assumes the same `ln` (glibc's is
/// correctly rounded in practice; a CUDA port must use a `log` that matches it, or compare the
/// noise it draws against this one in a test). The result is monotone in `word`.
#[inline(always)]
pub fn gumbel_from_word(word: u32) -> f64 {
    -(-uniform_open01(word).ln()).ln()
}

/// An upper bound on every value [`gumbel`] returns. The largest uniform, 1 - 2^-33, gives
/// about 22.87; the bound leaves a margin so that pruning by it never depends on the last bits
/// of `ln`. Used to skip tokens whose score cannot reach the current best.
pub const GUMBEL_UPPER_BOUND: f64 = 24.0;

/// For each value of a word's top 8 bits, an upper bound on [`gumbel_from_word`] over all words
/// with that prefix: the value at the prefix's largest word (the mapping is monotone) plus a
/// margin far above any rounding of `ln`. Lets a scan reject most tokens from the raw Philox word
/// without computing a logarithm.
pub(crate) fn gumbel_prefix_bounds() -> &'static [f64; 256] {
    static BOUNDS: std::sync::OnceLock<[f64; 256]> = std::sync::OnceLock::new();
    BOUNDS.get_or_init(|| {
        std::array::from_fn(|b| gumbel_from_word(((b as u32) << 24) | 0x00FF_FFFF) + 1e-9)
    })
}

/// The Gumbel noise of `token` at absolute `position` under `seed`.
///
/// Philox4x32-10 with key = `[seed lo, seed hi]` and counter =
/// `[position lo, position hi, token / 4, 0]`; output word `token % 4` is mapped by
/// [`gumbel_from_word`]. Different (seed, position) pairs select different Philox streams; the
/// four tokens of a counter block share one Philox call.
#[inline]
pub fn gumbel(seed: u64, position: u64, token: u32) -> f64 {
    let words = philox4x32_10(noise_counter(position, token / 4), seed_key(seed));
    gumbel_from_word(words[(token % 4) as usize])
}

/// [`gumbel`] with the last Philox block remembered, for scans in ascending token order.
#[derive(Clone)]
pub(crate) struct NoiseCache {
    key: [u32; 2],
    position: u64,
    block: u32,
    words: [u32; 4],
    valid: bool,
}

impl NoiseCache {
    pub(crate) fn new(seed: u64, position: u64) -> Self {
        NoiseCache {
            key: seed_key(seed),
            position,
            block: 0,
            words: [0; 4],
            valid: false,
        }
    }

    /// The Philox word behind `gumbel(seed, position, token)`.
    #[inline]
    pub(crate) fn word(&mut self, token: u32) -> u32 {
        let block = token / 4;
        if !self.valid || block != self.block {
            self.words = philox4x32_10(noise_counter(self.position, block), self.key);
            self.block = block;
            self.valid = true;
        }
        self.words[(token % 4) as usize]
    }

    /// The words of tokens `4 * block .. 4 * block + 64` ([`philox_words64`]).
    pub(crate) fn words64(&self, block: u32) -> [u32; 64] {
        philox_words64(self.position, block, self.key)
    }

    /// Exactly `gumbel(seed, position, token)`.
    #[cfg(test)]
    pub(crate) fn gumbel(&mut self, token: u32) -> f64 {
        gumbel_from_word(self.word(token))
    }
}
