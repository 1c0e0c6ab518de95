//! Kernel conformance on a real GPU (`tensorfold gpu-check`): every GPU kernel against the CPU
//! kernels of `tf_kernels` (themselves checked against their oracles), bit for bit, at every
//! requested row count, so each row equals the CPU's (row invariance follows); then a few speed
//! figures. Prints a table; fails if any check differs.

mod argmax;
mod attn;
mod deltanet;
mod fused;
mod gemv;
pub mod model;
pub mod ops;
pub mod tally;

pub use ops::run;

/// What `gpu-check` asks for.
pub struct Options {
    /// Row counts to run every op with (each in 1..=512).
    pub rows: Vec<usize>,
    /// Seed of the random weights and activations.
    pub seed: u64,
    /// GPU ordinal.
    pub gpu: usize,
    /// The kernel cache folder.
    pub cache: std::path::PathBuf,
}
