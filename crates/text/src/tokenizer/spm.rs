//! SentencePiece BPE by score (GGUF `tokenizer.ggml.model = llama`), as llama.cpp's
//! `llm_tokenizer_spm` does it: spaces become `▁`, the text starts as one symbol per character,
//! and the adjacent pair whose concatenation is the highest-scoring vocabulary token merges first
//! (ties: leftmost). Symbols left that are not tokens fall back to `<0xNN>` byte tokens.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use tf_core::TokenId;

/// SentencePiece's visible space.
pub(crate) const SPM_SPACE: char = '\u{2581}';

/// What the SPM merge needs beyond the text → id map.
pub(crate) struct SpmModel {
    /// Score of each token id (higher merges first).
    pub scores: Vec<f32>,
    /// Id of the `<0xNN>` token for each byte, where the vocabulary has one.
    pub byte_ids: [Option<TokenId>; 256],
    /// The unknown token, used for a byte that has no `<0xNN>` token.
    pub unk_id: Option<TokenId>,
    /// Whether a raw-text segment at the start or after a special token gets a leading space.
    pub add_space_prefix: bool,
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

struct Session<'a> {
    model: &'a SpmModel,
    vocab: &'a HashMap<String, TokenId>,
    text: &'a str,
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
    /// Which two symbols formed a merged text (llama.cpp's `rev_merge`, last writer wins).
    rev_merge: HashMap<&'a str, (usize, usize)>,
}

impl SpmModel {
    /// Tokenizes one raw-text segment (no special tokens in it). `after_special` is true at the
    /// start of the text and right after a special token: there a space is prefixed when
    /// `add_space_prefix` is set.
    pub fn encode(
        &self,
        vocab: &HashMap<String, TokenId>,
        text: &str,
        after_special: bool,
        out: &mut Vec<TokenId>,
    ) {
        let mut escaped = String::with_capacity(text.len() + 3);
        if self.add_space_prefix && after_special {
            escaped.push(SPM_SPACE);
        }
        for c in text.chars() {
            escaped.push(if c == ' ' { SPM_SPACE } else { c });
        }
        if escaped.is_empty() {
            return;
        }
        let mut session = Session {
            model: self,
            vocab,
            text: &escaped,
            symbols: Vec::with_capacity(escaped.len()),
            queue: BinaryHeap::new(),
            rev_merge: HashMap::new(),
        };
        session.run(out);
    }
}

impl<'a> Session<'a> {
    fn run(&mut self, out: &mut Vec<TokenId>) {
        let mut chars = self.text.char_indices().peekable();
        while let Some((start, c)) = chars.next() {
            let index = self.symbols.len();
            self.symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: index.checked_sub(1),
                next: chars.peek().map(|_| index + 1),
            });
        }
        for i in 1..self.symbols.len() {
            self.try_add_bigram(Some(i - 1), Some(i));
        }
        while let Some(bigram) = self.queue.pop() {
            let left = self.symbols[bigram.left];
            let right = self.symbols[bigram.right];
            // Skip pairs whose symbols have changed since the pair was queued.
            if left.len == 0 || right.len == 0 || left.len + right.len != bigram.size {
                continue;
            }
            self.symbols[bigram.left].len += right.len;
            self.symbols[bigram.right].len = 0;
            self.symbols[bigram.left].next = right.next;
            if let Some(next) = right.next {
                self.symbols[next].prev = Some(bigram.left);
            }
            self.try_add_bigram(left.prev, Some(bigram.left));
            self.try_add_bigram(Some(bigram.left), right.next);
        }
        let mut cursor = (!self.symbols.is_empty()).then_some(0);
        while let Some(i) = cursor {
            self.resegment(i, out);
            cursor = self.symbols[i].next;
        }
    }

    fn symbol_text(&self, i: usize) -> &'a str {
        let s = self.symbols[i];
        &self.text[s.start..s.start + s.len]
    }

    fn try_add_bigram(&mut self, left: Option<usize>, right: Option<usize>) {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let start = self.symbols[left].start;
        let size = self.symbols[left].len + self.symbols[right].len;
        let text = &self.text[start..start + size];
        let Some(&id) = self.vocab.get(text) else {
            return;
        };
        let Some(&score) = self.model.scores.get(id as usize) else {
            return;
        };
        self.queue.push(Bigram {
            score,
            left,
            right,
            size,
        });
        self.rev_merge.insert(text, (left, right));
    }

    /// Emits symbol `i` as its token, as the two symbols it was merged from, or as bytes.
    fn resegment(&self, i: usize, out: &mut Vec<TokenId>) {
        let mut stack = vec![i];
        while let Some(i) = stack.pop() {
            let text = self.symbol_text(i);
            if let Some(&id) = self.vocab.get(text) {
                out.push(id);
            } else if let Some(&(left, right)) = self.rev_merge.get(text) {
                stack.push(right);
                stack.push(left);
            } else {
                for b in text.bytes() {
                    if let Some(id) = self.model.byte_ids[usize::from(b)].or(self.model.unk_id) {
                        out.push(id);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny hand-made vocabulary: `<unk>`, byte tokens for 0xC3/0xA9 (é) and 0x21 (!),
    /// characters, and merges whose scores decide the order.
    fn tiny() -> (SpmModel, HashMap<String, TokenId>, Vec<String>) {
        let tokens: Vec<(&str, f32)> = vec![
            ("<unk>", 0.0),
            ("<0xC3>", 0.0),
            ("<0xA9>", 0.0),
            ("<0x21>", 0.0),
            ("▁", -1.0),
            ("h", -2.0),
            ("e", -2.0),
            ("l", -2.0),
            ("o", -2.0),
            ("w", -2.0),
            ("r", -2.0),
            ("d", -2.0),
            ("ll", -3.0),
            ("he", -4.0),
            ("hell", -5.0),
            ("hello", -6.0),
            ("▁w", -7.0),
            ("or", -8.0),
            ("▁wor", -9.0),
            ("▁h", -10.0),
            ("▁hello", -11.0),
        ];
        let vocab: HashMap<String, TokenId> = tokens
            .iter()
            .enumerate()
            .map(|(i, (t, _))| (t.to_string(), i as TokenId))
            .collect();
        let mut byte_ids = [None; 256];
        byte_ids[0xC3] = Some(1);
        byte_ids[0xA9] = Some(2);
        byte_ids[0x21] = Some(3);
        let model = SpmModel {
            scores: tokens.iter().map(|(_, s)| *s).collect(),
            byte_ids,
            unk_id: Some(0),
            add_space_prefix: true,
        };
        let names = tokens.iter().map(|(t, _)| t.to_string()).collect();
        (model, vocab, names)
    }

    fn encode(text: &str, after_special: bool) -> Vec<String> {
        let (model, vocab, names) = tiny();
        let mut out = Vec::new();
        model.encode(&vocab, text, after_special, &mut out);
        out.into_iter()
            .map(|id| names[id as usize].clone())
            .collect()
    }

    #[test]
    fn merges_by_score_with_space_prefix() {
        // "▁hello": ll (-3) merges before he (-4), then hell, hello, then ▁hello (-11).
        assert_eq!(encode("hello", true), ["▁hello"]);
        // No prefix in the middle of a text: "hello" alone.
        assert_eq!(encode("hello", false), ["hello"]);
    }

    #[test]
    fn spaces_become_visible_and_merge() {
        assert_eq!(encode("hello world", true), ["▁hello", "▁wor", "l", "d"]);
    }

    #[test]
    fn unknown_characters_fall_back_to_bytes() {
        // é has byte tokens; '!' too; 'z' has none and becomes <unk>.
        assert_eq!(encode("hé!", false), ["h", "<0xC3>", "<0xA9>", "<0x21>"]);
        assert_eq!(encode("z", false), ["<unk>"]);
    }

    #[test]
    fn ties_merge_leftmost_first() {
        // "lll": both "ll" pairs score -3; the left one merges, leaving "ll" + "l".
        assert_eq!(encode("lll", false), ["ll", "l"]);
    }

    #[test]
    fn empty_text_gives_nothing_without_prefix() {
        assert!(encode("", false).is_empty());
        assert_eq!(encode("", true), ["▁"]);
    }
}
