//! Validated arguments and their typed accessors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use serde_json::{Map, Value};

/// A module's validated arguments: every value has its option's type, defaults are filled in.
///
/// Accessors take the option's canonical name (not an alias). Asking for a name the spec does not
/// declare is a bug in the module and panics with a message naming the option; `run_module` turns
/// that panic into a failed result.
#[derive(Clone, Default)]
pub struct Params {
    pub(crate) values: Map<String, Value>,
    pub(crate) given: BTreeSet<String>,
    pub(crate) declared: BTreeSet<String>,
    pub(crate) secret: BTreeSet<String>,
    pub(crate) subs: BTreeMap<String, Sub>,
}

#[derive(Clone)]
pub(crate) enum Sub {
    One(Params),
    Many(Vec<Params>),
}

impl Params {
    fn lookup(&self, name: &str) -> Option<&Value> {
        if !self.declared.contains(name) {
            panic!("option '{name}' is not declared in the module's argument spec");
        }
        self.values.get(name).filter(|v| !v.is_null())
    }

    /// The value of any option, as JSON.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.lookup(name)
    }

    /// The value of a `raw` option (or any other, as JSON).
    pub fn raw(&self, name: &str) -> Option<&Value> {
        self.lookup(name)
    }

    /// The value of a `str` or `path` option.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.lookup(name).and_then(Value::as_str)
    }

    /// The value of a `bool` option; `false` when it is unset and has no default.
    pub fn bool(&self, name: &str) -> bool {
        self.bool_opt(name).unwrap_or(false)
    }

    /// The value of a `bool` option, `None` when it is unset and has no default.
    pub fn bool_opt(&self, name: &str) -> Option<bool> {
        self.lookup(name).and_then(Value::as_bool)
    }

    /// The value of an `int` option.
    pub fn int(&self, name: &str) -> Option<i64> {
        self.lookup(name).and_then(Value::as_i64)
    }

    /// The value of a `float` option.
    pub fn float(&self, name: &str) -> Option<f64> {
        self.lookup(name).and_then(Value::as_f64)
    }

    /// The value of a `path` option, with `~` and `$VAR` already expanded.
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.str(name).map(PathBuf::from)
    }

    /// The value of a `list` option.
    pub fn list(&self, name: &str) -> Option<&[Value]> {
        self.lookup(name)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
    }

    /// The value of a list whose elements are `str` (or `path`); `None` if unset.
    pub fn str_list(&self, name: &str) -> Option<Vec<&str>> {
        self.list(name)?.iter().map(Value::as_str).collect()
    }

    /// The value of a `dict` option (with sub-option defaults filled in when it has sub-options).
    pub fn dict(&self, name: &str) -> Option<&Map<String, Value>> {
        self.lookup(name).and_then(Value::as_object)
    }

    /// The validated sub-options of a `dict` option that declares them.
    pub fn sub(&self, name: &str) -> Option<&Params> {
        self.lookup(name)?;
        match self.subs.get(name) {
            Some(Sub::One(p)) => Some(p),
            _ => None,
        }
    }

    /// The validated sub-options of each element of a list of dicts that declares them.
    pub fn sub_list(&self, name: &str) -> &[Params] {
        if self.lookup(name).is_none() {
            return &[];
        }
        match self.subs.get(name) {
            Some(Sub::Many(items)) => items,
            _ => &[],
        }
    }

    /// Whether the user gave the option (by its name or an alias), as opposed to its default.
    pub fn is_set(&self, name: &str) -> bool {
        self.lookup(name);
        self.given.contains(name)
    }

    /// All values, keyed by canonical option name.
    pub fn values(&self) -> &Map<String, Value> {
        &self.values
    }
}

// Written by hand so that `no_log` values never reach logs or test output.
impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (name, value) in &self.values {
            if self.secret.contains(name) && !value.is_null() {
                map.entry(name, &"********");
            } else if let Some(sub) = self.subs.get(name) {
                match sub {
                    Sub::One(p) => map.entry(name, p),
                    Sub::Many(items) => map.entry(name, items),
                };
            } else {
                map.entry(name, value);
            }
        }
        map.finish()
    }
}
