//! The seam between the engine and a model: a forward over rows of many sequences. The engine owns
//! block ids (which KV pages belong to which sequence); the runner owns the memory behind them.

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
}
