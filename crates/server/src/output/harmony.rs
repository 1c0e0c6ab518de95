//! The harmony format (gpt-oss). A reply is a run of messages, each a header and a body:
//! `<|channel|>NAME[ to=RECIPIENT][ <|constrain|>TYPE]<|message|>BODY<|end|>`, every message
//! after the first opened with `<|start|>assistant`, the last one ended by `<|return|>` (the
//! final answer) or `<|call|>` (a tool call). The `analysis` channel is reasoning, `final` the
//! answer, and a `commentary` message addressed `to=functions.NAME` a call of tool NAME whose
//! body is the JSON arguments; commentary without a recipient (a preamble to calls) is shown
//! as content. Markers split across streamed pieces are held until they are whole; text that
//! is not in the format comes out as content, so nothing the model wrote is lost.

use super::{Delta, ToolCall};

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const CONSTRAIN: &str = "<|constrain|>";
const ENDS: [&str; 3] = ["<|end|>", "<|return|>", "<|call|>"];
/// The longest marker, in bytes: a `<|` with no `|>` within this is text.
const MARKER_MAX: usize = 14;
/// A header longer than this is not one: it is written out as content.
const HEADER_MAX: usize = 512;

#[derive(Debug)]
enum Body {
    Reasoning,
    Content,
    /// A call of this tool; the body is its arguments.
    Call(String, String),
}

#[derive(Debug)]
enum State {
    /// Between messages: the header read so far (role, channel, recipient, constraint).
    Header(String),
    Body(Body),
}

#[derive(Debug)]
pub struct Harmony {
    state: State,
    /// Text that may be the start of a marker.
    held: String,
    /// Tools were offered: `to=functions.NAME` messages are calls (else they stay content).
    tools: bool,
}

/// What a header says the body is.
fn body_of(header: &str, tools: bool) -> Body {
    let channel = header
        .split(CHANNEL)
        .nth(1)
        .and_then(|c| c.split(|ch: char| ch.is_whitespace() || ch == '<').next())
        .unwrap_or("");
    let recipient = header
        .split_whitespace()
        .chain(header.split(CHANNEL).flat_map(str::split_whitespace))
        .find_map(|w| w.strip_prefix("to="))
        .map(|r| r.split("<|").next().unwrap_or(r));
    match (channel, recipient) {
        ("analysis", _) => Body::Reasoning,
        (_, Some(r)) if tools => {
            let name = r.strip_prefix("functions.").unwrap_or(r);
            Body::Call(name.to_string(), String::new())
        }
        _ => Body::Content,
    }
}

impl Harmony {
    /// A parser at the start of a reply (the prompt ended with `<|start|>assistant`).
    pub fn new(tools: bool) -> Harmony {
        Harmony {
            state: State::Header(String::new()),
            held: String::new(),
            tools,
        }
    }

    /// The deltas of the next piece of text; `next_id` names each call.
    pub fn push(&mut self, text: &str, next_id: &mut dyn FnMut() -> String) -> Vec<Delta> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            let Some(at) = self.held.find("<|") else {
                // A last `<` may begin a marker with the next piece.
                let keep = usize::from(self.held.ends_with('<'));
                let text: String = self.held.drain(..self.held.len() - keep).collect();
                self.text(&text, &mut out);
                break;
            };
            let before: String = self.held.drain(..at).collect();
            self.text(&before, &mut out);
            match self.held.find("|>") {
                Some(end) if end + 2 <= MARKER_MAX => {
                    let marker: String = self.held.drain(..end + 2).collect();
                    self.marker(&marker, &mut out, next_id);
                }
                None if self.held.len() < MARKER_MAX => break,
                _ => {
                    // `<|` that starts no marker: text.
                    let lt: String = self.held.drain(..2).collect();
                    self.text(&lt, &mut out);
                }
            }
        }
        out
    }

    /// The rest at the end of the reply: held text, an unterminated call, a header that never
    /// became one.
    pub fn finish(&mut self, next_id: &mut dyn FnMut() -> String) -> Vec<Delta> {
        let mut out = Vec::new();
        let rest = std::mem::take(&mut self.held);
        self.text(&rest, &mut out);
        match std::mem::replace(&mut self.state, State::Header(String::new())) {
            State::Header(h) if !h.is_empty() => out.push(Delta::Content(h)),
            State::Body(Body::Call(name, args)) => out.push(call(name, args, next_id)),
            _ => {}
        }
        out
    }

    fn text(&mut self, text: &str, out: &mut Vec<Delta>) {
        if text.is_empty() {
            return;
        }
        match &mut self.state {
            State::Header(h) => {
                h.push_str(text);
                if h.len() > HEADER_MAX {
                    out.push(Delta::Content(std::mem::take(h)));
                    self.state = State::Body(Body::Content);
                }
            }
            State::Body(Body::Reasoning) => out.push(Delta::Reasoning(text.to_string())),
            State::Body(Body::Content) => out.push(Delta::Content(text.to_string())),
            State::Body(Body::Call(_, args)) => args.push_str(text),
        }
    }

    fn marker(&mut self, m: &str, out: &mut Vec<Delta>, next_id: &mut dyn FnMut() -> String) {
        match &mut self.state {
            State::Header(h) => match m {
                START => h.clear(),
                CHANNEL | CONSTRAIN => h.push_str(m),
                MESSAGE => {
                    let body = body_of(h, self.tools);
                    self.state = State::Body(body);
                }
                // An empty message, or a marker the format does not put in headers.
                _ if ENDS.contains(&m) => h.clear(),
                _ => h.push_str(m),
            },
            State::Body(_) if ENDS.contains(&m) || m == START => {
                let state = std::mem::replace(&mut self.state, State::Header(String::new()));
                if let State::Body(Body::Call(name, args)) = state {
                    out.push(call(name, args, next_id));
                }
            }
            State::Body(_) => self.text(m, out),
        }
    }
}

/// A call's delta: the arguments as compact JSON where they parse, as written where not.
fn call(name: String, args: String, next_id: &mut dyn FnMut() -> String) -> Delta {
    let arguments = match serde_json::from_str::<serde_json::Value>(args.trim()) {
        Ok(v) => v.to_string(),
        Err(_) => args.trim().to_string(),
    };
    Delta::ToolCall(ToolCall {
        id: next_id(),
        name,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(tools: bool, pieces: &[&str]) -> Vec<Delta> {
        let mut h = Harmony::new(tools);
        let mut n = 0;
        let mut id = || {
            n += 1;
            format!("call_{}", n - 1)
        };
        let mut out: Vec<Delta> = pieces.iter().flat_map(|p| h.push(p, &mut id)).collect();
        out.extend(h.finish(&mut id));
        super::super::merge(out)
    }

    /// Every split of `text` into two pieces gives the deltas of the whole.
    fn any_split(tools: bool, text: &str) -> Vec<Delta> {
        let whole = parse(tools, &[text]);
        for (i, _) in text.char_indices() {
            assert_eq!(
                parse(tools, &[&text[..i], &text[i..]]),
                whole,
                "split at {i}"
            );
        }
        whole
    }

    #[test]
    fn analysis_is_reasoning_and_final_is_content() {
        let text = "<|channel|>analysis<|message|>User greets. Reply.<|end|>\
                    <|start|>assistant<|channel|>final<|message|>Hello! <3 a|b<|return|>";
        assert_eq!(
            any_split(false, text),
            vec![
                Delta::Reasoning("User greets. Reply.".into()),
                Delta::Content("Hello! <3 a|b".into())
            ]
        );
    }

    #[test]
    fn commentary_to_a_function_is_a_tool_call() {
        let text = "<|channel|>analysis<|message|>Need weather.<|end|>\
                    <|start|>assistant<|channel|>commentary to=functions.get_weather \
                    <|constrain|>json<|message|>{\"location\": \"Paris\"}<|call|>";
        assert_eq!(
            any_split(true, text),
            vec![
                Delta::Reasoning("Need weather.".into()),
                Delta::ToolCall(ToolCall {
                    id: "call_0".into(),
                    name: "get_weather".into(),
                    arguments: "{\"location\":\"Paris\"}".into()
                })
            ]
        );
        // The recipient may come in the role part, and the reply may stop at the EOG token
        // (not in the text): the call is whole at the end.
        let text = "<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.f\
                    <|channel|>commentary json<|message|>{}";
        assert_eq!(
            parse(true, &[text]),
            vec![
                Delta::Reasoning("x".into()),
                Delta::ToolCall(ToolCall {
                    id: "call_0".into(),
                    name: "f".into(),
                    arguments: "{}".into()
                })
            ]
        );
    }

    #[test]
    fn preambles_and_calls_without_tools_are_content() {
        let text = "<|channel|>commentary<|message|>Checking.<|end|>\
                    <|start|>assistant<|channel|>final<|message|>Done.";
        assert_eq!(
            parse(true, &[text]),
            vec![Delta::Content("Checking.Done.".into())]
        );
        let text = "<|channel|>commentary to=functions.f<|message|>{\"a\":1}<|call|>";
        assert_eq!(
            parse(false, &[text]),
            vec![Delta::Content("{\"a\":1}".into())]
        );
    }

    #[test]
    fn text_outside_the_format_is_kept() {
        assert_eq!(
            parse(false, &["Just text, no header."]),
            vec![Delta::Content("Just text, no header.".into())]
        );
        assert_eq!(
            parse(false, &["<|channel|>final<|message|>a <|b|> <|"]),
            vec![Delta::Content("a <|b|> <|".into())]
        );
        let long = "x".repeat(HEADER_MAX + 5);
        assert_eq!(parse(false, &[&long]), vec![Delta::Content(long.clone())]);
    }
}
