//! Host wrappers of the forward pass's row bookkeeping and attention kernels
//! (`kernels/rows.cu`, `kernels/attention.cu`).

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use crate::{CudaError, Gpu, Result};

/// Query heads per KV head the attention kernel handles at most (`MAX_GROUP`).
pub const MAX_GROUP: usize = 16;
/// Largest head dimension of the attention kernel.
pub const MAX_HEAD_DIM: usize = 256;

/// The shape of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttnDims {
    pub rows: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
}

/// Device buffers describing which keys each row reads (see `attention.cu`): `meta` 4 ints per
/// row (table offset, key count, remap base or -1, remap offset), the flat block tables and the
/// flat remap slots.
pub struct AttnKeys<'a> {
    pub meta: &'a CudaSlice<i32>,
    pub tables: &'a CudaSlice<i32>,
    pub remaps: &'a CudaSlice<i32>,
}

impl Gpu {
    /// Attention of `dims.rows` query rows over one layer's paged cache (`kc`, `vc`: slot s at
    /// `s * kv_dim`), the canonical key-chunk order of `tf_kernels::attention`.
    pub fn attention(
        &self,
        dims: AttnDims,
        q: &CudaSlice<f32>,
        kc: &CudaSlice<f32>,
        vc: &CudaSlice<f32>,
        keys: &AttnKeys,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let AttnDims {
            rows,
            n_heads,
            n_kv_heads,
            head_dim,
            scale,
        } = dims;
        let qd = n_heads * head_dim;
        if n_kv_heads == 0
            || !n_heads.is_multiple_of(n_kv_heads)
            || n_heads / n_kv_heads > MAX_GROUP
            || head_dim > MAX_HEAD_DIM
            || !head_dim.is_multiple_of(32)
        {
            return Err(CudaError::Usage(format!(
                "attention: {n_heads} heads over {n_kv_heads} KV heads of {head_dim}"
            )));
        }
        if q.len() < rows * qd || out.len() < rows * qd || keys.meta.len() < 4 * rows {
            return Err(CudaError::Usage("attention: buffer sizes".into()));
        }
        if rows == 0 {
            return Ok(());
        }
        let f = self.function("attention")?;
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, n_kv_heads as u32, 1),
            block_dim: (head_dim as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (h, kvh, hd) = (n_heads as i32, n_kv_heads as i32, head_dim as i32);
        let mut l = self.stream.launch_builder(&f);
        l.arg(q)
            .arg(kc)
            .arg(vc)
            .arg(keys.meta)
            .arg(keys.tables)
            .arg(keys.remaps)
            .arg(&h)
            .arg(&kvh)
            .arg(&hd)
            .arg(&scale)
            .arg(out);
        // SAFETY: argument types match the kernel; the metadata was built by the caller from
        // block tables that cover every position read (checked on the host).
        unsafe { l.launch(cfg) }?;
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
        let mut l = self.stream.launch_builder(&f);
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
        let mut l = self.stream.launch_builder(&f);
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
        let mut l = self.stream.launch_builder(&f);
        l.arg(x).arg(b).arg(&ri).arg(&ni);
        // SAFETY: lengths checked above.
        unsafe { l.launch(LaunchConfig::for_num_elems((rows * n).max(1) as u32)) }?;
        Ok(())
    }

    /// `out[j] = x[idx[j]]` for `count` rows of `n` values.
    pub fn gather_rows(
        &self,
        x: &CudaSlice<f32>,
        idx: &CudaSlice<i32>,
        count: usize,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if idx.len() < count || out.len() < count * n {
            return Err(CudaError::Usage("gather_rows: buffer sizes".into()));
        }
        if count == 0 {
            return Ok(());
        }
        let f = self.function("gather_rows")?;
        let ni = n as i32;
        let cfg = LaunchConfig {
            grid_dim: (count as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = self.stream.launch_builder(&f);
        l.arg(x).arg(idx).arg(&ni).arg(out);
        // SAFETY: indices were checked against the rows of `x` on the host.
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
        let mut l = self.stream.launch_builder(&f);
        l.arg(pairs).arg(&np).arg(&di).arg(kc).arg(vc);
        // SAFETY: slots were checked against the cache size on the host.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}
