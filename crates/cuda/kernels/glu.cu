// The gated activations (`canon::swiglu`, `canon::geglu`): out = act(gate) * up, with
// act = silu(x) = x / (1 + exp(-x)) or the tanh form of GELU, x / (1 + exp(-2u)) with
// u = c (x + k x^3), both by the canonical exponential (`canon::exp`: range reduction by ln 2,
// degree-6 polynomial, each step one FMA), and `canon::tanh` for soft-capping. Constants are
// given by their bits, as the CPU's f32 literals round them.

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

// `canon::tanh`: 1 - 2 / (1 + exp(2x)).
__device__ __forceinline__ float canon_tanh(float x) {
    return __fsub_rn(1.0f, __fdiv_rn(2.0f, __fadd_rn(1.0f, canon_exp(__fmul_rn(2.0f, x)))));
}

// `cap * tanh(x / cap)` (soft-capping of attention scores and of logits).
__device__ __forceinline__ float soft_cap_value(float x, float cap) {
    return __fmul_rn(cap, canon_tanh(__fdiv_rn(x, cap)));
}

// The gated activation of a gate value g and an up value u: act 0 = SwiGLU, silu(g) * u
// (`canon::silu`); 1 = GeGLU, gelu(g) * u (`canon::gelu_tanh`, GELU_C = 0.7978846,
// GELU_K = 0.044715); 2 = gpt-oss's clamped SwiGLU (`ops::swiglu_oai`, alpha 1.702, limit 7):
// g' = min(g, 7), u' = clamp(u, -7, 7) (a NaN stays), g' / (1 + exp(-alpha g')) * (u' + 1).
#define GLU_SILU 0
#define GLU_GELU_TANH 1
#define GLU_OAI 2
__device__ __forceinline__ float glu_out(float g, float u, int act) {
    if (act == GLU_SILU) return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, canon_exp(-g))), u);
    if (act == GLU_OAI) {
        const float lim = 7.0f, alpha = __int_as_float(0x3fd9db23);  // 1.702
        const float gc = fminf(g, lim);
        const float uc = u != u ? u : fminf(fmaxf(u, -lim), lim);
        const float s = __fdiv_rn(gc, __fadd_rn(1.0f, canon_exp(__fmul_rn(-alpha, gc))));
        return __fmul_rn(s, __fadd_rn(uc, 1.0f));
    }
    const float x3 = __fmul_rn(__fmul_rn(g, g), g);
    const float c = __int_as_float(0x3f4c422a), k = __int_as_float(0x3d372713);
    const float t = __fmul_rn(c, __fadd_rn(g, __fmul_rn(k, x3)));
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, canon_exp(__fmul_rn(-2.0f, t)))), u);
}

extern "C" __global__ void glu(const float* gate, const float* up, int len, int act, float* out) {
    pdl_enter();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    out[i] = glu_out(gate[i], up[i], act);
}
