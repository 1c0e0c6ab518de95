// RMSNorm (`ops::rms_norm`): ss = canonical dot(x, x) (`canon::dot_ref`: element i into lane
// i % 16 with one FMA in ascending i, then the tree fold 8, 4, 2, 1), r = 1 / sqrt(ss / n + eps),
// out = (x * r) * w. One thread block of RMS_THREADS per row: the row is staged in shared memory
// by all threads, then lanes 0..15 of warp 0 run the canonical chain. A decode step has one
// row, so the kernels are written for latency: rows of a multiple of 4 values move as float4,
// each thread issues all its loads (x, y, w) before using any, and the weights are in
// registers before the chain ends (loaded before `pdl_enter`: they are constant).

#define RMS_MAX 8192
#define RMS_THREADS 1024
#define RMS_V4 (RMS_MAX / 4 / RMS_THREADS)  // float4s per thread at most

// x (+ y) of one row into xs (and written back to xw, which may be x), w's float4s into wv
// (when n % 4 == 0; otherwise wv is unused). Returns whether the float4 path ran.
__device__ __forceinline__ bool rms_stage(const float* x, const float* __restrict__ y, float* xw,
                                          const float* __restrict__ w,
                                          int n, float* xs, float4 (&wv)[RMS_V4]) {
    const int t = threadIdx.x;
    if ((n & 3) == 0) {
        const int n4 = n / 4;
        float4 a[RMS_V4], b[RMS_V4];
        // The weights are constant: loaded before waiting for the kernel that writes x, y.
#pragma unroll
        for (int j = 0; j < RMS_V4; j++) {
            const int i = t + j * RMS_THREADS;
            if (i < n4) wv[j] = reinterpret_cast<const float4*>(w)[i];
        }
        pdl_enter();
#pragma unroll
        for (int j = 0; j < RMS_V4; j++) {
            const int i = t + j * RMS_THREADS;
            if (i < n4) {
                a[j] = reinterpret_cast<const float4*>(x)[i];
                if (y) b[j] = reinterpret_cast<const float4*>(y)[i];
            }
        }
#pragma unroll
        for (int j = 0; j < RMS_V4; j++) {
            const int i = t + j * RMS_THREADS;
            if (i < n4) {
                float4 v = a[j];
                if (y) {
                    v.x = __fadd_rn(v.x, b[j].x);
                    v.y = __fadd_rn(v.y, b[j].y);
                    v.z = __fadd_rn(v.z, b[j].z);
                    v.w = __fadd_rn(v.w, b[j].w);
                }
                reinterpret_cast<float4*>(xs)[i] = v;
                if (xw) reinterpret_cast<float4*>(xw)[i] = v;
            }
        }
        return true;
    }
    pdl_enter();
    for (int i = t; i < n; i += RMS_THREADS) {
        float v = x[i];
        if (y) v = __fadd_rn(v, y[i]);
        xs[i] = v;
        if (xw) xw[i] = v;
    }
    return false;
}

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

// Normalizes the staged row xs into out (`wv`: w's float4s when `v4`, else w is read). With
// Q, the normalized row is also quantized (`actq`'s rules, blocks of `bl`, sums of `sl`) into
// qs / d / sums (this row's part), from the very floats written to out.
template <bool Q>
__device__ __forceinline__ void rms_finish(float* xs, const float* __restrict__ w, bool v4,
                                           const float4 (&wv)[RMS_V4], int n, float eps,
                                           float* r_shared, float* __restrict__ out, int bl,
                                           int sl, i8* qs, float* d, i16* sums, i8* qf,
                                           int row) {
    const int t = threadIdx.x;
    __syncthreads();  // the row is staged
    if (t < 32) {
        float ss = rms_chain(xs, n, t);
        if (t == 0) *r_shared = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
    }
    __syncthreads();
    const float r = *r_shared;
    if (v4) {
#pragma unroll
        for (int j = 0; j < RMS_V4; j++) {
            const int i = t + j * RMS_THREADS;
            if (i < n / 4) {
                const float4 x = reinterpret_cast<const float4*>(xs)[i];
                float4 v;
                v.x = __fmul_rn(__fmul_rn(x.x, r), wv[j].x);
                v.y = __fmul_rn(__fmul_rn(x.y, r), wv[j].y);
                v.z = __fmul_rn(__fmul_rn(x.z, r), wv[j].z);
                v.w = __fmul_rn(__fmul_rn(x.w, r), wv[j].w);
                reinterpret_cast<float4*>(out)[i] = v;
                if (Q) reinterpret_cast<float4*>(xs)[i] = v;
            }
        }
    } else {
        for (int i = t; i < n; i += RMS_THREADS) {
            const float v = __fmul_rn(__fmul_rn(xs[i], r), w[i]);
            out[i] = v;
            if (Q) xs[i] = v;
        }
    }
    if (Q) {
        __syncthreads();
        actq_row(xs, n, bl, sl, qs, d, sums, qf, row);
    }
}

// One row (`blockIdx.x`) of the RMSNorm kernels: x (with ADD, + y, written back to xw) is
// staged, normalized into out and, with Q, quantized into qs / d / sums.
template <bool Q, bool ADD>
__device__ __forceinline__ void rms_row(const float* x, const float* __restrict__ y, float* xw,
                                        const float* __restrict__ w, int n, float eps, int rows,
                                        float* __restrict__ out, int bl, int sl, i8* qs, float* d,
                                        i16* sums, i8* qf) {
    __shared__ __align__(16) float xs[RMS_MAX];
    __shared__ float r;
    const int row = blockIdx.x;
    if (row >= rows) {
        pdl_enter();
        return;
    }
    const size_t at = (size_t)row * n;
    float4 wv[RMS_V4];
    const bool v4 =
        rms_stage(x + at, ADD ? y + at : nullptr, ADD ? xw + at : nullptr, w, n, xs, wv);
    if (Q) {
        rms_finish<true>(xs, w, v4, wv, n, eps, &r, out + at, bl, sl, qs + at,
                         d + (size_t)row * (n / bl), sums + (size_t)row * (n / sl), qf, row);
    } else {
        rms_finish<false>(xs, w, v4, wv, n, eps, &r, out + at, 0, 0, nullptr, nullptr, nullptr,
                          nullptr, row);
    }
}

extern "C" __global__ void __launch_bounds__(RMS_THREADS)
    rms_norm(const float* __restrict__ x, const float* __restrict__ w, int n, float eps, int rows,
             float* __restrict__ out) {
    rms_row<false, false>(x, nullptr, nullptr, w, n, eps, rows, out, 0, 0, nullptr, nullptr, nullptr,
                          nullptr);
}

// `rms_norm`, then its output quantized as `actq` does (one launch instead of two).
extern "C" __global__ void __launch_bounds__(RMS_THREADS)
    rms_norm_q(const float* __restrict__ x, const float* __restrict__ w, int n, float eps,
               int rows, float* __restrict__ out, int bl, int sl, i8* qs, float* d, i16* sums,
               i8* qf) {
    rms_row<true, false>(x, nullptr, nullptr, w, n, eps, rows, out, bl, sl, qs, d, sums, qf);
}
