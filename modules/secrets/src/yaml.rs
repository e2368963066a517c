//! The small slice of YAML this crate needs: parsing into `serde_json::Value` without echoing
//! input on error (inputs hold keys), and emitting scalars the way go-yaml does so that
//! `secrets.yaml` and talosconfig files come out byte for byte like talosctl's.

use anyhow::{Result, anyhow};
use serde_json::Value;

/// Parses one YAML document. Parse errors report only the position: the text may be secret.
pub fn parse(text: &str, what: &str) -> Result<Value> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| match e.location() {
        Some(loc) => anyhow!(
            "{what}: not valid YAML (line {}, column {})",
            loc.line(),
            loc.column()
        ),
        None => anyhow!("{what}: not valid YAML"),
    })
}

/// A string scalar as go-yaml v3 would write it in block context: plain when it reads back as
/// the same string, single-quoted when plain would be misread as syntax, double-quoted when it
/// would resolve to another type (number, bool, null, timestamp) or holds control characters.
/// Multi-line strings (which go-yaml writes as `|-` blocks) are double-quoted here; no value
/// this crate writes contains a line break.
pub fn scalar(s: &str) -> String {
    if s.chars().any(|c| c.is_control()) {
        return double_quoted(s);
    }
    if resolves_to_non_string(s) {
        return double_quoted(s);
    }
    if plain_allowed(s) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// go-yaml's emitter analysis, reduced to the block-context plain-scalar question.
fn plain_allowed(s: &str) -> bool {
    let bytes = s.as_bytes();
    if s.starts_with(' ') || s.ends_with(' ') || s.starts_with("---") || s.starts_with("...") {
        return false;
    }
    let followed_by_space = |i: usize| bytes.get(i + 1).is_none_or(|b| *b == b' ');
    for (i, &b) in bytes.iter().enumerate() {
        if i == 0 {
            match b {
                b'#' | b',' | b'[' | b']' | b'{' | b'}' | b'&' | b'*' | b'!' | b'|' | b'>'
                | b'\'' | b'"' | b'%' | b'@' | b'`' => return false,
                b'?' | b':' | b'-' if followed_by_space(i) => return false,
                _ => {}
            }
        } else {
            match b {
                b':' if followed_by_space(i) => return false,
                b'#' if bytes[i - 1] == b' ' => return false,
                _ => {}
            }
        }
    }
    true
}

fn resolves_to_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", "y",
        "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
        "OFF", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF",
        ".nan", ".NaN", ".NAN",
    ];
    if WORDS.contains(&s) {
        return true;
    }
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    is_int(&plain) || is_float(&plain) || is_base60(s) || looks_like_timestamp(s)
}

fn is_int(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let all = |t: &str, f: fn(char) -> bool| !t.is_empty() && t.chars().all(f);
    if let Some(hex) = s.strip_prefix("0x") {
        return all(hex, |c| c.is_ascii_hexdigit());
    }
    if let Some(oct) = s.strip_prefix("0o") {
        return all(oct, |c| ('0'..='7').contains(&c));
    }
    if let Some(bin) = s.strip_prefix("0b") {
        return all(bin, |c| c == '0' || c == '1');
    }
    all(s, |c| c.is_ascii_digit())
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
fn is_float(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => !frac.is_empty() && digits(frac),
        Some((int, frac)) => !int.is_empty() && digits(int) && digits(frac),
        None => !mantissa.is_empty() && digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

/// YAML 1.1 sexagesimal numbers such as `1:20`, which go-yaml quotes on output.
fn is_base60(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let mut parts = s.split(':');
    let head = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    if rest.is_empty() || !head.starts_with(|c: char| c.is_ascii_digit()) {
        return false;
    }
    if !head.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return false;
    }
    let last = rest.len() - 1;
    rest.iter().enumerate().all(|(i, part)| {
        let (sexa, frac) = match (i == last, part.split_once('.')) {
            (true, Some((a, b))) => (a, Some(b)),
            _ => (*part, None),
        };
        let sexa_ok = matches!(sexa.len(), 1 | 2)
            && sexa.chars().all(|c| c.is_ascii_digit())
            && (sexa.len() == 1 || sexa.as_bytes()[0] <= b'5');
        sexa_ok && frac.is_none_or(|f| f.chars().all(|c| c.is_ascii_digit() || c == '_'))
    })
}

/// Conservative: anything starting like `YYYY-M-D` is treated as a timestamp and quoted.
fn looks_like_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 8 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[5].is_ascii_digit()
}

/// Writes `key: value` at `indent` spaces, recursing into mappings and sequences with go-yaml's
/// layout (4-space steps, sequence items indented under their key, `[]`/`{}` when empty).
pub fn emit_entry(out: &mut String, indent: usize, key: &str, value: &Value) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if map.is_empty() => {
            out.push_str(&format!("{pad}{}: {{}}\n", scalar(key)))
        }
        Value::Object(map) => {
            out.push_str(&format!("{pad}{}:\n", scalar(key)));
            for (k, v) in map {
                emit_entry(out, indent + 4, k, v);
            }
        }
        Value::Array(items) if items.is_empty() => {
            out.push_str(&format!("{pad}{}: []\n", scalar(key)))
        }
        Value::Array(items) => {
            out.push_str(&format!("{pad}{}:\n", scalar(key)));
            for item in items {
                emit_item(out, indent + 4, item);
            }
        }
        other => out.push_str(&format!("{pad}{}: {}\n", scalar(key), leaf(other))),
    }
}

fn emit_item(out: &mut String, indent: usize, item: &Value) {
    let pad = " ".repeat(indent);
    match item {
        Value::Object(map) if !map.is_empty() => {
            // First entry shares the dash line; the rest align under it.
            let mut first = String::new();
            let mut iter = map.iter();
            if let Some((k, v)) = iter.next() {
                emit_entry(&mut first, indent + 2, k, v);
            }
            out.push_str(&format!("{pad}- {}", first.trim_start()));
            for (k, v) in iter {
                emit_entry(out, indent + 2, k, v);
            }
        }
        Value::Object(_) => out.push_str(&format!("{pad}- {{}}\n")),
        Value::Array(items) if items.is_empty() => out.push_str(&format!("{pad}- []\n")),
        Value::Array(items) => {
            let mut nested = String::new();
            for inner in items {
                emit_item(&mut nested, indent + 2, inner);
            }
            out.push_str(&format!("{pad}- {}", nested.trim_start()));
        }
        other => out.push_str(&format!("{pad}- {}\n", leaf(other))),
    }
}

fn leaf(v: &Value) -> String {
    match v {
        Value::String(s) => scalar(s),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_tokens_stay_plain() {
        for s in [
            "0raF93qnkMvF-FZNuvyGozXNdLiT2FOWSlyBaW4PR-w=",
            "-FZNuvyGozXNdLiT2FOWSlyBaW4PR",
            "pofHbABZq7VXuObsdLdy/bHmz6hlMHZ3p8+6WKrv1ic=",
            "2psnp2.lry8e9gycdix3bpa",
            "10.5.0.2",
            "1.2.3.4:50000",
            "https://example.com:50000",
        ] {
            assert_eq!(scalar(s), s);
        }
    }

    #[test]
    fn ambiguous_strings_are_quoted_like_go_yaml() {
        assert_eq!(scalar(""), "\"\"");
        assert_eq!(
            scalar("123456.7890123456789012"),
            "\"123456.7890123456789012\""
        );
        assert_eq!(scalar("0123456"), "\"0123456\"");
        assert_eq!(scalar("1e5"), "\"1e5\"");
        assert_eq!(scalar("yes"), "\"yes\"");
        assert_eq!(scalar("null"), "\"null\"");
        assert_eq!(scalar("1:20"), "\"1:20\"");
        assert_eq!(scalar("2024-01-02"), "\"2024-01-02\"");
        assert_eq!(scalar("******"), "'******'");
        assert_eq!(scalar("[::1]:50000"), "'[::1]:50000'");
        assert_eq!(scalar("it's: x"), "'it''s: x'");
        assert_eq!(scalar("a\tb"), "\"a\\tb\"");
    }

    #[test]
    fn nested_values_use_four_space_steps() {
        let v: Value = serde_json::json!({"basic": {"username": "u", "password": "p"}, "list": ["a", {"x": "1", "z": []}]});
        let mut out = String::new();
        emit_entry(&mut out, 8, "auth", &v);
        assert_eq!(
            out,
            "        auth:\n            basic:\n                username: u\n                password: p\n            list:\n                - a\n                - x: \"1\"\n                  z: []\n"
        );
    }

    #[test]
    fn parse_errors_do_not_echo_the_input() {
        let err = parse("key: [unclosed SECRETVALUE", "test")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("test: not valid YAML"), "{err}");
        assert!(!err.contains("SECRETVALUE"), "{err}");
    }
}
