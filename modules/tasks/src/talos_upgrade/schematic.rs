//! Image Factory schematics: the one an installer image installs, and the one a node runs.

use ferro_talos_client::TalosClient;

use ferro_talos_config::image::GHCR_INSTALLER_REPOSITORY;
/// The Image Factory id of the empty schematic: what the plain ghcr.io installer ships.
pub use ferro_talos_config::image::VANILLA_SCHEMATIC;

use super::image::split_image;

/// The Image Factory schematic an installer image installs, when the reference tells: the
/// 64-hex path segment of a factory image, or the empty schematic for the plain ghcr.io installer.
/// A factory's registry serves installers as `<host>/[<platform>-]installer[-secureboot]/<id>`
/// (image-factory v1.5.0 `internal/frontend/http/registry.go`), so a self-hosted factory under any
/// host name is recognised by that path as well as factory.talos.dev by its name.
pub fn schematic_of(image: &str) -> Option<String> {
    let (repo, _) = split_image(image.trim());
    if repo == GHCR_INSTALLER_REPOSITORY {
        return Some(VANILLA_SCHEMATIC.to_string());
    }
    let segments: Vec<&str> = repo.split('/').collect();
    let is_id = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let installer_path =
        matches!(segments.as_slice(), [_, .., kind, id] if kind.contains("installer") && is_id(id));
    if !installer_path && !segments.first()?.contains("factory") {
        return None;
    }
    segments
        .iter()
        .skip(1)
        .find(|s| is_id(s))
        .map(|s| s.to_ascii_lowercase())
}

/// The schematic the node runs: the Image Factory's `schematic` extension, wherever it is among the
/// node's extensions. Their IDs are indexes ("0", "1", ...) in install order
/// (`internal/app/machined/pkg/controllers/runtime/extension_status.go` at v1.13.9), so with other
/// extensions the schematic is not at "0": upstream's own test has it at "2".
pub(super) async fn running_schematic(client: &TalosClient) -> Option<String> {
    let statuses = client
        .list_resources("runtime", "ExtensionStatuses.runtime.talos.dev")
        .await
        .ok()?;
    statuses
        .into_iter()
        .filter_map(|r| r.spec)
        .find_map(|spec| schematic_from_extension_yaml(&spec.yaml_spec))
}

/// `version` of an extension status whose `name` is `schematic`, from its YAML spec.
pub fn schematic_from_extension_yaml(yaml: &str) -> Option<String> {
    let field = |key: &str| {
        yaml.lines()
            .filter_map(|l| l.trim().strip_prefix(key))
            .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
            .next()
    };
    if field("name:")? != "schematic" {
        return None;
    }
    let id = field("version:")?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::talos_upgrade::test_support::FACTORY;

    #[test]
    fn schematics() {
        assert_eq!(
            schematic_of("ghcr.io/siderolabs/installer:v1.13.6").as_deref(),
            Some(VANILLA_SCHEMATIC)
        );
        assert_eq!(
            schematic_of(&format!("{FACTORY}:v1.13.6")).as_deref(),
            Some("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
        );
        assert_eq!(schematic_of("registry.local/installer:v1.13.6"), None);
        // A self-hosted factory, by its registry's path.
        assert_eq!(
            schematic_of(&format!(
                "images.lab:5000/metal-installer/{VANILLA_SCHEMATIC}:v1.13.6"
            ))
            .as_deref(),
            Some(VANILLA_SCHEMATIC)
        );
    }

    /// The stock 1.14 installer's schematic (`DefaultInstallerImageSchematic`, `pkg/images/images.go`
    /// @ v1.14.1) is the empty schematic's ID as the factory computes it.
    #[test]
    fn the_vanilla_schematic_is_the_empty_one() {
        let empty = ferro_talos_factory::Schematic::from_value(&serde_json::json!({})).unwrap();
        assert_eq!(empty.id(), VANILLA_SCHEMATIC);
    }

    #[test]
    fn schematic_extension_status() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let yaml =
            format!("metadata:\n    name: schematic\n    version: {id}\n    description: x\n");
        assert_eq!(schematic_from_extension_yaml(&yaml).as_deref(), Some(id));
        assert_eq!(
            schematic_from_extension_yaml("metadata:\n    name: gvisor\n    version: 1.0\n"),
            None
        );
        assert_eq!(
            schematic_from_extension_yaml("metadata:\n    name: schematic\n    version: abc\n"),
            None
        );
    }
}
