//! Context copies (prompt lookup): when the last few tokens occurred earlier in the prompt or the
//! reply, guess that what followed them then follows them again. Code edits, quoting, repeated
//! structure and tool outputs make this pay; it costs microseconds.

use super::align::{continue_with, walk_back, Alignment};
use super::{CopyLen, SourceId};
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

/// Match lengths above this all count as this (the source name and the reported length).
const MAX_MATCH: usize = 64;

/// The sources copies are tracked under, by the length of the match (the suffix and as far back
/// as the earlier text agrees): a 1-token match predicts far worse than a 4-token one, and a
/// match of a whole line or more (an edit's reply walking through the code it quotes) better
/// still; the cost model learns each separately (a 1-token match still pays where a 2-row
/// forward costs about what a 1-row one does).
pub const COPY_SOURCES: [SourceId; 6] = [
    SourceId::Copies(CopyLen::One),
    SourceId::Copies(CopyLen::Two),
    SourceId::Copies(CopyLen::Three),
    SourceId::Copies(CopyLen::FourToSeven),
    SourceId::Copies(CopyLen::EightToFifteen),
    SourceId::Copies(CopyLen::SixteenUp),
];

/// The source of a match of `len` tokens.
pub fn copy_source(len: usize) -> SourceId {
    match len {
        0..=3 => COPY_SOURCES[len.max(1) - 1],
        4..=7 => COPY_SOURCES[3],
        8..=15 => COPY_SOURCES[4],
        _ => COPY_SOURCES[5],
    }
}

impl Copies {
    /// The continuation after the earlier occurrence of the longest matching suffix that agrees
    /// with the text before it the furthest back (the most recent among equals), with the
    /// small differences the recent text made from it on the way back (an edit's renames)
    /// made again in the continuation.
    pub fn lookup(&self, tokens: &[TokenId], max: usize) -> Vec<TokenId> {
        self.lookup_with_len(tokens, max).0
    }

    /// Like [`lookup`](Self::lookup), also returning the length of the match (the suffix and
    /// the agreeing text before it, at most [`MAX_MATCH`]; 0 when nothing matched).
    pub fn lookup_with_len(&self, tokens: &[TokenId], max: usize) -> (Vec<TokenId>, usize) {
        let n = tokens.len();
        if max == 0 || n < self.min_ngram + 1 {
            return (Vec::new(), 0);
        }
        let lo = n.saturating_sub(self.window);
        for len in (self.min_ngram..=self.max_ngram.min(n - 1)).rev() {
            let suffix = &tokens[n - len..];
            // Earlier occurrences, most recent first, ranked by how far back they agree (text
            // quoted in the prompt and walked through again in the reply agrees for lines,
            // while the same few tokens elsewhere do not), then by the length of their
            // continuation (a recent repeat can be only a few tokens back, while the same text
            // in the prompt goes on for hundreds).
            let mut best: Option<(usize, usize, Alignment)> = None; // (from, avail, alignment)
            let mut start = n - len;
            let mut seen = 0;
            while start > lo && seen < MAX_CANDIDATES {
                start -= 1;
                if &tokens[start..start + len] != suffix {
                    continue;
                }
                seen += 1;
                let from = start + len;
                let avail = (n - from).min(max);
                if avail == 0 {
                    continue;
                }
                let a = walk_back(tokens, start, n - len);
                if best
                    .as_ref()
                    .is_none_or(|(_, ba, b)| (a.agree, avail) > (b.agree, *ba))
                {
                    best = Some((from, avail, a));
                }
            }
            if let Some((from, _, a)) = best {
                let cont = continue_with(tokens, from, &a.subs, max);
                return (cont, (len + a.agree).min(MAX_MATCH));
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
    fn id(&self) -> SourceId {
        SourceId::Other("copies")
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

    #[test]
    fn the_occurrence_that_agrees_furthest_back_wins() {
        let c = Copies::default();
        // Quoted text 10 11 12 13 1 2 3 4 5 and a repeat 20 1 2 3 4 6 later: a reply walking
        // through the quote (... 12 13 1 2 3 4) continues the quote, not the recent repeat.
        let t = [
            10, 11, 12, 13, 1, 2, 3, 4, 5, 30, 20, 1, 2, 3, 4, 6, 31, 11, 12, 13, 1, 2, 3, 4,
        ];
        let (cont, len) = c.lookup_with_len(&t, 2);
        assert_eq!(cont, vec![5, 30]);
        assert_eq!(len, 7);
        assert_eq!(copy_source(len).name(), "copies-4-7");
        // With nothing agreeing before the suffix, the most recent occurrence wins as before.
        let t = [1, 2, 3, 4, 5, 30, 20, 1, 2, 3, 4, 6, 31, 9, 1, 2, 3, 4];
        assert_eq!(c.lookup_with_len(&t, 1), (vec![6], 4));
        // The match is followed back at most MAX_MATCH tokens.
        let mut t: Vec<TokenId> = (100..200).collect();
        t.push(7);
        t.extend(100..200);
        let (cont, len) = c.lookup_with_len(&t, 3);
        assert_eq!(cont, vec![7, 100, 101]);
        assert_eq!(len, MAX_MATCH);
        assert_eq!(copy_source(len).name(), "copies-16+");
        assert_eq!(copy_source(1).name(), "copies-1");
        assert_eq!(copy_source(15).name(), "copies-8-15");
    }
}
