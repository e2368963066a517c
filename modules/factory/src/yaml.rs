//! The canonical YAML the factory hashes: go-yaml's `yaml.Marshal` of the schematic struct
//! (`pkg/schematic/schematic.go` @ image-factory v1.5.0: go.yaml.in/yaml/v4 with v3 defaults,
//! four-space indent, sequences indented under their key, no line wrapping).
//!
//! Only what a schematic holds: mappings with fixed key order, sequences, strings, integers and
//! booleans. A string is written plain unless go-yaml would read it back as something else or
//! libyaml's scalar analysis forbids it (then quoted), or it spans lines (a literal block).

use std::fmt::Write;

/// A YAML node in the order it is to be written.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

/// One document: `root` is a mapping.
pub fn emit(root: &Node) -> String {
    let mut out = String::new();
    match root {
        Node::Map(entries) if !entries.is_empty() => emit_map(&mut out, entries, 0),
        Node::Map(_) => out.push_str("{}\n"),
        other => {
            out.push_str(&scalar(other, 0));
            out.push('\n');
        }
    }
    out
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn emit_map(out: &mut String, entries: &[(String, Node)], indent: usize) {
    for (key, value) in entries {
        pad(out, indent);
        out.push_str(&plain_or_quoted(key));
        out.push(':');
        emit_value(out, value, indent);
    }
}

/// The value after `key:`: inline for scalars and empty collections, else on the next lines.
fn emit_value(out: &mut String, value: &Node, indent: usize) {
    match value {
        Node::Map(entries) if entries.is_empty() => out.push_str(" {}\n"),
        Node::Seq(items) if items.is_empty() => out.push_str(" []\n"),
        Node::Map(entries) => {
            out.push('\n');
            emit_map(out, entries, indent + 4);
        }
        Node::Seq(items) => {
            out.push('\n');
            emit_seq(out, items, indent + 4);
        }
        scalar_node => {
            out.push(' ');
            out.push_str(&scalar(scalar_node, indent + 4));
            out.push('\n');
        }
    }
}

fn emit_seq(out: &mut String, items: &[Node], indent: usize) {
    for item in items {
        pad(out, indent);
        out.push('-');
        match item {
            // A mapping in a sequence starts on the dash's line, its keys two columns in.
            Node::Map(entries) if !entries.is_empty() => {
                out.push(' ');
                let mut first = true;
                for (key, value) in entries {
                    if !first {
                        pad(out, indent + 2);
                    }
                    first = false;
                    out.push_str(&plain_or_quoted(key));
                    out.push(':');
                    emit_value(out, value, indent + 2);
                }
            }
            Node::Seq(inner) if !inner.is_empty() => {
                out.push('\n');
                emit_seq(out, inner, indent + 4);
            }
            other => emit_value(out, other, indent),
        }
    }
}

fn scalar(node: &Node, indent: usize) -> String {
    match node {
        Node::Str(s) => string(s, indent),
        Node::Int(i) => i.to_string(),
        Node::Float(f) => float(*f),
        Node::Bool(b) => b.to_string(),
        Node::Null => "null".into(),
        Node::Seq(_) => "[]".into(),
        Node::Map(_) => "{}".into(),
    }
}

fn float(f: f64) -> String {
    if f.is_nan() {
        ".nan".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        }
    } else {
        // go-yaml writes floats with strconv's shortest form: 2.5, and a whole 2.0 as 2.
        format!("{f}")
    }
}

/// A string scalar: a literal block when it spans lines, else plain, double-quoted when it would
/// read back as another type, single-quoted when libyaml forbids it plain.
fn string(s: &str, indent: usize) -> String {
    if s.contains('\n') && literal_allowed(s) {
        let chomp = if !s.ends_with('\n') {
            "-"
        } else if s.ends_with("\n\n") {
            "+"
        } else {
            ""
        };
        let mut out = format!("|{chomp}");
        let body = s.strip_suffix('\n').unwrap_or(s);
        for line in body.split('\n') {
            out.push('\n');
            if !line.is_empty() {
                out.extend(std::iter::repeat_n(' ', indent));
                out.push_str(line);
            }
        }
        return out;
    }
    plain_or_quoted(s)
}

fn plain_or_quoted(s: &str) -> String {
    if s.is_empty() || resolves_to_other_type(s) {
        return double_quoted(s);
    }
    if is_yaml11_special(s) {
        return single_quoted(s);
    }
    if s.chars().any(|c| c.is_control() && c != '\n') || s.contains('\n') {
        return double_quoted(s);
    }
    if plain_allowed(s) {
        s.to_string()
    } else {
        single_quoted(s)
    }
}

/// libyaml forbids a literal block for text with trailing spaces on a line or a leading space.
fn literal_allowed(s: &str) -> bool {
    !s.starts_with(' ')
        && !s
            .split('\n')
            .any(|line| line.ends_with(' ') || line.ends_with('\t'))
        && !s.chars().any(|c| c.is_control() && c != '\n')
}

/// Whether go-yaml's resolver would read the plain scalar as something other than a string
/// (YAML 1.2 core schema: null, booleans, integers, floats).
fn resolves_to_other_type(s: &str) -> bool {
    matches!(
        s,
        "~" | "null"
            | "Null"
            | "NULL"
            | "true"
            | "True"
            | "TRUE"
            | "false"
            | "False"
            | "FALSE"
            | ".inf"
            | ".Inf"
            | ".INF"
            | "+.inf"
            | "+.Inf"
            | "+.INF"
            | "-.inf"
            | "-.Inf"
            | "-.INF"
            | ".nan"
            | ".NaN"
            | ".NAN"
    ) || is_int(s)
        || is_float(s)
}

fn is_int(s: &str) -> bool {
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    let digits =
        |t: &str, radix: u32| !t.is_empty() && t.chars().all(|c| c == '_' || c.is_digit(radix));
    if let Some(hex) = body.strip_prefix("0x") {
        return digits(hex, 16);
    }
    if let Some(oct) = body.strip_prefix("0o") {
        return digits(oct, 8);
    }
    if let Some(bin) = body.strip_prefix("0b") {
        return digits(bin, 2);
    }
    digits(body, 10) && body.chars().next().is_some_and(|c| c.is_ascii_digit())
}

fn is_float(s: &str) -> bool {
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    if body.is_empty() || !body.chars().any(|c| c.is_ascii_digit()) {
        return false;
    }
    let (mantissa, exponent) = match body.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (body, None),
    };
    let mantissa_ok = {
        let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        (mantissa.contains('.') || exponent.is_some())
            && whole.chars().all(|c| c.is_ascii_digit() || c == '_')
            && frac.chars().all(|c| c.is_ascii_digit())
            && !(whole.is_empty() && frac.is_empty())
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && e.chars().all(|c| c.is_ascii_digit())
    });
    mantissa_ok && exponent_ok
}

/// YAML 1.1's booleans and the merge key, which go-yaml quotes so that older readers agree.
fn is_yaml11_special(s: &str) -> bool {
    matches!(
        s,
        "y" | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "on"
            | "On"
            | "ON"
            | "off"
            | "Off"
            | "OFF"
            | "<<"
    )
}

/// libyaml's scalar analysis (`yaml_emitter_analyze_scalar`) for block context: no leading or
/// trailing space, no indicator that starts a node, no `: ` or ` #` inside.
fn plain_allowed(s: &str) -> bool {
    let chars: Vec<char> = s.chars().collect();
    if chars.first().is_some_and(|c| c.is_whitespace())
        || chars.last().is_some_and(|c| c.is_whitespace())
    {
        return false;
    }
    let followed_by_space = |i: usize| chars.get(i + 1).is_none_or(|c| c.is_whitespace());
    for (i, &c) in chars.iter().enumerate() {
        if i == 0 {
            if "#,[]{}&*!|>'\"%@`".contains(c) {
                return false;
            }
            if ("?:-".contains(c)) && followed_by_space(i) {
                return false;
            }
        } else {
            if c == ':' && followed_by_space(i) {
                return false;
            }
            if c == '#' && chars[i - 1].is_whitespace() {
                return false;
            }
        }
    }
    !s.starts_with("---") && !s.starts_with("...")
}

fn single_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn double_quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_are_quoted_as_go_yaml_quotes_them() {
        assert_eq!(
            plain_or_quoted("siderolabs/amd-ucode"),
            "siderolabs/amd-ucode"
        );
        assert_eq!(
            plain_or_quoted("console=ttyS0,115200"),
            "console=ttyS0,115200"
        );
        assert_eq!(
            plain_or_quoted("ip=1.2.3.4::1.2.3.1:255.255.255.0::eth0:off"),
            "ip=1.2.3.4::1.2.3.1:255.255.255.0::eth0:off"
        );
        assert_eq!(plain_or_quoted("10"), "\"10\"");
        assert_eq!(plain_or_quoted("true"), "\"true\"");
        assert_eq!(plain_or_quoted("1.5"), "\"1.5\"");
        assert_eq!(plain_or_quoted(""), "\"\"");
        assert_eq!(
            plain_or_quoted(r#"{"externalIPs":["1.2.3.4"]}"#),
            r#"'{"externalIPs":["1.2.3.4"]}'"#
        );
        assert_eq!(plain_or_quoted("a: b"), "'a: b'");
        assert_eq!(plain_or_quoted("- x"), "'- x'");
        assert_eq!(plain_or_quoted("-x"), "-x");
    }
}
