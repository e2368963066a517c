//! `talos_image_factory`'s options, checked once before anything asks the factory.

use std::path::PathBuf;
use std::time::Duration;

use ferro_ansible_protocol::{ModuleError, Params};
use ferro_talos_factory::{Architecture, Schematic, Target, default_pxe_url};
use serde_json::{Map, Value, json};

use super::PUBLIC_FACTORY;
use crate::shared::options::wait_seconds;

pub struct Args {
    /// `factory_url`, trimmed.
    pub factory_url: String,
    /// `pxe_url`, else the factory's own PXE host (`pxe.` before its host).
    pub pxe_url: String,
    pub ca_file: Option<PathBuf>,
    /// `factory_username` and `factory_password`; None for a factory without authentication.
    pub credentials: Option<FactoryCredentials>,
    /// From `schematic`, or from the options that describe one, with `owner`, and a board's
    /// overlay when `sbc` is set and no overlay is given.
    pub schematic: Schematic,
    /// `sbc`, else `platform` (`metal` by default) on `architecture`.
    pub target: Target,
    /// `talos_version`, with its `v`; None when only the schematic is wanted (no URLs).
    pub talos_version: Option<String>,
    /// `timeout`: how long each request to the factory may take.
    pub timeout: Duration,
}

/// HTTP Basic credentials for an Enterprise factory with authentication.
pub struct FactoryCredentials {
    pub username: String,
    pub password: String,
}

impl Args {
    pub fn from_params(p: &Params) -> Result<Args, ModuleError> {
        let target = target(p)?;
        let schematic = schematic(p, &target)?;
        let talos_version = p
            .str("talos_version")
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| format!("v{}", v.trim_start_matches('v')));
        if let Some(v) = &talos_version
            && semver::Version::parse(&v[1..]).is_err()
        {
            return Err(ModuleError::new(format!(
                "talos_version {v:?} is not a Talos version; write it like v1.13.9"
            )));
        }
        let factory_url = p
            .str("factory_url")
            .unwrap_or(PUBLIC_FACTORY)
            .trim()
            .to_string();
        let pxe_url = p
            .str("pxe_url")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| default_pxe_url(&factory_url));
        let timeout = wait_seconds(p, "timeout", 30)?;
        let credentials = match (p.str("factory_username"), p.str("factory_password")) {
            (Some(username), Some(password)) => {
                if schematic.owner.is_empty() {
                    return Err(ModuleError::new(
                        "owner: an authenticated factory writes the identity of factory_username into the schematic, which \
                         changes its ID; set owner to that identity (the htpasswd user name, or with Auth0 the \
                         organization's org_... ID)",
                    ));
                }
                Some(FactoryCredentials {
                    username: username.to_string(),
                    password: password.to_string(),
                })
            }
            _ => None,
        };
        Ok(Args {
            factory_url,
            pxe_url,
            ca_file: p.path("ca_file"),
            credentials,
            schematic,
            target,
            talos_version,
            timeout,
        })
    }
}

fn target(p: &Params) -> Result<Target, ModuleError> {
    let arch = Architecture::parse(p.str("architecture").unwrap_or("amd64"))
        .unwrap_or(Architecture::Amd64);
    if let Some(board) = p.str("sbc").filter(|s| !s.trim().is_empty()) {
        return Target::sbc(board.trim()).map_err(ModuleError::new);
    }
    Target::platform(p.str("platform").unwrap_or("metal").trim(), arch).map_err(ModuleError::new)
}

/// The schematic from `schematic`, or from the options that describe one; a board's overlay when
/// `sbc` is set and no overlay is given.
fn schematic(p: &Params, target: &Target) -> Result<Schematic, ModuleError> {
    let mut value = match p.dict("schematic") {
        Some(dict) => Value::Object(dict.clone()),
        None => {
            let mut customization = Map::new();
            let extensions = p.str_list("extensions").unwrap_or_default();
            if let Some(bad) = extensions
                .iter()
                .find(|e| e.trim().is_empty() || e.contains(':'))
            {
                return Err(ModuleError::new(format!(
                    "extensions: {bad:?} is not an extension name; write names as the factory lists \
                     them, like siderolabs/iscsi-tools (no tag or digest)"
                )));
            }
            if !extensions.is_empty() {
                customization.insert(
                    "systemExtensions".into(),
                    json!({"officialExtensions": extensions}),
                );
            }
            let args = p.str_list("extra_kernel_args").unwrap_or_default();
            if !args.is_empty() {
                customization.insert("extraKernelArgs".into(), json!(args));
            }
            let meta: Vec<Value> = p.list("meta").map(<[Value]>::to_vec).unwrap_or_default();
            if !meta.is_empty() {
                for (i, m) in meta.iter().enumerate() {
                    let key = m.get("key").and_then(Value::as_i64).unwrap_or(-1);
                    if !(0..=255).contains(&key) {
                        return Err(ModuleError::new(format!(
                            "meta[{i}].key must be a META key from 0 to 255, got {key}"
                        )));
                    }
                }
                customization.insert("meta".into(), Value::Array(meta));
            }
            let mut top = Map::new();
            if let Some(overlay) = p.dict("overlay") {
                let mut overlay = overlay.clone();
                if overlay.get("options").is_some_and(Value::is_null) {
                    overlay.remove("options");
                }
                top.insert("overlay".into(), Value::Object(overlay));
            }
            top.insert("customization".into(), Value::Object(customization));
            Value::Object(top)
        }
    };
    if let (Target::Sbc(board), Value::Object(top)) = (target, &mut value)
        && top.get("overlay").is_none_or(Value::is_null)
    {
        top.insert(
            "overlay".into(),
            json!({"name": board.overlay_name, "image": board.overlay_image}),
        );
    }
    let mut schematic = Schematic::from_value(&value).map_err(|e| ModuleError::new(e.message))?;
    if let Some(owner) = p.str("owner").map(str::trim).filter(|o| !o.is_empty()) {
        if !schematic.owner.is_empty() && schematic.owner != owner {
            return Err(ModuleError::new(format!(
                "owner {owner:?} and the schematic's owner {:?} differ; set one of them",
                schematic.owner
            )));
        }
        schematic.owner = owner.to_string();
    }
    Ok(schematic)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shared::options::params;

    fn args(given: serde_json::Value) -> Result<Args, ModuleError> {
        Args::from_params(&params(super::super::spec(), given))
    }

    fn refused(given: serde_json::Value) -> String {
        args(given).err().expect("refused").msg
    }

    #[test]
    fn defaults_are_the_public_factory_and_an_empty_metal_schematic() {
        let a = args(json!({})).unwrap();
        assert_eq!(a.factory_url, PUBLIC_FACTORY);
        assert_eq!(a.pxe_url, "https://pxe.factory.talos.dev");
        assert_eq!(a.ca_file, None);
        assert!(a.credentials.is_none());
        assert_eq!(a.schematic, Schematic::default());
        assert!(matches!(a.target, Target::Platform(p, Architecture::Amd64) if p.name == "metal"));
        assert_eq!(a.talos_version, None);
        assert_eq!(a.timeout, Duration::from_secs(30));
    }

    #[test]
    fn options_describe_the_schematic_and_the_target() {
        let a = args(json!({
            "factory_url": " https://factory.example.com/ ",
            "pxe_url": " ",
            "talos_version": "1.13.9",
            "extensions": ["siderolabs/iscsi-tools"],
            "extra_kernel_args": ["console=ttyS0"],
            "meta": [{"key": 10, "value": "x"}],
            "owner": " org_1 ",
            "platform": "aws",
            "architecture": "arm64",
            "timeout": 5,
        }))
        .unwrap();
        assert_eq!(a.factory_url, "https://factory.example.com/");
        assert_eq!(a.pxe_url, "https://pxe.factory.example.com");
        assert_eq!(a.talos_version.as_deref(), Some("v1.13.9"));
        assert_eq!(a.schematic.official_extensions, ["siderolabs/iscsi-tools"]);
        assert_eq!(a.schematic.extra_kernel_args, ["console=ttyS0"]);
        assert_eq!(a.schematic.meta.len(), 1);
        assert_eq!(a.schematic.owner, "org_1");
        assert!(matches!(a.target, Target::Platform(p, Architecture::Arm64) if p.name == "aws"));
        assert_eq!(a.timeout, Duration::from_secs(5));
        let a = args(json!({"pxe_url": "https://boot.example.com", "talos_version": "v1.14.0"}))
            .unwrap();
        assert_eq!(a.pxe_url, "https://boot.example.com");
        assert_eq!(a.talos_version.as_deref(), Some("v1.14.0"));
    }

    #[test]
    fn a_board_brings_its_overlay_unless_one_is_given() {
        let a = args(json!({"sbc": " rpi_generic "})).unwrap();
        let Target::Sbc(board) = a.target else {
            panic!("sbc is a board")
        };
        let overlay = a.schematic.overlay.expect("the board's overlay");
        assert_eq!(
            (overlay.name.as_str(), overlay.image.as_str()),
            (board.overlay_name, board.overlay_image)
        );
        let a = args(json!({
            "sbc": "rpi_generic",
            "overlay": {"name": "mine", "image": "example.com/overlay"},
        }))
        .unwrap();
        assert_eq!(a.schematic.overlay.expect("given").name, "mine");
    }

    #[test]
    fn credentials_need_the_owner_they_write() {
        let auth = json!({"factory_username": "ci", "factory_password": "pw"});
        let e = refused(auth.clone());
        assert!(e.starts_with("owner: an authenticated factory"), "{e}");
        let mut given = auth;
        given["owner"] = json!("ci");
        let a = args(given).unwrap();
        let c = a.credentials.expect("credentials");
        assert_eq!((c.username.as_str(), c.password.as_str()), ("ci", "pw"));
        let e = refused(json!({"owner": "a", "schematic": {"owner": "b"}}));
        assert_eq!(
            e,
            "owner \"a\" and the schematic's owner \"b\" differ; set one of them"
        );
    }

    #[test]
    fn refusals_name_the_option() {
        let e = refused(json!({"talos_version": "latest"}));
        assert!(e.starts_with("talos_version \"vlatest\" is not"), "{e}");
        let e = refused(json!({"extensions": ["siderolabs/iscsi-tools:v1"]}));
        assert!(
            e.starts_with("extensions: \"siderolabs/iscsi-tools:v1\""),
            "{e}"
        );
        let e = refused(json!({"extensions": [" "]}));
        assert!(e.starts_with("extensions: \" \""), "{e}");
        let e = refused(json!({"meta": [{"key": 0, "value": "a"}, {"key": 256, "value": "b"}]}));
        assert_eq!(e, "meta[1].key must be a META key from 0 to 255, got 256");
        let e = refused(json!({"platform": "nosuch"}));
        assert!(e.starts_with("platform \"nosuch\""), "{e}");
        let e = refused(json!({"sbc": "nosuch"}));
        assert!(e.starts_with("sbc \"nosuch\""), "{e}");
        let e = refused(json!({"timeout": 0}));
        assert!(e.starts_with("timeout must be between 1 and"), "{e}");
    }
}
