//! Host wrappers of the row-exact kernels: upload, launch, download.

use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, ValidAsZeroBits};
use tf_core::DType;
use tf_kernels::actq::ActBlock;
use tf_kernels::ops::RopeStyle;

use crate::{CudaError, Gpu, Result};

/// Quantized activation rows on the device (the layout of `tf_kernels::actq::QuantAct`'s
/// `qs`, `d` and `sums`).
pub struct DevAct {
    pub block: ActBlock,
    pub rows: usize,
    pub k: usize,
    pub qs: CudaSlice<i8>,
    pub d: CudaSlice<f32>,
    pub sums: CudaSlice<i16>,
    /// With blocks of 256 values and up to [`FRAG_MAX_ROWS`] rows, the same codes in the
    /// tensor-core matmuls' order (`actq.cu`'s `frag_offset`: rows in groups of 8, each group's
    /// sub-blocks of 32 values 8 rows side by side), each block followed by its rows' records of
    /// sub-block sums ([`frag_rec_index`]), written by every kernel that quantizes; room for
    /// [`frag_len`] bytes.
    pub frag: CudaSlice<i8>,
}

impl DevAct {
    /// Whether the quantization of these rows wrote [`frag`](Self::frag).
    pub fn has_frag(&self) -> bool {
        self.block == ActBlock::B256 && self.rows <= FRAG_MAX_ROWS
    }
}

/// The most rows whose quantization also writes [`DevAct::frag`]: the tensor-core forms that
/// read it run up to 64 rows; over that (prefill) the staged form copies the rows as they are,
/// and the second copy would only cost writes.
pub const FRAG_MAX_ROWS: usize = 64;

/// Bytes of one (group of 8 rows, block) in [`DevAct::frag`]: 2,048 of codes, then 16 bytes of
/// record per row (`FRAG_GB` in actq.cu).
pub const FRAG_GB: usize = 2048 + 8 * 16;

/// Where value `v` of row `row` (rows of `k` values) lies in [`DevAct::frag`] (`frag_offset` in
/// actq.cu): group `row / 8`'s block `v / 256` ([`FRAG_GB`] bytes), its sub-block `v % 256 / 32`
/// (256 bytes), row `row % 8`'s 32 values.
pub fn frag_index(row: usize, v: usize, k: usize) -> usize {
    ((row / 8) * (k / 256) + v / 256) * FRAG_GB + (v % 256 / 32) * 256 + (row % 8) * 32 + v % 32
}

/// Where the record of row `row`'s block `b` starts (`frag_rec_offset` in actq.cu): 16 bytes,
/// h_0 .. h_7 then l_0 .. l_7, with the sum of sub-block s's 32 codes = 64 h_s + l_s and l_s
/// in 0..64.
pub fn frag_rec_index(row: usize, b: usize, k: usize) -> usize {
    ((row / 8) * (k / 256) + b) * FRAG_GB + 2048 + (row % 8) * 16
}

/// Bytes of [`DevAct::frag`] for `rows` rows of `k` values in blocks of `block`: whole groups
/// of 8 rows for blocks of 256 values, none otherwise.
pub fn frag_len(block: ActBlock, rows: usize, k: usize) -> usize {
    match block {
        ActBlock::B256 => rows.min(FRAG_MAX_ROWS).div_ceil(8) * (k / 256) * FRAG_GB,
        _ => 0,
    }
}

/// The trailing arguments of the kernels that also quantize their output (`bl, sl, qs, d,
/// sums`), checked against `rows` rows of `k` values; sets the buffer's `rows` and `k`.
pub(crate) struct QuantArgs<'a> {
    bl: i32,
    sl: i32,
    act: &'a mut DevAct,
}

impl<'a> QuantArgs<'a> {
    pub(crate) fn new(act: &'a mut DevAct, rows: usize, k: usize) -> Result<QuantArgs<'a>> {
        let (bl, sl) = (act.block.values(), act.block.sum_len());
        if !k.is_multiple_of(bl)
            || act.qs.len() < rows * k
            || act.d.len() < rows * k / bl
            || act.sums.len() < rows * k / sl
            || act.frag.len() < frag_len(act.block, rows, k)
        {
            return Err(CudaError::Usage(format!(
                "quantized output: k={k} rows={rows} block {bl}"
            )));
        }
        act.rows = rows;
        act.k = k;
        Ok(QuantArgs {
            bl: bl as i32,
            sl: sl as i32,
            act,
        })
    }

    pub(crate) fn push(&mut self, l: &mut crate::launch::Launch) {
        l.arg(&self.bl)
            .arg(&self.sl)
            .arg(&mut self.act.qs)
            .arg(&mut self.act.d)
            .arg(&mut self.act.sums);
        // The kernels write `frag` where the pointer is not null.
        if self.act.has_frag() {
            l.arg(&mut self.act.frag);
        } else {
            l.arg(&0u64);
        }
    }
}

/// Which quantized matmul kernel runs: one warp per column splitting each block's products
/// (`matmul_q.cu`), or tiles of 32 columns x 8 rows decoding each weight block once per tile
/// (`matmul_t.cu`). Both give the CPU's bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulForm {
    Warp,
    Tile,
}

impl MatmulForm {
    /// `TENSORFOLD_CUDA_MATMUL=warp|tile` (default tile).
    pub fn from_env() -> MatmulForm {
        match std::env::var("TENSORFOLD_CUDA_MATMUL").as_deref() {
            Ok("warp") => MatmulForm::Warp,
            _ => MatmulForm::Tile,
        }
    }
}

/// The bytes of one (tile of 32 rows, block index) in the interleaved layout of a k-quant
/// block of `bb` bytes: its whole 16-byte words, each of the 32 rows side by side (512 bytes
/// a word), then the 32 rows' remaining `bb % 16` bytes.
fn tile_block_bytes(bb: usize) -> usize {
    bb / 16 * 512 + 32 * (bb % 16)
}

/// Weight rows (`n` rows of `k / 256` blocks) in the interleaved layout the GPU kernels read
/// for Q4_K (`matmul_tt_q4k_i`, `mma_q4k`: nine words, no tail) and Q6_K (`mma_q6k`: thirteen
/// words, then each row's 2-byte `d`), `None` for other types. Rows past `n` in the last tile
/// are zero. The same bytes in other places, so the kernels compute the same sums and a warp's
/// loads of one word are contiguous.
pub fn interleave(dtype: DType, data: &[u8], n: usize, k: usize) -> Option<Vec<u8>> {
    let bb = match dtype {
        DType::Q4K | DType::Q6K => dtype.bytes_for(256)?,
        _ => return None,
    };
    let (nb, words, tail, tb) = (k / 256, bb / 16, bb % 16, tile_block_bytes(bb));
    let mut out = vec![0u8; interleaved_len(dtype, n, k)?];
    for c in 0..n {
        let (tile, lane) = (c / 32, c % 32);
        for b in 0..nb {
            let blk = &data[(c * nb + b) * bb..][..bb];
            let at = (tile * nb + b) * tb;
            for w in 0..words {
                let o = at + w * 512 + lane * 16;
                out[o..o + 16].copy_from_slice(&blk[16 * w..16 * w + 16]);
            }
            let o = at + words * 512 + lane * tail;
            out[o..o + tail].copy_from_slice(&blk[16 * words..]);
        }
    }
    Some(out)
}

/// Bytes of `n` rows of `k` values in the layout of [`interleave`].
pub fn interleaved_len(dtype: DType, n: usize, k: usize) -> Option<usize> {
    match dtype {
        DType::Q4K | DType::Q6K => {
            Some(n.div_ceil(32) * (k / 256) * tile_block_bytes(dtype.bytes_for(256)?))
        }
        _ => None,
    }
}

/// Whether `w` (interleaved `dtype`, `n` rows) and `out` hold a product with `x`: 256-value
/// activation blocks, and room for every tile read and every row written.
pub fn interleaved_fits(
    dtype: DType,
    w: &CudaSlice<u8>,
    n: usize,
    x: &DevAct,
    out: &CudaSlice<f32>,
) -> bool {
    x.block == ActBlock::B256
        && x.k.is_multiple_of(256)
        && interleaved_len(dtype, n, x.k).is_some_and(|need| w.len() >= need)
        && out.len() >= x.rows * n
}

/// The activation of a gated MLP: `glu.cu`'s `act`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glu {
    /// SwiGLU.
    Silu = 0,
    /// GeGLU (GELU, tanh form).
    GeluTanh = 1,
    /// gpt-oss's clamped SwiGLU.
    OaiClamped = 2,
}

impl Glu {
    /// The device activation of `mlp`.
    pub fn of(mlp: tf_models::Mlp) -> Glu {
        use tf_models::Mlp;
        match mlp {
            Mlp::SwiGlu => Glu::Silu,
            Mlp::GeGlu => Glu::GeluTanh,
            Mlp::SwiGluOai => Glu::OaiClamped,
            // Nemotron-H's plain MLP: its models are refused at load (Mamba-2 blocks).
            Mlp::Relu2 => unreachable!("a plan with Mamba-2 blocks never reaches the GPU runner"),
        }
    }
}

/// The matmul kernel of a quantized weight type, `None` where there is none yet.
pub fn matmul_kernel(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Q4_0 => "matmul_q4_0",
        DType::Q4_1 => "matmul_q4_1",
        DType::Q5_0 => "matmul_q5_0",
        DType::Q5_1 => "matmul_q5_1",
        DType::Q8_0 => "matmul_q8_0",
        DType::Q2K => "matmul_q2k",
        DType::Q3K => "matmul_q3k",
        DType::Q4K => "matmul_q4k",
        DType::Q5K => "matmul_q5k",
        DType::Q6K => "matmul_q6k",
        DType::F32 => "matmul_f32",
        DType::F16 => "matmul_f16",
        DType::BF16 => "matmul_bf16",
        DType::MXFP4 => "matmul_mxfp4",
    })
}

/// Rows one warp of a quantized matmul handles (`RT` in `matmul_q.cu`): 8 for the k-quants
/// from 2 rows on (the `_t8` kernels), else 1. Both give every row the same bits (a row's
/// operations do not depend on its tile), so choosing by row count keeps rows exact; measured
/// on the H200, tiling helped the k-quants from 4 rows on and slowed single rows and the
/// legacy types.
fn row_tile(dtype: DType, rows: usize) -> usize {
    if dtype.block_elems() == 256 && rows > 1 {
        8
    } else {
        1
    }
}

/// Widest row the RMSNorm kernels take (`RMS_MAX`, staged in shared memory).
pub const RMS_MAX: usize = 8192;
/// Threads of an RMSNorm block (`RMS_THREADS`).
const RMS_THREADS: u32 = 1024;

/// One thread block of 256 per row.
pub(crate) fn rms_launch(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.max(1) as u32, 1, 1),
        block_dim: (RMS_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The tile kernels' launch: tiles of 2 rows x 32 columns x 16 warps for one or two rows,
/// 8 x 32 x 8 beyond.
fn tile_launch(rows: usize, n: usize) -> LaunchConfig {
    let (tile_rows, warps) = if rows <= 2 { (2, 16) } else { (8, 8) };
    LaunchConfig {
        grid_dim: (grid(rows, tile_rows), grid(n, 32), 1),
        block_dim: (32 * warps, 1, 1),
        shared_mem_bytes: 0,
    }
}

pub(crate) fn grid(n: usize, per_block: usize) -> u32 {
    n.div_ceil(per_block) as u32
}

impl Gpu {
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        Ok(self.stream.clone_htod(data)?)
    }

    pub fn download<T: DeviceRepr>(&self, data: &CudaSlice<T>) -> Result<Vec<T>> {
        Ok(self.stream.clone_dtoh(data)?)
    }

    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>> {
        Ok(self.stream.alloc_zeros(len.max(1))?)
    }

    /// Room for `rows` rows of `k` values quantized in `block`s.
    pub fn act_buffer(&self, block: ActBlock, rows: usize, k: usize) -> Result<DevAct> {
        let n = rows * k;
        Ok(DevAct {
            block,
            rows,
            k,
            qs: self.zeros(n)?,
            d: self.zeros(n / block.values())?,
            sums: self.zeros(n / block.sum_len())?,
            frag: self.zeros(frag_len(block, rows, k))?,
        })
    }

    /// Quantizes `rows` rows of `k` values (`actq.rs` rules).
    pub fn quantize(
        &self,
        x: &CudaSlice<f32>,
        rows: usize,
        k: usize,
        block: ActBlock,
    ) -> Result<DevAct> {
        let mut act = self.act_buffer(block, rows, k)?;
        self.quantize_into(x, rows, k, &mut act)?;
        Ok(act)
    }

    /// Quantizes `rows` rows of `k` values into `act` (which must have room for them; its
    /// `rows` and `k` are set).
    pub fn quantize_into(
        &self,
        x: &CudaSlice<f32>,
        rows: usize,
        k: usize,
        act: &mut DevAct,
    ) -> Result<()> {
        if x.len() < rows * k {
            return Err(CudaError::Usage(format!("quantize: k={k} rows={rows}")));
        }
        let n_blocks = rows * k / act.block.values();
        let (nb, per_row) = (n_blocks as i32, (k / act.block.values()) as i32);
        let mut qa = QuantArgs::new(act, rows, k)?;
        let f = self.function("actq")?;
        // One warp per block of values.
        let cfg = LaunchConfig {
            grid_dim: (grid(n_blocks, 4), 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = self.launcher(&f);
        l.arg(x).arg(&nb).arg(&per_row);
        qa.push(&mut l);
        // SAFETY: argument types and lengths match the kernel's signature and indexing.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// `out[r * n + c] = x[r] · w[c]` for a quantized weight matrix of `n` rows of `x.k` values
    /// (`w` its raw GGUF blocks).
    pub fn matmul_q(
        &self,
        dtype: DType,
        w: &CudaSlice<u8>,
        n: usize,
        x: &DevAct,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        // The tile kernels decode Q4_K, Q6_K and the legacy types with dp4a; Q2_K, Q3_K and
        // Q5_K go through the generic decoder, which for one to three rows is slower than the
        // warp kernels (measured on the H200). Either form gives the same bits.
        let dp4a = matches!(
            dtype,
            DType::Q4K
                | DType::Q6K
                | DType::Q8_0
                | DType::Q4_0
                | DType::Q4_1
                | DType::Q5_0
                | DType::Q5_1
                | DType::MXFP4
        );
        let form = match (self.matmul_form, dtype) {
            (MatmulForm::Tile, _) if dp4a => MatmulForm::Tile,
            (MatmulForm::Tile, _) if x.rows >= 4 => MatmulForm::Tile,
            _ => MatmulForm::Warp,
        };
        self.matmul_q_form(form, dtype, w, n, x, out)
    }

    /// `out = x · wᵀ` for Q4_K weights laid out by [`interleave`] (`n` rows of `x.k`).
    pub fn matmul_q4k_interleaved(
        &self,
        w: &CudaSlice<u8>,
        n: usize,
        x: &DevAct,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if x.block != ActBlock::B256
            || !x.k.is_multiple_of(256)
            || w.len() < n.div_ceil(32) * (x.k / 256) * 9 * 512
            || out.len() < x.rows * n
        {
            return Err(CudaError::Usage("matmul_q4k_interleaved: sizes".into()));
        }
        let name = if x.rows <= 2 {
            "matmul_tt_q4k_i_r2"
        } else {
            "matmul_tt_q4k_i"
        };
        // SAFETY: sizes checked above; the kernel reads tiles of the interleaved layout.
        unsafe { self.launch_quant(name, tile_launch(x.rows, n), w, n, x, false, out) }
    }

    /// Launches a quantized matmul kernel `(w, n, k, xq, xd, xs, rows, out)`; `frag`: `xq` is
    /// [`DevAct::frag`] (the kernel reads that order), else [`DevAct::qs`].
    ///
    /// # Safety
    /// `w` must hold `n` weight rows of `x.k` values in the layout the kernel reads and `out`
    /// room for `x.rows * n` values.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn launch_quant(
        &self,
        name: &str,
        cfg: LaunchConfig,
        w: &CudaSlice<u8>,
        n: usize,
        x: &DevAct,
        frag: bool,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let f = self.function(name)?;
        let (ni, ki, ri) = (n as i32, x.k as i32, x.rows as i32);
        let mut l = self.launcher(&f);
        l.arg(w)
            .arg(&ni)
            .arg(&ki)
            .arg(if frag { &x.frag } else { &x.qs })
            .arg(&x.d)
            .arg(&x.sums)
            .arg(&ri)
            .arg(out);
        l.launch(cfg)?;
        Ok(())
    }

    /// Launches a pair kernel (`gvp_*`, `fwp_*`): `w1` / `n1` / `out1`, then `w2` / `n2` /
    /// `out2`, k, the activations (with `frag`, in [`DevAct::frag`]'s order), their scales and
    /// sums, and the row count, with `cfg.shared_mem_bytes` of dynamic shared memory allowed.
    ///
    /// # Safety
    /// Each `w` must hold its `n` weight rows of `x.k` values in the layout the kernel reads, and
    /// each `out` room for `x.rows * n` values.
    pub(crate) unsafe fn launch_pair(
        &self,
        name: &str,
        cfg: LaunchConfig,
        (w1, n1, out1): (&CudaSlice<u8>, usize, &mut CudaSlice<f32>),
        (w2, n2, out2): (&CudaSlice<u8>, usize, &mut CudaSlice<f32>),
        x: &DevAct,
        frag: bool,
    ) -> Result<()> {
        let f = self.function(name)?;
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            cfg.shared_mem_bytes as i32,
        )?;
        let (n1i, n2i, ki, ri) = (n1 as i32, n2 as i32, x.k as i32, x.rows as i32);
        let mut l = self.launcher(&f);
        l.arg(w1)
            .arg(&n1i)
            .arg(out1)
            .arg(w2)
            .arg(&n2i)
            .arg(out2)
            .arg(&ki)
            .arg(if frag { &x.frag } else { &x.qs })
            .arg(&x.d)
            .arg(&x.sums)
            .arg(&ri);
        l.launch(cfg)?;
        Ok(())
    }

    /// [`matmul_q`](Self::matmul_q) with the kernel form chosen.
    pub fn matmul_q_form(
        &self,
        form: MatmulForm,
        dtype: DType,
        w: &CudaSlice<u8>,
        n: usize,
        x: &DevAct,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let name = matmul_kernel(dtype)
            .ok_or_else(|| CudaError::Usage(format!("no GPU matmul for {dtype} yet")))?;
        let want = tf_kernels::matmul::act_block(dtype);
        if want != Some(x.block) {
            return Err(CudaError::Usage(format!(
                "{dtype} needs activations {want:?}, got {:?}",
                x.block
            )));
        }
        let row_bytes = dtype
            .bytes_for(x.k)
            .ok_or_else(|| CudaError::Usage(format!("k={} does not fit {dtype}", x.k)))?;
        if w.len() < n * row_bytes || out.len() < x.rows * n {
            return Err(CudaError::Usage("matmul_q: buffer sizes".into()));
        }
        if form == MatmulForm::Tile {
            let suffix = if x.rows <= 2 { "_r2" } else { "" };
            let name = format!("{}{suffix}", name.replace("matmul_", "matmul_tt_"));
            // SAFETY: sizes checked above.
            return unsafe {
                self.launch_quant(&name, tile_launch(x.rows, n), w, n, x, false, out)
            };
        }
        let tile = row_tile(dtype, x.rows);
        let name = if tile == 1 {
            name.to_string()
        } else {
            format!("{name}_t{tile}")
        };
        const WARPS: usize = 4;
        let cfg = LaunchConfig {
            grid_dim: (grid(n, WARPS), grid(x.rows, tile), 1),
            block_dim: (32 * WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: sizes checked above.
        unsafe { self.launch_quant(&name, cfg, w, n, x, false, out) }
    }

    /// `out[r * n + c] = x[r] · w[c]` for float weights (F32, F16, BF16: `w` their raw bytes),
    /// `x` f32 rows of `k` values, with the canonical dot.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_f(
        &self,
        dtype: DType,
        w: &CudaSlice<u8>,
        n: usize,
        k: usize,
        x: &CudaSlice<f32>,
        rows: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if tf_kernels::matmul::act_block(dtype).is_some() {
            return Err(CudaError::Usage(format!("{dtype} is not a float type")));
        }
        let name = matmul_kernel(dtype).expect("float types have kernels");
        let row_bytes = k * dtype.block_bytes();
        if w.len() < n * row_bytes || x.len() < rows * k || out.len() < rows * n {
            return Err(CudaError::Usage("matmul_f: buffer sizes".into()));
        }
        let f = self.function(name)?;
        const HALF_WARPS: usize = 8;
        let cfg = LaunchConfig {
            grid_dim: (grid(n, HALF_WARPS), rows as u32, 1),
            block_dim: (16 * HALF_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (ni, ki) = (n as i32, k as i32);
        let mut l = self.launcher(&f);
        l.arg(w).arg(&ni).arg(&ki).arg(x).arg(out);
        // SAFETY: as above.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// RMSNorm of `rows` rows of `n` values (`ops::rms_norm`); with `q`, the output is also
    /// quantized into it in the same launch (as [`quantize_into`](Self::quantize_into) would).
    #[allow(clippy::too_many_arguments)]
    pub fn rms_norm(
        &self,
        x: &CudaSlice<f32>,
        weight: &CudaSlice<f32>,
        n: usize,
        eps: f32,
        rows: usize,
        out: &mut CudaSlice<f32>,
        q: Option<&mut DevAct>,
    ) -> Result<()> {
        if x.len() < rows * n || weight.len() < n || out.len() < rows * n || n > RMS_MAX {
            return Err(CudaError::Usage("rms_norm: buffer sizes".into()));
        }
        let (ni, ri) = (n as i32, rows as i32);
        let f = self.function(if q.is_some() {
            "rms_norm_q"
        } else {
            "rms_norm"
        })?;
        let mut l = self.launcher(&f);
        l.arg(x).arg(weight).arg(&ni).arg(&eps).arg(&ri).arg(out);
        let mut qa = q.map(|a| QuantArgs::new(a, rows, n)).transpose()?;
        if let Some(qa) = qa.as_mut() {
            qa.push(&mut l);
        }
        // SAFETY: as above; `QuantArgs::new` checked the quantized buffers.
        unsafe { l.launch(rms_launch(rows)) }?;
        Ok(())
    }

    /// `out[i] = act(gate[i]) * up[i]` (`canon::swiglu`, `canon::geglu`).
    pub fn glu(
        &self,
        act: Glu,
        gate: &CudaSlice<f32>,
        up: &CudaSlice<f32>,
        len: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if gate.len() < len || up.len() < len || out.len() < len {
            return Err(CudaError::Usage("glu: buffer sizes".into()));
        }
        let f = self.function("glu")?;
        let cfg = LaunchConfig {
            grid_dim: (grid(len, 256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (n, a) = (len as i32, act as i32);
        let mut l = self.launcher(&f);
        l.arg(gate).arg(up).arg(&n).arg(&a).arg(out);
        // SAFETY: as above.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// Gated DeltaNet's delta rule over one sequence's tokens (`tf_kernels::deltanet::delta_rule`,
    /// bit for bit): `q`, `k` are `tokens x (k_heads * dk)`, `v` and `out` `tokens x (v_heads *
    /// dv)`, `g` and `beta` `tokens x v_heads`; `state` (`v_heads x dk x dv`) is updated.
    #[allow(clippy::too_many_arguments)]
    pub fn delta_rule(
        &self,
        shape: &tf_kernels::deltanet::DeltaShape,
        tokens: usize,
        q: &CudaSlice<f32>,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        g: &CudaSlice<f32>,
        beta: &CudaSlice<f32>,
        state: &mut CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (hk, hv, dk, dv) = (shape.k_heads, shape.v_heads, shape.dk, shape.dv);
        let (kw, vw) = (hk * dk, hv * dv);
        let sizes_ok = hk > 0
            && hv.is_multiple_of(hk)
            && dv <= 1024
            && q.len() >= tokens * kw
            && k.len() >= tokens * kw
            && v.len() >= tokens * vw
            && out.len() >= tokens * vw
            && g.len() >= tokens * hv
            && beta.len() >= tokens * hv
            && state.len() >= shape.state_len();
        if !sizes_ok {
            return Err(CudaError::Usage("delta_rule: shape or buffer sizes".into()));
        }
        let f = self.function("delta_rule")?;
        let cfg = LaunchConfig {
            grid_dim: (hv as u32, 1, 1),
            block_dim: (dv as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let dims = [tokens, hk, hv, dk, dv, usize::from(shape.tiled)].map(|x| x as i32);
        let mut l = self.launcher(&f);
        l.arg(q).arg(k).arg(v).arg(g).arg(beta).arg(state).arg(out);
        for d in &dims {
            l.arg(d);
        }
        // SAFETY: every buffer was checked to hold what the kernel reads and writes for these
        // dimensions; the kernel reads and writes only inside them.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// `x[i] = cap * tanh(x[i] / cap)` for the first `len` values that are finite (final-logit
    /// soft-capping, as the CPU's output head does it).
    pub fn soft_cap(&self, x: &mut CudaSlice<f32>, len: usize, cap: f32) -> Result<()> {
        if x.len() < len {
            return Err(CudaError::Usage("soft_cap: buffer size".into()));
        }
        let f = self.function("soft_cap")?;
        let n = len as i32;
        let mut l = self.launcher(&f);
        l.arg(x).arg(&n).arg(&cap);
        // SAFETY: the size was checked.
        unsafe { l.launch(LaunchConfig::for_num_elems(len.max(1) as u32)) }?;
        Ok(())
    }

    /// Rotates, in place, `rows` rows of `n_heads` heads of `head_dim` values, row r at
    /// position `pos[r]`; `cs` from [`rope_table`] covering every position used.
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &self,
        x: &mut CudaSlice<f32>,
        pos: &CudaSlice<i32>,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        rot_dim: usize,
        style: RopeStyle,
        cs: &CudaSlice<f32>,
    ) -> Result<()> {
        if x.len() < rows * n_heads * head_dim || pos.len() < rows || rot_dim > head_dim {
            return Err(CudaError::Usage("rope: buffer sizes".into()));
        }
        let f = self.function("rope")?;
        let threads = rows * n_heads * (rot_dim / 2);
        let cfg = LaunchConfig {
            grid_dim: (grid(threads, 256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = [rows, n_heads, head_dim, rot_dim].map(|v| v as i32);
        let style = match style {
            RopeStyle::Interleaved => 0i32,
            RopeStyle::Neox => 1,
        };
        let mut l = self.launcher(&f);
        l.arg(x)
            .arg(pos)
            .arg(&args[0])
            .arg(&args[1])
            .arg(&args[2])
            .arg(&args[3])
            .arg(&style)
            .arg(cs);
        // SAFETY: as above.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}

/// (cos, sin) pairs for positions `0..max_pos` and the `rot_dim / 2` rotary pairs, computed as
/// `tf_kernels::ops::RopeTable` does (in f64, rounded once), interleaved per pair.
pub fn rope_table(rot_dim: usize, base: f32, max_pos: usize) -> Vec<f32> {
    rope_table_of(&tf_kernels::ops::RopeTable::new(rot_dim, base, 0), max_pos)
}

/// [`rope_table`] for a plan's RoPE ([`tf_kernels::ops::RopeTable`] with its frequency scaling
/// and its cos/sin factor): the same f64 arithmetic as the CPU's table.
pub fn rope_table_of(table: &tf_kernels::ops::RopeTable, max_pos: usize) -> Vec<f32> {
    let (thetas, mscale) = (table.thetas(), table.mscale());
    let mut t = Vec::with_capacity(max_pos * thetas.len() * 2);
    for p in 0..max_pos {
        for &theta in thetas {
            let a = p as f64 * theta;
            t.push((a.cos() * mscale) as f32);
            t.push((a.sin() * mscale) as f32);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_moves_every_byte_of_every_block_once() {
        for (dtype, bb, n) in [(DType::Q4K, 144, 37), (DType::Q6K, 210, 40)] {
            let k = 512;
            let nb = k / 256;
            let data: Vec<u8> = (0..n * nb * bb).map(|i| (i * 7 % 251) as u8).collect();
            let il = interleave(dtype, &data, n, k).unwrap();
            let tb = bb / 16 * 512 + 32 * (bb % 16);
            assert_eq!(il.len(), 2 * nb * tb);
            assert_eq!(il.len(), interleaved_len(dtype, n, k).unwrap());
            for c in 0..n {
                for b in 0..nb {
                    let blk = &data[(c * nb + b) * bb..][..bb];
                    let at = ((c / 32) * nb + b) * tb;
                    for (i, &v) in blk.iter().enumerate() {
                        let o = if i < bb / 16 * 16 {
                            at + (i / 16) * 512 + (c % 32) * 16 + i % 16
                        } else {
                            at + bb / 16 * 512 + (c % 32) * (bb % 16) + i % 16
                        };
                        assert_eq!(il[o], v, "{dtype} c {c} b {b} byte {i}");
                    }
                }
            }
            // Nothing else was written: rows past n in the last tile are zero.
            let moved: u64 = il.iter().map(|&b| b as u64).sum();
            assert_eq!(
                moved,
                data.iter().map(|&b| b as u64).sum::<u64>(),
                "{dtype}"
            );
        }
    }

    #[test]
    fn the_tensor_core_copy_places_every_value_and_record_once_in_its_rows_group() {
        let k = 768;
        for rows in [1, 7, 8, 9, 64] {
            let len = frag_len(ActBlock::B256, rows, k);
            assert_eq!(len, rows.div_ceil(8) * 8 * k * 17 / 16);
            let mut seen = vec![false; len];
            for r in 0..rows {
                for v in 0..k {
                    let i = frag_index(r, v, k);
                    assert!(!seen[i], "rows {rows}: row {r} value {v} shares {i}");
                    seen[i] = true;
                    // A warp's load of sub-block s of 8 rows (row gid, values 8t .. 8t + 7 of
                    // lane 4 gid + t) reads 256 contiguous bytes.
                    let (g0, s) = (frag_index(r - r % 8, v - v % 32, k), v % 256 / 32);
                    assert_eq!(g0, ((r / 8) * (k / 256) + v / 256) * FRAG_GB + 256 * s);
                    assert!(i - g0 < 256);
                }
                for b in 0..k / 256 {
                    // A tile's 8 records are 128 contiguous bytes, after its codes.
                    let at = frag_rec_index(r, b, k);
                    assert_eq!(at - frag_rec_index(r - r % 8, b, k), 16 * (r % 8));
                    assert_eq!(at % 16, 0);
                    for (i, s) in seen.iter_mut().enumerate().skip(at).take(16) {
                        assert!(!*s, "rows {rows}: row {r} record {b} shares {i}");
                        *s = true;
                    }
                }
            }
            if rows % 8 == 0 {
                assert!(seen.iter().all(|&s| s), "rows {rows}: every byte has a use");
            }
        }
        assert_eq!(frag_len(ActBlock::B256, 200, k), 64 * k * 17 / 16);
        assert_eq!(frag_len(ActBlock::B32, 8, k), 0);
    }
}
