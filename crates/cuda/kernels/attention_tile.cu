// Tiled attention: the canonical key-chunk order of `attention.cu`, computed for a tile of rows
// at once. One block of TILE_THREADS threads per (tile of rows, KV head[, split]); a tile is
// the TILE_QH / group consecutive rows whose query heads (rows x group, at most TILE_QH) share
// each staged chunk of keys and values. Every (row, head) still gets exactly its own
// operations:
//   scores: the canonical dot (lane l = elements l, l + 16, ... by ascending FMAs, then the
//     tree fold 8, 4, 2, 1) times scale, one thread per score with no shuffles: keys are stored
//     lane-major (element l + 16j at l * HD/16 + j), so a lane's values are contiguous, and the
//     fold is done in the tree's own order as the lanes complete;
//   chunk max (order-free), e = canon_exp(s - m), the chunk sum in ascending key order (one
//     thread per head), value sums oc[d] = fma(e, v[d], oc[d]) in ascending key order;
//   the merge of attention.cu, chunk by chunk from chunk 0; finally o / L.
// Rows of a tile that read different keys (other sequences, other tree remaps) are taken in
// separate passes, each pass the rows sharing the first unfinished row's keys. With `part_o`,
// block z computes chunks z, z + splits, ... into the partials of `attention_merge`.

#define TILE_QH 32
#define TILE_THREADS 128
#define TILE_ES 40

template <int HD>
struct TileSmem {
    float q[TILE_QH * (HD + 4)];   // query heads, lane-major, padded rows
    float k[KEY_CHUNK * (HD + 4)];  // the chunk's keys, lane-major, padded rows
    float v[KEY_CHUNK * HD];        // the chunk's values
    float e[TILE_QH * TILE_ES];     // exp(s - m) per head and key
    float c0[TILE_QH * TILE_ES];    // the even lanes' half of the split form's scores
    float cm[TILE_QH];              // chunk max per head
    float fa[TILE_QH];              // merge factors of the chunk
    float fb[TILE_QH];
    float bl[TILE_QH];              // final sums
    int fl[TILE_QH];                // 0: no keys in the chunk, 1: first chunk, 2: merge
    int slots[KEY_CHUNK];
    int fresh[KEY_CHUNK];           // 1: written by this call (the split form's first chunk)
    int nk[32];                     // keys of each tile row in this pass (0: not in it)
    int hk[TILE_QH];                // keys of each head's row in this pass (0: not in it)
    int np[TILE_QH];                // keys of each head's row in the current chunk
    int hidx[TILE_QH];              // (row, head) index of each head: row * n_heads + head
    int npt, full, maxk;
};

// Where lane-major storage puts element i of a head vector.
template <int HD>
__device__ __forceinline__ int tile_perm(int i) {
    return (i & 15) * (HD / 16) + (i >> 4);
}

// Lane l's partial dots of heads qg + QST*v (v < NH) and keys kg + 8u (u < 4).
template <int HD, int NH, int QST>
__device__ __forceinline__ void tile_lane(const TileSmem<HD>& sm, int l, int qg, int kg,
                                          float (&p)[NH][4]) {
    constexpr int W = HD / 16;
#pragma unroll
    for (int v = 0; v < NH; v++)
#pragma unroll
        for (int u = 0; u < 4; u++) p[v][u] = 0.0f;
#pragma unroll
    for (int j = 0; j < W; j += 4) {
        float4 a[NH], b[4];
#pragma unroll
        for (int v = 0; v < NH; v++)
            a[v] = *reinterpret_cast<const float4*>(sm.q + (qg + QST * v) * (HD + 4) + l * W + j);
#pragma unroll
        for (int u = 0; u < 4; u++)
            b[u] = *reinterpret_cast<const float4*>(sm.k + (kg + 8 * u) * (HD + 4) + l * W + j);
#pragma unroll
        for (int v = 0; v < NH; v++)
#pragma unroll
            for (int u = 0; u < 4; u++) {
                p[v][u] = fmaf(a[v].x, b[u].x, p[v][u]);
                p[v][u] = fmaf(a[v].y, b[u].y, p[v][u]);
                p[v][u] = fmaf(a[v].z, b[u].z, p[v][u]);
                p[v][u] = fmaf(a[v].w, b[u].w, p[v][u]);
            }
    }
}

template <int NH>
__device__ __forceinline__ void tile_add(float (&d)[NH][4], const float (&a)[NH][4],
                                         const float (&b)[NH][4]) {
#pragma unroll
    for (int v = 0; v < NH; v++)
#pragma unroll
        for (int u = 0; u < 4; u++) d[v][u] = __fadd_rn(a[v][u], b[v][u]);
}

// b_l = a_l + a_{l+4} with a_l = p_l + p_{l+8}: the first two levels of the canonical fold.
template <int HD, int NH, int QST>
__device__ __forceinline__ void tile_b(const TileSmem<HD>& sm, int l, int qg, int kg,
                                       float (&b)[NH][4]) {
    float x[NH][4], y[NH][4], a[NH][4];
    tile_lane<HD, NH, QST>(sm, l, qg, kg, x);
    tile_lane<HD, NH, QST>(sm, l + 8, qg, kg, y);
    tile_add(a, x, y);  // a_l
    tile_lane<HD, NH, QST>(sm, l + 4, qg, kg, x);
    tile_lane<HD, NH, QST>(sm, l + 12, qg, kg, y);
    tile_add(x, x, y);  // a_{l+4}
    tile_add(b, a, x);
}

// c_h = b_h + b_{h+2} of heads qg + QST*v and keys kg + 8u: lane half h (0: even lanes, 1: odd)
// of the canonical fold, whose last level is d = c_0 + c_1.
template <int HD, int NH, int QST>
__device__ __forceinline__ void tile_c(const TileSmem<HD>& sm, int h, int qg, int kg,
                                       float (&c)[NH][4]) {
    float b[NH][4];
    tile_b<HD, NH, QST>(sm, h, qg, kg, c);
    tile_b<HD, NH, QST>(sm, h + 2, qg, kg, b);
    tile_add(c, c, b);
}

// The canonical dots of 2 heads (qg, qg + 16) x 4 keys, evaluated as the lanes complete.
template <int HD>
__device__ __forceinline__ void tile_dots(const TileSmem<HD>& sm, int qg, int kg,
                                          float (&d)[2][4]) {
    float c1[2][4];
    tile_c<HD, 2, 16>(sm, 0, qg, kg, d);
    tile_c<HD, 2, 16>(sm, 1, qg, kg, c1);
    tile_add(d, d, c1);  // d = c0 + c1
}

#ifndef TILE_SPLIT_PAIR
// The same dots by lane halves: warps 0-1 take the even lanes (c0) and warps 2-3 the odd ones
// (c1), each for 4 heads x 4 keys, so a thread loads a key vector for 4 heads instead of 2.
// The halves meet in shared memory (c0 in `c0`, c1 in `e`), then each thread adds its own 2
// heads x 4 keys as `tile_dots` lays them out: d = c0 + c1. Ends with a barrier.
template <int HD>
__device__ __forceinline__ void tile_dots_halves(TileSmem<HD>& sm, int qg, int kg,
                                                 float (&d)[2][4]) {
    const int t = threadIdx.x, h = t >> 6, hg = (t & 63) >> 3;  // half, heads hg + 8v
    float c[4][4];
    tile_c<HD, 4, 8>(sm, h, hg, kg, c);
    float* dst = h ? sm.e : sm.c0;
#pragma unroll
    for (int v = 0; v < 4; v++)
#pragma unroll
        for (int u = 0; u < 4; u++) dst[(hg + 8 * v) * TILE_ES + kg + 8 * u] = c[v][u];
    __syncthreads();
#pragma unroll
    for (int v = 0; v < 2; v++)
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int at = (qg + 16 * v) * TILE_ES + kg + 8 * u;
            d[v][u] = __fadd_rn(sm.c0[at], sm.e[at]);
        }
}
#endif

// The next pass's rows: those not in `done` that read the same keys as the first of them.
// Returns that row (`lead`), or -1 once every row is done; leaves each row's and each head's
// key count in the pass, and their largest, in shared memory (ends with a barrier).
template <int HD>
__device__ __forceinline__ int tile_pass(TileSmem<HD>& sm, const int* meta, int r0, int nr,
                                         int nq, int G, unsigned done) {
    const int t = threadIdx.x;
    int lead = 0;
    while (lead < nr && ((done >> lead) & 1u)) lead++;
    if (lead >= nr) return -1;
    const int* lm = meta + 4 * (r0 + lead);
    __syncthreads();  // the previous pass is done with the shared arrays
    if (t < 32) {
        int nk = 0;
        if (t < nr && !((done >> t) & 1u)) {
            const int* m = meta + 4 * (r0 + t);
            if (m[0] == lm[0] && m[2] == lm[2] && (lm[2] < 0 || m[3] == lm[3])) nk = m[1];
        }
        sm.nk[t] = nk;
        const int hn = __shfl_sync(FULL_MASK, nk, min(t / G, 31));  // head t's row's count
        if (t < TILE_QH) sm.hk[t] = t < nq ? hn : 0;
        int mk = nk;
        for (int s = 16; s > 0; s >>= 1) mk = max(mk, __shfl_xor_sync(FULL_MASK, mk, s));
        if (t == 0) sm.maxk = mk;
    }
    __syncthreads();
    return lead;
}

// Chunk c0's bookkeeping: its slots, each head's keys in it, whether every head has all of the
// chunk's keys or none (`full`), and with `fresh` (rows of this call, at most SPLIT_ROWS) which
// slots this call writes. Ends with a barrier.
template <int HD>
__device__ __forceinline__ void tile_chunk(TileSmem<HD>& sm, const int* lm, const int* tables,
                                           const int* remaps, const int* fresh, int rows, int c0) {
    const int t = threadIdx.x;
    if (t < 32) {
        const int npt = min(KEY_CHUNK, sm.maxk - c0);
        if (t < npt) {
            const int slot = attn_slot(lm, tables, remaps, c0 + t);
            sm.slots[t] = slot;
            if (fresh) {
                int f = 0;
                for (int rr = 0; rr < rows; rr++) f |= fresh[rr] == slot;
                sm.fresh[t] = f;
            }
        }
        const int np = min(KEY_CHUNK, max(0, sm.hk[t] - c0));
        sm.np[t] = np;
        const bool odd = np != 0 && np != npt;
        const bool full = !__any_sync(FULL_MASK, odd);
        if (t == 0) {
            sm.npt = npt;
            sm.full = full;
        }
    }
    __syncthreads();
}

// Stages the chunk's keys (lane-major) and values: all of them (`part` 0), only those this call
// does not write (1), or only those it does (2, by `sm.fresh`). Every load before any store.
template <int HD>
__device__ __forceinline__ void tile_stage(TileSmem<HD>& sm, const kv_t* __restrict__ kc,
                                           const kv_t* __restrict__ vc, int kv_dim, int kvh,
                                           int part) {
    constexpr int DG = HD / 4;
    constexpr int PER = KEY_CHUNK * DG / TILE_THREADS;  // staged float4s per thread
    const int t = threadIdx.x, npt = sm.npt;
    float4 kr[PER], vr[PER];
    bool take[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int i = t + j * TILE_THREADS, p = i / DG, c4 = i % DG;
        take[j] = p < npt && (part == 0 || sm.fresh[p] == (part == 2));
        if (take[j]) {
            const size_t at = (size_t)sm.slots[p] * kv_dim + (size_t)kvh * HD + 4 * c4;
            kr[j] = kv_ld4(kc + at);
            vr[j] = kv_ld4(vc + at);
        }
    }
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int i = t + j * TILE_THREADS, p = i / DG, c4 = i % DG;
        if (take[j]) {
            *reinterpret_cast<float4*>(sm.v + p * HD + 4 * c4) = vr[j];
            float* d = sm.k + p * (HD + 4);
            d[tile_perm<HD>(4 * c4)] = kr[j].x;
            d[tile_perm<HD>(4 * c4 + 1)] = kr[j].y;
            d[tile_perm<HD>(4 * c4 + 2)] = kr[j].z;
            d[tile_perm<HD>(4 * c4 + 3)] = kr[j].w;
        }
    }
}

// The split form first stages its first chunk from what the host wrote (metadata, tables, the
// keys of earlier calls), then waits for the previous kernel (which writes the queries and
// this call's keys and values) and stages the rest.
template <int HD, bool SPLIT>
__device__ __forceinline__ void attn_tile(const float* __restrict__ q,
                                          const kv_t* __restrict__ kc,
                                          const kv_t* __restrict__ vc, const int* meta,
                                          const int* tables, const int* remaps,
                                          const int* fresh, int rows, int n_heads,
                                          int n_kv_heads, float scale, float* out,
                                          int max_chunks, float* part_ml, float* part_o) {
    extern __shared__ __align__(16) unsigned char tile_raw[];
    TileSmem<HD>& sm = *reinterpret_cast<TileSmem<HD>*>(tile_raw);
    {
        unsigned dyn;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
        if (dyn < sizeof(TileSmem<HD>)) __trap();
    }
    constexpr int DG = HD / 4;                               // float4s of a head vector
    constexpr int QS = TILE_THREADS / DG;                    // head sets of the value phase
    constexpr int NV = TILE_QH / QS;                         // heads per value thread
    const int t = threadIdx.x, kvh = blockIdx.y;
    const int G = n_heads / n_kv_heads, R = TILE_QH / G;
    const int r0 = blockIdx.x * R, nr = min(R, rows - r0);
    if (nr <= 0) {
        pdl_enter();
        return;
    }
    const int nq = nr * G;
    constexpr bool split = SPLIT;
    const int c_first = split ? (int)blockIdx.z : 0, c_step = split ? (int)gridDim.z : 1;
    const int kg = t & 7, qg = t >> 3;      // scores: keys kg + 8u, heads qg + 16v
    // Values: dims 4dg..4dg+3, heads qs + QS*v. With 32 float4s a head vector a warp takes
    // 16 of them for 2 head sets, so each value load serves two head sets (half the
    // shared-memory wavefronts of a warp over all 32).
#ifdef TILE_VAL_FLAT
    const int dg = t % DG, qs = t / DG;
#else
    const int dg = DG == 32 ? (t & 15) + ((t >> 1) & 16) : t % DG;
    const int qs = DG == 32 ? ((t >> 4) & 1) + 2 * (t >> 6) : t / DG;
#endif
    if (t < TILE_QH)
        sm.hidx[t] = t < nq ? (r0 + t / G) * n_heads + kvh * G + t % G : 0;
    unsigned done = 0;  // tile rows finished by earlier passes
    int lead = -1;      // the first row of the pass set up ahead (split form), or -1
    bool early = false;  // the first chunk of that pass is staged but for this call's keys
    if (split) {
        lead = tile_pass(sm, meta, r0, nr, nq, G, 0);
        if (c_first * KEY_CHUNK < sm.maxk) {
            tile_chunk(sm, meta + 4 * (r0 + lead), tables, remaps, fresh, rows,
                       c_first * KEY_CHUNK);
            tile_stage(sm, kc, vc, n_kv_heads * HD, kvh, 1);
            early = true;
        }
    }
    pdl_enter();
    for (;;) {
        if (lead < 0) lead = tile_pass(sm, meta, r0, nr, nq, G, done);
        if (lead < 0) break;
        const int* lm = meta + 4 * (r0 + lead);
        lead = -1;
        for (int i = t; i < TILE_QH * DG; i += TILE_THREADS) {
            const int qh = i / DG, c4 = i % DG;
            float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (sm.hk[qh] > 0)
                x = *reinterpret_cast<const float4*>(q + (size_t)sm.hidx[qh] * HD + 4 * c4);
            float* d = sm.q + qh * (HD + 4);
            d[tile_perm<HD>(4 * c4)] = x.x;
            d[tile_perm<HD>(4 * c4 + 1)] = x.y;
            d[tile_perm<HD>(4 * c4 + 2)] = x.z;
            d[tile_perm<HD>(4 * c4 + 3)] = x.w;
        }
        const int maxk = sm.maxk;
        float bm = NEG_INF, bl = 0.0f;  // merge state of head t (t < TILE_QH)
        float o[NV][4];
#pragma unroll
        for (int v = 0; v < NV; v++)
#pragma unroll
            for (int x = 0; x < 4; x++) o[v][x] = 0.0f;

        for (int c = c_first; c * KEY_CHUNK < maxk; c += c_step) {
            if (!early) {
                __syncthreads();  // the previous chunk is done with k, v, e, np
                tile_chunk(sm, lm, tables, remaps, (const int*)nullptr, rows, c * KEY_CHUNK);
            }
            tile_stage(sm, kc, vc, n_kv_heads * HD, kvh, early ? 2 : 0);
            early = false;
            const int npt = sm.npt;
            __syncthreads();

            // Scores, chunk max and exponentials.
            {
                float s[2][4];
#ifndef TILE_SPLIT_PAIR
                if constexpr (SPLIT)
                    tile_dots_halves(sm, qg, kg, s);
                else
#endif
                    tile_dots(sm, qg, kg, s);
#pragma unroll
                for (int v = 0; v < 2; v++) {
                    const int qh = qg + 16 * v;
                    const int np = sm.np[qh];
                    float mx = NEG_INF;
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        s[v][u] = kg + 8 * u < np ? __fmul_rn(s[v][u], scale) : NEG_INF;
                        mx = fmaxf(mx, s[v][u]);
                    }
                    for (int x = 1; x < 8; x <<= 1)
                        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, x));
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        const int p = kg + 8 * u;
                        sm.e[qh * TILE_ES + p] =
                            p < np ? canon_exp(__fsub_rn(s[v][u], mx)) : 0.0f;
                    }
                    if (kg == 0) sm.cm[qh] = mx;
                }
            }
            __syncthreads();

            // Chunk sums in ascending key order and the merge factors, one thread per head.
            if (t < TILE_QH) {
                const int np = sm.np[t];
                int fl = 0;
                if (np > 0) {
                    float l = 0.0f;
                    if (np == KEY_CHUNK) {  // all loads first, then the chain
                        float4 e4[KEY_CHUNK / 4];
#pragma unroll
                        for (int j = 0; j < KEY_CHUNK / 4; j++)
                            e4[j] = *reinterpret_cast<const float4*>(sm.e + t * TILE_ES + 4 * j);
#pragma unroll
                        for (int j = 0; j < KEY_CHUNK / 4; j++) {
                            l = __fadd_rn(l, e4[j].x);
                            l = __fadd_rn(l, e4[j].y);
                            l = __fadd_rn(l, e4[j].z);
                            l = __fadd_rn(l, e4[j].w);
                        }
                    } else {
                        for (int p = 0; p < np; p++) l = __fadd_rn(l, sm.e[t * TILE_ES + p]);
                    }
                    const float cm = sm.cm[t];
                    if (split) {
                        const size_t at = (size_t)sm.hidx[t] * max_chunks + c;
                        part_ml[2 * at] = cm;
                        part_ml[2 * at + 1] = l;
                    } else if (c == 0) {
                        bm = cm;
                        bl = l;
                        fl = 1;
                    } else {
                        const float nm = fmaxf(bm, cm);
                        const float a = canon_exp(__fsub_rn(bm, nm));
                        const float b = canon_exp(__fsub_rn(cm, nm));
                        bl = __fadd_rn(__fmul_rn(bl, a), __fmul_rn(l, b));
                        bm = nm;
                        sm.fa[t] = a;
                        sm.fb[t] = b;
                        fl = 2;
                    }
                }
                sm.fl[t] = fl;
            }

            // Value sums in ascending key order.
            float oc[NV][4];
            int npq[NV];
#pragma unroll
            for (int v = 0; v < NV; v++) {
                const int qh = qs + QS * v;
                npq[v] = sm.np[qh];
#pragma unroll
                for (int x = 0; x < 4; x++) oc[v][x] = 0.0f;
            }
            if (sm.full && npt == KEY_CHUNK) {
#pragma unroll(SPLIT ? 1 : 2)
                for (int p0 = 0; p0 < KEY_CHUNK; p0 += 4) {
                    float4 vv[4];
#pragma unroll
                    for (int pu = 0; pu < 4; pu++)
                        vv[pu] = *reinterpret_cast<const float4*>(sm.v + (p0 + pu) * HD + 4 * dg);
#pragma unroll
                    for (int v = 0; v < NV; v++) {
                        const float4 e4 = *reinterpret_cast<const float4*>(
                            sm.e + (qs + QS * v) * TILE_ES + p0);
                        const float ev[4] = {e4.x, e4.y, e4.z, e4.w};
#pragma unroll
                        for (int pu = 0; pu < 4; pu++) {
                            oc[v][0] = fmaf(ev[pu], vv[pu].x, oc[v][0]);
                            oc[v][1] = fmaf(ev[pu], vv[pu].y, oc[v][1]);
                            oc[v][2] = fmaf(ev[pu], vv[pu].z, oc[v][2]);
                            oc[v][3] = fmaf(ev[pu], vv[pu].w, oc[v][3]);
                        }
                    }
                }
            } else {
                for (int p = 0; p < npt; p++) {
                    const float4 vv = *reinterpret_cast<const float4*>(sm.v + p * HD + 4 * dg);
#pragma unroll
                    for (int v = 0; v < NV; v++) {
                        if (p < npq[v]) {
                            const float ev = sm.e[(qs + QS * v) * TILE_ES + p];
                            oc[v][0] = fmaf(ev, vv.x, oc[v][0]);
                            oc[v][1] = fmaf(ev, vv.y, oc[v][1]);
                            oc[v][2] = fmaf(ev, vv.z, oc[v][2]);
                            oc[v][3] = fmaf(ev, vv.w, oc[v][3]);
                        }
                    }
                }
            }
            __syncthreads();  // fl, fa, fb are written
#pragma unroll
            for (int v = 0; v < NV; v++) {
                const int qh = qs + QS * v;
                if (npq[v] == 0) continue;
                if (split) {
                    const size_t at = (size_t)sm.hidx[qh] * max_chunks + c;
                    *reinterpret_cast<float4*>(part_o + at * HD + 4 * dg) =
                        make_float4(oc[v][0], oc[v][1], oc[v][2], oc[v][3]);
                    continue;
                }
                const int fl = sm.fl[qh];
                if (fl == 1) {
#pragma unroll
                    for (int x = 0; x < 4; x++) o[v][x] = oc[v][x];
                } else {
                    const float a = sm.fa[qh], b = sm.fb[qh];
#pragma unroll
                    for (int x = 0; x < 4; x++)
                        o[v][x] = __fadd_rn(__fmul_rn(o[v][x], a), __fmul_rn(oc[v][x], b));
                }
            }
        }

        if (!split) {
            if (t < TILE_QH) sm.bl[t] = bl;
            __syncthreads();
#pragma unroll
            for (int v = 0; v < NV; v++) {
                const int qh = qs + QS * v;
                if (sm.hk[qh] == 0) continue;
                const float L = sm.bl[qh];
                float r[4];
#pragma unroll
                for (int x = 0; x < 4; x++) r[x] = L > 0.0f ? __fdiv_rn(o[v][x], L) : o[v][x];
                *reinterpret_cast<float4*>(out + (size_t)sm.hidx[qh] * HD + 4 * dg) =
                    make_float4(r[0], r[1], r[2], r[3]);
            }
        }
        for (int r = 0; r < nr; r++)
            if (sm.nk[r] > 0) done |= 1u << r;
    }
}

// The one-pass form (prefill) and the split form (`part_o`, rows of decode and verify rounds)
// are separate kernels: the split form holds no running output, so it needs fewer registers
// and fits TILE_SPLIT_BLOCKS blocks per multiprocessor.
#define TILE_SPLIT_BLOCKS 3
#define ATTN_TILE_KERNEL(name, hd, split, blocks)                                              \
    extern "C" __global__ void __launch_bounds__(TILE_THREADS, blocks)                         \
        name(const float* q, const kv_t* kc, const kv_t* vc, const int* meta,                \
             const int* tables, const int* remaps, const int* fresh, int rows, int n_heads,     \
             int n_kv_heads, float scale, float* out, int max_chunks, float* part_ml,           \
             float* part_o) {                                                                   \
        attn_tile<hd, split>(q, kc, vc, meta, tables, remaps, fresh, rows, n_heads, n_kv_heads, \
                             scale, out, max_chunks, part_ml, part_o);                         \
    }

ATTN_TILE_KERNEL(attention_tile_128, 128, false, 1)
ATTN_TILE_KERNEL(attention_tile_64, 64, false, 1)
ATTN_TILE_KERNEL(attention_tile_split_128, 128, true, TILE_SPLIT_BLOCKS)
ATTN_TILE_KERNEL(attention_tile_split_64, 64, true, TILE_SPLIT_BLOCKS)
