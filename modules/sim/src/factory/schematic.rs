//! The test factory's own reading of a schematic: decoded strictly (an unknown key is refused, as
//! `KnownFields(true)` refuses it), written back the way go-yaml writes `pkg/schematic`'s struct
//! (image-factory v1.5.0): fields in declaration order, empty ones left out, `customization`
//! always, four spaces a level, lists as given. The ID is the SHA-256 of that text.
//!
//! Deliberately its own code, not the collection's client's: it is the other opinion in tests.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The fields of each struct, in declaration order.
const TOP: &[&str] = &["owner", "overlay", "customization"];
const OVERLAY: &[&str] = &["image", "name", "options"];
const CUSTOMIZATION: &[&str] = &[
    "embeddedMachineConfiguration",
    "extraKernelArgs",
    "meta",
    "systemExtensions",
    "bootloader",
    "secureboot",
    "diskImage",
];
const META: &[&str] = &["key", "value"];
const EXTENSIONS: &[&str] = &["officialExtensions"];
const SECUREBOOT: &[&str] = &["enrollKeys", "includeWellKnownCertificates"];
const DISK_IMAGE: &[&str] = &["sectorSize"];

pub fn id_of(canonical: &str) -> String {
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

/// Why a posted schematic is not stored.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// The decoder's or the validation's complaint (400).
    Invalid(String),
    /// The body names an owner other than the authenticated user (403).
    OtherOwner,
}

impl From<String> for Refusal {
    fn from(why: String) -> Refusal {
        Refusal::Invalid(why)
    }
}

impl From<&str> for Refusal {
    fn from(why: &str) -> Refusal {
        Refusal::Invalid(why.to_string())
    }
}

/// The canonical YAML of a posted body. `user` is the authenticated caller of an Enterprise
/// factory, whose name becomes the owner; without one an owner is refused, as the community
/// edition refuses it.
pub fn canonical(body: &str, user: Option<&str>) -> Result<String, Refusal> {
    let doc: Value = if body.trim().is_empty() {
        return Err("EOF".into());
    } else {
        serde_saphyr::from_str(body).map_err(|e| format!("yaml: {e}"))?
    };
    let doc = if doc.is_null() {
        Value::Object(Default::default())
    } else {
        doc
    };
    strict(&doc, TOP, "schematic.Schematic")?;
    let given = text(&doc, "owner")?;
    let owner = match user {
        Some(user) if !given.is_empty() && given != user => return Err(Refusal::OtherOwner),
        Some(user) => user,
        None if !given.is_empty() => {
            return Err("owner field is only supported in Enterprise edition".into());
        }
        None => "",
    };
    let mut out = String::new();
    if !owner.is_empty() {
        out.push_str(&format!("owner: {}\n", scalar(owner)));
    }
    if let Some(overlay) = doc.get("overlay").filter(|o| has_content(o)) {
        strict(overlay, OVERLAY, "schematic.Overlay")?;
        out.push_str("overlay:\n");
        out.push_str(&format!("    image: {}\n", scalar(text(overlay, "image")?)));
        out.push_str(&format!("    name: {}\n", scalar(text(overlay, "name")?)));
        if let Some(Value::Object(options)) = overlay.get("options")
            && !options.is_empty()
        {
            out.push_str("    options:\n");
            write_sorted_map(&mut out, options, 8);
        }
    }
    let mut body = String::new();
    if let Some(custom) = doc.get("customization").filter(|c| !c.is_null()) {
        strict(custom, CUSTOMIZATION, "schematic.Customization")?;
        let emc = text(custom, "embeddedMachineConfiguration")?;
        if !emc.is_empty() {
            body.push_str("    embeddedMachineConfiguration: ");
            body.push_str(&block_or_scalar(emc, 8));
            body.push('\n');
        }
        list(
            &mut body,
            "extraKernelArgs",
            custom.get("extraKernelArgs"),
            4,
        )?;
        if let Some(Value::Array(meta)) = custom.get("meta")
            && !meta.is_empty()
        {
            body.push_str("    meta:\n");
            for m in meta {
                strict(m, META, "schematic.MetaValue")?;
                let key = m
                    .get("key")
                    .and_then(Value::as_u64)
                    .filter(|k| *k <= 255)
                    .ok_or("yaml: cannot unmarshal meta key into uint8")?;
                body.push_str(&format!("        - key: {key}\n"));
                body.push_str(&format!("          value: {}\n", scalar(text(m, "value")?)));
            }
        }
        if let Some(ext) = custom.get("systemExtensions").filter(|e| has_content(e)) {
            strict(ext, EXTENSIONS, "schematic.SystemExtensions")?;
            let mut inner = String::new();
            list(
                &mut inner,
                "officialExtensions",
                ext.get("officialExtensions"),
                8,
            )?;
            if !inner.is_empty() {
                body.push_str("    systemExtensions:\n");
                body.push_str(&inner);
            }
        }
        let bootloader = text(custom, "bootloader")?.to_lowercase();
        match bootloader.as_str() {
            "" | "none" => {}
            "dual-boot" | "sd-boot" | "grub" => {
                body.push_str(&format!("    bootloader: {bootloader}\n"));
            }
            other => {
                return Err(
                    format!("yaml: {other} does not belong to BootloaderKind values").into(),
                );
            }
        }
        if let Some(sb) = custom.get("secureboot").filter(|s| has_content(s)) {
            strict(sb, SECUREBOOT, "schematic.SecureBootCustomization")?;
            let mut inner = String::new();
            let keys = text(sb, "enrollKeys")?;
            if !keys.is_empty() {
                inner.push_str(&format!("        enrollKeys: {}\n", scalar(keys)));
            }
            if sb.get("includeWellKnownCertificates") == Some(&Value::Bool(true)) {
                inner.push_str("        includeWellKnownCertificates: true\n");
            }
            if !inner.is_empty() {
                body.push_str("    secureboot:\n");
                body.push_str(&inner);
            }
        }
        if let Some(disk) = custom.get("diskImage").filter(|d| has_content(d)) {
            strict(disk, DISK_IMAGE, "schematic.DiskImageCustomization")?;
            if let Some(size) = disk
                .get("sectorSize")
                .and_then(Value::as_u64)
                .filter(|s| *s > 0)
            {
                body.push_str(&format!("    diskImage:\n        sectorSize: {size}\n"));
            }
        }
    }
    if body.is_empty() {
        out.push_str("customization: {}\n");
    } else {
        out.push_str("customization:\n");
        out.push_str(&body);
    }
    Ok(out)
}

fn has_content(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Object(m) => !m.is_empty(),
        _ => true,
    }
}

/// Refuses a key the struct named `go_type` has no field for, in the factory's words.
fn strict(v: &Value, fields: &[&str], go_type: &str) -> Result<(), String> {
    let Value::Object(map) = v else {
        return Err(format!("yaml: cannot unmarshal into {go_type}"));
    };
    match map.keys().find(|k| !fields.contains(&k.as_str())) {
        Some(unknown) => Err(format!(
            "yaml: construct errors: field {unknown} not found in type {go_type}"
        )),
        None => Ok(()),
    }
}

fn text<'a>(v: &'a Value, key: &str) -> Result<&'a str, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("yaml: cannot unmarshal {key} into string")),
    }
}

fn list(out: &mut String, key: &str, v: Option<&Value>, indent: usize) -> Result<(), String> {
    let items = match v {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(format!("yaml: cannot unmarshal {key} into []string")),
    };
    if items.is_empty() {
        return Ok(());
    }
    out.push_str(&format!("{:indent$}{key}:\n", ""));
    for item in items {
        let Value::String(s) = item else {
            return Err(format!("yaml: cannot unmarshal {key} item into string"));
        };
        out.push_str(&format!(
            "{:width$}- {}\n",
            "",
            scalar(s),
            width = indent + 4
        ));
    }
    Ok(())
}

fn write_sorted_map(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for key in keys {
        match &map[key] {
            Value::Object(inner) if !inner.is_empty() => {
                out.push_str(&format!("{:indent$}{}:\n", "", scalar(key)));
                write_sorted_map(out, inner, indent + 4);
            }
            Value::String(s) => {
                out.push_str(&format!("{:indent$}{}: {}\n", "", scalar(key), scalar(s)))
            }
            other => out.push_str(&format!("{:indent$}{}: {other}\n", "", scalar(key))),
        }
    }
}

/// A multi-line string as a literal block (`|-` without a final newline), else a scalar.
fn block_or_scalar(s: &str, indent: usize) -> String {
    if !s.contains('\n') {
        return scalar(s);
    }
    let (head, content) = match s.strip_suffix('\n') {
        Some(c) => ("|", c),
        None => ("|-", s),
    };
    let lines: Vec<String> = content
        .lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{:indent$}{l}", "")
            }
        })
        .collect();
    format!("{head}\n{}", lines.join("\n"))
}

/// How go-yaml writes a string in block context: quoted when plain text would read back as
/// another type or cannot be plain, else as it is.
fn scalar(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    let number_like = s.parse::<f64>().is_ok() || s.starts_with("0x") || s.starts_with("0o");
    if s.is_empty() || number_like || ["true", "false", "null", "~"].contains(&lower.as_str()) {
        return format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    }
    let yaml11 = ["y", "yes", "n", "no", "on", "off", "<<"];
    let starts_badly = s.starts_with(|c: char| "#,[]{}&*!|>'\"%@`".contains(c))
        || s.starts_with("- ")
        || s.starts_with("? ")
        || s.starts_with(": ")
        || s == "-";
    if yaml11.contains(&lower.as_str())
        || starts_badly
        || s.contains(": ")
        || s.ends_with(':')
        || s.contains(" #")
        || s.starts_with(' ')
        || s.ends_with(' ')
    {
        return format!("'{}'", s.replace('\'', "''"));
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IDs image-factory v1.5.0's own tests pin (`pkg/schematic/schematic_test.go`,
    /// `internal/profile/profile_test.go`).
    #[test]
    fn the_factorys_pinned_ids() {
        for (body, id) in [
            (
                "{}",
                "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba",
            ),
            (
                "customization:\n  extraKernelArgs: [noapic, nolapic]\n  systemExtensions: {}\n",
                "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c",
            ),
            (
                "{\"customization\": {\"meta\": [{\"key\": 10, \"value\": \"foo\"}]}}",
                "d308a2a5ee2277bed5fbaa104fcbc8d59122abfa737df987a95b4ca763459a7f",
            ),
            (
                "overlay: {name: rpi_generic, image: siderolabs/sbc-raspberrypi}\n",
                "ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9",
            ),
            (
                "customization:\n  systemExtensions:\n    officialExtensions: [siderolabs/amd-ucode, siderolabs/intel-ucode]\n  meta: [{key: 10, value: foo}]\n  extraKernelArgs: [noapic, nolapic]\n",
                "6ba13d510dcc57f233b9b498d34a3c919c1abdd5675b46ad53cf4f2e66362f82",
            ),
            (
                "customization:\n  embeddedMachineConfiguration: \"apiVersion: v1alpha1\\nkind: HostnameConfig\\nhostname: worker-33\"\n",
                "02f29f9a702fceec4fc2e2e51314d63710fc1b192ebb1629ac12301949d49c8c",
            ),
        ] {
            let canonical = canonical(body, None).unwrap();
            assert_eq!(id_of(&canonical), id, "{body}\n{canonical}");
        }
    }

    /// An Enterprise factory stamps the authenticated user as the owner, which is part of the
    /// ID; a community factory refuses an owner. The ID was computed with upstream's own
    /// `pkg/schematic` `Schematic.ID` @ image-factory v1.5.0 for `Owner: "alice"`.
    #[test]
    fn the_owner_is_the_authenticated_user() {
        let stamped = canonical("{}", Some("alice")).unwrap();
        assert_eq!(stamped, "owner: alice\ncustomization: {}\n");
        assert_eq!(
            id_of(&stamped),
            "325e789382e85e76ab77e38cb320a816e2c9550cb5afe960b21f75e06605e2e9"
        );
        assert_eq!(canonical("owner: alice\n", Some("alice")).unwrap(), stamped);
        assert_eq!(
            canonical("owner: bob\n", Some("alice")),
            Err(Refusal::OtherOwner)
        );
        assert_eq!(
            canonical("owner: alice\n", None),
            Err(Refusal::Invalid(
                "owner field is only supported in Enterprise edition".into()
            ))
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let Err(Refusal::Invalid(e)) = canonical("something: 1\n", None) else {
            panic!("accepted an unknown field");
        };
        assert!(
            e.contains("field something not found in type schematic.Schematic"),
            "{e}"
        );
    }
}
