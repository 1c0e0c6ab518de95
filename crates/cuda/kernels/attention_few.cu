// Split attention for few rows (decode, small verify rounds): the partials of `attention_merge`
// for each (row, head, chunk), with the canonical operations of `attention.cu`. One block of
// FEW_THREADS per (row, KV head, split); the split's chunks in turn (z, z + splits, ...). Per
// chunk the block stages the chunk's keys lane-major (element l + 16j at l * HD/16 + j, so a
// lane's values are two float4 loads apart) and holds each thread's value column in registers:
//   scores: warp w, lane p takes key p and query heads w, w + 4, ...; the canonical dot (lane l
//     = elements l, l + 16, ... by ascending FMAs, then the fold 8, 4, 2, 1) times scale;
//   the chunk max (order-free, shuffles), e = canon_exp(s - m), the chunk sum in ascending key
//     order (one lane per head), value sums oc[d] = fma(e, v[d], oc[d]) in ascending key order
//     (thread t: dimension t % HD of heads t / HD, t / HD + 128 / HD, ...).
// Unlike the tiled kernel, no work is spent on heads a row does not have, and there is one
// barrier per phase. Sliding windows and soft-capping as in `attention.cu` (`window`,
// `softcap`): a row's chunks start at its first key's, and keys before it score -inf.

#define FEW_THREADS 128
#define FEW_HEADS 16

template <int HD>
struct FewSmem {
    float q[FEW_HEADS][HD];           // lane-major
    float k[KEY_CHUNK][HD + 4];       // lane-major, padded rows
    float e[FEW_HEADS][KEY_CHUNK];    // exp(s - m)
    int slots[KEY_CHUNK];
    int fresh[KEY_CHUNK];  // written by this call (`attn_few`'s `fresh`)
};

// Chunk c's keys (`kx`, this thread's float4s) and this thread's value column (`vr`) for the
// staged slots: every key when `pass` is 0, else only keys this call does not write (`pass`
// 1) or only keys it does (`pass` 2), by `sm.fresh`. Every load is issued before any is used.
template <int HD>
__device__ __forceinline__ void few_load(const FewSmem<HD>& sm, const kv_t* __restrict__ kc,
                                         const kv_t* __restrict__ vc, int kv_dim, int kvh,
                                         int np, int pass, float4 (&kx)[KEY_CHUNK * HD / 4 / FEW_THREADS],
                                         float (&vr)[KEY_CHUNK]) {
    constexpr int KV = KEY_CHUNK * HD / 4 / FEW_THREADS;
    const int t = threadIdx.x, vd = t % HD;
#pragma unroll
    for (int j = 0; j < KV; j++) {
        const int i = t + j * FEW_THREADS, p = i / (HD / 4), c4 = i % (HD / 4);
        if (p < np && (pass == 0 || sm.fresh[p] == (pass == 2)))
            kx[j] = kv_ld4(kc + (size_t)sm.slots[p] * kv_dim + (size_t)kvh * HD + 4 * c4);
    }
#pragma unroll
    for (int p = 0; p < KEY_CHUNK; p++) {
        if (p < np && (pass == 0 || sm.fresh[p] == (pass == 2)))
            vr[p] = kv_ldg(vc + (size_t)sm.slots[p] * kv_dim + (size_t)kvh * HD + vd);
        else if (pass < 2)
            vr[p] = 0.0f;
    }
}

// Slots of chunk keys c0 .. c0 + np (constant during a forward: the host wrote the tables),
// and whether this call writes each (`fresh`: the slots of its rows).
template <int HD>
__device__ __forceinline__ void few_slots(FewSmem<HD>& sm, const int* m, const int* tables,
                                          const int* remaps, const int* fresh, int c0, int np) {
    const int t = threadIdx.x;
    if (t < np) {
        const int slot = attn_slot(m, tables, remaps, c0 + t);
        int f = 0;
        for (int rr = 0; rr < (int)gridDim.x; rr++) f |= fresh[rr] == slot;
        sm.slots[t] = slot;
        sm.fresh[t] = f;
    }
}

template <int HD>
__device__ __forceinline__ void attn_few(const float* __restrict__ q, const kv_t* __restrict__ kc,
                                         const kv_t* __restrict__ vc, const int* meta,
                                         const int* tables, const int* remaps,
                                         const int* fresh, int n_heads, int n_kv_heads,
                                         float scale, int window, float softcap,
                                         int max_chunks, float* part_ml, float* part_o) {
    __shared__ __align__(16) FewSmem<HD> sm;
    constexpr int W = HD / 16;             // elements per dot lane
    constexpr int HS = FEW_THREADS / HD;   // head sets of the value phase
    constexpr int KV = KEY_CHUNK * HD / 4 / FEW_THREADS;
    const int r = blockIdx.x, kvh = blockIdx.y, t = threadIdx.x;
    const int lane = t % 32, wp = t / 32;
    const int G = n_heads / n_kv_heads;
    const int qd = n_heads * HD, kv_dim = n_kv_heads * HD;
    // Before waiting for the previous kernel (which writes the queries and this call's keys
    // and values, nothing else this kernel reads): the first chunk's slots, and the keys and
    // values that no row of this call writes.
    const int* m = meta + 4 * r;
    const int nk = m[1];
    const int n_chunks = (nk + KEY_CHUNK - 1) / KEY_CHUNK;
    const int first = attn_first(m, window), c_start = first / KEY_CHUNK + blockIdx.z;
    if (c_start >= n_chunks) {
        pdl_enter();
        return;
    }
    float4 kx[KV];
    float vr[KEY_CHUNK];
    {
        const int c0 = c_start * KEY_CHUNK;
        few_slots(sm, m, tables, remaps, fresh, c0, min(KEY_CHUNK, nk - c0));
        __syncthreads();
        few_load(sm, kc, vc, kv_dim, kvh, min(KEY_CHUNK, nk - c0), 1, kx, vr);
    }
    pdl_enter();
    // The group's query heads, lane-major (every load issued before any is used).
    {
        constexpr int QV = FEW_HEADS * HD / 4 / FEW_THREADS;
        const float4* qr = reinterpret_cast<const float4*>(q + (size_t)r * qd + (size_t)(kvh * G) * HD);
        float4 x[QV];
#pragma unroll
        for (int j = 0; j < QV; j++) {
            const int i = t + j * FEW_THREADS;
            if (i < G * HD / 4) x[j] = qr[i];
        }
#pragma unroll
        for (int j = 0; j < QV; j++) {
            const int i = t + j * FEW_THREADS;
            if (i < G * HD / 4) {
                const int h = 4 * i / HD, e = 4 * i % HD;
                sm.q[h][(e & 15) * W + (e >> 4)] = x[j].x;
                sm.q[h][((e + 1) & 15) * W + ((e + 1) >> 4)] = x[j].y;
                sm.q[h][((e + 2) & 15) * W + ((e + 2) >> 4)] = x[j].z;
                sm.q[h][((e + 3) & 15) * W + ((e + 3) >> 4)] = x[j].w;
            }
        }
    }
    const int vd = t % HD, vh0 = t / HD;  // value phase: dimension vd of heads vh0 + HS j
    for (int c = c_start; c < n_chunks; c += gridDim.z) {
        const int c0 = c * KEY_CHUNK, np = min(KEY_CHUNK, nk - c0);
        if (c == c_start) {
            // The first chunk's slots are staged; the keys this call wrote are loaded now.
            few_load(sm, kc, vc, kv_dim, kvh, np, 2, kx, vr);
        } else {
            __syncthreads();  // the previous chunk is done with k, e, slots
            few_slots(sm, m, tables, remaps, fresh, c0, np);
            __syncthreads();
            few_load(sm, kc, vc, kv_dim, kvh, np, 0, kx, vr);
        }
        // Keys to shared memory (lane-major); this thread's value column stays in registers.
#pragma unroll
        for (int j = 0; j < KV; j++) {
            const int i = t + j * FEW_THREADS, p = i / (HD / 4), e = 4 * (i % (HD / 4));
            if (p < np) {
                sm.k[p][(e & 15) * W + (e >> 4)] = kx[j].x;
                sm.k[p][((e + 1) & 15) * W + ((e + 1) >> 4)] = kx[j].y;
                sm.k[p][((e + 2) & 15) * W + ((e + 2) >> 4)] = kx[j].z;
                sm.k[p][((e + 3) & 15) * W + ((e + 3) >> 4)] = kx[j].w;
            }
        }
        __syncthreads();
        // Scores of key `lane` for heads wp, wp + 4, ...; max and exponentials per head.
        for (int h = wp; h < G; h += FEW_THREADS / 32) {
            float s = NEG_INF;
            if (lane < np) {
                float acc[16];
#pragma unroll
                for (int l = 0; l < 16; l++) {
                    acc[l] = 0.0f;
#pragma unroll
                    for (int j = 0; j < W; j += 4) {
                        const float4 a = *reinterpret_cast<const float4*>(&sm.q[h][l * W + j]);
                        const float4 b = *reinterpret_cast<const float4*>(&sm.k[lane][l * W + j]);
                        acc[l] = fmaf(a.x, b.x, acc[l]);
                        acc[l] = fmaf(a.y, b.y, acc[l]);
                        acc[l] = fmaf(a.z, b.z, acc[l]);
                        acc[l] = fmaf(a.w, b.w, acc[l]);
                    }
                }
#pragma unroll
                for (int l = 0; l < 8; l++) acc[l] = __fadd_rn(acc[l], acc[l + 8]);
#pragma unroll
                for (int l = 0; l < 4; l++) acc[l] = __fadd_rn(acc[l], acc[l + 4]);
                acc[0] = __fadd_rn(acc[0], acc[2]);
                acc[1] = __fadd_rn(acc[1], acc[3]);
                acc[0] = __fadd_rn(acc[0], acc[1]);
                s = c0 + lane < first ? NEG_INF : attn_score(acc[0], scale, softcap);
            }
            float mx = s;
            for (int x = 16; x > 0; x >>= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, x));
            sm.e[h][lane] = lane < np ? canon_exp(__fsub_rn(s, mx)) : 0.0f;
            __syncwarp();
            if (lane == 0) {
                float l = 0.0f;
                for (int p = 0; p < np; p++) l = __fadd_rn(l, sm.e[h][p]);
                const size_t at = ((size_t)r * n_heads + kvh * G + h) * max_chunks + c;
                part_ml[2 * at] = mx;
                part_ml[2 * at + 1] = l;
            }
        }
        __syncthreads();
        // Value sums in ascending key order.
        for (int h = vh0; h < G; h += HS) {
            float oc = 0.0f;
#pragma unroll
            for (int p = 0; p < KEY_CHUNK; p++)
                if (p < np) oc = fmaf(sm.e[h][p], vr[p], oc);
            const size_t at = ((size_t)r * n_heads + kvh * G + h) * max_chunks + c;
            part_o[at * HD + vd] = oc;
        }
    }
}

#define ATTN_FEW_KERNEL(name, hd)                                                              \
    extern "C" __global__ void __launch_bounds__(FEW_THREADS)                                  \
        name(const float* q, const kv_t* kc, const kv_t* vc, const int* meta,                \
             const int* tables, const int* remaps, const int* fresh, int n_heads,              \
             int n_kv_heads, float scale, int window, float softcap, int max_chunks,           \
             float* part_ml, float* part_o) {                                                  \
        attn_few<hd>(q, kc, vc, meta, tables, remaps, fresh, n_heads, n_kv_heads, scale,       \
                     window, softcap, max_chunks, part_ml, part_o);                            \
    }

ATTN_FEW_KERNEL(attention_few_128, 128)
ATTN_FEW_KERNEL(attention_few_64, 64)

// `attention_merge` followed by `actq` of the merged rows (the input of the o matmul), one
// launch: block (r, j) merges values 256 j .. 256 j + 255 of row r (`attn_merge_values`, as
// `attention_merge` does), stages them, and quantizes their
// blocks of `bl` values with `actq_block`, one warp per block.
extern "C" __global__ void __launch_bounds__(256)
    attention_merge_q(const int* meta, int window, const float* sinks, int n_heads, int hd,
                      int max_chunks,
                      const float* part_ml, const float* part_o, float* out, int bl, int sl,
                      i8* qs, float* d, i16* sums, i8* qf) {
    __shared__ float sv[256];
    const int r = blockIdx.x, v0 = blockIdx.y * 256, t = threadIdx.x, i = v0 + t;
    const int qd = n_heads * hd;
    const int n_chunks = attn_chunks(meta, r), cb = attn_chunk_begin(meta, r, window);
    pdl_enter();
    const float val = attn_merge_values(cb, n_chunks, r, n_heads, hd, max_chunks, part_ml, part_o,
                                        sinks, v0,
                                        min(256, qd - v0));
    if (i < qd) {
        out[(size_t)r * qd + i] = val;
        sv[t] = val;
    }
    __syncthreads();
    const int nblk = min(256, qd - v0) / bl, w = t / 32;
    if (w < nblk) {
        const size_t at = (size_t)r * qd + v0 + (size_t)w * bl;
        actq_block(sv + w * bl, bl, sl, t % 32, qs + at, d + at / bl, sums + at / sl,
                   qf, r, v0 / bl + w, qd / bl);
    }
}
