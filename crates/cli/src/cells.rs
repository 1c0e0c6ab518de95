//! `tensorfold bench` (the default mode): decoding speed of the drafting engine on the four cells
//! code/chat × sampled/greedy plus the edit cell, each drafted reply checked against its
//! `draft: false` twin by `token_sha`.
//!
//! Per cell and reply length: one warm-up, then `--runs` runs, each with its own prompt and seed.
//! Decode tok/s = (completion tokens − 1) / (time from first to last token), as a client sees
//! it; the table shows medians.

use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use tf_engine::{EngineConfig, EngineHandle, Event, Receipt, Request, SamplingParams};
use tf_text::{ChatTemplate, Tokenizer};

use crate::bench::BenchArgs;
use crate::lanes;
use crate::prompts;
use crate::GlobalArgs;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cell {
    CodeSampled,
    ChatSampled,
    CodeGreedy,
    ChatGreedy,
    Edit,
}

impl Cell {
    const ALL: [Cell; 5] = [
        Cell::CodeSampled,
        Cell::ChatSampled,
        Cell::CodeGreedy,
        Cell::ChatGreedy,
        Cell::Edit,
    ];

    fn name(self) -> &'static str {
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

    fn sampled(self) -> bool {
        matches!(self, Cell::CodeSampled | Cell::ChatSampled)
    }

    /// Chat cells go through the chat template (which carries its own BOS where it wants one).
    fn chat(self) -> bool {
        matches!(self, Cell::ChatSampled | Cell::ChatGreedy | Cell::Edit)
    }
}

struct Timed {
    receipt: Receipt,
    tokens: usize,
    decode_tps: f64,
}

fn run_one(handle: &EngineHandle, req: Request) -> Result<Timed> {
    let (_, mut events) = handle.submit(req)?;
    let (mut first, mut last) = (None, None);
    let mut tokens = 0;
    while let Some(ev) = events.blocking_recv() {
        match ev {
            Event::Tokens(t) => {
                let now = Instant::now();
                if !t.is_empty() {
                    first.get_or_insert(now);
                    last = Some(now);
                    tokens += t.len();
                }
            }
            Event::Error(e) => bail!("engine error: {e}"),
            Event::Done(receipt) => {
                let secs = match (first, last) {
                    (Some(f), Some(l)) => (l - f).as_secs_f64(),
                    _ => 0.0,
                };
                let decode_tps = if secs > 0.0 {
                    (tokens - 1) as f64 / secs
                } else {
                    0.0
                };
                return Ok(Timed {
                    receipt,
                    tokens,
                    decode_tps,
                });
            }
        }
    }
    bail!("the engine stopped before the request finished")
}

fn prompt_ids(cell: Cell, i: usize, tok: &Tokenizer, template: &ChatTemplate) -> Result<Vec<u32>> {
    let text = match cell {
        Cell::CodeSampled | Cell::CodeGreedy => prompts::CODE[i % prompts::CODE.len()].to_string(),
        Cell::ChatSampled | Cell::ChatGreedy | Cell::Edit => {
            let content = if cell == Cell::Edit {
                prompts::edit_message(i)
            } else {
                prompts::CHAT[i % prompts::CHAT.len()].to_string()
            };
            let messages = [serde_json::json!({"role": "user", "content": content})];
            let mut extra = serde_json::Map::new();
            extra.insert("enable_thinking".into(), false.into());
            template.render(&messages, None, true, &extra)?
        }
    };
    let mut ids = Vec::new();
    if tok.add_bos() && !cell.chat() {
        ids.extend(tok.bos_id());
    }
    ids.extend(tok.encode(&text, true)?);
    Ok(ids)
}

fn median(v: &mut [f64]) -> f64 {
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
    let cells = Cell::parse(&args.cells)?;
    let lengths: Vec<usize> = args
        .tokens
        .split(',')
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| anyhow!("--tokens: '{t}' is not a number"))
        })
        .collect::<Result<_>>()?;
    let runs = args.runs as usize;
    if runs + 1 > prompts::CODE.len() {
        bail!("--runs is at most {}", prompts::CODE.len() - 1);
    }
    let spec = crate::load::spec_or_default(args.model.as_deref());
    let config = EngineConfig {
        drafts: !args.no_drafts,
        ..EngineConfig::default()
    };
    let max_len = lengths.iter().max().copied().unwrap_or(64);
    let lanes = lanes::build(
        spec,
        args.draft.as_deref(),
        4 * (max_len + 2048),
        8192,
        config,
        global,
    )?;
    let tok = lanes.tokenizer;
    let template = ChatTemplate::new(
        tok.chat_template()
            .ok_or_else(|| anyhow!("the model has no chat template"))?,
        tok.bos_token_text(),
        tok.eos_token_text(),
    )?;
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
        let mut req = Request::new(prompt_ids(cell, i, &tok, &template)?, n);
        req.ignore_eos = true;
        req.stop_tokens = tok.eog_ids().to_vec();
        req.draft = draft;
        if cell.sampled() {
            req.params = SamplingParams {
                temperature: 0.8,
                top_p: 0.95,
                seed: Some(1000 + i as u64),
                ..SamplingParams::greedy()
            };
        }
        Ok(req)
    };
    println!("| cell | tokens | drafted tok/s | serial tok/s | speedup | exact | tokens/round | accepted/drafted | by source |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &cell in &cells {
        for &n in &lengths {
            // Warm-up (prompt 0): both paths.
            run_one(&handle, request(cell, 0, n, true)?)?;
            run_one(&handle, request(cell, 0, n, false)?)?;
            let (mut dt, mut st) = (Vec::new(), Vec::new());
            let (mut exact, mut rounds, mut toks, mut drafted, mut accepted) = (0, 0, 0, 0, 0);
            let mut sources: Vec<(&'static str, usize, usize)> = Vec::new();
            let mut positions: Vec<(usize, usize)> = Vec::new();
            for i in 1..=runs {
                let d = run_one(&handle, request(cell, i, n, true)?)?;
                let s = run_one(&handle, request(cell, i, n, false)?)?;
                exact += usize::from(d.receipt.token_sha == s.receipt.token_sha);
                dt.push(d.decode_tps);
                st.push(s.decode_tps);
                rounds += d.receipt.rounds;
                toks += d.tokens;
                drafted += d.receipt.drafted;
                accepted += d.receipt.accepted;
                for src in &d.receipt.sources {
                    match sources.iter_mut().find(|x| x.0 == src.name) {
                        Some(x) => {
                            x.1 += src.drafted;
                            x.2 += src.accepted;
                        }
                        None => sources.push((src.name, src.drafted, src.accepted)),
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
            let (dm, sm) = (median(&mut dt), median(&mut st));
            println!(
                "| {} | {n} | {dm:.1} | {sm:.1} | {:.2}x | {exact} of {runs} | {:.2} | {accepted}/{drafted} | {} |",
                cell.name(),
                dm / sm.max(1e-9),
                (toks.saturating_sub(runs)) as f64 / rounds.max(1) as f64,
                sources.iter().map(|(n, d, a)| format!("{n} {a}/{d}")).collect::<Vec<_>>().join(", "),
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
        }
    }
    Ok(())
}
