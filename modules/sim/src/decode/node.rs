//! YAML text as a tree of nodes with their lines, the shape go-yaml's `yaml.Node` gives Talos's
//! decoder. Parsed with saphyr-parser, not with the YAML library the modules use, so the
//! simulator reads configs on its own.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span, SpannedEventReceiver};

#[derive(Clone, Debug, PartialEq)]
pub enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
    Folded,
}

#[derive(Clone, Debug)]
pub enum Kind {
    Scalar { value: String, style: Style },
    Sequence(Vec<Node>),
    Mapping(Vec<(Node, Node)>),
}

#[derive(Clone, Debug)]
pub struct Node {
    pub kind: Kind,
    /// 1-based, as go-yaml counts.
    pub line: usize,
    /// An explicit tag such as `!!str`, as written.
    pub tag: Option<String>,
    /// Written in flow style (`{...}`, `[...]`).
    pub flow: bool,
}

impl Node {
    /// go-yaml's short tag of a node as the decoder names it in errors (`!!map`, `!!seq`, and a
    /// scalar's resolved tag).
    pub fn short_tag(&self) -> String {
        if let Some(t) = &self.tag {
            return t.clone();
        }
        match &self.kind {
            Kind::Mapping(_) => "!!map".into(),
            Kind::Sequence(_) => "!!seq".into(),
            Kind::Scalar { .. } => crate::decode::resolve::resolve(self).tag().into(),
        }
    }

    pub fn scalar(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The value under `key` of a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            Kind::Mapping(entries) => entries
                .iter()
                .find(|(k, _)| k.scalar() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }
}

/// One `---` document: its root node, or `None` for an empty document.
pub struct Document {
    pub root: Option<Node>,
}

/// Parses every document of a stream. Aliases are replaced by copies of what they name.
pub fn parse(text: &str) -> Result<Vec<Document>, String> {
    let mut builder = Builder {
        chars: text.chars().collect(),
        stack: Vec::new(),
        anchors: HashMap::new(),
        docs: Vec::new(),
        current: None,
        error: None,
    };
    let mut parser = Parser::new_from_str(text);
    parser
        .load(&mut builder, true)
        .map_err(|e| format!("yaml: {e}"))?;
    if let Some(e) = builder.error {
        return Err(e);
    }
    Ok(builder.docs)
}

enum Open {
    Sequence(Node, Vec<Node>, usize),
    /// Entries so far and a key waiting for its value.
    Mapping(Node, Vec<(Node, Node)>, Option<Node>, usize),
}

struct Builder {
    chars: Vec<char>,
    stack: Vec<Open>,
    anchors: HashMap<usize, Node>,
    docs: Vec<Document>,
    current: Option<Node>,
    error: Option<String>,
}

impl Builder {
    /// A collection's span ends right after its `{` or `[` when it is written in flow style.
    fn flow_at(&self, span: &Span) -> bool {
        let end = span.end.index();
        end > 0 && matches!(self.chars.get(end - 1), Some('{' | '['))
    }

    /// A finished node goes into its parent, or becomes the document's root.
    fn push(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            Some(Open::Sequence(_, items, _)) => items.push(node),
            Some(Open::Mapping(_, entries, key, _)) => match key.take() {
                Some(k) => entries.push((k, node)),
                None => *key = Some(node),
            },
            None => self.current = Some(node),
        }
    }
}

fn tag_text(tag: Option<&saphyr_parser::Tag>) -> Option<String> {
    let t = tag?;
    // `!!str` arrives as handle `tag:yaml.org,2002:` with suffix `str`.
    if t.handle == "tag:yaml.org,2002:" || t.handle == "!!" {
        Some(format!("!!{}", t.suffix))
    } else {
        Some(format!("{}{}", t.handle, t.suffix))
    }
}

impl<'input> SpannedEventReceiver<'input> for Builder {
    fn on_event(&mut self, ev: Event<'input>, span: Span) {
        let line = span.start.line();
        match ev {
            Event::DocumentStart(_) => self.current = None,
            Event::DocumentEnd => {
                let root = self.current.take();
                self.docs.push(Document { root });
                self.anchors.clear();
            }
            Event::Scalar(value, style, anchor, tag) => {
                let style = match style {
                    ScalarStyle::Plain => Style::Plain,
                    ScalarStyle::SingleQuoted => Style::SingleQuoted,
                    ScalarStyle::DoubleQuoted => Style::DoubleQuoted,
                    ScalarStyle::Literal => Style::Literal,
                    ScalarStyle::Folded => Style::Folded,
                };
                let node = Node {
                    kind: Kind::Scalar {
                        value: value.into_owned(),
                        style,
                    },
                    line,
                    tag: tag_text(tag.as_deref()),
                    flow: false,
                };
                self.push(node, anchor);
            }
            Event::SequenceStart(anchor, tag) => {
                let node = Node {
                    kind: Kind::Sequence(Vec::new()),
                    line,
                    tag: tag_text(tag.as_deref()),
                    flow: self.flow_at(&span),
                };
                self.stack.push(Open::Sequence(node, Vec::new(), anchor));
            }
            Event::MappingStart(anchor, tag) => {
                let node = Node {
                    kind: Kind::Mapping(Vec::new()),
                    line,
                    tag: tag_text(tag.as_deref()),
                    flow: self.flow_at(&span),
                };
                self.stack
                    .push(Open::Mapping(node, Vec::new(), None, anchor));
            }
            Event::SequenceEnd => {
                if let Some(Open::Sequence(mut node, items, anchor)) = self.stack.pop() {
                    node.kind = Kind::Sequence(items);
                    self.push(node, anchor);
                }
            }
            Event::MappingEnd => {
                if let Some(Open::Mapping(mut node, entries, _, anchor)) = self.stack.pop() {
                    node.kind = Kind::Mapping(entries);
                    self.push(node, anchor);
                }
            }
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(node) => self.push(node, 0),
                None => self.error = Some(format!("yaml: line {line}: unknown anchor")),
            },
            Event::StreamStart | Event::StreamEnd | Event::Nothing => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_lines_styles_and_aliases() {
        let docs = parse("a: &x {b: 1}\nc: *x\nd: 'q'\n---\n---\ne: [1]\n").unwrap();
        assert_eq!(docs.len(), 3);
        let root = docs[0].root.as_ref().unwrap();
        assert!(root.get("a").unwrap().flow);
        assert_eq!(root.get("c").unwrap().get("b").unwrap().scalar(), Some("1"));
        assert_eq!(root.get("d").unwrap().line, 3);
        assert!(matches!(
            root.get("d").unwrap().kind,
            Kind::Scalar {
                style: Style::SingleQuoted,
                ..
            }
        ));
        // An empty document is nothing, or an empty (null) scalar, as go-yaml has it.
        assert!(docs[1].root.as_ref().is_none_or(|n| n.scalar() == Some("")));
        assert_eq!(docs[2].root.as_ref().unwrap().get("e").unwrap().line, 6);
        assert!(parse("a: [").is_err());
    }
}
