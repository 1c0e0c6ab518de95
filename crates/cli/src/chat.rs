//! Chat with the model's own template: one turn (`run --chat --prompt`) or an interactive loop on
//! stdin (`run --chat`). Every turn re-renders the whole conversation; the engine's prompt cache
//! holds the prefix the new prompt shares with the previous turns, so only the new turn is
//! prefilled.

use std::io::{BufRead, Write};

use anyhow::{anyhow, Context, Result};
use serde_json::{json, Map, Value};
use tf_core::TokenId;
use tf_text::{ChatTemplate, Tokenizer};

use crate::run::{self, RunArgs, Session};

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
        match run::reply(session, &tokens, args, out) {
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
