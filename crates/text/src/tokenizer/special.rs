//! Splitting text at special-token texts before the model sees it.
//!
//! As in llama.cpp (`tokenizer_st_partition`) and Hugging Face's added vocabulary: user-defined
//! tokens (`<tool_call>`, `<think>`) are always matched; control tokens (`<|im_start|>`) only when
//! the caller asks to parse special tokens. At each position the longest matching token wins.

use tf_core::TokenId;

/// One piece of a split text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Text(&'a str),
    Special(TokenId),
}

struct Entry {
    text: String,
    id: TokenId,
    /// Matched only when special tokens are parsed.
    control: bool,
}

pub(crate) struct SpecialMatcher {
    /// Longest first.
    entries: Vec<Entry>,
    /// Indices into `entries` (so also longest first) by the token text's first byte.
    by_first_byte: Vec<Vec<u32>>,
}

impl SpecialMatcher {
    /// `tokens`: (text, id, is_control) of every token matched as a whole string.
    pub fn new(tokens: impl IntoIterator<Item = (String, TokenId, bool)>) -> Self {
        let mut entries: Vec<Entry> = tokens
            .into_iter()
            .filter(|(text, _, _)| !text.is_empty())
            .map(|(text, id, control)| Entry { text, id, control })
            .collect();
        // Stable order: longest first, then by id, so duplicates resolve the same way every time.
        entries.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
        let mut by_first_byte = vec![Vec::new(); 256];
        for (i, e) in entries.iter().enumerate() {
            by_first_byte[usize::from(e.text.as_bytes()[0])].push(i as u32);
        }
        SpecialMatcher {
            entries,
            by_first_byte,
        }
    }

    /// Byte ranges of `text` that parse as control tokens (where [`split`](Self::split) with
    /// `parse_special` would make one).
    pub fn control_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let bytes = text.as_bytes();
        let mut spans = Vec::new();
        let mut i = 0;
        'scan: while i < bytes.len() {
            for &e in &self.by_first_byte[usize::from(bytes[i])] {
                let e = &self.entries[e as usize];
                if bytes[i..].starts_with(e.text.as_bytes()) {
                    if e.control {
                        spans.push(i..i + e.text.len());
                    }
                    i += e.text.len();
                    continue 'scan;
                }
            }
            i += 1;
        }
        spans
    }

    /// Splits `text` into raw-text pieces (never empty) and special tokens.
    pub fn split<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Piece<'a>> {
        let bytes = text.as_bytes();
        let mut pieces = Vec::new();
        let mut text_start = 0;
        let mut i = 0;
        'scan: while i < bytes.len() {
            for &e in &self.by_first_byte[usize::from(bytes[i])] {
                let e = &self.entries[e as usize];
                if (parse_special || !e.control) && bytes[i..].starts_with(e.text.as_bytes()) {
                    // A token text is valid UTF-8, so it starts and ends on char boundaries.
                    if text_start < i {
                        pieces.push(Piece::Text(&text[text_start..i]));
                    }
                    pieces.push(Piece::Special(e.id));
                    i += e.text.len();
                    text_start = i;
                    continue 'scan;
                }
            }
            i += 1;
        }
        if text_start < bytes.len() {
            pieces.push(Piece::Text(&text[text_start..]));
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher() -> SpecialMatcher {
        SpecialMatcher::new([
            ("<|im_start|>".to_string(), 1, true),
            ("<|im_end|>".to_string(), 2, true),
            ("<tool_call>".to_string(), 3, false),
            ("<|im".to_string(), 4, true),
        ])
    }

    #[test]
    fn longest_match_wins_and_text_is_kept() {
        let p = matcher().split("<|im_start|>user\nhi<|im_end|>", true);
        assert_eq!(
            p,
            [
                Piece::Special(1),
                Piece::Text("user\nhi"),
                Piece::Special(2)
            ]
        );
        assert_eq!(
            matcher().split("a<|imx", true),
            [Piece::Text("a"), Piece::Special(4), Piece::Text("x")]
        );
    }

    #[test]
    fn control_tokens_need_parse_special() {
        let p = matcher().split("<|im_start|><tool_call>é", false);
        assert_eq!(
            p,
            [
                Piece::Text("<|im_start|>"),
                Piece::Special(3),
                Piece::Text("é")
            ]
        );
    }
}
