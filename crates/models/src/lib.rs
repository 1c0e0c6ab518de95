//! tf-models
