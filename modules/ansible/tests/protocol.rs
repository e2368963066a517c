//! End-to-end tests of the protocol.
//!
//! `binary` runs `examples/echo_module` as Ansible does (`<module> <args file>`) and checks what
//! reaches stdout and stderr. `execute` drives the same code in-process for the many small cases.
//! `fuzz` throws odd JSON at it and checks it never panics or prints anything but a result.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ferro_ansible_protocol::{
    Context, Deprecation, Diff, Masker, ModuleError, ModuleResult, Opt, Outcome, Params, Spec,
    Type, execute,
};
use serde_json::{Value, json};

/// The real args file from ansible-core 2.19.14 (ansible.md §1.3), with the probe's options
/// replaced by echo_module's and the secret kept.
const CAPTURE: &str = r#"{"name": "world", "mode": "ok", "token": "s3cr3t", "_ansible_check_mode": false, "_ansible_no_log": false, "_ansible_debug": false, "_ansible_diff": false, "_ansible_verbosity": 3, "_ansible_version": "2.19.14", "_ansible_module_name": "echo_module", "_ansible_syslog_facility": "LOG_USER", "_ansible_selinux_special_fs": ["fuse", "nfs", "vboxsf", "ramfs", "9p", "vfat"], "_ansible_socket": null, "_ansible_shell_executable": "/bin/sh", "_ansible_keep_remote_files": false, "_ansible_tmpdir": "RTMP/ansible-tmp-1796030465.9598908-9863-116050777458921/", "_ansible_remote_tmp": "~/.ansible/tmp", "_ansible_ignore_unknown_opts": false, "_ansible_target_log_info": null, "_ansible_tracebacks_for": []}"#;

/// The capture with some keys replaced or added.
fn capture_with(changes: Value) -> Value {
    let mut args: Value = serde_json::from_str(CAPTURE).expect("the capture is valid JSON");
    if let (Some(args), Value::Object(changes)) = (args.as_object_mut(), changes) {
        for (k, v) in changes {
            args.insert(k, v);
        }
    }
    args
}

fn write_args(dir: &Path, content: &str) -> PathBuf {
    let path = dir.join("args");
    std::fs::write(&path, content).expect("write args file");
    path
}

mod binary {
    use super::*;

    /// `cargo test` builds examples next to the test binaries: target/<profile>/examples/.
    fn echo_module() -> PathBuf {
        let exe = std::env::current_exe().expect("current exe");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>/deps/<test>");
        let bin = profile_dir.join("examples").join("echo_module");
        assert!(
            bin.exists(),
            "{} is missing; run the tests with plain `cargo test -p ferro-ansible-protocol`, which builds examples",
            bin.display()
        );
        bin
    }

    /// Runs the module and parses stdout, asserting it is exactly one line holding one object.
    fn run(args: Option<&Path>) -> (Value, Output) {
        let mut cmd = Command::new(echo_module());
        if let Some(args) = args {
            cmd.arg(args);
        }
        let out = cmd.output().expect("run echo_module");
        let stdout = String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8");
        assert!(
            stdout.ends_with('\n'),
            "stdout must end with a newline: {stdout:?}"
        );
        assert_eq!(
            stdout.lines().count(),
            1,
            "stdout must be exactly one line: {stdout:?}"
        );
        let json: Value = serde_json::from_str(&stdout).expect("stdout is JSON");
        assert!(json.is_object(), "stdout must be a JSON object: {stdout}");
        assert!(
            json["failed"].is_boolean() && json["changed"].is_boolean(),
            "{json}"
        );
        (json, out)
    }

    fn run_with(args: Value) -> (Value, Output) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_args(dir.path(), &args.to_string());
        run(Some(&path))
    }

    #[test]
    fn real_capture_succeeds_with_one_json_line() {
        let (json, out) = run_with(capture_with(
            json!({"tags": "a, b", "timeout": "30", "force": "yes"}),
        ));
        assert_eq!(out.status.code(), Some(0), "{json}");
        assert_eq!(json["failed"], json!(false));
        assert_eq!(json["changed"], json!(true));
        assert_eq!(json["check_mode"], json!(false));
        assert_eq!(json["verbosity"], json!(3));
        assert_eq!(json["module_name"], json!("echo_module"));
        assert_eq!(json["tags"], json!(["a", "b"]));
        assert_eq!(json["timeout"], json!(30));
        assert_eq!(json["force"], json!(true));
        // Diff mode is off in the capture, so the module's diff is dropped.
        assert!(json.get("diff").is_none(), "{json}");
        assert!(out.stderr.is_empty());
    }

    #[test]
    fn no_log_values_are_masked_everywhere() {
        let (json, _) = run_with(capture_with(json!({
            "_ansible_diff": true,
            "secrets": {"ca": {"key": "LS0tLS1CRUdJTiBLRVk="}},
            "dest": "/tmp/LS0tLS1CRUdJTiBLRVk=/out"
        })));
        let text = json.to_string();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(!text.contains("LS0tLS1CRUdJTiBLRVk="), "{text}");
        assert_eq!(
            json["msg"],
            json!("hello world, token ******** runtime-secret-value")
        );
        assert_eq!(
            json["nested"],
            json!({"deep": [{"token": "********"}], "********": "key"})
        );
        assert_eq!(json["diff"]["before"], json!("token: ********\n"));
        assert_eq!(json["dest"], json!("/tmp/********/out"));
        assert_eq!(json["secrets_seen"], json!({"ca": {"key": "********"}}));
    }

    #[test]
    fn runtime_secrets_are_masked() {
        let (json, _) = run_with(capture_with(json!({"mode": "mask"})));
        assert_eq!(json["msg"], json!("hello world, token ******** ********"));
        let (json, out) = run_with(capture_with(json!({"mode": "mask_panic"})));
        assert_eq!(json["failed"], json!(true));
        assert_eq!(
            json["msg"],
            json!("internal error in echo_module: lost ******** (this is a bug, please report it)")
        );
        assert_eq!(out.status.code(), Some(1));
    }

    #[test]
    fn check_mode_flag_is_read() {
        let (json, out) = run_with(capture_with(json!({"_ansible_check_mode": true})));
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(json["check_mode"], json!(true));
        assert_eq!(json["changed"], json!(false));
    }

    #[test]
    fn module_error_is_a_failed_result_with_fields() {
        let (json, out) = run_with(capture_with(json!({"mode": "fail"})));
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(json["failed"], json!(true));
        assert_eq!(json["changed"], json!(false));
        assert_eq!(
            json["msg"],
            json!("could not greet world with token ********")
        );
        assert_eq!(json["node"], json!("10.5.0.2"));
        assert_eq!(json["grpc_code"], json!(14));
    }

    #[test]
    fn panic_is_a_failed_result_and_prints_nothing_else() {
        let (json, out) = run_with(capture_with(json!({"mode": "panic"})));
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            json["msg"],
            json!(
                "internal error in echo_module: boom while using token ******** (this is a bug, please report it)"
            )
        );
        assert!(
            json["panic_location"]
                .as_str()
                .is_some_and(|l| l.contains("echo_module.rs")),
            "{json}"
        );
        assert!(
            out.stderr.is_empty(),
            "stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn missing_argv_is_a_failed_result() {
        let (json, out) = run(None);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            json["msg"]
                .as_str()
                .is_some_and(|m| m.starts_with("no args file given")),
            "{json}"
        );
    }

    #[test]
    fn bad_args_files_are_failed_results() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (json, _) = run(Some(&dir.path().join("nope")));
        assert!(
            json["msg"]
                .as_str()
                .is_some_and(|m| m.starts_with("cannot read the args file")),
            "{json}"
        );
        for (content, expected) in [
            ("[1, 2]", "must hold a JSON object, got list"),
            ("name=world", "is not valid JSON"),
            ("", "is not valid JSON"),
            ("{\"name\": \"x\"} trailing", "is not valid JSON"),
        ] {
            let path = write_args(dir.path(), content);
            let (json, out) = run(Some(&path));
            assert_eq!(out.status.code(), Some(1));
            assert!(
                json["msg"].as_str().is_some_and(|m| m.contains(expected)),
                "{content}: {json}"
            );
        }
    }

    #[test]
    fn validation_errors_use_ansible_wording() {
        let (json, _) = run_with(capture_with(json!({"bogus": 1})));
        assert_eq!(
            json["msg"],
            json!(
                "Unsupported parameters for (echo_module) module: bogus. Supported parameters include: \
                 dest, force, mode, name (n), secrets, tags, timeout, token."
            )
        );
        let (json, _) = run_with(capture_with(json!({"name": null})));
        assert_eq!(json["msg"], json!("missing required arguments: name"));
    }
}

mod in_process {
    use super::*;

    fn spec() -> Spec {
        Spec::new()
            .option(Opt::str("name").required())
            .option(Opt::str("password").no_log())
            .option(
                Opt::str("state")
                    .choices(&["present", "absent"])
                    .default("present"),
            )
    }

    fn run<F>(spec: &Spec, args: Value, body: F) -> Outcome
    where
        F: FnOnce(&mut Context, &Params) -> Result<ModuleResult, ModuleError>,
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_args(dir.path(), &args.to_string());
        execute("probe", spec, Some(&path), body)
    }

    #[test]
    fn unsupported_check_mode_is_skipped_without_running_the_body() {
        let spec = spec().supports_check_mode(false);
        let out = run(
            &spec,
            json!({"name": "x", "_ansible_check_mode": true}),
            |_, _| panic!("the body must not run in check mode"),
        );
        assert_eq!(
            out.json,
            json!({"changed": false, "failed": false, "skipped": true, "msg": "remote module (probe) does not support check mode"})
        );
        assert_eq!(out.exit_code, 0);
        // Validation still comes first, as in AnsibleModule.
        let out = run(&spec, json!({"_ansible_check_mode": true}), |_, _| {
            Ok(ModuleResult::unchanged())
        });
        assert_eq!(out.msg(), Some("missing required arguments: name"));
    }

    #[test]
    fn fqcn_module_name_is_used_in_messages() {
        let out = run(
            &spec(),
            json!({"name": "x", "nmae": "y", "_ansible_module_name": "ferro.talos.probe"}),
            |_, _| Ok(ModuleResult::unchanged()),
        );
        assert_eq!(
            out.msg(),
            Some(
                "Unsupported parameters for (ferro.talos.probe) module: nmae. Supported parameters include: name, password, state."
            )
        );
    }

    #[test]
    fn ignore_unknown_opts_is_honoured() {
        let out = run(
            &spec(),
            json!({"name": "x", "extra": 1, "_ansible_ignore_unknown_opts": true}),
            |_, _| Ok(ModuleResult::unchanged()),
        );
        assert!(!out.failed(), "{}", out.json);
    }

    #[test]
    fn bad_values_of_no_log_options_are_masked_in_errors() {
        let spec = Spec::new().option(Opt::str("pin").no_log().choices(&["1111", "2222"]));
        let out = run(&spec, json!({"pin": "98765"}), |_, _| {
            Ok(ModuleResult::unchanged())
        });
        assert_eq!(
            out.msg(),
            Some("value of pin must be one of: 1111, 2222, got: ********")
        );
    }

    #[test]
    fn result_shape() {
        let out = run(
            &spec(),
            json!({"name": "x", "_ansible_diff": true}),
            |ctx, _| {
                ctx.warn("from the context");
                ctx.deprecate(
                    Deprecation::new("old")
                        .version("2.0.0")
                        .collection("ferro.talos"),
                );
                Ok(ModuleResult::changed()
                    .msg("done")
                    .with("changed", false)
                    .with("failed", true)
                    .with("_ansible_no_log", true)
                    .with("machine_config", json!({"a": 1}))
                    .diff(Diff::new("a", "b"))
                    .diff(Diff::prepared("text"))
                    .warn("from the result"))
            },
        );
        assert_eq!(
            out.json,
            json!({
                "changed": true,
                "failed": false,
                "msg": "done",
                "machine_config": {"a": 1},
                "diff": [{"before": "a", "after": "b"}, {"prepared": "text"}],
                "warnings": ["from the context", "removed reserved key '_ansible_no_log' from the module result", "from the result"],
                "deprecations": [{"msg": "old", "version": "2.0.0", "collection_name": "ferro.talos"}]
            })
        );
        assert_eq!(out.exit_code, 0);
        assert_eq!(out.to_line().lines().count(), 1);
    }

    #[test]
    fn invocation_is_injected_only_when_asked() {
        let args = json!({"name": "x", "password": "hunter22", "_ansible_inject_invocation": true});
        let out = run(&spec(), args, |_, _| Ok(ModuleResult::unchanged()));
        assert_eq!(
            out.json["invocation"],
            json!({"module_args": {"name": "x", "password": "********", "state": "present"}})
        );
        let out = run(&spec(), json!({"name": "x"}), |_, _| {
            Ok(ModuleResult::unchanged())
        });
        assert!(out.json.get("invocation").is_none());
    }

    #[test]
    fn failures_keep_warnings_and_changed() {
        let out = run(&spec(), json!({"name": "x"}), |ctx, _| {
            ctx.warn("retrying");
            Err(ModuleError::new("apply failed")
                .changed(true)
                .with("node", "n1"))
        });
        assert_eq!(
            out.json,
            json!({"changed": true, "failed": true, "msg": "apply failed", "node": "n1", "warnings": ["retrying"]})
        );
        assert_eq!(out.exit_code, 1);
    }

    #[test]
    fn anyhow_errors_keep_their_context_chain() {
        fn body() -> anyhow::Result<()> {
            use anyhow::Context as _;
            Err(anyhow::anyhow!("certificate signed by unknown authority"))
                .context("ApplyConfiguration")
                .context("apply config to 10.5.0.2")
        }
        let out = run(&spec(), json!({"name": "x"}), |_, _| {
            body()?;
            Ok(ModuleResult::unchanged())
        });
        assert_eq!(
            out.msg(),
            Some(
                "apply config to 10.5.0.2: ApplyConfiguration: certificate signed by unknown authority"
            )
        );
    }

    #[test]
    fn password_is_masked_but_short_values_are_only_masked_whole() {
        let spec = spec().option(Opt::str("otp").no_log());
        let out = run(
            &spec,
            json!({"name": "x", "password": "hunter22", "otp": "123"}),
            |_, p| {
                Ok(ModuleResult::unchanged()
                    .msg(format!(
                        "pw={} otp={}",
                        p.str("password").unwrap_or(""),
                        p.str("otp").unwrap_or("")
                    ))
                    .with("otp", p.str("otp")))
            },
        );
        assert_eq!(out.msg(), Some("pw=******** otp=123"));
        assert_eq!(out.json["otp"], json!("********"));
    }

    #[test]
    fn panics_with_non_string_payloads() {
        let out = run(&spec(), json!({"name": "x"}), |_, _| {
            std::panic::panic_any(42_u8)
        });
        assert_eq!(
            out.msg(),
            Some(
                "internal error in probe: panic with a non-text payload (this is a bug, please report it)"
            )
        );
    }

    #[test]
    fn typo_in_accessor_is_reported_as_a_bug() {
        let out = run(&spec(), json!({"name": "x"}), |_, p| {
            Ok(ModuleResult::unchanged().with("n", p.str("nmae")))
        });
        assert_eq!(
            out.msg(),
            Some(
                "internal error in probe: option 'nmae' is not declared in the module's argument spec (this is a bug, please report it)"
            )
        );
    }

    #[test]
    fn invalid_spec_is_reported_as_a_bug() {
        let spec = Spec::new().option(Opt::int("n").default("many"));
        let out = run(&spec, json!({}), |_, _| Ok(ModuleResult::unchanged()));
        let msg = out.msg().unwrap_or_default();
        assert!(
            msg.starts_with(
                "internal error in probe: invalid argument spec: default of option 'n' is invalid"
            ),
            "{msg}"
        );
    }

    #[test]
    fn bad_internal_flags_fail_instead_of_guessing() {
        let out = run(
            &spec(),
            json!({"name": "x", "_ansible_check_mode": "perhaps"}),
            |_, _| Ok(ModuleResult::changed()),
        );
        assert!(out.failed());
        assert_eq!(
            out.msg(),
            Some("invalid value for _ansible_check_mode: expected a boolean, got str")
        );
    }
}

mod fuzz {
    use super::*;

    /// A small deterministic generator, so failures reproduce without a seed file.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[(self.next() % items.len() as u64) as usize]
        }

        fn value(&mut self, depth: u32) -> Value {
            let kind = self.next() % if depth > 3 { 6 } else { 8 };
            match kind {
                0 => Value::Null,
                1 => json!(self.next() & 1 == 0),
                2 => json!(self.next() as i64),
                3 => json!(u64::MAX - self.next() % 10),
                4 => json!(
                    f64::from_bits(self.next() & 0x7fef_ffff_ffff_ffff)
                        * if self.next() & 1 == 0 { 1.0 } else { -1.0 }
                ),
                5 => json!(self.pick(&[
                    "",
                    "yes",
                    "no",
                    "5",
                    "5.5",
                    "1e400",
                    "a,b",
                    "k=v",
                    "{",
                    "{\"a\":1}",
                    "~/x",
                    "$HOME",
                    "${",
                    "\u{0}",
                    "ü",
                    "present",
                    "-0",
                    " 7 ",
                    "nan"
                ])),
                6 => Value::Array(
                    (0..self.next() % 4)
                        .map(|_| self.value(depth + 1))
                        .collect(),
                ),
                _ => {
                    let mut map = serde_json::Map::new();
                    for _ in 0..self.next() % 4 {
                        let key = self.pick(&["host", "port", "token", "x", "_ansible_diff", ""]);
                        map.insert(key.to_string(), self.value(depth + 1));
                    }
                    Value::Object(map)
                }
            }
        }
    }

    fn spec() -> Spec {
        let sub = Spec::new()
            .option(Opt::str("host").required())
            .option(Opt::int("port").default(50000))
            .option(Opt::str("token").no_log());
        Spec::new()
            .option(Opt::str("s").alias("s2"))
            .option(Opt::bool("b").default(false))
            .option(Opt::int("i"))
            .option(Opt::float("f"))
            .option(Opt::path("p"))
            .option(Opt::list("l").elements(Type::Int))
            .option(Opt::list("ld").elements(Type::Dict).options(sub.clone()))
            .option(Opt::dict("d").options(sub))
            .option(Opt::dict("secret").no_log())
            .option(Opt::raw("r"))
            .option(Opt::str("state").choices(&["present", "absent"]))
            .mutually_exclusive(&["s", "i"])
            .required_together(&["f", "p"])
            .required_if("state", "present", &["s"])
            .required_by("b", &["r"])
    }

    #[test]
    fn odd_json_never_panics() {
        let names = [
            "s",
            "s2",
            "b",
            "i",
            "f",
            "p",
            "l",
            "ld",
            "d",
            "secret",
            "r",
            "state",
            "zz",
            "_ansible_check_mode",
            "_ansible_verbosity",
            "_ansible_module_name",
        ];
        let spec = spec();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut ok, mut failed) = (0, 0);
        for round in 0..600 {
            let mut args = serde_json::Map::new();
            for _ in 0..rng.next() % 6 {
                args.insert(rng.pick(&names).to_string(), rng.value(0));
            }
            let top = if round % 50 == 0 {
                rng.value(0)
            } else {
                Value::Object(args)
            };
            let path = write_args(dir.path(), &top.to_string());
            let out = execute("fuzz", &spec, Some(&path), |ctx, p| {
                ctx.mask(format!("{:?}", p.get("secret")));
                Ok(ModuleResult::new(p.bool("b"))
                    .with("all", Value::Object(p.values().clone()))
                    .with("hosts", p.sub_list("ld").len()))
            });
            let msg = out.msg().unwrap_or_default();
            assert!(
                !msg.contains("internal error"),
                "round {round}: {top} gave {msg}"
            );
            assert!(out.json["failed"].is_boolean() && out.json["changed"].is_boolean());
            assert_eq!(out.exit_code, i32::from(out.failed()));
            if out.failed() { failed += 1 } else { ok += 1 }
        }
        // Both paths must actually be exercised for this test to mean anything.
        assert!(ok > 10 && failed > 10, "ok={ok} failed={failed}");
    }

    /// Without the args file round trip, so many more inputs fit in the same time.
    #[test]
    fn validation_is_total() {
        let names = [
            "s", "s2", "b", "i", "f", "p", "l", "ld", "d", "secret", "r", "state", "zz",
        ];
        let spec = spec();
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut ok = 0;
        for _ in 0..20_000 {
            let mut args = serde_json::Map::new();
            for _ in 0..rng.next() % 6 {
                args.insert(rng.pick(&names).to_string(), rng.value(0));
            }
            match spec.validate("fuzz", &args) {
                Ok(p) => {
                    ok += 1;
                    let masker = Masker::new(p.str("s").map(str::to_string));
                    let _ = masker.mask_value(Value::Object(p.values().clone()));
                }
                Err(e) => assert!(!e.msg().is_empty()),
            }
        }
        assert!(ok > 200, "ok={ok}");
    }

    #[test]
    fn deeply_nested_and_huge_inputs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let deep = format!("{{\"r\": {}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        let path = write_args(dir.path(), &deep);
        let out = execute("fuzz", &spec(), Some(&path), |_, _| {
            Ok(ModuleResult::unchanged())
        });
        assert!(
            out.failed() && out.msg().is_some_and(|m| m.contains("not valid JSON")),
            "{}",
            out.json
        );
        let big = format!(
            "{{\"s\": \"{}\", \"i\": 1{}}}",
            "x".repeat(1 << 20),
            "0".repeat(400)
        );
        let path = write_args(dir.path(), &big);
        let out = execute("fuzz", &spec(), Some(&path), |_, _| {
            Ok(ModuleResult::unchanged())
        });
        assert!(out.failed(), "{}", out.json);
    }
}

/// Every source file opens with a `//!` paragraph saying what it is for (style guide, §5).
#[test]
fn tidy_every_file_has_a_module_doc() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["src", "tests", "examples"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("read dir") {
            let path = entry.expect("dir entry").path();
            if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read source");
                assert!(
                    text.starts_with("//!"),
                    "{} must open with a //! doc",
                    path.display()
                );
            }
        }
    }
}
