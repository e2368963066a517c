//! The module list lives once, in `catalog::MODULES`: every other place that names the modules
//! (Ansible's routing and action group, the docs sidecars and stubs, the sanity-ignore files, the
//! README's table) must name exactly these, so a module added or removed in one place fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ferro_talos_tasks::catalog::MODULES;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|e| panic!("{relative}: cannot read it ({e})"))
}

fn names() -> BTreeSet<String> {
    MODULES.iter().map(|m| m.name.to_string()).collect()
}

fn runtime() -> Value {
    serde_saphyr::from_str(&read("meta/runtime.yml")).expect("meta/runtime.yml is YAML")
}

#[test]
fn meta_runtime_routes_every_module_and_nothing_else_through_the_action_plugin() {
    let runtime = runtime();
    let routed = runtime["plugin_routing"]["modules"]
        .as_object()
        .expect("plugin_routing.modules is a mapping");
    assert_eq!(routed.keys().cloned().collect::<BTreeSet<_>>(), names());
    for (name, route) in routed {
        assert_eq!(
            route["action_plugin"], "ferro.talos.talos_module",
            "meta/runtime.yml: {name} is not routed through the collection's action plugin"
        );
    }
}

/// The `talos` action group is for `module_defaults` of the connection options, so it holds
/// exactly the modules whose spec takes a `node`.
#[test]
fn the_talos_action_group_holds_the_modules_that_take_the_connection_options() {
    let group: BTreeSet<String> = runtime()["action_groups"]["talos"]
        .as_array()
        .expect("action_groups.talos is a list")
        .iter()
        .map(|v| v.as_str().expect("a module name").to_string())
        .collect();
    let connecting: BTreeSet<String> = MODULES
        .iter()
        .filter(|m| (m.spec)().describe().get("node").is_some())
        .map(|m| m.name.to_string())
        .collect();
    assert_eq!(group, connecting);
    assert!(!connecting.contains("talos_config") && connecting.contains("talos_apply"));
}

#[test]
fn every_module_has_a_docs_sidecar_and_a_stub_and_nothing_else_is_there() {
    let dir = root().join("plugins/modules");
    let mut sidecars = BTreeSet::new();
    let mut stubs = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("plugins/modules") {
        let name = entry.unwrap().file_name().into_string().unwrap();
        match name.strip_suffix(".yml") {
            Some(module) => sidecars.insert(module.to_string()),
            None => stubs.insert(name),
        };
    }
    assert_eq!(sidecars, names(), "plugins/modules/*.yml");
    assert_eq!(stubs, names(), "plugins/modules/<name> stubs");
}

#[test]
fn every_sanity_ignore_file_skips_validate_modules_for_exactly_the_modules() {
    let dir = root().join("tests/sanity");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/sanity") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("ignore-") {
            continue;
        }
        files += 1;
        let skipped: BTreeSet<String> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .filter_map(|line| line.strip_suffix(" validate-modules!skip"))
            .filter_map(|path| path.strip_prefix("plugins/modules/"))
            .map(str::to_string)
            .collect();
        assert_eq!(skipped, names(), "tests/sanity/{name}");
    }
    assert!(files >= 3, "tests/sanity holds {files} ignore files");
}

#[test]
fn the_readme_table_has_a_row_for_every_module() {
    let readme = read("README.md");
    let rows: BTreeSet<String> = readme
        .lines()
        .filter_map(|line| line.strip_prefix("| `ferro.talos."))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| name.to_string())
        .collect();
    assert_eq!(rows, names(), "README.md's module table");
}
