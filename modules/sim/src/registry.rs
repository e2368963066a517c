//! The container registries as the simulated nodes see them: which installer images exist.
//!
//! Everything exists except the stock installer at `ghcr.io/siderolabs/installer` for the
//! releases Talos no longer publishes there: commit cf6065238 ("chore: stop publishing installer
//! to ghcr", first in v1.14.0-alpha.1) took it out of the `push` target of the `Makefile`, and the
//! v1.14.0 release notes ("Default Installer Image", `CHANGELOG.md` @ v1.14.1) say the image "is no
//! longer published with releases". From 1.14 the stock installer is the Image Factory's
//! (`pkg/images/images.go` @ v1.14.1). A tag that is not a Talos version (`latest`, a build of
//! one's own) is taken to exist: nothing says it does not.
//!
//! This is the simulator's own reading of those facts, not the modules': it is what the tests
//! check the modules against.

use semver::Version;

const STOCK_GHCR_INSTALLER: &str = "ghcr.io/siderolabs/installer";

/// The first release whose installer was not pushed to ghcr.io.
fn first_unpublished() -> Version {
    Version::parse("1.14.0-alpha.1").expect("a version")
}

/// Whether a pull of `image` finds nothing in its registry.
pub fn missing(image: &str) -> bool {
    let name = image.trim().split('@').next().unwrap_or_default();
    let Some((repository, tag)) = name.rsplit_once(':').filter(|(_, t)| !t.contains('/')) else {
        return false;
    };
    if repository != STOCK_GHCR_INSTALLER {
        return false;
    }
    tag.strip_prefix('v')
        .and_then(|t| Version::parse(t).ok())
        .is_some_and(|v| v >= first_unpublished())
}

/// What Talos's pull says about a missing image: its own prefix
/// (`internal/pkg/containers/image/pull.go` pullInternal @ v1.14.1) around containerd's
/// resolver error, whose exact words are not read here (containerd's source is not in the
/// module cache): the reference and "not found".
pub fn pull_error(image: &str) -> String {
    format!("failed to pull image \"{image}\": {image}: not found")
}

#[cfg(test)]
mod tests {
    use super::missing;

    #[test]
    fn only_the_unpublished_stock_installers_are_missing() {
        for gone in [
            "ghcr.io/siderolabs/installer:v1.14.1",
            "ghcr.io/siderolabs/installer:v1.14.0-alpha.1",
            "ghcr.io/siderolabs/installer:v1.16.0@sha256:00",
        ] {
            assert!(missing(gone), "{gone}");
        }
        for there in [
            "ghcr.io/siderolabs/installer:v1.13.9",
            "ghcr.io/siderolabs/installer:v1.14.0-alpha.0",
            "ghcr.io/siderolabs/installer:latest",
            "ghcr.io/siderolabs/installer",
            "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1",
            "localhost:5000/siderolabs/installer:v1.14.1",
        ] {
            assert!(!missing(there), "{there}");
        }
    }
}
