// Per-row q8 activation quantization (`actq.rs`): for each block of `bl` values (32 or 256),
// amax = max |x|, d = amax / 127, q = round_ties_even(x * (127 / amax)) clamped to i8; a zero
// block when amax == 0 or 127/amax overflows. Integer sums per `sl` values (32 or 16).
// One thread per block: every block is computed alone, whatever the number of rows.
extern "C" __global__ void actq(const float* x, int n_blocks, int bl, int sl, i8* qs, float* d,
                                i16* sums) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blocks) return;
    const float* xb = x + (size_t)b * bl;
    i8* qb = qs + (size_t)b * bl;
    float amax = 0.0f;
    for (int i = 0; i < bl; i++) amax = fmaxf(amax, fabsf(xb[i]));
    float id = __fdiv_rn(127.0f, amax);
    int per = bl / sl;
    if (amax == 0.0f || isinf(id) || isnan(id)) {
        for (int i = 0; i < bl; i++) qb[i] = 0;
        for (int s = 0; s < per; s++) sums[(size_t)b * per + s] = 0;
        d[b] = 0.0f;
        return;
    }
    for (int s = 0; s < per; s++) {
        int sum = 0;
        for (int i = s * sl; i < (s + 1) * sl; i++) {
            float v = rintf(__fmul_rn(xb[i], id));
            v = fminf(fmaxf(v, -128.0f), 127.0f);
            int q = (int)v;
            qb[i] = (i8)q;
            sum += q;
        }
        sums[(size_t)b * per + s] = (i16)sum;
    }
    d[b] = __fdiv_rn(amax, 127.0f);
}
