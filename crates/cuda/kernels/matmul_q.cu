// Quantized matmuls `out[r * n + c] = dot(x[r], w[c])` (`matmul::reference::dot_ref`).
//
// One warp per (column, tile of up to RT rows): inside a weight block the 32 lanes split the
// integer products of one row (exact in any order, summed with shuffles), then every lane
// applies `block_step` for that row and block, rows one after the other, blocks in ascending
// order. A row's operations do not depend on the number of rows in the call or its tile.
//
// Weights are raw GGUF blocks, rows of k/BE blocks. Activations come from `actq`: `xq` int8
// (rows x k), `xd` one scale per activation block, `xs` integer sums (per 32 values for the
// legacy types, per 16 for the k-quants).

enum { T_Q4_0 = 0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0, T_Q2K, T_Q3K, T_Q4K, T_Q5K, T_Q6K, T_MXFP4 };

// MXFP4: twice an E2M1 code's value (`dtype::MXFP4_TWICE`: magnitudes 0, 1, 2, 3, 4, 6, 8, 12,
// bit 3 the sign), and half the block's E8M0 scale (`dtype::e8m0_half`, 2^(e - 128)), so that
// code values times scale are exact.
__device__ __forceinline__ int mxfp4_twice(int code) {
    const int mag = (int)((0x0C08060403020100ull >> (8 * (code & 7))) & 0xFF);
    return (code & 8) ? -mag : mag;
}
__device__ __forceinline__ float e8m0_half(u32 e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

__device__ __forceinline__ void scale_min_k4(int j, const u8* s, int* sc, int* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

template <int T>
struct QType {
    static const bool kq = T >= T_Q2K && T <= T_Q6K;
    static const int BE = kq ? 256 : 32;
    static const int BB = T == T_Q4_0 ? 18 : T == T_Q4_1 ? 20 : T == T_Q5_0 ? 22 : T == T_Q5_1 ? 24
                        : T == T_Q8_0 ? 34 : T == T_Q2K ? 84 : T == T_Q3K ? 110 : T == T_Q4K ? 144
                        : T == T_Q5K ? 176 : T == T_MXFP4 ? 17 : 210;
    static const int SL = kq ? 16 : 32;
};

// This lane's share of one block's integer sums against activation block `x` (`sr`: the row's
// activation sums, `b`: the block index), and the block's float factors and shape.
template <int T>
__device__ __forceinline__ void block_sums(const u8* blk, const i8* x, const i16* sr, int b,
                                           int lane, int& isum, int& msum, int& shape, float& d,
                                           float& dmin) {
    isum = 0;
    msum = 0;
    shape = 0;
    d = f16_at(blk);
    dmin = 0.0f;
    if (T == T_Q8_0) {
        isum = (int)(i8)blk[2 + lane] * x[lane];
    } else if (T == T_MXFP4) {
        d = e8m0_half(blk[0]);
        const int byte = blk[1 + lane % 16];
        isum = mxfp4_twice(lane < 16 ? (byte & 0xF) : (byte >> 4)) * x[lane];
    } else if (T == T_Q4_0 || T == T_Q4_1) {
        const u8* qs = blk + (T == T_Q4_0 ? 2 : 4);
        int byte = qs[lane % 16];
        int q = (lane < 16 ? (byte & 0xF) : (byte >> 4)) - (T == T_Q4_0 ? 8 : 0);
        isum = q * x[lane];
        if (T == T_Q4_1) {
            shape = 2;
            dmin = f16_at(blk + 2);
            msum = lane == 0 ? (int)sr[b] : 0;
        }
    } else if (T == T_Q5_0 || T == T_Q5_1) {
        const int qh_at = T == T_Q5_0 ? 2 : 4;
        u32 qh = (u32)blk[qh_at] | ((u32)blk[qh_at + 1] << 8) | ((u32)blk[qh_at + 2] << 16)
               | ((u32)blk[qh_at + 3] << 24);
        int byte = blk[qh_at + 4 + lane % 16];
        int lo = lane < 16 ? (byte & 0xF) : (byte >> 4);
        int q = (lo | (((qh >> lane) & 1) << 4)) - (T == T_Q5_0 ? 16 : 0);
        isum = q * x[lane];
        if (T == T_Q5_1) {
            shape = 2;
            dmin = f16_at(blk + 2);
            msum = lane == 0 ? (int)sr[b] : 0;
        }
    } else if (T == T_Q2K) {
        // scales 16 @0, qs 64 @16, d @80, dmin @82; element 128n + 32j + l is
        // (qs[32n + l] >> 2j) & 3, group scale/min the low/high nibble of scales[g].
        shape = 1;
        d = f16_at(blk + 80);
        dmin = f16_at(blk + 82);
        int e0 = 8 * lane;
        int nn = e0 / 128, j = (e0 % 128) / 32, l0 = e0 % 32;
        const u8* qs = blk + 16 + 32 * nn + l0;
        int s = 0;
        for (int i = 0; i < 8; i++) s += ((qs[i] >> (2 * j)) & 3) * x[e0 + i];
        isum = (blk[lane / 2] & 0xF) * s;
        if (lane < 16) msum = (blk[lane] >> 4) * (int)sr[16 * b + lane];
    } else if (T == T_Q3K) {
        // hmask 32 @0, qs 64 @32, scales 12 @96, d @108; element 128n + 32j + l is
        // ((qs[32n + l] >> 2j) & 3) - (hmask[l] bit 4n+j ? 0 : 4); 6-bit signed scales.
        d = f16_at(blk + 108);
        int e0 = 8 * lane;
        int nn = e0 / 128, j = (e0 % 128) / 32, l0 = e0 % 32;
        const u8* qs = blk + 32 + 32 * nn + l0;
        const u8* hm = blk + l0;
        int bit = 1 << (4 * nn + j);
        int s = 0;
        for (int i = 0; i < 8; i++) {
            int q = ((qs[i] >> (2 * j)) & 3) - ((hm[i] & bit) ? 0 : 4);
            s += q * x[e0 + i];
        }
        const u8* sc = blk + 96;
        int g = lane / 2;
        u32 a0 = sc[0] | (sc[1] << 8) | (sc[2] << 16) | ((u32)sc[3] << 24);
        u32 a1 = sc[4] | (sc[5] << 8) | (sc[6] << 16) | ((u32)sc[7] << 24);
        u32 t = sc[8] | (sc[9] << 8) | (sc[10] << 16) | ((u32)sc[11] << 24);
        const u32 M1 = 0x03030303u, M2 = 0x0f0f0f0fu;
        u32 aux = g < 4    ? (a0 & M2) | ((t & M1) << 4)
                  : g < 8  ? (a1 & M2) | (((t >> 2) & M1) << 4)
                  : g < 12 ? ((a0 >> 4) & M2) | (((t >> 4) & M1) << 4)
                           : ((a1 >> 4) & M2) | (((t >> 6) & M1) << 4);
        int scale = (int)(i8)(u8)(aux >> (8 * (g % 4))) - 32;
        isum = scale * s;
    } else if (T == T_Q4K || T == T_Q5K) {
        // Q5_K adds qh (32 bytes @16): bit 2j+h of qh[l] is the element's fifth bit.
        shape = 1;
        dmin = f16_at(blk + 2);
        int e0 = 8 * lane;
        int j = e0 / 64, h = (e0 % 64) / 32, l0 = e0 % 32;
        int sc, m;
        scale_min_k4(lane / 4, blk + 4, &sc, &m);
        const u8* qs = blk + (T == T_Q5K ? 48 : 16) + 32 * j + l0;
        const u8* qh = blk + 16 + l0;
        int s = 0;
        for (int i = 0; i < 8; i++) {
            int q = h == 0 ? (qs[i] & 0xF) : (qs[i] >> 4);
            if (T == T_Q5K) q |= ((qh[i] >> (2 * j + h)) & 1) << 4;
            s += q * x[e0 + i];
        }
        isum = sc * s;
        if (lane < 16) {
            scale_min_k4(lane / 2, blk + 4, &sc, &m);
            msum = m * (int)sr[16 * b + lane];
        }
    } else {  // Q6_K
        d = f16_at(blk + 208);
        int e0 = 8 * lane;
        int nn = e0 / 128, r = e0 % 128, quarter = r / 32, l0 = r % 32;
        const u8* ql = blk + 64 * nn + l0 + (quarter & 1) * 32;
        const u8* qh = blk + 128 + 32 * nn + l0;
        int shift = 2 * quarter;
        int s = 0;
        for (int i = 0; i < 8; i++) {
            int lo = quarter >= 2 ? (ql[i] >> 4) : (ql[i] & 0xF);
            int q = (lo | (((qh[i] >> shift) & 3) << 4)) - 32;
            s += q * x[e0 + i];
        }
        isum = (int)(i8)blk[192 + lane / 2] * s;
    }
}

// RT rows per warp: the warp reads a weight block from memory once and applies it to up to RT
// rows, each with exactly the operations it gets alone, so the RT = 1 and RT = 8 kernels give
// the same bits for every row (row-exact for any row count and either tile).
template <int T, int RT>
__device__ __forceinline__ void matmul_q(const u8* w, int n, int k, const i8* xq, const float* xd,
                                         const i16* xs, int rows, float* out) {
    const int BE = QType<T>::BE, BB = QType<T>::BB, SL = QType<T>::SL;
    int col = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int row0 = blockIdx.y * RT;
    int lane = threadIdx.x % 32;
    if (col >= n) return;
    int nb = k / BE;
    const u8* wr = w + (size_t)col * nb * BB;
    float acc[RT];
#pragma unroll
    for (int rr = 0; rr < RT; rr++) acc[rr] = 0.0f;
    for (int b = 0; b < nb; b++) {
        const u8* blk = wr + (size_t)b * BB;
#pragma unroll
        for (int rr = 0; rr < RT; rr++) {
            int row = row0 + rr;
            if (row >= rows) break;  // the same for every lane of the warp
            const i8* x = xq + (size_t)row * k + (size_t)b * BE;
            const i16* sr = xs + (size_t)row * (k / SL);
            int isum, msum, shape;
            float d, dmin;
            block_sums<T>(blk, x, sr, b, lane, isum, msum, shape, d, dmin);
            isum = warp_sum_i32(isum);
            msum = warp_sum_i32(msum);
            acc[rr] = block_step(acc[rr], shape, d, dmin, xd[(size_t)row * nb + b], isum, msum);
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int rr = 0; rr < RT; rr++) {
            if (row0 + rr < rows) out[(size_t)(row0 + rr) * n + col] = acc[rr];
        }
    }
}

#define MATMUL_Q(name, T)                                                                      \
    extern "C" __global__ void name(const u8* w, int n, int k, const i8* xq, const float* xd,  \
                                    const i16* xs, int rows, float* out) { pdl_enter();        \
        matmul_q<T, 1>(w, n, k, xq, xd, xs, rows, out);                                        \
    }                                                                                          \
    extern "C" __global__ void name##_t8(const u8* w, int n, int k, const i8* xq,              \
                                         const float* xd, const i16* xs, int rows, float* out) { pdl_enter(); \
        matmul_q<T, 8>(w, n, k, xq, xd, xs, rows, out);                                        \
    }
MATMUL_Q(matmul_q4_0, T_Q4_0)
MATMUL_Q(matmul_q4_1, T_Q4_1)
MATMUL_Q(matmul_q5_0, T_Q5_0)
MATMUL_Q(matmul_q5_1, T_Q5_1)
MATMUL_Q(matmul_q8_0, T_Q8_0)
MATMUL_Q(matmul_q2k, T_Q2K)
MATMUL_Q(matmul_q3k, T_Q3K)
MATMUL_Q(matmul_q4k, T_Q4K)
MATMUL_Q(matmul_q5k, T_Q5K)
MATMUL_Q(matmul_q6k, T_Q6K)
MATMUL_Q(matmul_mxfp4, T_MXFP4)
