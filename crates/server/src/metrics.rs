//! `/metrics` in the Prometheus text format. Names follow vLLM's (`vllm:num_requests_running`
//! → `tensorfold:num_requests_running`) where vLLM has one, so existing dashboards carry over.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use tf_engine::{EngineStats, Receipt};

/// Latency buckets (seconds) of the histograms.
const BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, x: f64) {
        for (b, c) in BUCKETS.iter().zip(self.counts.iter_mut()) {
            if x <= *b {
                *c += 1;
            }
        }
        self.count += 1;
        self.sum += x;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP tensorfold:{name} {help}");
        let _ = writeln!(out, "# TYPE tensorfold:{name} histogram");
        for (b, c) in BUCKETS.iter().zip(self.counts.iter()) {
            let _ = writeln!(out, "tensorfold:{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "tensorfold:{name}_bucket{{le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "tensorfold:{name}_sum {}", self.sum);
        let _ = writeln!(out, "tensorfold:{name}_count {}", self.count);
    }
}

#[derive(Default)]
pub struct Metrics {
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    cached_prompt_tokens: AtomicU64,
    success: AtomicU64,
    failures: AtomicU64,
    disconnects: AtomicU64,
    drafted: AtomicU64,
    accepted: AtomicU64,
    ttft: Mutex<Histogram>,
    e2e: Mutex<Histogram>,
    /// Drafted and accepted guesses per source, over finished requests.
    sources: Mutex<BTreeMap<&'static str, (u64, u64)>>,
    /// The last requests' receipts, newest last (`RECENT` at most).
    recent: Mutex<VecDeque<Recent>>,
}

/// Receipts the dashboard lists.
pub const RECENT: usize = 20;

/// A finished request, as `/stats` lists it.
#[derive(Clone, Debug)]
pub struct Recent {
    pub receipt: Receipt,
    pub completion_tokens: usize,
    /// Seconds since the Unix epoch when it ended.
    pub ended: f64,
}

impl Metrics {
    /// A request that ran to its end (stop, length or stop string).
    pub fn finished(&self, receipt: &Receipt, completion_tokens: usize, e2e_secs: f64) {
        self.success.fetch_add(1, Relaxed);
        self.account(receipt, completion_tokens);
        if completion_tokens > 0 {
            self.ttft.lock().unwrap().observe(receipt.ttft_secs);
        }
        self.e2e.lock().unwrap().observe(e2e_secs);
    }

    /// Tokens and drafts of a request, however it ended.
    pub fn account(&self, receipt: &Receipt, completion_tokens: usize) {
        self.prompt_tokens
            .fetch_add(receipt.prompt_tokens as u64, Relaxed);
        self.cached_prompt_tokens
            .fetch_add(receipt.cached_tokens as u64, Relaxed);
        self.generation_tokens
            .fetch_add(completion_tokens as u64, Relaxed);
        self.drafted.fetch_add(receipt.drafted as u64, Relaxed);
        self.accepted.fetch_add(receipt.accepted as u64, Relaxed);
        let mut sources = self.sources.lock().unwrap();
        for s in &receipt.sources {
            let e = sources.entry(s.name()).or_default();
            e.0 += s.drafted as u64;
            e.1 += s.accepted as u64;
        }
        drop(sources);
        let mut recent = self.recent.lock().unwrap();
        if recent.len() == RECENT {
            recent.pop_front();
        }
        let ended = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        recent.push_back(Recent {
            receipt: receipt.clone(),
            completion_tokens,
            ended,
        });
    }

    /// (source, drafted, accepted) over finished requests.
    pub fn sources(&self) -> Vec<(&'static str, u64, u64)> {
        (self.sources.lock().unwrap().iter())
            .map(|(&n, &(d, a))| (n, d, a))
            .collect()
    }

    /// The last finished requests, newest last.
    pub fn recent(&self) -> Vec<Recent> {
        self.recent.lock().unwrap().iter().cloned().collect()
    }

    /// Counters as `/metrics` reports them: (prompt tokens, cached prompt tokens, generated
    /// tokens, drafted, accepted, successes, failures).
    pub fn totals(&self) -> [u64; 7] {
        [
            self.prompt_tokens.load(Relaxed),
            self.cached_prompt_tokens.load(Relaxed),
            self.generation_tokens.load(Relaxed),
            self.drafted.load(Relaxed),
            self.accepted.load(Relaxed),
            self.success.load(Relaxed),
            self.failures.load(Relaxed),
        ]
    }

    pub fn failed(&self) {
        self.failures.fetch_add(1, Relaxed);
    }

    pub fn disconnected(&self) {
        self.disconnects.fetch_add(1, Relaxed);
    }

    pub fn disconnects(&self) -> u64 {
        self.disconnects.load(Relaxed)
    }

    pub fn render(&self, engine: Option<EngineStats>, total_blocks: usize) -> String {
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, kind: &str, v: f64| {
            let _ = writeln!(out, "# HELP tensorfold:{name} {help}");
            let _ = writeln!(out, "# TYPE tensorfold:{name} {kind}");
            let _ = writeln!(out, "tensorfold:{name} {v}");
        };
        let stats = engine.unwrap_or_default();
        gauge(
            "num_requests_running",
            "Requests in the engine's running set.",
            "gauge",
            stats.running as f64,
        );
        gauge(
            "num_requests_waiting",
            "Requests queued for admission.",
            "gauge",
            stats.waiting as f64,
        );
        gauge(
            "kv_free_blocks",
            "Free KV cache blocks.",
            "gauge",
            stats.free_blocks as f64,
        );
        gauge(
            "kv_total_blocks",
            "KV cache blocks in the pool.",
            "gauge",
            total_blocks as f64,
        );
        gauge(
            "kv_cached_blocks",
            "Free KV blocks that hold a cached prompt prefix.",
            "gauge",
            stats.cached_blocks as f64,
        );
        gauge(
            "prefix_cache_hits_total",
            "Requests that reused a cached prompt prefix.",
            "counter",
            stats.cache.hits as f64,
        );
        gauge(
            "prefix_cache_evictions_total",
            "Cached prefix blocks evicted.",
            "counter",
            stats.cache.evictions as f64,
        );
        let spill = stats.spill.unwrap_or_default();
        for (name, help, kind, v) in [
            (
                "prefix_cache_disk_writes_total",
                "Cached blocks written to the disk tier.",
                "counter",
                spill.writes,
            ),
            (
                "prefix_cache_disk_reads_total",
                "Cached blocks read back from the disk tier and verified.",
                "counter",
                spill.reads,
            ),
            (
                "prefix_cache_disk_failures_total",
                "Disk-tier files found missing, truncated or corrupt (the request fell back to \
                 prefill), and failed writes.",
                "counter",
                spill.failures,
            ),
            (
                "prefix_cache_disk_evictions_total",
                "Disk-tier files deleted to stay within the disk budget.",
                "counter",
                spill.evictions,
            ),
            (
                "prefix_cache_disk_bytes",
                "Bytes held by the disk tier.",
                "gauge",
                spill.bytes,
            ),
        ] {
            gauge(name, help, kind, v as f64);
        }
        let load = |c: &AtomicU64| c.load(Relaxed) as f64;
        let counters = [
            (
                "prompt_tokens_total",
                "Prompt tokens processed.",
                &self.prompt_tokens,
            ),
            (
                "generation_tokens_total",
                "Tokens generated.",
                &self.generation_tokens,
            ),
            (
                "prompt_tokens_cached_total",
                "Prompt tokens served from the prompt cache.",
                &self.cached_prompt_tokens,
            ),
            (
                "request_success_total",
                "Requests that ran to their end.",
                &self.success,
            ),
            (
                "request_failure_total",
                "Requests the engine failed.",
                &self.failures,
            ),
            (
                "client_disconnects_total",
                "Requests cancelled because the client went away.",
                &self.disconnects,
            ),
            (
                "spec_decode_num_draft_tokens_total",
                "Drafted tokens verified.",
                &self.drafted,
            ),
            (
                "spec_decode_num_accepted_tokens_total",
                "Drafted tokens accepted.",
                &self.accepted,
            ),
        ];
        for (name, help, c) in counters {
            gauge(name, help, "counter", load(c));
        }
        self.ttft.lock().unwrap().render(
            &mut out,
            "time_to_first_token_seconds",
            "Time from submission to the first generated token.",
        );
        self.e2e.lock().unwrap().render(
            &mut out,
            "e2e_request_latency_seconds",
            "Time from submission to the last token.",
        );
        out
    }
}
