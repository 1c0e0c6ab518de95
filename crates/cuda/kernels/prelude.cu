// Shared definitions for every TensorFold kernel. Header-free (NVRTC finds no CUDA headers
// without an include path): the few types and helpers the kernels need are defined here.
//
// Exactness: the program is compiled with --fmad=false, and float steps that the CPU defines
// also use the explicit round-to-nearest intrinsics, so no multiply-add is ever contracted.

typedef unsigned char u8;
typedef signed char i8;
typedef short i16;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;

#define FULL_MASK 0xffffffffu

// IEEE half to single by the hardware widening alone: exact for zeros, subnormals, normals and
// infinities; a NaN becomes some NaN. The tensor-core matmuls (matmul_mma.cu) take their block
// scales this way: a scale only ever enters GPU float arithmetic, which returns its canonical
// NaN whatever the payload, so the CPU's NaN rule below could change no result of theirs (and
// cost nine instructions a value, predicated in every block). The other matmul kernels still
// use `f16_to_f32`; they wait on memory, not on instructions.
__device__ __forceinline__ float f16_to_f32_arith(u16 h16) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h16));
    return f;
}

// IEEE half to single, exact, with the CPU's `unpack::f16_to_f32` bits: the hardware widening,
// and for infinities and NaNs the CPU's rule (a NaN keeps its payload with the quiet bit set).
// `gpu-check` compares all 65,536 inputs.
__device__ __forceinline__ float f16_to_f32(u16 h16) {
    const u32 h = h16;
    if ((h & 0x7C00u) != 0x7C00u) return f16_to_f32_arith(h16);
    const u32 sign = (h & 0x8000u) << 16, m = h & 0x3FFu;
    return __uint_as_float(sign | (m == 0 ? 0x7F800000u : 0x7FC00000u | (m << 13)));
}

// A little-endian f16 at any byte offset (GGUF blocks are not 2-byte aligned in general).
__device__ __forceinline__ float f16_at(const u8* p) {
    return f16_to_f32((u16)(p[0] | (p[1] << 8)));
}

__device__ __forceinline__ int warp_sum_i32(int v) {
    for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(FULL_MASK, v, s);
    return v;
}

// `reference::block_step`: the one float step per quant block, in ascending block order.
// shape 0: acc + (d*dx)*isum; 1: acc + ((d*dx)*isum - (dmin*dx)*msum); 2: ... + (dmin*dx)*msum.
__device__ __forceinline__ float block_step(float acc, int shape, float d, float dmin, float dx,
                                            int isum, int msum) {
    float a = __fmul_rn(__fmul_rn(d, dx), __int2float_rn(isum));
    if (shape == 0) return __fadd_rn(acc, a);
    float b = __fmul_rn(__fmul_rn(dmin, dx), __int2float_rn(msum));
    return __fadd_rn(acc, shape == 1 ? __fsub_rn(a, b) : __fadd_rn(a, b));
}

// Programmatic dependent launch (launch.rs): `pdl_wait` returns once the grid launched before
// this one has completed and its writes are visible (at once where there is none, or the launch
// did not ask for the overlap); then `launch_dependents` lets the next grid start its own
// independent part. Every kernel calls this before its first read or write of a buffer that
// another kernel touches.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// The KV cache's element (`tf_kernels::kv::KvFormat`): f32, or bf16 where the program is
// compiled with KV_BF16. A value is rounded to bf16 to nearest, ties to even, by the integer
// steps of `kv::bf16_from_f32` (a NaN stays a quiet NaN), and widened back by a shift, so that
// GPU and CPU caches hold the same numbers.
#ifdef KV_BF16
typedef unsigned short kv_t;
__device__ __forceinline__ float kv_get(kv_t h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ kv_t kv_put(float x) {
    const unsigned b = __float_as_uint(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (kv_t)((b >> 16) | 0x40u);
    return (kv_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
// Four consecutive values (8-byte aligned).
__device__ __forceinline__ float4 kv_ld4(const kv_t* p) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}
#else
typedef float kv_t;
__device__ __forceinline__ float kv_get(kv_t x) { return x; }
__device__ __forceinline__ kv_t kv_put(float x) { return x; }
// Four consecutive values (16-byte aligned).
__device__ __forceinline__ float4 kv_ld4(const kv_t* p) {
    return __ldg(reinterpret_cast<const float4*>(p));
}
#endif
__device__ __forceinline__ float kv_ldg(const kv_t* p) { return kv_get(__ldg(p)); }
