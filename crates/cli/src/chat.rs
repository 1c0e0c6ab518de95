//! A chat conversation for `run --chat`: the messages so far and the model's own template. Every
//! turn re-renders the whole conversation; the engine's prompt cache holds the prefix the new
//! prompt shares with the previous turns, so only the new turn is prefilled.

use anyhow::{anyhow, Context, Result};
use serde_json::{json, Map, Value};
use tf_core::TokenId;
use tf_text::{ChatTemplate, Tokenizer};

/// The messages so far and the template that turns them into a prompt.
pub struct Conversation<'t> {
    tokenizer: &'t Tokenizer,
    template: ChatTemplate,
    messages: Vec<Value>,
}

impl<'t> Conversation<'t> {
    pub fn new(tokenizer: &'t Tokenizer, system: Option<&str>) -> Result<Self> {
        let source = tokenizer.chat_template().ok_or_else(|| {
            anyhow!(
                "{} has no chat template: use --prompt without --chat for a raw completion",
                tokenizer.source().display()
            )
        })?;
        let template = ChatTemplate::new(
            source,
            tokenizer.bos_token_text(),
            tokenizer.eos_token_text(),
        )
        .context("cannot compile the model's chat template")?;
        let messages = system
            .map(|s| vec![json!({"role": "system", "content": s})])
            .unwrap_or_default();
        Ok(Conversation {
            tokenizer,
            template,
            messages,
        })
    }

    pub fn push_user(&mut self, text: &str) {
        self.messages.push(json!({"role": "user", "content": text}));
    }

    pub fn push_assistant(&mut self, text: &str) {
        self.messages
            .push(json!({"role": "assistant", "content": text}));
    }

    /// Drops the last message (a user turn whose reply failed).
    pub fn pop(&mut self) {
        self.messages.pop();
    }

    /// The whole conversation rendered with the generation prompt and tokenized (special tokens
    /// parsed; BOS added when the model wants one and the template did not write it).
    pub fn prompt_tokens(&self) -> Result<Vec<TokenId>> {
        let text = self
            .template
            .render(&self.messages, None, true, &Map::new())
            .context("cannot render the chat template")?;
        self.tokenizer
            .encode_chat(&text)
            .context("cannot tokenize the chat prompt")
    }
}
