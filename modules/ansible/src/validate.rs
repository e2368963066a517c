//! Checks arguments against a spec in the order `ArgumentSpecValidator.validate` does, and reports
//! the first problem with its wording.
//!
//! One deliberate difference: unknown options are reported before anything else, because a typo
//! in an option name otherwise surfaces as a confusing "missing required arguments".

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::coerce::{self, display};
use crate::error::{ArgsError, ArgsErrorKind};
use crate::params::{Params, Sub};
use crate::spec::{Spec, Type};

/// Knobs that come from the `_ansible_*` keys rather than the spec.
pub(crate) struct Validation<'a> {
    pub(crate) module: &'a str,
    pub(crate) ignore_unknown: bool,
    pub(crate) warnings: Vec<String>,
}

fn found_in(context: &[String]) -> String {
    if context.is_empty() {
        String::new()
    } else {
        format!(" found in {}", context.join(" -> "))
    }
}

fn present(values: &Map<String, Value>, name: &str) -> bool {
    values.get(name).is_some_and(|v| !v.is_null())
}

impl Validation<'_> {
    pub(crate) fn run(
        &mut self,
        spec: &Spec,
        input: &Map<String, Value>,
        context: &[String],
    ) -> Result<Params, ArgsError> {
        let err =
            |kind, msg: String| Err(ArgsError::new(kind, format!("{msg}{}", found_in(context))));

        // Unknown keys. `_ansible_*` keys are Ansible's own and only exist at the top level.
        let mut unknown: Vec<String> = input
            .keys()
            .filter(|k| !(context.is_empty() && k.starts_with("_ansible_")))
            .filter(|k| {
                !spec
                    .opts
                    .iter()
                    .any(|o| &o.name == *k || o.aliases.contains(k))
            })
            .map(|k| {
                context
                    .iter()
                    .chain(std::iter::once(k))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(".")
            })
            .collect();
        if !unknown.is_empty() && !self.ignore_unknown {
            unknown.sort();
            return Err(ArgsError::new(
                ArgsErrorKind::Unsupported,
                format!(
                    "Unsupported parameters for ({}) module: {}. Supported parameters include: {}.",
                    self.module,
                    unknown.join(", "),
                    spec.supported_names()
                ),
            ));
        }

        // Resolve aliases. Like Ansible, an alias wins over the canonical name, with a warning.
        let mut given: Map<String, Value> = Map::new();
        for opt in &spec.opts {
            let mut value = input.get(&opt.name).filter(|v| !v.is_null());
            for alias in &opt.aliases {
                if let Some(v) = input.get(alias).filter(|v| !v.is_null()) {
                    if value.is_some() {
                        self.warnings.push(format!(
                            "Both option {} and its alias {alias} are set.",
                            opt.name
                        ));
                    }
                    value = Some(v);
                }
            }
            if let Some(v) = value {
                given.insert(opt.name.clone(), v.clone());
            }
        }

        for group in &spec.mutually_exclusive {
            let count = group
                .iter()
                .filter(|n| given.contains_key(n.as_str()))
                .count();
            if count > 1 {
                let bad: Vec<String> = spec
                    .mutually_exclusive
                    .iter()
                    .filter(|g| g.iter().filter(|n| given.contains_key(n.as_str())).count() > 1)
                    .map(|g| g.join("|"))
                    .collect();
                return err(
                    ArgsErrorKind::MutuallyExclusive,
                    format!("parameters are mutually exclusive: {}", bad.join(", ")),
                );
            }
        }

        let mut missing: Vec<&str> = spec
            .opts
            .iter()
            .filter(|o| o.required && !given.contains_key(&o.name))
            .map(|o| o.name.as_str())
            .collect();
        if !missing.is_empty() {
            missing.sort();
            return err(
                ArgsErrorKind::Missing,
                format!("missing required arguments: {}", missing.join(", ")),
            );
        }

        let mut values: Map<String, Value> = Map::new();
        let context_str = context.join(" -> ");
        for opt in &spec.opts {
            let Some(raw) = given.get(&opt.name).or(opt.default.as_ref()) else {
                values.insert(opt.name.clone(), Value::Null);
                continue;
            };
            let value = coerce::coerce_option(opt, raw, &context_str)
                .map_err(|msg| ArgsError::new(ArgsErrorKind::Type, msg))?;
            let value = if opt.ty == Type::Str && !opt.choices.is_empty() {
                coerce::unmangle_yaml_bool(opt, value)
            } else {
                value
            };
            values.insert(opt.name.clone(), value);
        }
        for opt in &spec.opts {
            if let Some(msg) = values
                .get(&opt.name)
                .filter(|v| !v.is_null())
                .and_then(|v| coerce::check_choices(opt, v))
            {
                return err(ArgsErrorKind::Choices, msg);
            }
        }

        for group in &spec.required_together {
            let set = group.iter().filter(|n| present(&values, n)).count();
            if set > 0 && set < group.len() {
                return err(
                    ArgsErrorKind::RequiredTogether,
                    format!("parameters are required together: {}", group.join(", ")),
                );
            }
        }
        for group in &spec.required_one_of {
            if !group.iter().any(|n| present(&values, n)) {
                return err(
                    ArgsErrorKind::RequiredOneOf,
                    format!("one of the following is required: {}", group.join(", ")),
                );
            }
        }
        for rule in &spec.required_if {
            let Some(actual) = values.get(&rule.key).filter(|v| !v.is_null()) else {
                continue;
            };
            if display(actual) != display(&rule.value) {
                continue;
            }
            let missing: Vec<&str> = rule
                .requirements
                .iter()
                .filter(|n| !present(&values, n))
                .map(String::as_str)
                .collect();
            let fails = if rule.any {
                missing.len() == rule.requirements.len()
            } else {
                !missing.is_empty()
            };
            if fails && !missing.is_empty() {
                return err(
                    ArgsErrorKind::RequiredIf,
                    format!(
                        "{} is {} but {} of the following are missing: {}",
                        rule.key,
                        display(&rule.value),
                        if rule.any { "any" } else { "all" },
                        missing.join(", ")
                    ),
                );
            }
        }
        for (key, requirements) in &spec.required_by {
            if !present(&values, key) {
                continue;
            }
            let missing: Vec<&str> = requirements
                .iter()
                .filter(|n| !present(&values, n))
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                return err(
                    ArgsErrorKind::RequiredBy,
                    format!(
                        "missing parameter(s) required by '{key}': {}",
                        missing.join(", ")
                    ),
                );
            }
        }

        let mut subs = BTreeMap::new();
        for opt in &spec.opts {
            let Some(sub_spec) = &opt.options else {
                continue;
            };
            let mut sub_context = context.to_vec();
            sub_context.push(opt.name.clone());
            match values.get_mut(&opt.name) {
                Some(Value::Object(map)) => {
                    let params = self.run(sub_spec, map, &sub_context)?;
                    *map = params.values.clone();
                    subs.insert(opt.name.clone(), Sub::One(params));
                }
                Some(Value::Array(items)) => {
                    let mut all = Vec::with_capacity(items.len());
                    for item in items.iter_mut() {
                        // Elements were converted to dicts above, so this always matches.
                        if let Value::Object(map) = item {
                            let params = self.run(sub_spec, map, &sub_context)?;
                            *map = params.values.clone();
                            all.push(params);
                        }
                    }
                    subs.insert(opt.name.clone(), Sub::Many(all));
                }
                _ => {}
            }
        }

        Ok(Params {
            values,
            given: given.keys().cloned().collect(),
            declared: spec.opts.iter().map(|o| o.name.clone()).collect(),
            secret: spec
                .opts
                .iter()
                .filter(|o| o.no_log)
                .map(|o| o.name.clone())
                .collect(),
            subs,
        })
    }
}

/// Every string that a `no_log` option holds in `input` (raw, before conversion) and in its
/// default, so that even messages about invalid values are masked.
pub(crate) fn no_log_values(spec: &Spec, input: &Map<String, Value>, out: &mut BTreeSet<String>) {
    for opt in &spec.opts {
        let given = std::iter::once(&opt.name)
            .chain(&opt.aliases)
            .filter_map(|n| input.get(n));
        if opt.no_log {
            for value in given.chain(opt.default.as_ref()) {
                leaves(value, out);
            }
        } else if let Some(sub) = &opt.options {
            for value in given {
                match value {
                    Value::Object(map) => no_log_values(sub, map, out),
                    Value::Array(items) => {
                        for item in items {
                            if let Value::Object(map) = item {
                                no_log_values(sub, map, out);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Adds the converted values of `no_log` options (a `path` changes when `~` is expanded).
pub(crate) fn no_log_params(params: &Params, out: &mut BTreeSet<String>) {
    for (name, value) in &params.values {
        if params.secret.contains(name) {
            leaves(value, out);
        }
    }
    for sub in params.subs.values() {
        match sub {
            Sub::One(p) => no_log_params(p, out),
            Sub::Many(items) => items.iter().for_each(|p| no_log_params(p, out)),
        }
    }
}

/// The scalar leaves of a value as strings. Booleans and nulls carry no secret.
fn leaves(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            out.insert(s.clone());
        }
        Value::Number(n) => {
            out.insert(n.to_string());
        }
        Value::Array(items) => items.iter().for_each(|v| leaves(v, out)),
        Value::Object(map) => map.values().for_each(|v| leaves(v, out)),
        Value::Bool(_) | Value::Null => {}
    }
}

impl Spec {
    /// Validates `args` (the args file's object; `_ansible_*` keys are ignored) against this spec.
    /// `module` is the name used in the "Unsupported parameters" message.
    pub fn validate(&self, module: &str, args: &Map<String, Value>) -> Result<Params, ArgsError> {
        self.check().map_err(|e| {
            ArgsError::new(
                ArgsErrorKind::InvalidSpec,
                format!("invalid argument spec: {e}"),
            )
        })?;
        let mut validation = Validation {
            module,
            ignore_unknown: false,
            warnings: Vec::new(),
        };
        validation.run(self, args, &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Opt;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("test args must be an object"),
        }
    }

    fn spec() -> Spec {
        Spec::new()
            .option(Opt::str("name").required().alias("n"))
            .option(Opt::bool("force").default(false))
            .option(Opt::path("dest"))
            .option(Opt::list("patches").elements(Type::Raw))
            .option(Opt::dict("secrets").no_log())
            .option(
                Opt::str("mode")
                    .choices(&["auto", "reboot"])
                    .default("auto"),
            )
            .option(Opt::int("timeout").default(600))
    }

    fn msg(spec: &Spec, v: Value) -> String {
        match spec.validate("talos_apply", &args(v)) {
            Ok(p) => panic!("expected an error, got {p:?}"),
            Err(e) => e.msg().to_string(),
        }
    }

    #[test]
    fn defaults_and_accessors() {
        let p = spec()
            .validate(
                "m",
                &args(json!({"name": "x", "timeout": "5", "_ansible_check_mode": true})),
            )
            .unwrap();
        assert_eq!(p.str("name"), Some("x"));
        assert!(!p.bool("force"));
        assert_eq!(p.bool_opt("force"), Some(false));
        assert_eq!(p.int("timeout"), Some(5));
        assert_eq!(p.str("mode"), Some("auto"));
        assert_eq!(p.path("dest"), None);
        assert!(p.list("patches").is_none());
        assert!(p.is_set("name") && p.is_set("timeout"));
        assert!(!p.is_set("mode") && !p.is_set("force"));
    }

    #[test]
    #[should_panic(expected = "option 'nmae' is not declared")]
    fn undeclared_accessor_is_a_bug() {
        let p = spec().validate("m", &args(json!({"name": "x"}))).unwrap();
        let _ = p.str("nmae");
    }

    #[test]
    fn null_means_not_given() {
        assert_eq!(
            msg(&spec(), json!({"name": null})),
            "missing required arguments: name"
        );
        let p = spec()
            .validate("m", &args(json!({"name": "x", "timeout": null})))
            .unwrap();
        assert_eq!(p.int("timeout"), Some(600));
        assert!(!p.is_set("timeout"));
    }

    #[test]
    fn aliases() {
        let p = spec()
            .validate("m", &args(json!({"n": "via-alias"})))
            .unwrap();
        assert_eq!(p.str("name"), Some("via-alias"));
        assert!(p.is_set("name"));
        let mut v = Validation {
            module: "m",
            ignore_unknown: false,
            warnings: vec![],
        };
        let p = v
            .run(&spec(), &args(json!({"name": "a", "n": "b"})), &[])
            .unwrap();
        assert_eq!(p.str("name"), Some("b"));
        assert_eq!(
            v.warnings,
            vec!["Both option name and its alias n are set."]
        );
    }

    #[test]
    fn unsupported_lists_valid_names() {
        assert_eq!(
            msg(&spec(), json!({"name": "x", "foo": 1, "bar": 2})),
            "Unsupported parameters for (talos_apply) module: bar, foo. Supported parameters include: \
             dest, force, mode, name (n), patches, secrets, timeout."
        );
        let mut v = Validation {
            module: "m",
            ignore_unknown: true,
            warnings: vec![],
        };
        assert!(
            v.run(&spec(), &args(json!({"name": "x", "foo": 1})), &[])
                .is_ok()
        );
    }

    #[test]
    fn missing_required() {
        let s = spec().option(Opt::str("b").required());
        assert_eq!(msg(&s, json!({})), "missing required arguments: b, name");
    }

    #[test]
    fn type_errors() {
        assert_eq!(
            msg(&spec(), json!({"name": "x", "timeout": "soon"})),
            "argument 'timeout' is of type str and we were unable to convert to int: 'soon' cannot be converted to an int"
        );
        assert_eq!(
            msg(&spec(), json!({"name": "x", "force": "perhaps"}))
                .split(" Valid booleans")
                .next()
                .unwrap_or_default(),
            "argument 'force' is of type str and we were unable to convert to bool: The value 'perhaps' is not a valid boolean."
        );
        assert_eq!(
            msg(&spec(), json!({"name": ["x"]})),
            "argument 'name' is of type list and we were unable to convert to str: a list is not converted to a string; quote the value if a string is meant"
        );
    }

    #[test]
    fn choices() {
        assert_eq!(
            msg(&spec(), json!({"name": "x", "mode": "bogus"})),
            "value of mode must be one of: auto, reboot, got: bogus"
        );
        let s = Spec::new().option(Opt::str("state").choices(&["on", "off"]));
        let p = s.validate("m", &args(json!({"state": true}))).unwrap();
        assert_eq!(p.str("state"), Some("on"));
    }

    #[test]
    fn mutually_exclusive() {
        let s = Spec::new()
            .option(Opt::str("a"))
            .option(Opt::str("b"))
            .option(Opt::str("c").default("x"))
            .mutually_exclusive(&["a", "b"])
            .mutually_exclusive(&["a", "c"]);
        assert_eq!(
            msg(&s, json!({"a": 1, "b": 2})),
            "parameters are mutually exclusive: a|b"
        );
        assert_eq!(
            msg(&s, json!({"a": 1, "b": 2, "c": 3})),
            "parameters are mutually exclusive: a|b, a|c"
        );
        // A default does not count as given.
        assert!(s.validate("m", &args(json!({"a": 1}))).is_ok());
    }

    #[test]
    fn required_together_one_of_if_by() {
        let s = Spec::new()
            .option(
                Opt::str("state")
                    .choices(&["present", "absent"])
                    .default("present"),
            )
            .option(Opt::str("x"))
            .option(Opt::str("y"))
            .option(Opt::str("cert"))
            .option(Opt::str("key"))
            .option(Opt::bool("force"))
            .required_together(&["cert", "key"])
            .required_if("state", "present", &["x", "y"])
            .required_if_any("state", "absent", &["x", "y"])
            .required_by("force", &["x"]);
        assert_eq!(
            msg(&s, json!({"x": "1"})),
            "state is present but all of the following are missing: y"
        );
        assert_eq!(
            msg(&s, json!({})),
            "state is present but all of the following are missing: x, y"
        );
        assert_eq!(
            msg(&s, json!({"state": "absent"})),
            "state is absent but any of the following are missing: x, y"
        );
        assert!(
            s.validate("m", &args(json!({"state": "absent", "y": "1"})))
                .is_ok()
        );
        assert_eq!(
            msg(&s, json!({"x": "1", "y": "2", "cert": "c"})),
            "parameters are required together: cert, key"
        );
        assert_eq!(
            msg(&s, json!({"state": "absent", "y": "1", "force": "yes"})),
            "missing parameter(s) required by 'force': x"
        );
        let one = Spec::new()
            .option(Opt::str("a"))
            .option(Opt::str("b"))
            .required_one_of(&["a", "b"]);
        assert_eq!(
            msg(&one, json!({})),
            "one of the following is required: a, b"
        );
        let bool_if = Spec::new()
            .option(Opt::bool("wipe"))
            .option(Opt::str("disk"))
            .required_if("wipe", true, &["disk"]);
        assert_eq!(
            msg(&bool_if, json!({"wipe": "yes"})),
            "wipe is True but all of the following are missing: disk"
        );
    }

    #[test]
    fn sub_options() {
        let endpoint = Spec::new()
            .option(Opt::str("host").required())
            .option(Opt::int("port").default(50000))
            .option(Opt::str("token").no_log());
        let s = Spec::new()
            .option(Opt::dict("primary").options(endpoint.clone()))
            .option(
                Opt::list("endpoints")
                    .elements(Type::Dict)
                    .options(endpoint),
            );
        let p = s
            .validate(
                "m",
                &args(json!({"primary": {"host": "a"}, "endpoints": [{"host": "b", "port": "1"}, "host=c"]})),
            )
            .unwrap();
        let primary = p.sub("primary").unwrap();
        assert_eq!(primary.int("port"), Some(50000));
        assert!(!primary.is_set("port"));
        assert_eq!(p.dict("primary").unwrap().get("port"), Some(&json!(50000)));
        let hosts: Vec<_> = p
            .sub_list("endpoints")
            .iter()
            .map(|e| e.str("host"))
            .collect();
        assert_eq!(hosts, vec![Some("b"), Some("c")]);
        assert_eq!(p.sub_list("endpoints")[0].int("port"), Some(1));
        assert_eq!(
            msg(&s, json!({"primary": {}})),
            "missing required arguments: host found in primary"
        );
        assert_eq!(
            msg(&s, json!({"endpoints": [{"host": "b", "port": "x"}]})),
            "argument 'port' is of type str found in 'endpoints' and we were unable to convert to int: 'x' cannot be converted to an int"
        );
        assert_eq!(
            msg(&s, json!({"primary": {"host": "a", "prot": 1}})),
            "Unsupported parameters for (talos_apply) module: primary.prot. Supported parameters include: host, port, token."
        );
        assert!(p.sub("endpoints").is_none());
        let none = s.validate("m", &args(json!({}))).unwrap();
        assert!(none.sub("primary").is_none() && none.sub_list("endpoints").is_empty());
    }

    #[test]
    fn debug_hides_no_log_values() {
        let p = spec()
            .validate(
                "m",
                &args(json!({"name": "x", "secrets": {"k": "hunter22"}})),
            )
            .unwrap();
        let shown = format!("{p:?}");
        assert!(
            !shown.contains("hunter22") && shown.contains("********"),
            "{shown}"
        );
        let opt = Opt::str("pw").no_log().default("defaultpw");
        assert!(!format!("{opt:?}").contains("defaultpw"));
    }

    #[test]
    fn no_log_values_are_collected_raw_and_converted() {
        let s = Spec::new()
            .option(Opt::path("keyfile").no_log())
            .option(Opt::int("pin").no_log())
            .option(Opt::str("pw").no_log().default("defaultpw"))
            .option(Opt::dict("sub").options(Spec::new().option(Opt::str("token").no_log())));
        let input = args(json!({"keyfile": "$HOME/k", "pin": "1234", "sub": {"token": "tok-en"}}));
        let mut out = BTreeSet::new();
        no_log_values(&s, &input, &mut out);
        let p = s.validate("m", &input).unwrap();
        no_log_params(&p, &mut out);
        for expected in ["$HOME/k", "1234", "defaultpw", "tok-en"] {
            assert!(out.contains(expected), "{expected} in {out:?}");
        }
        if let Ok(home) = std::env::var("HOME") {
            assert!(out.contains(&format!("{home}/k")));
        }
    }

    #[test]
    fn spec_mistakes_are_reported() {
        let bad = [
            Spec::new()
                .option(Opt::str("a"))
                .option(Opt::str("b").alias("a")),
            Spec::new().option(Opt::str("a").required().default("x")),
            Spec::new().option(Opt::int("a").default("soon")),
            Spec::new().option(Opt::str("a").choices(&["x"]).default("y")),
            Spec::new()
                .option(Opt::str("a"))
                .mutually_exclusive(&["a", "zz"]),
            Spec::new()
                .option(Opt::str("a"))
                .required_if("zz", "x", &["a"]),
            Spec::new().option(Opt::str("_ansible_x")),
            Spec::new().option(Opt::str("a").elements(Type::Int)),
            Spec::new().option(Opt::str("a").options(Spec::new())),
        ];
        for spec in bad {
            let e = spec.validate("m", &Map::new()).unwrap_err();
            assert_eq!(e.kind(), ArgsErrorKind::InvalidSpec, "{e}");
        }
    }
}
