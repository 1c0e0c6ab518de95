//! GBNF (llama.cpp's grammar format) read into llguidance's Lark dialect, rule by rule: `name
//! ::= body` becomes `name: body` (`root` is `start`), quoted literals and `[...]` classes become
//! Lark strings and regexes, `.` any character; grouping, `|`, `* + ?` and `{m,n}` are the same
//! in both. A rule ends where the next `name ::=` begins, so rules may span lines.

use std::fmt::Write;

#[derive(Debug, PartialEq)]
enum Tok {
    Name(String),
    Defines,
    /// A literal's characters.
    Literal(String),
    /// A character class as written (`[^"\\]`), brackets included.
    Class(String),
    Any,
    /// `( ) | * + ?` and repetition braces, as written.
    Punct(String),
}

fn err(at: usize, what: &str) -> String {
    format!("GBNF at byte {at}: {what}")
}

/// The character an escape after `\` stands for (`chars` just past the backslash).
fn escape(
    chars: &mut std::iter::Peekable<std::str::CharIndices>,
    at: usize,
) -> Result<char, String> {
    let (_, c) = chars.next().ok_or_else(|| err(at, "a lone backslash"))?;
    let hex = |chars: &mut std::iter::Peekable<std::str::CharIndices>, n: usize| {
        let mut v = 0u32;
        for _ in 0..n {
            let d = chars
                .next()
                .and_then(|(_, c)| c.to_digit(16))
                .ok_or_else(|| err(at, "a bad hex escape"))?;
            v = v * 16 + d;
        }
        char::from_u32(v).ok_or_else(|| err(at, "an escape that is no character"))
    };
    Ok(match c {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        'x' => hex(chars, 2)?,
        'u' => hex(chars, 4)?,
        'U' => hex(chars, 8)?,
        other => other,
    })
}

fn tokens(src: &str) -> Result<Vec<(usize, Tok)>, String> {
    let mut out = Vec::new();
    let mut chars = src.char_indices().peekable();
    while let Some(&(at, c)) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '#' => while chars.next_if(|&(_, c)| c != '\n').is_some() {},
            ':' => {
                if !src[at..].starts_with("::=") {
                    return Err(err(at, "expected '::='"));
                }
                chars.nth(2);
                out.push((at, Tok::Defines));
            }
            '"' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return Err(err(at, "an unterminated literal")),
                        Some((_, '"')) => break,
                        Some((i, '\\')) => s.push(escape(&mut chars, i)?),
                        Some((_, c)) => s.push(c),
                    }
                }
                out.push((at, Tok::Literal(s)));
            }
            '[' => {
                let mut s = String::new();
                chars.next();
                s.push('[');
                loop {
                    match chars.next() {
                        None => return Err(err(at, "an unterminated character class")),
                        Some((_, ']')) => break,
                        Some((_, '\\')) => {
                            // Kept as an escape: regexes read the same ones.
                            let (_, e) = chars.next().ok_or_else(|| err(at, "a lone backslash"))?;
                            s.push('\\');
                            s.push(e);
                        }
                        Some((_, c)) => s.push(c),
                    }
                }
                s.push(']');
                out.push((at, Tok::Class(s)));
            }
            '.' => {
                chars.next();
                out.push((at, Tok::Any));
            }
            '(' | ')' | '|' | '*' | '+' | '?' => {
                chars.next();
                out.push((at, Tok::Punct(c.to_string())));
            }
            '{' => {
                let mut s = String::new();
                for (_, c) in chars.by_ref() {
                    s.push(c);
                    if c == '}' {
                        break;
                    }
                }
                if !s.ends_with('}')
                    || !s[1..s.len() - 1]
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == ',' || c == ' ')
                {
                    return Err(err(at, "a bad repetition {m,n}"));
                }
                out.push((at, Tok::Punct(s.replace(' ', ""))));
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let mut s = String::new();
                while let Some((_, c)) =
                    chars.next_if(|&(_, c)| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    s.push(c);
                }
                out.push((at, Tok::Name(s)));
            }
            other => return Err(err(at, &format!("unexpected '{other}'"))),
        }
    }
    Ok(out)
}

/// A GBNF rule name as a Lark rule name (Lark rules are lower case).
fn rule_name(name: &str) -> String {
    if name == "root" {
        return "start".into();
    }
    format!("g_{}", name.to_ascii_lowercase().replace('-', "_"))
}

/// Whether `src` reads as GBNF rather than Lark (it defines rules with `::=`).
pub fn looks_like_gbnf(src: &str) -> bool {
    src.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .any(|l| l.contains("::="))
}

/// The Lark grammar for a GBNF grammar, or what is wrong with it.
pub fn to_lark(src: &str) -> Result<String, String> {
    let toks = tokens(src)?;
    let mut lark = String::new();
    let mut i = 0;
    let mut has_root = false;
    while i < toks.len() {
        let (at, Tok::Name(name)) = &toks[i] else {
            return Err(err(toks[i].0, "expected a rule name"));
        };
        if toks.get(i + 1).map(|t| &t.1) != Some(&Tok::Defines) {
            return Err(err(*at, &format!("expected '::=' after '{name}'")));
        }
        has_root |= name == "root";
        let _ = write!(lark, "{}:", rule_name(name));
        i += 2;
        let start = i;
        while i < toks.len() {
            if matches!(toks[i].1, Tok::Name(_))
                && toks.get(i + 1).map(|t| &t.1) == Some(&Tok::Defines)
            {
                break;
            }
            // Postfix operators hold on to what they repeat.
            let postfix = matches!(&toks[i].1, Tok::Punct(p) if p != "(" && p != "|");
            if !postfix {
                lark.push(' ');
            }
            match &toks[i].1 {
                Tok::Name(n) => lark.push_str(&rule_name(n)),
                Tok::Literal(s) => lark.push_str(&serde_json::to_string(s).unwrap_or_default()),
                Tok::Class(c) => {
                    let _ = write!(lark, "/{}/", c.replace('/', "\\/"));
                }
                Tok::Any => lark.push_str("/(?s:.)/"),
                Tok::Punct(p) => lark.push_str(p),
                Tok::Defines => return Err(err(toks[i].0, "'::=' without a rule name")),
            }
            i += 1;
        }
        if i == start {
            lark.push_str(" \"\"");
        }
        lark.push('\n');
    }
    if !has_root {
        return Err("GBNF: the grammar has no 'root' rule".into());
    }
    Ok(lark)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_literals_classes_and_repeats() {
        let g = r#"
# a comment
root ::= item ("," ws item){0,3} "\n"
item ::= [a-z]+ | "\"q\"" | any-char
any-char ::=
   . # anything
ws ::= [ \t]*
"#;
        let lark = to_lark(g).unwrap();
        assert_eq!(
            lark,
            "start: g_item ( \",\" g_ws g_item){0,3} \"\\n\"\n\
             g_item: /[a-z]/+ | \"\\\"q\\\"\" | g_any_char\n\
             g_any_char: /(?s:.)/\n\
             g_ws: /[ \\t]/*\n"
        );
        assert!(looks_like_gbnf(g));
        assert!(!looks_like_gbnf("start: \"a\"\n"));
    }

    #[test]
    fn bad_grammars_say_where() {
        assert!(to_lark("root ::= \"open")
            .unwrap_err()
            .contains("unterminated"));
        assert!(to_lark("item ::= \"a\"").unwrap_err().contains("root"));
        assert!(to_lark("root := \"a\"").unwrap_err().contains("::="));
        assert!(to_lark("root ::= [a-").unwrap_err().contains("class"));
    }
}
