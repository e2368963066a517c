//! Ansible's binary-module protocol.
//!
//! Owns everything between Ansible and a module body: reading the args file named by `argv[1]`,
//! validating it against a typed [`Spec`] with `AnsibleModule`'s coercions and error wording,
//! the `_ansible_*` flags ([`Context`]), and printing exactly one JSON result in which every
//! `no_log` value and every registered secret is masked. It is the only crate that writes a
//! module's stdout, and it never talks to Talos or touches files other than the args file.
//!
//! # Example
//!
//! ```no_run
//! use ferro_ansible_protocol::{run_module, Diff, ModuleResult, Opt, Spec};
//!
//! fn main() {
//!     let spec = Spec::new()
//!         .option(Opt::str("name").required())
//!         .option(Opt::str("token").no_log())
//!         .option(Opt::str("state").choices(&["present", "absent"]).default("present"));
//!     run_module("example", spec, |ctx, p| {
//!         let name = p.str("name").unwrap_or_default();
//!         if ctx.check_mode {
//!             return Ok(ModuleResult::changed().msg(format!("would create {name}")));
//!         }
//!         Ok(ModuleResult::changed().diff(Diff::new("", name)).with("name", name))
//!     })
//! }
//! ```
//!
//! Module bodies must not print to stdout themselves; use [`Context::warn`] or stderr.

#![deny(missing_docs)]

mod coerce;
mod context;
mod error;
mod mask;
mod params;
mod result;
mod spec;
mod validate;

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

pub use coerce::expand_path;
pub use context::Context;
pub use error::{ArgsError, ArgsErrorKind};
pub use mask::{MASK, MIN_SUBSTRING_LEN, Masker};
pub use params::Params;
pub use result::{Deprecation, Diff, ModuleError, ModuleResult};
pub use spec::{Opt, Spec, Type};

/// Result keys the protocol sets itself; a module's `fields` cannot override them.
const RESERVED: [&str; 7] = [
    "changed",
    "failed",
    "skipped",
    "msg",
    "diff",
    "warnings",
    "deprecations",
];

/// Runs a module the way Ansible invokes it and exits: reads `argv[1]`, validates it against `spec`,
/// calls `body`, prints one masked JSON line, exits 0 (1 when the result is failed).
///
/// Every failure on the way (no `argv[1]`, unreadable or malformed args, invalid options, an error
/// from `body`, a panic in `body`) still produces one JSON object with `failed: true`.
pub fn run_module<F>(name: &str, spec: Spec, body: F) -> !
where
    F: FnOnce(&mut Context, &Params) -> Result<ModuleResult, ModuleError>,
{
    let args_file = std::env::args_os().nth(1).map(PathBuf::from);
    run_module_with_args(name, spec, read_args(args_file.as_deref()), body)
}

/// [`run_module`] with the arguments already read (by [`read_args`]): a program that picks the
/// module from its arguments reads them once.
pub fn run_module_with_args<F>(
    name: &str,
    spec: Spec,
    args: Result<Map<String, Value>, ArgsError>,
    body: F,
) -> !
where
    F: FnOnce(&mut Context, &Params) -> Result<ModuleResult, ModuleError>,
{
    // In a module process, no panic from any thread may write to stdout or stderr.
    SILENCE_ALL.store(true, Ordering::SeqCst);
    let outcome = execute_with_args(name, &spec, args, body);
    let mut stdout = std::io::stdout().lock();
    let written = writeln!(stdout, "{}", outcome.to_line()).and_then(|()| stdout.flush());
    std::process::exit(if written.is_ok() {
        outcome.exit_code
    } else {
        1
    })
}

/// The outcome of [`execute`]: the masked JSON result and the exit code `run_module` would use.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The result object, already masked.
    pub json: Value,
    /// 0, or 1 when `failed` is true.
    pub exit_code: i32,
}

impl Outcome {
    /// Whether the result has `failed: true`.
    pub fn failed(&self) -> bool {
        self.json.get("failed") == Some(&Value::Bool(true))
    }

    /// The result's `msg`, if any.
    pub fn msg(&self) -> Option<&str> {
        self.json.get("msg").and_then(Value::as_str)
    }

    /// The result as one line of JSON.
    pub fn to_line(&self) -> String {
        serde_json::to_string(&self.json).unwrap_or_else(|_| {
            r#"{"changed": false, "failed": true, "msg": "could not serialize the result"}"#
                .to_string()
        })
    }
}

/// Everything [`run_module`] does except reading argv and printing: `args_file` is the path
/// Ansible passes as `argv[1]`. Module crates can call it in tests with an args file they wrote.
pub fn execute<F>(name: &str, spec: &Spec, args_file: Option<&Path>, body: F) -> Outcome
where
    F: FnOnce(&mut Context, &Params) -> Result<ModuleResult, ModuleError>,
{
    execute_with_args(name, spec, read_args(args_file), body)
}

fn execute_with_args<F>(
    name: &str,
    spec: &Spec,
    args: Result<Map<String, Value>, ArgsError>,
    body: F,
) -> Outcome
where
    F: FnOnce(&mut Context, &Params) -> Result<ModuleResult, ModuleError>,
{
    install_panic_hook();
    let _quiet = QuietPanics::enter();
    let mut run = Run {
        module: name.to_string(),
        secrets: BTreeSet::new(),
        ctx: None,
    };
    let json = match panic::catch_unwind(AssertUnwindSafe(|| run.go(spec, args, body))) {
        Ok(json) => json,
        Err(payload) => run.panicked(payload.as_ref()),
    };
    let mut secrets = run.secrets;
    if let Some(ctx) = run.ctx {
        secrets.extend(ctx.secrets);
    }
    let masker = Masker::new(secrets);
    let json =
        panic::catch_unwind(AssertUnwindSafe(|| masker.mask_value(json))).unwrap_or_else(|_| {
            failure("internal error: masking the result failed (this is a bug, please report it)")
        });
    let exit_code = if json.get("failed") == Some(&Value::Bool(true)) {
        1
    } else {
        0
    };
    Outcome { json, exit_code }
}

/// State that must survive a panic in the module body, so the panic result is still masked.
struct Run {
    module: String,
    secrets: BTreeSet<String>,
    ctx: Option<Context>,
}

impl Run {
    fn go<F>(&mut self, spec: &Spec, args: Result<Map<String, Value>, ArgsError>, body: F) -> Value
    where
        F: FnOnce(&mut Context, &Params) -> Result<ModuleResult, ModuleError>,
    {
        let args = match args {
            Ok(args) => args,
            Err(e) => return failure(e.msg()),
        };
        if let Some(Value::String(name)) = args.get("_ansible_module_name") {
            self.module = name.clone();
        }
        // Collected before validation, so that messages quoting a bad value are masked too.
        validate::no_log_values(spec, &args, &mut self.secrets);
        if let Err(e) = spec.check() {
            return failure(&format!(
                "internal error in {}: invalid argument spec: {e} (this is a bug, please report it)",
                self.module
            ));
        }
        let ctx = match Context::from_args(&self.module, &args) {
            Ok(ctx) => ctx,
            Err(e) => return failure(e.msg()),
        };
        let ctx = self.ctx.insert(ctx);
        let ignore_unknown = args.get("_ansible_ignore_unknown_opts") == Some(&Value::Bool(true));
        let mut validation = validate::Validation {
            module: &self.module,
            ignore_unknown,
            warnings: Vec::new(),
        };
        let params = validation.run(spec, &args, &[]);
        ctx.warnings.splice(0..0, validation.warnings);
        let params = match params {
            Ok(params) => params,
            Err(e) => return error_json(ModuleError::new(e.msg()), ctx),
        };
        validate::no_log_params(&params, &mut self.secrets);
        if ctx.check_mode && !spec.supports_check_mode {
            let msg = format!(
                "remote module ({}) does not support check mode",
                self.module
            );
            return success_json(ModuleResult::unchanged().skipped().msg(msg), ctx);
        }
        let mut json = match body(ctx, &params) {
            Ok(result) => success_json(result, ctx),
            Err(error) => error_json(error, ctx),
        };
        // ansible-core 2.21 asks for the validated arguments back when INJECT_INVOCATION is on,
        // as AnsibleModule returns them; the masker hides the no_log ones.
        let inject = args.get("_ansible_inject_invocation") == Some(&Value::Bool(true));
        if let (true, Value::Object(map)) = (inject, &mut json) {
            let mut invocation = Map::new();
            invocation.insert(
                "module_args".to_string(),
                Value::Object(params.values.clone()),
            );
            map.insert("invocation".to_string(), Value::Object(invocation));
        }
        json
    }

    fn panicked(&self, payload: &(dyn Any + Send)) -> Value {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic with a non-text payload".to_string());
        let mut json = failure(&format!(
            "internal error in {}: {what} (this is a bug, please report it)",
            self.module
        ));
        if let (Some(location), Value::Object(map)) = (take_panic_location(), &mut json) {
            map.insert("panic_location".to_string(), Value::String(location));
        }
        json
    }
}

/// The JSON object in the arguments file Ansible passes as `argv[1]` (`/dev/stdin` when the
/// collection's action plugin pipes them, so they never touch a disk).
pub fn read_args(args_file: Option<&Path>) -> Result<Map<String, Value>, ArgsError> {
    let file_error = |msg: String| ArgsError::new(ArgsErrorKind::ArgsFile, msg);
    let Some(path) = args_file else {
        return Err(file_error(
            "no args file given: Ansible runs a binary module as `<module> <args file>`; to run it by hand, \
             write the options as a JSON object to a file and pass its path"
                .to_string(),
        ));
    };
    let text = std::fs::read(path)
        .map_err(|e| file_error(format!("cannot read the args file {}: {e}", path.display())))?;
    match serde_json::from_slice::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(file_error(format!(
            "the args file {} must hold a JSON object, got {}",
            path.display(),
            coerce::type_name(&other)
        ))),
        Err(e) => Err(file_error(format!(
            "the args file {} is not valid JSON: {e}",
            path.display()
        ))),
    }
}

/// A failed result with nothing but a message (the args could not even be read).
fn failure(msg: &str) -> Value {
    let mut map = Map::new();
    map.insert("changed".to_string(), Value::Bool(false));
    map.insert("failed".to_string(), Value::Bool(true));
    map.insert("msg".to_string(), Value::String(msg.to_string()));
    Value::Object(map)
}

/// Copies a module's own fields, dropping the keys the protocol owns.
fn extend_fields(
    out: &mut Map<String, Value>,
    fields: Map<String, Value>,
    warnings: &mut Vec<String>,
) {
    for (key, value) in fields {
        if key.starts_with("_ansible_") {
            warnings.push(format!(
                "removed reserved key '{key}' from the module result"
            ));
        } else if !RESERVED.contains(&key.as_str()) {
            out.insert(key, value);
        }
    }
}

fn finish(
    mut out: Map<String, Value>,
    mut warnings: Vec<String>,
    deprecations: Vec<Deprecation>,
) -> Value {
    if !warnings.is_empty() {
        out.insert(
            "warnings".to_string(),
            Value::Array(warnings.drain(..).map(Value::String).collect()),
        );
    }
    if !deprecations.is_empty() {
        out.insert(
            "deprecations".to_string(),
            Value::Array(deprecations.iter().map(Deprecation::to_json).collect()),
        );
    }
    Value::Object(out)
}

fn success_json(result: ModuleResult, ctx: &mut Context) -> Value {
    let mut out = Map::new();
    out.insert("changed".to_string(), Value::Bool(result.changed));
    out.insert("failed".to_string(), Value::Bool(false));
    if result.skipped {
        out.insert("skipped".to_string(), Value::Bool(true));
    }
    if let Some(msg) = result.msg {
        out.insert("msg".to_string(), Value::String(msg));
    }
    let mut warnings = std::mem::take(&mut ctx.warnings);
    extend_fields(&mut out, result.fields, &mut warnings);
    if ctx.diff {
        let mut diffs: Vec<Value> = result.diff.iter().map(Diff::to_json).collect();
        match diffs.len() {
            0 => {}
            1 => {
                out.insert("diff".to_string(), diffs.remove(0));
            }
            _ => {
                out.insert("diff".to_string(), Value::Array(diffs));
            }
        }
    }
    warnings.extend(result.warnings);
    let mut deprecations = std::mem::take(&mut ctx.deprecations);
    deprecations.extend(result.deprecations);
    finish(out, warnings, deprecations)
}

fn error_json(error: ModuleError, ctx: &mut Context) -> Value {
    let mut out = Map::new();
    out.insert("changed".to_string(), Value::Bool(error.changed));
    out.insert("failed".to_string(), Value::Bool(true));
    out.insert("msg".to_string(), Value::String(error.msg));
    let mut warnings = std::mem::take(&mut ctx.warnings);
    extend_fields(&mut out, error.fields, &mut warnings);
    finish(out, warnings, std::mem::take(&mut ctx.deprecations))
}

static SILENCE_ALL: AtomicBool = AtomicBool::new(false);

thread_local! {
    static QUIET_DEPTH: Cell<u32> = const { Cell::new(0) };
    static PANIC_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Marks the current thread as running a module body, whose panics are reported in the result
/// rather than printed.
struct QuietPanics;

impl QuietPanics {
    fn enter() -> QuietPanics {
        QUIET_DEPTH.with(|d| d.set(d.get() + 1));
        PANIC_LOCATION.with(|l| l.borrow_mut().take());
        QuietPanics
    }
}

impl Drop for QuietPanics {
    fn drop(&mut self) {
        QUIET_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

fn take_panic_location() -> Option<String> {
    PANIC_LOCATION
        .try_with(|l| l.borrow_mut().take())
        .ok()
        .flatten()
}

/// Chains a hook in front of the existing one. Panics from module bodies are recorded, not
/// printed: the panic message may hold a secret, and stdout belongs to the JSON result. Other
/// panics (say, in unrelated tests of the same binary) still reach the previous hook.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let quiet = SILENCE_ALL.load(Ordering::SeqCst)
                || QUIET_DEPTH.try_with(Cell::get).unwrap_or(0) > 0;
            if quiet {
                let location = info.location().map(|l| l.to_string());
                let _ = PANIC_LOCATION.try_with(|l| *l.borrow_mut() = location);
            } else {
                previous(info);
            }
        }));
    });
}
