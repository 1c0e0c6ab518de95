// Gated DeltaNet's delta rule (`tf_kernels::deltanet::delta_rule`), bit for bit: one block per
// value head, one thread per value lane j, tokens in order. Per token, with decay = exp(g)
// (`canon_exp`):
//   s_i = S[i][j] * decay;  kv = fma(s_i, k_i, kv)      i ascending, kv from 0
//   d   = beta * (v_j - kv)
//   S[i][j] = fma(k_i, d, s_i);  o = fma(S[i][j], q_i, o)   i ascending, o from 0
// The CPU decays the whole state, then sums, then updates, then reads: per lane the same
// operations in the same order. Explicit _rn intrinsics keep NVRTC from contracting.
extern "C" __global__ void delta_rule(const float* __restrict__ q,
                                      const float* __restrict__ k,
                                      const float* __restrict__ v,
                                      const float* __restrict__ g,
                                      const float* __restrict__ beta,
                                      float* __restrict__ state, float* __restrict__ out,
                                      int tokens, int k_heads, int v_heads, int dk, int dv,
                                      int tiled) {
    pdl_enter();
    const int h = blockIdx.x;
    const int j = threadIdx.x;
    if (h >= v_heads || j >= dv) return;
    // Tiled: value head h reads key head h % k_heads; grouped: h / (v_heads / k_heads).
    const int kh = tiled ? h % k_heads : h / (v_heads / k_heads);
    const int kw = k_heads * dk, vw = v_heads * dv;
    float* s = state + (size_t)h * dk * dv + j;
    for (int t = 0; t < tokens; t++) {
        const float* qt = q + (size_t)t * kw + kh * dk;
        const float* kt = k + (size_t)t * kw + kh * dk;
        const float decay = canon_exp(g[(size_t)t * v_heads + h]);
        float kv = 0.0f;
        for (int i = 0; i < dk; i++) {
            const float si = __fmul_rn(s[(size_t)i * dv], decay);
            s[(size_t)i * dv] = si;
            kv = fmaf(si, kt[i], kv);
        }
        const float d = __fmul_rn(beta[(size_t)t * v_heads + h],
                                  __fsub_rn(v[(size_t)t * vw + h * dv + j], kv));
        float o = 0.0f;
        for (int i = 0; i < dk; i++) {
            const float si = fmaf(kt[i], d, s[(size_t)i * dv]);
            s[(size_t)i * dv] = si;
            o = fmaf(si, qt[i], o);
        }
        out[(size_t)t * vw + h * dv + j] = o;
    }
}
