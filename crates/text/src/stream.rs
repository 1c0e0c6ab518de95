//! Incremental detokenization: token ids in, complete UTF-8 text out.
//!
//! A token may end in the middle of a character (byte-level BPE and `<0xNN>` byte tokens split
//! multi-byte characters). The decoder keeps an incomplete tail until the next token completes
//! it; bytes that can never become valid UTF-8 are replaced by U+FFFD at once, exactly where
//! [`String::from_utf8_lossy`] would put them, so the concatenated output equals
//! [`Tokenizer::decode`] of the whole sequence.

use tf_core::TokenId;

use crate::tokenizer::Tokenizer;

/// Per-stream detokenizer state. The tokenizer is passed to each call so that one shared
/// tokenizer serves many streams.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    skip_special: bool,
}

impl StreamDecoder {
    /// `skip_special`: drop control tokens, as [`Tokenizer::decode`] does with the same flag.
    pub fn new(skip_special: bool) -> Self {
        StreamDecoder {
            pending: Vec::new(),
            skip_special,
        }
    }

    /// Adds one token; returns the text that is now complete (often empty for a partial
    /// character, sometimes more than this token's text).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: TokenId) -> String {
        self.pending
            .extend_from_slice(tokenizer.piece_bytes(id, self.skip_special));
        self.take_complete()
    }

    /// Adds several tokens; returns the text completed by them.
    pub fn push_all(&mut self, tokenizer: &Tokenizer, ids: &[TokenId]) -> String {
        for &id in ids {
            self.pending
                .extend_from_slice(tokenizer.piece_bytes(id, self.skip_special));
        }
        self.take_complete()
    }

    /// Ends the stream: an incomplete tail is flushed as U+FFFD.
    pub fn finish(&mut self) -> String {
        let tail = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        tail
    }

    /// Bytes held back waiting for the rest of a character.
    pub fn pending_bytes(&self) -> &[u8] {
        &self.pending
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut consumed = 0;
        loop {
            let rest = &self.pending[consumed..];
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.push_str(valid);
                    consumed = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid_len = e.valid_up_to();
                    // `valid_up_to` bytes were just validated.
                    out.push_str(std::str::from_utf8(&rest[..valid_len]).unwrap_or_default());
                    match e.error_len() {
                        // Never valid: replace now, as from_utf8_lossy does.
                        Some(bad_len) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            consumed += valid_len + bad_len;
                        }
                        // An incomplete character at the end: wait for more bytes.
                        None => {
                            consumed += valid_len;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..consumed);
        out
    }
}
