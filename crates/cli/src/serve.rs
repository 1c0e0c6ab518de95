//! `tensorfold serve`: the OpenAI/Anthropic-compatible HTTP server.
//!
//! The socket is bound first, so that `/health` answers 503 while the model loads and the
//! engine measures its forward cost; then the engine thread starts and the server is ready.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use tf_engine::{EngineConfig, EngineHandle, SpillStore};
use tf_server::{AppState, Backend, SamplingDefaults, ServerConfig};

use crate::lanes::{self, KvPlan};
use crate::load::{self, gib};
use crate::memory;
use crate::GlobalArgs;

/// Context when `--context` is not given: the model's trained context, at most this.
const DEFAULT_CONTEXT: usize = 32768;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Model: a catalogue name, a GGUF file, a Hugging Face model directory, or
    /// owner/repo/file.gguf (default: the catalogue's default model).
    #[arg(value_name = "MODEL")]
    pub model: Option<String>,
    /// Draft model: a model spec, or `none` (default: the catalogue's draft for the model).
    #[arg(long, value_name = "MODEL|none")]
    pub draft: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one; the URL is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Model id reported by /v1/models and in replies (default: the model's name).
    #[arg(long, value_name = "ID")]
    pub name: Option<String>,
    /// Further model ids requests may use (repeatable).
    #[arg(long, value_name = "ID")]
    pub alias: Vec<String>,
    /// Longest sequence (prompt + reply) in tokens (default: the model's trained context, at
    /// most 32768).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(16..))]
    pub context: Option<u32>,
    /// Cap on the reply length of requests that give no max_tokens (default: the room left in
    /// the context).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: Option<u32>,
    /// Open connections at most; one more is answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Seconds a connection may take to send a request's header before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub header_timeout: u32,
    /// Seconds a request's body may take to arrive before the request gets a 408.
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub body_timeout: u32,
    /// Default temperature for requests that give none (OpenAI's default: 1).
    #[arg(long, value_name = "T")]
    pub temperature: Option<f32>,
    /// Default top-p.
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,
    /// Default top-k (0 = off).
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Default min-p.
    #[arg(long, value_name = "P")]
    pub min_p: Option<f32>,
    /// Serve every request serially (one token per forward pass): the exactness reference.
    #[arg(long)]
    pub no_drafts: bool,
    /// Requests decoded at once: a number, or `auto` (as many whole contexts as the KV budget
    /// holds, 4 to 16).
    #[arg(long, value_name = "N|auto", default_value = "auto")]
    pub parallel: String,
    /// Require this API key (`Authorization: Bearer KEY` or `x-api-key: KEY`).
    #[arg(long, value_name = "KEY", conflicts_with = "api_key_file")]
    pub api_key: Option<String>,
    /// Read the API key from the first line of this file.
    #[arg(long, value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
    /// Memory budget of the whole process: weights, KV cache, prompt cache and buffers
    /// (default: 70% of physical memory).
    #[arg(long, value_name = "GIB")]
    pub memory_limit_gib: Option<f64>,
    /// Most memory the prompt cache keeps (cached prefixes live in the KV pool and are evicted
    /// first when requests need room; default: the whole pool).
    #[arg(long, value_name = "GIB")]
    pub prompt_cache_gib: Option<f64>,
    /// Keep evicted prompt-cache blocks in this directory (checksummed files, reused after a
    /// restart with the same model).
    #[arg(long, value_name = "DIR")]
    pub prompt_cache_dir: Option<PathBuf>,
    /// Disk budget of --prompt-cache-dir.
    #[arg(
        long,
        value_name = "GIB",
        default_value_t = 10.0,
        requires = "prompt_cache_dir"
    )]
    pub spill_gib: f64,
    /// Requests allowed to wait for room; beyond this, 503 with Retry-After.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_queue: usize,
    /// Do not serve the /dashboard page (/stats stays).
    #[arg(long)]
    pub no_dashboard: bool,
    /// No live status line on the terminal (it is shown only when stderr is one).
    #[arg(long)]
    pub no_live: bool,
    /// One stderr line per HTTP request (method, path, status, time to the response's start)
    /// and per Responses WebSocket `response.create`.
    #[arg(long)]
    pub access_log: bool,
}

/// `--parallel`: a number, or `None` for `auto`.
fn parallel(arg: &str) -> Result<Option<usize>> {
    if arg == "auto" {
        return Ok(None);
    }
    match arg.parse::<usize>() {
        Ok(n) if (1..=256).contains(&n) => Ok(Some(n)),
        _ => bail!("--parallel must be a number from 1 to 256 or `auto`, got '{arg}'"),
    }
}

fn api_key(args: &ServeArgs) -> Result<Option<String>> {
    let key = match (&args.api_key, &args.api_key_file) {
        (Some(k), _) => k.clone(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --api-key-file {}", path.display()))?
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string(),
        (None, None) => return Ok(None),
    };
    if key.is_empty() {
        bail!("the API key is empty (--api-key / --api-key-file)");
    }
    Ok(Some(key))
}

fn check_sampling(args: &ServeArgs) -> Result<SamplingDefaults> {
    let check = |name: &str, v: Option<f32>, lo: f32, hi: f32, open_lo: bool| -> Result<()> {
        if let Some(x) = v {
            let ok = if open_lo {
                x > lo && x <= hi
            } else {
                x >= lo && x <= hi
            };
            if !ok {
                bail!(
                    "--{name} must be in {}{lo}, {hi}], got {x}",
                    if open_lo { "(" } else { "[" }
                );
            }
        }
        Ok(())
    };
    check("temperature", args.temperature, 0.0, 2.0, false)?;
    check("top-p", args.top_p, 0.0, 1.0, true)?;
    check("min-p", args.min_p, 0.0, 1.0, false)?;
    Ok(SamplingDefaults {
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        min_p: args.min_p,
    })
}

pub fn run(args: &ServeArgs, global: &GlobalArgs) -> Result<()> {
    let spec = load::spec_or_default(args.model.as_deref()).to_string();
    let parallel = parallel(&args.parallel)?;
    let model_id = args.name.clone().unwrap_or_else(|| model_name(&spec));
    let state = AppState::new(server_config(args, &model_id)?);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let addr = format!("{}:{}", args.host, args.port);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(&addr))
        .with_context(|| format!("cannot listen on {addr} (--host/--port)"))?;
    let bound: SocketAddr = listener.local_addr()?;
    if !bound.ip().is_loopback() && state.config.api_key.is_none() {
        eprintln!(
            "warning: listening on {bound} beyond loopback without an API key: anyone who can \
             reach this address can use the server (set --api-key or --api-key-file)"
        );
    }
    let server = runtime.spawn(tf_server::serve(listener, state.clone()));
    eprintln!(
        "TensorFold loading {spec} (listening on http://{bound}, /health is 503 until ready)"
    );

    let requested_context = args.context.map(|c| c as usize);
    let budget = memory_budget(args)?;
    let mut memory_plan = None;
    let engine_config = EngineConfig {
        drafts: !args.no_drafts,
        max_running: parallel.unwrap_or(memory::AUTO_PARALLEL_MIN),
        max_waiting: args.max_queue,
        ..EngineConfig::default()
    };
    let lanes = lanes::build(
        &spec,
        args.draft.as_deref(),
        |target, draft| {
            let p = memory::plan(
                budget,
                global.kv_type,
                target,
                draft,
                requested_context,
                DEFAULT_CONTEXT,
                parallel,
                EngineConfig::default().max_step_rows,
            )?;
            memory_plan = Some(p);
            Ok(KvPlan {
                kv_positions: p.kv_positions,
                context: p.context,
                max_running: Some(p.parallel),
            })
        },
        engine_config,
        global,
    )?;
    let mem = memory_plan.expect("the plan ran");
    let mut engine = lanes.engine;
    let cache_blocks = match args.prompt_cache_gib {
        Some(g) => {
            let per_block = mem.kv_per_position * tf_kernels::kv::BLOCK_SIZE as u64;
            ((g * (1u64 << 30) as f64) as u64 / per_block) as usize
        }
        None => engine.free_blocks(),
    };
    engine.set_cache_budget(cache_blocks);
    let spill = open_spill(args, &mut engine)?;
    let total_blocks = engine.free_blocks();
    let (engine, _join) = EngineHandle::spawn(engine);
    let backend = Backend::new(
        engine,
        lanes.tokenizer,
        lanes.plan.context,
        total_blocks,
        !args.no_drafts,
    )
    .context("cannot compile the model's chat template")?;
    let loaded = Loaded {
        target: lanes.target.path(),
        draft: lanes.draft.as_ref().map(|d| d.path()),
        context: lanes.plan.context,
    };
    print_setup(
        &model_id,
        &loaded,
        args,
        global,
        &mem,
        cache_blocks,
        spill.as_ref(),
    );
    let shutdown_handle = backend.engine.clone();
    state.set_backend(backend);
    eprintln!("TensorFold ready: listening on http://{bound} (OpenAI API at http://{bound}/v1)");
    if !args.no_dashboard {
        eprintln!("dashboard: http://{bound}/dashboard");
    }
    if !args.no_live && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        runtime.spawn(live_line(state.clone()));
    }
    // Ctrl-C or SIGTERM: write the prompt cache to disk (when there is a disk tier), then stop.
    let result = runtime.block_on(async move {
        tokio::select! {
            r = server => Some(r),
            _ = shutdown_signal() => None,
        }
    });
    if spill.is_some() {
        eprintln!("TensorFold stopping: writing the prompt cache to disk");
        if let Some(n) = shutdown_handle.spill_all() {
            eprintln!("wrote {n} cached blocks");
        }
    }
    match result {
        None | Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(e))) => Err(anyhow!(e).context("the HTTP server failed")),
        Some(Err(e)) => Err(anyhow!(e).context("the HTTP server task failed")),
    }
}

/// The server's configuration from the command line.
fn server_config(args: &ServeArgs, model_id: &str) -> Result<ServerConfig> {
    let mut config = ServerConfig::new(model_id.to_string());
    config.aliases = args.alias.clone();
    config.max_tokens = args.max_tokens.map(|n| n as usize);
    config.defaults = check_sampling(args)?;
    config.api_key = api_key(args)?;
    config.max_connections = args.max_connections as usize;
    config.header_timeout = std::time::Duration::from_secs(args.header_timeout.into());
    config.body_timeout = std::time::Duration::from_secs(args.body_timeout.into());
    config.dashboard = !args.no_dashboard;
    config.access_log = args.access_log;
    Ok(config)
}

/// The disk tier of the prompt cache (`--prompt-cache-dir`): its directory, byte budget and
/// what it already held.
fn open_spill(
    args: &ServeArgs,
    engine: &mut tf_engine::Engine,
) -> Result<Option<(std::path::PathBuf, u64, tf_engine::SpillStats)>> {
    Ok(match &args.prompt_cache_dir {
        Some(dir) => {
            if !(args.spill_gib.is_finite() && args.spill_gib > 0.0) {
                bail!(
                    "--spill-gib must be a positive number, got {}",
                    args.spill_gib
                );
            }
            let budget = (args.spill_gib * (1u64 << 30) as f64) as u64;
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create --prompt-cache-dir {}", dir.display()))?;
            let store = SpillStore::open(dir, budget, engine.salt())
                .with_context(|| format!("cannot open --prompt-cache-dir {}", dir.display()))?;
            let found = store.stats();
            engine
                .set_spill(store)
                .with_context(|| format!("cannot use --prompt-cache-dir {}", dir.display()))?;
            Some((dir.clone(), budget, found))
        }
        None => None,
    })
}

/// The files `serve` loaded and the context it serves.
struct Loaded<'a> {
    target: &'a std::path::Path,
    draft: Option<&'a std::path::Path>,
    context: usize,
}

/// What `serve` loaded and how it shares memory, on stderr.
fn print_setup(
    model_id: &str,
    lanes: &Loaded,
    args: &ServeArgs,
    global: &GlobalArgs,
    mem: &memory::MemoryPlan,
    cache_blocks: usize,
    spill: Option<&(std::path::PathBuf, u64, tf_engine::SpillStats)>,
) {
    eprintln!("model      {model_id} ({})", lanes.target.display());
    match (&lanes.draft, args.no_drafts) {
        (_, true) => eprintln!("drafts     off (--no-drafts: every request is served serially)"),
        (Some(d), false) => eprintln!(
            "drafts     on: context copies + draft model {}; {}",
            d.display(),
            match global.draft_window {
                0 => "it runs every prompt token".to_string(),
                n => format!("of a long prompt it runs the first block and the last {n} tokens"),
            }
        ),
        (None, false) => eprintln!("drafts     on: context copies"),
    }
    eprintln!(
        "context    {} tokens per request; {} requests at once",
        lanes.context, mem.parallel
    );
    eprintln!(
        "memory     budget {:.2} GiB: weights {:.2} GiB, KV cache {:.2} GiB ({} positions of \
         {} KiB, {} keys and values; the prompt cache keeps up to {:.2} GiB of it), buffers \
         {:.2} GiB",
        gib(mem.budget),
        gib(mem.weights),
        gib(mem.kv_bytes()),
        mem.kv_positions,
        mem.kv_per_position.div_ceil(1024),
        global.kv_type.name(),
        gib(cache_blocks as u64 * mem.kv_per_position * tf_kernels::kv::BLOCK_SIZE as u64),
        gib(mem.buffers),
    );
    if let Some((dir, budget, found)) = spill {
        eprintln!(
            "disk cache {} (budget {:.2} GiB; {} cached blocks found, {:.2} GiB)",
            dir.display(),
            gib(*budget),
            found.files,
            gib(found.bytes)
        );
    }
}

/// Rewrites one status line on the terminal every second (request log lines clear it first).
async fn live_line(state: tf_server::SharedState) {
    use std::io::Write;
    use tf_server::routes::dashboard::{status_line, LIVE_LINE};
    LIVE_LINE.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        if let Some(line) = status_line(&state).await {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{line}");
            let _ = err.flush();
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// `--memory-limit-gib`, else 70% of physical memory.
fn memory_budget(args: &ServeArgs) -> Result<u64> {
    match args.memory_limit_gib {
        Some(g) if g.is_finite() && g > 0.0 => Ok((g * (1u64 << 30) as f64) as u64),
        Some(g) => bail!("--memory-limit-gib must be a positive number, got {g}"),
        None => memory::physical_bytes()
            .map(|b| (b as f64 * memory::DEFAULT_SHARE) as u64)
            .ok_or_else(|| {
                anyhow!("cannot read the physical memory size: give --memory-limit-gib")
            }),
    }
}

/// A model's id from its spec: the catalogue name, or the file name without `.gguf`.
fn model_name(spec: &str) -> String {
    if let Some(entry) = tf_fetch::find(spec) {
        return entry.name.to_string();
    }
    let base = spec.rsplit(['/', '\\']).next().unwrap_or(spec);
    base.strip_suffix(".gguf").unwrap_or(base).to_string()
}
