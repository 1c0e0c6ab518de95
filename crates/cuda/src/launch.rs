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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    /// (declaration keyword at, name, body) of every `__device__` / `__global__` function with a
    /// body in `src` (macro-defined kernels included: their bodies are matched by braces).
    fn functions(src: &str) -> Vec<(bool, String, String)> {
        let mut out = Vec::new();
        for kw in ["__device__", "__global__"] {
            let mut from = 0;
            while let Some(at) = src[from..].find(kw).map(|i| from + i) {
                from = at + kw.len();
                let rest = &src[from..];
                let (Some(open), semi) = (rest.find('{'), rest.find(';')) else {
                    continue;
                };
                if semi.is_some_and(|s| s < open) {
                    continue; // a variable or a declaration
                }
                let sig = &rest[..open];
                let name = sig
                    .split('(')
                    .filter_map(|p| p.split_whitespace().last())
                    .find(|w| *w != "__launch_bounds__" && !w.is_empty())
                    .unwrap_or("")
                    .trim_start_matches('*')
                    .to_string();
                let mut depth = 0;
                let mut end = open;
                for (i, c) in rest[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    if depth == 0 {
                        end = open + i;
                        break;
                    }
                }
                out.push((kw == "__global__", name, rest[open..=end].to_string()));
            }
        }
        out
    }

    fn calls(body: &str, name: &str) -> bool {
        body.match_indices(name).any(|(i, _)| {
            let before = body[..i].chars().last();
            let after = body[i + name.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && matches!(after, Some('(' | '<'))
        })
    }

    /// Every launch may overlap the kernel before it (`Launch`), so every kernel must reach
    /// `pdl_enter()` — itself or through a function it calls — or it could read a buffer before
    /// the previous kernel has written it.
    #[test]
    fn every_kernel_waits_for_the_kernel_before_it() {
        let src = crate::compile::program_source(tf_kernels::kv::KvFormat::F32);
        let fns = functions(&src);
        let mut waiting: HashSet<String> = HashSet::from(["pdl_enter".to_string()]);
        loop {
            let before = waiting.len();
            for (global, name, body) in &fns {
                if !global && waiting.iter().any(|w| w != name && calls(body, w)) {
                    waiting.insert(name.clone());
                }
            }
            if waiting.len() == before {
                break;
            }
        }
        let kernels: Vec<&(bool, String, String)> = fns.iter().filter(|f| f.0).collect();
        assert!(kernels.len() >= 30, "found {} kernels", kernels.len());
        for (_, name, body) in kernels {
            assert!(
                waiting.iter().any(|w| calls(body, w)),
                "kernel {name} never calls pdl_enter()"
            );
        }
    }
}
