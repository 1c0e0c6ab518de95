//! Text ↔ token ids for one model.
//!
//! One [`Tokenizer`] type over three sources: a GGUF `gpt2` vocabulary (byte-level BPE through the
//! `tokenizers` crate, [`gguf`]), a GGUF `llama` vocabulary (SentencePiece BPE by score, [`spm`]),
//! and a Hugging Face `tokenizer.json` ([`hf`]). Special tokens are split out first
//! ([`special`]); every token also carries the raw bytes it stands for, which is all that
//! decoding and streaming need.

mod gguf;
mod hf;
mod pretok;
mod special;
mod spm;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use tf_core::TokenId;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;

use crate::error::{Result, TextError};
use special::{Piece, SpecialMatcher};
use spm::SpmModel;

/// What a vocabulary entry is, with GGUF's numbering (`tokenizer.ggml.token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// An ordinary piece of text.
    Normal,
    /// The unknown token (`<unk>`).
    Unknown,
    /// A control token (`<|im_start|>`, `<|endoftext|>`): parsed from text only on request,
    /// dropped by `skip_special` decoding.
    Control,
    /// A user-defined token (`<tool_call>`, `<think>`): always parsed from text and always
    /// decoded as its text.
    UserDefined,
    /// A placeholder never produced by tokenization (`[PAD151665]`); decodes to nothing.
    Unused,
    /// A byte-fallback token `<0xNN>` standing for one raw byte.
    Byte,
}

impl TokenKind {
    /// GGUF token type number → kind (0, "undefined", and unknown numbers count as normal).
    pub fn from_gguf_type(t: i32) -> TokenKind {
        match t {
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => TokenKind::Normal,
        }
    }

    /// Matched as a whole string and decoded as its own text.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown
        )
    }

    /// Parsed from text only with `parse_special`; dropped by `skip_special`.
    pub fn is_control(self) -> bool {
        matches!(self, TokenKind::Control | TokenKind::Unknown)
    }
}

/// Texts of tokens that end a turn in the chat formats we know; those present in a vocabulary as
/// special tokens join the end-of-generation set (as llama.cpp does).
const END_OF_GENERATION_TEXTS: &[&str] = &[
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<|end|>",
    "<EOT>",
    "<|end▁of▁sentence|>",
    // The harmony format (gpt-oss): a reply ends with its final answer or a tool call.
    "<|return|>",
    "<|call|>",
];

/// Whether `<|end|>` ends only a message, not the reply: in the harmony format (a vocabulary
/// with `<|return|>` and `<|call|>`) the analysis message ends with `<|end|>` and the final
/// answer follows (llama.cpp drops `<|end|>` from its end-of-generation set on the same rule).
fn harmony_vocab(special: impl Fn(&str) -> bool) -> bool {
    special("<|return|>") && special("<|call|>")
}

/// How raw-text segments become ids.
enum Engine {
    /// GGUF `gpt2`: byte-level BPE.
    Bpe(Box<BpeEngine>),
    /// GGUF `llama`: SentencePiece BPE by score.
    Spm(Box<SpmModel>),
    /// A Hugging Face tokenizer.json (its added tokens included).
    Hf(Box<tokenizers::Tokenizer>),
}

struct BpeEngine {
    pre_tokenizer: PreTokenizerWrapper,
    model: BPE,
}

/// Everything a source-specific loader hands to [`Tokenizer::assemble`].
struct Parts {
    source: PathBuf,
    tokens: Vec<String>,
    kinds: Vec<TokenKind>,
    bytes: Vec<Box<[u8]>>,
    engine: Engine,
    bos_id: Option<TokenId>,
    eos_id: Option<TokenId>,
    /// End-of-turn ids named by the source besides eos (GGUF eot/eom ids).
    extra_eog_ids: Vec<TokenId>,
    add_bos: bool,
    chat_template: Option<String>,
}

/// A model's tokenizer: encoding, decoding, special tokens and the chat template text.
pub struct Tokenizer {
    source: PathBuf,
    tokens: Vec<String>,
    kinds: Vec<TokenKind>,
    ids: HashMap<String, TokenId>,
    bytes: Vec<Box<[u8]>>,
    /// The longest token's bytes.
    max_token_bytes: usize,
    specials: SpecialMatcher,
    engine: Engine,
    bos_id: Option<TokenId>,
    eos_id: Option<TokenId>,
    eog_ids: Vec<TokenId>,
    add_bos: bool,
    chat_template: Option<String>,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engine = match self.engine {
            Engine::Bpe(_) => "gguf-bpe",
            Engine::Spm(_) => "gguf-spm",
            Engine::Hf(_) => "tokenizer.json",
        };
        f.debug_struct("Tokenizer")
            .field("source", &self.source)
            .field("engine", &engine)
            .field("vocab_size", &self.tokens.len())
            .field("bos_id", &self.bos_id)
            .field("eos_id", &self.eos_id)
            .field("eog_ids", &self.eog_ids)
            .finish()
    }
}

impl Tokenizer {
    fn assemble(parts: Parts) -> Result<Tokenizer> {
        let n = parts.tokens.len();
        if parts.kinds.len() != n || parts.bytes.len() != n {
            return Err(TextError::InvalidVocab {
                path: parts.source,
                what: format!(
                    "{} tokens but {} token types and {} byte strings",
                    n,
                    parts.kinds.len(),
                    parts.bytes.len()
                ),
            });
        }
        let mut ids = HashMap::with_capacity(n);
        for (id, text) in parts.tokens.iter().enumerate() {
            // The last id of a duplicated text wins, as in llama.cpp's text → id map.
            ids.insert(text.clone(), id as TokenId);
        }
        let specials = SpecialMatcher::new(
            parts
                .tokens
                .iter()
                .zip(&parts.kinds)
                .enumerate()
                .filter(|(_, (_, kind))| kind.is_special())
                .map(|(id, (text, kind))| (text.clone(), id as TokenId, kind.is_control())),
        );
        let in_vocab = |id: &Option<TokenId>| id.filter(|&i| (i as usize) < n);
        let bos_id = in_vocab(&parts.bos_id);
        let eos_id = in_vocab(&parts.eos_id);
        let mut eog_ids: Vec<TokenId> = eos_id.into_iter().collect();
        eog_ids.extend(parts.extra_eog_ids.iter().filter(|&&i| (i as usize) < n));
        for text in END_OF_GENERATION_TEXTS {
            if let Some(&id) = ids.get(*text) {
                if parts.kinds[id as usize].is_special() {
                    eog_ids.push(id);
                }
            }
        }
        let special = |t: &str| {
            ids.get(t)
                .is_some_and(|&i| parts.kinds[i as usize].is_special())
        };
        if harmony_vocab(special) {
            if let Some(&end) = ids.get("<|end|>") {
                eog_ids.retain(|&i| i != end);
            }
        }
        eog_ids.sort_unstable();
        eog_ids.dedup();
        let max_token_bytes = parts
            .bytes
            .iter()
            .map(|b| b.len())
            .max()
            .unwrap_or(1)
            .max(1);
        Ok(Tokenizer {
            source: parts.source,
            tokens: parts.tokens,
            kinds: parts.kinds,
            ids,
            bytes: parts.bytes,
            max_token_bytes,
            specials,
            engine: parts.engine,
            bos_id,
            eos_id,
            eog_ids,
            add_bos: parts.add_bos,
            chat_template: parts.chat_template,
        })
    }

    /// Token ids of `text`. With `parse_special`, the text of a control token (`<|im_start|>`)
    /// becomes that token; without, it is tokenized as ordinary text. User-defined tokens
    /// (`<tool_call>`) are always recognized. No BOS is added: see [`Tokenizer::add_bos`].
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<TokenId>> {
        if let (Engine::Hf(tk), true) = (&self.engine, parse_special) {
            // Hugging Face's own added-token handling (lstrip/rstrip, normalized) is the
            // reference for its files.
            let encoding = tk
                .encode(text, false)
                .map_err(|e| TextError::Encode(e.to_string()))?;
            return Ok(encoding.get_ids().to_vec());
        }
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut after_special = true;
        for piece in self.specials.split(text, parse_special) {
            match piece {
                Piece::Special(id) => {
                    out.push(id);
                    after_special = true;
                }
                Piece::Text(segment) => {
                    self.encode_segment(segment, after_special, &mut out)?;
                    after_special = false;
                }
            }
        }
        Ok(out)
    }

    fn encode_segment(
        &self,
        text: &str,
        after_special: bool,
        out: &mut Vec<TokenId>,
    ) -> Result<()> {
        match &self.engine {
            Engine::Bpe(bpe) => pretok::run_pipeline(
                None::<&NormalizerWrapper>,
                Some(&bpe.pre_tokenizer),
                &bpe.model,
                text,
                out,
            ),
            Engine::Spm(spm) => {
                spm.encode(&self.ids, text, after_special, out);
                Ok(())
            }
            Engine::Hf(tk) => pretok::run_pipeline(
                tk.get_normalizer(),
                tk.get_pre_tokenizer(),
                tk.get_model(),
                text,
                out,
            ),
        }
    }

    /// Byte ranges of `text` that would become control tokens (`<|im_start|>`) if it were
    /// encoded with special tokens parsed.
    pub fn control_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        self.specials.control_spans(text)
    }

    /// A rendered chat prompt as ids: special tokens parsed, and BOS put in front when the model
    /// wants one and the template did not write it.
    pub fn encode_chat(&self, text: &str) -> Result<Vec<TokenId>> {
        self.encode_chat_parts(&[(text, true)])
    }

    /// [`encode_chat`](Self::encode_chat) of a prompt in parts, each with or without special
    /// tokens parsed (text a user typed that spells a control token stays text).
    pub fn encode_chat_parts(&self, parts: &[(&str, bool)]) -> Result<Vec<TokenId>> {
        let mut tokens = Vec::new();
        for (text, parse_special) in parts {
            tokens.extend(self.encode(text, *parse_special)?);
        }
        if self.add_bos() {
            if let Some(bos) = self.bos_id() {
                if tokens.first() != Some(&bos) {
                    tokens.insert(0, bos);
                }
            }
        }
        Ok(tokens)
    }

    /// The text of `ids`: each token's bytes concatenated, invalid UTF-8 replaced by U+FFFD.
    /// `skip_special` drops control tokens (user-defined ones such as `<tool_call>` stay).
    /// No leading space is stripped (SentencePiece's `▁` prefix shows as a space), exactly as
    /// [`crate::StreamDecoder`] emits it. Ids outside the vocabulary are ignored.
    pub fn decode(&self, ids: &[TokenId], skip_special: bool) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids, skip_special)).into_owned()
    }

    /// The raw bytes of `ids` (see [`Tokenizer::decode`]).
    pub fn decode_bytes(&self, ids: &[TokenId], skip_special: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.piece_bytes(id, skip_special));
        }
        out
    }

    /// The bytes a token contributes to decoded text, honouring `skip_special`.
    pub(crate) fn piece_bytes(&self, id: TokenId, skip_special: bool) -> &[u8] {
        match self.kinds.get(id as usize) {
            Some(kind) if skip_special && kind.is_control() => &[],
            Some(_) => &self.bytes[id as usize],
            None => &[],
        }
    }

    /// The raw bytes a token stands for: byte-level decoded for byte-level BPE, `▁` as a space
    /// and `<0xNN>` as its byte for SentencePiece, the text itself for special tokens, nothing
    /// for unused placeholders and for ids outside the vocabulary.
    pub fn token_bytes(&self, id: TokenId) -> &[u8] {
        self.piece_bytes(id, false)
    }

    /// Whether a BOS token should be put in front of a prompt.
    pub fn add_bos(&self) -> bool {
        self.add_bos && self.bos_id.is_some()
    }

    pub fn bos_id(&self) -> Option<TokenId> {
        self.bos_id
    }

    pub fn eos_id(&self) -> Option<TokenId> {
        self.eos_id
    }

    /// End-of-generation ids, ascending: eos plus the special end-of-turn tokens in the vocabulary
    /// (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, ...).
    pub fn eog_ids(&self) -> &[TokenId] {
        &self.eog_ids
    }

    pub fn is_eog(&self, id: TokenId) -> bool {
        self.eog_ids.binary_search(&id).is_ok()
    }

    /// Number of ids (largest id + 1).
    /// A lower bound on the tokens `text_bytes` bytes of text encode to, known without
    /// encoding them (no token covers more bytes than the longest): so that a text that cannot
    /// fit a context is refused before the work of tokenizing it. `None` for `tokenizer.json`
    /// vocabularies, whose normalizers may drop characters.
    pub fn min_tokens(&self, text_bytes: usize) -> Option<usize> {
        match self.engine {
            Engine::Hf(_) => None,
            Engine::Bpe(_) | Engine::Spm(_) => Some(text_bytes / self.max_token_bytes),
        }
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The id of a token given its vocabulary text (byte-level or `▁` form, as stored).
    pub fn token_to_id(&self, text: &str) -> Option<TokenId> {
        self.ids.get(text).copied()
    }

    /// The vocabulary text of a token, as stored (byte-level or `▁` form).
    pub fn id_to_token(&self, id: TokenId) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    pub fn token_kind(&self, id: TokenId) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// Control, user-defined or unknown token: matched whole and decoded as its text.
    pub fn is_special(&self, id: TokenId) -> bool {
        self.token_kind(id).is_some_and(TokenKind::is_special)
    }

    /// Control or unknown token: what `skip_special` drops.
    pub fn is_control(&self, id: TokenId) -> bool {
        self.token_kind(id).is_some_and(TokenKind::is_control)
    }

    /// The model's chat template source (GGUF `tokenizer.chat_template`, or tokenizer_config's).
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    pub fn bos_token_text(&self) -> Option<&str> {
        self.bos_id.and_then(|id| self.id_to_token(id))
    }

    pub fn eos_token_text(&self) -> Option<&str> {
        self.eos_id.and_then(|id| self.id_to_token(id))
    }

    /// The file or directory this tokenizer was read from.
    pub fn source(&self) -> &Path {
        &self.source
    }
}

/// The byte of a `<0xNN>` byte-fallback token text.
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Raw bytes of a SentencePiece-style token: `▁` is a space, `<0xNN>` byte tokens their byte.
pub(crate) fn spm_token_bytes(text: &str, kind: TokenKind) -> Box<[u8]> {
    match kind {
        TokenKind::Byte => match parse_byte_token(text) {
            Some(b) => Box::new([b]),
            None => text.as_bytes().into(),
        },
        TokenKind::Unused => Box::new([]),
        k if k.is_special() => text.as_bytes().into(),
        _ => text.replace(spm::SPM_SPACE, " ").into_bytes().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens_parse() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0x1>"), None);
        assert_eq!(parse_byte_token("0x41"), None);
    }

    #[test]
    fn spm_bytes_by_kind() {
        assert_eq!(&*spm_token_bytes("▁hi", TokenKind::Normal), b" hi");
        assert_eq!(&*spm_token_bytes("<0xE2>", TokenKind::Byte), [0xE2]);
        assert_eq!(&*spm_token_bytes("<s>", TokenKind::Control), b"<s>");
        assert!(spm_token_bytes("<pad>", TokenKind::Unused).is_empty());
    }

    #[test]
    fn tokenizer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
    }
}
