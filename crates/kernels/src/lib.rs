//! Row-exact compute kernels.
//!
//! The contract (ARCHITECTURE.md, exactness rule 1): the bits of output row r depend only on input row r and on
//! committed state, never on how many rows share the call, which thread ran it or how a prompt was
//! chunked. Every op has a scalar oracle (`reference` items) and fast SIMD versions that produce the
//! same bits; tests compare them bitwise.
//!
//! * [`canon`]: the canonical f32 reduction (16-lane FMA dot) and exponential that every float
//!   reduction in the project uses.
//! * [`actq`]: per-row q8 activation quantization (one rounding rule).
//! * [`matmul`]: quantized and float matrix products, split over output columns only.
//! * [`ops`]: RMSNorm, RoPE, SwiGLU.
//! * [`attention`] over the paged KV cache ([`kv`]) with the canonical key-chunk order.
//! * [`moe`]: mixture-of-experts routing (ties to the lower expert id) and the fixed-order combine.
//! * [`pool`]: the persistent worker pool.

pub mod actq;
pub mod attention;
pub mod canon;
pub mod cpu;
pub mod deltanet;
pub mod kv;
pub mod mamba2;
pub mod matmul;
pub mod moe;
pub mod ops;
pub mod pool;

pub use cpu::{detect, SimdLevel};
pub use pool::ThreadPool;
