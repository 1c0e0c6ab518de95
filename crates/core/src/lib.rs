//! Vocabulary shared by every TensorFold crate: ids, tensor element types, shapes.
//! No numerics and no I/O live here.

pub mod dtype;
mod ids;

pub use dtype::{DType, UnknownDType};
pub use ids::{BlockId, Position, SeqId, TokenId};
