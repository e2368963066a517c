//! Arbitrary bytes as a module's args file, through the real protocol path (`execute`: read the
//! file, parse JSON, `_ansible_*` flags, validation against the spec, masking) for the spec of
//! every ferro.talos module.
//!
//! The body does no I/O: it only reads the validated values back through the typed accessors and
//! runs the modules' own option parsers that need no node (target, timeouts, upgrade request).
//!
//! Properties, for every module:
//! - no panic anywhere (a panic caught by `execute` comes back as an "internal error" result,
//!   which this target turns into a crash);
//! - a failed result always carries a non-empty `msg`, and `failed` agrees with the exit code;
//! - the result line is a JSON object;
//! - every validated value has its option's declared type.

#![no_main]

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Params, Spec, Type, execute};
use ferro_talos_tasks::{connection, talos_upgrade};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// What a module parses from its options before it needs a node.
type Extra = fn(&Params) -> Result<(), ModuleError>;

fn connection_options(p: &Params) -> Result<(), ModuleError> {
    connection::Target::from_params(p)?;
    connection::connect_options(p, Duration::from_secs(5))?;
    Ok(())
}

fn upgrade_options(p: &Params) -> Result<(), ModuleError> {
    connection_options(p)?;
    talos_upgrade::Request::from_params(p)?;
    Ok(())
}

fn nothing(_: &Params) -> Result<(), ModuleError> {
    Ok(())
}

/// Built once: the specs are the same for every input.
fn modules() -> &'static [(&'static str, Spec, Extra)] {
    use ferro_talos_tasks::*;
    static MODULES: OnceLock<Vec<(&'static str, Spec, Extra)>> = OnceLock::new();
    MODULES.get_or_init(|| {
        vec![
            ("talos_apply", talos_apply::spec(), connection_options),
            (
                "talos_bootstrap",
                talos_bootstrap::spec(),
                connection_options,
            ),
            ("talos_config", talos_config::spec(), nothing),
            (
                "talos_etcd_snapshot",
                talos_etcd_snapshot::spec(),
                connection_options,
            ),
            ("talos_health", talos_health::spec(), connection_options),
            ("talos_info", talos_info::spec(), connection_options),
            (
                "talos_kubeconfig",
                talos_kubeconfig::spec(),
                connection_options,
            ),
            (
                "talos_kubernetes_upgrade",
                talos_kubernetes_upgrade::spec(),
                connection_options,
            ),
            ("talos_reset", talos_reset::spec(), connection_options),
            ("talos_upgrade", talos_upgrade::spec(), upgrade_options),
        ]
    })
}

/// One args file per fuzzing process, on tmpfs when there is one.
fn args_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = ["/dev/shm", "/tmp"]
            .iter()
            .map(PathBuf::from)
            .find(|d| d.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        dir.join(format!("ferro-fuzz-args-{}.json", std::process::id()))
    })
}

/// Panics (inside `execute`, so it is reported as an internal error) when a validated value does
/// not have its option's declared type.
fn check_types(module: &str, spec: &Spec, p: &Params) {
    for opt in spec.options() {
        let name = opt.name();
        let Some(value) = p.get(name) else { continue };
        let ok = match opt.ty() {
            Type::Str | Type::Path => p.str(name).is_some(),
            Type::Bool => p.bool_opt(name).is_some(),
            Type::Int => p.int(name).is_some(),
            Type::Float => p.float(name).is_some_and(f64::is_finite),
            Type::List => p.list(name).is_some(),
            Type::Dict => p.dict(name).is_some(),
            _ => true,
        };
        assert!(
            ok,
            "{module}: option {name} validated as {} but holds a {}",
            opt.ty(),
            json_type(value)
        );
        // is_set must not panic for a declared option.
        p.is_set(name);
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

fuzz_target!(|data: &[u8]| {
    let path = args_path();
    let written = std::fs::File::create(path).and_then(|mut f| f.write_all(data));
    if let Err(e) = written {
        panic!("cannot write the args file {}: {e}", path.display());
    }
    for (module, spec, extra) in modules() {
        let outcome = execute(
            module,
            spec,
            Some(path),
            |_ctx: &mut Context, p: &Params| {
                check_types(module, spec, p);
                extra(p)?;
                Ok(ModuleResult::unchanged())
            },
        );
        let msg = outcome.msg().unwrap_or("");
        if outcome.json.get("panic_location").is_some() || msg.contains("this is a bug") {
            panic!(
                "{module}: internal error: {msg} at {}",
                outcome.json["panic_location"]
            );
        }
        assert_eq!(
            outcome.failed(),
            outcome.exit_code == 1,
            "{module}: failed and exit code disagree"
        );
        if outcome.failed() {
            assert!(
                !msg.trim().is_empty(),
                "{module}: failed without a message: {}",
                outcome.to_line()
            );
        }
        let line = outcome.to_line();
        match serde_json::from_str::<Value>(&line) {
            Ok(Value::Object(_)) => {}
            other => panic!("{module}: result line is not a JSON object: {other:?}"),
        }
    }
});
