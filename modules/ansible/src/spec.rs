//! The argument spec a module declares: options, their types and the rules between them.

use std::fmt;

use serde_json::{Map, Value, json};

use crate::coerce;

/// The type of an option, with the coercions of Ansible's `AnsibleModule` (see [`coerce`](crate::coerce())).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Type {
    /// A string; numbers and booleans are converted (`5` becomes `"5"`, `true` becomes `"True"`).
    Str,
    /// `yes`/`no`/`true`/`false`/`on`/`off`/`y`/`n`/`t`/`f`/`1`/`0`, case-insensitive, and JSON booleans.
    Bool,
    /// A 64-bit integer; numeric strings such as `"5"` or `"5.0"` are converted.
    Int,
    /// A finite float; integers and numeric strings are converted.
    Float,
    /// A string with `$VAR` and `~` expanded.
    Path,
    /// A list; a string is split on commas. Elements are converted to the option's element type.
    List,
    /// A JSON object; a string holding a JSON object or `k=v` pairs is converted.
    Dict,
    /// Any JSON value, passed through untouched.
    Raw,
}

impl Type {
    /// The name Ansible uses for the type, as it appears in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Type::Str => "str",
            Type::Bool => "bool",
            Type::Int => "int",
            Type::Float => "float",
            Type::Path => "path",
            Type::List => "list",
            Type::Dict => "dict",
            Type::Raw => "raw",
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One option of a module: name, type and constraints. Built with chained calls.
#[derive(Clone)]
pub struct Opt {
    pub(crate) name: String,
    pub(crate) ty: Type,
    pub(crate) elements: Option<Type>,
    pub(crate) required: bool,
    pub(crate) default: Option<Value>,
    pub(crate) choices: Vec<Value>,
    pub(crate) aliases: Vec<String>,
    pub(crate) no_log: bool,
    pub(crate) options: Option<Box<Spec>>,
}

impl Opt {
    /// An option of the given type.
    pub fn new(name: impl Into<String>, ty: Type) -> Opt {
        Opt {
            name: name.into(),
            ty,
            elements: None,
            required: false,
            default: None,
            choices: Vec::new(),
            aliases: Vec::new(),
            no_log: false,
            options: None,
        }
    }

    /// A `str` option.
    pub fn str(name: impl Into<String>) -> Opt {
        Opt::new(name, Type::Str)
    }

    /// A `bool` option.
    pub fn bool(name: impl Into<String>) -> Opt {
        Opt::new(name, Type::Bool)
    }

    /// An `int` option.
    pub fn int(name: impl Into<String>) -> Opt {
        Opt::new(name, Type::Int)
    }

    /// A `float` option.
    pub fn float(name: impl Into<String>) -> Opt {
        Opt::new(name, Type::Float)
    }

    /// A `path` option.
    pub fn path(name: impl Into<String>) -> Opt {
        Opt::new(name, Type::Path)
    }

    /// A `list` option; its elements are `raw` unless [`Opt::elements`] says otherwise.
    pub fn list(name: impl Into<String>) -> Opt {
        Opt::new(name, Type::List)
    }

    /// A `dict` option.
    pub fn dict(name: impl Into<String>) -> Opt {
        Opt::new(name, Type::Dict)
    }

    /// A `raw` option: any JSON value.
    pub fn raw(name: impl Into<String>) -> Opt {
        Opt::new(name, Type::Raw)
    }

    /// The option must be given (a JSON `null` counts as not given).
    pub fn required(mut self) -> Opt {
        self.required = true;
        self
    }

    /// The value used when the option is not given. It goes through the same coercion as user input.
    pub fn default(mut self, value: impl Into<Value>) -> Opt {
        self.default = Some(value.into());
        self
    }

    /// The allowed values. For a list, every element must be one of them.
    pub fn choices<T: Clone + Into<Value>>(mut self, choices: &[T]) -> Opt {
        self.choices = choices.iter().cloned().map(Into::into).collect();
        self
    }

    /// Another name the option can be given by.
    pub fn alias(mut self, alias: impl Into<String>) -> Opt {
        self.aliases.push(alias.into());
        self
    }

    /// Other names the option can be given by.
    pub fn aliases(mut self, aliases: &[&str]) -> Opt {
        self.aliases.extend(aliases.iter().map(|a| a.to_string()));
        self
    }

    /// The option's value is secret: every string in it is masked anywhere in the output.
    pub fn no_log(mut self) -> Opt {
        self.no_log = true;
        self
    }

    /// The type of a list's elements.
    pub fn elements(mut self, ty: Type) -> Opt {
        self.elements = Some(ty);
        self
    }

    /// Sub-options of a `dict` option, or of each element of a list whose elements are `dict`.
    pub fn options(mut self, spec: Spec) -> Opt {
        self.options = Some(Box::new(spec));
        self
    }

    /// The option's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The option's type.
    pub fn ty(&self) -> Type {
        self.ty
    }
}

// Written by hand so that the default of a `no_log` option never shows up in logs or test output.
impl fmt::Debug for Opt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let default: &dyn fmt::Debug = match (&self.default, self.no_log) {
            (Some(_), true) => &"********",
            (d, _) => d,
        };
        f.debug_struct("Opt")
            .field("name", &self.name)
            .field("ty", &self.ty)
            .field("elements", &self.elements)
            .field("required", &self.required)
            .field("default", default)
            .field("choices", &self.choices)
            .field("aliases", &self.aliases)
            .field("no_log", &self.no_log)
            .field("options", &self.options)
            .finish()
    }
}

/// `required_if`: when `key` equals `value`, all (or, with `any`, at least one) of `requirements` must be set.
#[derive(Debug, Clone)]
pub(crate) struct RequiredIf {
    pub(crate) key: String,
    pub(crate) value: Value,
    pub(crate) requirements: Vec<String>,
    pub(crate) any: bool,
}

/// A module's argument spec: its options and the rules between them.
#[derive(Debug, Clone)]
pub struct Spec {
    pub(crate) opts: Vec<Opt>,
    pub(crate) mutually_exclusive: Vec<Vec<String>>,
    pub(crate) required_together: Vec<Vec<String>>,
    pub(crate) required_one_of: Vec<Vec<String>>,
    pub(crate) required_if: Vec<RequiredIf>,
    pub(crate) required_by: Vec<(String, Vec<String>)>,
    pub(crate) supports_check_mode: bool,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec::new()
    }
}

fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

impl Spec {
    /// The options in the shape of an Ansible argument spec (type, required, default, choices,
    /// elements, aliases, suboptions), for checking that a module's documentation says what its
    /// code takes. A `no_log` option's default is left out.
    pub fn describe(&self) -> Value {
        let mut options = Map::new();
        for opt in &self.opts {
            let mut entry = Map::new();
            entry.insert("type".into(), json!(opt.ty.name()));
            entry.insert("required".into(), json!(opt.required));
            if let (Some(default), false) = (&opt.default, opt.no_log) {
                entry.insert("default".into(), default.clone());
            }
            if !opt.choices.is_empty() {
                entry.insert("choices".into(), json!(opt.choices));
            }
            if let Some(elements) = opt.elements {
                entry.insert("elements".into(), json!(elements.name()));
            }
            if !opt.aliases.is_empty() {
                entry.insert("aliases".into(), json!(opt.aliases));
            }
            if opt.no_log {
                entry.insert("no_log".into(), json!(true));
            }
            if let Some(sub) = &opt.options {
                entry.insert("suboptions".into(), sub.describe());
            }
            options.insert(opt.name.clone(), Value::Object(entry));
        }
        Value::Object(options)
    }

    /// An empty spec of a module that supports check mode.
    pub fn new() -> Spec {
        Spec {
            opts: Vec::new(),
            mutually_exclusive: Vec::new(),
            required_together: Vec::new(),
            required_one_of: Vec::new(),
            required_if: Vec::new(),
            required_by: Vec::new(),
            supports_check_mode: true,
        }
    }

    /// Adds an option.
    pub fn option(mut self, opt: Opt) -> Spec {
        self.opts.push(opt);
        self
    }

    /// At most one of `names` may be given.
    pub fn mutually_exclusive(mut self, names: &[&str]) -> Spec {
        self.mutually_exclusive.push(owned(names));
        self
    }

    /// Either none or all of `names` must be set.
    pub fn required_together(mut self, names: &[&str]) -> Spec {
        self.required_together.push(owned(names));
        self
    }

    /// At least one of `names` must be set.
    pub fn required_one_of(mut self, names: &[&str]) -> Spec {
        self.required_one_of.push(owned(names));
        self
    }

    /// When option `key` equals `value`, all of `requirements` must be set.
    pub fn required_if(
        mut self,
        key: &str,
        value: impl Into<Value>,
        requirements: &[&str],
    ) -> Spec {
        self.required_if.push(RequiredIf {
            key: key.to_string(),
            value: value.into(),
            requirements: owned(requirements),
            any: false,
        });
        self
    }

    /// When option `key` equals `value`, at least one of `requirements` must be set.
    pub fn required_if_any(
        mut self,
        key: &str,
        value: impl Into<Value>,
        requirements: &[&str],
    ) -> Spec {
        self.required_if.push(RequiredIf {
            key: key.to_string(),
            value: value.into(),
            requirements: owned(requirements),
            any: true,
        });
        self
    }

    /// When option `key` is set, all of `requirements` must be set.
    pub fn required_by(mut self, key: &str, requirements: &[&str]) -> Spec {
        self.required_by
            .push((key.to_string(), owned(requirements)));
        self
    }

    /// Whether the module can run in check mode. When it cannot, a check-mode run is reported as
    /// skipped without calling the module body, as `AnsibleModule(supports_check_mode=False)` does.
    pub fn supports_check_mode(mut self, supported: bool) -> Spec {
        self.supports_check_mode = supported;
        self
    }

    /// The declared options.
    pub fn options(&self) -> &[Opt] {
        &self.opts
    }

    pub(crate) fn find(&self, name: &str) -> Option<&Opt> {
        self.opts.iter().find(|o| o.name == name)
    }

    /// The supported parameter names as Ansible lists them: sorted, aliases in brackets.
    pub(crate) fn supported_names(&self) -> String {
        let mut names: Vec<String> = self
            .opts
            .iter()
            .map(|o| {
                if o.aliases.is_empty() {
                    o.name.clone()
                } else {
                    let mut aliases = o.aliases.clone();
                    aliases.sort();
                    format!("{} ({})", o.name, aliases.join(", "))
                }
            })
            .collect();
        names.sort();
        names.join(", ")
    }

    /// Finds mistakes in the spec itself (a bug in the module, not in the user's input): duplicate
    /// names, rules naming unknown options, defaults that do not fit their type or choices.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut seen: Vec<&str> = Vec::new();
        for opt in &self.opts {
            for name in std::iter::once(&opt.name).chain(&opt.aliases) {
                if name.is_empty() || name.starts_with("_ansible_") {
                    return Err(format!("option name '{name}' is reserved"));
                }
                if seen.contains(&name.as_str()) {
                    return Err(format!("option or alias '{name}' is declared twice"));
                }
                seen.push(name);
            }
            if opt.required && opt.default.is_some() {
                return Err(format!(
                    "option '{}' is required and has a default",
                    opt.name
                ));
            }
            if opt.elements.is_some() && opt.ty != Type::List {
                return Err(format!(
                    "option '{}' has elements but is not a list",
                    opt.name
                ));
            }
            if let Some(sub) = &opt.options {
                let dicts = opt.ty == Type::Dict
                    || (opt.ty == Type::List && opt.elements == Some(Type::Dict));
                if !dicts {
                    return Err(format!(
                        "option '{}' has sub-options but is neither a dict nor a list of dicts",
                        opt.name
                    ));
                }
                sub.check()
                    .map_err(|e| format!("{e} (in sub-options of '{}')", opt.name))?;
            }
            if let Some(default) = &opt.default {
                let value = coerce::coerce_option(opt, default, "")
                    .map_err(|e| format!("default of option '{}' is invalid: {e}", opt.name))?;
                if let Some(e) = coerce::check_choices(opt, &value) {
                    return Err(format!("default of option '{}' is invalid: {e}", opt.name));
                }
            }
        }
        let known = |name: &String| -> Result<(), String> {
            match self.find(name) {
                Some(_) => Ok(()),
                None => Err(format!(
                    "a rule names '{name}', which is not a declared option"
                )),
            }
        };
        let groups = self
            .mutually_exclusive
            .iter()
            .chain(&self.required_together)
            .chain(&self.required_one_of);
        for group in groups {
            group.iter().try_for_each(known)?;
        }
        for rule in &self.required_if {
            known(&rule.key)?;
            rule.requirements.iter().try_for_each(known)?;
        }
        for (key, requirements) in &self.required_by {
            known(key)?;
            requirements.iter().try_for_each(known)?;
        }
        Ok(())
    }
}
