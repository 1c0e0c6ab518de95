//! One folder per model family; each defines its [`Family`](crate::Family) descriptor.
pub mod gemma2;
pub mod gemma3;
pub mod gpt_oss;
pub mod llama;
pub mod nemotron_h;
pub mod olmoe;
pub mod phi3;
pub mod qwen2;
pub mod qwen3;
pub mod qwen35;
pub mod qwen3moe;
pub mod qwen3next;
