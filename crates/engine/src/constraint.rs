//! Constrained replies (structured output): a grammar the reply must follow, seen by the engine
//! only as token masks. The grammar itself (JSON schema, regex, Lark) lives outside the engine
//! (`tf-grammar`); the engine asks it for the tokens allowed after a given path and draws only
//! among those.
//!
//! Exactness: the mask a row draws under is a function of the committed tokens and that row's
//! drafted prefix only. [`Guide`] follows the path a window's draws take (`draw::accept`): it
//! takes each token drawn as the window goes, so a guess's row is masked exactly as the serial
//! step at that position would be. The guide never takes a guess the target did not draw, so
//! there is nothing to roll back: its state is always the committed tokens'. Guesses the grammar
//! forbids are cut before verification ([`Guide::valid_prefix`]).

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use tf_core::TokenId;

/// One reply's grammar state.
pub trait Constraint: Send {
    /// The tokens allowed next, as bits (token `t` is bit `t % 32` of word `t / 32`; ids past
    /// the last word are not allowed). End-of-generation tokens are allowed where the grammar
    /// may end.
    fn allowed(&mut self) -> Result<&[u32], String>;
    /// Takes `token` (one the last mask allowed).
    fn advance(&mut self, token: TokenId) -> Result<(), String>;
    /// How many leading `tokens` the grammar takes one after another from the current state
    /// (the state does not move).
    fn valid_prefix(&mut self, tokens: &[TokenId]) -> usize;
    /// Tokens the grammar forces next, where it leaves only one way on (guesses: a reply may
    /// spell the same text in other tokens). The state does not move.
    fn forced(&mut self) -> Vec<TokenId> {
        Vec::new()
    }
}

/// Makes each sequence's fresh [`Constraint`].
pub trait ConstraintSource: Send + Sync {
    fn start(&self) -> Box<dyn Constraint>;
}

/// A request's grammar (cheap to clone: every sequence that runs the request starts its own
/// state from it).
#[derive(Clone)]
pub struct Grammar(pub Arc<dyn ConstraintSource>);

impl fmt::Debug for Grammar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Grammar")
    }
}

/// A sequence's constraint while it runs. Interior mutability: the round's draws read the
/// running sequences while the runner's rows still borrow them.
pub(crate) struct Guide {
    state: RefCell<Box<dyn Constraint>>,
    /// The first error the grammar reported (the reply ends with it).
    failed: RefCell<Option<String>>,
    /// Scratch: a masked copy of a logits row.
    row: RefCell<Vec<f32>>,
    stop_tokens: Vec<TokenId>,
}

impl Guide {
    pub fn new(grammar: &Grammar, stop_tokens: &[TokenId]) -> Guide {
        Guide {
            state: RefCell::new(grammar.0.start()),
            failed: RefCell::new(None),
            row: RefCell::new(Vec::new()),
            stop_tokens: stop_tokens.to_vec(),
        }
    }

    /// `logits` with every token the grammar does not allow next set to -inf, passed to `f`.
    /// A grammar that fails allows only the stop tokens (the reply ends; [`Guide::failure`]
    /// says why).
    pub fn masked<R>(&self, logits: &[f32], f: impl FnOnce(&[f32]) -> R) -> R {
        let mut row = self.row.borrow_mut();
        row.clear();
        row.resize(logits.len(), f32::NEG_INFINITY);
        let mut state = self.state.borrow_mut();
        match state.allowed() {
            Ok(bits) if bits.iter().any(|&w| w != 0) => {
                for (w, &word) in bits.iter().enumerate() {
                    let mut word = word;
                    while word != 0 {
                        let t = w * 32 + word.trailing_zeros() as usize;
                        word &= word - 1;
                        if t < logits.len() {
                            row[t] = logits[t];
                        }
                    }
                }
            }
            other => {
                let why = match other {
                    Err(e) => e,
                    Ok(_) => "the grammar allows no token here".to_string(),
                };
                self.fail(why);
                for &t in &self.stop_tokens {
                    if let Some(x) = logits.get(t as usize) {
                        row[t as usize] = *x;
                    }
                }
                if self.stop_tokens.is_empty() && !row.is_empty() {
                    row[0] = 0.0;
                }
            }
        }
        drop(state);
        f(&row)
    }

    /// The grammar takes a drawn token. A stop token ends the reply: the grammar allowed it
    /// (the document may end there) and has nothing more to follow.
    pub fn advance(&self, token: TokenId) {
        if self.failure().is_some() || self.stop_tokens.contains(&token) {
            return;
        }
        if let Err(e) = self.state.borrow_mut().advance(token) {
            self.fail(e);
        }
    }

    /// How many leading guesses the grammar allows.
    pub fn valid_prefix(&self, tokens: &[TokenId]) -> usize {
        if self.failure().is_some() {
            return 0;
        }
        self.state.borrow_mut().valid_prefix(tokens)
    }

    /// Guesses from the grammar: the tokens it forces next.
    pub fn forced(&self) -> Vec<TokenId> {
        if self.failure().is_some() {
            return Vec::new();
        }
        self.state.borrow_mut().forced()
    }

    pub fn failure(&self) -> Option<String> {
        self.failed.borrow().clone()
    }

    fn fail(&self, why: String) {
        self.failed.borrow_mut().get_or_insert(why);
    }
}
