//! `.machine.install` → UnattendedInstallConfig (`types/runtime/unattended_install.go`,
//! `generate/init.go`, `internal/app/machined/pkg/controllers/runtime/unattended_install.go`,
//! v1.14.0-rc.1).
//!
//! The 1.14 render holds an UnattendedInstallConfig whenever it has an install disk, and Talos
//! refuses `.machine.install` next to it ("UnattendedInstallConfig config is incompatible with
//! v1alpha1 config"), so the install section is always converted. The document installs with
//! `force` and the UKI command line, and knows no kernel arguments, extensions or BIOS mode.

use serde_json::{Value, json};

use super::builder::{Builder, Section, single};
use crate::disk_size::SizeCondition;
use crate::generate::go_quote;

const INSTALL: &str = "UnattendedInstallConfig";

pub(super) fn convert(b: &mut Builder) {
    let path = ".machine.install";
    let doc = single(INSTALL);
    if b.take_delete_marker(path) {
        // No legacy install section means no install; no document means the same in 1.14.
        b.delete(path, doc);
        return;
    }
    let Some(mut s) = b.take_section(path, INSTALL) else {
        return;
    };
    no_equivalents(b, &mut s);
    let selector = s.take("diskSelector").map(|v| (s.at("diskSelector"), v));
    let disk = s.take("disk").map(|v| (s.at("disk"), v));
    // The legacy installer uses the selector when there is one, the disk otherwise
    // (`install` in v1alpha1_sequencer_tasks.go).
    let matched = match (selector, disk) {
        (Some((from, v)), disk) => {
            if let Some((disk_from, _)) = disk {
                b.warn(format!(
                    "{disk_from} is dropped: {from} is set too, and the installer uses the selector"
                ));
            }
            b.section(&from, v, INSTALL)
                .and_then(|sel| selector_expression(b, sel))
                .map(|expr| (from, expr))
        }
        (None, Some((from, v))) => b
            .string(&from, &v)
            .filter(|d| !d.is_empty())
            .map(|d| (from, format!("disk.dev_path == {}", go_quote(&d)))),
        (None, None) => None,
    };
    let matched_any = matched.is_some();
    if let Some((from, expr)) = matched {
        b.put(&from, doc, "provisioning.diskSelector.match", json!(expr));
    }
    match s.take("wipe") {
        Some(v) => {
            let from = s.at("wipe");
            if let Some(wipe) = b.boolean(&from, &v) {
                b.put(&from, doc, "provisioning.wipe", json!(wipe));
            }
        }
        // Legacy wipes only when asked; the document wipes unless told not to.
        None if matched_any => b.put(&s.path, doc, "provisioning.wipe", json!(false)),
        None => {}
    }
    if let Some(v) = s.take("image") {
        b.move_to(&s.at("image"), v, doc, "installer.image", false);
    }
    if !matched_any && b.converted.iter().any(|c| c.to.starts_with(INSTALL)) {
        b.warn(format!(
            "{path} gives no disk: the converted UnattendedInstallConfig merges into the base \
             config's, which must have provisioning.diskSelector.match (render it with an install \
             disk)"
        ));
    }
    b.finish(s);
}

/// The fields UnattendedInstallConfig has no place for: refused when they ask for something, dropped
/// when they hold what the document does anyway.
fn no_equivalents(b: &mut Builder, s: &mut Section) {
    let keep_legacy = "or delete the UnattendedInstallConfig document (`$patch: delete`) and keep \
                       .machine.install, which Talos 1.14 still installs from when no such \
                       document exists";
    if let Some(v) = s.take("extraKernelArgs")
        && v.as_array().is_none_or(|l| !l.is_empty())
    {
        b.refuse(
            &s.at("extraKernelArgs"),
            format!(
                "UnattendedInstallConfig has no kernel arguments; set them in the boot assets (an \
                 Image Factory schematic's extraKernelArgs), {keep_legacy}"
            ),
        );
    }
    if let Some(v) = s.take("extensions")
        && v.as_array().is_none_or(|l| !l.is_empty())
    {
        b.refuse(
            &s.at("extensions"),
            format!(
                "UnattendedInstallConfig has no extensions; use an installer image with the \
                 extensions built in (Image Factory), {keep_legacy}"
            ),
        );
    }
    if let Some(v) = s.take("legacyBIOSSupport") {
        let from = s.at("legacyBIOSSupport");
        match b.boolean(&from, &v) {
            Some(true) => b.refuse(
                &from,
                format!(
                    "UnattendedInstallConfig installs without legacy BIOS support; {keep_legacy}"
                ),
            ),
            Some(false) => b.record(
                &from,
                "nothing (UnattendedInstallConfig installs without it)".into(),
            ),
            None => {}
        }
    }
    if let Some(v) = s.take("grubUseUKICmdline") {
        let from = s.at("grubUseUKICmdline");
        match b.boolean(&from, &v) {
            Some(true) => b.record(&from, "nothing (UnattendedInstallConfig always uses it)".into()),
            Some(false) => b.refuse(
                &from,
                format!(
                    "UnattendedInstallConfig always uses the UKI command line with GRUB; {keep_legacy}"
                ),
            ),
            None => {}
        }
    }
    if s.take("bootloader").is_some() {
        b.warn(format!(
            "{} is dropped: it never worked (v1alpha1_types.go) and UnattendedInstallConfig has \
             no such field",
            s.at("bootloader")
        ));
    }
}

/// The CEL expression upstream builds from a legacy disk selector
/// (`InstallConfig.DiskMatchExpression`, `types/v1alpha1/v1alpha1_provider.go`): one condition
/// per field in upstream's order, `disk.transport != ""` always, and never a read-only disk or a
/// CD-ROM, joined with `&&` and laid out as cel-go's unparser writes them.
fn selector_expression(b: &mut Builder, mut sel: Section) -> Option<String> {
    let mut conditions = Vec::new();
    let text = |b: &mut Builder, sel: &mut Section, key: &str| -> Option<String> {
        let v = sel.take(key)?;
        match v {
            Value::String(s) => Some(s).filter(|s| !s.is_empty()),
            Value::Number(n) => Some(n.to_string()),
            _ => {
                b.refuse(&sel.at(key), "expected a string");
                None
            }
        }
    };
    let mut ok = true;
    if let Some(size) = text(b, &mut sel, "size") {
        match size_condition(&size) {
            Ok(cond) => conditions.push(cond),
            Err(why) => {
                b.refuse(&sel.at("size"), why);
                ok = false;
            }
        }
    }
    let glob = |pattern: &str, field: &str| format!("glob({}, disk.{field})", go_quote(pattern));
    for (key, field) in [("uuid", "uuid"), ("wwid", "wwid"), ("model", "model")] {
        if let Some(p) = text(b, &mut sel, key) {
            conditions.push(glob(&p, field));
        }
    }
    if text(b, &mut sel, "name").is_some() {
        b.refuse(
            &sel.at("name"),
            "selector on name is not supported; select the disk by another field (model, serial, \
             busPath, ...)",
        );
        ok = false;
    }
    for (key, field) in [("serial", "serial"), ("modalias", "modalias")] {
        if let Some(p) = text(b, &mut sel, key) {
            conditions.push(glob(&p, field));
        }
    }
    conditions.push("disk.transport != \"\"".to_string());
    if let Some(kind) = text(b, &mut sel, "type") {
        match kind.as_str() {
            "nvme" => conditions.push("disk.transport == \"nvme\"".into()),
            "sd" => conditions.push("disk.transport == \"mmc\"".into()),
            "hdd" => conditions.push("disk.rotational".into()),
            "ssd" => conditions.push("!disk.rotational".into()),
            other => {
                b.refuse(
                    &sel.at("type"),
                    format!("unsupported disk type {other:?}; use nvme, sd, hdd or ssd"),
                );
                ok = false;
            }
        }
    }
    if let Some(p) = text(b, &mut sel, "busPath") {
        conditions.push(glob(&p, "bus_path"));
    }
    conditions.push("!disk.readonly".into());
    conditions.push("!disk.cdrom".into());
    b.finish(sel);
    ok.then(|| join_and(&conditions))
}

/// `disk.size <op> <bytes>u` from a legacy size condition such as `>= 1TB` or `4GiB`.
fn size_condition(condition: &str) -> Result<String, String> {
    let c = SizeCondition::parse(condition).map_err(|_| {
        "failed to parse the disk size: expected [>=|<=|>|<|==]<size>[units], such as >= 100GB"
            .to_string()
    })?;
    Ok(format!("disk.size {} {}u", c.op.as_str(), c.bytes))
}

/// Joins conditions with `&&` as cel-go's unparser writes a chain of them: after an operator that
/// would end at or past column 80 it breaks the line (`WrapOnColumn(80)`, operators wrapped
/// after, `&&` being a 4-character function name `_&&_`), which upstream's tests pin, e.g.
/// `... && !disk.readonly &&\n!disk.cdrom`.
fn join_and(conditions: &[String]) -> String {
    const WRAP_COLUMN: usize = 80;
    const OPERATOR: usize = "_&&_".len();
    let mut out = String::new();
    let mut line_start = 0;
    for (i, c) in conditions.iter().enumerate() {
        if i > 0 {
            if out.len() - line_start + OPERATOR >= WRAP_COLUMN {
                line_start = out.len();
                out.push_str(" &&\n");
            } else {
                out.push_str(" && ");
            }
        }
        out.push_str(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cel(selector: Value) -> Result<String, Vec<String>> {
        let mut b = Builder::new(crate::generate::MachineType::Worker, Default::default());
        let s = b
            .section(".machine.install.diskSelector", selector, INSTALL)
            .unwrap();
        let out = selector_expression(&mut b, s);
        let refusals: Vec<String> = b.drain().refusals.iter().map(|r| r.to_string()).collect();
        out.ok_or(refusals)
    }

    /// The expressions pinned by upstream's `TestInstallDiskSelector`
    /// (types/v1alpha1/v1alpha1_provider_test.go at v1.14.0-rc.1).
    #[test]
    fn selectors_match_upstream_expressions() {
        for (selector, want) in [
            (
                json!({"size": "<= 256KiB"}),
                "disk.size <= 262144u && disk.transport != \"\" && !disk.readonly && !disk.cdrom",
            ),
            (
                json!({"size": "1MiB", "type": "nvme"}),
                "disk.size == 1048576u && disk.transport != \"\" && disk.transport == \"nvme\" && !disk.readonly &&\n!disk.cdrom",
            ),
            (
                json!({"size": "1MiB", "type": "hdd", "modalias": "pci:1234:5678*"}),
                "disk.size == 1048576u && glob(\"pci:1234:5678*\", disk.modalias) && disk.transport != \"\" &&\ndisk.rotational && !disk.readonly && !disk.cdrom",
            ),
            (
                json!({"type": "ssd"}),
                "disk.transport != \"\" && !disk.rotational && !disk.readonly && !disk.cdrom",
            ),
            (
                json!({"busPath": "/pci-0000:00:1f.2/*"}),
                "disk.transport != \"\" && glob(\"/pci-0000:00:1f.2/*\", disk.bus_path) && !disk.readonly &&\n!disk.cdrom",
            ),
            (
                json!({"uuid": "0000-0001-*"}),
                "glob(\"0000-0001-*\", disk.uuid) && disk.transport != \"\" && !disk.readonly && !disk.cdrom",
            ),
        ] {
            assert_eq!(cel(selector.clone()).unwrap(), want, "{selector}");
        }
    }

    #[test]
    fn sizes_read_like_go_humanize() {
        assert_eq!(
            size_condition(">= 1TB").unwrap(),
            "disk.size >= 1000000000000u"
        );
        assert_eq!(size_condition("4GiB").unwrap(), "disk.size == 4294967296u");
        assert_eq!(
            size_condition("<500 gb").unwrap(),
            "disk.size < 500000000000u"
        );
        assert_eq!(size_condition("1,000").unwrap(), "disk.size == 1000u");
        assert!(size_condition("big").is_err());
    }

    #[test]
    fn unsupported_selectors_are_refused_by_field() {
        let e = cel(json!({"name": "/dev/sda"})).unwrap_err();
        assert!(
            e[0].contains(".machine.install.diskSelector.name: selector on name is not supported"),
            "{e:?}"
        );
        let e = cel(json!({"type": "tape"})).unwrap_err();
        assert!(e[0].contains("unsupported disk type \"tape\""), "{e:?}");
    }
}
