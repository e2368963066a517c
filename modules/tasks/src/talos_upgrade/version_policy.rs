//! Versions and the rules about them: whether a node has the LifecycleService, which hosts a
//! target's installer accepts, whether the node's Talos moves at all, which Kubernetes versions
//! a Talos supports and how far Kubernetes may move at once.

use semver::Version;

use super::image::OsTarget;
use super::schematic::schematic_of;

/// A version such as `v1.13.6`, `1.36.1` or `v1.14.0-rc.1` (one leading `v` allowed).
pub fn parse_version(text: &str) -> Result<Version, String> {
    let t = text.trim();
    Version::parse(t.strip_prefix('v').unwrap_or(t))
        .map_err(|_| format!("expected a version like v1.13.6 or 1.36.1, got {text:?}"))
}

/// Whether the node has LifecycleService/ImageService (talosctl's rule: >1.13.0-alpha.2, <2.0.0).
pub fn has_lifecycle_api(node: &Version) -> bool {
    let mut first = Version::new(1, 13, 0);
    first.pre = semver::Prerelease::new("alpha.2").unwrap_or(semver::Prerelease::EMPTY);
    *node > first && node.major < 2
}

/// Host versions the installer of a target minor accepts: (target minor, min host minor
/// inclusive, max host minor exclusive), api.md §13.3. All bounds are x.y.0.
const INSTALLER_RANGES: &[(u64, u64, u64)] =
    &[(11, 9, 13), (12, 10, 14), (13, 11, 15), (14, 12, 16)];

/// Kubernetes versions each Talos minor supports: (Talos minor, lowest minor, highest minor).
const KUBERNETES_SUPPORT: &[(u64, u64, u64)] =
    &[(11, 29, 34), (12, 30, 35), (13, 31, 36), (14, 32, 37)];

/// What the target's installer says about a host version.
#[derive(Debug, PartialEq)]
pub enum InstallerCheck {
    Accepts,
    /// No rules known for the target's minor: the installer itself will decide.
    Unknown,
    Refuses(String),
}

/// The installer's pre-flight check (pre-release hosts count as their release line), with the
/// intermediate versions to go through when it refuses.
pub fn installer_check(host: &Version, target: &Version) -> InstallerCheck {
    let Some(&(_, min, max)) = INSTALLER_RANGES
        .iter()
        .find(|(m, _, _)| target.major == 1 && *m == target.minor)
    else {
        return InstallerCheck::Unknown;
    };
    let accepted = format!("it accepts hosts from 1.{min}.0 up to, not including, 1.{max}.0");
    let too_old = host.major < 1 || (host.major == 1 && host.minor < min);
    let too_new = host.major > 1 || (host.major == 1 && host.minor >= max);
    if too_old {
        let steps: Vec<u64> = if host.major == 1 {
            (host.minor + 1..target.minor).collect()
        } else {
            Vec::new()
        };
        return InstallerCheck::Refuses(format!(
            "the Talos v{target} installer refuses hosts on v{host} ({accepted}): {}",
            route("upgrade", &steps)
        ));
    }
    if too_new {
        let steps: Vec<u64> = if host.major == 1 {
            (target.minor + 1..host.minor).rev().collect()
        } else {
            Vec::new()
        };
        return InstallerCheck::Refuses(format!(
            "the Talos v{target} installer refuses hosts on v{host} ({accepted}): {}",
            route("downgrade", &steps)
        ));
    }
    InstallerCheck::Accepts
}

fn route(verb: &str, minors: &[u64]) -> String {
    if minors.is_empty() {
        return format!("{verb} in smaller steps first");
    }
    let mut parts = minors.iter().map(|m| format!("1.{m}.x"));
    let mut text = format!("{verb} to the latest {}", parts.next().unwrap_or_default());
    for p in parts {
        text.push_str(", then ");
        text.push_str(&p);
    }
    text.push_str(" first");
    text
}

/// Whether the node's Talos needs to move, decided from its server version and schematic.
#[derive(Debug, PartialEq)]
pub enum OsDecision {
    UpToDate,
    /// Upgrade (or an allowed downgrade), with the reason in words.
    Change(String),
}

pub fn decide_os(
    current: &Version,
    current_schematic: Option<&str>,
    target: &OsTarget,
    allow_downgrade: bool,
) -> Result<OsDecision, String> {
    let target_schematic = schematic_of(&target.image);
    let decision = match current.cmp(&target.version) {
        std::cmp::Ordering::Less => {
            OsDecision::Change(format!("upgrade v{current} -> v{}", target.version))
        }
        std::cmp::Ordering::Greater => {
            if !allow_downgrade {
                return Err(format!(
                    "the node runs Talos v{current}, newer than the target v{}: that is a downgrade; \
                     set allow_downgrade=true to do it anyway",
                    target.version
                ));
            }
            OsDecision::Change(format!(
                "downgrade v{current} -> v{} (allowed)",
                target.version
            ))
        }
        std::cmp::Ordering::Equal => match (current_schematic, target_schematic.as_deref()) {
            (Some(cur), Some(want)) if cur != want => {
                OsDecision::Change(format!("schematic change at v{current}: {cur} -> {want}"))
            }
            _ => OsDecision::UpToDate,
        },
    };
    if let OsDecision::Change(_) = &decision
        && let InstallerCheck::Refuses(why) = installer_check(current, &target.version)
    {
        return Err(why);
    }
    Ok(decision)
}

/// talosctl upgrade-k8s's path rule: the same minor or the next one.
pub fn kubernetes_path_ok(from: &Version, to: &Version) -> Result<(), String> {
    if from.major == to.major && (to.minor == from.minor || to.minor == from.minor + 1) {
        return Ok(());
    }
    let mut msg = format!(
        "unsupported upgrade path {}.{}->{}.{} (from {from} to {to})",
        from.major, from.minor, to.major, to.minor
    );
    if from.major == to.major && to.minor > from.minor + 1 {
        let steps: Vec<String> = (from.minor + 1..to.minor)
            .map(|m| format!("{}.{m}.x", from.major))
            .collect();
        msg.push_str(&format!(
            ": Kubernetes moves one minor version at a time; upgrade through {} first",
            steps.join(", then ")
        ));
    } else {
        msg.push_str(
            ": Kubernetes can only move to a patch of the same minor or to the next minor",
        );
    }
    Err(msg)
}

/// Whether a Talos version supports a Kubernetes version; None when no rule is known.
pub fn kubernetes_supported(talos: &Version, kubernetes: &Version) -> Option<Result<(), String>> {
    let &(_, lo, hi) = KUBERNETES_SUPPORT
        .iter()
        .find(|(m, _, _)| talos.major == 1 && *m == talos.minor)?;
    if kubernetes.major == 1 && (lo..=hi).contains(&kubernetes.minor) {
        Some(Ok(()))
    } else {
        Some(Err(format!(
            "Talos v{talos} supports Kubernetes 1.{lo}.0 to 1.{hi}.x, not {kubernetes}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::talos_upgrade::VANILLA_SCHEMATIC;
    use crate::talos_upgrade::test_support::{FACTORY, target, v};

    #[test]
    fn versions_strip_one_v_and_keep_prereleases() {
        assert_eq!(v("v1.13.6"), Version::new(1, 13, 6));
        assert_eq!(v("1.36.1"), Version::new(1, 36, 1));
        assert!(v("v1.14.0-rc.1") < v("v1.14.0"));
        assert!(parse_version("1.13").is_err());
        assert!(parse_version("latest").is_err());
    }

    #[test]
    fn lifecycle_api_threshold() {
        assert!(!has_lifecycle_api(&v("1.12.5")));
        assert!(!has_lifecycle_api(&v("1.13.0-alpha.2")));
        assert!(has_lifecycle_api(&v("1.13.0-alpha.3")));
        assert!(has_lifecycle_api(&v("1.13.4")));
        assert!(has_lifecycle_api(&v("1.14.2")));
        assert!(!has_lifecycle_api(&v("2.0.0")));
    }

    #[test]
    fn direction_comes_from_the_node_version() {
        let t = target("ghcr.io/siderolabs/installer:v1.13.6");
        assert_eq!(
            decide_os(&v("1.13.6"), None, &t, false),
            Ok(OsDecision::UpToDate)
        );
        assert!(matches!(
            decide_os(&v("1.13.4"), None, &t, false),
            Ok(OsDecision::Change(_))
        ));
        let err = decide_os(&v("1.14.2"), None, &t, false).unwrap_err();
        assert!(
            err.contains("downgrade") && err.contains("allow_downgrade"),
            "{err}"
        );
        assert!(matches!(
            decide_os(&v("1.14.2"), None, &t, true),
            Ok(OsDecision::Change(_))
        ));
        // 1.14 installers come from the Image Factory (ghcr.io no longer carries them).
        let t14 = target(&format!("{FACTORY}:v1.14.1"));
        assert!(matches!(
            decide_os(&v("1.13.6"), None, &t14, false),
            Ok(OsDecision::Change(_))
        ));
        let rc = target(&format!("{FACTORY}:v1.14.0-rc.1"));
        assert!(matches!(
            decide_os(&v("1.13.6"), None, &rc, false),
            Ok(OsDecision::Change(_))
        ));
        assert!(decide_os(&v("1.14.0"), None, &rc, false).is_err());
    }

    #[test]
    fn schematic_change_at_the_same_version_is_an_upgrade() {
        let t = target(&format!("{FACTORY}:v1.13.6"));
        assert!(matches!(
            decide_os(&v("1.13.6"), Some(VANILLA_SCHEMATIC), &t, false),
            Ok(OsDecision::Change(_))
        ));
        let same = schematic_of(&t.image);
        assert_eq!(
            decide_os(&v("1.13.6"), same.as_deref(), &t, false),
            Ok(OsDecision::UpToDate)
        );
        // Unknown current schematic: nothing to compare, the version decides.
        assert_eq!(
            decide_os(&v("1.13.6"), None, &t, false),
            Ok(OsDecision::UpToDate)
        );
    }

    #[test]
    fn installer_ranges_name_the_intermediate_versions() {
        let err = decide_os(
            &v("1.10.7"),
            None,
            &target("ghcr.io/siderolabs/installer:v1.13.6"),
            false,
        )
        .unwrap_err();
        assert!(
            err.contains("upgrade to the latest 1.11.x, then 1.12.x first"),
            "{err}"
        );
        assert!(err.contains("1.11.0 up to, not including, 1.15.0"), "{err}");
        assert_eq!(
            installer_check(&v("1.11.0"), &v("1.13.6")),
            InstallerCheck::Accepts
        );
        assert_eq!(
            installer_check(&v("1.14.9"), &v("1.13.6")),
            InstallerCheck::Accepts
        );
        let InstallerCheck::Refuses(err) = installer_check(&v("1.16.0"), &v("1.13.6")) else {
            panic!()
        };
        assert!(
            err.contains("downgrade to the latest 1.15.x, then 1.14.x first"),
            "{err}"
        );
        assert_eq!(
            installer_check(&v("1.12.0"), &v("1.15.0")),
            InstallerCheck::Unknown
        );
    }
}
