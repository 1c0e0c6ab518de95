//! The seam between the engine and a model: a forward over rows of many sequences. The engine owns
//! block ids (which KV pages belong to which sequence); the runner owns the memory behind them.

use crate::blocks::BlockHash;
use crate::error::EngineError;
use std::sync::Arc;
use tf_kernels::kv::KvCache;
use tf_kernels::ThreadPool;
use tf_models::Model;
pub use tf_models::{Row, TreeRow};

pub trait Runner: Send {
    fn vocab(&self) -> usize;
    /// KV blocks (of [`tf_kernels::kv::BLOCK_SIZE`] positions) the runner has memory for.
    fn kv_blocks(&self) -> usize;
    /// The longest sequence the model supports.
    fn context_len(&self) -> usize;
    /// Runs `rows`, writing each row's key and value into its slot first; returns the logits of
    /// the rows with `logits: true`, in order, `vocab()` values each.
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<f32>, EngineError>;
    /// Copies KV slot `from` to slot `to` of the sequence with block table `table`, for each
    /// pair in order (accepted tree-draft rows moving to their positions).
    fn copy_slots(&mut self, table: &[tf_core::BlockId], moves: &[(usize, usize)]);
    /// What the keys and values of a token prefix depend on besides the tokens (model, kernels):
    /// the prefix cache only reuses blocks written under the same salt.
    fn cache_salt(&self) -> BlockHash {
        [0; 32]
    }
}

/// A real model with its KV cache.
pub struct ModelRunner {
    model: Arc<Model>,
    kv: KvCache,
    pool: Arc<ThreadPool>,
    context_len: usize,
}

impl ModelRunner {
    /// A runner with room for `kv_positions` positions in total (over all sequences).
    pub fn new(
        model: Arc<Model>,
        pool: Arc<ThreadPool>,
        kv_positions: usize,
        context_len: usize,
    ) -> Self {
        let blocks = kv_positions.div_ceil(tf_kernels::kv::BLOCK_SIZE);
        let kv = KvCache::new(model.config.n_layers, model.config.kv_dim(), blocks);
        ModelRunner {
            model,
            kv,
            pool,
            context_len,
        }
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }
}

impl Runner for ModelRunner {
    fn vocab(&self) -> usize {
        self.model.config.vocab
    }
    fn kv_blocks(&self) -> usize {
        self.kv.blocks
    }
    fn context_len(&self) -> usize {
        self.context_len
    }
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<f32>, EngineError> {
        Ok(self.model.forward(&self.pool, rows, &mut self.kv)?)
    }
    fn copy_slots(&mut self, table: &[tf_core::BlockId], moves: &[(usize, usize)]) {
        for &(from, to) in moves {
            self.kv.copy_slot(table, from, to);
        }
    }
    fn cache_salt(&self) -> BlockHash {
        use sha2::{Digest, Sha256};
        let m = &self.model;
        let mut h = Sha256::new();
        h.update(concat!("tensorfold-kv-", env!("CARGO_PKG_VERSION")));
        h.update(m.path().to_string_lossy().as_bytes());
        h.update(
            std::fs::metadata(m.path())
                .map_or(0, |md| md.len())
                .to_le_bytes(),
        );
        h.update(format!("{:?}", m.config).as_bytes());
        h.update(m.level.name().as_bytes());
        h.finalize().into()
    }
}
