//! tf-fetch
