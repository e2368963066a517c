//! talos_etcd_recover with a snapshot of the size real clusters have (hundreds of MiB), through
//! the program as Ansible runs it (one process per task, the args file its one argument) against
//! a talos-sim in this process. Talos takes the upload as a stream with no limit on its size
//! (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go` EtcdRecover @ v1.14.1)
//! and talosctl streams the file to it (`pkg/machinery/client/client.go` EtcdRecover @ v1.14.1);
//! the program streams it too, so its memory stays a small part of the snapshot's size. The time
//! and the program's peak RSS are printed.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferro_talos_sim::{Cluster, SimConfig};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The database's size; the snapshot is 32 bytes more (its SHA-256).
const DB_SIZE: u64 = 256 << 20;

/// What the program may use while it uploads, a quarter of the snapshot: a program that read
/// the file into memory needs all of it at once.
const RSS_LIMIT_KIB: i64 = (DB_SIZE / 4 / 1024) as i64;

/// Runs `module` in the program with `args`; returns its result and its peak RSS in KiB.
#[allow(
    clippy::zombie_processes,
    reason = "wait4 reaps the child, and gives its own peak RSS"
)]
fn program(dir: &Path, module: &str, mut args: Value) -> (Value, i64) {
    args["_ansible_module_name"] = json!(module);
    let file = dir.join(format!("{module}.args.json"));
    std::fs::write(&file, args.to_string()).expect("the args file writes");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferro-talos"))
        .arg(&file)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the program starts");
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut out)
        .expect("its result reads");
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `child` is this process's child and not yet waited for; both pointers are valid for
    // writes for the duration of the call.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "waited for the program");
    let result: Value = serde_json::from_str(&out).expect("the program prints one JSON object");
    assert_ne!(result["failed"], json!(true), "{module}: {result}");
    // ru_maxrss is in KiB on Linux.
    (result, usage.ru_maxrss)
}

/// A snapshot as an etcd server saves one, sparse on disk: a bbolt meta page's magic at offset 16,
/// zeros to `DB_SIZE`, then the database's SHA-256 (etcd v3.6.12 `v3rpc/maintenance.go`).
fn sparse_snapshot(path: &Path) {
    let mut page = vec![0u8; 4096];
    page[16..20].copy_from_slice(&0xED0C_DAEDu32.to_le_bytes());
    let mut sum = Sha256::new();
    sum.update(&page);
    let zeros = vec![0u8; 1 << 20];
    let mut left = DB_SIZE - page.len() as u64;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        sum.update(&zeros[..n]);
        left -= n as u64;
    }
    let mut file = File::create(path).expect("the snapshot file");
    file.write_all(&page).expect("written");
    file.set_len(DB_SIZE).expect("sized");
    file.seek(SeekFrom::End(0)).expect("seeks");
    file.write_all(&sum.finalize()).expect("written");
}

fn mib(kib: i64) -> f64 {
    kib as f64 / 1024.0
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "hashes 256 MiB four times, minutes in a debug build: run it with --release (tools/test does)"
)]
fn a_snapshot_of_256_mib_is_streamed_and_recovered() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the simulator");
    let cluster = loop {
        let b: [u8; 2] = rand::random();
        let cfg = SimConfig {
            control_planes: 1,
            workers: 0,
            // Blocks no other test suite uses (pytest 127.0.*, talos-sim's tests 127.100-199,
            // the in-process module tests 127.200-249).
            base_address: Ipv4Addr::new(127, 250 + b[0] % 5, b[1], 1),
            reboot_downtime: Duration::from_millis(100),
            ..SimConfig::default()
        };
        if let Ok(cluster) = runtime.block_on(Cluster::start(cfg)) {
            break cluster;
        }
    };
    let dir = tempfile::tempdir().expect("a directory for the task's files");
    let node = cluster.nodes()[0].address.to_string();
    let secrets = dir.path().join("secrets.yaml");
    program(
        dir.path(),
        "talos_config",
        json!({"secrets_file": secrets, "generate_secrets": true, "cluster_name": "large"}),
    );
    let render = json!({
        "machine_type": "controlplane", "cluster_name": "large",
        "cluster_endpoint": format!("https://{node}:6443"), "install_disk": "/dev/vda",
    });
    let connection = json!({"node": node, "secrets_file": secrets});
    let with = |extra: Value| {
        let mut args = connection.clone();
        args.as_object_mut()
            .expect("a mapping")
            .extend(extra.as_object().expect("a mapping").clone());
        args
    };
    program(dir.path(), "talos_apply", with(json!({"render": render})));
    let (_, bootstrap_rss) = program(dir.path(), "talos_bootstrap", connection.clone());
    // The disaster-recovery procedure: EPHEMERAL wiped, so etcd is empty.
    program(
        dir.path(),
        "talos_reset",
        with(json!({"confirm": "reset", "wipe": "ephemeral", "graceful": false, "timeout": 60})),
    );
    assert!(!cluster.nodes()[0].etcd_member);

    let snapshot = dir.path().join("etcd.snapshot");
    sparse_snapshot(&snapshot);
    let started = Instant::now();
    let (result, rss) = program(
        dir.path(),
        "talos_etcd_recover",
        with(json!({"snapshot": snapshot, "control_plane_nodes": [node.clone()]})),
    );
    let took = started.elapsed();
    let size = DB_SIZE + 32;
    println!(
        "talos_etcd_recover: a {:.1} MiB snapshot checked, uploaded and restored in {took:.1?} \
         ({:.0} MiB/s); the program's peak RSS {:.1} MiB (talos_bootstrap's: {:.1} MiB)",
        size as f64 / (1 << 20) as f64,
        size as f64 / (1 << 20) as f64 / took.as_secs_f64(),
        mib(rss),
        mib(bootstrap_rss),
    );
    assert_eq!(result["changed"], json!(true), "{result}");
    assert_eq!(result["snapshot_size"], json!(size), "{result}");
    assert_eq!(result["integrity"], json!("checksum verified"), "{result}");
    assert!(
        cluster.nodes()[0].etcd_member,
        "etcd runs from the snapshot"
    );
    assert!(
        rss < RSS_LIMIT_KIB,
        "the program's peak RSS {:.1} MiB is not far below the snapshot's size",
        mib(rss)
    );
    runtime.block_on(cluster.shutdown());
}
