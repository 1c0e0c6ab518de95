//! Page-locked host memory for logits downloads (copies from the device run several times faster
//! than into pageable memory), managed directly so that no event bookkeeping touches the stream.

use cudarc::driver::{result, CudaView, DevicePtr};

use crate::{Gpu, Result};

pub struct Pinned {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the buffer is plain host memory owned by this value; it is used through `&mut self`.
unsafe impl Send for Pinned {}

impl Pinned {
    /// Room for `len` floats, or `None` if page-locked memory is not available.
    pub fn new(gpu: &Gpu, len: usize) -> Option<Pinned> {
        gpu.ctx.bind_to_thread().ok()?;
        // SAFETY: flags 0 = ordinary cached page-locked memory; freed in `Drop`.
        let ptr = unsafe { result::malloc_host(len * 4, 0) }.ok()? as *mut f32;
        (!ptr.is_null()).then_some(Pinned { ptr, len })
    }

    /// Copies `src` (at most `len` floats) here and waits for it; returns the copied floats.
    pub fn download(&mut self, gpu: &Gpu, src: &CudaView<f32>) -> Result<&[f32]> {
        let n = src.len();
        assert!(n <= self.len, "pinned buffer too small");
        // SAFETY: `ptr` holds `len` >= n floats, owned by `self` and borrowed mutably here.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.ptr, n) };
        {
            let (sp, _sync) = src.device_ptr(&gpu.stream);
            // SAFETY: `dst` and `src` hold n floats; the stream is synchronized before `dst`
            // is read.
            unsafe { result::memcpy_dtoh_async(dst, sp, gpu.stream.cu_stream()) }?;
        }
        gpu.sync()?;
        // SAFETY: as above; the copy has completed.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr, n) })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_host` in `new`, freed once.
        let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
    }
}
