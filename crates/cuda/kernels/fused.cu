// Fused row kernels: the same operations as the separate kernels, in the same order per value,
// in fewer launches.

// x += y, then out = rms_norm(x) (`add_into` then `rms_norm`, one launch): the sums are staged
// in shared memory and written back, then normalized as `rms_norm` does; with Q also quantized
// (`rms_norm_q`).
extern "C" __global__ void __launch_bounds__(RMS_THREADS)
    add_rms_norm(float* __restrict__ x, const float* __restrict__ y,
                 const float* __restrict__ w, int n, float eps, int rows,
                 float* __restrict__ out) {
    pdl_enter();
    rms_row<false, true>(x, y, x, w, n, eps, rows, out, 0, 0, nullptr, nullptr, nullptr);
}

extern "C" __global__ void __launch_bounds__(RMS_THREADS)
    add_rms_norm_q(float* __restrict__ x, const float* __restrict__ y,
                   const float* __restrict__ w, int n, float eps, int rows,
                   float* __restrict__ out, int bl, int sl, i8* qs, float* d, i16* sums) {
    pdl_enter();
    rms_row<true, true>(x, y, x, w, n, eps, rows, out, bl, sl, qs, d, sums);
}

// After the q/k/v matmuls of row r (`blockIdx.x`): biases added (`add_bias`; null = none),
// RoPE on q and k (`rope`), q written to `qo` (rows of n_heads * hd), k and v to cache slot
// slot[r] (`kv_write`). q, k, v are read with row strides (they may share one fused buffer).
// One pass, one item per thread: a rotary pair of a q or k head (both values biased, then
// rotated: the same operations as bias then RoPE), a v value, or a q / k value outside the
// rotary dimensions (biased only). Nothing is read back, so a thread's loads are all in
// flight at once.
#define QKV_POST_THREADS 1024
extern "C" __global__ void __launch_bounds__(QKV_POST_THREADS)
    qkv_post(const float* __restrict__ q, const float* __restrict__ k,
             const float* __restrict__ v, int q_stride, int k_stride, int v_stride,
             const float* __restrict__ bq, const float* __restrict__ bk,
             const float* __restrict__ bv, const int* __restrict__ pos,
             const int* __restrict__ slot, int n_heads, int n_kv_heads, int hd, int rot_dim,
             int style, const float* __restrict__ cs, float* __restrict__ qo,
             float* __restrict__ kc, float* __restrict__ vc) {
    pdl_enter();
    const int r = blockIdx.x;
    const int half = rot_dim / 2, rest = hd - rot_dim;
    const int qd = n_heads * hd, kvd = n_kv_heads * hd;
    const float* qr = q + (size_t)r * q_stride;
    const float* kr = k + (size_t)r * k_stride;
    const float* vr = v + (size_t)r * v_stride;
    const float* pcs = cs + (size_t)pos[r] * half * 2;
    float* qw = qo + (size_t)r * qd;
    float* kw = kc + (size_t)slot[r] * kvd;
    float* vw = vc + (size_t)slot[r] * kvd;
    const int qp = n_heads * half, kp = n_kv_heads * half;
    const int pairs = qp + kp, plain = (n_heads + n_kv_heads) * rest;
    for (int u = threadIdx.x; u < pairs + kvd + plain; u += blockDim.x) {
        if (u < pairs) {
            const bool isq = u < qp;
            const int e = isq ? u : u - qp, h = e / half, i = e % half;
            const float* src = (isq ? qr : kr) + (size_t)h * hd;
            const float* bias = isq ? bq : bk;
            float* dst = (isq ? qw : kw) + (size_t)h * hd;
            const int a = style == 0 ? 2 * i : i;
            const int b = style == 0 ? 2 * i + 1 : i + half;
            float x0 = src[a], x1 = src[b];
            if (bias) {
                x0 = __fadd_rn(x0, bias[(size_t)h * hd + a]);
                x1 = __fadd_rn(x1, bias[(size_t)h * hd + b]);
            }
            const float c = pcs[2 * i], s = pcs[2 * i + 1];
            dst[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            dst[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        } else if (u < pairs + kvd) {
            const int e = u - pairs;
            float x = vr[e];
            if (bv) x = __fadd_rn(x, bv[e]);
            vw[e] = x;
        } else {
            const int e = u - pairs - kvd, hh = e / rest, j = rot_dim + e % rest;
            const bool isq = hh < n_heads;
            const int h = isq ? hh : hh - n_heads;
            const size_t at = (size_t)h * hd + j;
            float x = (isq ? qr : kr)[at];
            const float* bias = isq ? bq : bk;
            if (bias) x = __fadd_rn(x, bias[at]);
            (isq ? qw : kw)[at] = x;
        }
    }
}

// out[r * f + i] = silu(gu[r * 2f + i]) * gu[r * 2f + f + i] (`swiglu` over a fused gate|up
// output).
extern "C" __global__ void swiglu_fused(const float* gu, int f, int rows, float* out) {
    pdl_enter();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * f) return;
    int r = i / f, c = i % f;
    float g = gu[(size_t)r * 2 * f + c];
    float e = canon_exp(-g);
    float s = __fdiv_rn(g, __fadd_rn(1.0f, e));
    out[i] = __fmul_rn(s, gu[(size_t)r * 2 * f + f + c]);
}

// `swiglu_fused`, then its output quantized as `actq` does: one warp per block of `bl` values
// of a row (f a multiple of bl), which it computes, writes and quantizes.
extern "C" __global__ void swiglu_fused_q(const float* __restrict__ gu, int f, int rows,
                                          float* __restrict__ out, int bl, int sl, i8* qs,
                                          float* d, i16* sums) {
    pdl_enter();
    __shared__ float vs[4][256];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = blockIdx.x * 4 + w, per_row = f / bl;
    if (b >= rows * per_row) return;  // whole warps leave together
    const int r = b / per_row, c0 = (b % per_row) * bl;
    const float* g = gu + (size_t)r * 2 * f + c0;
    const float* u = g + f;
    // Every load of the lane (bl / 32 <= 8 gate and up values) before any is used.
    float gv[8], uv[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        if (lane + 32 * j < bl) {
            gv[j] = g[lane + 32 * j];
            uv[j] = u[lane + 32 * j];
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int i = lane + 32 * j;
        if (i < bl) {
            float e = canon_exp(-gv[j]);
            float s = __fdiv_rn(gv[j], __fadd_rn(1.0f, e));
            float v = __fmul_rn(s, uv[j]);
            out[(size_t)r * f + c0 + i] = v;
            vs[w][i] = v;
        }
    }
    __syncwarp();
    actq_block(vs[w], bl, sl, lane, qs + (size_t)b * bl, d + b, sums + (size_t)b * (bl / sl));
}
