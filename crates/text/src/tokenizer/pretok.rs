//! Pre-tokenizers for GGUF byte-level BPE vocabularies (chosen by `tokenizer.ggml.pre`), the GPT-2
//! byte↔unicode alphabet, and the one function that runs a `tokenizers` pipeline over a text
//! segment.
//!
//! The regexes are llama.cpp's (`llama-vocab.cpp`, `llm_tokenizer_bpe`), written in the Oniguruma
//! syntax Hugging Face's own tokenizer.json files use. With the Python `tokenizers` package, these
//! pipelines reproduced llama.cpp's token ids on every reference prompt (see STACK.md, "Text").

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{
    Model, NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString,
    PreTokenizer, SplitDelimiterBehavior,
};

use tf_core::TokenId;

use crate::error::{Result, TextError};

/// GPT-2's word regex; also what `ByteLevel { use_regex: true }` applies.
const GPT2_REGEX: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Qwen2's regex: single digits, letters with one leading non-letter, newlines kept apart.
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3's regex: as Qwen2's but digits in groups of up to three.
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The `tokenizer.ggml.pre` values this crate understands, for error messages.
pub(crate) const SUPPORTED_PRE: &[&str] = &[
    "default",
    "gpt2",
    "gpt-2",
    "qwen2",
    "deepseek-r1-qwen",
    "llama3",
    "llama-bpe",
    "smollm",
    "starcoder",
    "refact",
];

/// A pre-tokenizer for a GGUF `gpt2` vocabulary and whether whole words found in the vocabulary
/// skip the merges (llama.cpp's `ignore_merges`, set for Llama 3 only).
pub(crate) struct GgufPreTokenizer {
    pub pre_tokenizer: PreTokenizerWrapper,
    pub ignore_merges: bool,
}

/// The pre-tokenizer named by `tokenizer.ggml.pre` (`None`: llama.cpp's "default"), or `None`
/// when the name is unknown.
pub(crate) fn gguf_pre_tokenizer(pre: Option<&str>) -> Option<GgufPreTokenizer> {
    let split = |regex: &str| -> PreTokenizerWrapper {
        // The regexes are constants that compile (checked by the unit test below).
        Split::new(
            SplitPattern::Regex(regex.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .expect("built-in pre-tokenizer regex compiles")
        .into()
    };
    let byte_level =
        |use_regex: bool| -> PreTokenizerWrapper { ByteLevel::new(false, false, use_regex).into() };
    let seq = |parts: Vec<PreTokenizerWrapper>| -> PreTokenizerWrapper {
        PreTokenizerWrapper::Sequence(Sequence::new(parts))
    };
    let (pre_tokenizer, ignore_merges) = match pre.unwrap_or("default") {
        "default" => (
            seq(vec![
                split(r"[\p{P}\$\+<=>\^~\|]+"),
                split(GPT2_REGEX),
                split(r"\p{N}+"),
                split(r"[0-9][0-9][0-9]"),
                byte_level(false),
            ]),
            false,
        ),
        "gpt2" | "gpt-2" => (byte_level(true), false),
        "qwen2" | "deepseek-r1-qwen" => (seq(vec![split(QWEN2_REGEX), byte_level(false)]), false),
        "llama3" | "llama-bpe" => (seq(vec![split(LLAMA3_REGEX), byte_level(false)]), true),
        "smollm" | "starcoder" | "refact" => {
            (seq(vec![Digits::new(true).into(), byte_level(true)]), false)
        }
        _ => return None,
    };
    Some(GgufPreTokenizer {
        pre_tokenizer,
        ignore_merges,
    })
}

/// Runs normalizer, pre-tokenizer and model over one text segment that holds no special token,
/// appending the ids.
pub(crate) fn run_pipeline<N, P, M>(
    normalizer: Option<&N>,
    pre_tokenizer: Option<&P>,
    model: &M,
    text: &str,
    out: &mut Vec<TokenId>,
) -> Result<()>
where
    N: Normalizer,
    P: PreTokenizer,
    M: Model,
{
    if text.is_empty() {
        return Ok(());
    }
    let err = |e: tokenizers::Error| TextError::Encode(e.to_string());
    let mut normalized = NormalizedString::from(text);
    if let Some(n) = normalizer {
        n.normalize(&mut normalized).map_err(err)?;
    }
    let mut pieces = PreTokenizedString::from(normalized);
    if let Some(p) = pre_tokenizer {
        p.pre_tokenize(&mut pieces).map_err(err)?;
    }
    for (piece, _, _) in pieces.get_splits(OffsetReferential::Normalized, OffsetType::None) {
        out.extend(model.tokenize(piece).map_err(err)?.iter().map(|t| t.id));
    }
    Ok(())
}

/// GPT-2's byte → printable character table: printable Latin-1 bytes stand for themselves, the
/// others are shifted to U+0100 and up.
fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next_shifted = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            u32::from(b)
        } else {
            next_shifted += 1;
            255 + next_shifted
        };
        table[usize::from(b)] = char::from_u32(c).expect("byte-level alphabet is valid");
    }
    table
}

/// Inverse of GPT-2's byte → character table, indexed by code point (all lie below U+0144).
pub(crate) struct ByteLevelAlphabet {
    char_to_byte: Vec<Option<u8>>,
}

impl ByteLevelAlphabet {
    pub fn new() -> Self {
        let table = byte_to_char_table();
        let mut char_to_byte = vec![None; 0x200];
        for (b, c) in table.iter().enumerate() {
            char_to_byte[*c as usize] = Some(b as u8);
        }
        ByteLevelAlphabet { char_to_byte }
    }

    /// The raw bytes a byte-level token stands for. A character outside the alphabet (not
    /// produced by a byte-level vocabulary) is kept as its own UTF-8.
    pub fn decode(&self, token: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(token.len());
        for c in token.chars() {
            match self.char_to_byte.get(c as usize).copied().flatten() {
                Some(b) => out.push(b),
                None => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(pre: &str, text: &str) -> Vec<String> {
        let p = gguf_pre_tokenizer(Some(pre)).unwrap().pre_tokenizer;
        let mut s = PreTokenizedString::from(text);
        p.pre_tokenize(&mut s).unwrap();
        s.get_splits(OffsetReferential::Normalized, OffsetType::None)
            .into_iter()
            .map(|(t, _, _)| String::from_utf8(ByteLevelAlphabet::new().decode(t)).unwrap())
            .collect()
    }

    #[test]
    fn every_supported_name_builds() {
        for name in SUPPORTED_PRE {
            assert!(gguf_pre_tokenizer(Some(name)).is_some(), "{name}");
        }
        assert!(gguf_pre_tokenizer(None).is_some());
        assert!(gguf_pre_tokenizer(Some("no-such-pre")).is_none());
    }

    #[test]
    fn qwen2_splits_digits_and_newlines() {
        assert_eq!(
            pieces("qwen2", "Hello world 123\n\nok"),
            ["Hello", " world", " ", "1", "2", "3", "\n\n", "ok"]
        );
    }

    #[test]
    fn llama3_groups_three_digits() {
        assert_eq!(pieces("llama3", "12345"), ["123", "45"]);
    }

    #[test]
    fn smollm_splits_digits_then_gpt2() {
        assert_eq!(pieces("smollm", "ab 42 cd"), ["ab", " ", "4", "2", " cd"]);
    }

    #[test]
    fn alphabet_round_trips_every_byte() {
        let table = byte_to_char_table();
        let alphabet = ByteLevelAlphabet::new();
        for b in 0..=255u8 {
            assert_eq!(alphabet.decode(&table[b as usize].to_string()), [b]);
        }
        assert_eq!(table[b' ' as usize], 'Ġ');
        assert_eq!(table[b'\n' as usize], 'Ċ');
    }
}
