// Row bookkeeping of the forward pass: KV writes into the paged cache, residual and bias adds,
// gathering rows. Plain float adds (`__fadd_rn`), as the CPU's `+=`.

// Key and value of row r to cache slot `slot[r]` (block id * 16 + offset) of one layer.
extern "C" __global__ void kv_write(const float* k, const float* v, const int* slot, int rows,
                                    int kv_dim, kv_t* kc, kv_t* vc) {
    pdl_enter();
    int r = blockIdx.x;
    if (r >= rows) return;
    size_t dst = (size_t)slot[r] * kv_dim, src = (size_t)r * kv_dim;
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        kc[dst + i] = kv_put(k[src + i]);
        vc[dst + i] = kv_put(v[src + i]);
    }
}

// x[i] += y[i]
extern "C" __global__ void add_into(float* x, const float* y, int len) {
    pdl_enter();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len) x[i] = __fadd_rn(x[i], y[i]);
}

// x[r * n + i] += b[i]
extern "C" __global__ void add_bias(float* x, const float* b, int rows, int n) {
    pdl_enter();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * n) x[i] = __fadd_rn(x[i], b[i % n]);
}

// x[i] = cap * tanh(x[i] / cap) where x[i] is finite (final-logit soft-capping; a pruned
// head's -inf stays -inf).
extern "C" __global__ void soft_cap(float* x, int len, float cap) {
    pdl_enter();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len && (__float_as_uint(x[i]) & 0x7f800000u) != 0x7f800000u)
        x[i] = soft_cap_value(x[i], cap);
}

// out[j] = x[idx[j]] (rows of n values)
extern "C" __global__ void gather_rows(const float* x, const int* idx, int n, float* out) {
    pdl_enter();
    int j = blockIdx.x;
    const float* src = x + (size_t)idx[j] * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[(size_t)j * n + i] = src[i];
}

// out[idx[j]] = x[j] (rows of n values): an expert's output rows to their (row, rank) places.
extern "C" __global__ void scatter_rows(const float* x, const int* idx, int n, float* out) {
    pdl_enter();
    int j = blockIdx.x;
    float* dst = out + (size_t)idx[j] * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = x[(size_t)j * n + i];
}

// A mixture's output (`moe::combine`): out[r][i] = sum over ranks j of w[r][j] * ys[r][j][i],
// from zero in rank order, each term one rounded multiply and one rounded add.
extern "C" __global__ void moe_combine(const float* ys, const float* w, int rows, int k, int n,
                                       float* out) {
    pdl_enter();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * n) return;
    const int r = i / n, c = i % n;
    float o = 0.0f;
    for (int j = 0; j < k; j++)
        o = __fadd_rn(o, __fmul_rn(w[r * k + j], ys[((size_t)r * k + j) * n + c]));
    out[i] = o;
}

// Cache slot copies (tree-draft rows moving to their positions), pairs (from, to) of cache
// indices, in order, for one layer; one thread block, pairs one after another.
extern "C" __global__ void kv_copy(const int* pairs, int n_pairs, int kv_dim, kv_t* kc,
                                   kv_t* vc) {
    pdl_enter();
    for (int p = 0; p < n_pairs; p++) {
        size_t f = (size_t)pairs[2 * p] * kv_dim, t = (size_t)pairs[2 * p + 1] * kv_dim;
        for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
            kc[t + i] = kc[f + i];
            vc[t + i] = vc[f + i];
        }
        __syncthreads();
    }
}

// Takes (v, i) over (bv, bi) when it is higher, or equal with a lower index.
__device__ __forceinline__ void argmax_take(float& bv, int& bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

// The greedy token of rows first .. first + gridDim.x of x (n values each) into out: the highest
// value, NaN counting as -inf, the lowest index among equal maxima (-0.0 equals +0.0), 0 when no
// value is above -inf (the host's `greedy_token`). Only comparisons, so the reduction's order
// cannot change the index. One block of ARGMAX_THREADS per row.
#define ARGMAX_THREADS 512
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_rows(const float* x, int n, int first, int* out) {
    pdl_enter();
    const float neg_inf = __int_as_float(0xff800000);
    const float* row = x + (size_t)(first + blockIdx.x) * n;
    float bv = neg_inf;
    int bi = n;  // a NaN is never taken: neither above nor equal to anything
    if ((n & 3) == 0) {
        // Eight loads in flight per thread before any comparison.
        const float4* r4 = reinterpret_cast<const float4*>(row);
        const int n4 = n / 4, step = blockDim.x;
        for (int j0 = threadIdx.x; j0 < n4; j0 += 8 * step) {
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (j0 + u * step < n4) v[u] = r4[j0 + u * step];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int j = j0 + u * step;
                if (j < n4) {
                    argmax_take(bv, bi, v[u].x, 4 * j);
                    argmax_take(bv, bi, v[u].y, 4 * j + 1);
                    argmax_take(bv, bi, v[u].z, 4 * j + 2);
                    argmax_take(bv, bi, v[u].w, 4 * j + 3);
                }
            }
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) argmax_take(bv, bi, row[i], i);
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_down_sync(0xffffffffu, bv, o);
        int oi = __shfl_down_sync(0xffffffffu, bi, o);
        argmax_take(bv, bi, ov, oi);
    }
    __shared__ float sv[32];
    __shared__ int si[32];
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        sv[w] = bv;
        si[w] = bi;
    }
    __syncthreads();
    if (w == 0) {
        int warps = blockDim.x >> 5;
        bv = lane < warps ? sv[lane] : neg_inf;
        bi = lane < warps ? si[lane] : n;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_down_sync(0xffffffffu, bv, o);
            int oi = __shfl_down_sync(0xffffffffu, bi, o);
            argmax_take(bv, bi, ov, oi);
        }
        if (lane == 0) out[blockIdx.x] = bv > neg_inf ? bi : 0;
    }
}

// Every f16 through `f16_to_f32` (`gpu-check`): out[i] = the float of bits i, i < 65,536.
extern "C" __global__ void f16_table(float* out) {
    pdl_enter();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 65536) out[i] = f16_to_f32((u16)i);
}
