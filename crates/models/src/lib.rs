//! Model families and the transformer forward pass.
//!
//! * [`registry`]: the one list of supported families; [`families`] holds one folder per family.
//! * [`config`]: [`ModelConfig`] from GGUF metadata or a Hugging Face `config.json`.
//! * [`plan`]: [`Plan`], the decoder as data (per layer: window, RoPE, norms, MLP kind), which
//!   the forward walks and a backend checks at load.
//! * [`model`]: [`Model`], loading (architecture checked before any weight is touched) and
//!   [`Model::forward`] over rows of several sequences at once.
//!
//! Quantization is a weight format handled by `tf-weights` and `tf-kernels`; there is one model
//! implementation per family, whatever the tensor types.

pub mod config;
mod delta_layer;
pub mod error;
mod experts;
pub mod families;
mod hybrid_config;
mod hybrid_weights;
mod mamba_layer;
pub mod model;
pub mod plan;
mod recurrent;
pub mod registry;
mod requant;
pub mod synth;
mod transformer;
pub mod weights;

pub use config::{Block, DeltaConfig, MambaConfig, ModelConfig, MoeConfig};
pub use error::{ModelError, Result};
pub use model::{Model, Row, TreeRow};
pub use plan::{walk, DeltaMixer, Feature, LayerOps, LayerPlan, MambaMixer, Mixer, Plan, RopeSpec};
pub use recurrent::{LayerPart, LayerSize, StateCache};
pub use registry::{Family, Mlp, FAMILIES};
