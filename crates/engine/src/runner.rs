//! The seam between the engine and a model: a forward over rows of many sequences. The engine owns
//! block ids (which KV pages belong to which sequence); the runner owns the memory behind them.

use crate::blocks::BlockHash;
use crate::error::EngineError;
use crate::sampler::greedy_token;
use std::sync::Arc;
use tf_core::SeqId;
use tf_kernels::kv::{KvCache, KvFormat};
use tf_kernels::ThreadPool;
use tf_models::{Model, StateCache};
pub use tf_models::{Row, TreeRow};

pub trait Runner: Send {
    fn vocab(&self) -> usize;
    /// KV blocks (of [`tf_kernels::kv::BLOCK_SIZE`] positions) the runner has memory for.
    fn kv_blocks(&self) -> usize;
    /// The longest sequence the model supports.
    fn context_len(&self) -> usize;
    /// Keys a row reads at most when every layer of the model slides (`Plan::all_windowed`):
    /// blocks further back may be freed. `None`: some layer reads the whole prefix.
    fn window(&self) -> Option<usize> {
        None
    }
    /// Runs `rows`, writing each row's key and value into its slot first; returns the logits of
    /// the rows with `logits: true`, in order, `vocab()` values each.
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<f32>, EngineError>;
    /// [`forward`](Self::forward) into a buffer the caller keeps between calls: `out` is
    /// cleared and then holds the logits. A runner whose logits come from elsewhere (a GPU)
    /// appends them as they arrive, with no fresh allocation to fault in or zero.
    fn forward_into(&mut self, rows: &[Row], out: &mut Vec<f32>) -> Result<(), EngineError> {
        *out = self.forward(rows)?;
        Ok(())
    }
    /// [`forward_into`](Self::forward_into) with the logits left where the runner keeps them:
    /// `vocab()` floats per row with `logits: true`, valid until the next call. `scratch` is the
    /// caller's buffer for a runner whose logits are not already in host memory it owns (the
    /// default: [`forward_into`](Self::forward_into) into `scratch`); a GPU runner returns its
    /// page-locked download buffer, and rows the caller never reads are never copied again.
    fn forward_logits<'a>(
        &'a mut self,
        rows: &[Row],
        scratch: &'a mut Vec<f32>,
    ) -> Result<&'a [f32], EngineError> {
        self.forward_into(rows, scratch)?;
        Ok(scratch)
    }
    /// [`forward_into`](Self::forward_into) for rows whose every draw is greedy
    /// ([`SamplingParams::draws_greedy`](crate::SamplingParams::draws_greedy)): `ids` is cleared
    /// and then holds the [`greedy_token`] of each row with `logits: true`, in order. `logits` is
    /// scratch the caller keeps; a runner that can take the maximum where the logits are (a GPU)
    /// copies back only the ids and leaves it alone.
    fn forward_greedy(
        &mut self,
        rows: &[Row],
        logits: &mut Vec<f32>,
        ids: &mut Vec<tf_core::TokenId>,
    ) -> Result<(), EngineError> {
        self.forward_into(rows, logits)?;
        ids.clear();
        ids.extend(logits.chunks_exact(self.vocab()).map(greedy_token));
        Ok(())
    }
    /// For rows whose every draw is a plain temperature sample
    /// ([`SamplingParams::draws_plain`](crate::SamplingParams::draws_plain)): `picks` is cleared
    /// and then holds, for each row with `logits: true` in order, the token the keyed sampler
    /// draws with `keys[i]`, decided from a [`Shortlist`](crate::Shortlist) found where the
    /// logits are, or that row's logits where the shortlist cannot decide. Returns false, having
    /// run nothing, if this runner has no such path (the default: the caller asks for logits).
    fn forward_picks(
        &mut self,
        _rows: &[Row],
        _keys: &[crate::NoiseKey],
        _picks: &mut Vec<crate::Pick>,
    ) -> Result<bool, EngineError> {
        Ok(false)
    }
    /// Copies KV slot `from` to slot `to` of sequence `seq` with block table `table`, for each
    /// pair in order (accepted tree-draft rows moving to their positions).
    fn copy_slots(&mut self, seq: SeqId, table: &[tf_core::BlockId], moves: &[(usize, usize)]);
    /// Forgets what the runner keeps for sequence `seq` besides its KV blocks (a recurrent
    /// model's state): the sequence finished, or waits to start again.
    fn release(&mut self, _seq: SeqId) {}
    /// Whether a sequence can resume right after block `b` (a recurrent model needs the state
    /// it kept there; the KV alone is enough otherwise).
    fn resumable(&self, _b: tf_core::BlockId) -> bool {
        true
    }
    /// Whether the runner keeps a state per sequence (recurrent layers).
    fn recurrent(&self) -> bool {
        false
    }
    /// Keep every row's final hidden state after each forward (for a multi-token-prediction
    /// head); false if this runner cannot.
    fn keep_hidden(&mut self, _on: bool) -> bool {
        false
    }
    /// The last forward's final hidden states, `d_model` values a row in row order (empty when
    /// not kept).
    fn hidden(&self) -> &[f32] {
        &[]
    }
    /// What the keys and values of a token prefix depend on besides the tokens (model, kernels):
    /// the prefix cache only reuses blocks written under the same salt.
    fn cache_salt(&self) -> BlockHash {
        [0; 32]
    }
    /// The stored keys and values of block `b` (all layers, in the cache's format; see
    /// `KvCache::read_block` for the layout), for the prefix cache's disk tier; `None` if this
    /// runner cannot export blocks.
    fn block_data(&self, _b: tf_core::BlockId) -> Option<Vec<u8>> {
        None
    }
    /// Overwrites block `b` with `data` as [`block_data`](Self::block_data) returned it; false
    /// (and nothing written) if unsupported or `data` has the wrong length.
    fn load_block(&mut self, _b: tf_core::BlockId, _data: &[u8]) -> bool {
        false
    }
}

/// Bumped whenever the arithmetic behind a position's keys and values changes, so that cached
/// blocks (on disk, across restarts) written by an older build are never taken.
/// The cache salt adds the runner's [`KvFormat`] name, so that a block stored in one format is
/// never taken by a runner of another.
pub const KV_FORMAT: &str = concat!("tensorfold-kv-v2-", env!("CARGO_PKG_VERSION"));

/// Content samples of a model file (or of every file of a model directory): its length, its first
/// 8 MiB (header, metadata, first tensors) and 64 KiB at 64 places through it. Cheap (about
/// 12 MiB read, from the page cache of the mapped file) and enough to tell two checkpoints of
/// the same shape apart.
pub fn fingerprint_path(path: &std::path::Path, h: &mut sha2::Sha256) {
    use sha2::Digest;
    use std::io::{Read, Seek, SeekFrom};
    const HEAD: u64 = 8 << 20;
    const SAMPLE: u64 = 64 << 10;
    const PLACES: u64 = 64;
    let mut files: Vec<std::path::PathBuf> = if path.is_dir() {
        std::fs::read_dir(path)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    } else {
        vec![path.to_path_buf()]
    };
    files.sort();
    for file in files.iter().filter(|f| f.is_file()) {
        h.update(file.file_name().map_or(&[][..], |n| n.as_encoded_bytes()));
        let Ok(mut f) = std::fs::File::open(file) else {
            continue;
        };
        let len = f.metadata().map_or(0, |m| m.len());
        h.update(len.to_le_bytes());
        let mut read_at = |at: u64, n: u64| {
            let mut buf = vec![0u8; n.min(len.saturating_sub(at)) as usize];
            if f.seek(SeekFrom::Start(at)).is_ok() && f.read_exact(&mut buf).is_ok() {
                h.update(&buf);
            }
        };
        read_at(0, HEAD);
        for i in 1..=PLACES {
            read_at(len / (PLACES + 1) * i, SAMPLE);
        }
    }
}

/// A real model with its KV cache.
pub struct ModelRunner {
    model: Arc<Model>,
    kv: KvCache,
    /// Recurrent layers' states, for a model that has them.
    states: Option<StateCache>,
    /// The last forward's final hidden states, when kept (`keep_hidden`).
    hidden: Option<Vec<f32>>,
    pool: Arc<ThreadPool>,
    context_len: usize,
    /// Output-head columns computed (`None`: all); see [`ModelRunner::with_head`].
    head: Option<Vec<std::ops::Range<usize>>>,
}

impl ModelRunner {
    /// A runner with room for `kv_positions` positions in total (over all sequences), its keys
    /// and values in the default format (bf16).
    pub fn new(
        model: Arc<Model>,
        pool: Arc<ThreadPool>,
        kv_positions: usize,
        context_len: usize,
    ) -> Self {
        Self::with_format(model, pool, kv_positions, context_len, KvFormat::default())
    }

    /// [`new`](Self::new) with keys and values stored in `format`, which must hold the
    /// model's rows ([`KvFormat::check`]).
    pub fn with_format(
        model: Arc<Model>,
        pool: Arc<ThreadPool>,
        kv_positions: usize,
        context_len: usize,
        format: KvFormat,
    ) -> Self {
        let blocks = kv_positions.div_ceil(tf_kernels::kv::BLOCK_SIZE);
        let states = model.state_cache(blocks);
        let kv = KvCache::new(
            model.plan.kv_layers(),
            model.config.n_kv_heads,
            model.config.head_dim,
            blocks,
            format,
        );
        // The CPU kernels' weight layout is made now, not inside the first request.
        model.prepare_cpu();
        ModelRunner {
            model,
            kv,
            states,
            hidden: None,
            pool,
            context_len,
            head: None,
        }
    }

    /// This runner computes only the output-head columns in `head` (every other logit -inf):
    /// for a draft model, whose guesses only change speed. See [`Model::pruned_head`].
    pub fn with_head(mut self, head: Vec<std::ops::Range<usize>>) -> Self {
        self.head = Some(head);
        self
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn kv_format(&self) -> KvFormat {
        self.kv.format
    }
}

impl Runner for ModelRunner {
    fn vocab(&self) -> usize {
        self.model.config.vocab
    }
    fn window(&self) -> Option<usize> {
        self.model.plan.all_windowed()
    }
    fn kv_blocks(&self) -> usize {
        self.kv.blocks
    }
    fn context_len(&self) -> usize {
        self.context_len
    }
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<f32>, EngineError> {
        let head = self.head.as_deref();
        let states = self.states.as_mut();
        let hidden = self.hidden.as_mut();
        Ok((self.model).forward_hidden(&self.pool, rows, &mut self.kv, states, head, hidden)?)
    }
    fn keep_hidden(&mut self, on: bool) -> bool {
        self.hidden = on.then(Vec::new);
        true
    }
    fn hidden(&self) -> &[f32] {
        self.hidden.as_deref().unwrap_or(&[])
    }
    fn copy_slots(&mut self, seq: SeqId, table: &[tf_core::BlockId], moves: &[(usize, usize)]) {
        for &(from, to) in moves {
            self.kv.copy_slot(table, from, to);
        }
        if let Some(st) = &mut self.states {
            st.move_slots(seq, moves);
        }
    }
    fn release(&mut self, seq: SeqId) {
        if let Some(st) = &mut self.states {
            st.release(seq);
        }
    }
    fn resumable(&self, b: tf_core::BlockId) -> bool {
        self.states.as_ref().is_none_or(|st| st.has_snapshot(b))
    }
    fn recurrent(&self) -> bool {
        self.states.is_some()
    }
    /// The block's keys and values, then (a recurrent model's) its state snapshot, if kept.
    fn block_data(&self, b: tf_core::BlockId) -> Option<Vec<u8>> {
        if (b as usize) >= self.kv.blocks {
            return None;
        }
        let mut data = self.kv.read_block(b);
        if let Some(snap) = self.states.as_ref().and_then(|st| st.snapshot(b)) {
            data.extend(snap.iter().flat_map(|v| v.to_le_bytes()));
        }
        Some(data)
    }
    fn load_block(&mut self, b: tf_core::BlockId, data: &[u8]) -> bool {
        let kv = self.kv.block_bytes();
        if (b as usize) >= self.kv.blocks || data.len() < kv {
            return false;
        }
        let snap = &data[kv..];
        match &mut self.states {
            None if !snap.is_empty() => return false,
            None => {}
            Some(st) if snap.is_empty() => st.drop_snapshot(b),
            Some(st) => {
                let floats: Vec<f32> = (snap.chunks_exact(4))
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                if !snap.len().is_multiple_of(4) || !st.put_snapshot(b, &floats) {
                    return false;
                }
            }
        }
        self.kv.write_block(b, &data[..kv]);
        true
    }
    fn cache_salt(&self) -> BlockHash {
        use sha2::{Digest, Sha256};
        let m = &self.model;
        let mut h = Sha256::new();
        h.update(KV_FORMAT);
        h.update(self.kv.format.name());
        h.update(format!("{:?}", m.config).as_bytes());
        h.update(m.level.name().as_bytes());
        fingerprint_path(m.path(), &mut h);
        h.finalize().into()
    }
}
