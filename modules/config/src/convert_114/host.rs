//! Host settings: `.machine.{sysctls, sysfs, kernel, udev, baseRuntimeSpecOverrides}` →
//! SysctlConfig, SysfsConfig, KernelModuleConfig, UdevRulesConfig and CRIBaseRuntimeSpecConfig
//! (`types/runtime/{sysctl,sysfs,kernel_module,udev_rules}.go`, `types/cri/base_runtime_spec.go`,
//! and `pkg/machinery/config/container/container.go`, v1.14.0-rc.1).
//!
//! Talos 1.14 still reads most of these from v1alpha1, but merges the documents over them (the
//! document wins per key, `SysctlConfig()` in container.go), so a legacy patch would lose to a
//! generated SysctlConfig; converted, the patch wins as it did in 1.13.

use serde_json::Value;

use super::builder::{Builder, is_delete_marker, named, single};

pub(super) fn convert(b: &mut Builder) {
    for (key, kind) in [("sysctls", "SysctlConfig"), ("sysfs", "SysfsConfig")] {
        let from = format!(".machine.{key}");
        if let Some(v) = b.take(&from) {
            // The same string map, merged per key; deleting the map clears the document's.
            b.move_to(&from, v, single(kind), "params", true);
        }
    }
    kernel_modules(b);
    if let Some(mut s) = b.take_section(".machine.udev", "UdevRulesConfig") {
        if let Some(v) = s.take("rules") {
            b.move_to(&s.at("rules"), v, single("UdevRulesConfig"), "rules", true);
        }
        b.finish(s);
    }
    if let Some(v) = b.take(".machine.baseRuntimeSpecOverrides") {
        // Legacy deep-merges, the document replaces (`merge:"replace"`): the base has none, so
        // the first patch's value is the same either way.
        b.move_to(
            ".machine.baseRuntimeSpecOverrides",
            v,
            single("CRIBaseRuntimeSpecConfig"),
            "overrides",
            false,
        );
    }
}

/// One KernelModuleConfig per module, named by it (legacy appends the list, the documents merge
/// by name with their parameters appended).
fn kernel_modules(b: &mut Builder) {
    let Some(mut s) = b.take_section(".machine.kernel", "KernelModuleConfig") else {
        return;
    };
    let from = s.at("modules");
    if let Some(v) = s.take("modules")
        && let Some(items) = b.list(&from, v)
    {
        for (i, item) in items.into_iter().enumerate() {
            let at = format!("{from}[{i}]");
            let delete = is_delete_marker(&item);
            let item = match item {
                Value::Object(mut map) => {
                    map.shift_remove("$patch");
                    Value::Object(map)
                }
                other => other,
            };
            let Some(mut m) = b.section(&at, item, "KernelModuleConfig") else {
                continue;
            };
            let name = m.take("name").and_then(|v| b.string(&m.at("name"), &v));
            let parameters = m.take("parameters");
            b.finish(m);
            let Some(name) = name.filter(|n| !n.is_empty()) else {
                b.refuse(&at, "a kernel module needs a name");
                continue;
            };
            let doc = named("KernelModuleConfig", &name);
            match (delete, parameters) {
                (true, _) => b.delete(&at, doc),
                (false, Some(p)) => {
                    b.move_to(&format!("{at}.parameters"), p, doc, "parameters", false)
                }
                (false, None) => b.ensure(&at, doc),
            }
        }
    }
    b.finish(s);
}
