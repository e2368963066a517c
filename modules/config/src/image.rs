//! Container image references as a machine config holds them (`machine.install.image`, the
//! Kubernetes component images): checked before they are rendered, so a README placeholder or a
//! typo fails at once instead of at install or upgrade time.
//!
//! The grammar is the OCI distribution reference's: `[host[:port]/]path[:tag][@digest]`, path
//! components lowercase, a tag of at most 128 characters, a digest `algorithm:hex`.

use crate::error::{Error, ErrorKind, Result};

/// Checks `image`; the error ([`ErrorKind::InvalidImage`]) says what is wrong and what a good
/// reference looks like.
pub fn check_reference(image: &str) -> Result<()> {
    why_not(image).map_err(|why| Error::new(ErrorKind::InvalidImage, why))
}

/// Splits an image reference into repository and tag (the digest, if any, is dropped): the last
/// `:` after the last `/` starts the tag, so a registry port (`localhost:5000/x`) stays in the
/// repository.
pub fn split_image(image: &str) -> (&str, Option<&str>) {
    let no_digest = image.split('@').next().unwrap_or(image);
    let name_start = no_digest.rfind('/').map_or(0, |i| i + 1);
    match no_digest[name_start..].rfind(':') {
        Some(i) => (
            &no_digest[..name_start + i],
            Some(&no_digest[name_start + i + 1..]),
        ),
        None => (no_digest, None),
    }
}

/// Where Talos releases up to 1.13 publish their stock installer, and talosctl v1.13.9's default
/// (`cmd/talosctl/cmd/talos/upgrade.go` init, `cmd/talosctl/cmd/mgmt/gen/config.go` @ v1.13.9).
pub const GHCR_INSTALLER_REPOSITORY: &str = "ghcr.io/siderolabs/installer";

/// The Image Factory's ID of the empty schematic, upstream's `DefaultInstallerImageSchematic`
/// (`pkg/images/images.go` @ v1.14.1); `ferro-talos-factory` computes the same ID.
pub const VANILLA_SCHEMATIC: &str =
    "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

/// The stock installer from 1.14: `images.InstallerImageRepository("metal")`, the factory's metal
/// installer of the empty schematic (`pkg/images/images.go` @ v1.14.1), which talosctl 1.14 writes
/// into generated configs and upgrades to by default.
pub const FACTORY_INSTALLER_REPOSITORY: &str = "factory.talos.dev/metal-installer/\
    376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

/// The repository of the stock installer of `release`: ghcr.io's up to 1.13, the Image Factory's
/// from 1.14 (every 1.14 pre-release's talosctl already defaults to it: commit 96a8ecd1e, in
/// v1.14.0-alpha.0).
pub fn stock_installer_repository(release: &semver::Version) -> &'static str {
    if (release.major, release.minor) >= (1, 14) {
        FACTORY_INSTALLER_REPOSITORY
    } else {
        GHCR_INSTALLER_REPOSITORY
    }
}

/// Why the installer `repository` does not exist for `release`, or `None`: ghcr.io has no stock
/// installer from v1.14.0-alpha.1 on (commit cf6065238 took it out of the release push; the
/// v1.14.0 release notes, "Default Installer Image": "no longer published with releases"). The
/// sentence names the Image Factory's installer of the same release to write instead.
pub fn unpublished_installer(repository: &str, release: &semver::Version) -> Option<String> {
    let first_unpublished = semver::Version::parse("1.14.0-alpha.1").expect("a version");
    if repository.trim() != GHCR_INSTALLER_REPOSITORY || *release < first_unpublished {
        return None;
    }
    Some(format!(
        "{GHCR_INSTALLER_REPOSITORY}:v{release} is not published: Talos no longer publishes its \
         installer there from 1.14; use the Image Factory's, \
         {FACTORY_INSTALLER_REPOSITORY}:v{release} for plain Talos, or your schematic's \
         (ferro.talos.talos_image_factory returns it)"
    ))
}

/// The installer image `config` installs with: the `UnattendedInstallConfig` document's
/// `installer.image` when the document is there (it then drives the install instead of
/// `.machine.install`: the v1.14.0 release notes, "Unattended Install Configuration", and
/// `pkg/machinery/config/types/runtime/unattended_install.go` @ v1.14.1), else
/// `machine.install.image`.
pub fn config_installer(config: &crate::MachineConfig) -> Option<&str> {
    let unattended = config.docs.iter().find(|d| {
        d.get("kind").and_then(serde_json::Value::as_str) == Some("UnattendedInstallConfig")
    });
    match unattended {
        Some(doc) => doc.pointer("/installer/image"),
        None => config.v1alpha1()?.pointer("/machine/install/image"),
    }
    .and_then(serde_json::Value::as_str)
    .filter(|image| !image.is_empty())
}

/// What is wrong with `image` as a reference, if anything.
fn why_not(image: &str) -> std::result::Result<(), String> {
    let example = "such as ghcr.io/siderolabs/installer:v1.13.9 or factory.talos.dev/installer/SCHEMATIC:v1.13.9";
    let image = image.trim();
    if image.is_empty() {
        return Err(format!("the image reference is empty; write one {example}"));
    }
    if let Some(c) = image.chars().find(|c| "<>{}".contains(*c)) {
        return Err(format!(
            "{image:?} holds a placeholder ({c:?}): put the real value there (for an Image Factory \
             installer, the 64-hex schematic ID the factory gave you)"
        ));
    }
    if image.contains("://") || image.chars().any(char::is_whitespace) {
        return Err(format!(
            "{image:?} is not an image reference; write one {example}"
        ));
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest {
        let ok = digest.split_once(':').is_some_and(|(alg, hex)| {
            !alg.is_empty()
                && alg
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && hex.len() >= 32
                && hex.bytes().all(|b| b.is_ascii_hexdigit())
        });
        if !ok {
            return Err(format!(
                "{image:?} has an invalid digest {digest:?}; a digest looks like sha256:<64 hex digits>"
            ));
        }
    }
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (repository, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, None),
    };
    if let Some(tag) = tag {
        let valid = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if !valid {
            return Err(format!(
                "{image:?} has an invalid tag {tag:?}; a tag is letters, digits, '_', '.' and '-' (e.g. v1.13.9)"
            ));
        }
    }
    let mut components = repository.split('/').peekable();
    let first = components.next().unwrap_or_default();
    let is_host = components.peek().is_some()
        && (first.contains('.') || first.contains(':') || first == "localhost");
    if is_host {
        let (host, port) = first.split_once(':').unwrap_or((first, ""));
        let host_ok = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        let port_ok =
            port.is_empty() || (port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()));
        if !host_ok || !port_ok {
            return Err(format!("{image:?} has an invalid registry host {first:?}"));
        }
    } else if !path_component_ok(first) {
        return Err(bad_component(image, first));
    }
    for component in components {
        if !path_component_ok(component) {
            return Err(bad_component(image, component));
        }
    }
    Ok(())
}

/// A path component: lowercase letters and digits, joined by single `.`, `_`, `__` or dashes.
fn path_component_ok(c: &str) -> bool {
    let bytes = c.as_bytes();
    !c.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && c.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

fn bad_component(image: &str, component: &str) -> String {
    format!(
        "{image:?} has an invalid path component {component:?}; repository paths are lowercase \
         letters, digits and '.', '_' or '-' between them"
    )
}

#[cfg(test)]
mod tests {
    use super::check_reference;

    #[test]
    fn the_stock_installer_follows_the_release() {
        use super::*;
        let v = |s: &str| semver::Version::parse(s).unwrap();
        assert_eq!(
            stock_installer_repository(&v("1.13.9")),
            "ghcr.io/siderolabs/installer"
        );
        for release in ["1.14.0-alpha.0", "1.14.0-rc.1", "1.14.1", "1.15.0"] {
            assert_eq!(
                stock_installer_repository(&v(release)),
                format!("factory.talos.dev/metal-installer/{VANILLA_SCHEMATIC}"),
                "{release}"
            );
        }
        assert!(FACTORY_INSTALLER_REPOSITORY.ends_with(VANILLA_SCHEMATIC));
    }

    #[test]
    fn ghcr_has_no_installer_from_1_14() {
        use super::*;
        let v = |s: &str| semver::Version::parse(s).unwrap();
        for release in ["1.13.9", "1.14.0-alpha.0"] {
            assert_eq!(
                unpublished_installer(GHCR_INSTALLER_REPOSITORY, &v(release)),
                None
            );
        }
        let why = unpublished_installer(GHCR_INSTALLER_REPOSITORY, &v("1.14.1")).unwrap();
        assert!(
            why.starts_with("ghcr.io/siderolabs/installer:v1.14.1 is not published"),
            "{why}"
        );
        assert!(
            why.contains(&format!(
                "{FACTORY_INSTALLER_REPOSITORY}:v1.14.1 for plain Talos"
            )),
            "{why}"
        );
        assert!(!why.contains("  "), "{why}");
        for other in [
            "registry.local/siderolabs/installer",
            FACTORY_INSTALLER_REPOSITORY,
        ] {
            assert_eq!(unpublished_installer(other, &v("1.14.1")), None);
        }
    }

    #[test]
    fn the_installer_of_either_config_shape() {
        use super::config_installer;
        let parse = |text: &str| crate::MachineConfig::parse(text).unwrap();
        let v13 = parse(
            "machine:\n  type: worker\n  install:\n    image: ghcr.io/siderolabs/installer:v1.13.9\n",
        );
        assert_eq!(
            config_installer(&v13),
            Some("ghcr.io/siderolabs/installer:v1.13.9")
        );
        let v14 = parse(
            "machine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: UnattendedInstallConfig\n\
             installer:\n  image: factory.talos.dev/metal-installer/x:v1.14.1\n",
        );
        assert_eq!(
            config_installer(&v14),
            Some("factory.talos.dev/metal-installer/x:v1.14.1")
        );
        let none = parse(
            "machine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: UnattendedInstallConfig\ninstaller: {}\n",
        );
        assert_eq!(config_installer(&none), None);
    }

    #[test]
    fn real_references_pass() {
        for image in [
            "ghcr.io/siderolabs/installer:v1.13.9",
            "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.13.9",
            "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1",
            "registry.local:5000/talos/installer:v1.13.9",
            "localhost/installer:dev",
            "installer",
            "ghcr.io/siderolabs/installer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "ghcr.io/siderolabs/kubelet:v1.36.3-fat",
        ] {
            assert!(check_reference(image).is_ok(), "{image}");
        }
    }

    #[test]
    fn placeholders_and_typos_fail_with_what_to_write() {
        let e = check_reference("factory.talos.dev/installer/<schematic>:v1.13.6")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("placeholder") && e.contains("schematic ID"),
            "{e}"
        );
        for (image, says) in [
            ("", "empty"),
            (
                "https://ghcr.io/siderolabs/installer:v1.13.9",
                "not an image reference",
            ),
            (
                "ghcr.io/SideroLabs/installer:v1.13.9",
                "invalid path component",
            ),
            ("ghcr.io/siderolabs/installer:", "invalid tag"),
            (
                "ghcr.io/siderolabs/installer:v1.13.9@sha256:xyz",
                "invalid digest",
            ),
            ("ghcr.io//installer:v1", "invalid path component"),
        ] {
            let e = check_reference(image).unwrap_err().to_string();
            assert!(e.contains(says), "{image:?}: {e}");
        }
    }
}
