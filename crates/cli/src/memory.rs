//! The server's memory budget: weights, KV cache (which also holds the prompt cache) and working
//! buffers must fit in it, decided before anything large is allocated.

use anyhow::{bail, Result};
use tf_kernels::kv::{KvCache, KvFormat};
use tf_models::Model;

use crate::load::gib;

/// Share of physical memory the server uses when no `--memory-limit-gib` is given.
pub const DEFAULT_SHARE: f64 = 0.70;
/// KV positions a request may need beyond its context: one window of guesses past its last
/// token (the engine reserves `prompt + max_tokens + MAX_DRAFT + 1` slots), rounded up.
const WINDOW_POSITIONS: usize = 2 * tf_kernels::kv::BLOCK_SIZE + tf_engine::cost::MAX_DRAFT;
/// Runtime, tokenizer, HTTP and allocator slack, beside the model's own buffers.
const FIXED_OVERHEAD: u64 = 384 << 20;

/// Physical memory, or the cgroup limit when it is lower (containers).
pub fn physical_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total_kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let mut total = total_kb * 1024;
    for path in [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ] {
        if let Some(limit) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            total = total.min(limit);
        }
    }
    Some(total)
}

/// How the budget is spent.
#[derive(Clone, Copy, Debug)]
pub struct MemoryPlan {
    pub budget: u64,
    pub weights: u64,
    pub buffers: u64,
    /// KV bytes per position, target and draft model together.
    pub kv_per_position: u64,
    /// Longest request (prompt + reply).
    pub context: usize,
    /// KV positions in the pool (running requests and the prompt cache share it).
    pub kv_positions: usize,
    /// Requests decoded at once.
    pub parallel: usize,
}

/// `--parallel auto`: as many whole contexts as the KV budget holds, at least
/// [`AUTO_PARALLEL_MIN`] (requests then wait for room) and at most [`AUTO_PARALLEL_MAX`].
pub const AUTO_PARALLEL_MIN: usize = 4;
pub const AUTO_PARALLEL_MAX: usize = 16;

impl MemoryPlan {
    pub fn kv_bytes(&self) -> u64 {
        self.kv_per_position * self.kv_positions as u64
    }
}

fn kv_per_position(m: &Model, kv: KvFormat) -> u64 {
    KvCache::bytes_per_position(m.plan.kv_layers(), m.config.kv_dim(), kv) as u64
}

/// A model with recurrent layers: the states of as many running sequences as a server runs at
/// most (each a committed and a working copy), and the prefix cache's state snapshots.
fn recurrent_bytes(m: &Model) -> u64 {
    let Some(cache) = m.state_cache(usize::MAX) else {
        return 0;
    };
    let per = cache.bytes_per_seq() as u64;
    let snaps = tf_models::model::SNAPSHOT_BYTES.max(4 * cache.state_len() * 4) as u64;
    AUTO_PARALLEL_MAX as u64 * per + snaps
}

/// Buffers of one step of `rows` rows: activations, and logits when every row wants them. A
/// mixture of experts holds, per row, each chosen expert's gate, up and activation rows, its
/// output row and a copy of the input, and the router's scores.
fn buffers(m: &Model, rows: usize) -> u64 {
    let c = &m.config;
    let ffn = match &c.moe {
        None => 3 * c.ffn_dim,
        Some(moe) => moe.used * (3 * moe.expert_ffn + 2 * c.d_model) + moe.experts,
    };
    let per_row = 4 * (6 * c.d_model + ffn + c.vocab) as u64;
    per_row * rows as u64
}

/// Plans the memory of a server of `target` (and `draft`): `context` is the requested one (else
/// the largest that fits one whole request beside the weights, at most `max_context`); the KV
/// pool holds `parallel` whole contexts when the budget allows, at least one (`None`: as many as
/// fit, see [`AUTO_PARALLEL_MAX`]). Keys and values are stored in `kv`.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    budget: u64,
    kv: KvFormat,
    target: &Model,
    draft: Option<&Model>,
    requested_context: Option<usize>,
    max_context: usize,
    parallel: Option<usize>,
    step_rows: usize,
) -> Result<MemoryPlan> {
    let weights = target.resident_weight_bytes() as u64
        + draft.map_or(0, |d| d.resident_weight_bytes() as u64);
    let buffers = FIXED_OVERHEAD
        + buffers(target, step_rows)
        + draft.map_or(0, |d| buffers(d, step_rows))
        + recurrent_bytes(target);
    let kv_per_position = kv_per_position(target, kv) + draft.map_or(0, |d| kv_per_position(d, kv));
    let fixed = weights + buffers;
    // The smallest useful server: one request of 256 positions.
    let min_positions = 256 + WINDOW_POSITIONS as u64;
    if fixed + kv_per_position * min_positions > budget {
        bail!(
            "the model does not fit in the memory budget: it needs at least {:.2} GiB (weights \
             {:.2} GiB, buffers {:.2} GiB, KV for {min_positions} positions {:.2} GiB) and the \
             budget is {:.2} GiB (raise --memory-limit-gib)",
            gib(fixed + kv_per_position * min_positions),
            gib(weights),
            gib(buffers),
            gib(kv_per_position * min_positions),
            gib(budget)
        );
    }
    let fits = ((budget - fixed) / kv_per_position) as usize - WINDOW_POSITIONS;
    let trained = target.config.context_len;
    let context = match requested_context {
        Some(c) if c > trained => {
            bail!("--context {c} is longer than the {trained} positions the model was trained for")
        }
        Some(c) if c > fits => bail!(
            "--context {c} does not fit in the memory budget of {:.2} GiB: beside {:.2} GiB of \
             weights and buffers there is room for {fits} positions of KV cache (raise \
             --memory-limit-gib or lower --context)",
            gib(budget),
            gib(fixed)
        ),
        Some(c) => c,
        None => trained.min(max_context).min(fits),
    };
    let parallel = parallel.unwrap_or((fits / context).clamp(AUTO_PARALLEL_MIN, AUTO_PARALLEL_MAX));
    let kv_positions = fits.min(context.saturating_mul(parallel)).max(context) + WINDOW_POSITIONS;
    Ok(MemoryPlan {
        budget,
        weights,
        buffers,
        kv_per_position,
        context,
        kv_positions,
        parallel,
    })
}
