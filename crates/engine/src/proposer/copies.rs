//! Context copies (prompt lookup): when the last few tokens occurred earlier in the prompt or the
//! reply, guess that what followed them then follows them again. Code edits, quoting, repeated
//! structure and tool outputs make this pay; it costs microseconds.

use super::{Proposer, SeqView};
use tf_core::TokenId;

pub struct Copies {
    /// Longest suffix tried first.
    pub max_ngram: usize,
    /// Shortest suffix that counts as a match.
    pub min_ngram: usize,
    /// How far back to search (tokens), bounding the cost on long contexts.
    pub window: usize,
}

impl Default for Copies {
    fn default() -> Self {
        Copies {
            max_ngram: 4,
            min_ngram: 1,
            window: 16_384,
        }
    }
}

/// Earlier occurrences of a suffix examined per lookup (bounds the cost on repetitive text).
const MAX_CANDIDATES: usize = 16;

/// Names under which copies are tracked, by the length of the matched suffix: a 1-token match
/// predicts far worse than a 4-token one, and the cost model learns each separately (a 1-token
/// match still pays where a 2-row forward costs about what a 1-row one does).
pub const COPY_SOURCES: [&str; 4] = ["copies-1", "copies-2", "copies-3", "copies-4+"];

/// The source name of a match of `len` tokens.
pub fn copy_source(len: usize) -> &'static str {
    COPY_SOURCES[len.clamp(1, 4) - 1]
}

impl Copies {
    /// The continuation after the most recent earlier occurrence of the longest matching suffix.
    pub fn lookup(&self, tokens: &[TokenId], max: usize) -> Vec<TokenId> {
        self.lookup_with_len(tokens, max).0
    }

    /// Like [`lookup`](Self::lookup), also returning the length of the matched suffix (0 when
    /// nothing matched).
    pub fn lookup_with_len(&self, tokens: &[TokenId], max: usize) -> (Vec<TokenId>, usize) {
        let n = tokens.len();
        if max == 0 || n < self.min_ngram + 1 {
            return (Vec::new(), 0);
        }
        let lo = n.saturating_sub(self.window);
        for len in (self.min_ngram..=self.max_ngram.min(n - 1)).rev() {
            let suffix = &tokens[n - len..];
            // Earlier occurrences, most recent first: the first whose continuation is as long as
            // asked wins; otherwise the longest continuation seen (a recent repeat can be only a
            // few tokens back, while the same text in the prompt goes on for hundreds).
            let mut best: Option<(usize, usize)> = None;
            let mut start = n - len;
            let mut seen = 0;
            while start > lo && seen < MAX_CANDIDATES {
                start -= 1;
                if &tokens[start..start + len] == suffix {
                    seen += 1;
                    let from = start + len;
                    let avail = (n - from).min(max);
                    if best.is_none_or(|(_, b)| avail > b) {
                        best = Some((from, avail));
                    }
                    if avail == max {
                        break;
                    }
                }
            }
            if let Some((from, avail)) = best {
                if avail > 0 {
                    return (tokens[from..from + avail].to_vec(), len);
                }
            }
        }
        (Vec::new(), 0)
    }
}

impl Copies {
    /// Up to `branches` continuations with distinct first tokens after earlier occurrences of the
    /// longest matching suffix (most recent first), each at most `max` long, and the match length.
    pub fn branches(
        &self,
        tokens: &[TokenId],
        max: usize,
        branches: usize,
    ) -> (Vec<Vec<TokenId>>, usize) {
        let n = tokens.len();
        if max == 0 || branches == 0 || n < self.min_ngram + 1 {
            return (Vec::new(), 0);
        }
        let lo = n.saturating_sub(self.window);
        for len in (self.min_ngram..=self.max_ngram.min(n - 1)).rev() {
            let suffix = &tokens[n - len..];
            let mut found: Vec<Vec<TokenId>> = Vec::new();
            let mut start = n - len;
            let mut seen = 0;
            while start > lo && seen < MAX_CANDIDATES {
                start -= 1;
                if &tokens[start..start + len] != suffix {
                    continue;
                }
                seen += 1;
                let from = start + len;
                let cont = &tokens[from..(from + max).min(n)];
                if cont.is_empty() {
                    continue;
                }
                match found.iter().position(|f| f[0] == cont[0]) {
                    Some(i) if found[i].len() < cont.len() => found[i] = cont.to_vec(),
                    Some(_) => {}
                    None if found.len() < branches => found.push(cont.to_vec()),
                    None => {}
                }
            }
            if !found.is_empty() {
                return (found, len);
            }
        }
        (Vec::new(), 0)
    }
}

impl Proposer for Copies {
    fn name(&self) -> &'static str {
        "copies"
    }
    fn propose(&mut self, seq: &SeqView, max: usize) -> Vec<TokenId> {
        self.lookup(seq.tokens, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_latest_longest_match() {
        let c = Copies::default();
        // "a b c d ... a b c" -> "d ..."
        let t = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3];
        assert_eq!(c.lookup(&t, 3), vec![4, 5, 9]);
        // The most recent occurrence wins.
        let t = [1, 2, 7, 1, 2, 8, 1, 2];
        assert_eq!(c.lookup(&t, 1), vec![8]);
        // Nothing to copy.
        assert!(c.lookup(&[1, 2, 3, 4], 4).is_empty());
        assert!(c.lookup(&[1, 2, 1, 2], 0).is_empty());
        // The continuation may run into the suffix itself (repetition).
        let t = [5, 5, 5, 5];
        assert_eq!(c.lookup(&t, 4), vec![5]);
        // Branches: distinct first tokens, most recent first.
        let t = [1, 2, 7, 7, 1, 2, 8, 8, 1, 2, 7, 9, 1, 2];
        let (b, len) = c.branches(&t, 2, 3);
        assert_eq!(len, 2);
        assert_eq!(b, vec![vec![7, 9], vec![8, 8]]);
        // A recent repeat with a short continuation loses to an older, longer one.
        let t = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 1, 2, 3];
        assert_eq!(c.lookup(&t, 4), vec![4, 5, 6, 7]);
    }
}
