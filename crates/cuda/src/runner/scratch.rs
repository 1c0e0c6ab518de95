//! Device buffers of one forward call, allocated once for `cap` rows so that their addresses stay
//! fixed (a captured CUDA graph replays exactly these pointers).

use cudarc::driver::CudaSlice;
use tf_core::DType;
use tf_kernels::actq::ActBlock;
use tf_kernels::matmul::act_block;
use tf_models::ModelConfig;

use super::weights::DevMatrix;
use crate::ops::DevAct;
use crate::{Gpu, Result};

/// Rows of logits computed per output-head call.
pub const LOGIT_ROWS: usize = 64;

/// Quantized forms of the current matmul input, one per activation block size, each tagged with
/// the input it holds so that q/k/v (and gate/up) quantize their shared input once.
pub struct ActCache {
    a32: DevAct,
    a256: DevAct,
    tag32: u64,
    tag256: u64,
}

impl ActCache {
    /// `x` (`rows` rows of `k`) quantized in `block`s, made once per input `tag`.
    fn quantized(
        &mut self,
        gpu: &Gpu,
        block: ActBlock,
        x: &CudaSlice<f32>,
        tag: u64,
        rows: usize,
        k: usize,
    ) -> Result<&DevAct> {
        let (act, held) = match block {
            ActBlock::B32 => (&mut self.a32, &mut self.tag32),
            ActBlock::B256 => (&mut self.a256, &mut self.tag256),
        };
        if *held != tag {
            gpu.quantize_into(x, rows, k, act)?;
            *held = tag;
        }
        Ok(act)
    }

    /// The buffer a kernel quantizing its output for a matmul of `w` (tagged `tag`) writes into,
    /// marked as holding that input; `None` when `w` takes float activations.
    pub fn output_for(&mut self, w: &DevMatrix, tag: u64) -> Option<&mut DevAct> {
        let (act, held) = match act_block(w.dtype)? {
            ActBlock::B32 => (&mut self.a32, &mut self.tag32),
            ActBlock::B256 => (&mut self.a256, &mut self.tag256),
        };
        *held = tag;
        Some(act)
    }
}

pub struct Scratch {
    pub cap: usize,
    pub x: CudaSlice<f32>,
    pub h: CudaSlice<f32>,
    pub q: CudaSlice<f32>,
    pub k: CudaSlice<f32>,
    pub v: CudaSlice<f32>,
    pub att: CudaSlice<f32>,
    pub tmp: CudaSlice<f32>,
    pub o: CudaSlice<f32>,
    /// Fused q|k|v and gate|up outputs.
    pub qkv: CudaSlice<f32>,
    pub gu: CudaSlice<f32>,
    pub gate: CudaSlice<f32>,
    pub up: CudaSlice<f32>,
    pub act: CudaSlice<f32>,
    pub xs: CudaSlice<f32>,
    pub hs: CudaSlice<f32>,
    pub logits: CudaSlice<f32>,
    /// Greedy ids of logits rows (`Runner::forward_greedy`).
    pub ids: CudaSlice<i32>,
    /// Plain draws' noise keys, 1 / temperatures and shortlist records (`sample.rs`).
    pub sl_keys: CudaSlice<u32>,
    pub sl_inv: CudaSlice<f64>,
    pub sl_out: CudaSlice<u32>,
    pub acts: ActCache,
    pub pos: CudaSlice<i32>,
    pub slot: CudaSlice<i32>,
    pub meta: CudaSlice<i32>,
    pub idx: CudaSlice<i32>,
    pub tables: CudaSlice<i32>,
    pub remaps: CudaSlice<i32>,
    /// Split attention's per-chunk partials (`SPLIT_ROWS` rows, `max_chunks` chunks per head).
    pub part_ml: CudaSlice<f32>,
    pub part_o: CudaSlice<f32>,
    pub max_chunks: usize,
    /// A mixture of experts' buffers (`moe.rs`), for models that have one.
    pub moe: Option<MoeScratch>,
}

/// The buffers of the mixture-of-experts feed-forward for `cap` rows.
pub struct MoeScratch {
    /// Router scores, rows x experts.
    pub scores: CudaSlice<f32>,
    /// Per used expert its rows' gather indices, then their (row, rank) scatter indices.
    pub idx: CudaSlice<i32>,
    /// The chosen experts' weights, rows x used, in rank order.
    pub w: CudaSlice<f32>,
    /// One expert's gathered input rows, hidden rows (gate, up, activation) and output rows.
    pub xe: CudaSlice<f32>,
    pub g: CudaSlice<f32>,
    pub u: CudaSlice<f32>,
    pub a: CudaSlice<f32>,
    pub y: CudaSlice<f32>,
    /// Every (row, rank)'s expert output, back to back.
    pub ys: CudaSlice<f32>,
}

/// Calls of up to this many rows run attention split over key chunks.
pub const SPLIT_ROWS: usize = 64;
/// Device memory for the split attention's partials at most; beyond, long contexts run the
/// one-pass kernel.
const SPLIT_BYTES: usize = 1 << 30;

impl Scratch {
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, cap: usize, max_keys: usize) -> Result<Scratch> {
        let per_chunk = SPLIT_ROWS * cfg.n_heads * (cfg.head_dim + 2) * 4;
        let max_chunks = max_keys
            .div_ceil(tf_kernels::attention::KEY_CHUNK)
            .clamp(1, (SPLIT_BYTES / per_chunk).max(1));
        let parts = SPLIT_ROWS * cfg.n_heads * max_chunks;
        let (d, qd, kvd, f) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        let ef = cfg.moe.as_ref().map_or(0, |m| m.expert_ffn);
        let kmax = d.max(qd).max(f).max(ef);
        let moe = match &cfg.moe {
            Some(m) => Some(MoeScratch {
                scores: gpu.zeros(cap * m.experts)?,
                idx: gpu.zeros(2 * cap * m.used)?,
                w: gpu.zeros(cap * m.used)?,
                xe: gpu.zeros(cap * d)?,
                g: gpu.zeros(cap * ef)?,
                u: gpu.zeros(cap * ef)?,
                a: gpu.zeros(cap * ef)?,
                y: gpu.zeros(cap * d)?,
                ys: gpu.zeros(cap * m.used * d)?,
            }),
            None => None,
        };
        Ok(Scratch {
            cap,
            x: gpu.zeros(cap * d)?,
            h: gpu.zeros(cap * d)?,
            q: gpu.zeros(cap * qd)?,
            k: gpu.zeros(cap * kvd)?,
            v: gpu.zeros(cap * kvd)?,
            att: gpu.zeros(cap * qd)?,
            // q/k norms' output, or the post norms' (`d` values a row).
            tmp: gpu.zeros(cap * qd.max(d))?,
            o: gpu.zeros(cap * d)?,
            qkv: gpu.zeros(cap * (qd + 2 * kvd))?,
            gu: gpu.zeros(cap * 2 * f)?,
            gate: gpu.zeros(cap * f)?,
            up: gpu.zeros(cap * f)?,
            act: gpu.zeros(cap * f)?,
            xs: gpu.zeros(LOGIT_ROWS * d)?,
            hs: gpu.zeros(LOGIT_ROWS * d)?,
            logits: gpu.zeros(LOGIT_ROWS * cfg.vocab)?,
            ids: gpu.zeros(LOGIT_ROWS)?,
            sl_keys: gpu.zeros(4 * LOGIT_ROWS)?,
            sl_inv: gpu.zeros(LOGIT_ROWS)?,
            sl_out: gpu.zeros(LOGIT_ROWS * crate::sample::ROW_WORDS)?,
            acts: ActCache {
                a32: gpu.act_buffer(ActBlock::B32, cap, kmax)?,
                a256: gpu.act_buffer(ActBlock::B256, cap, kmax)?,
                tag32: 0,
                tag256: 0,
            },
            pos: gpu.zeros(cap)?,
            slot: gpu.zeros(cap)?,
            meta: gpu.zeros(4 * cap)?,
            idx: gpu.zeros(cap.max(LOGIT_ROWS))?,
            tables: gpu.zeros(4096)?,
            remaps: gpu.zeros(1024)?,
            part_ml: gpu.zeros(2 * parts)?,
            part_o: gpu.zeros(parts * cfg.head_dim)?,
            max_chunks,
            moe,
        })
    }

    /// Makes room for `tables` and `remaps` ints; true if a buffer was replaced (captured graphs
    /// then hold stale pointers).
    pub fn reserve(&mut self, gpu: &Gpu, tables: usize, remaps: usize) -> Result<bool> {
        let mut moved = false;
        if self.tables.len() < tables {
            self.tables = gpu.zeros(tables.next_power_of_two())?;
            moved = true;
        }
        if self.remaps.len() < remaps {
            self.remaps = gpu.zeros(remaps.next_power_of_two())?;
            moved = true;
        }
        Ok(moved)
    }
}

/// `out1 = x · w1ᵀ`, `out2 = x · w2ᵀ`: one few-row launch where a pair kernel applies, else
/// [`matmul`] twice.
#[allow(clippy::too_many_arguments)]
pub fn matmul_pair(
    gpu: &Gpu,
    (w1, w2): (&DevMatrix, &DevMatrix),
    x: &CudaSlice<f32>,
    tag: u64,
    rows: usize,
    acts: &mut ActCache,
    out1: &mut CudaSlice<f32>,
    out2: &mut CudaSlice<f32>,
) -> Result<()> {
    if let (true, Some(block)) = (w1.interleaved && w2.interleaved, act_block(w1.dtype)) {
        // The quantized input is the one `matmul(w1)` would make; the pair kernels check the
        // types and row counts and launch nothing where they do not apply.
        let act = acts.quantized(gpu, block, x, tag, rows, w1.k)?;
        let (m1, m2) = ((w1.dtype, &w1.data, w1.n), (w2.dtype, &w2.data, w2.n));
        if rows <= gpu.gemv_rows && gpu.matmul_gemv_pair(m1, m2, act, out1, out2)? {
            return Ok(());
        }
        if gpu.matmul_mma_few_pair(m1, m2, act, out1, out2)? {
            return Ok(());
        }
    }
    matmul(gpu, w1, x, tag, rows, acts, out1)?;
    matmul(gpu, w2, x, tag, rows, acts, out2)
}

/// `out = x · wᵀ` for `rows` rows: float weights take `x` as it is, quantized weights its
/// quantized form (made once per input `tag`).
pub fn matmul(
    gpu: &Gpu,
    w: &DevMatrix,
    x: &CudaSlice<f32>,
    tag: u64,
    rows: usize,
    acts: &mut ActCache,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    match act_block(w.dtype) {
        None => gpu.matmul_f(w.dtype, &w.data, w.n, w.k, x, rows, out),
        Some(block) => {
            let act = acts.quantized(gpu, block, x, tag, rows, w.k)?;
            let gemv = w.interleaved && gpu.gemv_takes(w.dtype, rows, w.n);
            if let Some(c) = gemv.then(|| gpu.gemv_cfg(w.dtype, rows, w.k)).flatten() {
                gpu.matmul_gemv(w.dtype, &w.data, w.n, act, out, Some(c))
            } else if w.interleaved && (gpu.mma || w.dtype == DType::Q6K) {
                gpu.matmul_mma(w.dtype, &w.data, w.n, act, out, None)
            } else if w.interleaved {
                gpu.matmul_q4k_interleaved(&w.data, w.n, act, out)
            } else {
                gpu.matmul_q(w.dtype, &w.data, w.n, act, out)
            }
        }
    }
}
