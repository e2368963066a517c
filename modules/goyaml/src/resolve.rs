//! go-yaml's resolver, seen from the writer's side: which plain scalars would read back as
//! something other than a string (null, booleans, integers, floats, timestamps, YAML 1.1's
//! base-60 numbers and merge key), `resolve.go` @ go.yaml.in/yaml/v4 v4.0.0-rc.4 and rc.6.

/// Whether a plain scalar with this text would decode as a string (go-yaml's resolver, plus
/// the YAML 1.1 booleans, base-60 floats and `<<` merge key it also refuses to write plain).
pub(crate) fn resolves_as_string(s: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", ".nan",
        ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf",
        "-.INF", "<<", "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "n", "N", "no", "No", "NO",
        "off", "Off", "OFF",
    ];
    if SPECIAL.contains(&s) {
        return false;
    }
    let first = s.as_bytes()[0];
    if first == b'.' {
        return !is_dot_float(s);
    }
    if !(first.is_ascii_digit() || first == b'+' || first == b'-') {
        return true;
    }
    if is_timestamp(s) || is_base60_float(s) {
        return false;
    }
    let plain = s.replace('_', "");
    !(is_go_int(&plain) || is_yaml_float(&plain))
}

/// `.5`, `.5e3`, `.5_0`: what Go's ParseFloat accepts after a leading dot (go-yaml hands it the
/// text as written, so an underscore counts when it stands between two digits).
fn is_dot_float(s: &str) -> bool {
    let rest = &s[1..];
    let (mant, exp) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let digits = |t: &str| {
        !t.is_empty()
            && !t.starts_with('_')
            && !t.ends_with('_')
            && !t.contains("__")
            && t.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    };
    digits(mant) && exp.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)))
}

fn is_exponent(e: &str) -> bool {
    let e = e.strip_prefix(['+', '-']).unwrap_or(e);
    !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
}

/// Go's ParseInt/ParseUint with base 0 (sign, 0x/0o/0b prefixes, legacy 0-octal), ignoring
/// range; plus go-yaml's own 0b/0o fallbacks, which accept the same spellings.
fn is_go_int(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let b = body.as_bytes();
    if b.is_empty() {
        return false;
    }
    let (digits, radix) = if b.len() >= 2 && b[0] == b'0' {
        match b[1] {
            b'x' | b'X' => (&body[2..], 16),
            b'o' | b'O' => (&body[2..], 8),
            b'b' | b'B' => (&body[2..], 2),
            _ => (&body[1..], 8),
        }
    } else {
        (body, 10)
    };
    !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix))
}

/// go-yaml's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mant, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let mant_ok = match mant.split_once('.') {
        Some(("", frac)) => !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit()),
        Some((int, frac)) => {
            !int.is_empty()
                && int.bytes().all(|b| b.is_ascii_digit())
                && frac.bytes().all(|b| b.is_ascii_digit())
        }
        None => !mant.is_empty() && mant.bytes().all(|b| b.is_ascii_digit()),
    };
    mant_ok && exp.is_none_or(is_exponent)
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`
pub(crate) fn is_base60_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, frac) = match body.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (body, None),
    };
    if frac.is_some_and(|f| !f.bytes().all(|b| b.is_ascii_digit() || b == b'_')) {
        return false;
    }
    let mut parts = main.split(':');
    let head = parts.next().unwrap_or("");
    if head.is_empty()
        || !head.as_bytes()[0].is_ascii_digit()
        || !head.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return false;
    }
    let mut count = 0;
    for p in parts {
        count += 1;
        let ok = match p.as_bytes() {
            [d] => d.is_ascii_digit(),
            [a, d] => (b'0'..=b'5').contains(a) && d.is_ascii_digit(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    count > 0
}

/// go-yaml's timestamp forms: `2006-1-2`, with `T`/`t` + time + zone, or ` ` + time. Field
/// ranges are not checked (time.Parse refuses `2024-13-45`, which go-yaml then writes plain).
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |from: usize, min: usize, max: usize| -> Option<usize> {
        let n = b[from.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        (n >= min && n <= max).then_some(from + n)
    };
    let sep = |at: usize, c: u8| b.get(at) == Some(&c);
    let Some(i) = digits(0, 4, 4) else {
        return false;
    };
    if !sep(i, b'-') {
        return false;
    }
    let Some(i) = digits(i + 1, 1, 2) else {
        return false;
    };
    if !sep(i, b'-') {
        return false;
    }
    let Some(i) = digits(i + 1, 1, 2) else {
        return false;
    };
    if i == b.len() {
        return true;
    }
    let with_zone = match b[i] {
        b'T' | b't' => true,
        b' ' => false,
        _ => return false,
    };
    let Some(i) = digits(i + 1, 1, 2) else {
        return false;
    };
    if !sep(i, b':') {
        return false;
    }
    let Some(i) = digits(i + 1, 1, 2) else {
        return false;
    };
    if !sep(i, b':') {
        return false;
    }
    let Some(mut i) = digits(i + 1, 1, 2) else {
        return false;
    };
    // Go's time.Parse takes a comma for the point and any number of fraction digits.
    if sep(i, b'.') || sep(i, b',') {
        let Some(j) = digits(i + 1, 1, usize::MAX) else {
            return false;
        };
        i = j;
    }
    if !with_zone {
        return i == b.len();
    }
    match b.get(i) {
        Some(b'Z') => i + 1 == b.len(),
        Some(b'+') | Some(b'-') => {
            let Some(j) = digits(i + 1, 2, 2) else {
                return false;
            };
            if !sep(j, b':') {
                return false;
            }
            digits(j + 1, 2, 2) == Some(b.len())
        }
        _ => false,
    }
}
