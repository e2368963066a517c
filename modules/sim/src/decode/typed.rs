//! The typed decode of one document, as go-yaml v4's constructor does it
//! (`internal/libyaml/constructor.go` at v4.0.0-rc.4): walks the node with the document's Go
//! type and collects every value that cannot go where it is written, in go-yaml's words
//! (`line 5: cannot construct !!str `abc` into bool`). Unknown keys are not its business: go-yaml
//! skips them and CheckUnknownKeys reports them afterwards.

use super::node::{Kind, Node};
use super::resolve::{Resolved, resolve};
use super::table::{GoType, Named, Shape, Table};

pub struct TypeErrors(pub Vec<String>);

impl TypeErrors {
    /// go-yaml's `LoadErrors` text.
    pub fn message(&self) -> String {
        let mut s = String::from("yaml: construct errors:");
        for e in &self.0 {
            s.push_str("\n  ");
            s.push_str(e);
        }
        s
    }
}

pub fn check(table: &Table, root_type: &str, node: &Node) -> Result<(), TypeErrors> {
    let mut errors = Vec::new();
    construct(
        table,
        &GoType::Named(root_type.to_string()),
        node,
        &mut errors,
    );
    if errors.is_empty() {
        Ok(())
    } else {
        Err(TypeErrors(errors))
    }
}

fn construct(table: &Table, ty: &GoType, node: &Node, errors: &mut Vec<String>) {
    match ty {
        // null leaves a pointer nil.
        GoType::Pointer(inner) => {
            if !is_null(node) {
                construct(table, inner, node, errors);
            }
        }
        // Anything goes into an `any`, but go-yaml still builds its maps with unique keys.
        GoType::Any => any_duplicate_keys(node, errors),
        GoType::Named(name) => match table.named(name) {
            // A type the generator could not see (stdlib, third party) is trusted.
            None => {}
            Some(named) => construct_named(table, named, node, errors),
        },
        GoType::Slice(elem) => match &node.kind {
            Kind::Sequence(items) => {
                for item in items {
                    construct(table, elem, item, errors);
                }
            }
            Kind::Scalar { .. } => scalar_into(&type_name(table, ty), ty, node, errors),
            Kind::Mapping(_) => tag_error(node, &type_name(table, ty), errors),
        },
        GoType::Map(value) => match &node.kind {
            Kind::Mapping(entries) if duplicate_keys(entries, errors) => {}
            Kind::Mapping(entries) => {
                for (_, v) in entries {
                    construct(table, value, v, errors);
                }
            }
            _ if is_null(node) => {}
            _ => tag_error(node, &type_name(table, ty), errors),
        },
        GoType::Basic(_) => match &node.kind {
            Kind::Scalar { .. } => scalar_into(&type_name(table, ty), ty, node, errors),
            _ => tag_error(node, &type_name(table, ty), errors),
        },
    }
}

fn construct_named(table: &Table, named: &Named, node: &Node, errors: &mut Vec<String>) {
    let is_scalar = matches!(node.kind, Kind::Scalar { .. });
    if named.unmarshal_text && !is_scalar {
        errors.push(format!(
            "line {}: cannot construct {} into {} (TextUnmarshaler)",
            node.line,
            node.short_tag(),
            named.reflect_name
        ));
        return;
    }
    if named.reflect_name == "time.Duration" {
        return duration(node, errors);
    }
    // Its own UnmarshalYAML, or UnmarshalText for a scalar, decides; the simulator trusts it.
    if named.unmarshal_yaml || (named.unmarshal_text && is_scalar) {
        return;
    }
    match &named.shape {
        Shape::Struct { decoded, .. } => match &node.kind {
            Kind::Mapping(entries) if duplicate_keys(entries, errors) => {}
            Kind::Mapping(entries) => {
                for (k, v) in entries {
                    if let Some(field) = k.scalar().and_then(|k| decoded.get(k)) {
                        construct(table, field, v, errors);
                    }
                }
            }
            _ if is_null(node) => {}
            _ => tag_error(node, &named.reflect_name, errors),
        },
        // Errors below a named slice or map print its underlying type, not its name.
        Shape::Alias(underlying) => match (&node.kind, underlying) {
            (Kind::Scalar { .. }, GoType::Basic(_)) => {
                scalar_into(&named.reflect_name, underlying, node, errors)
            }
            _ => construct(table, underlying, node, errors),
        },
    }
}

/// go-yaml's unique keys, which Talos's decoder keeps on: a mapping that names a key twice is
/// refused, each repeat with the line of the first, and nothing under it is constructed
/// (`Constructor.mapping` in internal/libyaml/constructor.go @ v4.0.0-rc.4; found by the oracle,
/// modules/sim/tests/oracle_verdicts.rs: the simulator took the last one). True when it refused.
fn duplicate_keys(entries: &[(Node, Node)], errors: &mut Vec<String>) -> bool {
    let before = errors.len();
    for (i, (first, _)) in entries.iter().enumerate() {
        for (again, _) in &entries[i + 1..] {
            if let (Some(a), Some(b)) = (first.scalar(), again.scalar())
                && a == b
            {
                errors.push(format!(
                    "line {}: mapping key {a:?} already defined at line {}",
                    again.line, first.line
                ));
            }
        }
    }
    errors.len() > before
}

fn any_duplicate_keys(node: &Node, errors: &mut Vec<String>) {
    match &node.kind {
        Kind::Mapping(entries) if duplicate_keys(entries, errors) => {}
        Kind::Mapping(entries) => entries
            .iter()
            .for_each(|(_, v)| any_duplicate_keys(v, errors)),
        Kind::Sequence(items) => items.iter().for_each(|v| any_duplicate_keys(v, errors)),
        Kind::Scalar { .. } => {}
    }
}

/// A scalar into a basic Go kind (or a named type with that underlying kind).
fn scalar_into(printed: &str, ty: &GoType, node: &Node, errors: &mut Vec<String>) {
    let resolved = resolve(node);
    if resolved == Resolved::Null {
        return;
    }
    let value = node.scalar().unwrap_or("");
    let basic = match ty {
        GoType::Basic(b) => b.as_str(),
        GoType::Slice(elem) if matches!(elem.as_ref(), GoType::Basic(b) if b == "byte" || b == "uint8") =>
        {
            // Only !!binary goes into []byte.
            if node.tag.as_deref() == Some("!!binary") {
                return;
            }
            return tag_error(node, printed, errors);
        }
        _ => return tag_error(node, printed, errors),
    };
    let ok = match basic {
        "string" => true,
        "bool" => match resolved {
            Resolved::Bool(_) => true,
            // go-yaml's YAML 1.1 courtesy for typed booleans.
            Resolved::Str => matches!(
                value,
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
            ),
            _ => false,
        },
        "int" | "int8" | "int16" | "int32" | "int64" => int_fits(basic, &resolved),
        "uint" | "uint8" | "uint16" | "uint32" | "uint64" | "uintptr" | "byte" => {
            uint_fits(basic, &resolved)
        }
        "float32" | "float64" => matches!(
            resolved,
            Resolved::Int(_) | Resolved::Uint(_) | Resolved::Float(_)
        ),
        _ => true,
    };
    if !ok {
        tag_error(node, printed, errors);
    }
}

/// go-yaml's special case for `time.Duration`: a string Go's `time.ParseDuration` reads, or 0.
fn duration(node: &Node, errors: &mut Vec<String>) {
    let ok = match (&node.kind, resolve(node)) {
        (_, Resolved::Null) | (_, Resolved::Int(0)) => true,
        (Kind::Scalar { value, .. }, Resolved::Str) => is_go_duration(value),
        _ => false,
    };
    if !ok {
        tag_error(node, "time.Duration", errors);
    }
}

/// `time.ParseDuration`'s grammar: an optional sign, then numbers with units (`1h30m`, `1.5s`).
fn is_go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let number = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number == 0 || rest[..number] == *"." {
            return false;
        }
        rest = &rest[number..];
        let Some(unit) = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
            .iter()
            .find(|u| rest.starts_with(**u))
        else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

/// A null scalar: go-yaml leaves the target at its zero value.
fn is_null(node: &Node) -> bool {
    matches!(node.kind, Kind::Scalar { .. }) && resolve(node) == Resolved::Null
}

fn int_bits(basic: &str) -> u32 {
    match basic {
        "int8" | "uint8" | "byte" => 8,
        "int16" | "uint16" => 16,
        "int32" | "uint32" => 32,
        _ => 64,
    }
}

fn int_fits(basic: &str, r: &Resolved) -> bool {
    let bits = int_bits(basic);
    let (min, max) = if bits == 64 {
        (i64::MIN as i128, i64::MAX as i128)
    } else {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    };
    let v: i128 = match r {
        Resolved::Int(i) => *i as i128,
        Resolved::Uint(u) => *u as i128,
        Resolved::Float(f) if f.fract() == 0.0 && f.is_finite() => *f as i128,
        _ => return false,
    };
    (min..=max).contains(&v)
}

fn uint_fits(basic: &str, r: &Resolved) -> bool {
    let bits = int_bits(basic);
    let max: i128 = if bits == 64 {
        u64::MAX as i128
    } else {
        (1i128 << bits) - 1
    };
    let v: i128 = match r {
        Resolved::Int(i) => *i as i128,
        Resolved::Uint(u) => *u as i128,
        Resolved::Float(f) if f.fract() == 0.0 && f.is_finite() => *f as i128,
        _ => return false,
    };
    (0..=max).contains(&v)
}

/// go-yaml's `tagError`: the node's tag, a scalar's first characters, and the Go type.
fn tag_error(node: &Node, printed: &str, errors: &mut Vec<String>) {
    let tag = node.short_tag();
    let value = match &node.kind {
        Kind::Scalar { value, .. } => {
            if value.chars().count() > 10 {
                format!(" `{}...`", value.chars().take(7).collect::<String>())
            } else {
                format!(" `{value}`")
            }
        }
        _ => String::new(),
    };
    errors.push(format!(
        "line {}: cannot construct {tag}{value} into {printed}",
        node.line
    ));
}

/// How Go's reflection prints a type (`[]string`, `map[string]string`, `v1alpha1.Device`).
fn type_name(table: &Table, ty: &GoType) -> String {
    match ty {
        GoType::Pointer(inner) => format!("*{}", type_name(table, inner)),
        GoType::Slice(inner) => format!("[]{}", type_name(table, inner)),
        GoType::Map(inner) => format!("map[string]{}", type_name(table, inner)),
        GoType::Any => "interface {}".into(),
        GoType::Basic(b) if b == "byte" => "uint8".into(),
        GoType::Basic(b) => b.clone(),
        GoType::Named(n) => table
            .named(n)
            .map(|x| x.reflect_name.clone())
            .unwrap_or_else(|| n.clone()),
    }
}
