// Quantized matmuls on int8 tensor cores (mma.sync), the same bits as `matmul_q`, `matmul_t`
// and the CPU. A weight block's integer sums against an activation block are exact whatever
// unit computes them: the tensor core multiplies 16 weight columns (the A operand, one column
// per A row) by 8 activation rows (the B operand) over one group of 32 (Q4_K) or 16 (Q6_K)
// values, the group's scale multiplies the int32 result, and the block's float step
// (`block_step`) then runs in ascending block order for each (row, column), as on the CPU.
//
// Weights are interleaved by 32 columns (`ops::interleave`): for
// tile `c / 32`, block `b`, 16-byte word `w`, the word of the tile's 32 columns side by side,
// so that the 32 lanes of a warp read 128 contiguous bytes per load. The forms that read the
// activations from global memory read them in `frag_offset`'s order (actq.cu), where a warp's
// load of a sub-block of 8 rows is 256 contiguous bytes: in each row's own order it touched 8
// cache lines, and those loads kept L1 72% busy on 16 rows of 7B's gate|up (Nsight Compute).
//
// Fragments of mma.m16n8k32 (lane = 4 * gid + t): A a0 = A[gid][4t..], a1 = A[gid + 8][4t..],
// a2 = A[gid][16 + 4t..], a3 = A[gid + 8][16 + 4t..]; B b0 = B[4t..][gid], b1 = B[16 + 4t..][gid];
// C c0 = C[gid][2t], c1 = C[gid][2t + 1], c2 = C[gid + 8][2t], c3 = C[gid + 8][2t + 1].
// m16n8k16 is the same with a0, a1 and b0 only. So a thread holds, per 8-row tile, the sums of
// columns gid and gid + 8 (its A rows) for rows 2t and 2t + 1.
//
// A thread block covers 16 columns. S warps ("slots") split the blocks of k (warp s takes
// blocks s, s + S, ...) and hand their integer sums to the threads that advance the float
// chains, through shared memory; with S = 1 a warp keeps its chains in registers, and RW warps
// take RW tiles of 8 * NT rows. Which configuration runs never changes a bit.

__device__ __forceinline__ void mma_k32(int (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                        u32 b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_k16(int (&c)[4], u32 a0, u32 a1, u32 b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

// Weight loads. With NA ("no allocate") they bypass L1: the one-warp kernels stream each weight
// byte through once, and L1 is better kept for the activations every warp reads (H200, verify
// rounds after 512 tokens, 7B shape: 8 rows 3.38 -> 3.15 ms). Kernels whose warps share weights
// through L1 (two warps on the same columns) keep the plain loads.
template <bool NA>
__device__ __forceinline__ uint4 ldw4(const u8* p) {
    if (!NA) return *(const uint4*)p;
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}
template <bool NA>
__device__ __forceinline__ uint2 ldw2(const u8* p) {
    if (!NA) return *(const uint2*)p;
    uint2 v;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
template <bool NA>
__device__ __forceinline__ u32 ldw1(const u8* p) {
    if (!NA) return *(const u32*)p;
    u32 v;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// The mma's k positions are any order of a group's values as long as A and B agree: lane t
// takes values [8t, 8t + 8) of a group of 32 (a0/b0 the first four, a2/b1 the next four), so
// that its weight and activation bytes are contiguous (8-byte loads).

// Q4_K's eight 6-bit scales and mins (the CPU's `scales_mins_k4`) unpacked to a byte each, from
// the block's scale bytes 0..3 (`a0`), 4..7 (`a1`) and 8..11 (`a2`): sc[h] / mn[h] hold
// sub-blocks 4h .. 4h + 3, byte by byte.
__device__ __forceinline__ void q4k_scales_mins(u32 a0, u32 a1, u32 a2, u32 (&sc)[2],
                                                u32 (&mn)[2]) {
    sc[0] = a0 & 0x3F3F3F3Fu;
    mn[0] = a1 & 0x3F3F3F3Fu;
    sc[1] = (a2 & 0x0F0F0F0Fu) | (((a0 >> 6) & 0x03030303u) << 4);
    mn[1] = ((a2 >> 4) & 0x0F0F0F0Fu) | (((a1 >> 6) & 0x03030303u) << 4);
}

// Q4_K interleaved: word 0 = d, dmin, 12 bytes of 6-bit scales and mins; words 1..8 = qs.
// Sub-block s = 2j + h is nibble h of qs[32j .. 32j + 32): lane t's values 8t .. 8t + 8 are
// bytes 8(t % 2) .. of word 1 + 2j + t / 2.
struct MmaQ4K {
    static const int TB = 9 * 512;  // bytes per (tile, block)
    static const int XPAD = 288;    // staged activation row stride: conflict-free 8-byte loads
    static const int SHAPE = 1;
    uint2 q[2][4];
    uint4 w0[2];
    // The block's factors: the 6-bit scales and mins unpacked to a byte each (word h holds
    // sub-blocks 4h .. 4h + 3), and the float scales.
    struct F {
        u32 sc[2][2], mn[2][2];
        float d[2], dmin[2];
        __device__ __forceinline__ int scale(int ci, int s) const {
            return (int)__byte_perm(sc[ci][s / 4], 0, 0x4440 + s % 4);
        }
        // Sub-block s's min in every byte (the A operand of the min sums).
        __device__ __forceinline__ u32 mins(int ci, int s) const {
            return __byte_perm(mn[ci][s / 4], 0, (s % 4) * 0x1111);
        }
    };

    template <bool NA = false>
    __device__ __forceinline__ void load(const u8* tb, int ca, int t) {
#pragma unroll
        for (int ci = 0; ci < 2; ci++) {
            const int c = ca + 8 * ci;
            w0[ci] = ldw4<NA>(tb + c * 16);
#pragma unroll
            for (int j = 0; j < 4; j++)
                q[ci][j] = ldw2<NA>(tb + (1 + 2 * j + t / 2) * 512 + c * 16 + 8 * (t % 2));
        }
    }
    __device__ __forceinline__ F decode() const {
        F f;
#pragma unroll
        for (int ci = 0; ci < 2; ci++) {
            const uint4& v = w0[ci];  // d, dmin, then the 12 scale bytes
            q4k_scales_mins(v.y, v.z, v.w, f.sc[ci], f.mn[ci]);
            f.d[ci] = f16_to_f32_arith((u16)(v.x & 0xFFFF));
            f.dmin[ci] = f16_to_f32_arith((u16)(v.x >> 16));
        }
        return f;
    }
    // Sums of NT 8-row tiles: `xg[a]` tile a's row gid's values of this block (past the rows,
    // any row's: those sums are never stored), sub-block s at `xg[a] + SB s` (SB = 32: a row's
    // values in order; 256: `frag_offset`'s order). `is` = sum_s sc_s * (the mma of sub-block s);
    // `ms` = sum_s m_s * (sum of the row's values of sub-block s), the CPU's integer from its
    // activation sums. With RC, from the row's record at `xr[a]` (`frag_rec_offset`): two
    // m16n8k16 mmas of the mins against the sums' 64s and remainders, 64 P_h + P_l. Without,
    // the tensor core accumulates each sub-block's values with A = m_s in every byte.
    template <int NT, int SB, bool RC>
    __device__ __forceinline__ void ints(const F& f, const i8* const (&xg)[NT],
                                         const i8* const (&xr)[NT], int t, int (&is)[NT][4],
                                         int (&ms)[NT][4]) const {
#pragma unroll
        for (int a = 0; a < NT; a++)
#pragma unroll
            for (int p = 0; p < 4; p++) is[a][p] = ms[a][p] = 0;
        u32 rw[NT];  // the records' word t, requested before the sub-blocks' mmas
#pragma unroll
        for (int a = 0; a < NT; a++) rw[a] = RC ? *(const u32*)(xr[a] + 4 * t) : 0u;
#pragma unroll
        for (int s = 0; s < 8; s++) {
            const int j = s / 2, sh = 4 * (s % 2);
            const u32 a0 = (q[0][j].x >> sh) & 0x0F0F0F0Fu, a1 = (q[1][j].x >> sh) & 0x0F0F0F0Fu;
            const u32 a2 = (q[0][j].y >> sh) & 0x0F0F0F0Fu, a3 = (q[1][j].y >> sh) & 0x0F0F0F0Fu;
            const int sc0 = f.scale(0, s), sc1 = f.scale(1, s);
#pragma unroll
            for (int a = 0; a < NT; a++) {
                const uint2 xb = *(const uint2*)(xg[a] + SB * s + 8 * t);
                int c[4] = {0, 0, 0, 0};
                mma_k32(c, a0, a1, a2, a3, xb.x, xb.y);
                is[a][0] += sc0 * c[0];
                is[a][1] += sc0 * c[1];
                is[a][2] += sc1 * c[2];
                is[a][3] += sc1 * c[3];
                if (!RC) {
                    const u32 m0 = f.mins(0, s), m1 = f.mins(1, s);
                    mma_k32(ms[a], m0, m1, m0, m1, xb.x, xb.y);
                }
            }
        }
        if (RC) {
            // k positions 0..7: m_s against h_s; 8..15: m_s against l_s. Lane t holds k 4t ..
            // 4t + 3: mins 4 (t % 2) .. of its columns, and word t of the record, kept in the
            // first mma for t < 2 and in the second for t >= 2.
            const bool hi = t & 1;
            const u32 m0 = hi ? f.mn[0][1] : f.mn[0][0], m1 = hi ? f.mn[1][1] : f.mn[1][0];
#pragma unroll
            for (int a = 0; a < NT; a++) {
                const u32 r = rw[a];
                mma_k16(ms[a], m0, m1, t < 2 ? r : 0u);  // P_h
#pragma unroll
                for (int p = 0; p < 4; p++) ms[a][p] *= 64;
                mma_k16(ms[a], m0, m1, t < 2 ? 0u : r);  // + P_l
            }
        }
    }
};

// Q6_K interleaved: words 0..7 = ql, 8..11 = qh, 12 = the 16 signed scales; then the 32
// columns' d as f16 (64 bytes). Group g (16 values) = 8n + 2u + hf: element 128n + 32u + l,
// l = 16 hf + i, is (nibble (u >= 2) of ql word 4n + 2(u & 1) + hf) | ((qh word 8 + 2n + hf
// >> 2u) & 3) << 4, minus 32 (subtracted before the mma, see `ints`). One
// m16n8k16 mma per group (its own scale); lane t takes the group's values 4t .. 4t + 4.
struct MmaQ6K {
    static const int TB = 13 * 512 + 64;
    static const int XPAD = 272;  // staged activation row stride: conflict-free 4-byte loads
    static const int SHAPE = 0;
    u32 ql[2][8], qh[2][4];
    uint4 sc[2];
    u16 d16[2];
    struct F {
        uint4 s[2];  // the 16 signed scales of each column
        float d[2], dmin[2];
        // Scale g, sign-extended by one byte permute (selector 8 + b: byte b's sign bit; the
        // `__byte_perm` intrinsic keeps only the low 3 bits of each selector).
        __device__ __forceinline__ int sc(int ci, int g) const {
            const int b = g % 4;
            const u32 w = g < 4 ? s[ci].x : g < 8 ? s[ci].y : g < 12 ? s[ci].z : s[ci].w;
            int r;
            asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(w), "r"(b | (0x888 + 0x111 * b) << 4));
            return r;
        }
    };

    template <bool NA = false>
    __device__ __forceinline__ void load(const u8* tb, int ca, int t) {
#pragma unroll
        for (int ci = 0; ci < 2; ci++) {
            const int c = ca + 8 * ci;
#pragma unroll
            for (int wd = 0; wd < 8; wd++) ql[ci][wd] = ldw1<NA>(tb + wd * 512 + c * 16 + 4 * t);
#pragma unroll
            for (int wd = 0; wd < 4; wd++) qh[ci][wd] = ldw1<NA>(tb + (8 + wd) * 512 + c * 16 + 4 * t);
            sc[ci] = ldw4<NA>(tb + 12 * 512 + c * 16);
            d16[ci] = *(const u16*)(tb + 13 * 512 + 2 * c);
        }
    }
    __device__ __forceinline__ F decode() const {
        F f;
#pragma unroll
        for (int ci = 0; ci < 2; ci++) {
            f.s[ci] = sc[ci];
            f.d[ci] = f16_to_f32_arith(d16[ci]);
            f.dmin[ci] = 0.0f;
        }
        return f;
    }
    // `is` = sum_g sc_g * sum_i (q_i - 32) x_i. The tensor core takes 4 (q - 32) as signed
    // bytes: q - 32 is q with bit 5 flipped, read as a 6-bit two's complement number, so in bits
    // 2..7 of a byte it reads as 4 (q - 32); the flips are done once per block on qh (its
    // fields' high bits), and the sums divided by 4 at the end (exact: each is a multiple of 4,
    // and none exceeds 16 groups x 128 (scale) x 16 values x 128 x 127 = 533 M, within an
    // int). This is the CPU's is - 32 * sum_g sc_g * sr[g]. Group g is half g % 2 of sub-block
    // g / 2 (`SB` as for Q4_K). (No min sums: `xr` and RC are unused.)
    template <int NT, int SB, bool RC>
    __device__ __forceinline__ void ints(const F& f, const i8* const (&xg)[NT],
                                         const i8* const (&xr)[NT], int t, int (&is)[NT][4],
                                         int (&ms)[NT][4]) const {
#pragma unroll
        for (int a = 0; a < NT; a++)
#pragma unroll
            for (int p = 0; p < 4; p++) is[a][p] = ms[a][p] = 0;
        u32 hx[2][4];
#pragma unroll
        for (int ci = 0; ci < 2; ci++)
#pragma unroll
            for (int wd = 0; wd < 4; wd++) hx[ci][wd] = qh[ci][wd] ^ 0xAAAAAAAAu;
#pragma unroll
        for (int g = 0; g < 16; g++) {
            const int n = g / 8, u = (g / 2) % 4, hf = g % 2;
            const int wq = 4 * n + 2 * (u & 1) + hf, wh = 2 * n + hf;
            const u32 a0 = x4(ql[0][wq], hx[0][wh], u), a1 = x4(ql[1][wq], hx[1][wh], u);
            const int sc0 = f.sc(0, g), sc1 = f.sc(1, g);
#pragma unroll
            for (int a = 0; a < NT; a++) {
                const u32 b0 = *(const u32*)(xg[a] + SB * (g / 2) + 16 * (g % 2) + 4 * t);
                int c[4] = {0, 0, 0, 0};
                mma_k16(c, a0, a1, b0);
                is[a][0] += sc0 * c[0];
                is[a][1] += sc0 * c[1];
                is[a][2] += sc1 * c[2];
                is[a][3] += sc1 * c[3];
            }
        }
#pragma unroll
        for (int a = 0; a < NT; a++)
#pragma unroll
            for (int p = 0; p < 4; p++) is[a][p] >>= 2;
    }
    // Four values 4 (q - 32) of field u: ql's nibble (the high one for u >= 2) in bits 2..5,
    // field u of the flipped qh in bits 6..7.
    static __device__ __forceinline__ u32 x4(u32 ql, u32 hx, int u) {
        const u32 lo = (u >= 2 ? ql >> 2 : ql << 2) & 0x3C3C3C3Cu;
        const u32 hi = u == 3 ? hx : hx << (6 - 2 * u);
        return lo | (hi & 0xC0C0C0C0u);
    }
};

#define MMA_PAD 20  // row stride (ints) of the slot exchange: conflict-free writes

template <class D, int NT, int S, int RW>
__device__ __forceinline__ void matmul_mma(const u8* w, int n, int k, const i8* xq,
                                           const float* xd, const i16* xs, int rows, float* out) {
    const int R8 = NT * 8;
    const int nb = k / 256;
    const int lane = threadIdx.x % 32, wp = threadIdx.x / 32;
    const int gid = lane / 4, t = lane % 4;
    const int slot = wp % S, rw = wp / S;
    const int col0 = blockIdx.y * 16;  // this thread block's first column
    const int tile = col0 / 32, ca = col0 % 32 + gid;
    const int row0 = (blockIdx.x * RW + rw) * R8;
    const u8* wt = w + (size_t)tile * nb * D::TB;

    // S > 1: the slots' integer sums and factors, and the chains of CP (row, column) pairs per
    // thread (pair p = threadIdx.x + i * 32 S: column p % 16, row p / 16 of the tile).
    const int SS = S > 1 ? S : 1, SR = S > 1 ? R8 : 1;
    __shared__ int s_is[SS][SR][MMA_PAD];
    __shared__ int s_ms[SS][SR][MMA_PAD];
    __shared__ float s_d[SS][16];
    __shared__ float s_dm[SS][16];
    const int CP = S > 1 ? (16 * R8 + 32 * S - 1) / (32 * S) : 1;
    float chain[CP];
#pragma unroll
    for (int i = 0; i < CP; i++) chain[i] = 0.0f;
    float acc[NT][4];
#pragma unroll
    for (int a = 0; a < NT; a++)
#pragma unroll
        for (int p = 0; p < 4; p++) acc[a][p] = 0.0f;
    // Rows past `rows` read the last row (their sums and chains are never stored), so that no
    // load needs a guard: per tile, row gid's activations and rows 2t, 2t + 1's scales.
    const int last = rows - 1;
    int xrow[NT], drow[NT][2];
#pragma unroll
    for (int a = 0; a < NT; a++) {
        xrow[a] = min(row0 + 8 * a + gid, last);
        drow[a][0] = min(row0 + 8 * a + 2 * t, last) * nb;
        drow[a][1] = min(row0 + 8 * a + 2 * t + 1, last) * nb;
    }

    // One round: block g + slot of `cu`, the next one's weights loaded into `nx` meanwhile.
    // (Alternating the two buffers instead of copying `nx` into `cu` saves the copies but, on
    // the H200, costs more in registers than it saves here; the staged form gains from it.)
    constexpr bool NA = S == 1 && RW == 1;
    auto one_round = [&](const D& cu, D& nx, int g) {
        const int b = g + slot;
        if (b + S < nb) nx.template load<NA>(wt + (size_t)(b + S) * D::TB, ca, t);
        if (b < nb) {
            const typename D::F f = cu.decode();
            // `xq` in `frag_offset`'s order.
            const i8 *xg[NT], *xr[NT];
#pragma unroll
            for (int a = 0; a < NT; a++) {
                xg[a] = xq + frag_offset(xrow[a], b, nb);
                xr[a] = xq + frag_rec_offset(xrow[a], b, nb);
            }
            int is[NT][4], ms[NT][4];
            cu.template ints<NT, 256, true>(f, xg, xr, t, is, ms);
#pragma unroll
            for (int a = 0; a < NT; a++) {
                if (S == 1) {
                    const float dx[2] = {xd[drow[a][0] + b], xd[drow[a][1] + b]};
#pragma unroll
                    for (int p = 0; p < 4; p++)
                        acc[a][p] = block_step(acc[a][p], D::SHAPE, f.d[p / 2], f.dmin[p / 2],
                                               dx[p & 1], is[a][p], ms[a][p]);
                } else {
#pragma unroll
                    for (int p = 0; p < 4; p++) {
                        const int rl = 8 * a + 2 * t + (p & 1), cl = gid + 8 * (p / 2);
                        s_is[slot % SS][rl % SR][cl] = is[a][p];
                        s_ms[slot % SS][rl % SR][cl] = ms[a][p];
                    }
                }
            }
            if (S > 1 && t == 0) {
                s_d[slot % SS][gid] = f.d[0];
                s_d[slot % SS][gid + 8] = f.d[1];
                s_dm[slot % SS][gid] = f.dmin[0];
                s_dm[slot % SS][gid + 8] = f.dmin[1];
            }
        }
        if (S > 1) {
            __syncthreads();
#pragma unroll
            for (int i = 0; i < CP; i++) {
                const int p = threadIdx.x + i * 32 * S, cl = p % 16, rl = p / 16;
                const int row = row0 + rl;
                if (rl < R8 && row < rows) {
                    for (int j = 0; j < S && g + j < nb; j++) {
                        chain[i] = block_step(chain[i], D::SHAPE, s_d[j % SS][cl],
                                              s_dm[j % SS][cl], xd[(size_t)row * nb + g + j],
                                              s_is[j % SS][rl % SR][cl], s_ms[j % SS][rl % SR][cl]);
                    }
                }
            }
            __syncthreads();
        }
    };
    D buf0, buf1;
    // The weights are constant: the first block's are requested before the kernel waits for
    // the one that writes its activations.
    if (slot < nb) buf0.template load<NA>(wt + (size_t)slot * D::TB, ca, t);
    pdl_enter();
    for (int g = 0; g < nb; g += S) {
        one_round(buf0, buf1, g);
        buf0 = buf1;
    }
    if (S > 1) {
#pragma unroll
        for (int i = 0; i < CP; i++) {
            const int p = threadIdx.x + i * 32 * S, cl = p % 16, rl = p / 16;
            const int row = row0 + rl, col = col0 + cl;
            if (rl < R8 && row < rows && col < n) out[(size_t)row * n + col] = chain[i];
        }
    } else {
#pragma unroll
        for (int a = 0; a < NT; a++)
#pragma unroll
            for (int p = 0; p < 4; p++) {
                const int row = row0 + 8 * a + 2 * t + (p & 1), col = col0 + gid + 8 * (p / 2);
                if (row < rows && col < n) out[(size_t)row * n + col] = acc[a][p];
            }
    }
}

// Staged form for many rows: a thread block of CW x RW warps covers 16 CW columns and 8 NT RW
// rows; warp (cw, rw) takes 16 columns and 8 NT rows. Each block of k's activations (int8
// values and scale) is staged once in shared memory for all the block's warps, loaded into
// registers during the previous block's mmas; each warp's weights are prefetched as above.
// The per-(row, column) chains are the S = 1 chains, in registers.
template <class D, int NT, int CW, int RW>
__device__ __forceinline__ void matmul_mma_staged(const u8* w, int n, int k, const i8* xq,
                                                  const float* xd, const i16* xs, int rows,
                                                  float* out) {
    constexpr int RB = 8 * NT * RW;                  // rows per thread block
    constexpr int TH = 32 * CW * RW;
    constexpr int XV = RB * 16 / TH;                 // 16-byte activation loads per thread
    constexpr int DV = (RB + TH - 1) / TH;          // scales per thread
    static_assert(RB * 16 % TH == 0, "staging split");
    __shared__ __align__(16) i8 s_x[RB * D::XPAD];
    __shared__ float s_d[RB];
    const int nb = k / 256;
    const int lane = threadIdx.x % 32, wp = threadIdx.x / 32;
    const int gid = lane / 4, t = lane % 4;
    const int cw = wp % CW, rw = wp / CW;
    const int col0 = (blockIdx.y * CW + cw) * 16;
    const bool live = col0 < n;
    const int tile = col0 / 32, ca = col0 % 32 + gid;
    const int rb0 = blockIdx.x * RB;
    const u8* wt = w + (size_t)tile * nb * D::TB;

    float acc[NT][4];
#pragma unroll
    for (int a = 0; a < NT; a++)
#pragma unroll
        for (int p = 0; p < 4; p++) acc[a][p] = 0.0f;

    // Staging: thread i loads 16-byte pieces i, i + TH, ... of the block's RB x 256 values,
    // and of its RB scales.
    uint4 px[XV];
    float pd[DV];
    auto fetch = [&](int b) {
#pragma unroll
        for (int j = 0; j < XV; j++) {
            const int i = threadIdx.x + j * TH, r = i / 16, c = i % 16;
            px[j] = rb0 + r < rows
                        ? *(const uint4*)(xq + (size_t)(rb0 + r) * k + (size_t)b * 256 + 16 * c)
                        : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < DV; j++) {
            const int r = threadIdx.x + j * TH;
            pd[j] = r < RB && rb0 + r < rows ? xd[(size_t)(rb0 + r) * nb + b] : 0.0f;
        }
    };
    // One block of k: `cu` holds its weights, `nx` receives the next block's (the loop below
    // alternates the two, so no registers are copied between blocks).
    auto step = [&](const D& cu, D& nx, int b) {
        __syncthreads();  // every warp is done with block b - 1's staged activations
#pragma unroll
        for (int j = 0; j < XV; j++) {
            const int i = threadIdx.x + j * TH, r = i / 16, c = i % 16;
            *(uint4*)(s_x + r * D::XPAD + 16 * c) = px[j];
        }
#pragma unroll
        for (int j = 0; j < DV; j++) {
            const int r = threadIdx.x + j * TH;
            if (r < RB) s_d[r] = pd[j];
        }
        __syncthreads();
        if (b + 1 < nb) fetch(b + 1);
        if (!live) return;
        if (b + 1 < nb) nx.load(wt + (size_t)(b + 1) * D::TB, ca, t);
        const typename D::F f = cu.decode();
        const i8* xg[NT];
#pragma unroll
        for (int a = 0; a < NT; a++) xg[a] = s_x + (rw * 8 * NT + 8 * a + gid) * D::XPAD;
        int is[NT][4], ms[NT][4];
        cu.template ints<NT, 32, false>(f, xg, xg, t, is, ms);
#pragma unroll
        for (int a = 0; a < NT; a++) {
            const int l0 = rw * 8 * NT + 8 * a + 2 * t;
#pragma unroll
            for (int p = 0; p < 4; p++) {
                const int l = l0 + (p & 1);
                acc[a][p] = block_step(acc[a][p], D::SHAPE, f.d[p / 2], f.dmin[p / 2], s_d[l],
                                       is[a][p], ms[a][p]);
            }
        }
    };
    D buf0, buf1;
    if (live) buf0.load(wt, ca, t);
    pdl_enter();
    fetch(0);
    for (int b = 0; b < nb; b += 2) {
        step(buf0, buf1, b);
        if (b + 1 < nb) step(buf1, buf0, b + 1);
    }
    if (!live) return;
#pragma unroll
    for (int a = 0; a < NT; a++)
#pragma unroll
        for (int p = 0; p < 4; p++) {
            const int row = rb0 + rw * 8 * NT + 8 * a + 2 * t + (p & 1);
            const int col = col0 + gid + 8 * (p / 2);
            if (row < rows && col < n) out[(size_t)row * n + col] = acc[a][p];
        }
}

// Kernels per type and configuration: name_NT_S_RW, launched with 32 * S * RW threads and a
// grid of (rows / (8 NT RW), n / 16). `xs` (the activation sums) is the quantized-matmul
// launchers' common argument; these kernels do not read it.
#define MMA_KERNEL_LB(name, D, NT, S, RW, LB)                                                 \
    extern "C" __global__ void LB name##_##NT##_##S##_##RW(const u8* w, int n, int k,          \
                                                           const i8* xq, const float* xd,      \
                                                           const i16* xs, int rows,            \
                                                           float* out) {                       \
        matmul_mma<D, NT, S, RW>(w, n, k, xq, xd, xs, rows, out);                              \
    }
#define MMA_KERNEL(name, D, NT, S, RW) \
    MMA_KERNEL_LB(name, D, NT, S, RW, __launch_bounds__(32 * S * RW))
// The one-warp kernel of one 8-row tile (1_1_1) is asked to fit 18 blocks per multiprocessor:
// Nsight Compute found it at 102 registers but limited to 16 blocks, so 7B's gate|up (2,368
// warps of 16 columns) took 1.12 waves of an H200's 132 multiprocessors; at 18 it fits one.
// The other kernels keep ptxas's own choice: an explicit minimum of one block changed their
// registers and cost prefill 7-11% on the H200.
#ifndef MMA_MINB1
#define MMA_MINB1 18
#endif
// name_NT_S_RW_bB: compiled to fit B blocks per multiprocessor (`mma::MmaCfg::bounded`).
#define MMA_KERNEL_B(name, D, NT, S, RW, B)                                                     \
    extern "C" __global__ void __launch_bounds__(32 * S * RW, B)                                \
        name##_##NT##_##S##_##RW##_b##B(const u8* w, int n, int k, const i8* xq, const float* xd, \
                                        const i16* xs, int rows, float* out) {                   \
        matmul_mma<D, NT, S, RW>(w, n, k, xq, xd, xs, rows, out);                                \
    }
#define MMA_CONFIGS(name, D)                                          \
    MMA_KERNEL_LB(name, D, 1, 1, 1, __launch_bounds__(32, MMA_MINB1)) \
    MMA_KERNEL(name, D, 2, 1, 1)                                      \
    MMA_KERNEL_B(name, D, 2, 1, 1, 17)                                \
    MMA_KERNEL(name, D, 2, 1, 2)                                      \
    MMA_KERNEL(name, D, 4, 1, 1)                                      \
    MMA_KERNEL(name, D, 1, 16, 1)                                     \
    MMA_KERNEL(name, D, 1, 8, 1)                                      \
    MMA_KERNEL(name, D, 1, 4, 1)                                      \
    MMA_KERNEL(name, D, 2, 16, 1)                                     \
    MMA_KERNEL(name, D, 2, 8, 1)                                      \
    MMA_KERNEL(name, D, 2, 4, 1)                                      \
    MMA_KERNEL(name, D, 4, 4, 1)
// Staged kernels: name_st_NT_CW_RW, 32 * CW * RW threads, a grid of (rows / (8 NT RW),
// n / (16 CW)).
#define MMA_STAGED(name, D, NT, CW, RW)                                                        \
    extern "C" __global__ void __launch_bounds__(32 * CW * RW)                                 \
        name##_st_##NT##_##CW##_##RW(const u8* w, int n, int k, const i8* xq, const float* xd, \
                                     const i16* xs, int rows, float* out) {                    \
        matmul_mma_staged<D, NT, CW, RW>(w, n, k, xq, xd, xs, rows, out);                      \
    }
#define MMA_CONFIGS_ALL(name, D) \
    MMA_CONFIGS(name, D)         \
    MMA_STAGED(name, D, 2, 4, 2)
MMA_CONFIGS_ALL(mma_q4k, MmaQ4K)
MMA_CONFIGS_ALL(mma_q6k, MmaQ6K)
