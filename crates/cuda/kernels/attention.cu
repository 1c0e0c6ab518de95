// Paged attention with the canonical key-chunk order (`tf_kernels::attention`, design guide
// §2.3). One thread block per (row, KV head), one thread per head dimension; the query heads
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

#define KEY_CHUNK 32
#define MAX_GROUP 16
#define KV_BLOCK 16

__device__ __forceinline__ int attn_slot(const int* m, const int* tables, const int* remaps,
                                         int p) {
    int slot = (m[2] >= 0 && p >= m[2]) ? remaps[m[3] + p - m[2]] : p;
    return tables[m[0] + slot / KV_BLOCK] * KV_BLOCK + slot % KV_BLOCK;
}

extern "C" __global__ void attention(const float* q, const float* kc, const float* vc,
                                     const int* meta, const int* tables, const int* remaps,
                                     int n_heads, int n_kv_heads, int hd, float scale,
                                     float* out) {
    __shared__ float qs[MAX_GROUP * 256];
    __shared__ float sc[MAX_GROUP][KEY_CHUNK];
    __shared__ float cm[MAX_GROUP];
    __shared__ float cl[MAX_GROUP];
    __shared__ int slots[KEY_CHUNK];
    const int r = blockIdx.x, kvh = blockIdx.y, t = threadIdx.x;
    const int g_n = n_heads / n_kv_heads;
    const int qd = n_heads * hd, kv_dim = n_kv_heads * hd;
    const int* m = meta + 4 * r;
    const int n_keys = m[1];
    const float* qr = q + (size_t)r * qd + (size_t)kvh * g_n * hd;
    for (int i = t; i < g_n * hd; i += blockDim.x) qs[i] = qr[i];
    float o[MAX_GROUP], bm[MAX_GROUP], bl[MAX_GROUP];
#pragma unroll
    for (int g = 0; g < MAX_GROUP; g++) {
        o[g] = 0.0f;
        bm[g] = __int_as_float(0xff800000);
        bl[g] = 0.0f;
    }
    const int hw = t / 16, lane = t % 16, n_hw = blockDim.x / 16;
    for (int c0 = 0; c0 < n_keys; c0 += KEY_CHUNK) {
        const int np = min(KEY_CHUNK, n_keys - c0);
        __syncthreads();  // the previous chunk is done with `slots`, `sc`, `cm`, `cl`
        if (t < np) slots[t] = attn_slot(m, tables, remaps, c0 + t);
        __syncthreads();
        // Scores: one half-warp per (head, key); its 16 lanes are the canonical dot's lanes.
        // The loop bound is the same for both halves of a warp, so every shuffle has all 32
        // lanes.
        for (int base = 0; base < g_n * np; base += n_hw) {
            int pair = base + hw;
            bool valid = pair < g_n * np;
            int g = valid ? pair / np : 0, p = valid ? pair % np : 0;
            float acc = 0.0f;
            if (valid) {
                const float* k = kc + (size_t)slots[p] * kv_dim + (size_t)kvh * hd;
                const float* qg = qs + g * hd;
                for (int i = lane; i < hd; i += 16) acc = fmaf(qg[i], k[i], acc);
            }
            for (int s = 8; s > 0; s >>= 1) {
                float other = __shfl_down_sync(FULL_MASK, acc, s, 16);
                if (lane < s) acc = __fadd_rn(acc, other);
            }
            if (valid && lane == 0) sc[g][p] = __fmul_rn(acc, scale);
        }
        __syncthreads();
        if (t < g_n) {
            float mx = __int_as_float(0xff800000);
            for (int p = 0; p < np; p++) mx = fmaxf(mx, sc[t][p]);
            cm[t] = mx;
        }
        __syncthreads();
        for (int i = t; i < g_n * np; i += blockDim.x) {
            int g = i / np, p = i % np;
            sc[g][p] = canon_exp(__fsub_rn(sc[g][p], cm[g]));
        }
        __syncthreads();
        if (t < g_n) {
            float l = 0.0f;
            for (int p = 0; p < np; p++) l = __fadd_rn(l, sc[t][p]);
            cl[t] = l;
        }
        __syncthreads();
        if (t < hd) {
#pragma unroll
            for (int g = 0; g < MAX_GROUP; g++) {
                if (g >= g_n) break;
                float oc = 0.0f;
                for (int p = 0; p < np; p++) {
                    float v = vc[(size_t)slots[p] * kv_dim + (size_t)kvh * hd + t];
                    oc = fmaf(sc[g][p], v, oc);
                }
                if (c0 == 0) {
                    bm[g] = cm[g];
                    bl[g] = cl[g];
                    o[g] = oc;
                } else {
                    float nm = fmaxf(bm[g], cm[g]);
                    float a = canon_exp(__fsub_rn(bm[g], nm));
                    float b = canon_exp(__fsub_rn(cm[g], nm));
                    bl[g] = __fadd_rn(__fmul_rn(bl[g], a), __fmul_rn(cl[g], b));
                    o[g] = __fadd_rn(__fmul_rn(o[g], a), __fmul_rn(oc, b));
                    bm[g] = nm;
                }
            }
        }
    }
    if (t < hd) {
        float* orow = out + (size_t)r * qd + (size_t)kvh * g_n * hd;
#pragma unroll
        for (int g = 0; g < MAX_GROUP; g++) {
            if (g >= g_n) break;
            orow[g * hd + t] = bl[g] > 0.0f ? __fdiv_rn(o[g], bl[g]) : o[g];
        }
    }
}
