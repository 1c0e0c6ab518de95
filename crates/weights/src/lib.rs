//! tf-weights: weight file formats over mmap.
//!
//! - [`gguf`]: GGUF v2/v3 reader ([`GgufFile`]) and writer ([`GgufWriter`]), metadata values.
//! - [`safetensors`]: Hugging Face model directories ([`SafetensorsModel`]) and a writer for tests.
//! - [`tensor`]: [`TensorView`], the one borrowed tensor type both formats hand out, and
//!   [`TensorSource`], the trait models load from.
//! - [`quant`]: ggml block layouts, scalar dequantization (the reference every kernel is checked
//!   against) and valid random blocks for tests.
//!
//! Formats only: nothing here knows about model families.

pub mod error;
pub mod gguf;
mod mmap;
pub mod quant;
pub mod safetensors;
pub mod tensor;

pub use error::{Result, WeightsError};
pub use gguf::{GgufFile, GgufWriter, MetaValue, TensorInfo};
pub use quant::{
    bf16_to_f32, dequantize, dequantize_row, f16_to_f32, quantize_row_q4_0, random_blocks,
    requantize_q4_0,
};
pub use safetensors::{write_safetensors, SafetensorsModel};
pub use tensor::{TensorSource, TensorView};
pub use tf_core::DType;

/// Writes `bytes` to a temporary file beside `path`, syncs it and renames it over `path`, so
/// readers never see a half-written file.
pub(crate) fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "weights".to_string());
    let tmp = path.with_file_name(format!(".{file_name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(WeightsError::io(path, e));
    }
    Ok(())
}
