// RMSNorm (`ops::rms_norm`): ss = canonical dot(x, x) (`canon::dot_ref`: element i into lane
// i % 16 with one FMA in ascending i, then the tree fold 8, 4, 2, 1), r = 1 / sqrt(ss / n + eps),
// out = (x * r) * w. One warp per row; lanes 0..15 are the 16 canonical lanes.
extern "C" __global__ void rms_norm(const float* x, const float* w, int n, float eps, int rows,
                                    float* out) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * n;
    float acc = 0.0f;
    if (lane < 16) {
        for (int i = lane; i < n; i += 16) acc = fmaf(xr[i], xr[i], acc);
    }
    for (int s = 8; s > 0; s >>= 1) {
        float other = __shfl_down_sync(FULL_MASK, acc, s);
        if (lane < s) acc = __fadd_rn(acc, other);
    }
    float ss = __shfl_sync(FULL_MASK, acc, 0);
    float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
    float* o = out + (size_t)row * n;
    for (int i = lane; i < n; i += 32) o[i] = __fmul_rn(__fmul_rn(xr[i], r), w[i]);
}
