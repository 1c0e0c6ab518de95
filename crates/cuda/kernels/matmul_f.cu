// Float-weight matmuls (F32, F16, BF16): `out[r * n + c]` = the canonical dot
// (`canon::dot_ref`) of weight row c, widened to f32 exactly, with f32 activation row r.
// One half-warp per (column, row): lane l of the 16 accumulates elements i = l mod 16 in
// ascending i with one FMA each, then the tree fold 8, 4, 2, 1 — the CPU's order, whatever the
// number of rows.

enum { F_F32 = 0, F_F16, F_BF16 };

template <int T>
__device__ __forceinline__ void matmul_f(const u8* w, int n, int k, const float* x, float* out) {
    int col = blockIdx.x * (blockDim.x / 16) + threadIdx.x / 16;
    int row = blockIdx.y;
    int lane = threadIdx.x % 16;
    bool valid = col < n;  // no early return: the shuffles below need the whole warp
    float acc = 0.0f;
    if (valid) {
        const float* xr = x + (size_t)row * k;
        for (int i = lane; i < k; i += 16) {
            float wv;
            if (T == F_F32) {
                wv = ((const float*)w)[(size_t)col * k + i];
            } else {
                u16 h = ((const u16*)w)[(size_t)col * k + i];
                wv = T == F_F16 ? f16_to_f32(h) : __uint_as_float((u32)h << 16);
            }
            acc = fmaf(wv, xr[i], acc);
        }
    }
    for (int s = 8; s > 0; s >>= 1) {
        float other = __shfl_down_sync(FULL_MASK, acc, s, 16);
        if (lane < s) acc = __fadd_rn(acc, other);
    }
    if (valid && lane == 0) out[(size_t)row * n + col] = acc;
}

#define MATMUL_F(name, T)                                                                    \
    extern "C" __global__ void name(const u8* w, int n, int k, const float* x, float* out) { pdl_enter(); \
        matmul_f<T>(w, n, k, x, out);                                                        \
    }
MATMUL_F(matmul_f32, F_F32)
MATMUL_F(matmul_f16, F_F16)
MATMUL_F(matmul_bf16, F_BF16)
