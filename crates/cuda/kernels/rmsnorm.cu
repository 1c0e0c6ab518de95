// RMSNorm (`ops::rms_norm`): ss = canonical dot(x, x) (`canon::dot_ref`: element i into lane
// i % 16 with one FMA in ascending i, then the tree fold 8, 4, 2, 1), r = 1 / sqrt(ss / n + eps),
// out = (x * r) * w. One thread block per row: the row is staged in shared memory by all
// threads, then lanes 0..15 of warp 0 run the canonical chain.

#define RMS_MAX 8192

// The canonical sum of squares of xs[0..n) (called by all of warp 0; lane 0's value is it).
__device__ __forceinline__ float rms_chain(const float* xs, int n, int lane) {
    float acc = 0.0f;
    if (lane < 16) {
#pragma unroll 8
        for (int i = lane; i < n; i += 16) acc = fmaf(xs[i], xs[i], acc);
    }
    for (int s = 8; s > 0; s >>= 1) {
        float other = __shfl_down_sync(FULL_MASK, acc, s);
        if (lane < s) acc = __fadd_rn(acc, other);
    }
    return acc;
}

// Normalizes the staged row xs into out (after rms_chain's result is in *r_shared). With Q, the
// normalized row is also quantized (`actq`'s rules, blocks of `bl`, sums of `sl`) into
// qs / d / sums (this row's part), from the very floats written to out.
template <bool Q>
__device__ __forceinline__ void rms_finish(float* xs, const float* __restrict__ w, int n,
                                           float eps, float* r_shared, float* __restrict__ out,
                                           int bl, int sl, i8* qs, float* d, i16* sums) {
    const int t = threadIdx.x;
    if (t < 32) {
        float ss = rms_chain(xs, n, t);
        if (t == 0) *r_shared = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
    }
    __syncthreads();
    const float r = *r_shared;
    for (int i = t; i < n; i += blockDim.x) {
        const float v = __fmul_rn(__fmul_rn(xs[i], r), w[i]);
        out[i] = v;
        if (Q) xs[i] = v;
    }
    if (Q) {
        __syncthreads();
        actq_row(xs, n, bl, sl, qs, d, sums);
    }
}

// The quantized outputs of row `row` (`rms_finish`'s qs / d / sums).
#define RMS_Q_ROW(row) \
    qs + (size_t)(row) * n, d + (size_t)(row) * (n / bl), sums + (size_t)(row) * (n / sl)

extern "C" __global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ w,
                                    int n, float eps, int rows, float* __restrict__ out) {
    __shared__ float xs[RMS_MAX];
    __shared__ float r;
    const int row = blockIdx.x;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = xr[i];
    __syncthreads();
    rms_finish<false>(xs, w, n, eps, &r, out + (size_t)row * n, 0, 0, nullptr, nullptr, nullptr);
}

// `rms_norm`, then its output quantized as `actq` does (one launch instead of two).
extern "C" __global__ void rms_norm_q(const float* __restrict__ x, const float* __restrict__ w,
                                      int n, float eps, int rows, float* __restrict__ out, int bl,
                                      int sl, i8* qs, float* d, i16* sums) {
    __shared__ float xs[RMS_MAX];
    __shared__ float r;
    const int row = blockIdx.x;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = xr[i];
    __syncthreads();
    rms_finish<true>(xs, w, n, eps, &r, out + (size_t)row * n, bl, sl, RMS_Q_ROW(row));
}
