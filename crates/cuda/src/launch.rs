//! Kernel launches through `cuLaunchKernelEx`, so that a launch can carry Hopper's programmatic
//! dependent launch: the next kernel of the stream is started while this one drains, runs what
//! does not depend on it (a matmul's first weight loads), and waits in `pdl_wait()`
//! (`griddepcontrol.wait`, prelude.cu) for this grid to complete and its writes to be visible
//! before it reads or writes anything a kernel before it touches. Every kernel of the program
//! calls `pdl_wait()` before its first such access, so the bits are those of a plain launch;
//! only the gap between kernels shrinks.

use std::ffi::c_void;

use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr};
use cudarc::driver::{DriverError, LaunchConfig};

/// A kernel argument as the bytes of one parameter slot (the driver copies as many bytes as
/// the parameter's size from the slot's address; little-endian, so a 4-byte value is its low
/// half).
pub trait KernelArg {
    fn slot(&self, stream: &CudaStream) -> u64;
}

impl<T> KernelArg for &CudaSlice<T> {
    fn slot(&self, stream: &CudaStream) -> u64 {
        self.device_ptr(stream).0
    }
}

impl<T> KernelArg for &mut CudaSlice<T> {
    fn slot(&self, stream: &CudaStream) -> u64 {
        self.device_ptr(stream).0
    }
}

impl<T> KernelArg for &CudaView<'_, T> {
    fn slot(&self, stream: &CudaStream) -> u64 {
        self.device_ptr(stream).0
    }
}

impl<T> KernelArg for &mut CudaViewMut<'_, T> {
    fn slot(&self, stream: &CudaStream) -> u64 {
        self.device_ptr(stream).0
    }
}

impl KernelArg for &i32 {
    fn slot(&self, _: &CudaStream) -> u64 {
        **self as u32 as u64
    }
}

impl KernelArg for &u32 {
    fn slot(&self, _: &CudaStream) -> u64 {
        **self as u64
    }
}

impl KernelArg for &f32 {
    fn slot(&self, _: &CudaStream) -> u64 {
        self.to_bits() as u64
    }
}

impl KernelArg for &u64 {
    fn slot(&self, _: &CudaStream) -> u64 {
        **self
    }
}

/// One launch being assembled: `arg` in the kernel's parameter order, then `launch`.
pub struct Launch<'a> {
    stream: &'a CudaStream,
    func: &'a CudaFunction,
    slots: Vec<u64>,
    pdl: bool,
}

impl<'a> Launch<'a> {
    pub(crate) fn new(stream: &'a CudaStream, func: &'a CudaFunction, pdl: bool) -> Launch<'a> {
        Launch {
            stream,
            func,
            slots: Vec::with_capacity(24),
            pdl,
        }
    }

    pub fn arg(&mut self, a: impl KernelArg) -> &mut Self {
        self.slots.push(a.slot(self.stream));
        self
    }

    /// Submits the kernel on the stream.
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and type, and the
    /// kernel must stay within the buffers passed.
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), DriverError> {
        let mut params: Vec<*mut c_void> = self
            .slots
            .iter_mut()
            .map(|s| s as *mut u64 as *mut c_void)
            .collect();
        // SAFETY: an all-zero attribute value is valid (a plain integer union).
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: self.pdl as u32,
        };
        self.stream.context().bind_to_thread()?;
        // SAFETY: `params` points at one live slot per parameter (the caller's promise on their
        // number and types); `config` and `attr` outlive the call.
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                self.func.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
            .result()
        }
    }
}
