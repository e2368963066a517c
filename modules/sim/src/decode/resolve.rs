//! What a scalar means, the way go-yaml v4 resolves it (`internal/libyaml/resolver.go` of
//! go.yaml.in/yaml/v4 v4.0.0-rc.4, the version Talos 1.13.9 pins): quoted and block scalars are
//! strings; plain ones are null, booleans (`true`/`True`/`TRUE` only: YAML 1.2), integers by
//! Go's `strconv.ParseInt(s, 0, 64)` after dropping underscores (so `0644` is octal), floats,
//! timestamps, or strings.

use super::node::{Kind, Node, Style};

#[derive(Clone, Debug, PartialEq)]
pub enum Resolved {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Timestamp,
    Merge,
    Str,
}

impl Resolved {
    pub fn tag(&self) -> &'static str {
        match self {
            Resolved::Null => "!!null",
            Resolved::Bool(_) => "!!bool",
            Resolved::Int(_) | Resolved::Uint(_) => "!!int",
            Resolved::Float(_) => "!!float",
            Resolved::Timestamp => "!!timestamp",
            Resolved::Merge => "!!merge",
            Resolved::Str => "!!str",
        }
    }
}

pub fn resolve(node: &Node) -> Resolved {
    let Kind::Scalar { value, style } = &node.kind else {
        return Resolved::Str;
    };
    let tag = node.tag.as_deref().unwrap_or("");
    if *style != Style::Plain || tag == "!!str" || tag == "!!binary" {
        return Resolved::Str;
    }
    if !matches!(
        tag,
        "" | "!!bool" | "!!int" | "!!float" | "!!null" | "!!timestamp"
    ) {
        return Resolved::Str;
    }
    resolve_plain(value)
}

pub(super) fn resolve_plain(s: &str) -> Resolved {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "true" | "True" | "TRUE" => return Resolved::Bool(true),
        "false" | "False" | "FALSE" => return Resolved::Bool(false),
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Resolved::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        "-0" | "-0.0" => return Resolved::Float(-0.0),
        "<<" => return Resolved::Merge,
        _ => {}
    }
    match s.as_bytes()[0] {
        b'.' => s
            .parse::<f64>()
            .map(Resolved::Float)
            .unwrap_or(Resolved::Str),
        b'+' | b'-' | b'0'..=b'9' => {
            if is_timestamp(s) {
                return Resolved::Timestamp;
            }
            let plain = s.replace('_', "");
            if let Some(i) = go_parse_int(&plain) {
                return Resolved::Int(i);
            }
            if let Some(u) = go_parse_uint(&plain) {
                return Resolved::Uint(u);
            }
            if is_yaml_float(&plain)
                && let Ok(f) = plain.parse::<f64>()
            {
                return Resolved::Float(f);
            }
            Resolved::Str
        }
        _ => Resolved::Str,
    }
}

/// `strconv.ParseInt(s, 0, 64)`: optional sign, then `0x`/`0o`/`0b`, a leading `0` (octal) or
/// decimal digits.
fn go_parse_int(s: &str) -> Option<i64> {
    let (negative, digits) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let magnitude = go_parse_uint(digits)?;
    if negative {
        if magnitude <= i64::MAX as u64 + 1 {
            return Some((magnitude as i128).wrapping_neg() as i64);
        }
        return None;
    }
    i64::try_from(magnitude).ok()
}

/// `strconv.ParseUint(s, 0, 64)`.
fn go_parse_uint(s: &str) -> Option<u64> {
    let (radix, digits) = if let Some(r) = s.strip_prefix("0x").or(s.strip_prefix("0X")) {
        (16, r)
    } else if let Some(r) = s.strip_prefix("0o").or(s.strip_prefix("0O")) {
        (8, r)
    } else if let Some(r) = s.strip_prefix("0b").or(s.strip_prefix("0B")) {
        (2, r)
    } else if s.len() > 1 && s.starts_with('0') {
        (8, &s[1..])
    } else {
        (10, s)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// go-yaml's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_float(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// The dates go-yaml takes as timestamps: four digits and a dash first, then a date that
/// Go's layouts accept (`2006-1-2`, with an optional time part).
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 6 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let date = s.split(['T', 't', ' ']).next().unwrap_or("");
    let parts: Vec<&str> = date.split('-').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(s: &str) -> Resolved {
        resolve_plain(s)
    }

    #[test]
    fn resolves_like_go_yaml_v4() {
        assert_eq!(plain("true"), Resolved::Bool(true));
        assert_eq!(plain("yes"), Resolved::Str, "YAML 1.2: yes is a string");
        assert_eq!(plain("~"), Resolved::Null);
        assert_eq!(
            plain("0644"),
            Resolved::Int(420),
            "Go reads a leading 0 as octal"
        );
        assert_eq!(plain("0o17"), Resolved::Int(15));
        assert_eq!(plain("1_000"), Resolved::Int(1000));
        assert_eq!(plain("-3"), Resolved::Int(-3));
        assert_eq!(plain("18446744073709551615"), Resolved::Uint(u64::MAX));
        assert_eq!(plain("1.5"), Resolved::Float(1.5));
        assert_eq!(plain("1e3"), Resolved::Float(1000.0));
        assert_eq!(plain("2024-01-02"), Resolved::Timestamp);
        assert_eq!(plain("10.0.0.1"), Resolved::Str);
        assert_eq!(plain("1.36.3"), Resolved::Str);
        assert_eq!(plain("0x"), Resolved::Str);
        assert_eq!(plain("v1.13.9"), Resolved::Str);
    }
}
