//! What talos_config does with patches written for the config shape before Talos 1.14.
//!
//! Talos 1.14 moves much of the v1alpha1 document into documents of their own (KubeletConfig,
//! KubeNodeConfig, KubeAPIServerConfig, ...), and a config rendered for the 1.14 contract already
//! holds them, so an old-shape patch collides with them on the node. Rendering for 1.13 or older,
//! each such field is a warning naming where it moves; rendering for 1.14, a patch that sets one
//! fails showing the same settings as 1.14 documents, or, with `convert_patches`, is converted and
//! the result says what was converted (`ferro_talos_config::convert_114`).

use ferro_ansible_protocol::{Context, ModuleError};
use ferro_talos_config::MachineConfig;
use ferro_talos_config::contract::Contract;
use ferro_talos_config::convert_114::convert_patch;
use ferro_talos_config::deprecations::{Replacement, deprecated_fields};
use ferro_talos_config::generate::MachineType;
use ferro_talos_config::null_elements::refused_null_items;
use ferro_talos_config::patch::Patch;
use ferro_talos_config::redact;
use serde_json::{Value, json};

/// A patch and the option element it came from (`patches[2]`), for messages.
pub struct LabelledPatch {
    pub label: String,
    pub patch: Patch,
}

/// What to do with an old-shape patch under a 1.14 contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OldShape {
    /// Fail, showing the patch written as 1.14 documents.
    Refuse,
    /// Convert it, and report what was converted.
    Convert,
}

/// Where a deprecated field goes, in a few words.
fn target(replacement: Replacement) -> String {
    match replacement {
        Replacement::MovesTo(to) => to.to_string(),
        Replacement::NoEquivalent(what) => format!("no equivalent ({what})"),
    }
}

/// Talos 1.14 refuses a null item in a list or map of pointers (a dangling `- `): from the 1.14
/// contract that is an error, before it a warning, since Talos 1.13 takes the config and a node
/// upgraded to 1.14 would refuse it. `where_` names the patch or the config.
pub fn check_null_items(
    ctx: &mut Context,
    where_: &str,
    docs: &[Value],
    contract: Contract,
) -> Result<(), ModuleError> {
    let found: Vec<String> = docs
        .iter()
        .flat_map(refused_null_items)
        .map(|path| format!("{path:?}"))
        .collect();
    if found.is_empty() {
        return Ok(());
    }
    let places = found.join(", ");
    let fix = "remove the item (a `-` with nothing after it) or give it a value";
    if contract < Contract::V1_14 {
        ctx.warn(format!(
            "{where_} has an empty item at {places}: Talos {contract} takes it, Talos 1.14 refuses \
             the config; {fix}"
        ));
        return Ok(());
    }
    Err(ModuleError::new(format!(
        "{where_}: null value is not allowed at {places}: Talos {contract} refuses an empty item in \
         this list or map; {fix}"
    )))
}

/// The patches to apply for `contract`, and a record of each deprecated field found (1.13 and
/// older) or converted (1.14): `{patch, path, to}`.
pub fn patches_for_contract(
    ctx: &mut Context,
    patches: Vec<LabelledPatch>,
    contract: Contract,
    machine: MachineType,
    old_shape: OldShape,
) -> Result<(Vec<Patch>, Vec<Value>), ModuleError> {
    let mut records = Vec::new();
    let mut out = Vec::with_capacity(patches.len());
    for LabelledPatch { label, patch } in patches {
        let Patch::Strategic(docs) = &patch else {
            out.push(patch);
            continue;
        };
        if contract < Contract::V1_14 {
            let found: Vec<_> = docs.iter().flat_map(deprecated_fields).collect();
            if !found.is_empty() {
                let fields: Vec<String> = found
                    .iter()
                    .map(|d| format!("{} -> {}", d.field.path, target(d.field.replacement)))
                    .collect();
                ctx.warn(format!(
                    "{label} sets fields Talos 1.14 moves to other documents ({}); it works for the {contract} \
                     contract, but for 1.14 it must be written as those documents (convert_patches: true converts it)",
                    fields.join(", ")
                ));
                for d in &found {
                    records.push(json!({
                        "patch": label,
                        "path": d.field.path,
                        "to": target(d.field.replacement),
                    }));
                }
            }
            out.push(patch);
            continue;
        }
        check_null_items(ctx, &label, docs, contract)?;
        if !docs.iter().any(|d| !deprecated_fields(d).is_empty()) {
            out.push(patch);
            continue;
        }
        let conversion =
            convert_patch(docs, machine).map_err(|e| ModuleError::new(format!("{label}: {e}")))?;
        let moves: Vec<String> = conversion
            .converted
            .iter()
            .map(|c| format!("{} -> {}", c.from, c.to))
            .collect();
        if old_shape == OldShape::Refuse {
            let shown = redact::redacted(&MachineConfig {
                docs: conversion.docs.clone(),
            });
            return Err(ModuleError::new(format!(
                "{label} is written for the config shape before Talos 1.14, and the {contract} contract \
                 renders the documents it collides with ({}). Write the patch as these documents instead \
                 (secrets masked), or set convert_patches: true to convert it on every run:\n{}",
                moves.join(", "),
                shown.to_patch_yaml()
            )));
        }
        for w in &conversion.warnings {
            ctx.warn(format!("{label}: {w}"));
        }
        for c in &conversion.converted {
            records.push(json!({"patch": label, "path": c.from, "to": c.to}));
        }
        out.push(conversion.into_patch());
    }
    Ok((out, records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_null_item_fails_from_1_14_naming_the_place_and_what_to_write() {
        let docs = [json!({"machine": {"kernel": {"modules": [{"name": "a"}, null]}}})];
        let mut ctx = Context::new("talos_config");
        check_null_items(&mut ctx, "patches[0]", &docs, Contract::V1_13).unwrap();
        let e = check_null_items(&mut ctx, "patches[0]", &docs, Contract::V1_14).unwrap_err();
        let text = e.msg();
        assert!(
            text.starts_with(
                "patches[0]: null value is not allowed at \"machine.kernel.modules[1]\""
            ),
            "{text}"
        );
        assert!(text.contains("remove the item"), "{text}");
    }
}
