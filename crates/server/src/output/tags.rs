//! Splitting streamed text at an open/close tag pair (`<think>`…`</think>`,
//! `<tool_call>`…`</tool_call>`), holding back a possible partial tag until the next piece
//! decides it.

#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    Outside(String),
    Inside(String),
    Opened,
    Closed,
}

#[derive(Debug)]
pub struct TagScanner {
    open: &'static str,
    close: &'static str,
    inside: bool,
    held: String,
}

impl TagScanner {
    pub fn new(open: &'static str, close: &'static str, inside: bool) -> TagScanner {
        TagScanner {
            open,
            close,
            inside,
            held: String::new(),
        }
    }

    pub fn inside(&self) -> bool {
        self.inside
    }

    fn text(&self, s: &str) -> Piece {
        if self.inside {
            Piece::Inside(s.to_string())
        } else {
            Piece::Outside(s.to_string())
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            let tag = if self.inside { self.close } else { self.open };
            if let Some(i) = self.held.find(tag) {
                if i > 0 {
                    out.push(self.text(&self.held[..i]));
                }
                self.held.drain(..i + tag.len());
                self.inside = !self.inside;
                out.push(if self.inside {
                    Piece::Opened
                } else {
                    Piece::Closed
                });
                continue;
            }
            let keep = partial_tag_len(&self.held, tag);
            let cut = self.held.len() - keep;
            if cut > 0 {
                out.push(self.text(&self.held[..cut]));
                self.held.drain(..cut);
            }
            return out;
        }
    }

    /// The held-back text, at the end of the reply.
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.held);
        if rest.is_empty() {
            Vec::new()
        } else {
            vec![self.text(&rest)]
        }
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_tag_len(text: &str, tag: &str) -> usize {
    let max = (tag.len() - 1).min(text.len());
    (1..=max)
        .rev()
        .find(|&len| {
            let start = text.len() - len;
            text.is_char_boundary(start) && tag.as_bytes()[..len] == text.as_bytes()[start..]
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(pieces: &[&str]) -> Vec<Piece> {
        let mut s = TagScanner::new("<t>", "</t>", false);
        let mut out: Vec<Piece> = pieces.iter().flat_map(|p| s.push(p)).collect();
        out.extend(s.finish());
        out
    }

    #[test]
    fn tags_split_across_pieces() {
        assert_eq!(
            scan(&["a<", "t>b", "c</", "t", ">d"]),
            vec![
                Piece::Outside("a".into()),
                Piece::Opened,
                Piece::Inside("b".into()),
                Piece::Inside("c".into()),
                Piece::Closed,
                Piece::Outside("d".into()),
            ]
        );
    }

    #[test]
    fn unfinished_tag_prefix_is_text() {
        assert_eq!(
            scan(&["a<", "x"]),
            vec![Piece::Outside("a".into()), Piece::Outside("<x".into())]
        );
        // Outside a block only the open tag is held back.
        assert_eq!(scan(&["a</t"]), vec![Piece::Outside("a</t".into())]);
    }
}
