//! Type coercion as `AnsibleModule` does it (`module_utils/common/validation.py`).
//!
//! Binary modules get the task's values with their JSON types kept (`"yes"` stays a string), so the
//! conversions Python modules get for free happen here. Deliberate differences from Python, each
//! chosen to reject likely mistakes instead of guessing:
//! - a JSON `null` counts as "not given" (the default applies, `required` fails);
//! - booleans are not accepted as `int` or `float`;
//! - lists and dicts are not converted to `str`;
//! - a string converted to a list has its items trimmed, and the empty string is the empty list.

use serde_json::{Map, Number, Value};

use crate::spec::{Opt, Type};

const TRUE_STRINGS: [&str; 6] = ["y", "yes", "on", "1", "true", "t"];
const FALSE_STRINGS: [&str; 6] = ["n", "no", "off", "0", "false", "f"];

/// The Python name of a JSON value's type, as Ansible's messages print it.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// A value as Python's `str()` would show it in a message: strings bare, `True`/`False`, `None`.
pub(crate) fn display(value: &Value) -> String {
    match value {
        Value::Null => "None".to_string(),
        Value::Bool(true) => "True".to_string(),
        Value::Bool(false) => "False".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A value as Python's `repr()` would show it: strings quoted.
fn repr(value: &Value) -> String {
    match value {
        Value::String(s) => format!("'{s}'"),
        other => display(other),
    }
}

/// Converts one value to `ty` as `AnsibleModule` would. The error is the detail that follows
/// "unable to convert to `<type>`: " in the message.
///
/// Deliberate differences from Python, each rejecting a likely mistake instead of guessing:
/// - a JSON `null` counts as "not given" (the default applies, `required` fails);
/// - booleans are not accepted as `int` or `float`, and `nan`/`inf` are not floats;
/// - lists and dicts are not converted to `str`;
/// - a string converted to a list has its items trimmed, and the empty string is the empty list.
pub(crate) fn coerce(ty: Type, value: &Value) -> Result<Value, String> {
    match ty {
        Type::Str => to_str(value).map(Value::String),
        Type::Bool => to_bool(value).map(Value::Bool),
        Type::Int => to_int(value).map(Value::from),
        Type::Float => {
            let f = to_float(value)?;
            Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| format!("{} cannot be converted to a float", repr(value)))
        }
        Type::Path => to_str(value).map(|s| Value::String(expand_path(&s))),
        Type::List => to_list(value).map(Value::Array),
        Type::Dict => to_dict(value).map(Value::Object),
        Type::Raw => Ok(value.clone()),
    }
}

/// Converts an option's value, elements included, with Ansible's wording for failures.
/// `context` names the parent option of a sub-option ("" at the top level).
pub(crate) fn coerce_option(opt: &Opt, value: &Value, context: &str) -> Result<Value, String> {
    let found_in = if context.is_empty() {
        String::new()
    } else {
        format!(" found in '{context}'")
    };
    let converted = coerce(opt.ty, value).map_err(|e| {
        format!(
            "argument '{}' is of type {}{found_in} and we were unable to convert to {}: {e}",
            opt.name,
            type_name(value),
            opt.ty
        )
    })?;
    let (Value::Array(items), Some(elements)) = (&converted, opt.elements) else {
        return Ok(converted);
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let item = coerce(elements, item).map_err(|e| {
            format!(
                "Elements value for option '{}'{found_in} is of type {} and we were unable to convert to {elements}: {e}",
                opt.name,
                type_name(item),
            )
        })?;
        out.push(item);
    }
    Ok(Value::Array(out))
}

/// Checks a converted value against the option's choices; returns Ansible's message on failure.
pub(crate) fn check_choices(opt: &Opt, value: &Value) -> Option<String> {
    if opt.choices.is_empty() {
        return None;
    }
    let allowed: Vec<String> = opt.choices.iter().map(display).collect();
    let list = allowed.join(", ");
    match value {
        Value::Array(items) => {
            let bad: Vec<String> = items
                .iter()
                .map(display)
                .filter(|item| !allowed.contains(item))
                .collect();
            if bad.is_empty() {
                None
            } else {
                Some(format!(
                    "value of {} must be one or more of: {list}. Got no match for: {}",
                    opt.name,
                    bad.join(", ")
                ))
            }
        }
        other => {
            let shown = display(other);
            if allowed.contains(&shown) {
                None
            } else {
                Some(format!(
                    "value of {} must be one of: {list}, got: {shown}",
                    opt.name
                ))
            }
        }
    }
}

/// YAML 1.1 turns an unquoted `yes` into a boolean and `str` turns that into `"True"`. When the
/// choices hold exactly one spelling of that boolean, Ansible maps the value back to it; so do we.
pub(crate) fn unmangle_yaml_bool(opt: &Opt, value: Value) -> Value {
    let spellings: &[&str] = match value.as_str() {
        Some("True") => &TRUE_STRINGS,
        Some("False") => &FALSE_STRINGS,
        _ => return value,
    };
    let matches: Vec<&Value> = opt
        .choices
        .iter()
        .filter(|c| c.as_str().is_some_and(|c| spellings.contains(&c)))
        .collect();
    match matches.as_slice() {
        [only] if !opt.choices.iter().any(|c| c.as_str() == value.as_str()) => (*only).clone(),
        _ => value,
    }
}

fn to_str(value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(_) | Value::Number(_) => Ok(display(value)),
        Value::Null => Err("None cannot be converted to a str".to_string()),
        Value::Array(_) | Value::Object(_) => Err(format!(
            "a {} is not converted to a string; quote the value if a string is meant",
            type_name(value)
        )),
    }
}

fn to_bool(value: &Value) -> Result<bool, String> {
    let invalid = || {
        format!(
            "The value {} is not a valid boolean. Valid booleans include: {}",
            repr(value),
            TRUE_STRINGS
                .iter()
                .chain(&FALSE_STRINGS)
                .map(|s| format!("'{s}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    match value {
        Value::Bool(b) => Ok(*b),
        Value::String(s) => {
            let s = s.trim().to_ascii_lowercase();
            if TRUE_STRINGS.contains(&s.as_str()) {
                Ok(true)
            } else if FALSE_STRINGS.contains(&s.as_str()) {
                Ok(false)
            } else {
                Err(invalid())
            }
        }
        Value::Number(n) => match n.as_f64() {
            Some(1.0) => Ok(true),
            Some(0.0) => Ok(false),
            _ => Err(invalid()),
        },
        _ => Err(format!(
            "{} cannot be converted to a bool",
            type_name(value)
        )),
    }
}

/// The largest magnitude an f64 can have and still fit an i64 (2^63).
const I64_BOUND: f64 = 9_223_372_036_854_775_808.0;

fn float_to_int(f: f64) -> Option<i64> {
    if f.is_finite() && f.fract() == 0.0 && (-I64_BOUND..I64_BOUND).contains(&f) {
        Some(f as i64)
    } else {
        None
    }
}

fn to_int(value: &Value) -> Result<i64, String> {
    let converted = match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            // u64 beyond i64 must not be squeezed through f64 into a wrong number.
            if n.is_f64() {
                n.as_f64().and_then(float_to_int)
            } else {
                None
            }
        }),
        Value::String(s) => {
            let s = s.trim();
            s.parse::<i64>()
                .ok()
                .or_else(|| s.parse::<f64>().ok().and_then(float_to_int))
        }
        _ => None,
    };
    converted.ok_or_else(|| format!("{} cannot be converted to an int", repr(value)))
}

fn to_float(value: &Value) -> Result<f64, String> {
    let converted = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match converted {
        Some(f) if f.is_finite() => Ok(f),
        _ => Err(format!("{} cannot be converted to a float", repr(value))),
    }
}

fn to_list(value: &Value) -> Result<Vec<Value>, String> {
    match value {
        Value::Array(items) => Ok(items.clone()),
        Value::String(s) if s.trim().is_empty() => Ok(Vec::new()),
        Value::String(s) => Ok(s
            .split(',')
            .map(|item| Value::String(item.trim().to_string()))
            .collect()),
        Value::Number(_) => Ok(vec![Value::String(display(value))]),
        _ => Err(format!(
            "{} cannot be converted to a list",
            type_name(value)
        )),
    }
}

fn to_dict(value: &Value) -> Result<Map<String, Value>, String> {
    match value {
        Value::Object(map) => Ok(map.clone()),
        Value::String(s) if s.trim_start().starts_with('{') => {
            match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(map)) => Ok(map),
                _ => Err("unable to evaluate string as dictionary".to_string()),
            }
        }
        Value::String(s) => parse_key_values(s),
        _ => Err(format!(
            "{} cannot be converted to a dict",
            type_name(value)
        )),
    }
}

/// Parses `k1=v1, k2=v2` or `k1=v1 k2=v2`; quotes protect separators inside a value.
fn parse_key_values(s: &str) -> Result<Map<String, Value>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quote: Option<char> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                if let Some(next) = chars.next() {
                    field.push(next);
                }
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => field.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, ',') => fields.push(std::mem::take(&mut field)),
            (None, c) if c.is_whitespace() => fields.push(std::mem::take(&mut field)),
            (None, c) => field.push(c),
        }
    }
    if quote.is_some() {
        return Err("unbalanced quotes in key=value string".to_string());
    }
    fields.push(field);
    let mut map = Map::new();
    for field in fields.into_iter().filter(|f| !f.is_empty()) {
        match field.split_once('=') {
            Some((key, value)) if !key.is_empty() => {
                map.insert(key.to_string(), Value::String(value.to_string()));
            }
            _ => {
                return Err(format!(
                    "dictionary requested, could not parse JSON or key=value ('{field}')"
                ));
            }
        }
    }
    Ok(map)
}

/// `os.path.expanduser(os.path.expandvars(value))`: `$VAR` and `${VAR}` are replaced when set,
/// then a leading `~` or `~/` becomes `$HOME`. `~user` is left as it is.
pub fn expand_path(value: &str) -> String {
    let expanded = expand_vars(value);
    let home = std::env::var("HOME").ok().filter(|h| !h.is_empty());
    match (home, expanded.strip_prefix('~')) {
        (Some(home), Some(rest)) if rest.is_empty() || rest.starts_with('/') => {
            let joined = format!("{}{rest}", home.trim_end_matches('/'));
            if joined.is_empty() {
                "/".to_string()
            } else {
                joined
            }
        }
        _ => expanded,
    }
}

fn expand_vars(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let (name, consumed) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        match std::env::var(name) {
            Ok(v) if !name.is_empty() => {
                out.push_str(&v);
                rest = &after[consumed..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bool_spellings() {
        for v in [
            json!(true),
            json!("yes"),
            json!("YES"),
            json!("on"),
            json!("1"),
            json!(1),
            json!("y"),
            json!(" True "),
            json!("t"),
            json!(1.0),
        ] {
            assert_eq!(coerce(Type::Bool, &v), Ok(json!(true)), "{v}");
        }
        for v in [
            json!(false),
            json!("no"),
            json!("Off"),
            json!("0"),
            json!(0),
            json!("n"),
            json!("FALSE"),
            json!("f"),
        ] {
            assert_eq!(coerce(Type::Bool, &v), Ok(json!(false)), "{v}");
        }
        let err = coerce(Type::Bool, &json!("maybe")).unwrap_err();
        assert!(
            err.starts_with(
                "The value 'maybe' is not a valid boolean. Valid booleans include: 'y', 'yes'"
            ),
            "{err}"
        );
        assert!(coerce(Type::Bool, &json!(2)).is_err());
        assert!(coerce(Type::Bool, &json!("")).is_err());
        assert_eq!(
            coerce(Type::Bool, &json!([])),
            Err("list cannot be converted to a bool".into())
        );
    }

    #[test]
    fn ints() {
        assert_eq!(coerce(Type::Int, &json!(5)), Ok(json!(5)));
        assert_eq!(coerce(Type::Int, &json!("5")), Ok(json!(5)));
        assert_eq!(coerce(Type::Int, &json!(" -7 ")), Ok(json!(-7)));
        assert_eq!(coerce(Type::Int, &json!("5.0")), Ok(json!(5)));
        assert_eq!(coerce(Type::Int, &json!(600.0)), Ok(json!(600)));
        assert_eq!(coerce(Type::Int, &json!("1e3")), Ok(json!(1000)));
        assert_eq!(
            coerce(Type::Int, &json!("abc")),
            Err("'abc' cannot be converted to an int".into())
        );
        assert_eq!(
            coerce(Type::Int, &json!("5.5")),
            Err("'5.5' cannot be converted to an int".into())
        );
        assert!(coerce(Type::Int, &json!(true)).is_err());
        assert!(coerce(Type::Int, &json!(u64::MAX)).is_err());
        assert!(coerce(Type::Int, &json!(1e300)).is_err());
        assert!(coerce(Type::Int, &json!("99999999999999999999")).is_err());
        assert_eq!(coerce(Type::Int, &json!(i64::MIN)), Ok(json!(i64::MIN)));
        assert!(coerce(Type::Int, &json!("nan")).is_err());
        assert!(coerce(Type::Int, &json!("inf")).is_err());
    }

    #[test]
    fn floats() {
        assert_eq!(coerce(Type::Float, &json!(1.5)), Ok(json!(1.5)));
        assert_eq!(coerce(Type::Float, &json!(2)), Ok(json!(2.0)));
        assert_eq!(coerce(Type::Float, &json!("2.25")), Ok(json!(2.25)));
        assert_eq!(
            coerce(Type::Float, &json!("nan")),
            Err("'nan' cannot be converted to a float".into())
        );
        assert!(coerce(Type::Float, &json!("inf")).is_err());
        assert!(coerce(Type::Float, &json!(false)).is_err());
    }

    #[test]
    fn strings_from_scalars() {
        assert_eq!(coerce(Type::Str, &json!("x")), Ok(json!("x")));
        assert_eq!(coerce(Type::Str, &json!(5)), Ok(json!("5")));
        assert_eq!(coerce(Type::Str, &json!(1.5)), Ok(json!("1.5")));
        assert_eq!(coerce(Type::Str, &json!(true)), Ok(json!("True")));
        assert_eq!(coerce(Type::Str, &json!(false)), Ok(json!("False")));
        assert!(coerce(Type::Str, &json!(["a"])).is_err());
        assert!(coerce(Type::Str, &json!({"a": 1})).is_err());
    }

    #[test]
    fn lists() {
        assert_eq!(coerce(Type::List, &json!(["a", 1])), Ok(json!(["a", 1])));
        assert_eq!(
            coerce(Type::List, &json!("a,b, c")),
            Ok(json!(["a", "b", "c"]))
        );
        assert_eq!(coerce(Type::List, &json!("")), Ok(json!([])));
        assert_eq!(coerce(Type::List, &json!(5)), Ok(json!(["5"])));
        assert_eq!(
            coerce(Type::List, &json!({"a": 1})),
            Err("dict cannot be converted to a list".into())
        );
        let opt = Opt::list("ports").elements(Type::Int);
        assert_eq!(coerce_option(&opt, &json!("1, 2"), ""), Ok(json!([1, 2])));
        assert_eq!(
            coerce_option(&opt, &json!([1, "x"]), ""),
            Err("Elements value for option 'ports' is of type str and we were unable to convert to int: 'x' cannot be converted to an int".into())
        );
    }

    #[test]
    fn dicts() {
        assert_eq!(coerce(Type::Dict, &json!({"a": 1})), Ok(json!({"a": 1})));
        assert_eq!(
            coerce(Type::Dict, &json!("{\"a\": [1]}")),
            Ok(json!({"a": [1]}))
        );
        assert_eq!(
            coerce(Type::Dict, &json!("a=1, b=2")),
            Ok(json!({"a": "1", "b": "2"}))
        );
        assert_eq!(
            coerce(Type::Dict, &json!("a=1 b='x y'")),
            Ok(json!({"a": "1", "b": "x y"}))
        );
        assert_eq!(coerce(Type::Dict, &json!("")), Ok(json!({})));
        assert!(coerce(Type::Dict, &json!("{not json")).is_err());
        assert!(coerce(Type::Dict, &json!("novalue")).is_err());
        assert!(coerce(Type::Dict, &json!("a='open")).is_err());
        assert!(coerce(Type::Dict, &json!(["a"])).is_err());
    }

    #[test]
    fn paths_expand_home_and_vars() {
        // HOME is only read, never set, so tests running in parallel cannot disturb each other.
        let home = std::env::var("HOME").unwrap_or_default();
        if !home.is_empty() {
            let trimmed = home.trim_end_matches('/');
            assert_eq!(expand_path("~"), trimmed);
            assert_eq!(
                expand_path("~/.talos/config"),
                format!("{trimmed}/.talos/config")
            );
            assert_eq!(expand_path("$HOME/x"), format!("{home}/x"));
            assert_eq!(expand_path("${HOME}/x"), format!("{home}/x"));
        }
        assert_eq!(expand_path("~other/x"), "~other/x");
        assert_eq!(
            expand_path("/a/$FERRO_SURELY_UNSET_VAR/b"),
            "/a/$FERRO_SURELY_UNSET_VAR/b"
        );
        assert_eq!(expand_path("/a/${unterminated"), "/a/${unterminated");
        assert_eq!(expand_path("cost$"), "cost$");
        assert_eq!(coerce(Type::Path, &json!("/etc/x")), Ok(json!("/etc/x")));
    }

    #[test]
    fn raw_passes_through() {
        let v = json!({"a": [null, 1.5, {"b": true}]});
        assert_eq!(coerce(Type::Raw, &v), Ok(v.clone()));
    }

    #[test]
    fn choices_and_yaml_bools() {
        let opt = Opt::str("mode").choices(&["auto", "reboot"]);
        assert_eq!(check_choices(&opt, &json!("auto")), None);
        assert_eq!(
            check_choices(&opt, &json!("bogus")).as_deref(),
            Some("value of mode must be one of: auto, reboot, got: bogus")
        );
        let list = Opt::list("modes").choices(&["a", "b"]);
        assert_eq!(
            check_choices(&list, &json!(["a", "c", "d"])).as_deref(),
            Some("value of modes must be one or more of: a, b. Got no match for: c, d")
        );
        let onoff = Opt::str("state").choices(&["on", "off", "auto"]);
        assert_eq!(unmangle_yaml_bool(&onoff, json!("True")), json!("on"));
        assert_eq!(unmangle_yaml_bool(&onoff, json!("False")), json!("off"));
        let ambiguous = Opt::str("state").choices(&["yes", "on"]);
        assert_eq!(unmangle_yaml_bool(&ambiguous, json!("True")), json!("True"));
        let nums = Opt::int("n").choices(&[1, 2]);
        assert_eq!(check_choices(&nums, &json!(2)), None);
        assert!(check_choices(&nums, &json!(3)).is_some());
    }
}
