// Per-row q8 activation quantization (`actq.rs`): for each block of `bl` values (32 or 256),
// amax = max |x|, d = amax / 127, q = round_ties_even(x * (127 / amax)) clamped to i8; a zero
// block when amax == 0 or 127/amax overflows. Integer sums per `sl` values (32 or 16).
// One thread per block: every block is computed alone, whatever the number of rows.
// One warp per block: lane l holds values [l * bl/32, (l + 1) * bl/32); amax is a warp max
// (exact in any order), the integer sums are warp sums (exact). Every block is computed alone,
// whatever the number of rows.
// The block of `bl` values at `xb` by one warp: codes to `qb`, the scale to `*db`, the sums of
// `sl` values to `sb`.
__device__ __forceinline__ void actq_block(const float* xb, int bl, int sl, int lane, i8* qb,
                                           float* db, i16* sb) {
    const int per = bl / 32;  // 1 or 8 values per lane
    xb += lane * per;
    float v[8];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if (i < per) {
            v[i] = xb[i];
            amax = fmaxf(amax, fabsf(v[i]));
        }
    }
    for (int s = 16; s > 0; s >>= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, s));
    float id = __fdiv_rn(127.0f, amax);
    bool zero = amax == 0.0f || isinf(id) || isnan(id);
    qb += lane * per;
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if (i < per) {
            int q = 0;
            if (!zero) {
                float r = rintf(__fmul_rn(v[i], id));
                q = (int)fminf(fmaxf(r, -128.0f), 127.0f);
            }
            qb[i] = (i8)q;
            sum += q;
        }
    }
    // Sums of `sl` values: `sl / per` consecutive lanes.
    const int lanes = sl / per;
    for (int s = 1; s < lanes; s <<= 1) sum += __shfl_xor_sync(FULL_MASK, sum, s);
    if (lane % lanes == 0) sb[lane / lanes] = (i16)sum;
    if (lane == 0) *db = zero ? 0.0f : __fdiv_rn(amax, 127.0f);
}

// Blocks b .. of a row of `n` values staged at `xs`, one warp each (warps of the thread block
// in turn): the quantized row `qs` / `d` / `sums` (`actq`'s layout for one row).
__device__ __forceinline__ void actq_row(const float* xs, int n, int bl, int sl, i8* qs,
                                         float* d, i16* sums) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int b = w; b < n / bl; b += nw) {
        actq_block(xs + b * bl, bl, sl, lane, qs + b * bl, d + b, sums + b * (bl / sl));
    }
}

extern "C" __global__ void actq(const float* x, int n_blocks, int bl, int sl, i8* qs, float* d,
                                i16* sums) {
    pdl_enter();
    int b = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n_blocks) return;  // whole warps leave together
    actq_block(x + (size_t)b * bl, bl, sl, threadIdx.x % 32, qs + (size_t)b * bl, d + b,
               sums + (size_t)b * (bl / sl));
}
