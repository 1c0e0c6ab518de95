//! Host wrappers of the forward pass's row bookkeeping and attention kernels
//! (`kernels/rows.cu`, `kernels/attention.cu`).

use crate::launch::Launch;
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaSlice, CudaView, LaunchConfig};

use crate::ops::{DevAct, Glu, QuantArgs};
use crate::{CudaError, Gpu, Result};

/// Query heads per KV head the attention kernel handles at most (`MAX_GROUP`).
pub const MAX_GROUP: usize = 16;
/// Largest head dimension of the attention kernel.
pub const MAX_HEAD_DIM: usize = 256;
/// Query values per KV head (group size x head dimension) the attention kernel holds at most.
pub const MAX_GROUP_VALUES: usize = 2048;

/// Query heads (rows x group) one block of the tiled kernel holds, and its threads
/// (`attention_tile.cu`).
const TILE_QH: usize = 32;
const TILE_THREADS: u32 = 128;
/// Blocks of the tiled kernel's split form one multiprocessor holds (`TILE_SPLIT_BLOCKS`), and
/// of the other split forms (their register use).
const TILE_SPLIT_BLOCKS: usize = 3;
const SPLIT_BLOCKS: usize = 2;
/// Threads per block of `argmax_rows` (`ARGMAX_THREADS`).
const ARGMAX_THREADS: u32 = 512;
/// Threads per block of `attention_few.cu` (`FEW_THREADS`).
const FEW_THREADS: u32 = 128;

/// Shared memory of the tiled kernel for head dimension `hd` (`TileSmem`): queries and keys
/// in padded rows, values, exponentials and the split form's half scores, five per-head arrays,
/// then the int bookkeeping (six arrays of 32 and three counts).
fn tile_smem(hd: usize) -> usize {
    let floats = 2 * TILE_QH * (hd + 4) + 32 * hd + 2 * TILE_QH * 40 + 5 * TILE_QH;
    let ints = 6 * 32 + 3;
    (4 * (floats + ints)).next_multiple_of(16)
}

/// The query rows and the cache description: the first arguments of every attention kernel.
fn push_keys(l: &mut Launch, q: &CudaSlice<f32>, keys: &AttnKeys) {
    l.arg(q)
        .arg(keys.kc)
        .arg(keys.vc)
        .arg(keys.meta)
        .arg(keys.tables)
        .arg(keys.remaps);
}

/// The shape of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttnDims {
    pub rows: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    /// Keys visible to a row (its own included), `None` = all (`LayerPlan::window`).
    pub window: Option<usize>,
    /// `cap * tanh(s / cap)` on every score (`LayerPlan::attn_softcap`).
    pub softcap: Option<f32>,
}

/// One layer's cache and the device buffers describing which keys each row reads (see
/// `attention.cu`): `meta` 4 ints per row (table offset, key count, remap base or -1, remap offset), the flat block tables and the
/// flat remap slots.
pub struct AttnKeys<'a> {
    /// One layer's cache: the key and value of slot s at `s * kv_dim`.
    pub kc: &'a CudaSlice<f32>,
    pub vc: &'a CudaSlice<f32>,
    pub meta: &'a CudaSlice<i32>,
    pub tables: &'a CudaSlice<i32>,
    pub remaps: &'a CudaSlice<i32>,
    /// The cache slots this call's rows write (one per row, as `kv_write`'s `slot`): the split
    /// forms (few-row and tiled) read the other keys before the previous kernel has ended, so
    /// every slot the call writes must be here.
    pub fresh: &'a CudaSlice<i32>,
    /// One sink logit per query head (gpt-oss), merged after the last chunk.
    pub sinks: Option<&'a CudaSlice<f32>>,
}

/// The split form's partials: room for `max_chunks` chunks of every (row, head), and the blocks
/// per (row, KV head).
pub struct AttnSplit<'a> {
    pub max_chunks: usize,
    pub splits: usize,
    pub part_ml: &'a mut CudaSlice<f32>,
    pub part_o: &'a mut CudaSlice<f32>,
}

impl AttnDims {
    /// Whether the attention kernels support this shape.
    pub fn check(&self) -> Result<()> {
        let (h, kvh, hd) = (self.n_heads, self.n_kv_heads, self.head_dim);
        if kvh == 0
            || !h.is_multiple_of(kvh)
            || h / kvh > MAX_GROUP
            || hd > MAX_HEAD_DIM
            || !hd.is_multiple_of(16)
            || h / kvh * hd > MAX_GROUP_VALUES
        {
            return Err(CudaError::Usage(format!(
                "attention: {h} heads over {kvh} KV heads of {hd} values are not supported on the GPU"
            )));
        }
        Ok(())
    }
}

impl Gpu {
    /// Blocks per KV head of the tiled attention kernel for this shape, or `None` where it
    /// does not apply (head dimensions other than 64 and 128, sliding windows or soft-capped
    /// scores, or `TENSORFOLD_CUDA_ATT_TILE=0`).
    pub fn attention_tiles(&self, dims: &AttnDims) -> Option<usize> {
        let g = dims.n_heads / dims.n_kv_heads.max(1);
        let plain = dims.window.is_none() && dims.softcap.is_none();
        (self.att_tile && plain && matches!(dims.head_dim, 64 | 128) && (1..=TILE_QH).contains(&g))
            .then(|| dims.rows.div_ceil(TILE_QH / g))
    }

    /// Blocks per (tile or row, KV head) for the split form of this call: enough to fill every
    /// multiprocessor with the blocks of the kernel the call takes (counted per tile of rows),
    /// at most one per chunk.
    pub fn attention_splits(&self, dims: &AttnDims, max_chunks: usize) -> usize {
        let tiles = self.attention_tiles(dims);
        let per_sm = match tiles {
            Some(_) if !self.attention_few(dims) => TILE_SPLIT_BLOCKS,
            _ => SPLIT_BLOCKS,
        };
        let jobs = tiles.unwrap_or(dims.rows) * dims.n_kv_heads;
        (self.sms * per_sm / jobs.max(1)).clamp(1, max_chunks.max(1))
    }

    /// Whether a split call of this shape takes the few-row kernel (`attention_few.cu`).
    fn attention_few(&self, dims: &AttnDims) -> bool {
        dims.rows <= self.att_few && matches!(dims.head_dim, 64 | 128)
    }

    /// Attention of `dims.rows` query rows over one layer's paged cache (`keys`), in the
    /// canonical key-chunk order of `tf_kernels::attention`. With `split`,
    /// the same bits for few rows: `splits` blocks per (row, KV head) compute one chunk each in
    /// turn into the partials, then one merge per (row, head) folds them in order.
    ///
    /// Long on purpose: the choice among the four kernel forms (tiled, few-row, split, one
    /// pass) and each form's launch arguments sit side by side, so that the forms stay visibly
    /// the same computation.
    pub fn attention(
        &self,
        dims: AttnDims,
        q: &CudaSlice<f32>,
        keys: &AttnKeys,
        split: Option<AttnSplit>,
        out: &mut CudaSlice<f32>,
        quant: Option<&mut DevAct>,
    ) -> Result<()> {
        let AttnDims {
            rows,
            n_heads,
            n_kv_heads,
            head_dim,
            scale,
            window,
            softcap,
        } = dims;
        let qd = n_heads * head_dim;
        // 0 = no window, no cap (the kernels' convention).
        let window = window.map_or(0, |w| w.clamp(1, i32::MAX as usize) as i32);
        let softcap = softcap.unwrap_or(0.0);
        dims.check()?;
        if q.len() < rows * qd || out.len() < rows * qd || keys.meta.len() < 4 * rows {
            return Err(CudaError::Usage("attention: buffer sizes".into()));
        }
        if let Some(sp) = &split {
            if keys.fresh.len() < rows {
                return Err(CudaError::Usage("attention: fresh slots".into()));
            }
            let per = rows * n_heads * sp.max_chunks;
            if sp.part_ml.len() < 2 * per || sp.part_o.len() < per * head_dim {
                return Err(CudaError::Usage("attention: partials sizes".into()));
            }
        }
        if rows == 0 {
            return Ok(());
        }
        let (h, kvh, hd) = (n_heads as i32, n_kv_heads as i32, head_dim as i32);
        let mc = split.as_ref().map_or(0, |sp| sp.max_chunks as i32);
        let z = split.as_ref().map_or(1, |sp| sp.splits.max(1)) as u32;
        let few = split.is_some() && self.attention_few(&dims);
        if let (true, Some(sp)) = (few, &split) {
            let f = self.function(if head_dim == 128 {
                "attention_few_128"
            } else {
                "attention_few_64"
            })?;
            let mut l = self.launcher(&f);
            push_keys(&mut l, q, keys);
            l.arg(keys.fresh)
                .arg(&h)
                .arg(&kvh)
                .arg(&scale)
                .arg(&window)
                .arg(&softcap)
                .arg(&mc)
                .arg(&*sp.part_ml)
                .arg(&*sp.part_o);
            let cfg = LaunchConfig {
                grid_dim: (rows as u32, n_kv_heads as u32, z),
                block_dim: (FEW_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: argument types match the kernel; the metadata covers every position
            // read and every row has at most `max_chunks` chunks (checked by the caller).
            unsafe { l.launch(cfg) }?;
        } else if let Some(tiles) = self.attention_tiles(&dims).filter(|_| keys.sinks.is_none()) {
            let f = self.function(match (split.is_some(), head_dim == 128) {
                (false, true) => "attention_tile_128",
                (false, false) => "attention_tile_64",
                (true, true) => "attention_tile_split_128",
                (true, false) => "attention_tile_split_64",
            })?;
            let smem = tile_smem(head_dim);
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )?;
            let n = rows as i32;
            let mut l = self.launcher(&f);
            push_keys(&mut l, q, keys);
            l.arg(keys.fresh)
                .arg(&n)
                .arg(&h)
                .arg(&kvh)
                .arg(&scale)
                .arg(&mut *out)
                .arg(&mc);
            let null = 0u64;
            match &split {
                Some(sp) => l.arg(&*sp.part_ml).arg(&*sp.part_o),
                None => l.arg(&null).arg(&null),
            };
            let cfg = LaunchConfig {
                grid_dim: (tiles as u32, kvh as u32, z),
                block_dim: (TILE_THREADS, 1, 1),
                shared_mem_bytes: smem as u32,
            };
            // SAFETY: argument types match the kernel (null partials select the one-pass
            // form); the metadata covers every position read (checked on the host); the
            // kernel traps if its shared memory is short.
            unsafe { l.launch(cfg) }?;
        } else {
            let f = self.function(if split.is_some() {
                "attention_split"
            } else {
                "attention"
            })?;
            let mut l = self.launcher(&f);
            push_keys(&mut l, q, keys);
            l.arg(&h)
                .arg(&kvh)
                .arg(&hd)
                .arg(&scale)
                .arg(&window)
                .arg(&softcap);
            let null = 0u64;
            match &split {
                Some(sp) => l.arg(&mc).arg(&*sp.part_ml).arg(&*sp.part_o),
                None => match keys.sinks {
                    Some(sk) => l.arg(sk).arg(&mut *out),
                    None => l.arg(&null).arg(&mut *out),
                },
            };
            let cfg = LaunchConfig {
                grid_dim: (rows as u32, n_kv_heads as u32, z),
                // A thread per head dimension, at least a warp (the score shuffles).
                block_dim: (head_dim.max(32) as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: argument types match the kernel; the metadata was built by the caller
            // from block tables that cover every position read (checked on the host); every
            // row has at most `max_chunks` chunks (the caller checks).
            unsafe { l.launch(cfg) }?;
        }
        let Some(sp) = split else {
            if let Some(act) = quant {
                self.quantize_into(out, rows, qd, act)?;
            }
            return Ok(());
        };
        // With `quant`, the merge also quantizes its output for the o matmul (one launch),
        // where a block of 256 values spans at most MERGE_HEADS heads.
        let (quant, later) = match quant {
            Some(act) if head_dim < 32 => (None, Some(act)),
            q => (q, None),
        };
        let mut qa = quant.map(|act| QuantArgs::new(act, rows, qd)).transpose()?;
        let f = self.function(match qa {
            Some(_) => "attention_merge_q",
            None => "attention_merge",
        })?;
        let mut l = self.launcher(&f);
        let null = 0u64;
        l.arg(keys.meta).arg(&window);
        match keys.sinks {
            Some(sk) => l.arg(sk),
            None => l.arg(&null),
        };
        l.arg(&h)
            .arg(&hd)
            .arg(&mc)
            .arg(&*sp.part_ml)
            .arg(&*sp.part_o)
            .arg(&mut *out);
        // attention_merge_q: a block per 256 values of a row; attention_merge: per head.
        let (grid, block) = match &mut qa {
            Some(qa) => {
                qa.push(&mut l);
                ((rows as u32, qd.div_ceil(256) as u32, 1), 256)
            }
            None => ((rows as u32, n_heads as u32, 1), head_dim.max(32) as u32),
        };
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: as above; `QuantArgs` checked the quantized buffers' sizes.
        unsafe { l.launch(cfg) }?;
        drop(l);
        if let Some(act) = later {
            self.quantize_into(out, rows, qd, act)?;
        }
        Ok(())
    }

    /// Writes row r's key and value (`kv_dim` each) to cache slot `slot[r]` of one layer.
    #[allow(clippy::too_many_arguments)]
    pub fn kv_write(
        &self,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        slot: &CudaSlice<i32>,
        rows: usize,
        kv_dim: usize,
        kc: &mut CudaSlice<f32>,
        vc: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if k.len() < rows * kv_dim || v.len() < rows * kv_dim || slot.len() < rows {
            return Err(CudaError::Usage("kv_write: buffer sizes".into()));
        }
        if rows == 0 {
            return Ok(());
        }
        let f = self.function("kv_write")?;
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let (ri, di) = (rows as i32, kv_dim as i32);
        let mut l = self.launcher(&f);
        l.arg(k).arg(v).arg(slot).arg(&ri).arg(&di).arg(kc).arg(vc);
        // SAFETY: slots were checked against the cache size on the host.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// `x[i] += y[i]` for `i < len`.
    pub fn add_into(&self, x: &mut CudaSlice<f32>, y: &CudaSlice<f32>, len: usize) -> Result<()> {
        if x.len() < len || y.len() < len {
            return Err(CudaError::Usage("add_into: buffer sizes".into()));
        }
        let f = self.function("add_into")?;
        let n = len as i32;
        let mut l = self.launcher(&f);
        l.arg(x).arg(y).arg(&n);
        // SAFETY: lengths checked above.
        unsafe { l.launch(LaunchConfig::for_num_elems(len.max(1) as u32)) }?;
        Ok(())
    }

    /// `x[r * n + i] += b[i]` for `rows` rows.
    pub fn add_bias(
        &self,
        x: &mut CudaSlice<f32>,
        b: &CudaSlice<f32>,
        rows: usize,
        n: usize,
    ) -> Result<()> {
        if x.len() < rows * n || b.len() < n {
            return Err(CudaError::Usage("add_bias: buffer sizes".into()));
        }
        let f = self.function("add_bias")?;
        let (ri, ni) = (rows as i32, n as i32);
        let mut l = self.launcher(&f);
        l.arg(x).arg(b).arg(&ri).arg(&ni);
        // SAFETY: lengths checked above.
        unsafe { l.launch(LaunchConfig::for_num_elems((rows * n).max(1) as u32)) }?;
        Ok(())
    }

    /// `out[j] = x[idx[j]]` for `count` rows of `n` values.
    pub fn gather_rows(
        &self,
        x: &CudaSlice<f32>,
        idx: &CudaView<i32>,
        count: usize,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        self.move_rows("gather_rows", x, idx, count, n, out)
    }

    /// `out[idx[j]] = x[j]` for `count` rows of `n` values.
    pub fn scatter_rows(
        &self,
        x: &CudaSlice<f32>,
        idx: &CudaView<i32>,
        count: usize,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        self.move_rows("scatter_rows", x, idx, count, n, out)
    }

    fn move_rows(
        &self,
        name: &str,
        x: &CudaSlice<f32>,
        idx: &CudaView<i32>,
        count: usize,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let side = if name == "gather_rows" {
            out.len()
        } else {
            x.len()
        };
        if idx.len() < count || side < count * n {
            return Err(CudaError::Usage(format!("{name}: buffer sizes")));
        }
        if count == 0 {
            return Ok(());
        }
        let f = self.function(name)?;
        let ni = n as i32;
        let cfg = LaunchConfig {
            grid_dim: (count as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = self.launcher(&f);
        l.arg(x).arg(idx).arg(&ni).arg(out);
        // SAFETY: indices were checked against the rows of `x` and `out` on the host.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// A mixture's output rows (`moe::combine`): `out[r] = Σ_j w[r][j] * ys[r][j]` in rank
    /// order, `k` ranks of `n` values a row.
    pub fn moe_combine(
        &self,
        ys: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        rows: usize,
        k: usize,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if ys.len() < rows * k * n || w.len() < rows * k || out.len() < rows * n {
            return Err(CudaError::Usage("moe_combine: buffer sizes".into()));
        }
        let f = self.function("moe_combine")?;
        let (ri, ki, ni) = (rows as i32, k as i32, n as i32);
        let mut l = self.launcher(&f);
        l.arg(ys).arg(w).arg(&ri).arg(&ki).arg(&ni).arg(out);
        // SAFETY: sizes checked above.
        unsafe { l.launch(LaunchConfig::for_num_elems((rows * n).max(1) as u32)) }?;
        Ok(())
    }

    /// Every f16 bit pattern through the kernels' `f16_to_f32` (for `gpu-check`): element i is
    /// the float of bits i.
    pub fn f16_table(&self) -> Result<Vec<f32>> {
        let f = self.function("f16_table")?;
        let mut out = self.zeros::<f32>(65536)?;
        let cfg = LaunchConfig {
            grid_dim: (256, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = self.launcher(&f);
        l.arg(&mut out);
        // SAFETY: 256 x 256 threads write the 65,536 floats of `out`, one each.
        unsafe { l.launch(cfg) }?;
        self.download(&out)
    }

    /// The greedy token of rows `first..first + rows` of `x` (`n` values each) into
    /// `out[..rows]`: the host's `tf_engine::greedy_token`, one block per row.
    pub fn argmax_rows(
        &self,
        x: &CudaSlice<f32>,
        n: usize,
        first: usize,
        rows: usize,
        out: &mut CudaSlice<i32>,
    ) -> Result<()> {
        if n == 0 || (first + rows) * n > x.len() || out.len() < rows {
            return Err(CudaError::Usage("argmax_rows: buffer sizes".into()));
        }
        if rows == 0 {
            return Ok(());
        }
        let f = self.function("argmax_rows")?;
        let (ni, fi) = (n as i32, first as i32);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (ARGMAX_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = self.launcher(&f);
        l.arg(x).arg(&ni).arg(&fi).arg(out);
        // SAFETY: the rows read and the ids written were checked against the buffers above.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// Copies cache slot `pairs[2i]` to `pairs[2i + 1]` of one layer, pair after pair.
    pub fn kv_copy(
        &self,
        pairs: &CudaSlice<i32>,
        n_pairs: usize,
        kv_dim: usize,
        kc: &mut CudaSlice<f32>,
        vc: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if pairs.len() < 2 * n_pairs {
            return Err(CudaError::Usage("kv_copy: buffer sizes".into()));
        }
        if n_pairs == 0 {
            return Ok(());
        }
        let f = self.function("kv_copy")?;
        let (np, di) = (n_pairs as i32, kv_dim as i32);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = self.launcher(&f);
        l.arg(pairs).arg(&np).arg(&di).arg(kc).arg(vc);
        // SAFETY: slots were checked against the cache size on the host.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}

/// What `qkv_post` reads and writes for each row.
pub struct QkvPost<'a> {
    /// q, k and v of each row: q rows `q_stride` floats apart, k rows `k_stride` and v rows
    /// `v_stride` apart (views into one fused q|k|v buffer, a q|k buffer and v, or three).
    pub q: CudaView<'a, f32>,
    pub k: CudaView<'a, f32>,
    pub v: CudaView<'a, f32>,
    pub q_stride: usize,
    pub k_stride: usize,
    pub v_stride: usize,
    pub bq: Option<&'a CudaSlice<f32>>,
    pub bk: Option<&'a CudaSlice<f32>>,
    pub bv: Option<&'a CudaSlice<f32>>,
    pub pos: &'a CudaSlice<i32>,
    pub slot: &'a CudaSlice<i32>,
    pub rot_dim: usize,
    pub style: tf_kernels::ops::RopeStyle,
    pub cs: &'a CudaSlice<f32>,
}

impl Gpu {
    /// `x += y`, then `out = rms_norm(x)` (`add_into` then `rms_norm`, one launch).
    #[allow(clippy::too_many_arguments)]
    pub fn add_rms_norm(
        &self,
        x: &mut CudaSlice<f32>,
        y: &CudaSlice<f32>,
        weight: &CudaSlice<f32>,
        n: usize,
        eps: f32,
        rows: usize,
        out: &mut CudaSlice<f32>,
        q: Option<&mut DevAct>,
    ) -> Result<()> {
        if x.len() < rows * n
            || y.len() < rows * n
            || weight.len() < n
            || out.len() < rows * n
            || n > crate::ops::RMS_MAX
        {
            return Err(CudaError::Usage("add_rms_norm: buffer sizes".into()));
        }
        let f = self.function(if q.is_some() {
            "add_rms_norm_q"
        } else {
            "add_rms_norm"
        })?;
        let cfg = crate::ops::rms_launch(rows);
        let (ni, ri) = (n as i32, rows as i32);
        let mut l = self.launcher(&f);
        l.arg(x)
            .arg(y)
            .arg(weight)
            .arg(&ni)
            .arg(&eps)
            .arg(&ri)
            .arg(out);
        let mut qa = q.map(|a| QuantArgs::new(a, rows, n)).transpose()?;
        if let Some(qa) = qa.as_mut() {
            qa.push(&mut l);
        }
        // SAFETY: lengths checked above (the quantized output's by `QuantArgs::new`).
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// Biases, RoPE and the KV write after the q/k/v matmuls (`add_bias`, `rope`, `kv_write`,
    /// one launch): q to `qo`, k and v to one layer's cache.
    #[allow(clippy::too_many_arguments)]
    pub fn qkv_post(
        &self,
        p: &QkvPost,
        rows: usize,
        dims: AttnDims,
        qo: &mut CudaSlice<f32>,
        kc: &mut CudaSlice<f32>,
        vc: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (qd, kvd) = (
            dims.n_heads * dims.head_dim,
            dims.n_kv_heads * dims.head_dim,
        );
        if qo.len() < rows * qd || p.pos.len() < rows || p.slot.len() < rows || rows == 0 {
            return if rows == 0 {
                Ok(())
            } else {
                Err(CudaError::Usage("qkv_post: buffer sizes".into()))
            };
        }
        let (nq, nk, nv) = (
            (rows - 1) * p.q_stride,
            (rows - 1) * p.k_stride,
            (rows - 1) * p.v_stride,
        );
        if p.q.len() < nq + qd || p.k.len() < nk + kvd || p.v.len() < nv + kvd {
            return Err(CudaError::Usage("qkv_post: q/k/v sizes".into()));
        }
        let f = self.function("qkv_post")?;
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (1024, 1, 1), // QKV_POST_THREADS
            shared_mem_bytes: 0,
        };
        let ints = [
            p.q_stride,
            p.k_stride,
            p.v_stride,
            dims.n_heads,
            dims.n_kv_heads,
            dims.head_dim,
            p.rot_dim,
        ]
        .map(|v| v as i32);
        let style = match p.style {
            tf_kernels::ops::RopeStyle::Interleaved => 0i32,
            tf_kernels::ops::RopeStyle::Neox => 1,
        };
        let null = 0u64;
        let mut l = self.launcher(&f);
        l.arg(&p.q)
            .arg(&p.k)
            .arg(&p.v)
            .arg(&ints[0])
            .arg(&ints[1])
            .arg(&ints[2]);
        for b in [p.bq, p.bk, p.bv] {
            match b {
                Some(b) => l.arg(b),
                None => l.arg(&null),
            };
        }
        l.arg(p.pos)
            .arg(p.slot)
            .arg(&ints[3])
            .arg(&ints[4])
            .arg(&ints[5])
            .arg(&ints[6])
            .arg(&style)
            .arg(p.cs)
            .arg(qo)
            .arg(kc)
            .arg(vc);
        // SAFETY: sizes checked above; slots were checked against the cache on the host, and
        // the RoPE table covers every position (checked on the host).
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// The gated activation over a fused gate|up output (`glu`): rows of `2f` in, rows of `f`
    /// out.
    #[allow(clippy::too_many_arguments)]
    pub fn glu_fused(
        &self,
        act: Glu,
        gu: &CudaSlice<f32>,
        f: usize,
        rows: usize,
        out: &mut CudaSlice<f32>,
        q: Option<&mut DevAct>,
    ) -> Result<()> {
        if gu.len() < rows * 2 * f || out.len() < rows * f {
            return Err(CudaError::Usage("glu_fused: buffer sizes".into()));
        }
        let (fi, ri, ai) = (f as i32, rows as i32, act as i32);
        let Some(q) = q else {
            let func = self.function("glu_fused")?;
            let mut l = self.launcher(&func);
            l.arg(gu).arg(&fi).arg(&ri).arg(&ai).arg(out);
            // SAFETY: sizes checked above.
            unsafe { l.launch(LaunchConfig::for_num_elems((rows * f).max(1) as u32)) }?;
            return Ok(());
        };
        let blocks = rows * f / q.block.values();
        let mut qa = QuantArgs::new(q, rows, f)?;
        let func = self.function("glu_fused_q")?;
        let mut l = self.launcher(&func);
        l.arg(gu).arg(&fi).arg(&ri).arg(&ai).arg(out);
        qa.push(&mut l);
        // One warp per block of quantized values, four warps per thread block.
        let cfg = LaunchConfig {
            grid_dim: (crate::ops::grid(blocks.max(1), 4), 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: sizes checked above and by `QuantArgs::new`.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}
