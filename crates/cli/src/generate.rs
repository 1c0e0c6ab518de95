//! One sequence generated token by token: the model, its own KV cache and block table, the
//! tokens committed so far and the sampler.
//!
//! A sampled token is not fed to the model until the next [`Generator::step`] needs its
//! logits, so a reply that ends (end-of-generation token, token limit) costs no wasted forward.

use anyhow::{bail, Result};
use tf_core::{BlockId, TokenId};
use tf_engine::Runner;
use tf_kernels::kv::BLOCK_SIZE;
use tf_models::Row;

use crate::sample::Sampler;

/// Rows per prefill forward call. Kernels are row-exact (ARCHITECTURE.md, exactness rule 1), so the chunk size
/// changes speed only, never a logit.
pub const PREFILL_CHUNK_ROWS: usize = 256;

pub struct Generator {
    /// The model with a KV cache of at least `context` positions (CPU or GPU).
    runner: Box<dyn Runner>,
    /// Block ids covering positions `0..context`; this generator is the cache's only user.
    table: Vec<BlockId>,
    context: usize,
    /// Every token of the sequence, prompt and reply.
    tokens: Vec<TokenId>,
    /// `tokens[..fed]` have their keys and values in `kv`.
    fed: usize,
    /// The next-token logits after `tokens[..fed]`, when `fed == tokens.len()` and not yet used.
    logits: Option<Vec<f32>>,
    sampler: Sampler,
}

impl Generator {
    /// A generator over `runner`, whose cache must hold `context` positions (`context >= 1`).
    pub fn new(runner: Box<dyn Runner>, context: usize, sampler: Sampler) -> Self {
        let blocks = context.div_ceil(BLOCK_SIZE).max(1);
        Generator {
            runner,
            table: (0..blocks as BlockId).collect(),
            context,
            tokens: Vec::new(),
            fed: 0,
            logits: None,
            sampler,
        }
    }

    /// Positions the sequence may occupy.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Whether another token can be generated without running past the context.
    pub fn has_room(&self) -> bool {
        self.tokens.len() < self.context
    }

    /// Appends `tokens` and runs them through the model in chunks of [`PREFILL_CHUNK_ROWS`], so
    /// that the next [`Generator::step`] samples right after them.
    pub fn prefill(&mut self, tokens: &[TokenId]) -> Result<()> {
        let total = self.tokens.len() + tokens.len();
        if total > self.context {
            bail!(
                "the sequence needs {total} positions but the context holds {} (raise --context)",
                self.context
            );
        }
        self.tokens.extend_from_slice(tokens);
        self.feed_pending()
    }

    /// Keeps only the first `n` tokens (their cache entries stay valid); later tokens are
    /// forgotten and their positions will be overwritten.
    pub fn truncate(&mut self, n: usize) {
        if n < self.tokens.len() {
            self.tokens.truncate(n);
            self.logits = None;
        }
        self.fed = self.fed.min(n);
    }

    /// Makes the sequence equal `prompt`, re-using the cache of the longest common prefix, and
    /// leaves it ready to sample the token after `prompt`. Returns how many tokens were re-used.
    pub fn reset_to(&mut self, prompt: &[TokenId]) -> Result<usize> {
        if prompt.is_empty() {
            bail!("the prompt is empty (no tokens to start from)");
        }
        let common = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(self.fed);
        // At least one row must run to produce the logits after the prompt.
        let reused = common.min(prompt.len() - 1);
        self.truncate(reused);
        self.prefill(&prompt[reused..])?;
        Ok(reused)
    }

    /// Samples the next token and appends it to the sequence. The caller checks
    /// [`Generator::has_room`] first.
    pub fn step(&mut self) -> Result<TokenId> {
        if !self.has_room() {
            bail!("the context of {} positions is full", self.context);
        }
        self.feed_pending()?;
        let Some(logits) = self.logits.take() else {
            bail!("nothing to continue from: prefill a prompt first");
        };
        let token = self.sampler.sample(&logits);
        self.tokens.push(token);
        Ok(token)
    }

    /// Runs `tokens[fed..]` through the model and keeps the last row's logits.
    fn feed_pending(&mut self) -> Result<()> {
        let vocab = self.runner.vocab();
        while self.fed < self.tokens.len() {
            let end = (self.fed + PREFILL_CHUNK_ROWS).min(self.tokens.len());
            let rows: Vec<Row> = (self.fed..end)
                .map(|pos| Row {
                    token: self.tokens[pos],
                    pos,
                    table: &self.table,
                    logits: pos + 1 == self.tokens.len(),
                    tree: None,
                })
                .collect();
            let out = self.runner.forward(&rows)?;
            self.fed = end;
            if self.fed == self.tokens.len() {
                if out.len() != vocab {
                    bail!(
                        "the model returned {} logits, expected {vocab} (one row)",
                        out.len()
                    );
                }
                self.logits = Some(out);
            }
        }
        Ok(())
    }
}
