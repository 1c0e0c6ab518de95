//! [`CudaRunner`]: the engine's [`Runner`] on an NVIDIA GPU. The same forward pass as
//! `tf_models::Model::forward`, op for op, with kernels that replay the CPU's arithmetic, and a
//! paged KV cache in device memory under the engine's block ids.
//!
//! A call of up to [`GRAPH_ROWS`] rows (decode and verify windows) replays a CUDA graph captured
//! for that row count, so a round costs one launch instead of hundreds; longer calls (prefill)
//! launch kernel by kernel.

mod forward;
mod layers;
pub mod layout;
mod moe;
mod pinned;
mod prof;
mod scratch;
pub mod weights;

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::CudaSlice;
use forward::Out;
use tf_core::{BlockId, TokenId};
use tf_engine::runner::{fingerprint_path, Row, Runner, KV_FORMAT};
use tf_engine::{EngineError, NoiseKey, Pick};
use tf_kernels::kv::{KvFormat, BLOCK_SIZE};
use tf_models::Model;

use crate::{CudaError, Gpu, Result};
use scratch::Scratch;
use weights::DevWeights;

/// Row counts up to this replay captured graphs.
pub const GRAPH_ROWS: usize = 64;

/// A CUDA graph, used only by the thread that owns its runner.
struct Graph(cudarc::driver::CudaGraph);
// SAFETY: a graph is launched only through `&mut CudaRunner`, so never from two threads at once;
// the driver allows using a graph from any thread when access is serialized.
unsafe impl Send for Graph {}

pub struct CudaRunner {
    gpu: Arc<Gpu>,
    model: Arc<Model>,
    w: DevWeights,
    kc: Vec<CudaSlice<f32>>,
    vc: Vec<CudaSlice<f32>>,
    blocks: usize,
    context_len: usize,
    /// The plan's RoPE tables (`Plan::ropes`), (cos, sin) pairs per position.
    rope_cs: Vec<CudaSlice<f32>>,
    rope_positions: usize,
    s: Scratch,
    graphs: HashMap<usize, Graph>,
    use_graphs: bool,
    /// Increments for every new matmul input (see `scratch::matmul`).
    tag: u64,
    /// The current layer's first tag (its q/k/v input is `layer_tag + 1`), between the ops of
    /// one layer.
    layer_tag: u64,
    /// The next unused tag of the experts' inputs (`moe.rs`).
    expert_tag: u64,
    /// Rows of the call the layer ops run over.
    call_rows: usize,
    prof: prof::Prof,
    /// Whether the current call may run split attention (every row's keys fit the partials).
    split_ok: bool,
    /// Page-locked host memory for `LOGIT_ROWS` rows of logits (None if it could not be had).
    pinned: Option<pinned::Pinned>,
    pageable: Vec<f32>,
    /// Plain temperature draws decided from device shortlists (`Runner::forward_picks`;
    /// `TENSORFOLD_CUDA_PICKS=0` turns it off, for measuring: the logits come back instead).
    picks: bool,
}

impl Drop for CudaRunner {
    fn drop(&mut self) {
        if self.prof.on() {
            let _ = self.gpu.sync();
            eprintln!("{}", self.prof.report());
        }
    }
}

fn backend(e: CudaError) -> EngineError {
    EngineError::Backend(e.to_string())
}

impl CudaRunner {
    /// Uploads `model` and allocates a KV cache of `kv_positions` positions and buffers for
    /// `max_rows` rows per call (longer calls run in parts).
    pub fn new(
        gpu: Arc<Gpu>,
        model: Arc<Model>,
        kv_positions: usize,
        context_len: usize,
        max_rows: usize,
        kv: KvFormat,
    ) -> Result<CudaRunner> {
        let cfg = &model.config;
        if kv != gpu.kv {
            return Err(CudaError::Usage(format!(
                "a {} KV cache asked of a GPU program compiled for {}",
                kv.name(),
                gpu.kv.name()
            )));
        }
        // The device forward runs the plain decoder's ops and these; a plan that needs more is
        // refused here rather than run wrong.
        use tf_models::Feature;
        let runs = [
            Feature::RopeScaling,
            Feature::RopeMscale,
            Feature::SecondRope,
            Feature::AttentionScale,
            Feature::ScaledEmbeddings,
            Feature::SlidingWindow,
            Feature::AttentionSoftcap,
            Feature::FinalSoftcap,
            Feature::GeGlu,
            Feature::PostNorms,
            Feature::Moe,
            Feature::ClampedSwiGlu,
            Feature::OutputBias,
            Feature::AttentionSinks,
            Feature::FullQkNorm,
        ];
        let lacks: Vec<String> = (model.plan.features(cfg.head_dim).into_iter())
            .filter(|f| !runs.contains(f))
            .map(|f| f.to_string())
            .collect();
        if !lacks.is_empty() {
            return Err(CudaError::Usage(format!(
                "{} ({}) needs {}, which the CUDA backend does not run yet; serve it on the CPU \
                 (--device cpu)",
                model.path().display(),
                cfg.family.name,
                lacks.join(", ")
            )));
        }
        crate::rowops::AttnDims {
            rows: 1,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            scale: 1.0,
            window: None,
            softcap: None,
        }
        .check()?;
        // Weights and the KV cache must fit the GPU's free memory: a clear refusal instead of
        // an out-of-memory error halfway through the upload.
        let kv_bytes = kv_positions.div_ceil(BLOCK_SIZE)
            * BLOCK_SIZE
            * 2
            * kv.row_bytes(cfg.kv_dim())
            * cfg.n_layers;
        let need = model.weight_bytes() + kv_bytes;
        if let Ok((free, _)) = gpu.ctx.mem_get_info() {
            if need > free {
                return Err(CudaError::Usage(format!(
                    "{} needs {:.2} GiB of GPU memory for its weights and a KV cache of {} positions, \
                     {:.2} GiB are free (lower --context or --parallel)",
                    model.path().display(),
                    need as f64 / (1u64 << 30) as f64,
                    kv_positions,
                    free as f64 / (1u64 << 30) as f64
                )));
            }
        }
        let w = DevWeights::upload(&gpu, model.weights())?;
        let blocks = kv_positions.div_ceil(BLOCK_SIZE);
        // `kv_t` values in f32-sized units (bf16: two a unit; a block's values are even).
        let per_layer = blocks * BLOCK_SIZE * kv.row_bytes(cfg.kv_dim()) / 4;
        let mut kc = Vec::with_capacity(cfg.n_layers);
        let mut vc = Vec::with_capacity(cfg.n_layers);
        for _ in 0..cfg.n_layers {
            kc.push(gpu.zeros(per_layer)?);
            vc.push(gpu.zeros(per_layer)?);
        }
        let rope_positions = context_len.max(cfg.context_len).max(1);
        // The plan's RoPEs (frequency scaling and cos/sin factor included), as the CPU's
        // tables compute them.
        let rope_cs = (model.plan.ropes.iter())
            .map(|r| gpu.upload(&crate::ops::rope_table_of(&r.table(0), rope_positions)))
            .collect::<Result<Vec<_>>>()?;
        let s = Scratch::new(&gpu, cfg, max_rows.max(GRAPH_ROWS), context_len)?;
        let pinned = if std::env::var("TENSORFOLD_CUDA_PINNED").is_ok_and(|v| v == "0") {
            None
        } else {
            pinned::Pinned::new(&gpu, scratch::LOGIT_ROWS * cfg.vocab)
        };
        // Experts are routed on the host, between kernels: no graphs for such a model.
        let use_graphs =
            std::env::var("TENSORFOLD_CUDA_GRAPHS").map_or(true, |v| v != "0") && cfg.moe.is_none();
        Ok(CudaRunner {
            gpu,
            model,
            w,
            kc,
            vc,
            blocks,
            context_len,
            rope_cs,
            rope_positions,
            s,
            graphs: HashMap::new(),
            use_graphs,
            tag: 0,
            layer_tag: 0,
            expert_tag: moe::EXPERT_TAGS,
            call_rows: 0,
            prof: prof::Prof::from_env(),
            split_ok: true,
            pinned,
            pageable: Vec::new(),
            picks: !std::env::var("TENSORFOLD_CUDA_PICKS").is_ok_and(|v| v == "0"),
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Bytes of weights on the device.
    pub fn weight_bytes(&self) -> usize {
        self.w.bytes
    }

    /// Turns graph replay on or off (off: every call launches kernel by kernel).
    pub fn set_graphs(&mut self, on: bool) {
        self.use_graphs = on;
        self.graphs.clear();
    }

    /// Runs `rows` in calls of at most `cap` rows, appending each call's output to `out`.
    fn run_parts(&mut self, rows: &[Row], mut out: Out) -> std::result::Result<(), EngineError> {
        for part in rows.chunks(self.s.cap) {
            let host = self.prepare(part)?;
            self.run(part.len(), &host, out.reborrow())
                .map_err(backend)?;
        }
        Ok(())
    }

    /// Cache index (block id * BLOCK_SIZE + offset) of `slot` in a sequence with `table`.
    fn cache_index(&self, table: &[BlockId], slot: usize) -> std::result::Result<i32, EngineError> {
        layout::cache_index(table, slot, self.blocks)
    }

    /// One block's keys (or values) of one layer in f32-sized units of the cache buffers.
    fn layer_floats(&self) -> usize {
        BLOCK_SIZE * self.gpu.kv.row_bytes(self.model.config.kv_dim()) / 4
    }
}

impl Runner for CudaRunner {
    fn vocab(&self) -> usize {
        self.model.config.vocab
    }
    fn kv_blocks(&self) -> usize {
        self.blocks
    }
    fn context_len(&self) -> usize {
        self.context_len
    }
    fn window(&self) -> Option<usize> {
        self.model.plan.all_windowed()
    }
    fn forward(&mut self, rows: &[Row]) -> std::result::Result<Vec<f32>, EngineError> {
        let mut out = Vec::new();
        self.forward_into(rows, &mut out)?;
        Ok(out)
    }
    fn forward_into(
        &mut self,
        rows: &[Row],
        out: &mut Vec<f32>,
    ) -> std::result::Result<(), EngineError> {
        out.clear();
        self.run_parts(rows, Out::Logits(out))
    }
    fn forward_logits<'a>(
        &'a mut self,
        rows: &[Row],
        scratch: &'a mut Vec<f32>,
    ) -> std::result::Result<&'a [f32], EngineError> {
        let wanted = rows.iter().filter(|r| r.logits).count();
        if self.pinned.is_none() || rows.len() > self.s.cap || wanted > scratch::LOGIT_ROWS {
            self.forward_into(rows, scratch)?;
            return Ok(scratch);
        }
        let host = self.prepare(rows)?;
        self.run(rows.len(), &host, Out::Pinned).map_err(backend)?;
        let vocab = self.model.config.vocab;
        Ok(self
            .pinned
            .as_ref()
            .expect("checked")
            .floats(wanted * vocab))
    }
    fn forward_greedy(
        &mut self,
        rows: &[Row],
        _logits: &mut Vec<f32>,
        ids: &mut Vec<TokenId>,
    ) -> std::result::Result<(), EngineError> {
        ids.clear();
        self.run_parts(rows, Out::Ids(ids))
    }
    fn forward_picks(
        &mut self,
        rows: &[Row],
        keys: &[NoiseKey],
        picks: &mut Vec<Pick>,
    ) -> std::result::Result<bool, EngineError> {
        if !self.picks {
            return Ok(false);
        }
        let wanted = rows.iter().filter(|r| r.logits).count();
        if keys.len() != wanted {
            return Err(EngineError::Backend(format!(
                "{} noise keys for {wanted} rows with logits",
                keys.len()
            )));
        }
        picks.clear();
        self.run_parts(rows, Out::Picks(keys, picks))?;
        Ok(true)
    }
    fn copy_slots(&mut self, _seq: u64, table: &[BlockId], moves: &[(usize, usize)]) {
        let mut pairs = Vec::with_capacity(2 * moves.len());
        for &(from, to) in moves {
            match (self.cache_index(table, from), self.cache_index(table, to)) {
                (Ok(f), Ok(t)) => pairs.extend([f, t]),
                _ => return,
            }
        }
        let kvd = self.model.config.kv_dim();
        let mut run = || -> Result<()> {
            let dev = self.gpu.upload(&pairs)?;
            for (kc, vc) in self.kc.iter_mut().zip(self.vc.iter_mut()) {
                self.gpu.kv_copy(&dev, moves.len(), kvd, kc, vc)?;
            }
            self.gpu.sync()
        };
        if let Err(e) = run() {
            eprintln!("tensorfold: GPU KV copy failed: {e}");
        }
    }
    fn block_data(&self, b: BlockId) -> Option<Vec<u8>> {
        if b as usize >= self.blocks {
            return None;
        }
        let n = self.layer_floats();
        let at = b as usize * n;
        let mut out = vec![0f32; 2 * n * self.kc.len()];
        for (l, chunk) in out.chunks_exact_mut(2 * n).enumerate() {
            let (k, v) = chunk.split_at_mut(n);
            self.gpu
                .stream
                .memcpy_dtoh(&self.kc[l].slice(at..at + n), k)
                .ok()?;
            self.gpu
                .stream
                .memcpy_dtoh(&self.vc[l].slice(at..at + n), v)
                .ok()?;
        }
        self.gpu.sync().ok()?;
        Some(out.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect())
    }
    fn load_block(&mut self, b: BlockId, data: &[u8]) -> bool {
        let n = self.layer_floats();
        if b as usize >= self.blocks || data.len() != 4 * 2 * n * self.kc.len() {
            return false;
        }
        let data: Vec<f32> = data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let at = b as usize * n;
        for (l, chunk) in data.chunks_exact(2 * n).enumerate() {
            let (k, v) = chunk.split_at(n);
            let ok = self
                .gpu
                .stream
                .memcpy_htod(k, &mut self.kc[l].slice_mut(at..at + n))
                .and_then(|_| {
                    self.gpu
                        .stream
                        .memcpy_htod(v, &mut self.vc[l].slice_mut(at..at + n))
                });
            if ok.is_err() {
                return false;
            }
        }
        self.gpu.sync().is_ok()
    }
    fn cache_salt(&self) -> tf_engine::blocks::BlockHash {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(KV_FORMAT);
        h.update(self.gpu.kv.name());
        h.update(b"cuda\0");
        h.update(self.gpu.name.as_bytes());
        h.update(format!("{:?}", self.gpu.cc).as_bytes());
        h.update(format!("{:?}", self.model.config).as_bytes());
        fingerprint_path(self.model.path(), &mut h);
        h.finalize().into()
    }
}
