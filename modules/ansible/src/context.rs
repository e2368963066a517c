//! The run's context: Ansible's `_ansible_*` flags, plus secrets and warnings gathered at run time.

use std::fmt;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::coerce::{self, type_name};
use crate::error::{ArgsError, ArgsErrorKind};
use crate::result::Deprecation;
use crate::spec::Type;

/// What Ansible told the module about this run, and a place to register secrets and warnings.
pub struct Context {
    /// `_ansible_check_mode`: report what would change, change nothing.
    pub check_mode: bool,
    /// `_ansible_diff`: the user wants diffs (the protocol drops `diff` from the result otherwise).
    pub diff: bool,
    /// `_ansible_no_log`: the task has `no_log: true`. Ansible hides the result on the controller,
    /// but still prints `msg` on failure, so never put secrets in messages.
    pub no_log: bool,
    /// `_ansible_verbosity`: the number of `-v` flags.
    pub verbosity: u32,
    /// `_ansible_module_name`: the name as written in the task (`talos_apply` or
    /// `ferro.talos.talos_apply`), or the module's own name when Ansible did not send it.
    pub module_name: String,
    /// `_ansible_tmpdir`, or `_ansible_remote_tmp` (expanded) when the former is null.
    pub tmpdir: Option<PathBuf>,
    /// `_ansible_version`: the ansible-core version.
    pub ansible_version: Option<String>,
    pub(crate) secrets: Vec<String>,
    pub(crate) warnings: Vec<String>,
    pub(crate) deprecations: Vec<Deprecation>,
}

// Written by hand so that registered secrets never show up in logs or test output.
impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("check_mode", &self.check_mode)
            .field("diff", &self.diff)
            .field("no_log", &self.no_log)
            .field("verbosity", &self.verbosity)
            .field("module_name", &self.module_name)
            .field("tmpdir", &self.tmpdir)
            .field("ansible_version", &self.ansible_version)
            .field("secrets", &format_args!("<{} hidden>", self.secrets.len()))
            .field("warnings", &self.warnings)
            .finish()
    }
}

impl Context {
    /// A context with every flag off, as for a run outside Ansible. Useful in a module's tests.
    pub fn new(module_name: impl Into<String>) -> Context {
        Context {
            check_mode: false,
            diff: false,
            no_log: false,
            verbosity: 0,
            module_name: module_name.into(),
            tmpdir: None,
            ansible_version: None,
            secrets: Vec::new(),
            warnings: Vec::new(),
            deprecations: Vec::new(),
        }
    }

    /// Registers a secret found at run time (a key read from a secrets file, a token): it is masked
    /// anywhere in the result, whether the module succeeds, fails or panics. A value with
    /// surrounding whitespace is also registered trimmed, since files usually end in a newline.
    pub fn mask(&mut self, secret: impl Into<String>) {
        let secret = secret.into();
        let trimmed = secret.trim();
        if trimmed.len() != secret.len() && !trimmed.is_empty() {
            self.secrets.push(trimmed.to_string());
        }
        if !secret.is_empty() {
            self.secrets.push(secret);
        }
    }

    /// Adds a `[WARNING]` line to the result, whatever its outcome.
    pub fn warn(&mut self, warning: impl Into<String>) {
        self.warnings.push(warning.into());
    }

    /// Adds a deprecation to the result, whatever its outcome.
    pub fn deprecate(&mut self, deprecation: Deprecation) {
        self.deprecations.push(deprecation);
    }

    /// Reads the `_ansible_*` keys. A flag with a value that is not a boolean is an error rather
    /// than "off": guessing wrong about check mode would make real changes.
    pub(crate) fn from_args(module: &str, args: &Map<String, Value>) -> Result<Context, ArgsError> {
        let flag = |key: &str| -> Result<bool, ArgsError> {
            match args.get(key) {
                None | Some(Value::Null) => Ok(false),
                Some(v) => match coerce::coerce(Type::Bool, v) {
                    Ok(Value::Bool(b)) => Ok(b),
                    _ => Err(ArgsError::new(
                        ArgsErrorKind::Internal,
                        format!(
                            "invalid value for {key}: expected a boolean, got {}",
                            type_name(v)
                        ),
                    )),
                },
            }
        };
        let string = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_string);
        let verbosity = match args
            .get("_ansible_verbosity")
            .map(|v| coerce::coerce(Type::Int, v))
        {
            Some(Ok(Value::Number(n))) => {
                n.as_i64().map_or(0, |n| n.clamp(0, u32::MAX.into()) as u32)
            }
            _ => 0,
        };
        let tmpdir = string("_ansible_tmpdir")
            .or_else(|| string("_ansible_remote_tmp").map(|t| coerce::expand_path(&t)))
            .filter(|t| !t.is_empty())
            .map(PathBuf::from);
        Ok(Context {
            check_mode: flag("_ansible_check_mode")?,
            diff: flag("_ansible_diff")?,
            no_log: flag("_ansible_no_log")?,
            verbosity,
            module_name: string("_ansible_module_name").unwrap_or_else(|| module.to_string()),
            tmpdir,
            ansible_version: string("_ansible_version"),
            ..Context::new(module)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx(v: Value) -> Result<Context, ArgsError> {
        match v {
            Value::Object(m) => Context::from_args("probe", &m),
            _ => panic!("test args must be an object"),
        }
    }

    #[test]
    fn reads_the_real_capture() {
        // ansible.md §1.3, ansible-core 2.19.14, with check and diff turned on.
        let c = ctx(json!({"dump": "/x", "mode": "ok", "secret": "s3cr3t", "_ansible_check_mode": true, "_ansible_no_log": false, "_ansible_debug": false, "_ansible_diff": true, "_ansible_verbosity": 3, "_ansible_version": "2.19.14", "_ansible_module_name": "example.talos.probe", "_ansible_syslog_facility": "LOG_USER", "_ansible_selinux_special_fs": ["fuse", "nfs"], "_ansible_socket": null, "_ansible_shell_executable": "/bin/sh", "_ansible_keep_remote_files": false, "_ansible_tmpdir": "/tmp/ansible-tmp-1/", "_ansible_remote_tmp": "~/.ansible/tmp", "_ansible_ignore_unknown_opts": false, "_ansible_target_log_info": null, "_ansible_tracebacks_for": []}))
        .unwrap();
        assert!(c.check_mode && c.diff && !c.no_log);
        assert_eq!(c.verbosity, 3);
        assert_eq!(c.module_name, "example.talos.probe");
        assert_eq!(c.tmpdir, Some(PathBuf::from("/tmp/ansible-tmp-1/")));
        assert_eq!(c.ansible_version.as_deref(), Some("2.19.14"));
    }

    #[test]
    fn defaults_and_fallbacks() {
        let c = ctx(json!({"_ansible_tmpdir": null, "_ansible_remote_tmp": "/var/tmp/rt", "_ansible_verbosity": "2"})).unwrap();
        assert!(!c.check_mode && !c.diff && !c.no_log);
        assert_eq!(c.verbosity, 2);
        assert_eq!(c.module_name, "probe");
        assert_eq!(c.tmpdir, Some(PathBuf::from("/var/tmp/rt")));
        let c = ctx(json!({"_ansible_verbosity": -4, "_ansible_check_mode": "yes"})).unwrap();
        assert_eq!(c.verbosity, 0);
        assert!(c.check_mode);
        assert_eq!(
            ctx(json!({"_ansible_verbosity": [1]})).unwrap().verbosity,
            0
        );
    }

    #[test]
    fn garbage_flags_are_errors() {
        let e = ctx(json!({"_ansible_check_mode": [true]})).unwrap_err();
        assert_eq!(
            e.msg(),
            "invalid value for _ansible_check_mode: expected a boolean, got list"
        );
        assert!(ctx(json!({"_ansible_diff": "sometimes"})).is_err());
    }

    #[test]
    fn mask_registers_trimmed_and_debug_hides() {
        let mut c = Context::new("m");
        c.mask("token-value\n");
        c.mask("");
        assert_eq!(
            c.secrets,
            vec!["token-value".to_string(), "token-value\n".to_string()]
        );
        assert!(!format!("{c:?}").contains("token-value"));
    }
}
