//! Building a [`Tokenizer`] from a Hugging Face model directory: `tokenizer.json`, plus
//! `tokenizer_config.json` (bos/eos, `add_bos_token`, `chat_template`) and `chat_template.jinja`
//! when present.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tf_core::TokenId;

use super::pretok::ByteLevelAlphabet;
use super::{parse_byte_token, spm_token_bytes, Engine, Parts, TokenKind, Tokenizer};
use crate::error::{Result, TextError};

fn hf_error(path: &Path, what: impl std::fmt::Display) -> TextError {
    TextError::HfFile {
        path: path.to_path_buf(),
        what: what.to_string(),
    }
}

fn read_json(path: &Path) -> Result<(String, Value)> {
    let text = fs::read_to_string(path).map_err(|e| hf_error(path, e))?;
    let value = serde_json::from_str(&text).map_err(|e| hf_error(path, e))?;
    Ok((text, value))
}

/// Whether a tokenizer.json component (or a `Sequence` of them) has a part of type `name`.
fn has_component(value: &Value, name: &str) -> bool {
    match value {
        Value::Object(map) => {
            map.get("type").and_then(Value::as_str) == Some(name)
                || map.values().any(|v| has_component(v, name))
        }
        Value::Array(items) => items.iter().any(|v| has_component(v, name)),
        _ => false,
    }
}

/// A special-token entry of tokenizer_config.json: a string or `{"content": ...}`.
fn config_token(config: &Value, key: &str) -> Option<String> {
    match config.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(map) => map.get("content")?.as_str().map(String::from),
        _ => None,
    }
}

/// `chat_template` of tokenizer_config.json: a string, or a list of `{name, template}` of which
/// the one named "default" (else the first) is taken.
fn config_chat_template(config: &Value) -> Option<String> {
    match config.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => {
            let template_of = |v: &Value| v.get("template")?.as_str().map(String::from);
            items
                .iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(template_of)
                .or_else(|| items.first().and_then(template_of))
        }
        _ => None,
    }
}

impl Tokenizer {
    /// Reads a Hugging Face tokenizer from a model directory.
    pub fn from_hf_dir(dir: impl AsRef<Path>) -> Result<Tokenizer> {
        let dir = dir.as_ref();
        let tokenizer_path = dir.join("tokenizer.json");
        let (tokenizer_text, tokenizer_json) = read_json(&tokenizer_path)?;
        let hf: tokenizers::Tokenizer = tokenizer_text
            .parse()
            .map_err(|e| hf_error(&tokenizer_path, e))?;
        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.exists() {
            read_json(&config_path)?.1
        } else {
            Value::Null
        };

        let vocab = hf.get_vocab(true);
        let n = vocab.values().max().map_or(0, |&m| m as usize + 1);
        // Ids the files never name stay empty placeholders.
        let mut tokens = vec![String::new(); n];
        let mut kinds = vec![TokenKind::Unused; n];
        for (text, &id) in &vocab {
            tokens[id as usize] = text.clone();
            kinds[id as usize] = TokenKind::Normal;
        }
        for (id, added) in hf.get_added_tokens_decoder() {
            let Some(slot) = tokens.get_mut(id as usize) else {
                continue;
            };
            slot.clone_from(&added.content);
            kinds[id as usize] = if added.special {
                TokenKind::Control
            } else {
                TokenKind::UserDefined
            };
        }

        let byte_level = has_component(&tokenizer_json["decoder"], "ByteLevel")
            || has_component(&tokenizer_json["pre_tokenizer"], "ByteLevel");
        let byte_fallback = tokenizer_json["model"]["byte_fallback"].as_bool() == Some(true);
        if !byte_level && byte_fallback {
            for (text, kind) in tokens.iter().zip(kinds.iter_mut()) {
                if *kind == TokenKind::Normal && parse_byte_token(text).is_some() {
                    *kind = TokenKind::Byte;
                }
            }
        }
        let alphabet = ByteLevelAlphabet::new();
        let bytes = tokens
            .iter()
            .zip(&kinds)
            .map(|(text, &kind)| -> Box<[u8]> {
                if byte_level && kind == TokenKind::Normal {
                    alphabet.decode(text).into()
                } else {
                    spm_token_bytes(text, kind)
                }
            })
            .collect();

        let id_of = |text: Option<String>| -> Option<TokenId> { vocab.get(&text?).copied() };
        let bos_text = config_token(&config, "bos_token");
        let bos_id = id_of(bos_text.clone());
        let eos_id = id_of(config_token(&config, "eos_token"));
        let add_bos = match config.get("add_bos_token").and_then(Value::as_bool) {
            Some(explicit) => explicit,
            // No explicit setting: BOS is added when the post-processor's single-sequence
            // template puts it in (Llama 3 style).
            None => bos_text.is_some_and(|bos| {
                tokenizer_json["post_processor"]["single"]
                    .to_string()
                    .contains(&format!("\"{bos}\""))
            }),
        };
        let template_file = dir.join("chat_template.jinja");
        let chat_template = match config_chat_template(&config) {
            Some(t) => Some(t),
            None if template_file.exists() => {
                Some(fs::read_to_string(&template_file).map_err(|e| hf_error(&template_file, e))?)
            }
            None => None,
        };

        Tokenizer::assemble(Parts {
            source: PathBuf::from(dir),
            tokens,
            kinds,
            bytes,
            engine: Engine::Hf(Box::new(hf)),
            bos_id,
            eos_id,
            extra_eog_ids: Vec::new(),
            add_bos,
            chat_template,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_components() {
        let v: Value = serde_json::json!({"type": "Sequence", "decoders": [{"type": "ByteLevel"}]});
        assert!(has_component(&v, "ByteLevel"));
        assert!(!has_component(&v, "Metaspace"));
    }

    #[test]
    fn config_entries_in_both_shapes() {
        let c: Value = serde_json::json!({
            "bos_token": {"content": "<s>", "lstrip": false},
            "eos_token": "</s>",
            "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
        });
        assert_eq!(config_token(&c, "bos_token").as_deref(), Some("<s>"));
        assert_eq!(config_token(&c, "eos_token").as_deref(), Some("</s>"));
        assert_eq!(config_chat_template(&c).as_deref(), Some("D"));
    }
}
