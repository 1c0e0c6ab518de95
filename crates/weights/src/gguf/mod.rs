//! GGUF: the llama.cpp weight file format (versions 2 and 3, little-endian).
//!
//! Layout: magic "GGUF", version u32, tensor_count u64, kv_count u64, the metadata key/values,
//! the tensor infos, padding to `general.alignment`, then tensor data. Strings are a u64 length
//! plus UTF-8 bytes; arrays are an element type u32, a u64 count and the elements.

mod reader;
mod value;
mod writer;

pub use reader::{GgufFile, TensorInfo};
pub use value::MetaValue;
pub use writer::GgufWriter;

pub(crate) const GGUF_MAGIC: [u8; 4] = *b"GGUF";
pub(crate) const DEFAULT_ALIGNMENT: usize = 32;
/// ggml's GGML_MAX_DIMS.
pub(crate) const MAX_DIMS: usize = 4;
