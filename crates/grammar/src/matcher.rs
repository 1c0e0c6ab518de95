//! A compiled grammar as the engine's `ConstraintSource`, and each sequence's matcher as its
//! `Constraint`.

use llguidance::{Matcher, TokenParser};
use tf_core::TokenId;
use tf_engine::{Constraint, ConstraintSource};
use toktrie::SimpleVob;

/// A compiled grammar: every sequence starts a matcher from a copy of it.
pub(crate) struct Compiled {
    parser: TokenParser,
}

impl Compiled {
    pub fn new(parser: TokenParser) -> Compiled {
        Compiled { parser }
    }
}

impl ConstraintSource for Compiled {
    fn start(&self) -> Box<dyn Constraint> {
        Box::new(State {
            matcher: Matcher::new(Ok(self.parser.deep_clone())),
            mask: None,
        })
    }
}

struct State {
    matcher: Matcher,
    mask: Option<SimpleVob>,
}

impl Constraint for State {
    fn allowed(&mut self) -> Result<&[u32], String> {
        // A grammar that has ended allows only the end-of-generation tokens.
        let mask = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| e.to_string())?;
        Ok(self.mask.insert(mask).as_slice())
    }

    fn advance(&mut self, token: TokenId) -> Result<(), String> {
        self.matcher.consume_token(token).map_err(|e| e.to_string())
    }

    fn valid_prefix(&mut self, tokens: &[TokenId]) -> usize {
        self.matcher.validate_tokens(tokens).unwrap_or(0)
    }

    fn forced(&mut self) -> Vec<TokenId> {
        self.matcher.compute_ff_tokens()
    }
}
