//! `TENSORFOLD_CUDA_PROFILE=1`: GPU time per op of the forward pass, measured with CUDA events
//! recorded between ops (no synchronization in between, so small ops are timed as they run in
//! a real pass, launch gaps included), printed when the runner is dropped. Graph replay is off
//! while profiling.

use std::collections::BTreeMap;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;

use crate::Gpu;

#[derive(Default)]
pub struct Prof {
    on: bool,
    pending: Vec<(&'static str, CudaEvent)>,
    /// Op name -> (seconds, calls).
    ops: BTreeMap<&'static str, (f64, usize)>,
}

impl Prof {
    pub fn from_env() -> Prof {
        Prof {
            on: std::env::var("TENSORFOLD_CUDA_PROFILE").is_ok_and(|v| v == "1"),
            ..Prof::default()
        }
    }

    pub fn on(&self) -> bool {
        self.on
    }

    /// Starts a timed stretch.
    pub fn start(&mut self, gpu: &Gpu) {
        self.mark(gpu, "");
    }

    /// Charges the GPU time since the last mark to `op`.
    pub fn mark(&mut self, gpu: &Gpu, op: &'static str) {
        if !self.on {
            return;
        }
        if let Ok(e) = gpu
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        {
            self.pending.push((op, e));
        }
    }

    /// Adds up the recorded stretches (waits for them).
    pub fn flush(&mut self) {
        for pair in self.pending.windows(2) {
            let (op, end) = (&pair[1].0, &pair[1].1);
            if op.is_empty() {
                continue;
            }
            if let Ok(ms) = pair[0].1.elapsed_ms(end) {
                let e = self.ops.entry(op).or_default();
                e.0 += ms as f64 / 1e3;
                e.1 += 1;
            }
        }
        self.pending.clear();
    }

    pub fn report(&mut self) -> String {
        self.flush();
        let total: f64 = self.ops.values().map(|v| v.0).sum();
        let mut lines = vec![format!("GPU forward profile: {:.3} s in ops", total)];
        let mut ops: Vec<_> = self.ops.iter().collect();
        ops.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        for (name, (secs, calls)) in ops {
            lines.push(format!(
                "  {name:<8} {:>9.3} ms {:>5.1}% {calls:>7} calls {:>8.1} us/call",
                secs * 1e3,
                100.0 * secs / total.max(1e-12),
                secs * 1e6 / *calls as f64
            ));
        }
        lines.join("\n")
    }
}
