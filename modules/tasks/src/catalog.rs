//! The collection's modules, listed once: the program runs them from this table, the tests take
//! them from it, and `tests/module_list.rs` checks that `meta/runtime.yml`, the docs sidecars and
//! the sanity-ignore files name exactly these.

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Params, Spec};

use crate::{
    talos_apply, talos_bootstrap, talos_config, talos_etcd_member, talos_etcd_recover,
    talos_etcd_snapshot, talos_health, talos_image_factory, talos_info, talos_kubeconfig,
    talos_kubernetes_upgrade, talos_logs, talos_reboot, talos_reset, talos_resource_info,
    talos_shutdown, talos_support_bundle, talos_upgrade,
};

/// One module: its name, its argument spec, and what it does.
pub struct Module {
    pub name: &'static str,
    pub spec: fn() -> Spec,
    pub run: fn(&mut Context, &Params) -> Result<ModuleResult, ModuleError>,
}

macro_rules! modules {
    ($($module:ident),+ $(,)?) => {
        [$(Module {
            name: stringify!($module),
            spec: $module::spec,
            // The door: options become the module's typed `Args` before it runs.
            run: |ctx, p| $module::run(ctx, $module::Args::from_params(p)?),
        }),+]
    };
}

/// Every module of the collection, by name in alphabetical order.
pub const MODULES: &[Module] = &modules![
    talos_apply,
    talos_bootstrap,
    talos_config,
    talos_etcd_member,
    talos_etcd_recover,
    talos_etcd_snapshot,
    talos_health,
    talos_image_factory,
    talos_info,
    talos_kubeconfig,
    talos_kubernetes_upgrade,
    talos_logs,
    talos_reboot,
    talos_reset,
    talos_resource_info,
    talos_shutdown,
    talos_support_bundle,
    talos_upgrade,
];

/// The module called `name`, or its fully qualified form (`ferro.talos.talos_apply`).
pub fn module(name: &str) -> Option<&'static Module> {
    let last = name.rsplit('.').next().unwrap_or(name);
    MODULES.iter().find(|module| module.name == last)
}

/// The module called `name`, for a constant: a name that is not a module fails the build.
pub const fn named(name: &str) -> &'static Module {
    let mut i = 0;
    while i < MODULES.len() {
        if same(MODULES[i].name.as_bytes(), name.as_bytes()) {
            return &MODULES[i];
        }
        i += 1;
    }
    panic!("no module of that name in MODULES")
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_has_no_repeats() {
        let names: Vec<&str> = MODULES.iter().map(|m| m.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
    }

    #[test]
    fn a_module_is_found_by_its_short_or_fully_qualified_name() {
        assert_eq!(module("talos_apply").map(|m| m.name), Some("talos_apply"));
        assert_eq!(
            module("ferro.talos.talos_upgrade").map(|m| m.name),
            Some("talos_upgrade")
        );
        assert!(module("talos_nothing").is_none());
        assert!(module("ferro.talos.").is_none());
        const RESET: &Module = named("talos_reset");
        assert_eq!(RESET.name, "talos_reset");
    }
}
