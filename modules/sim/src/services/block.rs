//! The node's disks and the system volumes on them, as COSI resources: `runtime/Disks.block.talos.dev`
//! (one per block device, id the kernel's name) and `runtime/VolumeStatuses.block.talos.dev` (META,
//! STATE, EPHEMERAL). Upstream (tag v1.13.9): `pkg/machinery/resources/block/disk.go` and
//! `volume_status.go` (their YAML field names and order), the partitions of
//! `internal/app/machined/pkg/controllers/block/internal/volumes/volumeconfig/system_volumes.go`.
//! Every simulated node has the same two disks; the volumes follow what the node has installed
//! and configured. Both carry their proto spec too: talosctl and upstream's cluster checks decode
//! that one (`pkg/cluster/check/nodes.go` `AllNodesDiskSizes` reads EPHEMERAL's size from it).

use ferro_talos_proto::resource::block::{
    BlockFilesystemType, BlockVolumePhase, BlockVolumeType, DiskSpec, MountSpec, VolumeStatusSpec,
};
use prost::Message;

use crate::state::Node;

pub const DISKS: (&str, &str) = ("runtime", "Disks.block.talos.dev");
pub const VOLUMES: (&str, &str) = ("runtime", "VolumeStatuses.block.talos.dev");

/// One simulated disk: its kernel name and size in bytes.
const SIMULATED_DISKS: [(&str, u64); 2] = [("sda", 68_719_476_736), ("sdb", 107_374_182_400)];

/// go-humanize's `Bytes`: SI units, what Talos prints as `pretty_size`.
fn pretty(size: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if size < 10 {
        return format!("{size} B");
    }
    let exp = ((size as f64).ln() / 1000f64.ln()).floor() as usize;
    let value = size as f64 / 1000f64.powi(exp as i32);
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[exp])
    } else {
        format!("{value:.0} {}", UNITS[exp])
    }
}

/// (id, proto spec, YAML spec) of every disk.
pub fn disks() -> Vec<(String, Vec<u8>, String)> {
    SIMULATED_DISKS
        .iter()
        .map(|(name, size)| {
            let spec = DiskSpec {
                size: *size,
                io_size: 512,
                sector_size: 512,
                model: "QEMU HARDDISK".into(),
                sub_system: "/sys/class/block".into(),
                transport: "virtio".into(),
                rotational: true,
                dev_path: format!("/dev/{name}"),
                pretty_size: pretty(*size),
                ..DiskSpec::default()
            };
            let yaml = format!(
                "dev_path: {}\nsize: {}\npretty_size: {}\nio_size: 512\nsector_size: 512\nreadonly: false\n\
                 cdrom: false\nmodel: QEMU HARDDISK\nsub_system: /sys/class/block\ntransport: virtio\n\
                 rotational: true\n",
                spec.dev_path, spec.size, spec.pretty_size
            );
            (name.to_string(), spec.encode_to_vec(), yaml)
        })
        .collect()
}

/// (id, proto spec, YAML spec) of each system volume the node has: META once Talos is installed,
/// STATE with a config on it, EPHEMERAL while the node runs its config.
pub fn volumes(n: &Node) -> Vec<(String, Vec<u8>, String)> {
    let mut out = Vec::new();
    let mut volume = |id: &str,
                      index: u32,
                      size: u64,
                      filesystem: BlockFilesystemType,
                      mount: &str| {
        let location = format!("/dev/sda{index}");
        let fs_name = match filesystem {
            BlockFilesystemType::FilesystemTypeXfs => "xfs",
            BlockFilesystemType::FilesystemTypeVfat => "vfat",
            BlockFilesystemType::FilesystemTypeExt4 => "ext4",
            BlockFilesystemType::FilesystemTypeNone => "none",
        };
        let mut yaml = format!("phase: ready\ntype: partition\nlocation: {location}\n");
        if !mount.is_empty() {
            yaml.push_str(&format!("mountLocation: {location}\n"));
        }
        yaml.push_str(&format!(
            "partitionIndex: {index}\nparentLocation: /dev/sda\nsize: {size}\nprettySize: {}\nfilesystem: {fs_name}\n",
            pretty(size)
        ));
        if !mount.is_empty() {
            yaml.push_str(&format!("mountSpec:\n    targetPath: {mount}\n"));
        }
        let spec = VolumeStatusSpec {
            phase: BlockVolumePhase::VolumePhaseReady as i32,
            location: location.clone(),
            parent_location: "/dev/sda".into(),
            partition_index: i64::from(index),
            size,
            filesystem: filesystem as i32,
            mount_location: if mount.is_empty() {
                String::new()
            } else {
                location
            },
            pretty_size: pretty(size),
            mount_spec: (!mount.is_empty()).then(|| MountSpec {
                target_path: mount.into(),
            }),
            r#type: BlockVolumeType::VolumeTypePartition as i32,
        };
        out.push((id.to_string(), spec.encode_to_vec(), yaml));
    };
    if n.installed {
        volume(
            "META",
            4,
            1_048_576,
            BlockFilesystemType::FilesystemTypeNone,
            "",
        );
    }
    if n.persisted.is_some() {
        volume(
            "STATE",
            5,
            104_857_600,
            BlockFilesystemType::FilesystemTypeXfs,
            "/system/state",
        );
    }
    if n.active.is_some() {
        volume(
            "EPHEMERAL",
            6,
            66_571_993_088,
            BlockFilesystemType::FilesystemTypeXfs,
            "/var",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::pretty;

    #[test]
    fn sizes_print_as_go_humanize_prints_them() {
        assert_eq!(pretty(68_719_476_736), "69 GB");
        assert_eq!(pretty(107_374_182_400), "107 GB");
        assert_eq!(pretty(1_048_576), "1.0 MB");
    }
}
