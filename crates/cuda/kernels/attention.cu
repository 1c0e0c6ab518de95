// Paged attention with the canonical key-chunk order (`tf_kernels::attention`,
// ARCHITECTURE.md exactness rule 3). One thread block per (row, KV head), one thread per head dimension; the query heads
// sharing the KV head (at most MAX_GROUP) are handled together, each with exactly the
// operations it gets alone:
//   for each chunk of KEY_CHUNK positions from 0: scores = canonical dot (16 lanes, ascending
//   FMAs, tree fold) times scale; chunk max; e = canon_exp(s - m); chunk sum l in ascending key
//   order; value sums oc[d] = fma(e, v[d], oc[d]) in ascending key order; then the merge
//   M = max(M, m), a = exp(M_old - M), b = exp(m - M), L = L*a + l*b, o = o*a + oc*b.
//   Finally o / L.
// Row metadata (`meta`, 4 ints per row): offset of the row's block table in `tables`, number of
// keys (positions 0..n), remap base (-1: none), offset of the remap slots in `remaps`.
// Position p lives in slot p, or remaps[off + p - base] when p >= base (tree drafts).
// A sliding-window layer (`window` > 0) shows a row only its last `window` positions: the
// chunks from the one holding its first key, the keys before that key scored -inf (so their
// exponentials are exactly 0), as `tf_kernels::attention` defines it. With `softcap` > 0 each
// score is soft-capped after the scale (`cap * tanh(s / cap)`). With `sinks` (gpt-oss; null =
// none) head h's sink logit is merged after the last chunk as a chunk of one score whose value
// is zero (`attn_sink`).

#define KEY_CHUNK 32
#define MAX_GROUP 16
#define KV_BLOCK 16
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ int attn_slot(const int* m, const int* tables, const int* remaps,
                                         int p) {
    int slot = (m[2] >= 0 && p >= m[2]) ? remaps[m[3] + p - m[2]] : p;
    return tables[m[0] + slot / KV_BLOCK] * KV_BLOCK + slot % KV_BLOCK;
}

// Row m's first key (`RowKeys::first`): the last `window` positions where window > 0.
__device__ __forceinline__ int attn_first(const int* m, int window) {
    return window > 0 ? max(0, m[1] - window) : 0;
}

// A score: the dot times scale, soft-capped where softcap > 0.
__device__ __forceinline__ float attn_score(float dot, float scale, float softcap) {
    const float s = __fmul_rn(dot, scale);
    return softcap > 0.0f ? soft_cap_value(s, softcap) : s;
}

// Shared memory of one (row, KV head) job: the group's queries and one chunk of keys and
// values (staged with coalesced loads, then read many times).
struct AttnSmem {
    float qs[MAX_GROUP * 128];  // group heads x head dimension at most 2048
    float ks[KEY_CHUNK * 128];
    float vs[KEY_CHUNK * 128];
    float sc[MAX_GROUP][KEY_CHUNK];
    float cm[MAX_GROUP];
    float cl[MAX_GROUP];
    int slots[KEY_CHUNK];
};

// Loads the group's query heads of row r into shared memory.
__device__ __forceinline__ void attn_load_q(AttnSmem& sm, const float* q, int r, int kvh, int g_n,
                                            int hd, int qd) {
    const float* qr = q + (size_t)r * qd + (size_t)kvh * g_n * hd;
    for (int i = threadIdx.x; i < g_n * hd; i += blockDim.x) sm.qs[i] = qr[i];
}

// One canonical chunk [c0, c0 + np) for the group's heads, its keys before c0 + lo masked: leaves the chunk max and sum in
// sm.cm / sm.cl and, for thread t < hd, the value sums of dimension t in oc[g]. Keys and values
// of head dimensions up to 128 are staged in shared memory; larger heads read them in place.
__device__ __forceinline__ void attn_chunk(AttnSmem& sm, const kv_t* kc, const kv_t* vc,
                                           const int* m, const int* tables, const int* remaps,
                                           int c0, int np, int lo, int kvh, int g_n, int hd,
                                           int kv_dim, float scale, float softcap, float* oc) {
    const int t = threadIdx.x;
    const int hw = t / 16, lane = t % 16, n_hw = blockDim.x / 16;
    const bool staged = hd <= 128;
    __syncthreads();  // the previous chunk is done with the shared arrays
    if (t < np) sm.slots[t] = attn_slot(m, tables, remaps, c0 + t);
    __syncthreads();
    if (staged) {
        for (int i = t; i < np * hd; i += blockDim.x) {
            int p = i / hd, e = i % hd;
            size_t at = (size_t)sm.slots[p] * kv_dim + (size_t)kvh * hd + e;
            sm.ks[p * hd + e] = kv_get(kc[at]);
            sm.vs[p * hd + e] = kv_get(vc[at]);
        }
        __syncthreads();
    }
    // Scores: one half-warp per (head, key); its 16 lanes are the canonical dot's lanes. The
    // loop bound is the same for both halves of a warp, so every shuffle has all 32 lanes.
    for (int base = 0; base < g_n * np; base += n_hw) {
        int pair = base + hw;
        bool valid = pair < g_n * np;
        int g = valid ? pair / np : 0, p = valid ? pair % np : 0;
        float acc = 0.0f;
        if (valid) {
            const float* ks = sm.ks + p * hd;
            const kv_t* kg = kc + (size_t)sm.slots[p] * kv_dim + (size_t)kvh * hd;
            const float* qg = sm.qs + g * hd;
            for (int i = lane; i < hd; i += 16)
                acc = fmaf(qg[i], staged ? ks[i] : kv_get(kg[i]), acc);
        }
        for (int s = 8; s > 0; s >>= 1) {
            float other = __shfl_down_sync(FULL_MASK, acc, s, 16);
            if (lane < s) acc = __fadd_rn(acc, other);
        }
        if (valid && lane == 0) sm.sc[g][p] = p < lo ? NEG_INF : attn_score(acc, scale, softcap);
    }
    __syncthreads();
    if (t < g_n) {
        float mx = NEG_INF;
        for (int p = 0; p < np; p++) mx = fmaxf(mx, sm.sc[t][p]);
        sm.cm[t] = mx;
    }
    __syncthreads();
    for (int i = t; i < g_n * np; i += blockDim.x) {
        int g = i / np, p = i % np;
        sm.sc[g][p] = canon_exp(__fsub_rn(sm.sc[g][p], sm.cm[g]));
    }
    __syncthreads();
    if (t < g_n) {
        float l = 0.0f;
        for (int p = 0; p < np; p++) l = __fadd_rn(l, sm.sc[t][p]);
        sm.cl[t] = l;
    }
    if (t < hd) {
        // Each head's chain runs over the keys in ascending order; the heads' chains are
        // independent and interleaved.
#pragma unroll
        for (int g = 0; g < MAX_GROUP; g++) oc[g] = 0.0f;
        for (int p = 0; p < np; p++) {
            float v = staged ? sm.vs[p * hd + t]
                             : kv_get(vc[(size_t)sm.slots[p] * kv_dim + (size_t)kvh * hd + t]);
#pragma unroll
            for (int g = 0; g < MAX_GROUP; g++) {
                if (g < g_n) oc[g] = fmaf(sm.sc[g][p], v, oc[g]);
            }
        }
    }
    __syncthreads();  // cl is read by every thread after this
}

// The chunk merge: M = max(M, m), a = exp(M_old - M), b = exp(m - M), L = L*a + l*b,
// o = o*a + oc*b (the first chunk is taken as it is).
__device__ __forceinline__ void attn_merge(bool first, float cm, float cl, float oc, float& bm,
                                           float& bl, float& o) {
    if (first) {
        bm = cm;
        bl = cl;
        o = oc;
    } else {
        float nm = fmaxf(bm, cm);
        float a = canon_exp(__fsub_rn(bm, nm));
        float b = canon_exp(__fsub_rn(cm, nm));
        bl = __fadd_rn(__fmul_rn(bl, a), __fmul_rn(cl, b));
        o = __fadd_rn(__fmul_rn(o, a), __fmul_rn(oc, b));
        bm = nm;
    }
}

// The sink s merged into a head's state (max M, sum L, output o): the chunk merge with l = 1
// and a zero value.
__device__ __forceinline__ void attn_sink(float s, float bm, float& bl, float& o) {
    const float nm = fmaxf(bm, s);
    const float a = canon_exp(__fsub_rn(bm, nm));
    const float b = canon_exp(__fsub_rn(s, nm));
    bl = __fadd_rn(__fmul_rn(bl, a), b);
    o = __fmul_rn(o, a);
}

// One pass per (row, KV head): chunks in order, merged as they come.
extern "C" __global__ void attention(const float* q, const kv_t* kc, const kv_t* vc,
                                     const int* meta, const int* tables, const int* remaps,
                                     int n_heads, int n_kv_heads, int hd, float scale,
                                     int window, float softcap, const float* sinks,
                                     float* out) {
    pdl_enter();
    __shared__ AttnSmem sm;
    const int r = blockIdx.x, kvh = blockIdx.y, t = threadIdx.x;
    const int g_n = n_heads / n_kv_heads;
    const int qd = n_heads * hd, kv_dim = n_kv_heads * hd;
    const int* m = meta + 4 * r;
    const int n_keys = m[1];
    attn_load_q(sm, q, r, kvh, g_n, hd, qd);
    float o[MAX_GROUP], bm[MAX_GROUP], bl[MAX_GROUP], oc[MAX_GROUP];
#pragma unroll
    for (int g = 0; g < MAX_GROUP; g++) {
        o[g] = 0.0f;
        bm[g] = NEG_INF;
        bl[g] = 0.0f;
        oc[g] = 0.0f;
    }
    const int first = attn_first(m, window), cb = first / KEY_CHUNK * KEY_CHUNK;
    for (int c0 = cb; c0 < n_keys; c0 += KEY_CHUNK) {
        const int np = min(KEY_CHUNK, n_keys - c0), lo = max(0, first - c0);
        attn_chunk(sm, kc, vc, m, tables, remaps, c0, np, lo, kvh, g_n, hd, kv_dim, scale,
                   softcap, oc);
        if (t < hd) {
#pragma unroll
            for (int g = 0; g < MAX_GROUP; g++) {
                if (g >= g_n) break;
                attn_merge(c0 == cb, sm.cm[g], sm.cl[g], oc[g], bm[g], bl[g], o[g]);
            }
        }
    }
    if (t < hd) {
        float* orow = out + (size_t)r * qd + (size_t)kvh * g_n * hd;
#pragma unroll
        for (int g = 0; g < MAX_GROUP; g++) {
            if (g >= g_n) break;
            float l = bl[g], v = o[g];
            if (sinks) attn_sink(sinks[kvh * g_n + g], bm[g], l, v);
            orow[g * hd + t] = l > 0.0f ? __fdiv_rn(v, l) : v;
        }
    }
}

// Split form for few rows: block (row, KV head, z) computes chunks z, z + splits, ... and
// stores each chunk's max, sum and value sums (`part_ml` 2 floats, `part_o` hd floats per
// (row, head, chunk), `max_chunks` chunks per (row, head)); `attention_merge` then folds the
// chunks of each (row, head) in ascending order with the same merge — the same bits as the
// one-pass kernel.
extern "C" __global__ void attention_split(const float* q, const kv_t* kc, const kv_t* vc,
                                           const int* meta, const int* tables,
                                           const int* remaps, int n_heads, int n_kv_heads,
                                           int hd, float scale, int window, float softcap,
                                           int max_chunks, float* part_ml, float* part_o) {
    pdl_enter();
    __shared__ AttnSmem sm;
    const int r = blockIdx.x, kvh = blockIdx.y, t = threadIdx.x;
    const int g_n = n_heads / n_kv_heads;
    const int qd = n_heads * hd, kv_dim = n_kv_heads * hd;
    const int* m = meta + 4 * r;
    const int n_chunks = (m[1] + KEY_CHUNK - 1) / KEY_CHUNK;
    const int first = attn_first(m, window), cb = first / KEY_CHUNK;
    if (cb + (int)blockIdx.z >= n_chunks) return;
    attn_load_q(sm, q, r, kvh, g_n, hd, qd);
    float oc[MAX_GROUP];
    for (int c = cb + blockIdx.z; c < n_chunks; c += gridDim.z) {
        const int c0 = c * KEY_CHUNK, np = min(KEY_CHUNK, m[1] - c0), lo = max(0, first - c0);
        attn_chunk(sm, kc, vc, m, tables, remaps, c0, np, lo, kvh, g_n, hd, kv_dim, scale,
                   softcap, oc);
#pragma unroll
        for (int g = 0; g < MAX_GROUP; g++) {
            if (g >= g_n) break;
            size_t at = ((size_t)r * n_heads + kvh * g_n + g) * max_chunks + c;
            if (t < hd) part_o[at * hd + t] = oc[g];
            if (t == 0) {
                part_ml[2 * at] = sm.cm[g];
                part_ml[2 * at + 1] = sm.cl[g];
            }
        }
    }
}

// Dimension t of row r's head h (chunks cb .. n_chunks): its chunks' partials folded from
// chunk cb with the merge above, then the sink (where `sinks`), then o / L. Each chunk's loads wait for the previous chunk's fold: for
// the few chunks of a short context.
__device__ __forceinline__ float attn_merged(int cb, int n_chunks, int r, int n_heads, int h, int hd,
                                             int t, int max_chunks, const float* part_ml,
                                             const float* part_o, const float* sinks) {
    const size_t base = ((size_t)r * n_heads + h) * max_chunks;
    float bm = NEG_INF, bl = 0.0f, o = 0.0f;
#pragma unroll 8
    for (int c = cb; c < n_chunks; c++) {
        attn_merge(c == cb, part_ml[2 * (base + c)], part_ml[2 * (base + c) + 1],
                   part_o[(base + c) * hd + t], bm, bl, o);
    }
    if (sinks) attn_sink(sinks[h], bm, bl, o);
    return bl > 0.0f ? __fdiv_rn(o, bl) : o;
}

// Row r's chunks, from the metadata (written by the host: read before `pdl_enter`).
__device__ __forceinline__ int attn_chunks(const int* meta, int r) {
    return (meta[4 * r + 1] + KEY_CHUNK - 1) / KEY_CHUNK;
}

// Row r's first chunk (its window's first key's).
__device__ __forceinline__ int attn_chunk_begin(const int* meta, int r, int window) {
    return attn_first(meta + 4 * r, window) / KEY_CHUNK;
}

// Rows of at most this many chunks merge with `attn_merged`; longer ones in pieces.
#define MERGE_SERIAL 8

// The split form's merge, for values v0 .. v0 + nv of row r (thread t < nv: value v0 + t),
// with exactly the operations of `attn_merge` folding the chunks in ascending order, but
// without its chain of dependent loads: per piece of 32 chunks, one warp per head spanned loads
// the chunks' maxima and sums at once (lane = chunk), takes the running maxima M_c with a warp
// scan (the maximum does not depend on the order; a zero's sign, which could, only ever enters
// exp(0) = 1) and the factors a_c = exp(M_{c-1} - M_c), b_c = exp(m_c - M_c) in parallel; lane 0
// runs the sums' chain L = L*a + l*b; then every thread folds its value o = o*a + oc*b with all
// of the piece's loads in flight. The row's chunks are cb .. n_chunks; chunk cb is taken as it
// is. Returns o / L (o where L is 0).
// Rows of at most MERGE_SERIAL chunks take `attn_merged`, which is quicker there.
// Needs a warp per head spanned (at most MERGE_HEADS) and every thread of the block.
#define MERGE_PIECE 32
#define MERGE_HEADS 8
__device__ __forceinline__ float attn_merge_values(int cb, int n_chunks, int r, int n_heads, int hd,
                                                   int max_chunks, const float* part_ml,
                                                   const float* part_o, const float* sinks,
                                                   int v0, int nv) {
    __shared__ float fa[MERGE_HEADS][MERGE_PIECE], fb[MERGE_HEADS][MERGE_PIECE];
    __shared__ float fl[MERGE_HEADS], fm[MERGE_HEADS];
    const int t = threadIdx.x, lane = t % 32, w = t / 32;
    if (n_chunks - cb <= MERGE_SERIAL) {  // the same for the whole block
        if (t >= nv) return 0.0f;
        const int i = v0 + t;
        return attn_merged(cb, n_chunks, r, n_heads, i / hd, hd, i % hd, max_chunks, part_ml, part_o,
                           sinks);
    }
    const int h0 = v0 / hd, nh = (v0 + nv - 1) / hd - h0 + 1;
    // The factor warp's head and the chain state its lanes carry across pieces.
    const int fh = h0 + w;
    const size_t fbase = ((size_t)r * n_heads + fh) * max_chunks;
    float run_m = NEG_INF, run_l = 0.0f;
    // This thread's value.
    const bool mine = t < nv;
    const int h = (v0 + t) / hd, e = (v0 + t) % hd;
    const size_t base = ((size_t)r * n_heads + (mine ? h : 0)) * max_chunks;
    const int hw = (mine ? h : h0) - h0;
    float o = 0.0f;
    for (int p0 = cb; p0 < n_chunks; p0 += MERGE_PIECE) {
        const int np = min(MERGE_PIECE, n_chunks - p0);
        __syncthreads();  // the previous piece's factors are used
        if (w < nh) {
            const int c = p0 + lane;
            float cm = NEG_INF, cl = 0.0f;
            if (lane < np) {
                cm = part_ml[2 * (fbase + c)];
                cl = part_ml[2 * (fbase + c) + 1];
            }
            // Running maxima: the previous pieces' carried in, then an inclusive scan.
            float pm = lane == 0 && p0 > cb ? fmaxf(run_m, cm) : cm;
            for (int x = 1; x < 32; x <<= 1) {
                const float y = __shfl_up_sync(FULL_MASK, pm, x);
                if (lane >= x) pm = fmaxf(y, pm);
            }
            float prev = __shfl_up_sync(FULL_MASK, pm, 1);
            if (lane == 0) prev = run_m;
            const float a = canon_exp(__fsub_rn(prev, pm));
            const float b = canon_exp(__fsub_rn(cm, pm));
            fa[w][lane] = a;
            fb[w][lane] = b;
            run_m = __shfl_sync(FULL_MASK, pm, np - 1);
            // The sums' chain, in chunk order.
            for (int j = 0; j < np; j++) {
                const float aj = __shfl_sync(FULL_MASK, a, j);
                const float bj = __shfl_sync(FULL_MASK, b, j);
                const float lj = __shfl_sync(FULL_MASK, cl, j);
                run_l = p0 + j == cb ? lj : __fadd_rn(__fmul_rn(run_l, aj), __fmul_rn(lj, bj));
            }
        }
        __syncthreads();
        if (mine) {
            float oc[MERGE_PIECE];
#pragma unroll
            for (int j = 0; j < MERGE_PIECE; j++)
                if (j < np) oc[j] = part_o[(base + p0 + j) * hd + e];
#pragma unroll
            for (int j = 0; j < MERGE_PIECE; j++) {
                if (j < np) {
                    o = p0 + j == cb ? oc[j]
                                    : __fadd_rn(__fmul_rn(o, fa[hw][j]), __fmul_rn(oc[j], fb[hw][j]));
                }
            }
        }
    }
    if (w < nh && lane == 0) {
        fl[w] = run_l;
        fm[w] = run_m;
    }
    __syncthreads();
    float l = fl[hw];
    if (sinks && mine) attn_sink(sinks[h], fm[hw], l, o);
    return l > 0.0f ? __fdiv_rn(o, l) : o;
}

// One block of max(hd, 32) threads per (row, head).
extern "C" __global__ void attention_merge(const int* meta, int window, const float* sinks,
                                           int n_heads, int hd, int max_chunks,
                                           const float* part_ml, const float* part_o,
                                           float* out) {
    const int r = blockIdx.x, h = blockIdx.y, t = threadIdx.x;
    const int n_chunks = attn_chunks(meta, r), cb = attn_chunk_begin(meta, r, window);
    pdl_enter();
    const float v = attn_merge_values(cb, n_chunks, r, n_heads, hd, max_chunks, part_ml, part_o,
                                      sinks, h * hd, hd);
    if (t < hd) out[((size_t)r * n_heads + h) * hd + t] = v;
}
