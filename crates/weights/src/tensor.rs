//! The borrowed tensor view both formats hand out, and the trait models load weights through.

use tf_core::DType;

use crate::error::Result;
use crate::quant;

/// A tensor's bytes in place (mmap), with its element type and ggml-order dims.
#[derive(Clone, Copy)]
pub struct TensorView<'a> {
    pub name: &'a str,
    pub dtype: DType,
    /// ggml order: `dims[0]` is contiguous (the columns of a row).
    pub dims: &'a [usize],
    pub data: &'a [u8],
}

impl std::fmt::Debug for TensorView<'_> {
    // The data is usually megabytes: show its length, not its bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorView")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("dims", &self.dims)
            .field("data_bytes", &self.data.len())
            .finish()
    }
}

impl TensorView<'_> {
    pub fn n_elems(&self) -> usize {
        self.dims.iter().product()
    }

    /// Product of `dims[1..]` (1 for a vector).
    pub fn rows(&self) -> usize {
        self.dims.iter().skip(1).product()
    }

    /// `dims[0]` (1 for a scalar).
    pub fn cols(&self) -> usize {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Bytes of one row; 0 if a row is not a whole number of blocks (never the case for
    /// tensors from a [`crate::GgufFile`] or [`crate::SafetensorsModel`], which check it).
    pub fn row_bytes(&self) -> usize {
        self.dtype.bytes_for(self.cols()).unwrap_or(0)
    }

    /// Bytes of row `i`, or None when out of range.
    pub fn row(&self, i: usize) -> Option<&[u8]> {
        let rb = self.row_bytes();
        let start = i.checked_mul(rb)?;
        self.data.get(start..start.checked_add(rb)?)
    }

    /// Dequantizes the whole tensor.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.n_elems()];
        quant::dequantize(self.dtype, self.data, &mut out).map_err(|e| e.in_context(self.name))?;
        Ok(out)
    }
}

/// Where a model's weights come from: a GGUF file or a safetensors directory.
pub trait TensorSource {
    /// A tensor of a numeric type (`None` also for a raw-byte tensor).
    fn tensor(&self, name: &str) -> Option<TensorView<'_>>;
    /// A tensor of raw bytes (safetensors `U8`: an MXFP4 checkpoint's blocks and scales), with
    /// its dims in ggml order.
    fn raw_bytes(&self, _name: &str) -> Option<(&[usize], &[u8])> {
        None
    }
    /// In file order.
    fn tensor_names(&self) -> Vec<&str>;
    /// The file or directory path, for messages.
    fn describe(&self) -> String;
}
