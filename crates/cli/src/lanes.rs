//! Building the drafting engine for a model: the target, its draft model (the catalogue's
//! choice unless told otherwise), context copies, and a measured cost model.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use tf_engine::cost::CostModel;
use tf_engine::proposer::DraftModel;
use tf_engine::{Engine, EngineConfig};
use tf_models::Model;
use tf_text::Tokenizer;

use crate::device::Backend;
use crate::load;
use crate::GlobalArgs;

pub struct Lanes {
    pub engine: Engine,
    pub target: Arc<Model>,
    pub plan: KvPlan,
    pub tokenizer: Tokenizer,
    pub draft: Option<Arc<Model>>,
    /// Measured forward seconds per row count.
    pub calibration: Vec<(usize, f64)>,
}

/// KV cache positions in the pool, and the longest sequence (prompt + reply) accepted.
#[derive(Clone, Copy, Debug)]
pub struct KvPlan {
    pub kv_positions: usize,
    pub context: usize,
    /// Requests decoded at once, when the plan decides it (else the engine config's).
    pub max_running: Option<usize>,
}

/// `draft`: `None` = the catalogue's draft for the target (if any), `Some("none")` = no draft
/// model, else a model spec.
pub fn build(
    target_spec: &str,
    draft: Option<&str>,
    sizes: impl FnOnce(&Model, Option<&Model>) -> Result<KvPlan>,
    mut config: EngineConfig,
    global: &GlobalArgs,
) -> Result<Lanes> {
    let path = load::resolve(target_spec, global)?;
    let loaded = load::load(&path)?;
    let target = loaded.model;
    let draft_spec = match draft {
        Some("none") => None,
        Some(s) => Some(s.to_string()),
        None => tf_fetch::find(target_spec)
            .and_then(|e| e.draft)
            .map(str::to_string),
    };
    let backend = Backend::open(global)?;
    let mut draft_model = None;
    if let Some(spec) = draft_spec {
        let dpath = load::resolve(&spec, global)?;
        let dm = Model::load(&dpath)
            .with_context(|| format!("cannot load draft model {}", dpath.display()))?;
        let dm = backend
            .draft_weights(Arc::new(dm), global)
            .with_context(|| format!("cannot requantize draft model {}", dpath.display()))?;
        if dm.plan.has_recurrent() {
            bail!(
                "draft model {} has recurrent (Gated DeltaNet, Mamba-2) layers, which a draft model \
                 cannot have yet: use a transformer draft model, or --draft none",
                dpath.display()
            );
        }
        if dm.config.vocab != target.config.vocab {
            bail!(
                "draft model {} has a vocabulary of {} tokens, the target {}: they must share a tokenizer",
                dpath.display(),
                dm.config.vocab,
                target.config.vocab
            );
        }
        draft_model = Some(dm);
    }
    let plan = sizes(&target, draft_model.as_deref())?;
    let (kv_positions, context) = (plan.kv_positions, plan.context);
    if let Some(n) = plan.max_running {
        config.max_running = n;
    }
    let pool = Arc::new(load::thread_pool(global));
    let max_rows = config.max_step_rows;
    let runner = backend.runner(&target, &pool, kv_positions, context, max_rows)?;
    let blocks = runner.kv_blocks();
    let mut engine = Engine::new(runner, config, CostModel::flat());
    engine.sample_on(pool.clone());
    if let Some(dm) = &draft_model {
        let positions = blocks * tf_kernels::kv::BLOCK_SIZE;
        let draft = backend.draft_runner(
            dm,
            &pool,
            (positions, context, max_rows),
            global.draft_keep(),
        )?;
        engine.add_draft_model(Box::new(
            DraftModel::with_runner(draft).with_window(global.draft_window),
        ));
    }
    // The target's own multi-token-prediction head (CPU), where its file has one.
    let mtp = target.weights().mtp.is_some() && global.mtp == crate::Switch::On;
    if mtp && !backend.is_gpu() {
        let head = tf_engine::proposer::Mtp::new(target.clone(), pool.clone(), blocks)
            .with_head(target.pruned_head(global.draft_keep()));
        engine.add_draft_model(Box::new(head));
    }
    let calibration = engine.calibrate().context("measuring the forward cost")?;
    Ok(Lanes {
        engine,
        target,
        plan,
        tokenizer: loaded.tokenizer,
        draft: draft_model,
        calibration,
    })
}
