//! `tensorfold gpu-check --model FILE --replies`: a real model's replies on the GPU equal the
//! CPU's, by `token_sha`, the way a user meets them: the bench cells' requests (drafted, through
//! the chat template) and a 12-turn conversation whose turns resume from the prompt cache.
//!
//! Both sides build their engine as `serve` does (`lanes::build`: the draft model, context
//! copies, calibration), one with `--device cuda`, one with `--device cpu`. Each side keeps its
//! own conversation history, so one differing turn shows in every later turn too.

use anyhow::{anyhow, bail, Result};
use tf_engine::{EngineConfig, EngineHandle, Event, Receipt, Request, SamplingParams};
use tf_text::{ChatTemplate, Tokenizer};

use crate::cells::{self, Cell};
use crate::device::Device;
use crate::lanes;
use crate::prompts;
use crate::GlobalArgs;
use tf_cuda::conformance::tally::Tally;

/// Reply tokens of a cell request and of a conversation turn.
const CELL_TOKENS: usize = 64;
const TURN_TOKENS: usize = 48;
/// Turns of the conversation.
const TURNS: usize = 12;

struct Side {
    handle: EngineHandle,
    tok: Tokenizer,
    template: Option<ChatTemplate>,
}

impl Side {
    fn open(model: &str, draft: Option<&str>, device: Device, global: &GlobalArgs) -> Result<Side> {
        let global = GlobalArgs {
            device,
            ..global.clone()
        };
        let lanes = lanes::build(
            model,
            Some(draft.unwrap_or("none")),
            |_, _| {
                Ok(lanes::KvPlan {
                    kv_positions: 16384,
                    context: 8192,
                    max_running: None,
                })
            },
            EngineConfig::default(),
            &global,
        )?;
        let tok = lanes.tokenizer;
        let template = tok
            .chat_template()
            .map(|t| ChatTemplate::new(t, tok.bos_token_text(), tok.eos_token_text()))
            .transpose()?;
        let (handle, _join) = EngineHandle::spawn(lanes.engine);
        Ok(Side {
            handle,
            tok,
            template,
        })
    }

    /// Runs one request to its end: (reply ids, receipt).
    fn reply(&self, req: Request) -> Result<(Vec<u32>, Receipt)> {
        let (_, mut events) = self.handle.submit(req)?;
        let mut ids = Vec::new();
        while let Some(ev) = events.blocking_recv() {
            match ev {
                Event::Tokens(t) => ids.extend(t),
                Event::Logprobs(_) | Event::PromptLogprobs(_) => {}
                Event::Error(e) => bail!("engine error: {e}"),
                Event::Done(r) => return Ok((ids, r)),
            }
        }
        bail!("the engine stopped before the request finished")
    }

    /// One conversation turn: the history rendered with a generation prompt.
    fn turn(&self, history: &[serde_json::Value], turn: usize) -> Result<(Vec<u32>, Receipt)> {
        let template = self
            .template
            .as_ref()
            .ok_or_else(|| anyhow!("the model has no chat template"))?;
        let text = template.render(history, None, true, &cells::template_kwargs())?;
        let mut req = Request::new(self.tok.encode(&text, true)?, TURN_TOKENS);
        req.stop_tokens = self.tok.eog_ids().to_vec();
        // Odd turns sample (their own seed), even turns are greedy.
        if turn % 2 == 1 {
            req.params = SamplingParams {
                temperature: 0.7,
                top_p: 0.9,
                seed: Some(7000 + turn as u64),
                ..SamplingParams::greedy()
            };
        }
        self.reply(req)
    }
}

/// The user's message of turn `t`: the chat prompts, then the edit requests, then follow-ups.
fn user_message(t: usize) -> String {
    match t {
        0..=5 => prompts::CHAT[t].to_string(),
        6..=8 => prompts::edit_message(t - 6),
        _ => format!("Summarize your answer number {} in one sentence.", t - 8),
    }
}

pub fn checks(
    model: &std::path::Path,
    draft: Option<&std::path::Path>,
    global: &GlobalArgs,
) -> Result<Vec<Tally>> {
    let model = model.display().to_string();
    let draft = draft.map(|d| d.display().to_string());
    let gpu = Side::open(&model, draft.as_deref(), Device::Cuda, global)?;
    let cpu = Side::open(&model, draft.as_deref(), Device::Cpu, global)?;

    let mut cell_tally = Tally::new("GPU cell replies == CPU (drafted, real model)");
    for cell in Cell::ALL {
        for i in 1..=2 {
            let req = |side: &Side| -> Result<Request> {
                let ids = cells::prompt_ids(cell, i, &side.tok, side.template.as_ref())?;
                let mut r = Request::new(ids, CELL_TOKENS);
                r.ignore_eos = true;
                r.stop_tokens = side.tok.eog_ids().to_vec();
                r.params = cell.params(i);
                Ok(r)
            };
            let (_, g) = gpu.reply(req(&gpu)?)?;
            let (_, c) = cpu.reply(req(&cpu)?)?;
            cell_tally.check(g.token_sha == c.token_sha, || {
                format!(
                    "{} {i}: GPU {} vs CPU {}",
                    cell.name(),
                    g.token_sha,
                    c.token_sha
                )
            });
        }
    }

    let mut turns = Tally::new("GPU 12-turn conversation == CPU (turns resumed from cache)");
    let mut resumed = 0;
    let (mut gh, mut ch) = (Vec::new(), Vec::new());
    for t in 0..TURNS {
        let user = serde_json::json!({"role": "user", "content": user_message(t)});
        gh.push(user.clone());
        ch.push(user);
        let (gi, g) = gpu.turn(&gh, t)?;
        let (ci, c) = cpu.turn(&ch, t)?;
        resumed += usize::from(g.cached_tokens > 0 && c.cached_tokens > 0);
        turns.check(g.token_sha == c.token_sha, || {
            format!("turn {t}: GPU {} vs CPU {}", g.token_sha, c.token_sha)
        });
        for (h, ids, side) in [(&mut gh, &gi, &gpu), (&mut ch, &ci, &cpu)] {
            let text = side.tok.decode(ids, true);
            h.push(serde_json::json!({"role": "assistant", "content": text}));
        }
    }
    turns.note_if_empty(format!(
        "{resumed} of {TURNS} turns took cached blocks on both"
    ));
    Ok(vec![cell_tally, turns])
}
