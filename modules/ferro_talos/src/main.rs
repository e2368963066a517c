//! `ferro-talos`: every module of the ferro.talos collection in one program, so the collection
//! ships one copy of the TLS stack and the libraries per platform instead of one per module.
//!
//! Which module runs: the program's own name when it is called by a module's name (a link named
//! `talos_apply`), otherwise the module Ansible names in the arguments file it passes as the one
//! argument (`_ansible_module_name`, which Ansible sets for every module; a fully qualified name
//! such as `ferro.talos.talos_apply` counts by its last part).

use std::path::Path;

use ferro_talos_tasks::{
    talos_apply, talos_bootstrap, talos_config, talos_etcd_snapshot, talos_health, talos_info,
    talos_kubeconfig, talos_kubernetes_upgrade, talos_reset, talos_upgrade,
};

/// The modules this program runs, by name.
const MODULES: [&str; 10] = [
    "talos_apply",
    "talos_bootstrap",
    "talos_config",
    "talos_etcd_snapshot",
    "talos_health",
    "talos_info",
    "talos_kubeconfig",
    "talos_kubernetes_upgrade",
    "talos_reset",
    "talos_upgrade",
];

fn main() {
    let Some(module) = module_by_program_name().or_else(module_by_arguments) else {
        refuse();
    };
    use ferro_ansible_protocol::run_module;
    match module.as_str() {
        "talos_apply" => run_module("talos_apply", talos_apply::spec(), talos_apply::run),
        "talos_bootstrap" => run_module(
            "talos_bootstrap",
            talos_bootstrap::spec(),
            talos_bootstrap::run,
        ),
        "talos_config" => run_module("talos_config", talos_config::spec(), talos_config::run),
        "talos_etcd_snapshot" => run_module(
            "talos_etcd_snapshot",
            talos_etcd_snapshot::spec(),
            talos_etcd_snapshot::run,
        ),
        "talos_health" => run_module("talos_health", talos_health::spec(), talos_health::run),
        "talos_info" => run_module("talos_info", talos_info::spec(), talos_info::run),
        "talos_kubeconfig" => run_module(
            "talos_kubeconfig",
            talos_kubeconfig::spec(),
            talos_kubeconfig::run,
        ),
        "talos_kubernetes_upgrade" => run_module(
            "talos_kubernetes_upgrade",
            talos_kubernetes_upgrade::spec(),
            talos_kubernetes_upgrade::run,
        ),
        "talos_reset" => run_module("talos_reset", talos_reset::spec(), talos_reset::run),
        "talos_upgrade" => run_module("talos_upgrade", talos_upgrade::spec(), talos_upgrade::run),
        _ => refuse(),
    }
}

fn known(name: &str) -> Option<String> {
    let last = name.rsplit('.').next().unwrap_or(name);
    MODULES.contains(&last).then(|| last.to_string())
}

fn module_by_program_name() -> Option<String> {
    let program = std::env::args_os().next()?;
    known(Path::new(&program).file_name()?.to_str()?)
}

fn module_by_arguments() -> Option<String> {
    let path = std::env::args_os().nth(1)?;
    let text = std::fs::read_to_string(path).ok()?;
    let args: serde_json::Value = serde_json::from_str(&text).ok()?;
    known(args.get("_ansible_module_name")?.as_str()?)
}

/// One failed result, as every module answers: no module to run.
fn refuse() -> ! {
    let result = serde_json::json!({
        "failed": true,
        "changed": false,
        "msg": format!(
            "ferro-talos runs one of the modules {}: call it by one of those names, or with an \
             arguments file whose _ansible_module_name names one",
            MODULES.join(", ")
        ),
    });
    println!("{result}");
    std::process::exit(1)
}
