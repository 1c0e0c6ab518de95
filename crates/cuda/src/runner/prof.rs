//! `TENSORFOLD_CUDA_PROFILE=1`: time spent per op of the forward pass (the stream is synchronized
//! after each op, so the totals are exact per op and the whole pass is slower), printed when the
//! runner is dropped. Graph replays are not broken down.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::Gpu;

#[derive(Default)]
pub struct Prof {
    on: bool,
    last: Option<Instant>,
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

    /// Starts timing (after the stream is idle).
    pub fn start(&mut self, gpu: &Gpu) {
        if self.on {
            let _ = gpu.sync();
            self.last = Some(Instant::now());
        }
    }

    /// Charges the time since the last mark to `op`.
    pub fn mark(&mut self, gpu: &Gpu, op: &'static str) {
        if !self.on {
            return;
        }
        let _ = gpu.sync();
        let now = Instant::now();
        if let Some(t) = self.last {
            let e = self.ops.entry(op).or_default();
            e.0 += (now - t).as_secs_f64();
            e.1 += 1;
        }
        self.last = Some(now);
    }

    pub fn report(&self) -> String {
        let total: f64 = self.ops.values().map(|v| v.0).sum();
        let mut lines = vec![format!("GPU forward profile: {:.3} s in ops", total)];
        let mut ops: Vec<_> = self.ops.iter().collect();
        ops.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        for (name, (secs, calls)) in ops {
            lines.push(format!(
                "  {name:<8} {:>9.3} ms {:>5.1}% {calls:>7} calls",
                secs * 1e3,
                100.0 * secs / total.max(1e-12)
            ));
        }
        lines.join("\n")
    }
}
