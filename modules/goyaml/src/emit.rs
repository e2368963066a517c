//! go-yaml's block layout: a tree of ready scalars written as `yaml.Marshal` writes it, with a
//! four-space indent and sequences indented under their key (`internal/libyaml/emitter.go` @
//! go.yaml.in/yaml/v4 v4.0.0-rc.4 and rc.6, the releases Talos 1.13 and 1.14 and Image Factory
//! v1.5.0 link).

use serde_json::Value;

use crate::number::format_float;
use crate::order::key_order;
use crate::quote::write_double_quoted;
use crate::style::{Style, bare_string_node_style, quoted_for_yaml_1_1, string_style};

/// The go-yaml release whose quirks the writer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// v4.0.0-rc.4 (Talos 1.13): every string that is not plain is double-quoted.
    V4Rc4,
    /// v4.0.0-rc.6 (Talos 1.14, Image Factory v1.5.0): a Go string holding a YAML 1.1 boolean,
    /// base-60 number or `<<` is single-quoted (`auto: 'off'`).
    V4Rc6,
}

/// An ordered tree of ready scalars, as the writer lays it out.
#[derive(Clone, Debug)]
pub enum Node {
    Scalar(Scalar),
    Map(Vec<(Scalar, Node)>),
    Seq(Vec<Node>),
}

/// One scalar: its text and the style go-yaml gives it.
#[derive(Clone, Debug)]
pub struct Scalar {
    text: String,
    style: Style,
    /// Written by go-yaml's representer from a Go string, whose YAML 1.1 quoting differs by
    /// release (`quoted_for_yaml_1_1`); false for a ready node (what Talos's `ArgValue` hands it).
    represented: bool,
}

impl Scalar {
    /// Text written as it is: a number, a boolean, `null`, an octal file mode.
    pub fn plain(text: impl Into<String>) -> Scalar {
        Scalar {
            represented: true,
            text: text.into(),
            style: Style::Plain,
        }
    }

    /// A Go string, in the style go-yaml's representer gives it ([`string_style`]).
    pub fn string(s: &str) -> Scalar {
        Scalar {
            represented: true,
            text: s.to_string(),
            style: string_style(s),
        }
    }

    /// A ready `!!str` node with no style of its own ([`bare_string_node_style`]).
    pub fn bare_string(s: &str) -> Scalar {
        Scalar {
            represented: false,
            text: s.to_string(),
            style: bare_string_node_style(s),
        }
    }

    /// A mapping key: a Go string, but never a block unless it must be a complex key.
    pub fn key(k: &str) -> Scalar {
        let mut s = Scalar::string(k);
        // A simple key cannot be a block scalar (a complex one, `? `, can).
        if s.style == Style::Literal && !is_complex_key(k) {
            s.style = Style::Double;
        }
        s
    }

    /// A decoded JSON leaf as go-yaml writes the Go value it stands for: integers as they are,
    /// other numbers with Go's shortest `'g'` form, strings by [`Scalar::string`].
    pub fn of_leaf(v: &Value) -> Scalar {
        match v {
            Value::String(s) => Scalar::string(s),
            other => Scalar::plain(leaf_text(other)),
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn style(&self) -> Style {
        self.style
    }
}

/// The text of a JSON leaf that is not a string, as go-yaml writes it.
pub fn leaf_text(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.to_string()
            } else if let Some(u) = n.as_u64() {
                u.to_string()
            } else {
                format_float(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::String(s) => s.clone(),
        // Not reached: collections are nodes, not leaves.
        Value::Array(_) | Value::Object(_) => String::new(),
    }
}

impl Node {
    /// A decoded Go `map[string]any` (or any value inside one): keys in go-yaml's order.
    pub fn any(v: &Value) -> Node {
        match v {
            Value::Object(m) => {
                let mut entries: Vec<(&String, &Value)> = m.iter().collect();
                entries.sort_by(|a, b| key_order(a.0, b.0));
                Node::Map(
                    entries
                        .into_iter()
                        .map(|(k, x)| (Scalar::key(k), Node::any(x)))
                        .collect(),
                )
            }
            Value::Array(items) => Node::Seq(items.iter().map(Node::any).collect()),
            leaf => Node::Scalar(Scalar::of_leaf(leaf)),
        }
    }

    /// A decoded value with its keys in the order they were read (a Go struct's fields kept as
    /// they came, such as a talosconfig context's fields this collection does not know).
    pub fn in_order(v: &Value) -> Node {
        match v {
            Value::Object(m) => Node::Map(
                m.iter()
                    .map(|(k, x)| (Scalar::key(k), Node::in_order(x)))
                    .collect(),
            ),
            Value::Array(items) => Node::Seq(items.iter().map(Node::in_order).collect()),
            leaf => Node::Scalar(Scalar::of_leaf(leaf)),
        }
    }

    /// A mapping with fixed key order (a Go struct's fields).
    pub fn fields(entries: Vec<(&str, Node)>) -> Node {
        Node::Map(
            entries
                .into_iter()
                .map(|(k, v)| (Scalar::key(k), v))
                .collect(),
        )
    }
}

/// One document, as `yaml.Marshal` writes it.
pub fn emit(root: &Node, release: Release) -> String {
    let mut w = Writer {
        out: String::new(),
        release,
    };
    w.root(root);
    w.out
}

/// Mapping entries at `indent` spaces, for a document laid out partly by hand (a talosconfig's
/// context under its name).
pub fn emit_entries(out: &mut String, entries: &[(Scalar, Node)], indent: usize, release: Release) {
    let mut w = Writer {
        out: std::mem::take(out),
        release,
    };
    w.map_entries(entries, indent, false);
    *out = w.out;
}

/// go-yaml writes a key as a simple key (`key: value`) unless it is longer than 128 bytes or
/// holds a line break; then as a complex one, `? key` and `: value` on lines of their own
/// (`yaml_emitter_check_simple_key` in go.yaml.in/yaml/v4's emitter). Found by the oracle
/// (modules/config/tests/oracle_properties.rs) with a node annotation named "\n".
fn is_complex_key(k: &str) -> bool {
    k.len() > 128 || k.contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}'])
}

/// Writes the tree with go-yaml's block layout: mappings nested under a key are indented to the
/// next multiple of 4; anything directly inside a sequence item is indented 2 past the `-`.
struct Writer {
    out: String,
    /// The release's go-yaml quotes a few strings its own way (`quoted_for_yaml_1_1`).
    release: Release,
}

impl Writer {
    fn root(&mut self, node: &Node) {
        match node {
            Node::Map(entries) if !entries.is_empty() => self.map_entries(entries, 0, false),
            Node::Seq(items) if !items.is_empty() => self.seq_items(items, 0, false),
            other => {
                self.inline_value(other, 0, 0);
            }
        }
    }

    /// Mapping entries at `indent`; when `inline_first`, the first key follows a `- ` already
    /// written on the current line.
    fn map_entries(&mut self, entries: &[(Scalar, Node)], indent: usize, inline_first: bool) {
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 || !inline_first {
                self.spaces(indent);
            }
            if is_complex_key(&k.text) {
                self.out.push_str("? ");
                self.inline_value(&Node::Scalar(k.clone()), indent, next_level(indent));
                self.spaces(indent);
            } else {
                self.scalar_inline(k);
            }
            self.out.push(':');
            match v {
                Node::Map(e) if !e.is_empty() => {
                    self.out.push('\n');
                    self.map_entries(e, next_level(indent), false);
                }
                Node::Seq(items) if !items.is_empty() => {
                    self.out.push('\n');
                    self.seq_items(items, next_level(indent), false);
                }
                other => {
                    self.out.push(' ');
                    self.inline_value(other, indent, next_level(indent));
                }
            }
        }
    }

    fn seq_items(&mut self, items: &[Node], indent: usize, inline_first: bool) {
        for (i, item) in items.iter().enumerate() {
            if i > 0 || !inline_first {
                self.spaces(indent);
            }
            self.out.push_str("- ");
            match item {
                Node::Map(e) if !e.is_empty() => self.map_entries(e, indent + 2, true),
                Node::Seq(s) if !s.is_empty() => self.seq_items(s, indent + 2, true),
                other => self.inline_value(other, indent, indent + 2),
            }
        }
    }

    /// A scalar or empty collection after `key: ` or `- `, ending the line. `parent_indent` is
    /// the column of that key or `-`; `block_indent` is where literal block content goes.
    fn inline_value(&mut self, node: &Node, parent_indent: usize, block_indent: usize) {
        match node {
            Node::Map(_) => self.out.push_str("{}\n"),
            Node::Seq(_) => self.out.push_str("[]\n"),
            Node::Scalar(s) if s.style == Style::Literal => {
                self.literal(&s.text, parent_indent, block_indent)
            }
            Node::Scalar(s) => {
                self.scalar_inline(s);
                self.out.push('\n');
            }
        }
    }

    fn scalar_inline(&mut self, s: &Scalar) {
        match s.style {
            Style::Plain => self.out.push_str(&s.text),
            Style::Single => {
                self.out.push('\'');
                self.out.push_str(&s.text.replace('\'', "''"));
                self.out.push('\'');
            }
            Style::Double
                if self.release == Release::V4Rc6
                    && s.represented
                    && quoted_for_yaml_1_1(&s.text) =>
            {
                // Found by the oracle (modules/config/tests/oracle_generate.rs): Talos 1.14.1
                // writes `auto: 'off'`, 1.13.9 `auto: "off"`.
                self.out.push('\'');
                self.out.push_str(&s.text);
                self.out.push('\'');
            }
            Style::Double | Style::Literal => write_double_quoted(&mut self.out, &s.text),
        }
    }

    fn literal(&mut self, text: &str, parent_indent: usize, indent: usize) {
        if text.starts_with(' ') {
            // Content starting with a space needs an indentation indicator (a leading blank line
            // does not: go-yaml writes none, `writeBlockScalarHints` in internal/libyaml/emitter.go
            // @ v4.0.0-rc.4; found by the oracle), counted from the key or `-` that owns the scalar.
            // counted from the key or `-` that owns the scalar. Writing go-yaml's configured
            // indent (4) every time is right under a key but not inside a sequence item (content
            // 2 past the `-`), where the text would not parse back.
            match indent.checked_sub(parent_indent) {
                Some(step @ 1..=9) => {
                    self.out.push('|');
                    self.out.push(char::from(b'0' + step as u8));
                }
                // A scalar document has nothing to count from.
                _ => {
                    write_double_quoted(&mut self.out, text);
                    self.out.push('\n');
                    return;
                }
            }
        } else {
            self.out.push('|');
        }
        let trailing_breaks = text.len() - text.trim_end_matches('\n').len();
        match trailing_breaks {
            0 => self.out.push('-'),
            1 if text.len() > 1 => {}
            _ => self.out.push('+'),
        }
        self.out.push('\n');
        let mut at_line_start = true;
        for c in text.chars() {
            if c == '\n' {
                self.out.push('\n');
                at_line_start = true;
            } else {
                if at_line_start {
                    self.spaces(indent);
                    at_line_start = false;
                }
                self.out.push(c);
            }
        }
        if !at_line_start {
            self.out.push('\n');
        }
    }

    fn spaces(&mut self, n: usize) {
        self.out.extend(std::iter::repeat_n(' ', n));
    }
}

/// The indent of a collection nested under a mapping key at `indent`.
fn next_level(indent: usize) -> usize {
    4 * ((indent + 4) / 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::examples::STRINGS;

    fn one(value: Node, release: Release) -> String {
        emit(&Node::fields(vec![("auto", value)]), release)
    }

    #[test]
    fn the_examples_are_written_as_rc6_writes_them() {
        for (text, written) in STRINGS {
            let value = Node::Scalar(Scalar::string(text));
            assert_eq!(
                one(value, Release::V4Rc6),
                format!("auto: {written}\n"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn rc4_double_quotes_what_rc6_single_quotes() {
        for text in ["yes", "off", "1:20", "<<"] {
            let value = Node::Scalar(Scalar::string(text));
            assert_eq!(one(value, Release::V4Rc4), format!("auto: \"{text}\"\n"));
        }
    }

    /// The expected text is what go-yaml v4.0.0-rc.6 writes for these overlay options (asked through
    /// the oracle's `schematic` op; `modules/factory/tests/oracle_schematic.rs` keeps asking).
    #[test]
    fn a_go_map_is_written_in_go_yaml_key_order() {
        let v = serde_json::json!({"a10": 1, "a2": 2.5, "B": true, "b": null, "1": "x"});
        assert_eq!(
            emit(&Node::any(&v), Release::V4Rc6),
            "\"1\": x\nB: true\na2: 2.5\na10: 1\nb: null\n"
        );
    }

    #[test]
    fn entries_at_an_indent_nest_in_four_space_steps() {
        let v = serde_json::json!({"list": ["a", {"x": "1", "z": []}], "m": {}});
        let mut out = String::from("top:\n");
        emit_entries(
            &mut out,
            &[(Scalar::key("k"), Node::in_order(&v))],
            4,
            Release::V4Rc4,
        );
        assert_eq!(
            out,
            "top:\n    k:\n        list:\n            - a\n            - x: \"1\"\n              z: []\n        m: {}\n"
        );
    }
}
