// SwiGLU (`canon::swiglu`): out = silu(gate) * up, silu(x) = x / (1 + exp(-x)) with the
// canonical exponential (`canon::exp`: range reduction by ln 2, degree-6 polynomial, each step
// one FMA). Constants are given by their bits, as the CPU's f32 literals round them.

__device__ __forceinline__ float canon_exp(float x) {
    if (!(x > -87.0f)) return 0.0f;
    x = fminf(x, 88.0f);
    const float LOG2E = __int_as_float(0x3fb8aa3b);
    const float LN2_HI = __int_as_float(0x3f317200);
    const float LN2_LO = __int_as_float(0x35bfbe8e);
    float n = rintf(__fmul_rn(x, LOG2E));
    float r = fmaf(n, -LN2_HI, x);
    r = fmaf(n, -LN2_LO, r);
    float p = __int_as_float(0x3ab60b61);       // 1/720
    p = fmaf(p, r, __int_as_float(0x3c088889));  // 1/120
    p = fmaf(p, r, __int_as_float(0x3d2aaaab));  // 1/24
    p = fmaf(p, r, __int_as_float(0x3e2aaaab));  // 1/6
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    float scale = __uint_as_float((u32)((int)n + 127) << 23);
    return __fmul_rn(p, scale);
}

extern "C" __global__ void swiglu(const float* gate, const float* up, int len, float* out) {
    pdl_enter();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    float g = gate[i];
    float e = canon_exp(-g);
    float s = __fdiv_rn(g, __fadd_rn(1.0f, e));
    out[i] = __fmul_rn(s, up[i]);
}
