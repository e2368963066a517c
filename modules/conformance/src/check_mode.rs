//! Running a module binary the way Ansible does, in check mode and only in check mode: this tool
//! points at someone's production cluster, so no module may ever run for real from here.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{Map, Value};

use crate::files::write_private;

/// Ansible's flag for `--check`: a module reports what it would change and changes nothing.
pub const CHECK_MODE: &str = "_ansible_check_mode";

/// Module arguments that carry `_ansible_check_mode: true`. `new` is the only way to build them
/// and sets the flag after the options, so no option can turn it off.
pub struct CheckModeArgs(Map<String, Value>);

impl CheckModeArgs {
    pub fn new(options: Map<String, Value>) -> CheckModeArgs {
        let mut args = options;
        args.insert(CHECK_MODE.to_string(), Value::Bool(true));
        CheckModeArgs(args)
    }

    fn is_check_mode(&self) -> bool {
        self.0.get(CHECK_MODE) == Some(&Value::Bool(true))
    }
}

/// What one module run printed, and how long it took.
pub struct ModuleRun {
    pub result: Value,
    pub ms: u64,
}

/// Runs `binary` with an args file in `workdir` (argv[0] the binary's path, argv[1] the file), as
/// Ansible runs a binary module, and reads its one JSON result. The args file is private (0600, in
/// the run's private directory) and removed as soon as the module has run.
pub fn run(binary: &Path, args: &CheckModeArgs, workdir: &Path) -> Result<ModuleRun, String> {
    let name = binary
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    // Checked again here, where the process starts, so no other code path can skip it.
    if !args.is_check_mode() {
        return Err(format!(
            "refusing to run {name}: its arguments do not set {CHECK_MODE}"
        ));
    }
    let args_file = workdir.join(format!("{name}-args.json"));
    let text = serde_json::to_vec(&args.0)
        .map_err(|e| format!("{name}: cannot encode the arguments: {e}"))?;
    write_private(&args_file, &text)
        .map_err(|e| format!("{name}: cannot write {}: {e}", args_file.display()))?;
    let started = Instant::now();
    let output = Command::new(binary)
        .arg(&args_file)
        .stdin(Stdio::null())
        .output();
    let ms = started.elapsed().as_millis() as u64;
    let _ = std::fs::remove_file(&args_file);
    let output = output.map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    let result = serde_json::from_slice::<Value>(&output.stdout).map_err(|_| {
        let stderr = String::from_utf8_lossy(&output.stderr);
        format!(
            "{name} printed no JSON result (exit status {}): {}",
            output.status,
            stderr.lines().next().unwrap_or("no output")
        )
    })?;
    Ok(ModuleRun { result, ms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_option_can_turn_check_mode_off() {
        let Value::Object(options) = json!({"node": "10.0.0.2", CHECK_MODE: false}) else {
            unreachable!()
        };
        let args = CheckModeArgs::new(options);
        assert!(args.is_check_mode());
        assert_eq!(args.0["node"], "10.0.0.2");
    }

    #[test]
    fn runs_the_binary_with_an_args_file_and_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        // A stand-in module: prints its args file back as the result.
        let script = dir.path().join("echo_module");
        std::fs::write(&script, "#!/bin/sh\ncat \"$1\"\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let run = run(&script, &CheckModeArgs::new(Map::new()), dir.path()).unwrap();
        assert_eq!(run.result[CHECK_MODE], true);
        assert!(!dir.path().join("echo_module-args.json").exists());
    }
}
