//! go-yaml v4's block emitter as `yaml.Marshal` runs it for Talos (go.yaml.in/yaml/v4
//! v4.0.0-rc.4, `internal/libyaml`: `DefaultOptions` in options.go is indent 4, no line width,
//! legacy quoting; the representer's `stringv` in representer.go picks the scalar style, the
//! emitter's `analyzeScalar`/`selectScalarStyle` in emitter.go may overrule it).
//!
//! Layout (emitter.go `increaseIndent`): a collection nested in a mapping or at the top moves to
//! the next multiple of 4 columns; the first level inside a sequence item only skips the `- `.
//! Sequences are not "compact": their `- ` sits one level deeper than the parent key. Empty
//! collections are written in flow style (`[]`, `{}`).

use super::Yaml;

const INDENT: usize = 4;

/// How the go-yaml release quotes a string that plain style would read as something else.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Quoting {
    /// v4.0.0-rc.4 (Talos 1.13.9), representer.go `stringv`: always double quotes.
    Double,
    /// v4.0.0-rc.6 (Talos 1.14.1): YAML 1.1 leftovers (`yes`, `12:30`, `<<`) in single quotes
    /// (`stringv`), values of another type in double quotes (desolver.go `desolveScalar` with
    /// `QuoteLegacy`).
    CompatSingle,
    /// A `!!str` node from a `MarshalYAML`: quoted (double) only when it would read as another
    /// type; YAML 1.1 leftovers stay plain.
    NodeStr,
}

/// The document as `yaml.Marshal` writes it (ends with a newline).
pub fn document(root: &Yaml, q: Quoting) -> String {
    let mut out = String::new();
    match root {
        Yaml::Map(m) if !m.is_empty() => mapping(&mut out, m, 0, q),
        Yaml::Seq(s) if !s.is_empty() => sequence(&mut out, s, 0, q),
        other => {
            out.push_str(&inline(other, 0, q));
            out.push('\n');
        }
    }
    out
}

/// The indent of a collection nested under a mapping key at `indent`.
fn nested(indent: usize) -> usize {
    INDENT * ((indent + INDENT) / INDENT)
}

fn mapping(out: &mut String, entries: &[(String, Yaml)], indent: usize, q: Quoting) {
    for (i, (key, value)) in entries.iter().enumerate() {
        // The first key of a mapping inside a sequence item follows the `- ` directly.
        if i > 0 || !out.ends_with("- ") {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&scalar_text(key, true, indent, q));
        out.push(':');
        value_after_key(out, value, indent, q);
    }
}

fn value_after_key(out: &mut String, value: &Yaml, indent: usize, q: Quoting) {
    match value {
        Yaml::Map(m) if !m.is_empty() => {
            out.push('\n');
            mapping(out, m, nested(indent), q);
        }
        Yaml::Seq(s) if !s.is_empty() => {
            out.push('\n');
            sequence(out, s, nested(indent), q);
        }
        other => {
            out.push(' ');
            out.push_str(&inline(other, nested(indent), q));
            out.push('\n');
        }
    }
}

fn sequence(out: &mut String, items: &[Yaml], indent: usize, q: Quoting) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 || !out.ends_with("- ") {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str("- ");
        match item {
            Yaml::Map(m) if !m.is_empty() => mapping(out, m, indent + 2, q),
            Yaml::Seq(s) if !s.is_empty() => sequence(out, s, indent + 2, q),
            // A block scalar item is indented past the `- `.
            other => {
                out.push_str(&inline(other, indent + 2, q));
                out.push('\n');
            }
        }
    }
}

/// A scalar or empty collection on the current line; block scalars continue on the next lines,
/// indented at `block_indent`.
fn inline(v: &Yaml, block_indent: usize, q: Quoting) -> String {
    match v {
        Yaml::Null => "null".into(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Number(n) => n.clone(),
        Yaml::Str(s) => scalar_text(s, false, block_indent, q),
        Yaml::NodeStr(s) => scalar_text(s, false, block_indent, Quoting::NodeStr),
        Yaml::Map(_) => "{}".into(),
        Yaml::Seq(_) => "[]".into(),
    }
}

#[derive(PartialEq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

/// What `analyzeScalar` finds out about a scalar.
struct Analysis {
    block_plain: bool,
    single: bool,
    literal: bool,
    multiline: bool,
}

fn is_printable(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{85}')
        || (' '..='~').contains(&c)
        || ('\u{a0}'..='\u{d7ff}').contains(&c)
        || (('\u{e000}'..='\u{fffd}').contains(&c) && c != '\u{feff}')
        || ('\u{10000}'..='\u{10ffff}').contains(&c)
}

fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            block_plain: true,
            single: true,
            literal: false,
            multiline: false,
        };
    }
    let chars: Vec<char> = s.chars().collect();
    let (mut block_ind, mut breaks, mut special, mut tabs) = (false, false, false, false);
    let (mut lead_space, mut lead_break, mut trail_space, mut trail_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break, mut prev_space, mut prev_break) =
        (false, false, false, false);
    if s.starts_with("---") || s.starts_with("...") {
        block_ind = true;
    }
    let mut preceded_by_ws = true;
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_ws = chars
            .get(i + 1)
            .is_none_or(|n| matches!(n, ' ' | '\t') || is_break(*n));
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_ind = true,
                '?' | ':' | '-' if followed_by_ws => block_ind = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_ws => block_ind = true,
                '#' if preceded_by_ws => block_ind = true,
                _ => {}
            }
        }
        if c == '\t' {
            tabs = true;
        } else if !is_printable(c) {
            special = true;
        }
        if c == ' ' {
            lead_space |= i == 0;
            trail_space |= i + 1 == chars.len();
            break_space |= prev_break;
            prev_space = true;
            prev_break = false;
        } else if is_break(c) {
            breaks = true;
            lead_break |= i == 0;
            trail_break |= i + 1 == chars.len();
            space_break |= prev_space;
            prev_space = false;
            prev_break = true;
        } else {
            prev_space = false;
            prev_break = false;
        }
        preceded_by_ws = matches!(c, ' ' | '\t') || is_break(c);
    }
    let mut a = Analysis {
        block_plain: true,
        single: true,
        literal: true,
        multiline: breaks,
    };
    if lead_space || lead_break || trail_space || trail_break || breaks {
        a.block_plain = false;
    }
    if trail_space {
        a.literal = false;
    }
    if break_space || space_break || tabs || special {
        a.block_plain = false;
        a.single = false;
    }
    if space_break || special {
        a.literal = false;
    }
    if block_ind {
        a.block_plain = false;
    }
    a
}

/// A string scalar in the style go-yaml picks. `key` is the simple-key context (mapping keys).
fn scalar_text(s: &str, key: bool, block_indent: usize, q: Quoting) -> String {
    let a = analyze(s);
    // representer.go `stringv`: plain only when the text reads back as a string.
    let compat = is_base60_float(s)
        || matches!(
            s,
            "y" | "Y"
                | "yes"
                | "Yes"
                | "YES"
                | "on"
                | "On"
                | "ON"
                | "n"
                | "N"
                | "no"
                | "No"
                | "NO"
                | "off"
                | "Off"
                | "OFF"
                | "<<"
        );
    let other_type = !crate::decode::plain_is_string(s);
    let literal_ok = s.chars().count() >= 2 && s.chars().any(|c| !c.is_whitespace());
    let mut style = if s.contains('\n') {
        if literal_ok {
            Style::Literal
        } else {
            Style::Double
        }
    } else if q == Quoting::NodeStr {
        if other_type {
            Style::Double
        } else {
            Style::Plain
        }
    } else if compat && q == Quoting::CompatSingle {
        // rc.6 `stringv` quotes these first; the desolver keeps a style already set.
        Style::Single
    } else if other_type || compat {
        Style::Double
    } else {
        Style::Plain
    };
    // emitter.go `selectScalarStyle`.
    if key && a.multiline {
        style = Style::Double;
    }
    if style == Style::Plain && (!a.block_plain || (s.is_empty() && key)) {
        style = Style::Single;
    }
    if style == Style::Single && !a.single {
        style = Style::Double;
    }
    if style == Style::Literal && (!a.literal || key) {
        style = Style::Double;
    }
    match style {
        Style::Plain => s.to_string(),
        Style::Single => format!("'{}'", s.replace('\'', "''")),
        Style::Double => double_quoted(s),
        Style::Literal => literal(s, block_indent),
    }
}

fn is_base60_float(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if !(first == '+' || first == '-' || first.is_ascii_digit()) || !s.contains(':') {
        return false;
    }
    // ^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$
    let body = s.trim_start_matches(['+', '-']);
    let (int_part, frac) = match body.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (body, None),
    };
    if frac.is_some_and(|f| !f.bytes().all(|b| b.is_ascii_digit() || b == b'_')) {
        return false;
    }
    let mut parts = int_part.split(':');
    let head = parts.next().unwrap_or("");
    if !head.starts_with(|c: char| c.is_ascii_digit())
        || !head.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return false;
    }
    let mut any = false;
    for p in parts {
        any = true;
        let b = p.as_bytes();
        let ok = match b.len() {
            1 => b[0].is_ascii_digit(),
            2 => (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    any
}

fn double_quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{b}' => out.push_str("\\v"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\u{1b}' => out.push_str("\\e"),
            '\u{85}' => out.push_str("\\N"),
            '\u{a0}' => out.push_str("\\_"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if !is_printable(c) || c == '\u{feff}' => {
                let n = c as u32;
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02X}"));
                } else if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04X}"));
                } else {
                    out.push_str(&format!("\\U{n:08X}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `|` with the chomping indicator of emitter.go `writeBlockScalarHints`, then the lines.
fn literal(s: &str, indent: usize) -> String {
    let mut out = String::from("|");
    if s.starts_with(' ') {
        out.push_str(&INDENT.to_string());
    }
    let trailing = s.len() - s.trim_end_matches('\n').len();
    match trailing {
        0 => out.push('-'),
        1 if s.len() > 1 => {}
        _ => out.push('+'),
    }
    let body = s.strip_suffix('\n').unwrap_or(s);
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            out.push_str(&" ".repeat(indent));
            out.push_str(line);
        }
    }
    out
}
