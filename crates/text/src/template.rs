//! Chat templates: the Jinja template shipped with a model, rendered the way Hugging Face
//! transformers renders it (`apply_chat_template`), byte for byte.
//!
//! transformers uses a Jinja2 sandbox with `trim_blocks`, `lstrip_blocks` and `loopcontrols`, and
//! adds three things that are not Jinja2 built-ins: a `tojson` filter that is plain Python
//! `json.dumps` (no HTML escaping, `ensure_ascii=False`, `", "`/`": "` separators; Jinja2's own
//! `tojson` would escape `<>&'` as `\u003c`...), a `raise_exception` function and a
//! `strftime_now` function. minijinja plus `minijinja-contrib`'s Python string/dict methods
//! covers the rest (checked against Python Jinja2 by tests/templates.rs).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};

use crate::error::{Result, TextError};

const TEMPLATE_NAME: &str = "chat_template";

/// A compiled chat template and the special-token texts it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

/// Instructions one render may execute. Real templates render a long agent conversation (a
/// few hundred messages, dozens of tools) in well under a million; a template that loops
/// without end (a malicious or broken GGUF) stops here, in about a second, with an error.
pub const RENDER_FUEL: u64 = 50_000_000;

/// Template variables the caller owns: `extra_kwargs` (a request's `chat_template_kwargs`)
/// cannot replace them.
const OWNED: [&str; 5] = [
    "messages",
    "tools",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

fn template_error(e: Error) -> TextError {
    TextError::Template(e.to_string())
}

impl ChatTemplate {
    /// Compiles `source`. `bos_token` / `eos_token` become the template variables of the same
    /// names (left undefined when `None`).
    pub fn new(source: &str, bos_token: Option<&str>, eos_token: Option<&str>) -> Result<Self> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(template_error)?;
        env.set_syntax(syntax);
        env.set_fuel(Some(RENDER_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(template_error)?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.map(String::from),
            eos_token: eos_token.map(String::from),
        })
    }

    /// Renders a conversation. `messages` and `tools` are OpenAI-style JSON objects (key order is
    /// kept, as Python dicts keep it); `tools: None` is the template variable `tools = none`.
    /// `extra_kwargs` (e.g. `enable_thinking`) become further variables; the standard ones
    /// (`messages`, `tools`, `add_generation_prompt`, `bos_token`, `eos_token`) are never
    /// replaced by them. A render that runs past [`RENDER_FUEL`] instructions is an error.
    pub fn render(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
        extra_kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let mut ctx: BTreeMap<String, Value> = BTreeMap::new();
        ctx.insert("messages".into(), Value::from(Serde(messages)));
        ctx.insert(
            "tools".into(),
            tools.map_or(Value::from(()), |t| Value::from(Serde(t))),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        if let Some(bos) = &self.bos_token {
            ctx.insert("bos_token".into(), Value::from(bos.as_str()));
        }
        if let Some(eos) = &self.eos_token {
            ctx.insert("eos_token".into(), Value::from(eos.as_str()));
        }
        for (key, value) in extra_kwargs {
            if !OWNED.contains(&key.as_str()) {
                ctx.insert(key.clone(), Value::from(Serde(value)));
            }
        }
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(template_error)?;
        template.render(ctx).map_err(template_error)
    }
}

/// `raise_exception(message)`: aborts rendering with the template's own message.
fn raise_exception(message: String) -> std::result::Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current time formatted like Python's `datetime.now().strftime`.
/// The server keeps no time zone database: the time is UTC.
fn strftime_now(format: String) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    strftime(&format, now)
}

const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Proleptic Gregorian (year, month 1-12, day 1-31) of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// C `strftime` over a UTC Unix time, for the directives chat templates use (`%d %b %Y` and
/// friends, glibc's `%-d` style included). Unknown directives are copied as they are.
pub(crate) fn strftime(format: &str, unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs_of_day = unix_secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (
        secs_of_day / 3600,
        (secs_of_day / 60) % 60,
        secs_of_day % 60,
    );
    // 1970-01-01 was a Thursday (index 3 with Monday = 0).
    let weekday = (days + 3).rem_euclid(7) as usize;
    let cumulative = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let day_of_year = cumulative[month as usize - 1] + day + u32::from(month > 2 && is_leap(year));
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = chars.next();
        let no_pad = spec == Some('-');
        if no_pad {
            spec = chars.next();
        }
        let num = |out: &mut String, v: i64, width: usize| {
            if no_pad {
                let _ = write!(out, "{v}");
            } else {
                let _ = write!(out, "{v:0width$}");
            }
        };
        match spec {
            Some('Y') => {
                let _ = write!(out, "{year}");
            }
            Some('y') => num(&mut out, year.rem_euclid(100), 2),
            Some('m') => num(&mut out, i64::from(month), 2),
            Some('d') => num(&mut out, i64::from(day), 2),
            Some('e') => {
                let _ = write!(out, "{day:>2}");
            }
            Some('j') => num(&mut out, i64::from(day_of_year), 3),
            Some('H') => num(&mut out, hour, 2),
            Some('I') => num(&mut out, hour12, 2),
            Some('M') => num(&mut out, minute, 2),
            Some('S') => num(&mut out, second, 2),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('b') | Some('h') => out.push_str(&MONTHS[month as usize - 1][..3]),
            Some('B') => out.push_str(MONTHS[month as usize - 1]),
            Some('a') => out.push_str(&WEEKDAYS[weekday][..3]),
            Some('A') => out.push_str(WEEKDAYS[weekday]),
            Some('u') => num(&mut out, weekday as i64 + 1, 1),
            Some('w') => num(&mut out, (weekday as i64 + 1) % 7, 1),
            Some('F') => {
                let _ = write!(out, "{year}-{month:02}-{day:02}");
            }
            Some('T') => {
                let _ = write!(out, "{hour:02}:{minute:02}:{second:02}");
            }
            Some('Z') => out.push_str("UTC"),
            Some('z') => out.push_str("+0000"),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if no_pad {
                    out.push('-');
                }
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// How `json.dumps` lays out its output.
struct JsonStyle {
    indent: Option<String>,
    item_separator: String,
    key_separator: String,
    ensure_ascii: bool,
    sort_keys: bool,
}

/// The `tojson` filter of transformers' chat templates:
/// `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: Value, kwargs: Kwargs) -> std::result::Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_string()),
        Some(v) => {
            let n = i64::try_from(v)?;
            Some(" ".repeat(n.max(0) as usize))
        }
    };
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let (item_separator, key_separator) = match separators {
        Some(pair) if pair.len() == 2 => (pair[0].clone(), pair[1].clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair of strings",
            ))
        }
        // Python's defaults: no space before a newline when indenting.
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let style = JsonStyle {
        indent,
        item_separator,
        key_separator,
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&mut out, &value, &style, 0)?;
    Ok(Value::from(out))
}

fn newline_indent(out: &mut String, style: &JsonStyle, depth: usize) {
    if let Some(indent) = &style.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(indent);
        }
    }
}

fn write_json(
    out: &mut String,
    value: &Value,
    style: &JsonStyle,
    depth: usize,
) -> std::result::Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number if value.is_integer() => {
            let _ = write!(out, "{value}");
        }
        ValueKind::Number => out.push_str(&python_float_repr(f64::try_from(value.clone())?)),
        ValueKind::String => write_json_string(out, value.as_str().unwrap_or(""), style),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, '[', ']', &items, style, depth, |out, item, depth| {
                write_json(out, item, style, depth)
            })?;
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((json_key(&key)?, item));
            }
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(
                out,
                '{',
                '}',
                &entries,
                style,
                depth,
                |out, (k, v), depth| {
                    write_json_string(out, k, style);
                    out.push_str(&style.key_separator);
                    write_json(out, v, style, depth)
                },
            )?;
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a {kind} value is not JSON serializable"),
            ))
        }
    }
    Ok(())
}

fn write_container<T>(
    out: &mut String,
    open: char,
    close: char,
    items: &[T],
    style: &JsonStyle,
    depth: usize,
    mut write_item: impl FnMut(&mut String, &T, usize) -> std::result::Result<(), Error>,
) -> std::result::Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&style.item_separator);
        }
        newline_indent(out, style, depth + 1);
        write_item(out, item, depth + 1)?;
    }
    newline_indent(out, style, depth);
    out.push(close);
    Ok(())
}

/// A dict key as `json.dumps` writes it: strings as they are, numbers/bools/None converted.
fn json_key(key: &Value) -> std::result::Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or("").to_string(),
        ValueKind::None | ValueKind::Undefined => "null".to_string(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_string(),
        ValueKind::Number if key.is_integer() => key.to_string(),
        ValueKind::Number => python_float_repr(f64::try_from(key.clone())?),
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: keys must be str, int, float, bool or None, not {kind}"),
            ))
        }
    })
}

/// A JSON string literal as Python's `json` module writes it.
fn write_json_string(out: &mut String, s: &str, style: &JsonStyle) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (style.ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: shortest round-trip digits, scientific notation below 1e-4 and from
/// 1e16 on (`1e-05`, `1e+16`), otherwise fixed with at least one decimal (`1.0`).
fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let n = digits.len() as i32;
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = (exp + 1) as usize;
            if n <= exp + 1 {
                format!("{sign}{digits}{}.0", "0".repeat(int_len - digits.len()))
            } else {
                format!("{sign}{}.{}", &digits[..int_len], &digits[int_len..])
            }
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let rest = if n > 1 {
            format!(".{}", &digits[1..])
        } else {
            String::new()
        };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{}{rest}e{exp_sign}{:02}", &digits[..1], exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        let cases = [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-0.0, "-0.0"),
            (100.0, "100.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123.456, "123.456"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (f, want) in cases {
            assert_eq!(python_float_repr(f), want, "{f}");
        }
    }

    #[test]
    fn strftime_known_dates() {
        // 2024-07-26 13:05:09 UTC, a Friday.
        let t = 1_722_000_000 + 309;
        assert_eq!(strftime("%d %b %Y", 1_722_000_309), "26 Jul 2024");
        assert_eq!(
            strftime("%A %B %-d, %y %H:%M:%S %p %j %%", t),
            "Friday July 26, 24 13:25:09 PM 208 %"
        );
        assert_eq!(strftime("%Y-%m-%d", 0), "1970-01-01");
        assert_eq!(strftime("%a %Y-%m-%d", 951_782_400), "Tue 2000-02-29");
        assert_eq!(strftime("%q", 0), "%q");
    }

    fn render(src: &str, messages: serde_json::Value) -> Result<String> {
        let t = ChatTemplate::new(src, Some("<s>"), Some("</s>"))?;
        let messages = messages.as_array().cloned().unwrap_or_default();
        t.render(&messages, None, false, &serde_json::Map::new())
    }

    #[test]
    fn tojson_matches_json_dumps() {
        let src = "{{ messages[0] | tojson }}|{{ messages[0] | tojson(indent=2) }}|{{ messages[0] | tojson(ensure_ascii=true, sort_keys=true) }}";
        let m = serde_json::json!([{"z": "<b>&'é\u{1F600}\n", "a": [1, 2.5, null, true], "e": {}}]);
        let out = render(src, m).unwrap();
        let want = concat!(
            r#"{"z": "<b>&'é😀\n", "a": [1, 2.5, null, true], "e": {}}|"#,
            "{\n  \"z\": \"<b>&'é😀\\n\",\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"e\": {}\n}|",
            r#"{"a": [1, 2.5, null, true], "e": {}, "z": "<b>&'\u00e9\ud83d\ude00\n"}"#
        );
        assert_eq!(out, want);
    }

    #[test]
    fn raise_exception_message_reaches_the_error() {
        let err = render(
            "{{ raise_exception('no system role here') }}",
            serde_json::json!([]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("no system role here"), "{err}");
    }

    #[test]
    fn compile_errors_are_template_errors() {
        let err = ChatTemplate::new("{% if %}", None, None).unwrap_err();
        assert!(matches!(err, TextError::Template(_)), "{err}");
    }

    #[test]
    fn python_methods_and_bos_eos() {
        let out = render(
            "{{ bos_token }}{{ messages[0].content.strip().upper() }}{{ eos_token }}",
            serde_json::json!([{"role": "user", "content": "  hi "}]),
        )
        .unwrap();
        assert_eq!(out, "<s>HI</s>");
    }

    /// A template that loops (nearly) forever stops with an error instead of hanging.
    #[test]
    fn a_runaway_template_runs_out_of_fuel() {
        let src =
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
        let start = std::time::Instant::now();
        let err = render(src, serde_json::json!([])).unwrap_err().to_string();
        assert!(err.contains("fuel"), "{err}");
        // (Not a timing assertion: the loop would run for hours without fuel.)
        eprintln!("stopped after {:?}", start.elapsed());
        // An ordinary template is far from the limit.
        let ok = render(
            "{% for m in messages %}{{ m.content }}{% endfor %}",
            serde_json::json!([{"content": "a"}]),
        );
        assert_eq!(ok.unwrap(), "a");
    }

    /// `chat_template_kwargs` cannot replace the variables the server owns.
    #[test]
    fn kwargs_cannot_replace_owned_variables() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ add_generation_prompt }}{{ flavour }}",
            Some("<s>"),
            None,
        )
        .unwrap();
        let messages = [serde_json::json!({"content": "hi"})];
        let kwargs = serde_json::json!({"messages": [{"content": "forged"}], "bos_token": "<x>",
            "add_generation_prompt": true, "flavour": "!"});
        let out = t
            .render(&messages, None, false, kwargs.as_object().unwrap())
            .unwrap();
        assert_eq!(out, "<s>hiFalse!");
    }
}
