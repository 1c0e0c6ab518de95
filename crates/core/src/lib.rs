//! Vocabulary shared by every TensorFold crate: ids, tensor element types, shapes.
//! No numerics and no I/O live here (the one generator of test data aside).

pub mod dtype;
mod ids;
pub mod rng;

pub use dtype::{DType, UnknownDType};
pub use ids::{BlockId, Position, SeqId, TokenId};
pub use rng::SplitMix64;
