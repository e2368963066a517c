//! What the test factory offers. The versions are Talos releases; the extensions and overlays are
//! real names (the factory's `siderolabs/...` official ones) with references and digests made up
//! for the test double: nothing reads them but the tests.

use semver::Version;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub const VERSIONS: &[&str] = &[
    "v1.12.0",
    "v1.12.6",
    "v1.13.0",
    "v1.13.4",
    "v1.13.6",
    "v1.13.9",
    "v1.14.0-rc.1",
];

const EXTENSIONS: &[(&str, &str)] = &[
    ("siderolabs/amd-ucode", "AMD CPU microcode updates"),
    ("siderolabs/intel-ucode", "Intel CPU microcode updates"),
    ("siderolabs/iscsi-tools", "iSCSI initiator tools"),
    ("siderolabs/util-linux-tools", "util-linux tools"),
    ("siderolabs/qemu-guest-agent", "QEMU guest agent"),
    ("siderolabs/tailscale", "Tailscale"),
    ("siderolabs/gvisor", "gVisor container runtime"),
    (
        "siderolabs/nvidia-container-toolkit-lts",
        "NVIDIA container toolkit",
    ),
];

/// (name, image, first Talos version that has it)
const OVERLAYS: &[(&str, &str, &str)] = &[
    ("rpi_generic", "siderolabs/sbc-raspberrypi", "1.7.0"),
    ("rpi_5", "siderolabs/sbc-raspberrypi", "1.12.3"),
    ("rock5b", "siderolabs/sbc-rockchip", "1.9.2"),
    ("jetson_nano", "siderolabs/sbc-jetson", "1.7.0"),
];

fn digest(name: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(name.as_bytes())))
}

/// The version asked for, `v` optional: Err(404) when the factory does not build it, Err(500)
/// when it is no version at all.
pub fn known_version(asked: &str) -> Result<Version, u16> {
    let bare = asked.trim_start_matches('v');
    let version = Version::parse(bare).map_err(|_| 500u16)?;
    if VERSIONS.iter().any(|v| v.trim_start_matches('v') == bare) {
        Ok(version)
    } else {
        Err(404)
    }
}

pub fn extensions() -> Vec<Value> {
    EXTENSIONS
        .iter()
        .map(|(name, description)| {
            json!({
                "name": name,
                "ref": format!("ghcr.io/{name}:v0.0.0-test"),
                "digest": digest(name),
                "author": "Sidero Labs",
                "description": description,
            })
        })
        .collect()
}

/// Overlays exist from Talos 1.7 (`quirks.SupportsOverlay`); each board from its own release.
pub fn overlays(version: &Version) -> Vec<Value> {
    OVERLAYS
        .iter()
        .filter(|(_, _, since)| Version::parse(since).is_ok_and(|s| *version >= s))
        .map(|(name, image, _)| {
            json!({
                "name": name,
                "image": image,
                "ref": format!("ghcr.io/{image}:v0.0.0-test"),
                "digest": digest(image),
            })
        })
        .collect()
}
