// Few-row quantized matmuls (decode: one row; small verify rounds: up to four), for Q4_K and
// Q6_K weights interleaved by 32 columns (`ops::interleave`). The same bits as every other
// matmul kernel: exact integer block sums, then the CPU's float step per block in ascending
// block order.
//
// Why a separate form: with one row, the tensor-core kernels spend most of their issue slots
// decoding scales (four lanes per column) and exchanging sums, and the memory system waits.
// Here lane l of every warp owns column 32 * tile + l and decodes each of its blocks once, with
// dp4a; the W warps of a thread block take the tile's blocks of k in turn (warp w: blocks w,
// w + W, ...), each warp loading its next block while it computes the current one, with no
// barrier until every block is done. The integer sums and factors go to shared memory, indexed
// by block; then thread (row, lane) advances its row's float chain over the blocks in order.

#define GV_M4 0x0F0F0F0Fu

__device__ __forceinline__ int gv_byte(u32 w, int i) { return (int)((w >> (8 * i)) & 0xFF); }

// The activation sums of one row's block: 16 i16 (one per 16 values) in two 16-byte loads.
__device__ __forceinline__ void load_sums(const i16* s, int (&v)[16]) {
    uint4 lo = s ? *(const uint4*)s : make_uint4(0, 0, 0, 0);
    uint4 hi = s ? *(const uint4*)(s + 8) : make_uint4(0, 0, 0, 0);
    const u32 w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        v[2 * i] = (int)(i16)(w[i] & 0xFFFF);
        v[2 * i + 1] = (int)(i16)(w[i] >> 16);
    }
}

// Q4_K: word 0 = d, dmin, 12 bytes of 6-bit scales and mins; words 1..8 = qs (element
// 64j + 32h + l is nibble h of qs[32j + l]).
struct GvQ4K {
    static const int TB = 9 * 512;
    static const int SHAPE = 1;
    uint4 v[9];
    __device__ __forceinline__ void load(const u8* tb, int lane) {
#pragma unroll
        for (int i = 0; i < 9; i++) v[i] = *(const uint4*)(tb + i * 512 + lane * 16);
    }
    __device__ __forceinline__ float2 factors() const {
        return make_float2(f16_to_f32((u16)(v[0].x & 0xFFFF)), f16_to_f32((u16)(v[0].x >> 16)));
    }
    // `x`: the row's 256 activations of this block, `sr`: its 16 activation sums.
    __device__ __forceinline__ int2 sums(const i8* x, const i16* sr) const {
        // scale_min_k4 for all eight sub-blocks at once: bytes of sc03/mn03 (j < 4), sc47/mn47.
        u32 sc[2], mn[2];
        q4k_scales_mins(v[0].y, v[0].z, v[0].w, sc, mn);
        const u32 sc03 = sc[0], sc47 = sc[1], mn03 = mn[0], mn47 = mn[1];
        const int4* x4 = (const int4*)x;
        int is = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint4 wa = v[1 + 2 * j], wb = v[2 + 2 * j];
            const int4 xl0 = x4[4 * j], xl1 = x4[4 * j + 1];
            const int4 xh0 = x4[4 * j + 2], xh1 = x4[4 * j + 3];
            int lo = 0, hi = 0;
            lo = __dp4a((int)(wa.x & GV_M4), xl0.x, lo);
            lo = __dp4a((int)(wa.y & GV_M4), xl0.y, lo);
            lo = __dp4a((int)(wa.z & GV_M4), xl0.z, lo);
            lo = __dp4a((int)(wa.w & GV_M4), xl0.w, lo);
            lo = __dp4a((int)(wb.x & GV_M4), xl1.x, lo);
            lo = __dp4a((int)(wb.y & GV_M4), xl1.y, lo);
            lo = __dp4a((int)(wb.z & GV_M4), xl1.z, lo);
            lo = __dp4a((int)(wb.w & GV_M4), xl1.w, lo);
            hi = __dp4a((int)((wa.x >> 4) & GV_M4), xh0.x, hi);
            hi = __dp4a((int)((wa.y >> 4) & GV_M4), xh0.y, hi);
            hi = __dp4a((int)((wa.z >> 4) & GV_M4), xh0.z, hi);
            hi = __dp4a((int)((wa.w >> 4) & GV_M4), xh0.w, hi);
            hi = __dp4a((int)((wb.x >> 4) & GV_M4), xh1.x, hi);
            hi = __dp4a((int)((wb.y >> 4) & GV_M4), xh1.y, hi);
            hi = __dp4a((int)((wb.z >> 4) & GV_M4), xh1.z, hi);
            hi = __dp4a((int)((wb.w >> 4) & GV_M4), xh1.w, hi);
            const u32 sc = j < 2 ? sc03 : sc47;
            is += gv_byte(sc, (2 * j) % 4) * lo + gv_byte(sc, (2 * j + 1) % 4) * hi;
        }
        // msum = sum_g m_{g/2} * sr[g]: sub-block s holds sums 2s and 2s + 1.
        int r[16];
        load_sums(sr, r);
        int ms = 0;
#pragma unroll
        for (int s = 0; s < 8; s++) ms += gv_byte(s < 4 ? mn03 : mn47, s % 4) * (r[2 * s] + r[2 * s + 1]);
        return make_int2(is, ms);
    }
};

// Q6_K: words 0..7 = ql, 8..11 = qh, 12 = the 16 signed group scales; then the tile's 32
// columns' d (f16). Element 128n + 32u + 16hf + 4i + c (group 8n + 2u + hf) is (nibble
// (u >= 2) of byte c of ql word 4n + 2(u & 1) + hf, u32 i) | ((qh word 8 + 2n + hf, u32 i, byte
// c) >> 2u & 3) << 4, minus 32 (taken out through the activation sums, as the CPU does).
struct GvQ6K {
    static const int TB = 13 * 512 + 64;
    static const int SHAPE = 0;
    uint4 v[13];
    u16 d16;
    __device__ __forceinline__ void load(const u8* tb, int lane) {
#pragma unroll
        for (int i = 0; i < 13; i++) v[i] = *(const uint4*)(tb + i * 512 + lane * 16);
        d16 = *(const u16*)(tb + 13 * 512 + 2 * lane);
    }
    __device__ __forceinline__ float2 factors() const {
        return make_float2(f16_to_f32(d16), 0.0f);
    }
    __device__ __forceinline__ int2 sums(const i8* x, const i16* sr) const {
        const int4* x4 = (const int4*)x;
        const u32 scw[4] = {v[12].x, v[12].y, v[12].z, v[12].w};
        int is = 0;
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const uint4 ql = v[4 * n + 2 * (u & 1) + hf], qh = v[8 + 2 * n + hf];
                    const int sh = u >= 2 ? 4 : 0;
                    const int4 xv = x4[(128 * n + 32 * u + 16 * hf) / 16];
                    int dot = 0;
                    dot = __dp4a((int)(((ql.x >> sh) & GV_M4) | (((qh.x >> (2 * u)) & 0x03030303u) << 4)), xv.x, dot);
                    dot = __dp4a((int)(((ql.y >> sh) & GV_M4) | (((qh.y >> (2 * u)) & 0x03030303u) << 4)), xv.y, dot);
                    dot = __dp4a((int)(((ql.z >> sh) & GV_M4) | (((qh.z >> (2 * u)) & 0x03030303u) << 4)), xv.z, dot);
                    dot = __dp4a((int)(((ql.w >> sh) & GV_M4) | (((qh.w >> (2 * u)) & 0x03030303u) << 4)), xv.w, dot);
                    const int g = 8 * n + 2 * u + hf;
                    is += (int)(i8)gv_byte(scw[g / 4], g % 4) * dot;
                }
        int r[16];
        load_sums(sr, r);
        int corr = 0;
#pragma unroll
        for (int g = 0; g < 16; g++) corr += (int)(i8)gv_byte(scw[g / 4], g % 4) * r[g];
        return make_int2(is - 32 * corr, 0);
    }
};

// Shared memory (`GvCfg::smem` in gemv.rs must agree): per block of k, R rows x 32 columns of
// (isum, msum), then 32 columns of (d, dmin); then the R activation rows staged once for all
// warps: int8 values, sums of 16, scales.
template <class D, int R, int W, bool PF>
__device__ __forceinline__ void matmul_gv(int tile, const u8* w, int n, int k, const i8* xq,
                                          const float* xd, const i16* xs, int rows, float* out) {
    extern __shared__ int2 gv_smem[];
    const int nb = k / 256, nsr = k / 16;
    const int lane = threadIdx.x % 32, wp = threadIdx.x / 32;
    const u8* wt = w + (size_t)tile * nb * D::TB;
    int2* s_rec = gv_smem;                                   // [nb][R][32]
    float2* s_f = (float2*)(gv_smem + (size_t)nb * R * 32);  // [nb][32]
    i8* s_x = (i8*)(s_f + (size_t)nb * 32);                  // [R][k]
    i16* s_s = (i16*)(s_x + (size_t)R * k);                  // [R][k / 16]
    float* s_d = (float*)(s_s + (size_t)R * nsr);            // [R][nb]
    D cur, nxt;
    // The weights are constant: before waiting for the kernel that writes the activations
    // (`pdl_enter`), the warp's first block is loaded and its other blocks are fetched into L2
    // (lane l: lines l, l + 32, ... of each), so that the memory works while that kernel ends.
    if (wp < nb) cur.load(wt + (size_t)wp * D::TB, lane);
    for (int b = wp + W; b < nb; b += W) {
        const u8* tb = wt + (size_t)b * D::TB;
        for (int line = lane; line * 128 < D::TB; line += 32)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(tb + line * 128));
    }
    pdl_enter();
    // Stage the activations while the first weights are on their way (rows past `rows` are
    // never read).
    for (int i = threadIdx.x; i < rows * k / 16; i += 32 * W)
        ((uint4*)s_x)[i] = ((const uint4*)xq)[i];
    for (int i = threadIdx.x; i < rows * nsr / 8; i += 32 * W)
        ((uint4*)s_s)[i] = ((const uint4*)xs)[i];
    for (int i = threadIdx.x; i < rows * nb; i += 32 * W) s_d[i] = xd[i];
    __syncthreads();
    for (int b = wp; b < nb; b += W) {
        if (PF && b + W < nb) nxt.load(wt + (size_t)(b + W) * D::TB, lane);
        s_f[b * 32 + lane] = cur.factors();
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r < rows)
                s_rec[(b * R + r) * 32 + lane] =
                    cur.sums(s_x + (size_t)r * k + (size_t)b * 256, s_s + (size_t)r * nsr + 16 * b);
        }
        if (PF) {
            cur = nxt;
        } else if (b + W < nb) {
            cur.load(wt + (size_t)(b + W) * D::TB, lane);
        }
    }
    __syncthreads();
    const int r = threadIdx.x / 32, col = tile * 32 + lane;
    if (r < R && r < rows && col < n) {
        float acc = 0.0f;
#pragma unroll 4
        for (int b = 0; b < nb; b++) {
            const int2 rec = s_rec[(b * R + r) * 32 + lane];
            const float2 f = s_f[b * 32 + lane];
            acc = block_step(acc, D::SHAPE, f.x, f.y, s_d[r * nb + b], rec.x, rec.y);
        }
        out[(size_t)r * n + col] = acc;
    }
}

// name_R_W{p,n} (W warps, up to R rows, with or without the next block's prefetch), launched
// with a grid of n / 32 blocks of 32 W threads (`gemv::GvCfg`).
#define GV_KERNEL(name, D, R, W, PF, P)                                                        \
    extern "C" __global__ void __launch_bounds__(32 * W)                                       \
        name##_##R##_##W##P(const u8* w, int n, int k, const i8* xq, const float* xd,          \
                            const i16* xs, int rows, float* out) {                             \
        matmul_gv<D, R, W, PF>(blockIdx.x, w, n, k, xq, xd, xs, rows, out);                    \
    }
GV_KERNEL(gv_q4k, GvQ4K, 1, 8, true, p)
GV_KERNEL(gv_q4k, GvQ4K, 1, 4, true, p)
GV_KERNEL(gv_q4k, GvQ4K, 2, 8, true, p)
GV_KERNEL(gv_q4k, GvQ4K, 4, 8, true, p)
GV_KERNEL(gv_q6k, GvQ6K, 1, 8, true, p)
GV_KERNEL(gv_q6k, GvQ6K, 1, 16, true, p)
GV_KERNEL(gv_q6k, GvQ6K, 2, 8, false, n)
GV_KERNEL(gv_q6k, GvQ6K, 4, 8, false, n)

// Two matrices reading the same rows in one launch (a layer's q|k in Q4_K and v in Q6_K): the
// first n1 / 32 blocks take matrix 1, the rest matrix 2, each exactly as alone.
#define GV_PAIR(name, D1, PF1, D2, PF2, R, W)                                                 \
    extern "C" __global__ void __launch_bounds__(32 * W)                                       \
        name##_##R(const u8* w1, int n1, float* out1, const u8* w2, int n2, float* out2,       \
                   int k, const i8* xq, const float* xd, const i16* xs, int rows) {            \
        const int t1 = (n1 + 31) / 32;                                                         \
        if ((int)blockIdx.x < t1)                                                              \
            matmul_gv<D1, R, W, PF1>(blockIdx.x, w1, n1, k, xq, xd, xs, rows, out1);           \
        else                                                                                   \
            matmul_gv<D2, R, W, PF2>(blockIdx.x - t1, w2, n2, k, xq, xd, xs, rows, out2);      \
    }
GV_PAIR(gvp_q4k_q6k, GvQ4K, true, GvQ6K, true, 1, 8)
GV_PAIR(gvp_q4k_q6k, GvQ4K, true, GvQ6K, false, 2, 8)
