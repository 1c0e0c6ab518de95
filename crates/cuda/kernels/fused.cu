// Fused row kernels: the same operations as the separate kernels, in the same order per value,
// in fewer launches.

// x += y, then out = rms_norm(x) (`add_into` then `rms_norm`, one launch): the sums are staged
// in shared memory and written back, then normalized as `rms_norm` does; with Q also quantized
// (`rms_norm_q`).
template <bool Q>
__device__ __forceinline__ void add_rms_norm_row(float* __restrict__ x, const float* __restrict__ y,
                                                 const float* __restrict__ w, int n, float eps,
                                                 int rows, float* __restrict__ out, int bl,
                                                 int sl, i8* qs, float* d, i16* sums) {
    __shared__ float xs[RMS_MAX];
    __shared__ float r;
    const int row = blockIdx.x;
    if (row >= rows) return;
    float* xr = x + (size_t)row * n;
    const float* yr = y + (size_t)row * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = __fadd_rn(xr[i], yr[i]);
        xs[i] = v;
        xr[i] = v;
    }
    __syncthreads();
    if (Q) {
        rms_finish<true>(xs, w, n, eps, &r, out + (size_t)row * n, bl, sl, RMS_Q_ROW(row));
    } else {
        rms_finish<false>(xs, w, n, eps, &r, out + (size_t)row * n, 0, 0, nullptr, nullptr,
                          nullptr);
    }
}

extern "C" __global__ void add_rms_norm(float* __restrict__ x, const float* __restrict__ y,
                                        const float* __restrict__ w, int n, float eps, int rows,
                                        float* __restrict__ out) {
    add_rms_norm_row<false>(x, y, w, n, eps, rows, out, 0, 0, nullptr, nullptr, nullptr);
}

extern "C" __global__ void add_rms_norm_q(float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ w, int n, float eps,
                                          int rows, float* __restrict__ out, int bl, int sl,
                                          i8* qs, float* d, i16* sums) {
    add_rms_norm_row<true>(x, y, w, n, eps, rows, out, bl, sl, qs, d, sums);
}

// After the q/k/v matmuls of row r (`blockIdx.x`): biases added (`add_bias`; null = none),
// RoPE on q and k (`rope`), q written to `qo` (rows of n_heads * hd), k and v to cache slot
// slot[r] (`kv_write`). q, k, v are read with row strides (they may share one fused buffer).
extern "C" __global__ void qkv_post(const float* q, const float* k, const float* v, int q_stride,
                                    int kv_stride,
                                    const float* bq, const float* bk, const float* bv,
                                    const int* pos, const int* slot, int n_heads,
                                    int n_kv_heads, int hd, int rot_dim, int style,
                                    const float* cs, float* qo, float* kc, float* vc) {
    const int r = blockIdx.x;
    const int half = rot_dim / 2;
    const int qd = n_heads * hd, kvd = n_kv_heads * hd;
    const float* qr = q + (size_t)r * q_stride;
    const float* kr = k + (size_t)r * kv_stride;
    const float* vr = v + (size_t)r * kv_stride;
    const float* pcs = cs + (size_t)pos[r] * half * 2;
    float* qw = qo + (size_t)r * qd;
    float* kw = kc + (size_t)slot[r] * kvd;
    float* vw = vc + (size_t)slot[r] * kvd;
    // Values outside the rotary pairs (rot_dim < hd) keep their biased value.
    for (int i = threadIdx.x; i < qd; i += blockDim.x) {
        float a = qr[i];
        if (bq) a = __fadd_rn(a, bq[i]);
        qw[i] = a;
    }
    for (int i = threadIdx.x; i < kvd; i += blockDim.x) {
        float a = kr[i];
        if (bk) a = __fadd_rn(a, bk[i]);
        kw[i] = a;
        float b = vr[i];
        if (bv) b = __fadd_rn(b, bv[i]);
        vw[i] = b;
    }
    __syncthreads();
    const int qpairs = n_heads * half, kpairs = n_kv_heads * half;
    for (int t = threadIdx.x; t < qpairs + kpairs; t += blockDim.x) {
        bool isq = t < qpairs;
        int u = isq ? t : t - qpairs;
        int i = u % half, h = u / half;
        float* head = (isq ? qw : kw) + (size_t)h * hd;
        float c = pcs[2 * i], s = pcs[2 * i + 1];
        int a = style == 0 ? 2 * i : i;
        int b = style == 0 ? 2 * i + 1 : i + half;
        float x0 = head[a], x1 = head[b];
        head[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        head[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

// out[r * f + i] = silu(gu[r * 2f + i]) * gu[r * 2f + f + i] (`swiglu` over a fused gate|up
// output).
extern "C" __global__ void swiglu_fused(const float* gu, int f, int rows, float* out) {
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
extern "C" __global__ void swiglu_fused_q(const float* gu, int f, int rows, float* out, int bl,
                                          int sl, i8* qs, float* d, i16* sums) {
    __shared__ float vs[4][256];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = blockIdx.x * 4 + w, per_row = f / bl;
    if (b >= rows * per_row) return;  // whole warps leave together
    const int r = b / per_row, c0 = (b % per_row) * bl;
    for (int i = lane; i < bl; i += 32) {
        float g = gu[(size_t)r * 2 * f + c0 + i];
        float e = canon_exp(-g);
        float s = __fdiv_rn(g, __fadd_rn(1.0f, e));
        float v = __fmul_rn(s, gu[(size_t)r * 2 * f + f + c0 + i]);
        out[(size_t)r * f + c0 + i] = v;
        vs[w][i] = v;
    }
    __syncwarp();
    actq_block(vs[w], bl, sl, lane, qs + (size_t)b * bl, d + b, sums + (size_t)b * (bl / sl));
}
