//! tf-kernels
