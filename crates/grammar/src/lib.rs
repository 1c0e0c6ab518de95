//! Structured output: a request's JSON schema, regular expression or Lark grammar compiled by
//! `llguidance` against the model's vocabulary, and handed to the engine as a
//! [`tf_engine::Grammar`] (a token mask after each path of tokens, `tf_engine::constraint`).
//!
//! [`Vocabulary`] is built once per model (a token trie of every token's bytes; control tokens
//! are marked special so that text never spells them); [`Vocabulary::compile`] turns a [`Spec`]
//! into a grammar or a [`GrammarError`] that says what is wrong with it (the API's 400).

mod gbnf;
mod matcher;
mod vocab;

pub use gbnf::{looks_like_gbnf, to_lark as gbnf_to_lark};
pub use vocab::Vocabulary;

use serde_json::Value;

/// What a reply must look like.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// A JSON document valid under a JSON schema. `strict`: keywords the grammar cannot
    /// enforce are an error (else they are ignored).
    JsonSchema { schema: Value, strict: bool },
    /// Any JSON object.
    JsonObject,
    /// A match of a regular expression (Rust `regex` syntax), whole.
    Regex(String),
    /// A grammar in llguidance's Lark dialect (`start:` the top rule; `%json {...}` embeds a
    /// schema).
    Lark(String),
    /// A grammar in llama.cpp's GBNF (`root ::= ...`), read into Lark.
    Gbnf(String),
}

#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    /// The grammar or schema is not valid or uses what the engine cannot enforce.
    #[error("{0}")]
    Invalid(String),
    /// The vocabulary could not be turned into a token trie.
    #[error("cannot build the grammar vocabulary: {0}")]
    Vocabulary(String),
}

/// Whitespace a JSON reply may put between two tokens of its syntax: a bounded run, so that a
/// reply cannot spin in blank lines until its `max_tokens`, enough for indented output.
pub const JSON_WHITESPACE: &str = r"[\x20\x0A\x0D\x09]{1,48}";

impl Spec {
    /// The llguidance grammar for this spec.
    pub(crate) fn top_level(&self) -> Result<llguidance::api::TopLevelGrammar, GrammarError> {
        use llguidance::api::TopLevelGrammar;
        Ok(match self {
            Spec::JsonSchema { schema, strict } => {
                TopLevelGrammar::from_json_schema(with_options(schema.clone(), *strict))
            }
            Spec::JsonObject => TopLevelGrammar::from_json_schema(with_options(
                serde_json::json!({"type": "object"}),
                false,
            )),
            Spec::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Spec::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            Spec::Gbnf(text) => {
                TopLevelGrammar::from_lark(gbnf::to_lark(text).map_err(GrammarError::Invalid)?)
            }
        })
    }
}

/// The schema with our compile options (`x-guidance`), unless it brings its own: bounded
/// whitespace, and in non-strict mode unsupported keywords ignored.
pub fn with_options(mut schema: Value, strict: bool) -> Value {
    if let Value::Object(map) = &mut schema {
        map.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_pattern": JSON_WHITESPACE,
                "lenient": !strict,
                "coerce_one_of": !strict,
            })
        });
    }
    schema
}
