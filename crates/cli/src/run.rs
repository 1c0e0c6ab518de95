//! `tensorfold run`: raw completion, one chat turn, or (with `chat`) an interactive chat.
//!
//! Every reply goes through the drafting engine as a server request does (`lanes::build`: the
//! catalogue's draft model, context copies, the keyed sampler), so `run --seed S` and a request
//! with `seed: S` and the same prompt give the same bytes and the same receipt; the receipt's
//! `token_sha` is printed after each reply. Chat turns reuse the prompt cache.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args};
use tf_core::TokenId;
use tf_engine::{
    EngineConfig, EngineHandle, Event, FinishReason, Receipt, Request, SamplingParams,
};
use tf_text::{StreamDecoder, Tokenizer};

use crate::chat::Conversation;
use crate::lanes;
use crate::load;
use crate::GlobalArgs;

/// Context positions when `--context` is not given (capped by the model's trained context):
/// 4096 positions of KV cost 0.2-0.5 GiB for the catalogue models, small next to the weights.
pub const DEFAULT_CONTEXT: usize = 4096;
/// KV positions the engine's start-up calibration needs (its widest forward and context).
const CALIBRATION_ROWS: usize = 256;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("mode").required(true).multiple(true).args(["prompt", "chat"])))]
pub struct RunArgs {
    /// Model: a catalogue name, a GGUF file, a Hugging Face model directory, or
    /// owner/repo/file.gguf on the Hub (default: the catalogue's default model).
    #[arg(value_name = "MODEL")]
    pub model: Option<String>,
    /// Text to complete (raw, no chat template), or with --chat the user's message.
    #[arg(long, short, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Use the model's chat template; without --prompt, chat interactively on stdin.
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat.
    #[arg(long, value_name = "TEXT", requires = "chat")]
    pub system: Option<String>,
    /// Most tokens to generate per reply.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(
        long,
        value_name = "T",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub temperature: f32,
    /// Sample only among the K most likely tokens.
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Sample only among the most likely tokens whose probabilities add up to P.
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,
    /// Seed of the sampler's random numbers (same seed, same text).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Positions of KV cache: prompt plus reply, the whole conversation with --chat
    /// (default: the model's trained context, at most 4096).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub context: Option<u32>,
    /// Print the reply only when it is complete.
    #[arg(long)]
    pub no_stream: bool,
    /// Print the prompt's token ids on stderr before generating.
    #[arg(long)]
    pub verbose_prompt: bool,
}

/// Why a reply ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    EndOfGeneration,
    MaxTokens,
    ContextFull,
}

impl Stop {
    fn describe(self) -> &'static str {
        match self {
            Stop::EndOfGeneration => "end of generation",
            Stop::MaxTokens => "--max-tokens reached",
            Stop::ContextFull => "context full (raise --context)",
        }
    }
}

/// A finished reply and its receipt.
pub struct Reply {
    /// The reply text (end-of-generation token excluded, control tokens skipped).
    pub text: String,
    pub receipt: Receipt,
    pub stop: Stop,
}

impl Reply {
    /// The summary printed on stderr after each reply.
    pub fn print_stats(&self) {
        let r = &self.receipt;
        let prefilled = r.prompt_tokens - r.cached_tokens;
        let prefill_s = r.prefill_secs;
        let mut line = format!("prompt: {} tokens", r.prompt_tokens);
        if r.cached_tokens > 0 {
            line += &format!(" ({} re-used from the previous turn)", r.cached_tokens);
        }
        line += &format!(
            ", prefill {prefilled} in {prefill_s:.3} s ({})",
            rate(prefilled, prefill_s)
        );
        eprintln!("{line}");
        let generated = r.completion_tokens;
        let decode_rate = if generated >= 2 {
            rate(generated - 1, r.decode_secs)
        } else {
            "n/a".to_string()
        };
        let drafted = if r.drafted > 0 {
            format!(", {} of {} drafted tokens accepted", r.accepted, r.drafted)
        } else {
            String::new()
        };
        eprintln!(
            "generated: {generated} tokens, decode {decode_rate}{drafted}, stopped: {}; token_sha {}",
            self.stop.describe(),
            r.token_sha
        );
    }
}

fn rate(tokens: usize, seconds: f64) -> String {
    if seconds > 0.0 {
        format!("{:.1} tok/s", tokens as f64 / seconds)
    } else {
        "n/a".to_string()
    }
}

/// The engine a `run` serves its replies from.
pub struct Session {
    handle: EngineHandle,
    pub tokenizer: Tokenizer,
    pub path: PathBuf,
    pub context: usize,
}

/// The context `run` serves: `--context`, or the model's trained context up to
/// [`DEFAULT_CONTEXT`].
fn context_for(args: &RunArgs, trained: usize) -> usize {
    match args.context {
        Some(n) => {
            let n = n as usize;
            if n > trained {
                eprintln!(
                    "warning: --context {n} exceeds the model's trained context of {trained}; \
                     quality may drop past it"
                );
            }
            n
        }
        None => trained.min(DEFAULT_CONTEXT),
    }
}

/// The request's sampling, checked where the flags are named.
fn sampling(args: &RunArgs) -> Result<SamplingParams> {
    if !args.temperature.is_finite() || !(0.0..=2.0).contains(&args.temperature) {
        bail!(
            "--temperature must be a number in [0, 2], got {}",
            args.temperature
        );
    }
    if let Some(p) = args.top_p {
        if !(p > 0.0 && p <= 1.0) {
            bail!("--top-p must be in (0, 1], got {p}");
        }
    }
    Ok(SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k.unwrap_or(0),
        top_p: args.top_p.unwrap_or(1.0),
        seed: Some(args.seed),
        ..SamplingParams::greedy()
    })
}

pub fn run(args: &RunArgs, global: &GlobalArgs) -> Result<()> {
    sampling(args)?;
    let spec = load::spec_or_default(args.model.as_deref());
    let path = load::resolve(spec, global)?;
    let mut context = 0;
    let lanes = lanes::build(
        spec,
        None,
        |target, _| {
            context = context_for(args, target.config.context_len.max(1));
            // At least the rows the engine's calibration runs, however small the context.
            let positions = context
                .max(CALIBRATION_ROWS)
                .div_ceil(tf_kernels::kv::BLOCK_SIZE)
                * tf_kernels::kv::BLOCK_SIZE;
            Ok(lanes::KvPlan {
                kv_positions: positions,
                context,
                max_running: None,
            })
        },
        EngineConfig::default(),
        global,
    )?;
    let (handle, _join) = EngineHandle::spawn(lanes.engine);
    let session = Session {
        handle,
        tokenizer: lanes.tokenizer,
        path,
        context,
    };
    let mut out = std::io::stdout().lock();

    if args.chat {
        let mut conversation = Conversation::new(&session.tokenizer, args.system.as_deref())?;
        let Some(prompt) = &args.prompt else {
            return repl(&session, &mut conversation, args, &mut out);
        };
        conversation.push_user(prompt);
        let tokens = conversation.prompt_tokens()?;
        let reply = reply(&session, &tokens, args, &mut out)?;
        reply.print_stats();
        return Ok(());
    }

    let text = args.prompt.as_deref().unwrap_or_default();
    let tokens = raw_prompt_tokens(&session.tokenizer, text)?;
    let reply = reply(&session, &tokens, args, &mut out)?;
    reply.print_stats();
    Ok(())
}

/// A raw completion prompt: the text with special tokens parsed, BOS first when the model
/// wants one.
pub fn raw_prompt_tokens(tokenizer: &Tokenizer, text: &str) -> Result<Vec<TokenId>> {
    let mut tokens = Vec::new();
    if tokenizer.add_bos() {
        tokens.extend(tokenizer.bos_id());
    }
    tokens.extend(
        tokenizer
            .encode(text, true)
            .context("cannot tokenize the prompt")?,
    );
    Ok(tokens)
}

/// One reply to `prompt` (the whole sequence so far) from the engine, its text streamed to
/// `out` unless `--no-stream`. A prompt that shares a prefix with an earlier one takes its
/// cached blocks.
pub fn reply(
    session: &Session,
    prompt: &[TokenId],
    args: &RunArgs,
    out: &mut dyn Write,
) -> Result<Reply> {
    if prompt.is_empty() {
        bail!("the prompt is empty: give some text with --prompt");
    }
    let context = session.context;
    if prompt.len() >= context {
        bail!(
            "the prompt is {} tokens, which leaves no room in the context of {context} positions \
             (raise --context)",
            prompt.len(),
        );
    }
    let tokenizer = &session.tokenizer;
    if args.verbose_prompt {
        eprintln!("prompt ids ({}): {prompt:?}", prompt.len());
    }
    // The reply stops where the context is full, if that comes before --max-tokens.
    let room = context - prompt.len();
    let mut req = Request::new(prompt.to_vec(), args.max_tokens.min(room));
    req.stop_tokens = tokenizer.eog_ids().to_vec();
    req.params = sampling(args)?;
    let (_, mut events) = session
        .handle
        .submit(req)
        .map_err(|e| anyhow::anyhow!("the engine refused the request: {e}"))?;
    let mut decoder = StreamDecoder::new(true);
    let mut text = String::new();
    let receipt = loop {
        match events.blocking_recv() {
            Some(Event::Tokens(ids)) => {
                for id in ids {
                    if tokenizer.is_eog(id) {
                        continue;
                    }
                    let piece = decoder.push(tokenizer, id);
                    if !args.no_stream && !piece.is_empty() {
                        out.write_all(piece.as_bytes())?;
                        out.flush()?;
                    }
                    text += &piece;
                }
            }
            Some(Event::Logprobs(_) | Event::PromptLogprobs(_)) => {}
            Some(Event::Error(e)) => bail!("generation failed: {e}"),
            Some(Event::Done(receipt)) => break receipt,
            None => bail!("the engine stopped before the reply finished"),
        }
    };
    let tail = decoder.finish();
    text += &tail;
    if args.no_stream {
        out.write_all(text.as_bytes())?;
    } else {
        out.write_all(tail.as_bytes())?;
    }
    out.write_all(b"\n")?;
    out.flush()?;
    let stop = match receipt.finish {
        FinishReason::Stop => Stop::EndOfGeneration,
        _ if args.max_tokens > room => Stop::ContextFull,
        _ => Stop::MaxTokens,
    };
    Ok(Reply {
        text,
        receipt,
        stop,
    })
}

/// The interactive loop: a line of stdin is a user turn; `/exit`, `/quit` or end of input ends it.
pub fn repl(
    session: &Session,
    conversation: &mut Conversation,
    args: &RunArgs,
    out: &mut dyn Write,
) -> Result<()> {
    eprintln!(
        "chatting with {} (context {} positions); /exit or end of input (Ctrl-D) to quit",
        session.path.display(),
        session.context
    );
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = String::new();
    loop {
        eprint!("> ");
        line.clear();
        if input.read_line(&mut line).context("cannot read stdin")? == 0 {
            eprintln!();
            return Ok(());
        }
        let text = line.trim_end_matches(['\r', '\n']);
        match text.trim() {
            "" => continue,
            "/exit" | "/quit" => return Ok(()),
            _ => {}
        }
        conversation.push_user(text);
        let tokens = conversation.prompt_tokens()?;
        match reply(session, &tokens, args, out) {
            Ok(reply) => {
                reply.print_stats();
                conversation.push_assistant(&reply.text);
            }
            Err(error) => {
                // The conversation no longer fits (or the model failed): say why and stop.
                conversation.pop();
                return Err(error.context("the chat cannot continue"));
            }
        }
    }
}
