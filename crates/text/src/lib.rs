//! tf-text
