//! Talos version tags and the installer's accepted host range (api.md §13.3).

use anyhow::{Context, Result};
use semver::Version;

/// Parses `v1.13.6` / `1.13.6` / `v1.14.0-rc.1`.
pub fn parse(tag: &str) -> Result<Version> {
    Version::parse(tag.trim_start_matches('v'))
        .with_context(|| format!("expected a Talos version like v1.13.6, got {tag:?}"))
}

/// Minor version for feature switches (1.14 apply semantics etc.); 0 when unparsable.
pub fn minor(tag: &str) -> u64 {
    parse(tag).map(|v| v.minor).unwrap_or(0)
}

/// Version tag taken from an installer image reference `…/installer[/schematic]:vX.Y.Z[@digest]`.
pub fn from_image(image: &str) -> Option<String> {
    let without_digest = image.split('@').next()?;
    let last = without_digest.rsplit('/').next()?;
    let (_, tag) = last.split_once(':')?;
    parse(tag).ok()?;
    Some(tag.to_string())
}

/// Image Factory schematic id from `factory.talos.dev/<kind>-installer/<schematic>:<tag>` or
/// `factory.talos.dev/installer/<schematic>:<tag>`.
pub fn schematic_from_image(image: &str) -> Option<String> {
    let without_digest = image.split('@').next()?;
    let parts: Vec<&str> = without_digest.split('/').collect();
    // factory.talos.dev by its name; any factory by its registry's installer path
    // (`<host>/[<platform>-]installer[-secureboot]/<id>:<tag>`).
    let by_path = parts.len() >= 3 && parts[parts.len() - 2].contains("installer");
    if !parts.first()?.contains("factory") && !by_path {
        return None;
    }
    let last = without_digest.rsplit('/').next()?;
    let (id, _) = last.split_once(':')?;
    (id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit())).then(|| id.to_string())
}

/// What the simulated installer does: upstream's version check, then the `installer_fails`
/// fault (an installer that cannot write the disk). `Err` carries its last words.
pub fn run_installer(host: &str, target: &str, fails: bool) -> Result<(), String> {
    installer_accepts(host, target)?;
    if fails {
        return Err("failed to install the bootloader: no space left on device".into());
    }
    Ok(())
}

/// The pre-flight check the target version's installer runs against the running host version.
/// `Err` carries the installer's message.
pub fn installer_accepts(host: &str, target: &str) -> Result<(), String> {
    let t = parse(target).map_err(|e| e.to_string())?;
    let h = parse(host).map_err(|e| e.to_string())?;
    // (target minor, min host minor incl., max host minor excl.) for 1.x targets; the table's
    // bounds are all x.y.0.
    const TABLE: &[(u64, u64, u64)] = &[(11, 9, 13), (12, 10, 14), (13, 11, 15), (14, 12, 16)];
    let Some((_, min, max)) = TABLE.iter().find(|(m, _, _)| t.major == 1 && *m == t.minor) else {
        return Err(format!("upgrades to version {target} are not supported"));
    };
    // Compare without pre-release tags: an rc host counts as its release line.
    let hv = (h.major, h.minor);
    if h.major < 1 || (h.major == 1 && hv < (1, *min)) {
        return Err(format!(
            "host version {host} is too old to upgrade to Talos {target}"
        ));
    }
    if h.major > 1 || (h.major == 1 && hv >= (1, *max)) {
        return Err(format!(
            "host version {host} is too new to downgrade to Talos {target}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installer_range() {
        assert!(installer_accepts("v1.11.0", "v1.13.6").is_ok());
        assert!(installer_accepts("v1.14.2", "v1.13.6").is_ok());
        assert_eq!(
            installer_accepts("v1.10.7", "v1.13.6").unwrap_err(),
            "host version v1.10.7 is too old to upgrade to Talos v1.13.6"
        );
        assert_eq!(
            installer_accepts("v1.15.0", "v1.13.6").unwrap_err(),
            "host version v1.15.0 is too new to downgrade to Talos v1.13.6"
        );
        assert!(installer_accepts("v1.12.0", "v1.14.0-rc.1").is_ok());
        assert!(installer_accepts("v1.13.0", "v1.20.0").is_err());
    }

    #[test]
    fn image_tags() {
        assert_eq!(
            from_image("ghcr.io/siderolabs/installer:v1.13.6").as_deref(),
            Some("v1.13.6")
        );
        let f = "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.13.6";
        assert_eq!(from_image(f).as_deref(), Some("v1.13.6"));
        assert_eq!(
            schematic_from_image(f).as_deref(),
            Some("376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba")
        );
        assert_eq!(
            schematic_from_image("ghcr.io/siderolabs/installer:v1.13.6"),
            None
        );
        assert_eq!(from_image("ghcr.io/siderolabs/installer"), None);
        assert_eq!(
            from_image("localhost:5000/installer:v1.12.1").as_deref(),
            Some("v1.12.1")
        );
    }
}
