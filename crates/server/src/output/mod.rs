//! Turning the model's streamed text into an API reply: stop strings ([`stop`]), reasoning
//! (`<think>` blocks) and tool calls ([`tools`]), each split off as the text streams; or, for
//! models that answer in the harmony format (gpt-oss), its channels ([`harmony`]).

pub mod harmony;
pub mod stop;
pub mod tags;
pub mod tools;

use crate::state::ToolFormat;
use tags::{Piece, TagScanner};
pub use tools::ToolCall;

/// One piece of a reply, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delta {
    Reasoning(String),
    Content(String),
    ToolCall(ToolCall),
}

enum ToolScan {
    /// Tool calls are not parsed (no tools offered, or `tool_choice: none`).
    Off,
    /// `<tool_call>` tags; a reply that opens with a JSON object or a fenced JSON block (which
    /// small models write instead of the tags) is held to the end and parsed as calls.
    Tagged {
        scan: TagScanner,
        body: String,
        lead: Option<bool>,
        held: String,
    },
    /// Llama 3: a reply whose first non-blank character is `{` is held to the end and parsed.
    Bare { decided: Option<bool>, held: String },
}

pub struct ReplyParser {
    think: TagScanner,
    tools: ToolScan,
    /// The reply is in the harmony format: its parser takes every piece.
    harmony: Option<harmony::Harmony>,
    call_prefix: String,
    calls: usize,
}

impl ReplyParser {
    /// `in_think`: the prompt already opened a `<think>` block. `tools`: the format to parse
    /// tool calls in, `None` for none. `call_prefix`: tool call ids are `{prefix}{index}`.
    pub fn new(in_think: bool, tools: Option<ToolFormat>, call_prefix: String) -> ReplyParser {
        let tools = match tools {
            None | Some(ToolFormat::Harmony) => ToolScan::Off,
            Some(ToolFormat::Tagged) => ToolScan::Tagged {
                scan: TagScanner::new("<tool_call>", "</tool_call>", false),
                body: String::new(),
                lead: None,
                held: String::new(),
            },
            Some(ToolFormat::BareJson) => ToolScan::Bare {
                decided: None,
                held: String::new(),
            },
        };
        ReplyParser {
            think: TagScanner::new("<think>", "</think>", in_think),
            tools,
            harmony: None,
            call_prefix,
            calls: 0,
        }
    }

    /// Content with a requested shape (structured output) is never read as a call written
    /// without tags: tagged calls are still parsed, bare JSON stays content.
    pub fn no_bare_calls(&mut self) {
        match &mut self.tools {
            ToolScan::Tagged { lead, .. } if lead.is_none() => *lead = Some(false),
            ToolScan::Bare { .. } => self.tools = ToolScan::Off,
            _ => {}
        }
    }

    /// A parser of harmony replies; `tools`: tools were offered (calls are parsed).
    pub fn harmony(tools: bool, call_prefix: String) -> ReplyParser {
        ReplyParser {
            harmony: Some(harmony::Harmony::new(tools)),
            ..ReplyParser::new(false, None, call_prefix)
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<Delta> {
        if self.harmony.is_some() {
            return self.harmony_step(Some(text));
        }
        let pieces = self.think.push(text);
        self.route(pieces, false)
    }

    /// The rest, at the end of the reply: unfinished tags and unparsable calls become text.
    pub fn finish(&mut self) -> Vec<Delta> {
        if self.harmony.is_some() {
            return self.harmony_step(None);
        }
        let pieces = self.think.finish();
        self.route(pieces, true)
    }

    fn route(&mut self, pieces: Vec<Piece>, end: bool) -> Vec<Delta> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Inside(t) => out.push(Delta::Reasoning(t)),
                Piece::Outside(t) => self.content(&t, &mut out),
                Piece::Opened | Piece::Closed => {}
            }
        }
        if end {
            self.end_content(&mut out);
        }
        merge(out)
    }

    /// The harmony parser on the next piece (`None`: the end), calls numbered as the others.
    fn harmony_step(&mut self, text: Option<&str>) -> Vec<Delta> {
        let Some(h) = &mut self.harmony else {
            return Vec::new();
        };
        let (prefix, calls) = (&self.call_prefix, &mut self.calls);
        let mut id = || {
            *calls += 1;
            format!("{prefix}{}", *calls - 1)
        };
        merge(match text {
            Some(t) => h.push(t, &mut id),
            None => h.finish(&mut id),
        })
    }

    fn next_id(&mut self) -> String {
        let id = format!("{}{}", self.call_prefix, self.calls);
        self.calls += 1;
        id
    }

    fn content(&mut self, text: &str, out: &mut Vec<Delta>) {
        match &mut self.tools {
            ToolScan::Off => out.push(Delta::Content(text.to_string())),
            ToolScan::Tagged {
                scan, lead, held, ..
            } => match lead {
                Some(false) => {
                    let pieces = scan.push(text);
                    self.tagged(pieces, out);
                }
                Some(true) => held.push_str(text),
                None => {
                    held.push_str(text);
                    let t = held.trim_start();
                    let decided = if t.starts_with('{') || t.starts_with("```") {
                        Some(true)
                    } else if t.is_empty() || "```".starts_with(t) {
                        None
                    } else {
                        Some(false)
                    };
                    *lead = decided;
                    if decided == Some(false) {
                        let text = std::mem::take(held);
                        let pieces = scan.push(&text);
                        self.tagged(pieces, out);
                    }
                }
            },
            ToolScan::Bare { decided, held } => match decided {
                Some(false) => out.push(Delta::Content(text.to_string())),
                Some(true) => held.push_str(text),
                None => {
                    held.push_str(text);
                    if let Some(c) = held.trim_start().chars().next() {
                        let is_call = c == '{';
                        *decided = Some(is_call);
                        if !is_call {
                            out.push(Delta::Content(std::mem::take(held)));
                        }
                    }
                }
            },
        }
    }

    fn tagged(&mut self, pieces: Vec<Piece>, out: &mut Vec<Delta>) {
        for p in pieces {
            match p {
                Piece::Outside(t) => out.push(Delta::Content(t)),
                Piece::Inside(t) => {
                    if let ToolScan::Tagged { body, .. } = &mut self.tools {
                        body.push_str(&t);
                    }
                }
                Piece::Opened => {}
                Piece::Closed => {
                    let body = match &mut self.tools {
                        ToolScan::Tagged { body, .. } => std::mem::take(body),
                        _ => String::new(),
                    };
                    let id = self.next_id();
                    match tools::parse_call(&body, id) {
                        Some(call) => out.push(Delta::ToolCall(call)),
                        None => {
                            // A malformed call stays text, as the model wrote it.
                            self.calls -= 1;
                            out.push(Delta::Content(format!("<tool_call>{body}</tool_call>")));
                        }
                    }
                }
            }
        }
    }

    fn end_content(&mut self, out: &mut Vec<Delta>) {
        match &mut self.tools {
            ToolScan::Off => {}
            ToolScan::Tagged { held, .. } if !held.is_empty() => {
                let text = std::mem::take(held);
                let calls = tools::parse_json_calls(&text);
                if calls.is_empty() {
                    if let ToolScan::Tagged { scan, lead, .. } = &mut self.tools {
                        *lead = Some(false);
                        let pieces = scan.push(&text);
                        self.tagged(pieces, out);
                    }
                    return self.end_content(out);
                }
                for (name, arguments) in calls {
                    let id = self.next_id();
                    out.push(Delta::ToolCall(ToolCall {
                        id,
                        name,
                        arguments,
                    }));
                }
            }
            ToolScan::Tagged { scan, body, .. } => {
                let open = scan.inside();
                let rest = scan.finish();
                let body = std::mem::take(body);
                if open {
                    let mut text = body;
                    for p in rest {
                        if let Piece::Inside(t) | Piece::Outside(t) = p {
                            text.push_str(&t);
                        }
                    }
                    // The model often ends its turn without the closing tag.
                    let id = self.next_id();
                    match tools::parse_call(&text, id) {
                        Some(call) => out.push(Delta::ToolCall(call)),
                        None => {
                            self.calls -= 1;
                            out.push(Delta::Content(format!("<tool_call>{text}")));
                        }
                    }
                } else {
                    self.tagged(rest, out);
                }
            }
            ToolScan::Bare { decided, held } => {
                let text = std::mem::take(held);
                if *decided == Some(true) {
                    let id = self.next_id();
                    match tools::parse_call(&text, id) {
                        Some(call) => out.push(Delta::ToolCall(call)),
                        None => {
                            self.calls -= 1;
                            out.push(Delta::Content(text));
                        }
                    }
                } else if !text.is_empty() {
                    out.push(Delta::Content(text));
                }
            }
        }
    }
}

/// Joins neighbouring pieces of the same kind and drops empty ones.
fn merge(deltas: Vec<Delta>) -> Vec<Delta> {
    let mut out: Vec<Delta> = Vec::with_capacity(deltas.len());
    for d in deltas {
        match (out.last_mut(), d) {
            (_, Delta::Content(t) | Delta::Reasoning(t)) if t.is_empty() => {}
            (Some(Delta::Content(a)), Delta::Content(b)) => a.push_str(&b),
            (Some(Delta::Reasoning(a)), Delta::Reasoning(b)) => a.push_str(&b),
            (_, d) => out.push(d),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(in_think: bool, tools: Option<ToolFormat>, pieces: &[&str]) -> Vec<Delta> {
        let mut p = ReplyParser::new(in_think, tools, "call_".into());
        let mut out: Vec<Delta> = pieces.iter().flat_map(|t| p.push(t)).collect();
        out.extend(p.finish());
        merge(out)
    }

    #[test]
    fn think_blocks_become_reasoning() {
        assert_eq!(
            parse(false, None, &["<thi", "nk>plan</th", "ink>answer"]),
            vec![
                Delta::Reasoning("plan".into()),
                Delta::Content("answer".into())
            ]
        );
        assert_eq!(
            parse(true, None, &["plan</think>", "answer"]),
            vec![
                Delta::Reasoning("plan".into()),
                Delta::Content("answer".into())
            ]
        );
    }

    #[test]
    fn tagged_tool_calls_stream_out_whole() {
        let out = parse(
            false,
            Some(ToolFormat::Tagged),
            &[
                "Sure.\n<tool",
                "_call>\n{\"name\": \"f\", \"argu",
                "ments\": {\"x\": 1}}\n</tool_call>",
            ],
        );
        assert_eq!(
            out,
            vec![
                Delta::Content("Sure.\n".into()),
                Delta::ToolCall(ToolCall {
                    id: "call_0".into(),
                    name: "f".into(),
                    arguments: "{\"x\":1}".into()
                })
            ]
        );
    }

    #[test]
    fn malformed_or_unfinished_calls_stay_text() {
        assert_eq!(
            parse(
                false,
                Some(ToolFormat::Tagged),
                &["<tool_call>{oops}</tool_call>"]
            ),
            vec![Delta::Content("<tool_call>{oops}</tool_call>".into())]
        );
        assert_eq!(
            parse(false, Some(ToolFormat::Tagged), &["a<tool_call>{\"name\""]),
            vec![Delta::Content("a<tool_call>{\"name\"".into())]
        );
        // Without tools the tags are plain text.
        assert_eq!(
            parse(false, None, &["<tool_call>{\"name\": \"f\"}</tool_call>"]),
            vec![Delta::Content(
                "<tool_call>{\"name\": \"f\"}</tool_call>".into()
            )]
        );
    }

    #[test]
    fn unclosed_and_fenced_calls_parse_at_the_end() {
        let out = parse(
            false,
            Some(ToolFormat::Tagged),
            &["<tool_call>\n{\"name\": \"f\", \"arguments\": {}}"],
        );
        assert!(matches!(&out[..], [Delta::ToolCall(c)] if c.name == "f"));
        let out = parse(
            false,
            Some(ToolFormat::Tagged),
            &[
                "``",
                "`json\n{\"name\": \"g\", \"arguments\": {\"a\": 1}}\n```",
            ],
        );
        assert!(matches!(&out[..], [Delta::ToolCall(c)] if c.name == "g"));
        // Held JSON that is not a call comes out as text, tags still honoured.
        assert_eq!(
            parse(false, Some(ToolFormat::Tagged), &["{not a call}"]),
            vec![Delta::Content("{not a call}".into())]
        );
    }

    #[test]
    fn bare_json_calls_are_whole_replies() {
        let out = parse(
            false,
            Some(ToolFormat::BareJson),
            &[" {\"name\": \"f\", ", "\"parameters\": {\"a\": 2}}"],
        );
        assert_eq!(
            out,
            vec![Delta::ToolCall(ToolCall {
                id: "call_0".into(),
                name: "f".into(),
                arguments: "{\"a\":2}".into()
            })]
        );
        assert_eq!(
            parse(false, Some(ToolFormat::BareJson), &["Hi {", "x}"]),
            vec![Delta::Content("Hi {x}".into())]
        );
    }
}
