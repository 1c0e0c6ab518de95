//! Page-locked host memory for logits downloads (copies from the device run several times faster
//! than into pageable memory), managed directly so that no event bookkeeping touches the stream.

use cudarc::driver::{result, CudaEvent, CudaView, DevicePtr};

use crate::{Gpu, Result};

/// Floats per piece of a download (1 MiB): the host takes each piece while later ones copy.
const PIECE: usize = 1 << 18;

pub struct Pinned {
    ptr: *mut f32,
    len: usize,
    /// One event per piece in flight, created on first use and kept.
    events: Vec<CudaEvent>,
}

// SAFETY: the buffer is plain host memory owned by this value; it is used through `&mut self`.
unsafe impl Send for Pinned {}

impl Pinned {
    /// Room for `len` floats, or `None` if page-locked memory is not available.
    pub fn new(gpu: &Gpu, len: usize) -> Option<Pinned> {
        gpu.ctx.bind_to_thread().ok()?;
        // SAFETY: flags 0 = ordinary cached page-locked memory; freed in `Drop`.
        let ptr = unsafe { result::malloc_host(len * 4, 0) }.ok()? as *mut f32;
        (!ptr.is_null()).then_some(Pinned {
            ptr,
            len,
            events: Vec::new(),
        })
    }

    /// Copies `src` (at most `len` floats, whole rows of `row` floats) here and hands each row
    /// to `take` in order, with its index, as soon as the piece holding it has arrived: the host
    /// works on the first rows while the later ones are still on their way.
    pub fn download_rows(
        &mut self,
        gpu: &Gpu,
        src: &CudaView<f32>,
        row: usize,
        mut take: impl FnMut(usize, &[f32]),
    ) -> Result<()> {
        let n = src.len();
        assert!(n <= self.len, "pinned buffer too small");
        assert!(row > 0 && n.is_multiple_of(row), "download of partial rows");
        let per = (PIECE / row).max(1) * row;
        let pieces = n.div_ceil(per);
        while self.events.len() < pieces {
            self.events.push(gpu.ctx.new_event(None)?);
        }
        {
            let (sp, _sync) = src.device_ptr(&gpu.stream);
            for (i, ev) in self.events[..pieces].iter().enumerate() {
                let (a, b) = (i * per, ((i + 1) * per).min(n));
                // SAFETY: `ptr` holds `len` >= n floats, owned by `self`; each piece is a
                // disjoint range of it, read only after its event has completed.
                let dst = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(a), b - a) };
                // SAFETY: `dst` and the source range hold b - a floats.
                unsafe {
                    result::memcpy_dtoh_async(dst, sp + (a * 4) as u64, gpu.stream.cu_stream())
                }?;
                ev.record(&gpu.stream)?;
            }
        }
        for (i, ev) in self.events[..pieces].iter().enumerate() {
            ev.synchronize()?;
            let (a, b) = (i * per, ((i + 1) * per).min(n));
            // SAFETY: as above; this piece's copy has completed.
            let piece = unsafe { std::slice::from_raw_parts(self.ptr.add(a), b - a) };
            for (j, r) in piece.chunks_exact(row).enumerate() {
                take(a / row + j, r);
            }
        }
        Ok(())
    }
}

impl Pinned {
    /// Copies `src` (at most `len` floats) to the start of the buffer and waits for it.
    pub fn download(&mut self, gpu: &Gpu, src: &CudaView<f32>) -> Result<()> {
        let n = src.len();
        assert!(n <= self.len, "pinned buffer too small");
        {
            let (sp, _sync) = src.device_ptr(&gpu.stream);
            // SAFETY: `ptr` holds `len` >= n floats, owned by `self` and not read before the
            // stream has been synchronized below.
            let dst = unsafe { std::slice::from_raw_parts_mut(self.ptr, n) };
            // SAFETY: `dst` and the source hold n floats.
            unsafe { result::memcpy_dtoh_async(dst, sp, gpu.stream.cu_stream()) }?;
        }
        gpu.sync()
    }

    /// The first `n` floats (what the last [`download`](Self::download) wrote).
    pub fn floats(&self, n: usize) -> &[f32] {
        assert!(n <= self.len, "pinned buffer too small");
        // SAFETY: within the buffer; the last download has completed (it waits).
        unsafe { std::slice::from_raw_parts(self.ptr, n) }
    }

    /// Moves rows `keep` (ascending, of `row` floats each) to the front, in order.
    pub fn compact(&mut self, row: usize, keep: impl IntoIterator<Item = usize>) {
        // SAFETY: the whole buffer, owned by `self`, no other reference alive (`&mut self`).
        let all = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) };
        for (to, from) in keep.into_iter().enumerate() {
            if from != to {
                all.copy_within(from * row..(from + 1) * row, to * row);
            }
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_host` in `new`, freed once.
        let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
    }
}
