//! Installer image references: the Talos target an image names (`OsTarget`), an image's
//! repository and tag, and the same image at another version.

pub use ferro_talos_config::image::split_image;
use ferro_talos_config::image::{GHCR_INSTALLER_REPOSITORY, unpublished_installer};
use semver::Version;

use super::version_policy::parse_version;

/// The Talos target: an installer image and the version its tag names.
#[derive(Debug, Clone, PartialEq)]
pub struct OsTarget {
    pub image: String,
    pub version: Version,
}

impl OsTarget {
    pub fn tag(&self) -> String {
        format!("v{}", self.version)
    }
}

pub(super) fn parse_installer_image(image: &str) -> Result<OsTarget, String> {
    let image = image.trim();
    let example = "like ghcr.io/siderolabs/installer:v1.13.9 or factory.talos.dev/metal-installer/<schematic>:v1.14.1";
    if image.is_empty() || image.chars().any(char::is_whitespace) || image.contains("://") {
        return Err(format!(
            "expected an installer image reference {example}, got {image:?}"
        ));
    }
    let (repo, tag) = split_image(image);
    let Some(tag) = tag.filter(|t| !t.is_empty()) else {
        return Err(format!(
            "{image:?} has no version tag; the tag tells which Talos version it installs ({example})"
        ));
    };
    if repo.is_empty() || repo.ends_with('/') {
        return Err(format!(
            "expected an installer image reference {example}, got {image:?}"
        ));
    }
    let version = parse_version(tag)
        .map_err(|_| format!("the tag of {image:?} is not a Talos version like v1.13.6"))?;
    Ok(OsTarget {
        image: image.to_string(),
        version,
    })
}

pub(super) fn check_repository(repo: &str) -> Result<(), String> {
    let repo = repo.trim();
    if repo.is_empty() || repo.chars().any(char::is_whitespace) || repo.contains("://") {
        return Err(format!(
            "expected a repository like {GHCR_INSTALLER_REPOSITORY}, got {repo:?}"
        ));
    }
    if repo.contains('@') || split_image(repo).1.is_some() {
        return Err(format!(
            "{repo:?} already carries a tag or digest; give the repository only (the tag comes from talos_version)"
        ));
    }
    Ok(())
}

/// Why the target's installer does not exist in its registry, when that is known: the stock
/// installer at ghcr.io for a release it no longer carries (`ferro_talos_config::image::
/// unpublished_installer`). A node would answer the pull with NotFound after the drain.
pub(super) fn unpublished(target: &OsTarget) -> Option<String> {
    let (repo, _) = split_image(&target.image);
    unpublished_installer(repo, &target.version)
}

/// `image` with its tag replaced by `v<version>` (a digest would pin the old image: dropped).
pub fn retag(image: &str, version: &Version) -> String {
    let (repo, _) = split_image(image);
    format!("{repo}:v{version}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::talos_upgrade::test_support::{FACTORY, target, v};

    #[test]
    fn image_references() {
        assert_eq!(
            split_image("ghcr.io/siderolabs/installer:v1.13.6"),
            ("ghcr.io/siderolabs/installer", Some("v1.13.6"))
        );
        assert_eq!(
            split_image("localhost:5000/installer:v1.12.1@sha256:ab"),
            ("localhost:5000/installer", Some("v1.12.1"))
        );
        assert_eq!(
            split_image("localhost:5000/installer"),
            ("localhost:5000/installer", None)
        );
        let t = target(&format!("{FACTORY}:v1.13.6"));
        assert_eq!(t.version, Version::new(1, 13, 6));
        assert!(parse_installer_image("ghcr.io/siderolabs/installer").is_err());
        assert!(parse_installer_image("ghcr.io/siderolabs/installer:latest").is_err());
        assert!(parse_installer_image("has space:v1.13.6").is_err());
        assert!(check_repository("ghcr.io/siderolabs/installer:v1.13.6").is_err());
        assert!(check_repository("localhost:5000/installer").is_ok());
    }

    #[test]
    fn retag_drops_digests() {
        assert_eq!(
            retag(
                "registry.k8s.io/kube-apiserver:v1.35.0@sha256:00",
                &v("1.36.1")
            ),
            "registry.k8s.io/kube-apiserver:v1.36.1"
        );
        assert_eq!(
            retag("localhost:5000/kubelet", &v("1.36.1")),
            "localhost:5000/kubelet:v1.36.1"
        );
    }
}
