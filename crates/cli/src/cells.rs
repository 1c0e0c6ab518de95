//! `tensorfold bench` (the default mode): decoding speed of the drafting engine on the four cells
//! code/chat × sampled/greedy plus the edit cell, each drafted reply checked against its
//! `draft: false` twin by `token_sha`.
//!
//! Per cell and reply length: one warm-up, then `--runs` runs, each with its own prompt and seed.
//! Decode tok/s = (completion tokens − 1) / (time from first to last token), as a client sees
//! it; the table shows medians.
//!
//! The cells, their prompts and sampling, the run plan and the timing are shared with
//! `bench --url`, which measures a server over HTTP the same way (`bench/url.rs`).

use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use tf_engine::{EngineConfig, EngineHandle, Event, Receipt, Request, SamplingParams};
use tf_text::{ChatTemplate, Tokenizer};

use crate::bench::args::BenchArgs;
use crate::lanes;
use crate::prompts;
use crate::GlobalArgs;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Cell {
    CodeSampled,
    ChatSampled,
    CodeGreedy,
    ChatGreedy,
    Edit,
}

impl Cell {
    pub(crate) const ALL: [Cell; 5] = [
        Cell::CodeSampled,
        Cell::ChatSampled,
        Cell::CodeGreedy,
        Cell::ChatGreedy,
        Cell::Edit,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Cell::CodeSampled => "code sampled",
            Cell::ChatSampled => "chat sampled",
            Cell::CodeGreedy => "code greedy",
            Cell::ChatGreedy => "chat greedy",
            Cell::Edit => "edit",
        }
    }

    fn parse(s: &str) -> Result<Vec<Cell>> {
        if s == "all" {
            return Ok(Cell::ALL.to_vec());
        }
        s.split(',')
            .map(|c| {
                Cell::ALL
                    .into_iter()
                    .find(|x| x.name().replace(' ', "-") == c.trim())
                    .ok_or_else(|| anyhow!("unknown cell '{c}' (code-sampled, chat-sampled, code-greedy, chat-greedy, edit, all)"))
            })
            .collect()
    }

    /// Chat cells go through the chat template (which carries its own BOS where it wants one).
    pub(crate) fn chat(self) -> bool {
        matches!(self, Cell::ChatSampled | Cell::ChatGreedy | Cell::Edit)
    }

    /// Run `i`'s text: the raw prompt of a code cell, the user message of a chat cell.
    pub(crate) fn text(self, i: usize) -> String {
        match self {
            Cell::CodeSampled | Cell::CodeGreedy => prompts::CODE[i % prompts::CODE.len()].into(),
            Cell::ChatSampled | Cell::ChatGreedy => prompts::CHAT[i % prompts::CHAT.len()].into(),
            Cell::Edit => prompts::edit_message(i),
        }
    }

    /// Run `i`'s sampling: temperature 0.8, top-p 0.95 and seed 1000 + i in the sampled cells,
    /// greedy elsewhere.
    pub(crate) fn params(self, i: usize) -> SamplingParams {
        if matches!(self, Cell::CodeSampled | Cell::ChatSampled) {
            SamplingParams {
                temperature: 0.8,
                top_p: 0.95,
                seed: Some(1000 + i as u64),
                ..SamplingParams::greedy()
            }
        } else {
            SamplingParams::greedy()
        }
    }
}

/// Extra variables of the chat template (`chat_template_kwargs` over HTTP): no thinking.
pub(crate) fn template_kwargs() -> serde_json::Map<String, serde_json::Value> {
    let mut extra = serde_json::Map::new();
    extra.insert("enable_thinking".into(), false.into());
    extra
}

/// What `bench` measures: cells × reply lengths, `runs` measured runs each.
pub(crate) struct Plan {
    pub cells: Vec<Cell>,
    pub lengths: Vec<usize>,
    pub runs: usize,
}

impl Plan {
    pub(crate) fn new(args: &BenchArgs) -> Result<Plan> {
        let cells = Cell::parse(&args.cells)?;
        let lengths = args
            .tokens
            .split(',')
            .map(|t| {
                t.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| anyhow!("--tokens: '{t}' is not a positive number"))
            })
            .collect::<Result<_>>()?;
        let runs = args.runs as usize;
        if runs + 1 > prompts::CODE.len() {
            bail!("--runs is at most {}", prompts::CODE.len() - 1);
        }
        Ok(Plan {
            cells,
            lengths,
            runs,
        })
    }

    /// Per cell and reply length: `run(cell, i, tokens)` once on prompt 0 to warm up, then on
    /// prompts 1..=runs (each with its own seed); `report(cell, tokens, results)` gets those.
    pub(crate) fn measure<T>(
        &self,
        mut run: impl FnMut(Cell, usize, usize) -> Result<T>,
        mut report: impl FnMut(Cell, usize, Vec<T>) -> Result<()>,
    ) -> Result<()> {
        for &cell in &self.cells {
            for &n in &self.lengths {
                run(cell, 0, n)?;
                let results = (1..=self.runs)
                    .map(|i| run(cell, i, n))
                    .collect::<Result<_>>()?;
                report(cell, n, results)?;
            }
        }
        Ok(())
    }
}

/// A reply's timing as a client sees it.
pub(crate) struct Stopwatch {
    start: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Stopwatch {
    /// Starts when the request is sent.
    pub(crate) fn start() -> Self {
        Stopwatch {
            start: Instant::now(),
            first: None,
            last: None,
        }
    }

    /// Tokens arrived now.
    pub(crate) fn mark(&mut self) {
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// (tokens − 1) / (time from the first to the last arrival); 0 without such a time.
    pub(crate) fn decode_tps(&self, tokens: usize) -> f64 {
        match (self.first, self.last) {
            (Some(f), Some(l)) if l > f => tokens.saturating_sub(1) as f64 / (l - f).as_secs_f64(),
            _ => 0.0,
        }
    }

    /// Seconds from the start to the first arrival (time to first token).
    pub(crate) fn ttft(&self) -> f64 {
        self.first.map_or(0.0, |f| (f - self.start).as_secs_f64())
    }
}

struct Timed {
    receipt: Receipt,
    tokens: usize,
    decode_tps: f64,
}

fn run_one(handle: &EngineHandle, req: Request) -> Result<Timed> {
    let mut clock = Stopwatch::start();
    let (_, mut events) = handle.submit(req)?;
    let mut tokens = 0;
    while let Some(ev) = events.blocking_recv() {
        match ev {
            Event::Tokens(t) => {
                if !t.is_empty() {
                    clock.mark();
                    tokens += t.len();
                }
            }
            Event::Logprobs(_) | Event::PromptLogprobs(_) => {}
            Event::Error(e) => bail!("engine error: {e}"),
            Event::Done(receipt) => {
                return Ok(Timed {
                    receipt,
                    tokens,
                    decode_tps: clock.decode_tps(tokens),
                });
            }
        }
    }
    bail!("the engine stopped before the request finished")
}

/// Run `i`'s prompt: a chat cell's message through the chat template, or (a base model without
/// one) as plain text like a code cell's.
pub(crate) fn prompt_ids(
    cell: Cell,
    i: usize,
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
) -> Result<Vec<u32>> {
    let templated = template.filter(|_| cell.chat());
    let text = match templated {
        Some(t) => {
            let messages = [serde_json::json!({"role": "user", "content": cell.text(i)})];
            t.render(&messages, None, true, &template_kwargs())?
        }
        None => cell.text(i),
    };
    let mut ids = Vec::new();
    if tok.add_bos() && templated.is_none() {
        ids.extend(tok.bos_id());
    }
    ids.extend(tok.encode(&text, true)?);
    Ok(ids)
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    }
}

pub fn run(args: &BenchArgs, global: &GlobalArgs) -> Result<()> {
    let plan = Plan::new(args)?;
    let runs = plan.runs;
    let spec = crate::load::spec_or_default(args.model.as_deref());
    let config = EngineConfig {
        drafts: !args.no_drafts,
        ..EngineConfig::default()
    };
    let max_len = plan.lengths.iter().max().copied().unwrap_or(64);
    let lanes = lanes::build(
        spec,
        args.draft.as_deref(),
        |_, _| {
            Ok(lanes::KvPlan {
                kv_positions: 4 * (max_len + 2048),
                context: 8192,
                max_running: None,
            })
        },
        config,
        global,
    )?;
    let tok = lanes.tokenizer;
    let template = match tok.chat_template() {
        Some(t) => Some(ChatTemplate::new(
            t,
            tok.bos_token_text(),
            tok.eos_token_text(),
        )?),
        None => {
            eprintln!("bench: the model has no chat template; chat cells send their message as plain text");
            None
        }
    };
    eprintln!(
        "bench: {} + draft {}; forward cost of 1/2/4/8/16/32 rows: {}",
        spec,
        lanes
            .draft
            .as_ref()
            .map_or("none".to_string(), |d| d.path().display().to_string()),
        lanes
            .calibration
            .iter()
            .map(|(r, s)| format!("{r}:{:.1}ms({:.2}x)", s * 1e3, s / lanes.calibration[0].1))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let (handle, _join) = EngineHandle::spawn(lanes.engine);
    let request = |cell: Cell, i: usize, n: usize, draft: bool| -> Result<Request> {
        let mut req = Request::new(prompt_ids(cell, i, &tok, template.as_ref())?, n);
        req.ignore_eos = true;
        req.stop_tokens = tok.eog_ids().to_vec();
        req.draft = draft;
        req.params = cell.params(i);
        Ok(req)
    };
    println!("| cell | tokens | drafted tok/s | serial tok/s | speedup | exact | tokens/round | accepted/drafted | by source |");
    println!("|---|---|---|---|---|---|---|---|---|");
    // Every run, the warm-up too, serves both paths.
    let pair = |cell: Cell, i: usize, n: usize| -> Result<(Timed, Timed)> {
        let d = run_one(&handle, request(cell, i, n, true)?)?;
        let s = run_one(&handle, request(cell, i, n, false)?)?;
        Ok((d, s))
    };
    plan.measure(pair, |cell, n, pairs| {
        let (mut dt, mut st) = (Vec::new(), Vec::new());
        let (mut exact, mut rounds, mut toks, mut drafted, mut accepted) = (0, 0, 0, 0, 0);
        let mut sources: Vec<(&'static str, usize, usize)> = Vec::new();
        let mut positions: Vec<(usize, usize)> = Vec::new();
        for (d, s) in &pairs {
            exact += usize::from(d.receipt.token_sha == s.receipt.token_sha);
            dt.push(d.decode_tps);
            st.push(s.decode_tps);
            rounds += d.receipt.rounds;
            toks += d.tokens;
            drafted += d.receipt.drafted;
            accepted += d.receipt.accepted;
            for src in &d.receipt.sources {
                match sources.iter_mut().find(|x| x.0 == src.name()) {
                    Some(x) => {
                        x.1 += src.drafted;
                        x.2 += src.accepted;
                    }
                    None => sources.push((src.name(), src.drafted, src.accepted)),
                }
            }
            for (j, (pd, pa)) in d.receipt.by_position.iter().enumerate() {
                if positions.len() <= j {
                    positions.push((0, 0));
                }
                positions[j].0 += pd;
                positions[j].1 += pa;
            }
        }
        println!(
            "{} | {:.2} | {accepted}/{drafted} | {} |",
            speed_columns(cell, n, &mut dt, Some((&mut st, exact))),
            (toks.saturating_sub(runs)) as f64 / rounds.max(1) as f64,
            sources
                .iter()
                .map(|(n, d, a)| format!("{n} {a}/{d}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        eprintln!(
            "  {} {n}: acceptance by position: {}",
            cell.name(),
            positions
                .iter()
                .map(|(d, a)| format!("{:.2}", *a as f64 / (*d).max(1) as f64))
                .collect::<Vec<_>>()
                .join(" ")
        );
        Ok(())
    })
}

/// The table's first columns: `| cell | tokens | drafted tok/s | serial tok/s | speedup | exact`
/// (medians; exact = drafted replies equal to their serial twins). Without serial twins the
/// serial columns are `-` and exactness `n/a`.
pub(crate) fn speed_columns(
    cell: Cell,
    n: usize,
    drafted: &mut [f64],
    serial: Option<(&mut [f64], usize)>,
) -> String {
    let runs = drafted.len();
    let dm = median(drafted);
    match serial {
        Some((serial, exact)) => {
            let sm = median(serial);
            format!(
                "| {} | {n} | {dm:.1} | {sm:.1} | {:.2}x | {exact} of {runs}",
                cell.name(),
                dm / sm.max(1e-9)
            )
        }
        None => format!("| {} | {n} | {dm:.1} | - | - | n/a", cell.name()),
    }
}
