//! tf-weights
