//! Structured output at the edge: each API's way of asking for a shape (chat's and completions'
//! `response_format`, Responses' `text.format`, Anthropic's `output_config.format`, the
//! `regex` / `grammar` / vLLM `guided_*` extensions, a required or named tool) read into a
//! [`Spec`], the grammar for a tool call in the model's own format, and compilation against the
//! model's vocabulary (once per model, on the blocking pool).

use std::sync::Arc;

use serde_json::{json, Value};
use tf_engine::Grammar;
use tf_grammar::{with_options, Spec, Vocabulary};

use crate::error::{ApiError, ApiResult};
use crate::fields::Fields;
use crate::prompt::{tool_name, ChatPrompt, Rendered, ToolChoice};
use crate::state::{Backend, ToolFormat};

/// A requested shape and the field that asked for it (errors name it).
#[derive(Clone, Debug)]
pub struct Structure {
    pub spec: Spec,
    pub param: String,
}

/// A `{"type": "json_schema" | "json_object" | "text", ...}` object (`format`, named `name` in
/// errors); `nested`: the schema sits under `json_schema` (chat) rather than beside `type`
/// (Responses, Anthropic).
fn format_object(format: &Fields, name: &str, nested: bool) -> ApiResult<Option<Structure>> {
    let kind = format.str("type")?.unwrap_or("text");
    let (spec, param) = match kind {
        "text" => return Ok(None),
        "json_object" => (Spec::JsonObject, name.to_string()),
        "json_schema" => {
            let inner;
            let holder = if nested {
                inner = format.object("json_schema")?.ok_or_else(|| {
                    ApiError::invalid(
                        &format.name("json_schema"),
                        format!("'{}' is required", format.name("json_schema")),
                    )
                })?;
                &inner
            } else {
                format
            };
            let schema = match holder.get("schema") {
                Some(Value::Object(_)) => holder.get("schema").cloned().unwrap_or_default(),
                Some(Value::Bool(true)) | None => json!({}),
                Some(_) => {
                    return Err(ApiError::invalid(
                        &holder.name("schema"),
                        format!("'{}' must be a JSON schema object", holder.name("schema")),
                    ))
                }
            };
            let strict = holder.bool("strict")?.unwrap_or(false);
            (Spec::JsonSchema { schema, strict }, holder.name("schema"))
        }
        other => {
            return Err(ApiError::invalid(
                &format.name("type"),
                format!(
                    "unknown {} type '{other}' (text, json_object or json_schema)",
                    format.name("type")
                ),
            ))
        }
    };
    Ok(Some(Structure { spec, param }))
}

/// Chat's and completions' shape: `response_format`, or one extension field (`regex`,
/// `grammar` in Lark or GBNF, or vLLM's `guided_json`, `guided_regex`, `guided_grammar`,
/// `guided_choice`). Two at once is an error.
pub fn openai(f: &Fields) -> ApiResult<Option<Structure>> {
    let mut found: Vec<Structure> = Vec::new();
    if let Some(format) = f.object("response_format")? {
        found.extend(format_object(&format, "response_format", true)?);
    }
    for key in ["regex", "guided_regex"] {
        if let Some(rx) = f.str(key)? {
            found.push(Structure {
                spec: Spec::Regex(rx.to_string()),
                param: key.into(),
            });
        }
    }
    // Lark, or llama.cpp's GBNF (rules defined with `::=`).
    for key in ["grammar", "guided_grammar"] {
        if let Some(g) = f.str(key)? {
            let spec = match tf_grammar::looks_like_gbnf(g) {
                true => Spec::Gbnf(g.to_string()),
                false => Spec::Lark(g.to_string()),
            };
            found.push(Structure {
                spec,
                param: key.into(),
            });
        }
    }
    if let Some(v) = f.get("guided_json") {
        let schema = match v {
            Value::String(s) => serde_json::from_str(s).map_err(|e| {
                ApiError::invalid("guided_json", format!("'guided_json' is not JSON: {e}"))
            })?,
            other => other.clone(),
        };
        if !schema.is_object() {
            return Err(ApiError::invalid(
                "guided_json",
                "'guided_json' must be a JSON schema object",
            ));
        }
        found.push(Structure {
            spec: Spec::JsonSchema {
                schema,
                strict: false,
            },
            param: "guided_json".into(),
        });
    }
    if let Some(choices) = f.array("guided_choice")? {
        let mut alts = Vec::new();
        for (i, c) in choices.iter().enumerate() {
            let s = c.as_str().ok_or_else(|| {
                ApiError::invalid(
                    &format!("guided_choice[{i}]"),
                    "each choice must be a string",
                )
            })?;
            alts.push(lark_literal(s));
        }
        if alts.is_empty() {
            return Err(ApiError::invalid(
                "guided_choice",
                "'guided_choice' must not be empty",
            ));
        }
        found.push(Structure {
            spec: Spec::Lark(format!("start: {}\n", alts.join(" | "))),
            param: "guided_choice".into(),
        });
    }
    one_of(found)
}

/// Responses' `text.format`.
pub fn responses(f: &Fields) -> ApiResult<Option<Structure>> {
    match f.object("text")? {
        Some(text) => match text.object("format")? {
            Some(format) => format_object(&format, "text.format", false),
            None => Ok(None),
        },
        None => Ok(None),
    }
}

/// Anthropic's `output_config.format` (and the earlier beta's `output_format`).
pub fn anthropic(f: &Fields) -> ApiResult<Option<Structure>> {
    let mut found = Vec::new();
    if let Some(config) = f.object("output_config")? {
        if let Some(format) = config.object("format")? {
            found.extend(format_object(&format, "output_config.format", false)?);
        }
    }
    if let Some(format) = f.object("output_format")? {
        found.extend(format_object(&format, "output_format", false)?);
    }
    one_of(found)
}

fn one_of(mut found: Vec<Structure>) -> ApiResult<Option<Structure>> {
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|s| s.param.as_str()).collect();
        return Err(ApiError::invalid(
            &found[1].param,
            format!("give one output constraint, got {}", names.join(" and ")),
        ));
    }
    Ok(found.pop())
}

/// A Lark string literal for `s`.
fn lark_literal(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// `%json {schema}`: a schema embedded in a Lark grammar, with our JSON options.
fn lark_json(schema: &Value, strict: bool) -> String {
    format!("%json {}", with_options(schema.clone(), strict))
}

/// The Lark body of a reply's content under `structure` (for alternation with tool calls).
fn content_rule(structure: &Structure) -> Option<String> {
    match &structure.spec {
        Spec::JsonSchema { schema, strict } => Some(lark_json(schema, *strict)),
        Spec::JsonObject => Some(lark_json(&json!({"type": "object"}), false)),
        _ => None,
    }
}

/// What the reply continuing `rendered` must look like: the tool calls a required or named tool
/// choice asks for (after the prompt's prefill), else the requested content shape or a tool
/// call, else the requested shape alone. `None`: unconstrained.
pub fn reply_spec(
    backend: &Backend,
    chat: &ChatPrompt,
    rendered: &Rendered,
    structure: Option<&Structure>,
) -> ApiResult<Option<Structure>> {
    let format = rendered.tools;
    let choice = chat.tool_choice.as_ref();
    let must_call = matches!(choice, Some(ToolChoice::Required | ToolChoice::Named(_)));
    if !must_call && structure.is_none() {
        return Ok(None);
    }
    if rendered.harmony || (format.is_none() && backend.tool_format == ToolFormat::Harmony) {
        if must_call && structure.is_none() {
            // The prompt's own instructions steer a harmony model to the call.
            return Ok(None);
        }
        return Err(ApiError::invalid(
            &structure.map_or("tool_choice".to_string(), |s| s.param.clone()),
            "structured output is not supported for this model's reply format (harmony channels)",
        ));
    }
    let tools: Vec<&Value> = match choice {
        Some(ToolChoice::Named(n)) => chat
            .tools
            .iter()
            .filter(|t| tool_name(t) == Some(n.as_str()))
            .collect(),
        _ => chat.tools.iter().collect(),
    };
    let think = |body: String| -> String {
        if rendered.in_think {
            format!("start: thinking body\nthinking[suffix=\"</think>\"]: /(?s:.*)/\nbody: /[ \\n]*/ {body}\n")
        } else {
            format!("start: {body}\n")
        }
    };
    let mut extra = String::new();
    let body = match (format, must_call) {
        (Some(format), true) => {
            let (calls, rules) = call_rules(format, &tools, rendered, chat);
            extra = rules;
            calls
        }
        (Some(ToolFormat::BareJson), false) => {
            // A bare call and JSON content cannot be told apart: the content's shape wins.
            return Ok(structure.cloned());
        }
        (Some(format), false) => {
            let structure = structure.expect("checked above");
            let Some(content) = content_rule(structure) else {
                return Ok(Some(structure.clone()));
            };
            let (calls, rules) = call_rules(format, &tools, rendered, chat);
            extra = rules;
            format!("{content} | {calls}")
        }
        (None, _) => match structure {
            Some(s) => match content_rule(s) {
                Some(content) if rendered.in_think => content,
                _ => return Ok(Some(s.clone())),
            },
            None => return Ok(None),
        },
    };
    Ok(Some(Structure {
        spec: Spec::Lark(think(body) + &extra),
        param: structure.map_or("tool_choice".to_string(), |s| s.param.clone()),
    }))
}

/// One or more tool calls in `format`, continuing the prompt's prefill (the prefill's text is
/// not repeated): the Lark expression `calls` and the rules it needs.
///
/// A call may end the reply right after its JSON (models often end the turn there and the
/// parser takes an unclosed call), or close its tag and go on with another where parallel calls
/// are allowed. Whitespace before the arguments is the model's choice (` {"` is one token).
fn call_rules(
    format: ToolFormat,
    tools: &[&Value],
    rendered: &Rendered,
    chat: &ChatPrompt,
) -> (String, String) {
    let params = |t: &Value| {
        let mut p = t["function"]["parameters"].clone();
        if !p.is_object() {
            p = json!({"type": "object"});
        }
        let strict = t["function"]["strict"].as_bool().unwrap_or(false);
        lark_json(&p, strict)
    };
    let name = |t: &Value| tool_name(t).unwrap_or("").to_string();
    let (open, key) = match format {
        ToolFormat::Tagged => ("<tool_call>\n{\"name\": \"", "arguments"),
        _ => ("{\"name\": \"", "parameters"),
    };
    // After `{"name": "`: a tool's name, its arguments, the object's close.
    let bodies: Vec<String> = tools
        .iter()
        .map(|t| {
            let head = format!("{}\", \"{key}\":", json_inner(&name(t)));
            format!("{} {}", lark_literal(&head), params(t))
        })
        .collect();
    let mut rules = format!("tc_body: ({}) \"}}\"\n", bodies.join(" | "));
    // The prompt's prefill already opened the first call (`open`, or `open` + name + key).
    let first = if rendered.prefill.is_empty() {
        format!("{} tc_body", lark_literal(open))
    } else if rendered.prefill.ends_with(&format!("\"{key}\": ")) {
        let t = tools.first().copied().unwrap_or(&Value::Null);
        format!("{} \"}}\"", params(t))
    } else {
        "tc_body".to_string()
    };
    if format != ToolFormat::Tagged {
        return (format!("({first})"), rules);
    }
    let close = lark_literal("\n</tool_call>");
    let next = match chat.parallel_tool_calls {
        true => format!("(\"\\n\" ({} tc_body tc_more?)?)?", lark_literal(open)),
        false => "\"\\n\"?".to_string(),
    };
    rules.push_str(&format!("tc_more: {close} {next}\n"));
    (format!("({first} tc_more?)"), rules)
}

/// `s` as it sits inside a JSON string (escaped, without the quotes).
fn json_inner(s: &str) -> String {
    let q = serde_json::to_string(s).unwrap_or_default();
    q[1..q.len() - 1].to_string()
}

/// Compiles `structure` for the backend's model (the vocabulary is built on first use). Call on
/// the blocking pool: a large schema takes a while.
pub fn compile(backend: &Backend, structure: &Structure) -> ApiResult<Grammar> {
    let vocab: Arc<Vocabulary> = backend.grammar_vocabulary().map_err(|e| {
        ApiError::bad_request(format!(
            "structured output is unavailable for this model: {e}"
        ))
    })?;
    vocab.compile(&structure.spec).map_err(|e| {
        ApiError::invalid(
            &structure.param,
            format!("'{}' cannot be enforced: {e}", structure.param),
        )
    })
}
