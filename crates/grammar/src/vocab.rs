//! The model's vocabulary as llguidance sees it: a trie of every token's bytes.

use std::sync::Arc;

use llguidance::ParserFactory;
use tf_engine::Grammar;
use tf_text::{TokenKind, Tokenizer};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};

use crate::matcher::Compiled;
use crate::{GrammarError, Spec};

/// One model's grammar compiler (build once, share).
pub struct Vocabulary {
    factory: ParserFactory,
}

/// llguidance's view of the tokenizer: the trie, and byte strings tokenized greedily along it
/// (used only for the tokens a grammar forces, which are never more than guesses here).
struct Env {
    trie: TokTrie,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        self.trie.greedy_tokenize(s)
    }
}

impl Vocabulary {
    /// The trie of `tokenizer`'s tokens: each token's bytes, control tokens as llguidance's
    /// special-token marker followed by their text (a grammar names them as `<|im_end|>`, text
    /// never matches them), unused placeholders as nothing (never allowed). The end-of-generation
    /// tokens end a reply where the grammar may end.
    pub fn new(tokenizer: &Tokenizer) -> Result<Vocabulary, GrammarError> {
        let n = tokenizer.vocab_size();
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| match tokenizer.token_kind(id) {
                Some(TokenKind::Control) | Some(TokenKind::Unknown) => {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tokenizer.token_bytes(id));
                    w
                }
                Some(TokenKind::Unused) | None => Vec::new(),
                _ => tokenizer.token_bytes(id).to_vec(),
            })
            .collect();
        let eog = tokenizer.eog_ids();
        let eos = tokenizer
            .eos_id()
            .or_else(|| eog.first().copied())
            .ok_or_else(|| {
                GrammarError::Vocabulary("the model has no end-of-generation token".into())
            })?;
        let info = TokRxInfo::new(n as u32, eos);
        let mut trie = TokTrie::from(&info, &words);
        if !eog.is_empty() {
            trie = trie.with_eos_tokens(eog);
        }
        let env: TokEnv = Arc::new(Env { trie });
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| GrammarError::Vocabulary(e.to_string()))?;
        factory.quiet();
        // Errors name what went wrong, without the parser's state dump.
        factory.limits_mut().verbose_errors = false;
        Ok(Vocabulary { factory })
    }

    /// Compiles `spec` for this vocabulary: the grammar a request carries to the engine.
    pub fn compile(&self, spec: &Spec) -> Result<Grammar, GrammarError> {
        let parser = self
            .factory
            .create_parser(spec.top_level()?)
            .map_err(|e| GrammarError::Invalid(e.to_string()))?;
        Ok(Grammar(Arc::new(Compiled::new(parser))))
    }
}
