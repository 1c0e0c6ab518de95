// Few-row tensor-core matmuls (verify rounds of 5-16 rows), Q4_K and Q6_K interleaved: the
// integer sums of `matmul_mma.cu`'s MmaQ4K / MmaQ6K, the CPU's float chain per (row, column) in
// ascending block order, so the same bits as every other matmul kernel.
//
// The forms of `matmul_mma.cu` give each warp all the blocks of k for its 16 columns (or split
// them with two barriers per round). Here, as in the one-row kernels (`matmul_gemv.cu`), the
// warps of a thread block split the blocks of k: H warps cover the block's 16 H columns (one
// 16-column half each) and S slots of them take blocks s, s + S, ...; every warp's weights are
// requested into L2 before the kernel waits for its input, and each warp loads its next block
// while it computes the current one. Per round the S blocks' integer sums go to a double-buffered
// exchange in shared memory (one barrier per round); then the block's threads advance the float
// chains over the round's blocks in order. The exchange costs instructions (Nsight Compute, 16
// rows of 7B's gate|up: 27.9 M against 16.5 M), so this form wins only where the others leave
// the GPU short of warps: matrices of a few thousand columns (`MmaCfg::few_for`). Without ST
// the activations are read in `frag_offset`'s order (actq.cu), as in `matmul_mma`: each warp
// copies the (8-row group, block) pieces its next round reads into its own two buffers in
// shared memory with `cp.async` while it computes the current round, so the round's first mma
// does not wait on the L2.

#define FW_PAD 1  // int2 padding per exchange row

// Dynamic shared memory (`MmaCfg::few_smem` in mma.rs must agree): two buffers of the slots'
// integer sums [S][R8][16 H + FW_PAD] (int2) and factors [S][16 H] (float2); then two buffers
// of the activations: with ST the slots' staged blocks [S][R8][D::XPAD] (int8), without it each
// warp's fragment-order pieces [S H][NT][FRAG_GB].
// `bx`: the thread block's 16 H columns (`blockIdx.x`, or its place in a pair's half).
template <class D, int NT, int S, int H, bool ST>
__device__ __forceinline__ void matmul_mma_few(int bx, const u8* w, int n, int k, const i8* xq,
                                               const float* xd, int rows, float* out) {
    constexpr int R8 = 8 * NT, COLS = 16 * H, TH = 32 * S * H;
    constexpr int CP = (R8 * COLS + TH - 1) / TH;  // chains per thread
    constexpr int RS = R8 * (COLS + FW_PAD);       // int2 per slot's sums
    const int nb = k / 256;
    const int lane = threadIdx.x % 32, wp = threadIdx.x / 32;
    const int gid = lane / 4, t = lane % 4;
    const int half = wp % H, slot = wp / H;
    const int cb = bx * COLS;  // the thread block's first column
    const int col0 = cb + 16 * half;   // this warp's first column
    const int row0 = blockIdx.y * R8;
    const bool live = col0 < n;
    const int tile = col0 / 32, ca = col0 % 32 + gid;
    const u8* wt = w + (size_t)tile * nb * D::TB;

    extern __shared__ __align__(16) int2 fw_smem[];
    int2* s_rec = fw_smem;                                   // [2][S][R8][COLS + FW_PAD]
    float2* s_f = (float2*)(fw_smem + 2 * S * RS);           // [2][S][COLS]
    i8* s_x = (i8*)(s_f + 2 * S * COLS);  // [2][S][R8][XPAD] or [2][S H][NT][FRAG_GB]
    float chain[CP];
#pragma unroll
    for (int i = 0; i < CP; i++) chain[i] = 0.0f;

    // The weights are constant: before waiting for the kernel that writes the activations, the
    // warp's first block is loaded and its later blocks are requested into L2 (the 128-byte
    // lines of its 16 columns: 256 bytes of each 512-byte word, and a Q6_K block's scales).
    D cur, nxt;
    if (live && slot < nb) cur.load(wt + (size_t)slot * D::TB, ca, t);
    if (live) {
        const int ho = (col0 % 32) / 16;
        for (int b = slot + S; b < nb; b += S) {
            const u8* tb = wt + (size_t)b * D::TB;
            for (int line = lane; line * 128 < D::TB; line += 32) {
                const int o = line * 128;
                if (o >= (D::TB / 512) * 512 || (o % 512) / 256 == ho)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(tb + o));
            }
        }
    }
    pdl_enter();
    // Without ST: this warp's NT pieces of block b into buffer `buf`, as one cp.async group
    // (empty where the warp has no block b). The pieces are contiguous in shared memory, piece
    // a read from row group row0 / 8 + a (past the last group, from the last: its sums are
    // never used), so chunk i of 16 bytes comes from `g0` + 16 i, or `g1` + 16 i in piece 1.
    const i8* g0 = xq + (size_t)min(row0 / 8, (rows - 1) / 8) * nb * FRAG_GB;
    const i8* g1 = xq + (size_t)min(row0 / 8 + 1, (rows - 1) / 8) * nb * FRAG_GB - FRAG_GB;
    auto wstage = [&](int b, int buf) {
        if (live && b < nb) {
            constexpr int CHUNKS = NT * FRAG_GB / 16;
            const unsigned dst = (unsigned)__cvta_generic_to_shared(
                s_x + (size_t)(buf * S * H + wp) * NT * FRAG_GB);
            const size_t at = (size_t)b * FRAG_GB;
#pragma unroll
            for (int j = 0; j < (CHUNKS + 31) / 32; j++) {
                const int i = lane + 32 * j;
                if (i < CHUNKS) {
                    const i8* src = (i < FRAG_GB / 16 ? g0 : g1) + at + 16 * i;
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + 16 * i),
                                 "l"(src));
                }
            }
        }
        asm volatile("cp.async.commit_group;");
    };
    if (!ST) wstage(slot, 0);
    // ST: round r's activation blocks (S blocks x R8 rows) are copied into buffer r & 1 with
    // cp.async during round r - 1; rows past `rows` are never read.
    auto stage = [&](int r) {
        i8* dst = s_x + (size_t)(r & 1) * S * R8 * D::XPAD;
        for (int i = threadIdx.x; i < S * R8 * 16; i += TH) {
            const int c = i % 16, rl = (i / 16) % R8, sl = i / (16 * R8);
            const int b = r * S + sl, row = row0 + rl;
            if (b < nb && row < rows) {
                const i8* src = xq + (size_t)row * k + (size_t)b * 256 + 16 * c;
                const unsigned sa = (unsigned)__cvta_generic_to_shared(
                    dst + ((size_t)sl * R8 + rl) * D::XPAD + 16 * c);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(src));
            }
        }
        asm volatile("cp.async.commit_group;");
    };
    if (ST) {
        stage(0);
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
    }
    const int rounds = (nb + S - 1) / S;
    // One round: block r S + slot of `cu`, the next one's weights loaded into `nx` meanwhile.
    auto one_round = [&](const D& cu, D& nx, int r) {
        const int b = r * S + slot, buf = r & 1;
        // Two row tiles: the activation scales of this round's chains are requested before
        // its integer sums (one tile: after, where the registers would cost it a block per
        // multiprocessor).
        constexpr bool XE = NT > 1;
        float xv[CP][S];
#pragma unroll
        for (int i = 0; i < CP; i++) {
            const int rl = (threadIdx.x + i * TH) / COLS, row = row0 + rl;
#pragma unroll
            for (int j = 0; j < S; j++)
                xv[i][j] = XE && rl < R8 && row < rows && r * S + j < nb
                               ? xd[(size_t)row * nb + r * S + j]
                               : 0.0f;
        }
        if (ST && r + 1 < rounds) stage(r + 1);
        if (live && b + S < nb) nx.load(wt + (size_t)(b + S) * D::TB, ca, t);
        if (!ST) {
            wstage(b + S, buf ^ 1);
            asm volatile("cp.async.wait_group 1;" ::: "memory");  // this round's pieces
            __syncwarp();
        }
        if (live && b < nb) {
            const typename D::F f = cu.decode();
            // Rows past `rows` read a staged row never written, or another row's codes; their
            // sums are never used.
            const i8 *xg[NT], *xr[NT];
#pragma unroll
            for (int a = 0; a < NT; a++) {
                if (ST) {
                    xg[a] = s_x + (((size_t)buf * S + slot) * R8 + 8 * a + gid) * D::XPAD;
                    xr[a] = xg[a];
                } else {  // the pieces in `frag_offset`'s order, and the rows' records
                    const i8* pc = s_x + ((size_t)(buf * S * H + wp) * NT + a) * FRAG_GB;
                    xg[a] = pc + 32 * gid;
                    xr[a] = pc + 2048 + 16 * gid;
                }
            }
            int is[NT][4], ms[NT][4];
            cu.template ints<NT, ST ? 32 : 256, !ST>(f, xg, xr, t, is, ms);
            int2* rec = s_rec + (size_t)(buf * S + slot) * RS;
#pragma unroll
            for (int a = 0; a < NT; a++)
#pragma unroll
                for (int p = 0; p < 4; p++)
                    rec[(8 * a + 2 * t + (p & 1)) * (COLS + FW_PAD) + 16 * half + gid + 8 * (p / 2)] =
                        make_int2(is[a][p], ms[a][p]);
            if (t == 0) {
                float2* fs = s_f + (size_t)(buf * S + slot) * COLS + 16 * half + gid;
                fs[0] = make_float2(f.d[0], f.dmin[0]);
                fs[8] = make_float2(f.d[1], f.dmin[1]);
            }
        }
        if (ST) asm volatile("cp.async.wait_all;" ::: "memory");
        // One barrier per round: round r + 2 writes these buffers again only after every thread
        // passed round r + 1's barrier, that is, finished this round's chains.
        __syncthreads();
#pragma unroll
        for (int i = 0; i < CP; i++) {
            const int p = threadIdx.x + i * TH, cl = p % COLS, rl = p / COLS;
            const int row = row0 + rl;
            if (rl < R8 && row < rows) {
#pragma unroll
                for (int j = 0; j < S; j++) {
                    if (r * S + j >= nb) break;
                    const float2 fj = s_f[(size_t)(buf * S + j) * COLS + cl];
                    const int2 rec = s_rec[(size_t)(buf * S + j) * RS + rl * (COLS + FW_PAD) + cl];
                    const float x = XE ? xv[i][j] : xd[(size_t)row * nb + r * S + j];
                    chain[i] = block_step(chain[i], D::SHAPE, fj.x, fj.y, x, rec.x, rec.y);
                }
            }
        }
    };
    for (int r = 0; r < rounds; r++) {
        one_round(cur, nxt, r);
        cur = nxt;
    }
#pragma unroll
    for (int i = 0; i < CP; i++) {
        const int p = threadIdx.x + i * TH, cl = p % COLS, rl = p / COLS;
        const int row = row0 + rl, col = cb + cl;
        if (rl < R8 && row < rows && col < n) out[(size_t)row * n + col] = chain[i];
    }
}

// name_fw{,s}_NT_S_H (s: activations staged): 32 S H threads, a grid of (n / (16 H),
// rows / (8 NT)) (`mma::MmaCfg::few`).
#define MMA_FEW(name, D, NT, S, H, ST, P)                                                      \
    extern "C" __global__ void __launch_bounds__(32 * S * H)                                   \
        name##_##P##_##NT##_##S##_##H(const u8* w, int n, int k, const i8* xq,                 \
                                      const float* xd, const i16* xs, int rows, float* out) {  \
        matmul_mma_few<D, NT, S, H, ST>(blockIdx.x, w, n, k, xq, xd, rows, out);               \
    }
#define MMA_FEW_CONFIGS(name, D)         \
    MMA_FEW(name, D, 1, 4, 2, false, fw) \
    MMA_FEW(name, D, 1, 8, 1, false, fw) \
    MMA_FEW(name, D, 1, 16, 1, false, fw) \
    MMA_FEW(name, D, 2, 4, 2, false, fw) \
    MMA_FEW(name, D, 2, 8, 1, false, fw) \
    MMA_FEW(name, D, 2, 8, 1, true, fws)
MMA_FEW_CONFIGS(mma_q4k, MmaQ4K)
MMA_FEW_CONFIGS(mma_q6k, MmaQ6K)

// Two matrices reading the same rows in one launch (a layer's q|k in Q4_K and v in Q6_K, the
// pair `gvp_*` takes for one or two rows): the first n1 / (16 H) thread blocks take matrix 1,
// the rest matrix 2, each exactly as alone. Name fwp_q4k_q6k_NT_S_H.
#define MMA_FEW_PAIR(NT, S, H)                                                                 \
    extern "C" __global__ void __launch_bounds__(32 * S * H) fwp_q4k_q6k_##NT##_##S##_##H(      \
        const u8* w1, int n1, float* out1, const u8* w2, int n2, float* out2, int k,           \
        const i8* xq, const float* xd, const i16* xs, int rows) {                              \
        const int t1 = (n1 + 16 * H - 1) / (16 * H);                                           \
        if ((int)blockIdx.x < t1)                                                              \
            matmul_mma_few<MmaQ4K, NT, S, H, false>(blockIdx.x, w1, n1, k, xq, xd, rows, out1); \
        else                                                                                   \
            matmul_mma_few<MmaQ6K, NT, S, H, false>(blockIdx.x - t1, w2, n2, k, xq, xd, rows,  \
                                                    out2);                                     \
    }
MMA_FEW_PAIR(1, 8, 1)
MMA_FEW_PAIR(2, 8, 1)
