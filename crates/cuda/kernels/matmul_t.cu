// Tiled quantized matmuls, the same bits as `matmul_q` (and the CPU's `dot_ref`) with far fewer
// instructions per row: a thread block of 8 warps covers 32 columns (one per lane) and 8 rows.
// Weight blocks are walked in groups of 8: warp w decodes block g + w of its lane's column once
// and computes that block's exact integer sums for each of the 8 rows (dp4a where the type has
// a specialized decoder), into shared memory; then thread (w, lane) advances the float chain of
// row w, column lane by the group's blocks in ascending order (`block_step`). Integer sums are
// exact in any order, and the float chain is the CPU's, so a row's bits never depend on the
// number of rows or the tile it lands in.

#define TT_COLS 32

__device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }

// Four bytes at a 2-byte aligned address, as one int.
__device__ __forceinline__ int ld4_a2(const u8* p) {
    const u16* h = (const u16*)p;
    return (int)((u32)h[0] | ((u32)h[1] << 16));
}

// The generic decoder: the block's sums through `block_sums`, lane by lane (any type).
template <int T>
struct Dec {
    const u8* blk;
    __device__ __forceinline__ void load(const u8* b, int) { blk = b; }
    __device__ __forceinline__ void sums(const i8* x, const i16* sr, int b, int& isum, int& msum,
                                         int& shape, float& d, float& dmin) const {
        int is = 0, ms = 0;
        for (int v = 0; v < 32; v++) {
            int i1, m1;
            block_sums<T>(blk, x, sr, b, v, i1, m1, shape, d, dmin);
            is += i1;
            ms += m1;
        }
        isum = is;
        msum = ms;
    }
};

// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins; element 64j + 32h + l is nibble h of
// qs[32j + l]. isum = sum_s sc_s * (q . x over sub-block s), msum = sum_g m_{g/2} * sr[16b + g].
template <>
struct Dec<T_Q4K> {
    u32 qs[32];
    int sc[8], mn[8];
    float d, dmin;
    // The block's nine 16-byte words are `stride` bytes apart: 16 in the GGUF layout, 512 in
    // the interleaved one (word w of 32 columns' blocks side by side, see `ops::interleave`).
    __device__ __forceinline__ void load(const u8* b, int stride) {
        uint4 w0 = *(const uint4*)b;
        const u8* h = (const u8*)&w0;
        d = f16_at(h);
        dmin = f16_at(h + 2);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint4 v = *(const uint4*)(b + (size_t)(i + 1) * stride);
            qs[4 * i] = v.x;
            qs[4 * i + 1] = v.y;
            qs[4 * i + 2] = v.z;
            qs[4 * i + 3] = v.w;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) scale_min_k4(j, h + 4, &sc[j], &mn[j]);
    }
    __device__ __forceinline__ void sums(const i8* x, const i16* sr, int b, int& isum, int& msum,
                                         int& shape, float& dd, float& ddmin) const {
        const int4* x4 = (const int4*)x;
        int is = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int lo = 0, hi = 0;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int4 xl = x4[4 * j + i];      // elements 64j + 16i ..
                int4 xh = x4[4 * j + 2 + i];  // elements 64j + 32 + 16i ..
                const u32* q = qs + 8 * j + 4 * i;
                lo = dp4a(q[0] & 0x0F0F0F0F, xl.x, lo);
                lo = dp4a(q[1] & 0x0F0F0F0F, xl.y, lo);
                lo = dp4a(q[2] & 0x0F0F0F0F, xl.z, lo);
                lo = dp4a(q[3] & 0x0F0F0F0F, xl.w, lo);
                hi = dp4a((q[0] >> 4) & 0x0F0F0F0F, xh.x, hi);
                hi = dp4a((q[1] >> 4) & 0x0F0F0F0F, xh.y, hi);
                hi = dp4a((q[2] >> 4) & 0x0F0F0F0F, xh.z, hi);
                hi = dp4a((q[3] >> 4) & 0x0F0F0F0F, xh.w, hi);
            }
            is += sc[2 * j] * lo + sc[2 * j + 1] * hi;
        }
        int ms = 0;
#pragma unroll
        for (int g = 0; g < 16; g++) ms += mn[g / 2] * (int)sr[16 * b + g];
        isum = is;
        msum = ms;
        shape = 1;
        dd = d;
        ddmin = dmin;
    }
};

// Q6_K: ql 128 @0, qh 64 @128, scales 16 x i8 @192, d @208. Element 128n + 32u + l (u < 4) is
// (nibble (u >= 2) of ql[64n + 32(u & 1) + l]) | ((qh[32n + l] >> 2u) & 3) << 4, minus 32;
// group scale per 16 elements. sum (q - 32) x = (q' . x) - 32 * sr[16b + g].
template <>
struct Dec<T_Q6K> {
    const u8* blk;
    __device__ __forceinline__ void load(const u8* b, int) { blk = b; }
    __device__ __forceinline__ void sums(const i8* x, const i16* sr, int b, int& isum, int& msum,
                                         int& shape, float& dd, float& ddmin) const {
        const int* x4 = (const int*)x;
        int is = 0;
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int l4 = 0; l4 < 8; l4++) {  // 4 elements l = 4 l4 .. of each of the 4 u
                int ql0 = ld4_a2(blk + 64 * n + 4 * l4);
                int ql1 = ld4_a2(blk + 64 * n + 32 + 4 * l4);
                int qh = ld4_a2(blk + 128 + 32 * n + 4 * l4);
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    int lo = u == 0 ? ql0 & 0x0F0F0F0F
                           : u == 1 ? ql1 & 0x0F0F0F0F
                           : u == 2 ? (ql0 >> 4) & 0x0F0F0F0F
                                    : (ql1 >> 4) & 0x0F0F0F0F;
                    int q = lo | (((qh >> (2 * u)) & 0x03030303) << 4);
                    int e = 128 * n + 32 * u + 4 * l4;  // element index
                    int g = e / 16;
                    int dot = dp4a(q, x4[e / 4], 0);
                    is += (int)(i8)blk[192 + g] * dot;
                }
            }
        }
        int corr = 0;
#pragma unroll
        for (int g = 0; g < 16; g++) corr += (int)(i8)blk[192 + g] * (int)sr[16 * b + g];
        isum = is - 32 * corr;
        msum = 0;
        shape = 0;
        dd = f16_at(blk + 208);
        ddmin = 0.0f;
    }
};

// Q8_0: d @0, 32 x i8 @2.
template <>
struct Dec<T_Q8_0> {
    const u8* blk;
    __device__ __forceinline__ void load(const u8* b, int) { blk = b; }
    __device__ __forceinline__ void sums(const i8* x, const i16* sr, int b, int& isum, int& msum,
                                         int& shape, float& dd, float& ddmin) const {
        const int* x4 = (const int*)x;
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = dp4a(ld4_a2(blk + 2 + 4 * i), x4[i], s);
        isum = s;
        msum = 0;
        shape = 0;
        dd = f16_at(blk);
        ddmin = 0.0f;
    }
};

// The legacy types, by dp4a over four 4-element groups per half block. Element j < 16 of a
// block comes from the low nibble of byte j, element 16 + j from its high nibble; Q5_0/Q5_1's
// fifth bit j of `qh` joins element j. Offsets (Q4_0's 8, Q5_0's 16) come off through the
// activation block's sum `sr[b]`: isum = sum((code - offset) * x) exactly.
// Bits t of the low four of `h` to bit 0 of byte t (no carries: the shifted copies are apart).
__device__ __forceinline__ int spread4(u32 h) { return (int)(((h & 0xF) * 0x00204081u) & 0x01010101u); }

template <int T>
__device__ __forceinline__ int legacy_dots(const u8* blk, const int* x4) {
    constexpr bool five = T == T_Q5_0 || T == T_Q5_1;
    const int qs_at = T == T_Q4_0 ? 2 : T == T_Q4_1 ? 4 : T == T_Q5_0 ? 6 : 8;
    const u32 qh = five ? (u32)ld4_a2(blk + qs_at - 4) : 0u;
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int v = ld4_a2(blk + qs_at + 4 * i);
        int lo = v & 0x0F0F0F0F, hi = (v >> 4) & 0x0F0F0F0F;
        if (five) {
            lo |= spread4(qh >> (4 * i)) << 4;
            hi |= spread4(qh >> (16 + 4 * i)) << 4;
        }
        s = dp4a(lo, x4[i], s);
        s = dp4a(hi, x4[4 + i], s);
    }
    return s;
}

template <int T>
struct DecLegacy {
    const u8* blk;
    __device__ __forceinline__ void load(const u8* b, int) { blk = b; }
    __device__ __forceinline__ void sums(const i8* x, const i16* sr, int b, int& isum, int& msum,
                                         int& shape, float& dd, float& ddmin) const {
        const int s = legacy_dots<T>(blk, (const int*)x);
        dd = f16_at(blk);
        if (T == T_Q4_1 || T == T_Q5_1) {
            isum = s;
            msum = (int)sr[b];
            shape = 2;
            ddmin = f16_at(blk + 2);
        } else {
            isum = s - (T == T_Q4_0 ? 8 : 16) * (int)sr[b];
            msum = 0;
            shape = 0;
            ddmin = 0.0f;
        }
    }
};
template <> struct Dec<T_Q4_0> : DecLegacy<T_Q4_0> {};
template <> struct Dec<T_Q4_1> : DecLegacy<T_Q4_1> {};
template <> struct Dec<T_Q5_0> : DecLegacy<T_Q5_0> {};
template <> struct Dec<T_Q5_1> : DecLegacy<T_Q5_1> {};

// MXFP4: e8m0 @0, codes @1 (blocks of 17 bytes: read byte by byte), each code's twice-value.
template <>
struct Dec<T_MXFP4> {
    const u8* blk;
    __device__ __forceinline__ void load(const u8* b, int) { blk = b; }
    __device__ __forceinline__ void sums(const i8* x, const i16*, int, int& isum, int& msum,
                                         int& shape, float& dd, float& ddmin) const {
        const int* x4 = (const int*)x;
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u32 lo = 0, hi = 0;
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int byte = blk[1 + 4 * i + t];
                lo |= ((u32)mxfp4_twice(byte & 0xF) & 0xFF) << (8 * t);
                hi |= ((u32)mxfp4_twice(byte >> 4) & 0xFF) << (8 * t);
            }
            s = dp4a((int)lo, x4[i], s);
            s = dp4a((int)hi, x4[4 + i], s);
        }
        isum = s;
        msum = 0;
        shape = 0;
        dd = e8m0_half(blk[0]);
        ddmin = 0.0f;
    }
};

// ROWS rows and C columns per thread block of WARPS warps. Lane l of warp w decodes, for column
// l % C, block g + w * (32 / C) + l / C of each group of SLOTS = WARPS * 32 / C blocks. Many
// rows: 8 rows x 32 columns x 8 warps. One or two rows: 2 rows x 32 columns x 16 warps (16
// blocks per column in flight; 8 columns x 64 blocks measured slower on the H200).
// IL: Q4_K weights in the interleaved layout (C must be 32).
template <int T, int ROWS, int WARPS, int C, bool IL = false>
__device__ __forceinline__ void matmul_t(const u8* w, int n, int k, const i8* xq,
                                         const float* xd, const i16* xs, int rows, float* out) {
    const int BE = QType<T>::BE, BB = QType<T>::BB, SL = QType<T>::SL;
    const int SLOTS = WARPS * 32 / C;
    __shared__ int s_isum[SLOTS][ROWS][C];
    __shared__ int s_msum[SLOTS][ROWS][C];
    __shared__ float s_d[SLOTS][C];
    __shared__ float s_dmin[SLOTS][C];
    __shared__ int s_shape[SLOTS][C];
    const int t = threadIdx.x, lane = t % 32, wp = t / 32;
    const int cl = lane % C, slot = wp * (32 / C) + lane / C;
    const int col = blockIdx.y * C + cl;
    const int row0 = blockIdx.x * ROWS;
    const int nrows = min(ROWS, rows - row0);
    const int nb = k / BE;
    const u8* wr = w + (size_t)col * nb * BB;
    // The chain this thread advances (threads t < ROWS * C): row row0 + t / C, column t % C.
    const int crow = t / C, ccl = t % C, ccol = blockIdx.y * C + ccl;
    const bool chain = t < ROWS * C && crow < nrows && ccol < n;
    float acc = 0.0f;
    for (int g = 0; g < nb; g += SLOTS) {
        const int b = g + slot;
        if (col < n && b < nb) {
            Dec<T> dec;
            if (IL) {
                dec.load(w + ((size_t)blockIdx.y * nb + b) * 9 * 512 + cl * 16, 512);
            } else {
                dec.load(wr + (size_t)b * BB, 16);
            }
            int shape = 0;
            float d = 0.0f, dmin = 0.0f;
            for (int rr = 0; rr < nrows; rr++) {
                const int row = row0 + rr;
                int isum, msum;
                dec.sums(xq + (size_t)row * k + (size_t)b * BE, xs + (size_t)row * (k / SL), b,
                         isum, msum, shape, d, dmin);
                s_isum[slot][rr][cl] = isum;
                s_msum[slot][rr][cl] = msum;
            }
            s_d[slot][cl] = d;
            s_dmin[slot][cl] = dmin;
            s_shape[slot][cl] = shape;
        }
        __syncthreads();
        if (chain) {
            const int row = row0 + crow;
            for (int j = 0; j < SLOTS && g + j < nb; j++) {
                acc = block_step(acc, s_shape[j][ccl], s_d[j][ccl], s_dmin[j][ccl],
                                 xd[(size_t)row * nb + g + j], s_isum[j][crow][ccl],
                                 s_msum[j][crow][ccl]);
            }
        }
        __syncthreads();
    }
    if (chain) out[(size_t)(row0 + crow) * n + ccol] = acc;
}

#define MATMUL_T(name, T)                                                                     \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        name(const u8* w, int n, int k, const i8* xq, const float* xd, const i16* xs,          \
             int rows, float* out) { pdl_enter();                                              \
        matmul_t<T, 8, 8, 32>(w, n, k, xq, xd, xs, rows, out);                                 \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(512)                                          \
        name##_r2(const u8* w, int n, int k, const i8* xq, const float* xd, const i16* xs,     \
                  int rows, float* out) { pdl_enter();                                         \
        matmul_t<T, 2, 16, 32>(w, n, k, xq, xd, xs, rows, out);                                 \
    }
MATMUL_T(matmul_tt_q4_0, T_Q4_0)
MATMUL_T(matmul_tt_q4_1, T_Q4_1)
MATMUL_T(matmul_tt_q5_0, T_Q5_0)
MATMUL_T(matmul_tt_q5_1, T_Q5_1)
MATMUL_T(matmul_tt_q8_0, T_Q8_0)
MATMUL_T(matmul_tt_q2k, T_Q2K)
MATMUL_T(matmul_tt_q3k, T_Q3K)
MATMUL_T(matmul_tt_q4k, T_Q4K)
MATMUL_T(matmul_tt_q5k, T_Q5K)
MATMUL_T(matmul_tt_q6k, T_Q6K)
MATMUL_T(matmul_tt_mxfp4, T_MXFP4)

// Q4_K in the interleaved layout (`ops::interleave` on the host): a warp's 32 lanes read 512
// contiguous bytes per load.
extern "C" __global__ void __launch_bounds__(256)
    matmul_tt_q4k_i(const u8* w, int n, int k, const i8* xq, const float* xd, const i16* xs,
                    int rows, float* out) {
    pdl_enter();
    matmul_t<T_Q4K, 8, 8, 32, true>(w, n, k, xq, xd, xs, rows, out);
}
extern "C" __global__ void __launch_bounds__(512)
    matmul_tt_q4k_i_r2(const u8* w, int n, int k, const i8* xq, const float* xd, const i16* xs,
                       int rows, float* out) {
    pdl_enter();
    matmul_t<T_Q4K, 2, 16, 32, true>(w, n, k, xq, xd, xs, rows, out);
}
