//! How the program gets its arguments: the file Ansible names as `argv[1]`, or a pipe named
//! `/dev/stdin` (what the collection's action plugin does on the controller, so the arguments,
//! which may hold the decrypted secrets bundle, never touch a disk). A pipe can be read once, so
//! the program must pick the module and validate from one read.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn generate_args(dir: &Path) -> Value {
    json!({
        "_ansible_module_name": "ferro.talos.talos_config",
        "secrets_file": dir.join("secrets.yaml"),
        "generate_secrets": true,
    })
}

fn result(stdout: &[u8]) -> Value {
    serde_json::from_slice(stdout).expect("the program prints one JSON object")
}

#[test]
fn arguments_on_a_pipe_run_the_module_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferro-talos"))
        .arg("/dev/stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the program starts");
    let args = generate_args(dir.path()).to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(args.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let result = result(&out.stdout);
    assert_eq!(result["failed"], false, "{result}");
    assert_eq!(result["secrets_generated"], true, "{result}");
    assert!(dir.path().join("secrets.yaml").is_file());
}

#[test]
fn an_arguments_file_still_works_and_an_empty_pipe_fails_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("args.json");
    std::fs::write(&file, generate_args(dir.path()).to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ferro-talos"))
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(result(&out.stdout)["secrets_generated"], true);

    // Nothing on the pipe: no module is named, so the program says which it runs.
    let out = Command::new(env!("CARGO_BIN_EXE_ferro-talos"))
        .arg("/dev/stdin")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let result = result(&out.stdout);
    assert_eq!(result["failed"], true);
    assert!(
        result["msg"].as_str().unwrap().contains("talos_apply"),
        "{result}"
    );
}
