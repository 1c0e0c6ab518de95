// Per-row q8 activation quantization (`actq.rs`): for each block of `bl` values (32 or 256),
// amax = max |x|, d = amax / 127, q = round_ties_even(x * (127 / amax)) clamped to i8; a zero
// block when amax == 0 or 127/amax overflows. Integer sums per `sl` values (32 or 16).
// One thread per block: every block is computed alone, whatever the number of rows.
// One warp per block: lane l holds values [l * bl/32, (l + 1) * bl/32); amax is a warp max
// (exact in any order), the integer sums are warp sums (exact). Every block is computed alone,
// whatever the number of rows.
// The tensor-core matmuls' copy of the 256-value blocks (`qf`, "fragment order"): rows in groups
// of 8; group g's block b is the FRAG_GB bytes at (g * nb + b) * FRAG_GB. Its first 2,048 hold
// the codes: sub-block s (values 32 s .. 32 s + 31) the 256 bytes at 256 s, row r % 8's 32
// values at 32 (r % 8). A warp's load of one sub-block of 8 rows (lane 4 gid + t: row gid,
// values 8t .. 8t + 7) then reads 256 contiguous bytes, two cache lines instead of eight. Then
// each row's 16-byte record of its sub-block sums at 2048 + 16 (r % 8): sum_s = 64 h_s + l_s
// with l_s in 0..63, bytes h_0 .. h_7 then l_0 .. l_7 (every sum of 32 codes is within
// +-4,064, so h_s fits a signed byte), the int8 operands of Q4_K's min sums (`MmaQ4K::ints`).
#define FRAG_GB 2176
// The offset of row `row`'s codes of block b (rows of `nb` blocks).
__device__ __forceinline__ size_t frag_offset(size_t row, int b, int nb) {
    return ((row / 8) * nb + b) * FRAG_GB + (row % 8) * 32;
}
// The offset of row `row`'s record of block b.
__device__ __forceinline__ size_t frag_rec_offset(size_t row, int b, int nb) {
    return ((row / 8) * nb + b) * FRAG_GB + 2048 + (row % 8) * 16;
}

// The block of `bl` values at `xb` by one warp: codes to `qb`, the scale to `*db`, the sums of
// `sl` values to `sb`; with `qf` (not null) and blocks of 256, also row `row`'s codes and
// record of block `b` (rows of `nb` blocks) in fragment order.
__device__ __forceinline__ void actq_block(const float* xb, int bl, int sl, int lane, i8* qb,
                                           float* db, i16* sb, i8* qf, size_t row, int b,
                                           int nb) {
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
    u32 packed[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if (i < per) {
            int q = 0;
            if (!zero) {
                float r = rintf(__fmul_rn(v[i], id));
                q = (int)fminf(fmaxf(r, -128.0f), 127.0f);
            }
            qb[i] = (i8)q;
            packed[i / 4] |= (u32)(q & 0xFF) << (8 * (i % 4));
            sum += q;
        }
    }
    // The block's place in fragment order (null: none); lane l's 8 values are values 8 (l % 4)
    // .. of sub-block l / 4.
    i8* fb = qf != nullptr && bl == 256 ? qf + frag_offset(row, b, nb) : nullptr;
    if (fb != nullptr)
        *(uint2*)(fb + (lane / 4) * 256 + (lane % 4) * 8) = make_uint2(packed[0], packed[1]);
    // Sums of `sl` values: `sl / per` consecutive lanes.
    const int lanes = sl / per;
    for (int s = 1; s < lanes; s <<= 1) sum += __shfl_xor_sync(FULL_MASK, sum, s);
    if (lane % lanes == 0) sb[lane / lanes] = (i16)sum;
    // The record (at `frag_rec_offset`; this row's codes are at `frag_offset`) from the sums of
    // 4 lanes (`sl` is 16 or 32, so 2 or 4 lanes are summed already).
    if (fb != nullptr) {
        const int s32 = lanes == 4 ? sum : sum + __shfl_xor_sync(FULL_MASK, sum, 2);
        if (lane % 4 == 0) {
            const int o = 2048 - 16 * (int)(row % 8) + lane / 4;
            fb[o] = (i8)(s32 >> 6);
            fb[o + 8] = (i8)(s32 & 63);
        }
    }
    if (lane == 0) *db = zero ? 0.0f : __fdiv_rn(amax, 127.0f);
}

// Blocks b .. of a row of `n` values staged at `xs`, one warp each (warps of the thread block
// in turn): the quantized row `qs` / `d` / `sums` (`actq`'s layout for one row).
// `qf`: the copy in `frag_offset`'s order (null: none), of which this is row `row`.
__device__ __forceinline__ void actq_row(const float* xs, int n, int bl, int sl, i8* qs,
                                         float* d, i16* sums, i8* qf, int row) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int b = w; b < n / bl; b += nw) {
        actq_block(xs + b * bl, bl, sl, lane, qs + b * bl, d + b, sums + b * (bl / sl), qf,
                   row, b, n / bl);
    }
}

// `nb` blocks per row.
extern "C" __global__ void actq(const float* x, int n_blocks, int nb, int bl, int sl, i8* qs,
                                float* d, i16* sums, i8* qf) {
    pdl_enter();
    int b = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n_blocks) return;  // whole warps leave together
    actq_block(x + (size_t)b * bl, bl, sl, threadIdx.x % 32, qs + (size_t)b * bl, d + b,
               sums + (size_t)b * (bl / sl), qf, b / nb, b % nb, nb);
}
