//! Building a [`Tokenizer`] from GGUF `tokenizer.*` metadata.

use tf_core::TokenId;
use tf_weights::GgufFile;
use tokenizers::models::bpe::{Vocab, BPE};

use super::pretok::{self, ByteLevelAlphabet, SUPPORTED_PRE};
use super::spm::SpmModel;
use super::{parse_byte_token, spm_token_bytes, BpeEngine, Engine, Parts, TokenKind, Tokenizer};
use crate::error::{Result, TextError};

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
const KEY_EOM: &str = "tokenizer.ggml.eom_token_id";
const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";

fn missing(gguf: &GgufFile, key: &str) -> TextError {
    TextError::MissingKey {
        path: gguf.path().to_path_buf(),
        key: key.to_string(),
    }
}

fn invalid(gguf: &GgufFile, what: String) -> TextError {
    TextError::InvalidVocab {
        path: gguf.path().to_path_buf(),
        what,
    }
}

/// `Some(read(key))` when the key is present, `None` when absent; a wrong type is an error.
fn optional<'a, T>(
    gguf: &'a GgufFile,
    key: &str,
    read: impl FnOnce(&'a GgufFile, &str) -> tf_weights::Result<T>,
) -> Result<Option<T>> {
    match gguf.get(key) {
        None => Ok(None),
        Some(_) => Ok(Some(read(gguf, key)?)),
    }
}

fn required<'a, T>(
    gguf: &'a GgufFile,
    key: &str,
    read: impl FnOnce(&'a GgufFile, &str) -> tf_weights::Result<T>,
) -> Result<T> {
    optional(gguf, key, read)?.ok_or_else(|| missing(gguf, key))
}

fn optional_id(gguf: &GgufFile, key: &str) -> Result<Option<TokenId>> {
    let id = optional(gguf, key, GgufFile::get_u64)?;
    // Ids past u32 cannot be in a vocabulary; `assemble` drops ids outside it the same way.
    Ok(id.and_then(|v| TokenId::try_from(v).ok()))
}

impl Tokenizer {
    /// Reads the tokenizer stored in a GGUF file's metadata: `tokenizer.ggml.model` `gpt2`
    /// (byte-level BPE; pre-tokenizer from `tokenizer.ggml.pre`) or `llama` (SentencePiece).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer> {
        let model = required(gguf, KEY_MODEL, GgufFile::get_str)?;
        if model != "gpt2" && model != "llama" {
            return Err(TextError::UnsupportedModel {
                path: gguf.path().to_path_buf(),
                model: model.to_string(),
            });
        }
        let tokens: Vec<String> = required(gguf, KEY_TOKENS, GgufFile::get_str_array)?
            .into_iter()
            .map(str::to_string)
            .collect();
        if tokens.is_empty() {
            return Err(invalid(gguf, format!("{KEY_TOKENS} is empty")));
        }
        let kinds: Vec<TokenKind> = match optional(gguf, KEY_TOKEN_TYPE, GgufFile::get_i32_array)? {
            Some(types) => types.into_iter().map(TokenKind::from_gguf_type).collect(),
            None => vec![TokenKind::Normal; tokens.len()],
        };
        if kinds.len() != tokens.len() {
            return Err(invalid(
                gguf,
                format!(
                    "{KEY_TOKENS} has {} entries but {KEY_TOKEN_TYPE} has {}",
                    tokens.len(),
                    kinds.len()
                ),
            ));
        }
        let mut extra_eog_ids = Vec::new();
        extra_eog_ids.extend(optional_id(gguf, KEY_EOT)?);
        extra_eog_ids.extend(optional_id(gguf, KEY_EOM)?);
        let add_bos = optional(gguf, KEY_ADD_BOS, GgufFile::get_bool)?;
        let chat_template = optional(gguf, KEY_CHAT_TEMPLATE, GgufFile::get_str)?.map(String::from);
        let (engine, bytes, default_add_bos) = if model == "gpt2" {
            byte_level_bpe(gguf, &tokens, &kinds)?
        } else {
            sentencepiece(gguf, &tokens, &kinds)?
        };
        Tokenizer::assemble(Parts {
            source: gguf.path().to_path_buf(),
            tokens,
            kinds,
            bytes,
            engine,
            bos_id: optional_id(gguf, KEY_BOS)?,
            eos_id: optional_id(gguf, KEY_EOS)?,
            extra_eog_ids,
            add_bos: add_bos.unwrap_or(default_add_bos),
            chat_template,
        })
    }
}

type Built = (Engine, Vec<Box<[u8]>>, bool);

fn byte_level_bpe(gguf: &GgufFile, tokens: &[String], kinds: &[TokenKind]) -> Result<Built> {
    let pre = optional(gguf, KEY_PRE, GgufFile::get_str)?;
    let pre_tokenizer =
        pretok::gguf_pre_tokenizer(pre).ok_or_else(|| TextError::UnsupportedPreTokenizer {
            path: gguf.path().to_path_buf(),
            pre: pre.unwrap_or_default().to_string(),
            supported: SUPPORTED_PRE.join(", "),
        })?;
    let merges = required(gguf, KEY_MERGES, GgufFile::get_str_array)?
        .into_iter()
        .enumerate()
        .map(|(i, m)| match m.split_once(' ') {
            Some((a, b)) => Ok((a.to_string(), b.to_string())),
            None => Err(invalid(
                gguf,
                format!("{KEY_MERGES}[{i}] = {m:?} is not two tokens separated by a space"),
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), id as TokenId))
        .collect();
    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre_tokenizer.ignore_merges)
        .build()
        .map_err(|e| invalid(gguf, format!("byte-level BPE: {e}")))?;
    let alphabet = ByteLevelAlphabet::new();
    let bytes = tokens
        .iter()
        .zip(kinds)
        .map(|(text, &kind)| -> Box<[u8]> {
            match kind {
                TokenKind::Normal => alphabet.decode(text).into(),
                TokenKind::Unused => Box::new([]),
                TokenKind::Byte => match parse_byte_token(text) {
                    Some(b) => Box::new([b]),
                    None => text.as_bytes().into(),
                },
                _ => text.as_bytes().into(),
            }
        })
        .collect();
    let engine = Engine::Bpe(Box::new(BpeEngine {
        pre_tokenizer: pre_tokenizer.pre_tokenizer,
        model,
    }));
    // llama.cpp adds BOS by default for Llama 3's vocabulary only among the byte-level ones.
    let default_add_bos = matches!(pre, Some("llama3" | "llama-bpe"));
    Ok((engine, bytes, default_add_bos))
}

fn sentencepiece(gguf: &GgufFile, tokens: &[String], kinds: &[TokenKind]) -> Result<Built> {
    let scores = match optional(gguf, KEY_SCORES, GgufFile::get_f32_array)? {
        Some(scores) if scores.len() != tokens.len() => {
            return Err(invalid(
                gguf,
                format!(
                    "{KEY_TOKENS} has {} entries but {KEY_SCORES} has {}",
                    tokens.len(),
                    scores.len()
                ),
            ))
        }
        Some(scores) => scores,
        None => return Err(missing(gguf, KEY_SCORES)),
    };
    let mut byte_ids = [None; 256];
    for (id, (text, kind)) in tokens.iter().zip(kinds).enumerate() {
        if *kind == TokenKind::Byte || matches!(kind, TokenKind::Normal) {
            if let Some(b) = parse_byte_token(text) {
                byte_ids[usize::from(b)] = Some(id as TokenId);
            }
        }
    }
    let unk_id = optional_id(gguf, KEY_UNK)?
        .or_else(|| {
            kinds
                .iter()
                .position(|k| *k == TokenKind::Unknown)
                .map(|i| i as TokenId)
        })
        .filter(|&id| (id as usize) < tokens.len());
    let spm = SpmModel {
        scores,
        byte_ids,
        unk_id,
        add_space_prefix: optional(gguf, KEY_ADD_SPACE_PREFIX, GgufFile::get_bool)?.unwrap_or(true),
    };
    let bytes = tokens
        .iter()
        .zip(kinds)
        .map(|(text, &kind)| spm_token_bytes(text, kind))
        .collect();
    Ok((Engine::Spm(Box::new(spm)), bytes, true))
}
