// Row bookkeeping of the forward pass: KV writes into the paged cache, residual and bias adds,
// gathering rows. Plain float adds (`__fadd_rn`), as the CPU's `+=`.

// Key and value of row r to cache slot `slot[r]` (block id * 16 + offset) of one layer.
extern "C" __global__ void kv_write(const float* k, const float* v, const int* slot, int rows,
                                    int kv_dim, float* kc, float* vc) {
    pdl_enter();
    int r = blockIdx.x;
    if (r >= rows) return;
    size_t dst = (size_t)slot[r] * kv_dim, src = (size_t)r * kv_dim;
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        kc[dst + i] = k[src + i];
        vc[dst + i] = v[src + i];
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

// out[j] = x[idx[j]] (rows of n values)
extern "C" __global__ void gather_rows(const float* x, const int* idx, int n, float* out) {
    pdl_enter();
    int j = blockIdx.x;
    const float* src = x + (size_t)idx[j] * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[(size_t)j * n + i] = src[i];
}

// Cache slot copies (tree-draft rows moving to their positions), pairs (from, to) of cache
// indices, in order, for one layer; one thread block, pairs one after another.
extern "C" __global__ void kv_copy(const int* pairs, int n_pairs, int kv_dim, float* kc,
                                   float* vc) {
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
