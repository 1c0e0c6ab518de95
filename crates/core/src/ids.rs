//! Newtype-free aliases kept deliberately small: ids cross crate borders often and are plain integers
//! in every file format, so aliases keep call sites readable without conversion noise.

/// A token id in the model's vocabulary.
pub type TokenId = u32;
/// An absolute position in a sequence (0 = first prompt token).
pub type Position = usize;
/// Engine-side id of one request's sequence.
pub type SeqId = u64;
/// Index of one fixed-size page of KV cache.
pub type BlockId = u32;
