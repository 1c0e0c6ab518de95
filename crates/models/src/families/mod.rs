//! One folder per model family; each defines its [`Family`](crate::Family) descriptor.
pub mod llama;
pub mod qwen2;
pub mod qwen3;
