//! The style go-yaml gives a string scalar in block context: plain, single- or double-quoted, or a
//! `|` block (libyaml's scalar analysis and go-yaml's representer, `internal/libyaml/emitter.go`
//! and `representer.go` @ go.yaml.in/yaml/v4 v4.0.0-rc.4 and rc.6).

use crate::resolve::{is_base60_float, resolves_as_string};

/// How go-yaml writes a string scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Plain,
    Single,
    Double,
    /// A `|` block: chosen for multi-line text where the emitter allows one.
    Literal,
}

/// The style go-yaml gives a string value in block context: double-quoted when plain would
/// resolve to another type (number, bool, null, timestamp, merge key) or when the text holds
/// characters only escapes can carry; plain when the emitter's analysis allows it, single-quoted
/// otherwise; literal for multi-line text that a block can hold.
pub fn string_style(s: &str) -> Style {
    let a = analyze(s);
    if s.contains('\n') {
        // go-yaml's representer takes a block only for text of two bytes or more with something
        // other than white space in it (`shouldUseLiteralStyle`, internal/libyaml/node.go @
        // v4.0.0-rc.4 and rc.6): "\n" alone is written "\n". Found by the oracle.
        let literal_worthy = s.len() >= 2 && s.chars().any(|c| !c.is_whitespace());
        if a.block_allowed && literal_worthy {
            Style::Literal
        } else {
            Style::Double
        }
    } else if !resolves_as_string(s) {
        Style::Double
    } else if a.plain_allowed {
        Style::Plain
    } else if a.single_allowed {
        Style::Single
    } else {
        Style::Double
    }
}

/// Strings go-yaml v4.0.0-rc.6 (Talos 1.14.1's) single-quotes although they resolve as strings in
/// YAML 1.2: YAML 1.1 booleans (`off`, `yes`, ...), sexagesimal floats and the merge key
/// (`internal/libyaml/representer.go` stringv: `isBase60Float || isOldBool || looksLikeMerge`).
/// v4.0.0-rc.4 (Talos 1.13.9's) double-quotes them like any other non-plain string.
pub fn quoted_for_yaml_1_1(s: &str) -> bool {
    YAML_1_1_BOOLS.contains(&s) || s == "<<" || is_base60_float(s)
}

/// YAML 1.1's booleans, strings in YAML 1.2 (go-yaml's `isOldBool`).
pub const YAML_1_1_BOOLS: &[&str] = &[
    "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "n", "N", "no", "No", "NO", "off", "Off",
    "OFF",
];

/// The style go-yaml gives a ready `!!str` node with no style of its own (what Talos's
/// `ArgValue.MarshalYAML` returns), which skips the representer: text with a line feed is a block
/// wherever the emitter allows one (no `shouldUseLiteralStyle`), and YAML 1.1's words (`yes`,
/// `off`, `1:20`) stay plain (`internal/libyaml/serializer.go` and `emitter.go`
/// `selectScalarStyle` @ v4.0.0-rc.4 and rc.6; found by the oracle).
pub fn bare_string_node_style(s: &str) -> Style {
    if s.contains('\n') {
        return if analyze(s).block_allowed {
            Style::Literal
        } else {
            Style::Double
        };
    }
    match string_style(s) {
        Style::Double if s != "<<" && quoted_for_yaml_1_1(s) => Style::Plain,
        other => other,
    }
}

/// A string scalar as go-yaml writes it on one line in block context ([`string_style`]):
/// multi-line text, which go-yaml writes as a `|` block, is double-quoted here (for a value
/// inside a hand-laid line such as a talosconfig's `context:`).
pub fn inline(s: &str) -> String {
    match string_style(s) {
        Style::Plain => s.to_string(),
        Style::Single => crate::quote::single_quoted(s),
        Style::Double | Style::Literal => {
            let mut out = String::with_capacity(s.len() + 2);
            crate::quote::write_double_quoted(&mut out, s);
            out
        }
    }
}

struct Analysis {
    plain_allowed: bool,
    single_allowed: bool,
    block_allowed: bool,
}

/// libyaml's scalar analysis, block context only.
fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            plain_allowed: false,
            single_allowed: true,
            block_allowed: false,
        };
    }
    let chars: Vec<char> = s.chars().collect();
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break, mut previous_space, mut previous_break) =
        (false, false, false, false);
    let mut line_breaks = false;
    let mut special = false;
    let mut tabs = false;
    let mut preceded_by_ws = true;
    let last = chars.len() - 1;
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_ws = chars.get(i + 1).is_none_or(|n| is_blank_or_break(*n));
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if followed_by_ws => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_ws => block_indicators = true,
                '#' if preceded_by_ws => block_indicators = true,
                _ => {}
            }
        }
        // A tab rules out plain and single-quoted text but not a block (`analyzeScalar`'s
        // tab_characters in go-yaml's emitter @ v4.0.0-rc.4; found by the oracle).
        if c == '\t' {
            tabs = true;
        } else if !is_printable(c) {
            special = true;
        }
        if is_break(c) {
            line_breaks = true;
        }
        if c == ' ' {
            if i == 0 {
                leading_space = true;
            }
            if i == last {
                trailing_space = true;
            }
            if previous_break {
                break_space = true;
            }
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            if i == 0 {
                leading_break = true;
            }
            if i == last {
                trailing_break = true;
            }
            if previous_space {
                space_break = true;
            }
            previous_break = true;
            previous_space = false;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_ws = is_blank_or_break(c);
    }
    let mut a = Analysis {
        plain_allowed: true,
        single_allowed: true,
        block_allowed: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.plain_allowed = false;
        a.single_allowed = false;
    }
    if space_break || tabs || special {
        a.plain_allowed = false;
        a.single_allowed = false;
    }
    if space_break || special {
        a.block_allowed = false;
    }
    if line_breaks || block_indicators {
        a.plain_allowed = false;
    }
    // Breaks inside single quotes would need folding. go-yaml writes a string with a line feed
    // as a block or double-quoted; U+0085, U+2028 and U+2029 it writes raw inside single quotes,
    // which a reader folds into a space (the value changes). The escapes keep them: a deliberate
    // divergence the oracle found (modules/config/tests/oracle_properties.rs).
    if line_breaks {
        a.single_allowed = false;
    }
    a
}

pub(crate) fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_blank_or_break(c: char) -> bool {
    c == ' ' || c == '\t' || is_break(c)
}

/// go-yaml's printable set (with unicode output on).
pub(crate) fn is_printable(c: char) -> bool {
    let u = c as u32;
    u == 0x0A
        || (0x20..=0x7E).contains(&u)
        || (0xA0..=0xD7FF).contains(&u)
        || ((0xE000..=0xFFFD).contains(&u) && u != 0xFEFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::resolves_as_string;

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
            assert_eq!(inline(s), s);
        }
    }

    #[test]
    fn ambiguous_strings_are_quoted_like_go_yaml() {
        assert_eq!(inline(""), "\"\"");
        assert_eq!(
            inline("123456.7890123456789012"),
            "\"123456.7890123456789012\""
        );
        assert_eq!(inline("0123456"), "\"0123456\"");
        assert_eq!(inline("1e5"), "\"1e5\"");
        assert_eq!(inline("yes"), "\"yes\"");
        assert_eq!(inline("null"), "\"null\"");
        assert_eq!(inline("1:20"), "\"1:20\"");
        assert_eq!(inline("2024-01-02"), "\"2024-01-02\"");
        assert_eq!(inline("******"), "'******'");
        assert_eq!(inline("[::1]:50000"), "'[::1]:50000'");
        assert_eq!(inline("it's: x"), "'it''s: x'");
        assert_eq!(inline("a\tb"), "\"a\\tb\"");
    }

    #[test]
    fn resolver_edge_cases() {
        for s in [
            "0o", "0x", "-", ".", "1e", "infinity", "NaN", "v1", "1.2.3", "0b2",
        ] {
            assert!(resolves_as_string(s), "{s}");
        }
        for s in [
            "0o17",
            "0x1F",
            "+0x1F",
            "0b101",
            "0777",
            "08",
            "1_000",
            "-1.5e3",
            "+.5",
            "1:20:30",
            "2001-12-14t21:59:43.10-05:00",
            "2001-12-14 21:59:43.10",
        ] {
            assert!(!resolves_as_string(s), "{s}");
        }
    }

    /// Inputs on which the two copies this module replaced disagreed, pinned to go-yaml: the
    /// resolver's first-byte hint (`_` is never a number), Go's ParseInt prefixes in either
    /// case, ParseFloat's underscores between digits after a leading dot, time.Parse's fraction
    /// (any length, point or comma), v4's quoted merge key.
    #[test]
    fn reconciled_with_go_yaml() {
        for s in [
            "_1",
            "_2024",
            "._5",
            ".5_",
            "1234-5678",
            "2024-2024",
            "2024-01-02-foo",
            "2024-1-2x",
        ] {
            assert!(resolves_as_string(s), "{s}");
            assert_eq!(inline(s), s);
        }
        for s in [
            "<<",
            "0X1F",
            "0O17",
            "-0B101",
            ".5_0",
            ".5e1_0",
            "2001-12-14 21:59:43.1234567890",
            "2001-12-14 21:59:43,10",
            "2024-1-2",
        ] {
            assert!(!resolves_as_string(s), "{s}");
            assert_eq!(inline(s), format!("\"{s}\""));
        }
    }

    #[test]
    fn escapes_are_go_yaml_s() {
        assert_eq!(inline("a\u{1}b"), "\"a\\x01b\"");
        assert_eq!(
            inline("\u{0}\u{7}\u{8}\u{b}\u{c}\u{1b}"),
            "\"\\0\\a\\b\\v\\f\\e\""
        );
        assert_eq!(inline("a\u{7f}"), "\"a\\x7F\"");
        assert_eq!(inline("a\u{85}b"), "\"a\\Nb\"");
        assert_eq!(inline("a\u{2028}b\u{2029}"), "\"a\\Lb\\P\"");
        // A leading byte order mark escapes every character after it (the oracle: upstream
        // writes "\uFEFF\x78"); one later in the text is escaped alone.
        assert_eq!(inline("\u{feff}x"), "\"\\uFEFF\\x78\"");
        assert_eq!(inline("x\u{feff}"), "\"x\\uFEFF\"");
        assert_eq!(inline("ok \u{1F600}"), "\"ok \\U0001F600\"");
        assert_eq!(inline("caf\u{e9} \u{a0}"), "caf\u{e9} \u{a0}");
        assert_eq!(inline("two\nlines"), "\"two\\nlines\"");
    }
}
