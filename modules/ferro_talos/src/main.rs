//! `ferro-talos`: every module of the ferro.talos collection in one program, so the collection
//! ships one copy of the TLS stack and the libraries per platform instead of one per module.
//!
//! Which module runs: the program's own name when it is called by a module's name (a link named
//! `talos_apply`), otherwise the module Ansible names in the arguments file it passes as the one
//! argument (`_ansible_module_name`, which Ansible sets for every module; a fully qualified name
//! such as `ferro.talos.talos_apply` counts by its last part).

use std::path::Path;

use ferro_ansible_protocol::{read_args, run_module_with_args};
use ferro_talos_tasks::catalog::{MODULES, Module, module};
use serde_json::{Map, Value};

/// `--argument-specs`: every module's options as an Ansible argument spec, one JSON object, so
/// the tests can check each module's documentation against what its code takes.
const ARGUMENT_SPECS: &str = "--argument-specs";

fn main() {
    if std::env::args().nth(1).as_deref() == Some(ARGUMENT_SPECS) {
        let specs: serde_json::Map<String, serde_json::Value> = MODULES
            .iter()
            .map(|m| (m.name.to_string(), (m.spec)().describe()))
            .collect();
        println!("{}", serde_json::Value::Object(specs));
        return;
    }
    // Read once: the arguments may come down a pipe (`/dev/stdin`), which cannot be read twice.
    let args_file = std::env::args_os().nth(1).map(std::path::PathBuf::from);
    let args = read_args(args_file.as_deref());
    let chosen = module_by_program_name().or_else(|| module_by_arguments(args.as_ref().ok()?));
    let Some(Module { name, spec, run }) = chosen else {
        refuse();
    };
    run_module_with_args(name, spec(), args, run)
}

fn module_by_program_name() -> Option<&'static Module> {
    let program = std::env::args_os().next()?;
    module(Path::new(&program).file_name()?.to_str()?)
}

fn module_by_arguments(args: &Map<String, Value>) -> Option<&'static Module> {
    module(args.get("_ansible_module_name")?.as_str()?)
}

/// One failed result, as every module answers: no module to run.
fn refuse() -> ! {
    let result = serde_json::json!({
        "failed": true,
        "changed": false,
        "msg": format!(
            "ferro-talos runs one of the modules {}: call it by one of those names, or with an \
             arguments file whose _ansible_module_name names one",
            MODULES.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
        ),
    });
    println!("{result}");
    std::process::exit(1)
}
