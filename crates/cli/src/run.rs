//! `tensorfold run`: raw completion, one chat turn, or (with `chat`) an interactive chat.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args};
use tf_core::TokenId;
use tf_text::{StreamDecoder, Tokenizer};

use crate::chat::{self, Conversation};
use crate::generate::Generator;
use crate::load::{self, Loaded};
use crate::sample::{Sampler, SamplingParams};
use crate::GlobalArgs;

/// Context positions when `--context` is not given (capped by the model's trained context):
/// 4096 positions of KV cost 0.2-0.5 GiB for the catalogue models, small next to the weights.
pub const DEFAULT_CONTEXT: usize = 4096;

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

/// A finished reply and its timings.
pub struct Reply {
    /// The reply text (end-of-generation token excluded, control tokens skipped).
    pub text: String,
    pub prompt_tokens: usize,
    /// Prompt tokens whose cache was kept from the previous turn.
    pub reused_tokens: usize,
    pub prefill: Duration,
    /// Sampled tokens, an end-of-generation token included.
    pub generated: usize,
    /// From the first sampled token to the last.
    pub decode: Duration,
    pub stop: Stop,
}

impl Reply {
    /// The summary printed on stderr after each reply.
    pub fn print_stats(&self) {
        let prefilled = self.prompt_tokens - self.reused_tokens;
        let prefill_s = self.prefill.as_secs_f64();
        let mut line = format!("prompt: {} tokens", self.prompt_tokens);
        if self.reused_tokens > 0 {
            line += &format!(" ({} re-used from the previous turn)", self.reused_tokens);
        }
        line += &format!(
            ", prefill {prefilled} in {prefill_s:.3} s ({})",
            rate(prefilled, prefill_s)
        );
        eprintln!("{line}");
        let decode_s = self.decode.as_secs_f64();
        let decode_rate = if self.generated >= 2 {
            rate(self.generated - 1, decode_s)
        } else {
            "n/a".to_string()
        };
        eprintln!(
            "generated: {} tokens, decode {decode_rate}, stopped: {}",
            self.generated,
            self.stop.describe()
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

pub fn run(args: &RunArgs, global: &GlobalArgs) -> Result<()> {
    let params = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
    };
    params.validate().map_err(anyhow::Error::msg)?;
    let spec = load::spec_or_default(args.model.as_deref());
    let path = load::resolve(spec, global)?;
    let loaded = load::load(&path)?;
    let trained = loaded.model.config.context_len.max(1);
    let context = match args.context {
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
    };
    let pool = std::sync::Arc::new(load::thread_pool(global));
    let backend = crate::device::Backend::open(global)?;
    let model = loaded.model.clone();
    let positions =
        context.div_ceil(tf_kernels::kv::BLOCK_SIZE).max(1) * tf_kernels::kv::BLOCK_SIZE;
    let runner = backend.runner(
        &model,
        &pool,
        positions,
        context,
        crate::generate::PREFILL_CHUNK_ROWS,
    )?;
    let mut generator = Generator::new(runner, context, Sampler::new(params, args.seed));
    let mut out = std::io::stdout().lock();

    if args.chat {
        let mut conversation = Conversation::new(&loaded.tokenizer, args.system.as_deref())?;
        let Some(prompt) = &args.prompt else {
            return chat::repl(&loaded, &mut generator, &mut conversation, args, &mut out);
        };
        conversation.push_user(prompt);
        let tokens = conversation.prompt_tokens()?;
        let reply = reply(&loaded, &mut generator, &tokens, args, &mut out)?;
        reply.print_stats();
        return Ok(());
    }

    let text = args.prompt.as_deref().unwrap_or_default();
    let tokens = raw_prompt_tokens(&loaded.tokenizer, text)?;
    let reply = reply(&loaded, &mut generator, &tokens, args, &mut out)?;
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

/// Generates one reply to `prompt` (the whole sequence so far), streaming its text to `out`
/// unless `--no-stream`. The generator keeps the cache of the prefix it shares with its
/// previous sequence.
pub fn reply(
    loaded: &Loaded,
    generator: &mut Generator,
    prompt: &[TokenId],
    args: &RunArgs,
    out: &mut dyn Write,
) -> Result<Reply> {
    if prompt.is_empty() {
        bail!("the prompt is empty: give some text with --prompt");
    }
    if prompt.len() > generator.context() {
        bail!(
            "the prompt is {} tokens, longer than the context of {} positions (raise --context)",
            prompt.len(),
            generator.context()
        );
    }
    let tokenizer = &loaded.tokenizer;
    if args.verbose_prompt {
        eprintln!("prompt ids ({}): {prompt:?}", prompt.len());
    }
    let start = Instant::now();
    let reused = generator.reset_to(prompt)?;
    let prefill = start.elapsed();

    let mut decoder = StreamDecoder::new(true);
    let mut text = String::new();
    let mut generated = 0usize;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let stop = loop {
        if generated >= args.max_tokens {
            break Stop::MaxTokens;
        }
        if !generator.has_room() {
            break Stop::ContextFull;
        }
        let token = generator.step()?;
        last = Instant::now();
        first.get_or_insert(last);
        generated += 1;
        if tokenizer.is_eog(token) {
            break Stop::EndOfGeneration;
        }
        let piece = decoder.push(tokenizer, token);
        if !args.no_stream && !piece.is_empty() {
            out.write_all(piece.as_bytes())?;
            out.flush()?;
        }
        text += &piece;
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
    Ok(Reply {
        text,
        prompt_tokens: prompt.len(),
        reused_tokens: reused,
        prefill,
        generated,
        decode: first.map_or(Duration::ZERO, |f| last - f),
        stop,
    })
}
