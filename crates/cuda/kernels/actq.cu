// Per-row q8 activation quantization (`actq.rs`): for each block of `bl` values (32 or 256),
// amax = max |x|, d = amax / 127, q = round_ties_even(x * (127 / amax)) clamped to i8; a zero
// block when amax == 0 or 127/amax overflows. Integer sums per `sl` values (32 or 16).
// One thread per block: every block is computed alone, whatever the number of rows.
// One warp per block: lane l holds values [l * bl/32, (l + 1) * bl/32); amax is a warp max
// (exact in any order), the integer sums are warp sums (exact). Every block is computed alone,
// whatever the number of rows.
extern "C" __global__ void actq(const float* x, int n_blocks, int bl, int sl, i8* qs, float* d,
                                i16* sums) {
    int b = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (b >= n_blocks) return;  // whole warps leave together
    const int per = bl / 32;    // 1 or 8 values per lane
    const float* xb = x + (size_t)b * bl + lane * per;
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
    i8* qb = qs + (size_t)b * bl + lane * per;
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
    if (lane % lanes == 0) sums[(size_t)b * (bl / sl) + lane / lanes] = (i16)sum;
    if (lane == 0) d[b] = zero ? 0.0f : __fdiv_rn(amax, 127.0f);
}
