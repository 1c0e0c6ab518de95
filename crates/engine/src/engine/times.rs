//! `TENSORFOLD_ENGINE_TIMES=1`: where the engine's wall time goes, printed to stderr each time a
//! request finishes (the totals since the last print), for finding per-round costs that a fast
//! forward (a GPU's) makes visible. Off, it costs one branch per measured span.

use std::time::Instant;

/// A measured part of the engine's work.
#[derive(Clone, Copy)]
pub(super) enum Part {
    /// Deciding the step's rows and guesses, draft models' proposals left out.
    Schedule,
    /// A draft model's proposal, its catch-up included.
    Propose,
    /// The target's forward and the draws from its logits.
    Forward,
    /// Committing the verdicts, draft models' prefill left out.
    Commit,
    /// A draft model's prefill of a prompt, or its catch-up in parts.
    DraftPrefill,
}

const PARTS: [(Part, &str); 5] = [
    (Part::Schedule, "schedule"),
    (Part::Propose, "draft propose"),
    (Part::Forward, "forward"),
    (Part::Commit, "commit"),
    (Part::DraftPrefill, "draft prefill"),
];

pub(super) struct Times {
    on: bool,
    /// Seconds and calls per part.
    spent: [(f64, usize); 5],
    steps: usize,
}

impl Times {
    pub(super) fn from_env() -> Times {
        Times {
            on: std::env::var("TENSORFOLD_ENGINE_TIMES").is_ok_and(|v| v == "1"),
            spent: [(0.0, 0); 5],
            steps: 0,
        }
    }

    /// A start time when measuring.
    pub(super) fn start(&self) -> Option<Instant> {
        self.on.then(Instant::now)
    }

    /// Adds the time since `start` to `part` (and, with `nested`, takes it off that part).
    pub(super) fn add(&mut self, part: Part, start: Option<Instant>, nested: Option<Part>) {
        if let Some(t) = start {
            let secs = t.elapsed().as_secs_f64();
            self.spent[part as usize].0 += secs;
            self.spent[part as usize].1 += 1;
            if let Some(outer) = nested {
                self.spent[outer as usize].0 -= secs;
            }
        }
    }

    pub(super) fn step(&mut self) {
        self.steps += usize::from(self.on);
    }

    /// Prints the totals since the last print and starts over.
    pub(super) fn report(&mut self) {
        if !self.on || self.steps == 0 {
            return;
        }
        let parts: Vec<String> = PARTS
            .iter()
            .map(|&(p, name)| {
                let (secs, calls) = self.spent[p as usize];
                format!("{name} {:.2} ms in {calls}", secs * 1e3)
            })
            .collect();
        eprintln!("engine times: {} steps; {}", self.steps, parts.join(", "));
        self.spent = [(0.0, 0); 5];
        self.steps = 0;
    }
}
