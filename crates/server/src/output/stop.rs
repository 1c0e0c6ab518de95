//! Stop strings over streamed text: text that might be the start of a stop string is held back
//! until it is known not to be one, and a matched stop string (and what follows) is never
//! returned.

/// Result of feeding text to a [`StopMatcher`].
#[derive(Debug, PartialEq, Eq)]
pub enum StopScan {
    /// Text safe to emit (possibly empty).
    Emit(String),
    /// A stop string matched: emit this text, then end the reply.
    Matched { emit: String, stop: String },
}

#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    /// Empty stop strings are ignored.
    pub fn new(stops: &[String]) -> StopMatcher {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> StopScan {
        if self.stops.is_empty() {
            return StopScan::Emit(text.to_string());
        }
        self.held.push_str(text);
        // The earliest match wins; at one position, the longest stop string.
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|i| (i, s)))
            .min_by(|a, b| a.0.cmp(&b.0).then(b.1.len().cmp(&a.1.len())));
        if let Some((i, stop)) = found {
            let emit = self.held[..i].to_string();
            let stop = stop.clone();
            self.held.clear();
            return StopScan::Matched { emit, stop };
        }
        let keep = self.partial_suffix_len();
        let cut = self.held.len() - keep;
        let emit = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopScan::Emit(emit)
    }

    /// The text still held back (the reply ended without a match).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length of the longest suffix of the held text that is a proper prefix of a stop string.
    fn partial_suffix_len(&self) -> usize {
        let held = self.held.as_bytes();
        let mut best = 0;
        for stop in &self.stops {
            let stop = stop.as_bytes();
            let max = (stop.len() - 1).min(held.len());
            for len in (best + 1..=max).rev() {
                let start = held.len() - len;
                if self.held.is_char_boundary(start) && held[start..] == stop[..len] {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopScan::Emit(t) => out.push_str(&t),
                StopScan::Matched { emit, stop } => {
                    out.push_str(&emit);
                    return (out, Some(stop));
                }
            }
        }
        out.push_str(&m.flush());
        (out, None)
    }

    #[test]
    fn stop_split_across_pieces_is_removed() {
        assert_eq!(
            run(&["END"], &["abc E", "N", "D tail"]),
            ("abc ".to_string(), Some("END".to_string()))
        );
    }

    #[test]
    fn partial_prefix_that_fails_is_released() {
        assert_eq!(
            run(&["END"], &["abc EN", "x"]),
            ("abc ENx".to_string(), None)
        );
        assert_eq!(run(&["END"], &["abc EN"]), ("abc EN".to_string(), None));
    }

    #[test]
    fn earliest_then_longest_match_wins() {
        assert_eq!(
            run(&["b", "abc"], &["xabcd"]),
            ("x".to_string(), Some("abc".to_string()))
        );
        assert_eq!(
            run(&["cd", "b"], &["abcd"]),
            ("a".to_string(), Some("b".to_string()))
        );
    }

    #[test]
    fn held_text_is_emitted_as_soon_as_it_cannot_match() {
        let stops = vec!["\n\n".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("a\n"), StopScan::Emit("a".into()));
        assert_eq!(m.push("b"), StopScan::Emit("\nb".into()));
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        assert_eq!(
            run(&["é!"], &["café", "é", "!x"]),
            ("café".to_string(), Some("é!".to_string()))
        );
        assert_eq!(run(&["é!"], &["cafée"]), ("cafée".to_string(), None));
    }

    #[test]
    fn no_stops_passes_everything() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".to_string(), None));
        assert_eq!(run(&[""], &["a", "b"]), ("ab".to_string(), None));
    }
}
