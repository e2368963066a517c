//! A schematic as the factory decodes it (`pkg/schematic/schematic.go` @ image-factory v1.5.0):
//! strictly (an unknown key is an error), and encoded back in the struct's field order with empty
//! values left out, which is the text its ID is the SHA-256 of. Lists keep their order and their
//! duplicates: the factory sorts nothing, so `[a, b]` and `[b, a]` are two schematics.
//!
//! `owner` comes first: an Enterprise factory with authentication stamps the caller's identity
//! there when it creates a schematic, so it is part of the canonical text and of the ID
//! (`Schematic.Owner`; `internal/frontend/http/configuration.go` `handleSchematicCreate`;
//! `docs/authentication.md` "Ownership" @ v1.5.0). A factory without authentication refuses it.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{FactoryError, FactoryErrorKind};
use ferro_talos_goyaml::{Node, Release, Scalar, emit};

/// The bootloaders a schematic may name (`imageropts.BootloaderKind`; `none` is the default and
/// is never written).
const BOOTLOADERS: [&str; 4] = ["none", "dual-boot", "sd-boot", "grub"];
/// The values of `secureboot.enrollKeys`.
const ENROLL_KEYS: [&str; 4] = ["off", "manual", "if-safe", "force"];

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schematic {
    /// The identity an authenticated factory owns the schematic for; empty for none.
    pub owner: String,
    pub overlay: Option<Overlay>,
    pub embedded_machine_configuration: String,
    pub extra_kernel_args: Vec<String>,
    pub meta: Vec<MetaValue>,
    pub official_extensions: Vec<String>,
    pub bootloader: String,
    pub secureboot_enroll_keys: String,
    pub secureboot_include_well_known_certificates: bool,
    pub disk_image_sector_size: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Overlay {
    pub image: String,
    pub name: String,
    /// Free-form, as the overlay reads it; written with its keys sorted.
    pub options: Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MetaValue {
    /// A META key, 0 to 255.
    pub key: u8,
    pub value: String,
}

fn invalid(message: String) -> FactoryError {
    FactoryError::new(FactoryErrorKind::Refused, message)
}

/// The keys a mapping at `path` may hold; anything else is refused, as the factory's strict
/// decoder refuses it.
fn only_keys<'a>(
    value: &'a Value,
    path: &str,
    allowed: &[&str],
) -> Result<&'a Map<String, Value>, FactoryError> {
    let Some(map) = value.as_object() else {
        return Err(invalid(format!("{path} must be a mapping")));
    };
    if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(invalid(format!(
            "{path} has no key {unknown:?} (the factory knows {})",
            allowed.join(", ")
        )));
    }
    Ok(map)
}

fn string_at(map: &Map<String, Value>, key: &str, path: &str) -> Result<String, FactoryError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(invalid(format!(
            "{path}.{key} must be a string, got {other}"
        ))),
    }
}

fn strings_at(
    map: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Vec<String>, FactoryError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(invalid(format!(
                    "{path}.{key}[{i}] must be a string, got {other}"
                ))),
            })
            .collect(),
        Some(other) => Err(invalid(format!(
            "{path}.{key} must be a list of strings, got {other}"
        ))),
    }
}

impl Schematic {
    /// Reads a schematic written as the factory's YAML would be (`customization`, `overlay`),
    /// already parsed into JSON values; every key is checked.
    pub fn from_value(value: &Value) -> Result<Schematic, FactoryError> {
        let top = only_keys(value, "schematic", &["owner", "overlay", "customization"])?;
        let mut s = Schematic {
            owner: string_at(top, "owner", "schematic")?,
            ..Schematic::default()
        };
        if let Some(overlay) = top.get("overlay").filter(|v| !v.is_null()) {
            let o = only_keys(overlay, "schematic.overlay", &["image", "name", "options"])?;
            let options = match o.get("options") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(m)) => m.clone(),
                Some(other) => {
                    return Err(invalid(format!(
                        "schematic.overlay.options must be a mapping, got {other}"
                    )));
                }
            };
            let overlay = Overlay {
                image: string_at(o, "image", "schematic.overlay")?,
                name: string_at(o, "name", "schematic.overlay")?,
                options,
            };
            if overlay.image.is_empty() || overlay.name.is_empty() {
                return Err(invalid(
                    "schematic.overlay needs both name and image (e.g. name: rpi_generic, image: \
                     siderolabs/sbc-raspberrypi)"
                        .into(),
                ));
            }
            s.overlay = Some(overlay);
        }
        let Some(custom) = top.get("customization").filter(|v| !v.is_null()) else {
            return Ok(s);
        };
        let path = "schematic.customization";
        let c = only_keys(
            custom,
            path,
            &[
                "embeddedMachineConfiguration",
                "extraKernelArgs",
                "meta",
                "systemExtensions",
                "bootloader",
                "secureboot",
                "diskImage",
            ],
        )?;
        s.embedded_machine_configuration = string_at(c, "embeddedMachineConfiguration", path)?;
        s.extra_kernel_args = strings_at(c, "extraKernelArgs", path)?;
        if let Some(meta) = c.get("meta").filter(|v| !v.is_null()) {
            let Some(items) = meta.as_array() else {
                return Err(invalid(format!(
                    "{path}.meta must be a list of {{key, value}}"
                )));
            };
            for (i, item) in items.iter().enumerate() {
                let at = format!("{path}.meta[{i}]");
                let m = only_keys(item, &at, &["key", "value"])?;
                let key = m
                    .get("key")
                    .and_then(Value::as_u64)
                    .and_then(|k| u8::try_from(k).ok())
                    .ok_or_else(|| invalid(format!("{at}.key must be a number from 0 to 255")))?;
                s.meta.push(MetaValue {
                    key,
                    value: string_at(m, "value", &at)?,
                });
            }
        }
        if let Some(ext) = c.get("systemExtensions").filter(|v| !v.is_null()) {
            let e = only_keys(
                ext,
                &format!("{path}.systemExtensions"),
                &["officialExtensions"],
            )?;
            s.official_extensions =
                strings_at(e, "officialExtensions", &format!("{path}.systemExtensions"))?;
        }
        s.bootloader = string_at(c, "bootloader", path)?.to_ascii_lowercase();
        if !s.bootloader.is_empty() && !BOOTLOADERS.contains(&s.bootloader.as_str()) {
            return Err(invalid(format!(
                "{path}.bootloader must be one of {}, got {:?}",
                BOOTLOADERS.join(", "),
                s.bootloader
            )));
        }
        if s.bootloader == "none" {
            s.bootloader.clear();
        }
        if let Some(sb) = c.get("secureboot").filter(|v| !v.is_null()) {
            let at = format!("{path}.secureboot");
            let b = only_keys(sb, &at, &["enrollKeys", "includeWellKnownCertificates"])?;
            s.secureboot_enroll_keys = string_at(b, "enrollKeys", &at)?;
            if !s.secureboot_enroll_keys.is_empty()
                && !ENROLL_KEYS.contains(&s.secureboot_enroll_keys.as_str())
            {
                return Err(invalid(format!(
                    "{at}.enrollKeys must be one of {}, got {:?}",
                    ENROLL_KEYS.join(", "),
                    s.secureboot_enroll_keys
                )));
            }
            s.secureboot_include_well_known_certificates =
                match b.get("includeWellKnownCertificates") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(v)) => *v,
                    Some(other) => {
                        return Err(invalid(format!(
                            "{at}.includeWellKnownCertificates must be true or false, got {other}"
                        )));
                    }
                };
        }
        if let Some(disk) = c.get("diskImage").filter(|v| !v.is_null()) {
            let at = format!("{path}.diskImage");
            let d = only_keys(disk, &at, &["sectorSize"])?;
            s.disk_image_sector_size = match d.get("sectorSize") {
                None | Some(Value::Null) => 0,
                Some(v) => v
                    .as_u64()
                    .ok_or_else(|| invalid(format!("{at}.sectorSize must be a whole number")))?,
            };
        }
        Ok(s)
    }

    /// The canonical YAML: what the factory stores and hashes, `yaml.Marshal` of the struct
    /// (go.yaml.in/yaml/v4 at a commit after v4.0.0-rc.6 in image-factory v1.5.0's go.mod;
    /// rc.6 is the release the Go module proxy serves, and what the oracle test compares with).
    pub fn canonical_yaml(&self) -> String {
        let mut top = Vec::new();
        if !self.owner.is_empty() {
            top.push(("owner", string(&self.owner)));
        }
        if let Some(o) = &self.overlay {
            let mut overlay = vec![("image", string(&o.image)), ("name", string(&o.name))];
            if !o.options.is_empty() {
                overlay.push(("options", Node::any(&Value::Object(o.options.clone()))));
            }
            top.push(("overlay", Node::fields(overlay)));
        }
        let mut c = Vec::new();
        if !self.embedded_machine_configuration.is_empty() {
            c.push((
                "embeddedMachineConfiguration",
                string(&self.embedded_machine_configuration),
            ));
        }
        if !self.extra_kernel_args.is_empty() {
            c.push(("extraKernelArgs", strings(&self.extra_kernel_args)));
        }
        if !self.meta.is_empty() {
            let items = self
                .meta
                .iter()
                .map(|m| Node::fields(vec![("key", number(m.key)), ("value", string(&m.value))]))
                .collect();
            c.push(("meta", Node::Seq(items)));
        }
        if !self.official_extensions.is_empty() {
            c.push((
                "systemExtensions",
                Node::fields(vec![(
                    "officialExtensions",
                    strings(&self.official_extensions),
                )]),
            ));
        }
        if !self.bootloader.is_empty() {
            c.push(("bootloader", string(&self.bootloader)));
        }
        let mut sb = Vec::new();
        if !self.secureboot_enroll_keys.is_empty() {
            sb.push(("enrollKeys", string(&self.secureboot_enroll_keys)));
        }
        if self.secureboot_include_well_known_certificates {
            sb.push(("includeWellKnownCertificates", number(true)));
        }
        if !sb.is_empty() {
            c.push(("secureboot", Node::fields(sb)));
        }
        if self.disk_image_sector_size != 0 {
            c.push((
                "diskImage",
                Node::fields(vec![("sectorSize", number(self.disk_image_sector_size))]),
            ));
        }
        top.push(("customization", Node::fields(c)));
        emit(&Node::fields(top), Release::V4Rc6)
    }

    /// The schematic's ID: the SHA-256 of its canonical YAML, in lower-case hex.
    pub fn id(&self) -> String {
        hex::encode(Sha256::digest(self.canonical_yaml().as_bytes()))
    }
}

fn string(s: &str) -> Node {
    Node::Scalar(Scalar::string(s))
}

/// A number or boolean, written as Go writes it.
fn number(v: impl std::fmt::Display) -> Node {
    Node::Scalar(Scalar::plain(v.to_string()))
}

fn strings(items: &[String]) -> Node {
    Node::Seq(items.iter().map(|s| string(s)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Upstream's pinned IDs: image-factory v1.5.0 `pkg/schematic/schematic_test.go` and
    /// `internal/profile/profile_test.go`, terraform-provider-talos's schematic resource test.
    #[test]
    fn ids_match_the_factorys_own_test_vectors() {
        let cases = [
            (
                json!({}),
                "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba",
            ),
            (
                json!({"customization": {"extraKernelArgs": []}}),
                "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba",
            ),
            (
                json!({"customization": {"extraKernelArgs": ["noapic", "nolapic"]}, }),
                "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c",
            ),
            (
                json!({"customization": {"extraKernelArgs": ["noapic", "nolapic"], "systemExtensions": {}}}),
                "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c",
            ),
            (
                json!({"customization": {"meta": [{"key": 10, "value": "foo"}], "extraKernelArgs": [], "systemExtensions": {}}}),
                "d308a2a5ee2277bed5fbaa104fcbc8d59122abfa737df987a95b4ca763459a7f",
            ),
            (
                json!({"customization": {"secureboot": {"includeWellKnownCertificates": true}}}),
                "fa8e05f142a851d3ee568eb0a8e5841eaf6b0ebc8df9a63df16ac5ed2c04f3e6",
            ),
            (
                json!({"customization": {"diskImage": {"sectorSize": 4096}}}),
                "92833e9ddd9bb9e11b2464fa5525429f01866306d52ebd882ee08d7918f6d1ea",
            ),
            (
                json!({"overlay": {"name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"}}),
                "ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9",
            ),
            (
                json!({"customization": {"systemExtensions": {"officialExtensions": ["siderolabs/amdgpu-firmware"]}}}),
                "d01dbf04a51b44a41d62b7c9692da0a74889277651600da6b602582654e4b402",
            ),
            (
                json!({"customization": {"systemExtensions": {"officialExtensions": ["siderolabs/amd-ucode", "siderolabs/intel-ucode"]}, "meta": [{"key": 10, "value": "foo"}], "extraKernelArgs": ["noapic", "nolapic"]}}),
                "6ba13d510dcc57f233b9b498d34a3c919c1abdd5675b46ad53cf4f2e66362f82",
            ),
            (
                json!({"overlay": {"name": "rpi_generic", "image": "ghcr.io/siderolabs/sbc-raspberrypi:v0.1.0"}, "customization": {"extraKernelArgs": ["noapic", "nolapic"], "systemExtensions": {"officialExtensions": ["siderolabs/amd-ucode", "siderolabs/intel-ucode"]}}}),
                "1da25204d18e6db95cb65ce2e38424b2ad94b2519a53aef34e45f07cc73ca5e8",
            ),
            (
                json!({"customization": {"embeddedMachineConfiguration": "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: worker-33"}}),
                "02f29f9a702fceec4fc2e2e51314d63710fc1b192ebb1629ac12301949d49c8c",
            ),
        ];
        for (input, id) in cases {
            let s = Schematic::from_value(&input).unwrap();
            assert_eq!(s.id(), id, "{input}\n{}", s.canonical_yaml());
        }
        assert_eq!(Schematic::default().canonical_yaml(), "customization: {}\n");
    }

    /// The owner an authenticated factory stamps is the first line of the canonical text and so
    /// changes the ID. Upstream pins no such ID (its integration tests compute theirs at start,
    /// `internal/integration/schematic_test.go` @ v1.5.0); these were computed with upstream's
    /// own `pkg/schematic` `Schematic.ID` (go-yaml v4) from the same schematics.
    #[test]
    fn the_owner_is_part_of_the_id() {
        let cases = [
            (
                json!({"owner": "alice"}),
                "owner: alice\ncustomization: {}\n",
                "325e789382e85e76ab77e38cb320a816e2c9550cb5afe960b21f75e06605e2e9",
            ),
            (
                json!({"owner": "alice", "overlay": {"name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"}}),
                "owner: alice\noverlay:\n    image: siderolabs/sbc-raspberrypi\n    name: rpi_generic\ncustomization: {}\n",
                "588ea1d76de80c5a660802685668540aa57365580ca3bc2e0c082bc6ecff1092",
            ),
            (
                json!({"owner": "org_xyz", "customization": {"extraKernelArgs": ["noapic", "nolapic"], "systemExtensions": {"officialExtensions": ["siderolabs/iscsi-tools"]}}}),
                "owner: org_xyz\ncustomization:\n    extraKernelArgs:\n        - noapic\n        - nolapic\n    systemExtensions:\n        officialExtensions:\n            - siderolabs/iscsi-tools\n",
                "30c713ae013ceb39d06e04c6cb4747d835d465e88b9a95f94b5a734cb1f25187",
            ),
            // An empty owner is no owner: the well-known default schematic.
            (
                json!({"owner": ""}),
                "customization: {}\n",
                "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba",
            ),
        ];
        for (input, canonical, id) in cases {
            let s = Schematic::from_value(&input).unwrap();
            assert_eq!(s.canonical_yaml(), canonical, "{input}");
            assert_eq!(s.id(), id, "{input}");
        }
        let e = Schematic::from_value(&json!({"owner": 7})).unwrap_err();
        assert!(
            e.message.contains("schematic.owner must be a string"),
            "{e}"
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        for (input, words) in [
            (json!({"customisation": {}}), "no key \"customisation\""),
            (
                json!({"customization": {"extensions": []}}),
                "schematic.customization has no key \"extensions\"",
            ),
            (
                json!({"customization": {"meta": [{"key": 300, "value": "x"}]}}),
                "meta[0].key must be a number from 0 to 255",
            ),
            (
                json!({"customization": {"bootloader": "auto"}}),
                "bootloader must be one of",
            ),
            (
                json!({"overlay": {"name": "rpi_generic"}}),
                "needs both name and image",
            ),
        ] {
            let e = Schematic::from_value(&input).unwrap_err();
            assert!(e.message.contains(words), "{e}");
        }
    }
}
