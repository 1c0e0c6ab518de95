// Fused row kernels: the same operations as the separate kernels, in the same order per value,
// in fewer launches.

// x += y, then out = rms_norm(x) (`add_into` then `rms_norm`, one launch): the sums are staged
// in shared memory and written back, then normalized as `rms_norm` does; with Q also quantized
// (`rms_norm_q`).
extern "C" __global__ void __launch_bounds__(RMS_THREADS)
    add_rms_norm(float* __restrict__ x, const float* __restrict__ y,
                 const float* __restrict__ w, int n, float eps, int rows,
                 float* __restrict__ out) {
    rms_row<false, true>(x, y, x, w, n, eps, rows, out, 0, 0, nullptr, nullptr, nullptr, nullptr);
}

// Held to 48 registers (launched with RMS_THREADS = 1024 threads; `__maxnreg__` replaces the
// launch bounds). Once it also wrote the min-sum records (actq.cu) ptxas gave it 58, and the
// one-row decode of the 1.5B shape fell from 870 to 846 tok/s (H200); at 48 (no spills) it is
// back at 867-870. Likely why: 1,024 x 58 registers is nearly a multiprocessor's whole file,
// so a block launched early (programmatic dependent launch) waits for almost every block of
// the kernel before it to leave.
extern "C" __global__ void __maxnreg__(48)
    add_rms_norm_q(float* __restrict__ x, const float* __restrict__ y,
                   const float* __restrict__ w, int n, float eps, int rows,
                   float* __restrict__ out, int bl, int sl, i8* qs, float* d, i16* sums,
                   i8* qf) {
    rms_row<true, true>(x, y, x, w, n, eps, rows, out, bl, sl, qs, d, sums, qf);
}

// After the q/k/v matmuls of row r (`blockIdx.x`): biases added (`add_bias`; null = none),
// RoPE on q and k (`rope`), q written to `qo` (rows of n_heads * hd), k and v to cache slot
// slot[r] (`kv_write`). q, k, v are read with row strides (they may share one fused buffer).
// One item per thread at a time: a rotary pair of a q or k head (both values biased, then
// rotated: the same operations as bias then RoPE), a v value, or a q / k value outside the
// rotary dimensions (biased only; `pair` false, the second value unused).
#define QKV_POST_THREADS 1024
#define QP_EARLY 3  // items per thread whose constants are read before `pdl_enter`

// Item u: where its one or two values come from and go, and its constants (biases, cos, sin).
struct QpItem {
    int src0, src1;  // offsets into the q, k or v row (`from`: 0, 1, 2)
    float* dst0;  // q items: where their values go in `qo`
    float* dst1;
    kv_t* kdst0;  // k and v items: where their values go in the cache (converted by kv_put)
    kv_t* kdst1;
    float b0, b1, c, s;
    int from;
    bool pair, biased;
};

struct QpArgs {
    const float* bq;
    const float* bk;
    const float* bv;
    const float* pcs;  // this row's cos / sin pairs
    float* qw;
    kv_t* kw;
    kv_t* vw;
    int n_heads, hd, rot_dim, style, qp, pairs, kvd;
};

// Reads only constants (the biases, the RoPE table) and the host-written position and slot.
__device__ __forceinline__ QpItem qp_item(const QpArgs& a, int u) {
    QpItem it;
    const int half = a.rot_dim / 2, rest = a.hd - a.rot_dim;
    it.b0 = it.b1 = 0.0f;
    it.c = it.s = 0.0f;
    if (u < a.pairs) {
        const bool isq = u < a.qp;
        const int e = isq ? u : u - a.qp, h = e / half, i = e % half;
        const int x = a.style == 0 ? 2 * i : i;
        const int y = a.style == 0 ? 2 * i + 1 : i + half;
        const float* bias = isq ? a.bq : a.bk;
        const size_t at = (size_t)h * a.hd;
        it.from = isq ? 0 : 1;
        it.src0 = h * a.hd + x;
        it.src1 = h * a.hd + y;
        it.dst0 = isq ? a.qw + at + x : nullptr;
        it.dst1 = isq ? a.qw + at + y : nullptr;
        it.kdst0 = isq ? nullptr : a.kw + at + x;
        it.kdst1 = isq ? nullptr : a.kw + at + y;
        it.biased = bias != nullptr;
        if (bias) {
            it.b0 = bias[it.src0];
            it.b1 = bias[it.src1];
        }
        it.c = a.pcs[2 * i];
        it.s = a.pcs[2 * i + 1];
        it.pair = true;
    } else if (u < a.pairs + a.kvd) {
        const int e = u - a.pairs;
        it.from = 2;
        it.src0 = it.src1 = e;
        it.dst0 = it.dst1 = nullptr;
        it.kdst0 = it.kdst1 = a.vw + e;
        it.biased = a.bv != nullptr;
        if (a.bv) it.b0 = a.bv[e];
        it.pair = false;
    } else {
        const int e = u - a.pairs - a.kvd, hh = e / rest, j = a.rot_dim + e % rest;
        const bool isq = hh < a.n_heads;
        const int h = isq ? hh : hh - a.n_heads;
        const float* bias = isq ? a.bq : a.bk;
        it.from = isq ? 0 : 1;
        it.src0 = it.src1 = h * a.hd + j;
        it.dst0 = it.dst1 = isq ? a.qw + it.src0 : nullptr;
        it.kdst0 = it.kdst1 = isq ? nullptr : a.kw + it.src0;
        it.biased = bias != nullptr;
        if (bias) it.b0 = bias[it.src0];
        it.pair = false;
    }
    return it;
}

// Value x to where the item's value `second` goes: q as it is, a cache value converted.
__device__ __forceinline__ void qp_put(const QpItem& it, bool second, float x) {
    if (it.dst0)
        *(second ? it.dst1 : it.dst0) = x;
    else
        *(second ? it.kdst1 : it.kdst0) = kv_put(x);
}

// The item's values read, biased (where there is a bias), rotated (pairs) and written.
__device__ __forceinline__ void qp_apply(const QpItem& it, const float* qr, const float* kr,
                                         const float* vr) {
    const float* src = it.from == 0 ? qr : it.from == 1 ? kr : vr;
    float x0 = src[it.src0];
    if (it.pair) {
        float x1 = src[it.src1];
        if (it.biased) {
            x0 = __fadd_rn(x0, it.b0);
            x1 = __fadd_rn(x1, it.b1);
        }
        qp_put(it, false, __fsub_rn(__fmul_rn(x0, it.c), __fmul_rn(x1, it.s)));
        qp_put(it, true, __fadd_rn(__fmul_rn(x0, it.s), __fmul_rn(x1, it.c)));
    } else {
        if (it.biased) x0 = __fadd_rn(x0, it.b0);
        qp_put(it, false, x0);
    }
}

extern "C" __global__ void __launch_bounds__(QKV_POST_THREADS)
    qkv_post(const float* __restrict__ q, const float* __restrict__ k,
             const float* __restrict__ v, int q_stride, int k_stride, int v_stride,
             const float* __restrict__ bq, const float* __restrict__ bk,
             const float* __restrict__ bv, const int* __restrict__ pos,
             const int* __restrict__ slot, int n_heads, int n_kv_heads, int hd, int rot_dim,
             int style, const float* __restrict__ cs, float* __restrict__ qo,
             kv_t* __restrict__ kc, kv_t* __restrict__ vc) {
    const int r = blockIdx.x;
    const int half = rot_dim / 2, rest = hd - rot_dim;
    const int qd = n_heads * hd, kvd = n_kv_heads * hd;
    QpArgs a;
    a.bq = bq;
    a.bk = bk;
    a.bv = bv;
    a.pcs = cs + (size_t)pos[r] * half * 2;
    a.qw = qo + (size_t)r * qd;
    a.kw = kc + (size_t)slot[r] * kvd;
    a.vw = vc + (size_t)slot[r] * kvd;
    a.n_heads = n_heads;
    a.hd = hd;
    a.rot_dim = rot_dim;
    a.style = style;
    a.qp = n_heads * half;
    a.pairs = a.qp + n_kv_heads * half;
    a.kvd = kvd;
    const int items = a.pairs + kvd + (n_heads + n_kv_heads) * rest;
    // The first items' constants before waiting for the matmul that writes q, k, v.
    QpItem early[QP_EARLY];
#pragma unroll
    for (int j = 0; j < QP_EARLY; j++) {
        const int u = threadIdx.x + j * blockDim.x;
        if (u < items) early[j] = qp_item(a, u);
    }
    pdl_enter();
    const float* qr = q + (size_t)r * q_stride;
    const float* kr = k + (size_t)r * k_stride;
    const float* vr = v + (size_t)r * v_stride;
#pragma unroll
    for (int j = 0; j < QP_EARLY; j++) {
        const int u = threadIdx.x + j * blockDim.x;
        if (u < items) qp_apply(early[j], qr, kr, vr);
    }
    for (int u = threadIdx.x + QP_EARLY * blockDim.x; u < items; u += blockDim.x) {
        qp_apply(qp_item(a, u), qr, kr, vr);
    }
}

// out[r * f + i] = act(gu[r * 2f + i]) * gu[r * 2f + f + i] (`glu` over a fused gate|up
// output).
extern "C" __global__ void glu_fused(const float* gu, int f, int rows, int act, float* out) {
    pdl_enter();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * f) return;
    int r = i / f, c = i % f;
    float g = gu[(size_t)r * 2 * f + c];
    out[i] = glu_out(g, gu[(size_t)r * 2 * f + f + c], act);
}

// `glu_fused`, then its output quantized as `actq` does: one warp per block of `bl` values
// of a row (f a multiple of bl), which it computes, writes and quantizes.
extern "C" __global__ void glu_fused_q(const float* __restrict__ gu, int f, int rows, int act,
                                       float* __restrict__ out, int bl, int sl, i8* qs,
                                       float* d, i16* sums, i8* qf) {
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
            float v = glu_out(gv[j], uv[j], act);
            out[(size_t)r * f + c0 + i] = v;
            vs[w][i] = v;
        }
    }
    __syncwarp();
    actq_block(vs[w], bl, sl, lane, qs + (size_t)b * bl, d + b, sums + (size_t)b * (bl / sl),
               qf, r, b % per_row, per_row);
}
