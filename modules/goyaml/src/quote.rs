//! go-yaml's quoted forms: double quotes with its escapes, and single quotes.

use crate::style::{is_break, is_printable};

/// Writes `s` as a go-yaml double-quoted scalar, with its escapes.
pub fn write_double_quoted(out: &mut String, s: &str) {
    out.push('"');
    // go-yaml's `isBOM(value, i)` looks at the first three bytes whatever `i` is: a string that
    // starts with a byte order mark has every character escaped ("\uFEFF\x61"; found by the
    // oracle).
    let starts_with_bom = s.starts_with('\u{FEFF}');
    for c in s.chars() {
        let escape = !is_printable(c)
            || starts_with_bom
            || c == '\u{FEFF}'
            || is_break(c)
            || c == '"'
            || c == '\\';
        if !escape {
            out.push(c);
            continue;
        }
        out.push('\\');
        match c {
            '\0' => out.push('0'),
            '\u{7}' => out.push('a'),
            '\u{8}' => out.push('b'),
            '\t' => out.push('t'),
            '\n' => out.push('n'),
            '\u{b}' => out.push('v'),
            '\u{c}' => out.push('f'),
            '\r' => out.push('r'),
            '\u{1b}' => out.push('e'),
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            '\u{85}' => out.push('N'),
            '\u{a0}' => out.push('_'),
            '\u{2028}' => out.push('L'),
            '\u{2029}' => out.push('P'),
            other => {
                let u = other as u32;
                if u <= 0xFF {
                    out.push_str(&format!("x{u:02X}"));
                } else if u <= 0xFFFF {
                    out.push_str(&format!("u{u:04X}"));
                } else {
                    out.push_str(&format!("U{u:08X}"));
                }
            }
        }
    }
    out.push('"');
}

/// `s` in single quotes, a quote doubled.
pub fn single_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}
