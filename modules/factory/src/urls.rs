//! Where a schematic's installer and boot assets are, for a Talos version, a platform (or a
//! single-board computer) and an architecture: the forms of siderolabs/terraform-provider-talos's
//! `talos_image_factory_urls` over Talos's `pkg/machinery/platforms` (v1.14.0-alpha.1), and the
//! factory's routes (`/image/<id>/<version>/<path>`, `pxe.<host>/pxe/...`, the registry's
//! `<platform>-installer[-secureboot]/<id>:<version>`).

use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    Amd64,
    Arm64,
}

impl Architecture {
    pub fn parse(s: &str) -> Option<Architecture> {
        match s {
            "amd64" => Some(Architecture::Amd64),
            "arm64" => Some(Architecture::Arm64),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Architecture::Amd64 => "amd64",
            Architecture::Arm64 => "arm64",
        }
    }
}

/// How a platform boots a machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Boot {
    Iso,
    DiskImage,
    Pxe,
}

/// A platform an image is built for.
pub struct Platform {
    pub name: &'static str,
    arm64: bool,
    /// The compressed disk image's suffix; None when the platform has no disk image.
    disk_image_suffix: Option<&'static str>,
    boot: &'static [Boot],
    secureboot: bool,
}

const fn platform(
    name: &'static str,
    arm64: bool,
    disk_image_suffix: Option<&'static str>,
    boot: &'static [Boot],
    secureboot: bool,
) -> Platform {
    Platform {
        name,
        arm64,
        disk_image_suffix,
        boot,
        secureboot,
    }
}

use Boot::{DiskImage, Iso, Pxe};

/// Metal and the cloud platforms (`MetalPlatform`, `CloudPlatforms` @ v1.14.0-alpha.1).
pub const PLATFORMS: &[Platform] = &[
    platform("metal", true, Some("raw.zst"), &[Iso, DiskImage, Pxe], true),
    platform("aws", true, Some("raw.xz"), &[DiskImage], false),
    platform("gcp", true, Some("raw.tar.gz"), &[DiskImage], false),
    platform("equinixMetal", true, None, &[Pxe], false),
    platform("azure", true, Some("vhd.xz"), &[DiskImage], true),
    platform("digital-ocean", false, Some("raw.gz"), &[DiskImage], false),
    platform(
        "nocloud",
        true,
        Some("raw.xz"),
        &[DiskImage, Iso, Pxe],
        true,
    ),
    platform(
        "openstack",
        true,
        Some("raw.xz"),
        &[DiskImage, Iso, Pxe],
        false,
    ),
    platform("vmware", true, Some("ova"), &[DiskImage, Iso], false),
    platform("akamai", false, Some("raw.gz"), &[DiskImage], false),
    platform("cloudstack", true, Some("raw.gz"), &[DiskImage], true),
    platform("hcloud", false, Some("raw.xz"), &[DiskImage], false),
    platform("oracle", true, Some("qcow2"), &[DiskImage], false),
    platform("upcloud", false, Some("raw.xz"), &[DiskImage], false),
    platform("vultr", false, None, &[Iso, Pxe], false),
    platform("exoscale", true, Some("qcow2"), &[DiskImage], false),
    platform(
        "opennebula",
        true,
        Some("raw.zst"),
        &[DiskImage, Iso],
        false,
    ),
    platform("scaleway", true, Some("raw.zst"), &[DiskImage, Iso], false),
];

/// A single-board computer: the overlay its images are built with (`sbcs.go` @ v1.14.0-alpha.1).
pub struct Sbc {
    pub name: &'static str,
    pub overlay_name: &'static str,
    pub overlay_image: &'static str,
}

const fn sbc(name: &'static str, overlay_name: &'static str, overlay_image: &'static str) -> Sbc {
    Sbc {
        name,
        overlay_name,
        overlay_image,
    }
}

const RPI: &str = "siderolabs/sbc-raspberrypi";
const ALLWINNER: &str = "siderolabs/sbc-allwinner";
const ROCKCHIP: &str = "siderolabs/sbc-rockchip";

pub const SBCS: &[Sbc] = &[
    sbc("rpi_5", "rpi_5", RPI),
    sbc("rpi_generic", "rpi_generic", RPI),
    sbc("revpi_generic", "revpi_generic", RPI),
    sbc("bananapi_m64", "bananapi_m64", ALLWINNER),
    sbc("nanopi_r4s", "nanopi-r4s", ROCKCHIP),
    sbc("nanopi_r5s", "nanopi-r5s", ROCKCHIP),
    sbc("jetson_nano", "jetson_nano", "siderolabs/sbc-jetson"),
    sbc(
        "libretech_all_h3_cc_h5",
        "libretech_all_h3_cc_h5",
        ALLWINNER,
    ),
    sbc("orangepi_r1_plus_lts", "orangepi-r1-plus-lts", ROCKCHIP),
    sbc("pine64", "pine64", ALLWINNER),
    sbc("rock64", "rock64", ROCKCHIP),
    sbc("rock4cplus", "rock4cplus", ROCKCHIP),
    sbc("rock4se", "rock4se", ROCKCHIP),
    sbc("rock5a", "rock5a", ROCKCHIP),
    sbc("rock5b", "rock5b", ROCKCHIP),
    sbc("rockpi_4", "rockpi4", ROCKCHIP),
    sbc("rockpi_4c", "rockpi4c", ROCKCHIP),
    sbc("helios64", "helios64", ROCKCHIP),
    sbc("turingrk1", "turingrk1", ROCKCHIP),
    sbc("orangepi-5", "orangepi-5", ROCKCHIP),
    sbc("orangepi-5-plus", "orangepi-5-plus", ROCKCHIP),
    sbc("rockpro64", "rockpro64", ROCKCHIP),
    sbc("odroid-m1", "odroid-m1", ROCKCHIP),
    sbc("radxa-zero-3e", "radxa-zero-3e", ROCKCHIP),
    sbc("rock3b", "rock3b", ROCKCHIP),
    sbc("orangepi-5-max", "orangepi-5-max", ROCKCHIP),
    sbc("rock5t", "rock5t", ROCKCHIP),
    sbc(
        "friendlyelec-cm3588-nas",
        "friendlyelec-cm3588-nas",
        ROCKCHIP,
    ),
    sbc("rock5b-plus", "rock5b-plus", ROCKCHIP),
];

/// What the images are for: a platform and an architecture, or a single-board computer (always
/// arm64, booted from a metal disk image).
pub enum Target {
    Platform(&'static Platform, Architecture),
    Sbc(&'static Sbc),
}

impl Target {
    pub fn platform(name: &str, arch: Architecture) -> Result<Target, String> {
        let p = PLATFORMS.iter().find(|p| p.name == name).ok_or_else(|| {
            let names: Vec<&str> = PLATFORMS.iter().map(|p| p.name).collect();
            format!(
                "platform {name:?} is not one the Image Factory builds for; use one of {}",
                names.join(", ")
            )
        })?;
        if arch == Architecture::Arm64 && !p.arm64 {
            return Err(format!(
                "platform {name} has no arm64 images; use architecture: amd64"
            ));
        }
        Ok(Target::Platform(p, arch))
    }

    pub fn sbc(name: &str) -> Result<Target, String> {
        SBCS.iter()
            .find(|s| s.name == name)
            .map(Target::Sbc)
            .ok_or_else(|| {
                let names: Vec<&str> = SBCS.iter().map(|s| s.name).collect();
                format!(
                    "sbc {name:?} is not a board Talos supports; use one of {}",
                    names.join(", ")
                )
            })
    }
}

/// Every URL of a schematic's images for one Talos version and target; None where the platform
/// has no such asset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BootAssets {
    pub installer: String,
    pub installer_secureboot: Option<String>,
    pub iso: Option<String>,
    pub iso_secureboot: Option<String>,
    pub disk_image: Option<String>,
    pub disk_image_secureboot: Option<String>,
    pub pxe: Option<String>,
    pub kernel: Option<String>,
    pub kernel_command_line: Option<String>,
    pub initramfs: Option<String>,
    pub uki: Option<String>,
}

impl BootAssets {
    /// `factory` is the factory's base URL (`https://factory.talos.dev`), `pxe` the PXE host's
    /// (`https://pxe.factory.talos.dev`); `version` carries its `v`.
    pub fn new(factory: &str, pxe: &str, id: &str, version: &str, target: &Target) -> BootAssets {
        let factory = factory.trim_end_matches('/');
        let host = factory.split_once("://").map_or(factory, |(_, h)| h);
        let image = |path: String| format!("{factory}/image/{id}/{version}/{path}");
        let installer = |name: &str| format!("{host}/{name}/{id}:{version}");
        match target {
            Target::Sbc(_) => BootAssets {
                installer: installer("metal-installer"),
                disk_image: Some(image("metal-arm64.raw.xz".into())),
                ..BootAssets::default()
            },
            Target::Platform(p, arch) => {
                let (name, arch) = (p.name, arch.name());
                let has = |b: Boot| p.boot.contains(&b);
                let sb = p.secureboot;
                let disk = p.disk_image_suffix.filter(|_| has(DiskImage));
                let metal = name == "metal";
                BootAssets {
                    installer: installer(&format!("{name}-installer")),
                    installer_secureboot: sb
                        .then(|| installer(&format!("{name}-installer-secureboot"))),
                    iso: has(Iso).then(|| image(format!("{name}-{arch}.iso"))),
                    iso_secureboot: (has(Iso) && sb)
                        .then(|| image(format!("{name}-{arch}-secureboot.iso"))),
                    disk_image: disk.map(|suffix| image(format!("{name}-{arch}.{suffix}"))),
                    disk_image_secureboot: disk
                        .filter(|_| sb)
                        .map(|suffix| image(format!("{name}-{arch}-secureboot.{suffix}"))),
                    pxe: has(Pxe).then(|| {
                        format!(
                            "{}/pxe/{id}/{version}/{name}-{arch}",
                            pxe.trim_end_matches('/')
                        )
                    }),
                    kernel: metal.then(|| image(format!("kernel-{arch}"))),
                    kernel_command_line: metal.then(|| image(format!("cmdline-{name}-{arch}"))),
                    initramfs: metal.then(|| image(format!("initramfs-{arch}.xz"))),
                    uki: metal.then(|| image(format!("{name}-{arch}-secureboot-uki.efi"))),
                }
            }
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "installer": self.installer,
            "installer_secureboot": self.installer_secureboot,
            "iso": self.iso,
            "iso_secureboot": self.iso_secureboot,
            "disk_image": self.disk_image,
            "disk_image_secureboot": self.disk_image_secureboot,
            "pxe": self.pxe,
            "kernel": self.kernel,
            "kernel_command_line": self.kernel_command_line,
            "initramfs": self.initramfs,
            "uki": self.uki,
        })
    }
}

/// The PXE host of a factory: `pxe.` before its host, as factory.talos.dev serves it.
pub fn default_pxe_url(factory: &str) -> String {
    let factory = factory.trim_end_matches('/');
    match factory.split_once("://") {
        Some((scheme, host)) => format!("{scheme}://pxe.{host}"),
        None => format!("pxe.{factory}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
    const F: &str = "https://factory.talos.dev";

    /// The URLs terraform-provider-talos's `talos_image_factory_urls_data_source_test.go` expects.
    #[test]
    fn urls_are_the_terraform_providers() {
        let pxe = default_pxe_url(F);
        assert_eq!(pxe, "https://pxe.factory.talos.dev");
        let metal = BootAssets::new(
            F,
            &pxe,
            EMPTY,
            "v1.7.5",
            &Target::platform("metal", Architecture::Amd64).unwrap(),
        );
        let img = |p: &str| Some(format!("{F}/image/{EMPTY}/v1.7.5/{p}"));
        assert_eq!(
            metal.installer,
            format!("factory.talos.dev/metal-installer/{EMPTY}:v1.7.5")
        );
        assert_eq!(
            metal.installer_secureboot,
            Some(format!(
                "factory.talos.dev/metal-installer-secureboot/{EMPTY}:v1.7.5"
            ))
        );
        assert_eq!(metal.iso, img("metal-amd64.iso"));
        assert_eq!(metal.iso_secureboot, img("metal-amd64-secureboot.iso"));
        assert_eq!(metal.disk_image, img("metal-amd64.raw.zst"));
        assert_eq!(
            metal.disk_image_secureboot,
            img("metal-amd64-secureboot.raw.zst")
        );
        assert_eq!(
            metal.pxe,
            Some(format!(
                "https://pxe.factory.talos.dev/pxe/{EMPTY}/v1.7.5/metal-amd64"
            ))
        );
        assert_eq!(metal.kernel, img("kernel-amd64"));
        assert_eq!(metal.kernel_command_line, img("cmdline-metal-amd64"));
        assert_eq!(metal.initramfs, img("initramfs-amd64.xz"));
        assert_eq!(metal.uki, img("metal-amd64-secureboot-uki.efi"));

        let aws = BootAssets::new(
            F,
            &pxe,
            EMPTY,
            "v1.7.5",
            &Target::platform("aws", Architecture::Amd64).unwrap(),
        );
        assert_eq!(
            aws.installer,
            format!("factory.talos.dev/aws-installer/{EMPTY}:v1.7.5")
        );
        assert_eq!(aws.disk_image, img("aws-amd64.raw.xz"));
        assert_eq!(
            (aws.iso, aws.pxe, aws.kernel, aws.installer_secureboot),
            (None, None, None, None)
        );

        let nocloud = BootAssets::new(
            F,
            &pxe,
            EMPTY,
            "v1.7.5",
            &Target::platform("nocloud", Architecture::Amd64).unwrap(),
        );
        assert_eq!(
            nocloud.disk_image_secureboot,
            img("nocloud-amd64-secureboot.raw.xz")
        );
        assert_eq!(nocloud.iso_secureboot, img("nocloud-amd64-secureboot.iso"));
        assert_eq!(
            nocloud.pxe,
            Some(format!(
                "https://pxe.factory.talos.dev/pxe/{EMPTY}/v1.7.5/nocloud-amd64"
            ))
        );
        assert_eq!((nocloud.kernel, nocloud.uki), (None, None));

        let rpi = "ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9";
        let sbc = BootAssets::new(F, &pxe, rpi, "v1.7.5", &Target::sbc("rpi_generic").unwrap());
        assert_eq!(
            sbc.installer,
            format!("factory.talos.dev/metal-installer/{rpi}:v1.7.5")
        );
        assert_eq!(
            sbc.disk_image,
            Some(format!("{F}/image/{rpi}/v1.7.5/metal-arm64.raw.xz"))
        );
        assert_eq!(sbc.iso, None);
    }

    #[test]
    fn unknown_targets_name_the_choices() {
        assert!(
            Target::platform("bare", Architecture::Amd64)
                .err()
                .unwrap()
                .contains("metal, aws")
        );
        assert!(
            Target::platform("hcloud", Architecture::Arm64)
                .err()
                .unwrap()
                .contains("no arm64")
        );
        assert!(Target::sbc("rpi4").err().unwrap().contains("rpi_generic"));
    }
}
