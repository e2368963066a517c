//! `ferro-talos`: every module of the ferro.talos collection in one program, so the collection
//! ships one copy of the TLS stack and the libraries per platform instead of one per module.
//!
//! Which module runs: the program's own name when it is called by a module's name (a link named
//! `talos_apply`), otherwise the module Ansible names in the arguments file it passes as the one
//! argument (`_ansible_module_name`, which Ansible sets for every module; a fully qualified name
//! such as `ferro.talos.talos_apply` counts by its last part).

use std::path::Path;

use ferro_talos_tasks::{
    talos_apply, talos_bootstrap, talos_config, talos_etcd_member, talos_etcd_recover,
    talos_etcd_snapshot, talos_health, talos_image_factory, talos_info, talos_kubeconfig,
    talos_kubernetes_upgrade, talos_logs, talos_reboot, talos_reset, talos_resource_info,
    talos_shutdown, talos_support_bundle, talos_upgrade,
};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Params, Spec, run_module};

/// One module: its name, its argument spec, and what it does.
type Module = (
    &'static str,
    fn() -> Spec,
    fn(&mut Context, &Params) -> Result<ModuleResult, ModuleError>,
);

/// The modules this program runs.
const MODULES: [Module; 18] = [
    ("talos_apply", talos_apply::spec, talos_apply::run),
    (
        "talos_bootstrap",
        talos_bootstrap::spec,
        talos_bootstrap::run,
    ),
    ("talos_config", talos_config::spec, talos_config::run),
    (
        "talos_etcd_member",
        talos_etcd_member::spec,
        talos_etcd_member::run,
    ),
    (
        "talos_etcd_recover",
        talos_etcd_recover::spec,
        talos_etcd_recover::run,
    ),
    (
        "talos_etcd_snapshot",
        talos_etcd_snapshot::spec,
        talos_etcd_snapshot::run,
    ),
    ("talos_health", talos_health::spec, talos_health::run),
    (
        "talos_image_factory",
        talos_image_factory::spec,
        talos_image_factory::run,
    ),
    ("talos_info", talos_info::spec, talos_info::run),
    (
        "talos_kubeconfig",
        talos_kubeconfig::spec,
        talos_kubeconfig::run,
    ),
    (
        "talos_kubernetes_upgrade",
        talos_kubernetes_upgrade::spec,
        talos_kubernetes_upgrade::run,
    ),
    ("talos_logs", talos_logs::spec, talos_logs::run),
    ("talos_reboot", talos_reboot::spec, talos_reboot::run),
    ("talos_reset", talos_reset::spec, talos_reset::run),
    (
        "talos_resource_info",
        talos_resource_info::spec,
        talos_resource_info::run,
    ),
    ("talos_shutdown", talos_shutdown::spec, talos_shutdown::run),
    (
        "talos_support_bundle",
        talos_support_bundle::spec,
        talos_support_bundle::run,
    ),
    ("talos_upgrade", talos_upgrade::spec, talos_upgrade::run),
];

/// `--argument-specs`: every module's options as an Ansible argument spec, one JSON object, so
/// the tests can check each module's documentation against what its code takes.
const ARGUMENT_SPECS: &str = "--argument-specs";

fn main() {
    if std::env::args().nth(1).as_deref() == Some(ARGUMENT_SPECS) {
        let specs: serde_json::Map<String, serde_json::Value> = MODULES
            .iter()
            .map(|(name, spec, _)| (name.to_string(), spec().describe()))
            .collect();
        println!("{}", serde_json::Value::Object(specs));
        return;
    }
    let Some(module) = module_by_program_name().or_else(module_by_arguments) else {
        refuse();
    };
    let (name, spec, run) = MODULES
        .iter()
        .find(|(name, _, _)| *name == module)
        .unwrap_or_else(|| refuse());
    run_module(name, spec(), run)
}

fn known(name: &str) -> Option<String> {
    let last = name.rsplit('.').next().unwrap_or(name);
    MODULES
        .iter()
        .any(|(module, _, _)| *module == last)
        .then(|| last.to_string())
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
            MODULES.map(|(name, _, _)| name).join(", ")
        ),
    });
    println!("{result}");
    std::process::exit(1)
}
