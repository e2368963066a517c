//! `talos_etcd_recover`: bring etcd back from a snapshot after it lost its quorum for good, as
//! `talosctl bootstrap --recover-from` does.
//!
//! Upstream (tag v1.13.9 of siderolabs/talos): EtcdRecover (`v1alpha1_server.go`) stores the
//! uploaded stream as `/var/lib/etcd.snapshot` and checks nothing; Bootstrap with `recover_etcd`
//! refuses a node whose etcd data directory is not empty (AlreadyExists), answers at once, and the
//! etcd service restores the snapshot in its pre stage
//! (`internal/app/machined/pkg/system/services/etcd.go`), where a snapshot etcd cannot open, or
//! whose SHA-256 trailer does not match, leaves the service Failed. So this module checks the
//! snapshot on the controller first, as etcd will (a bbolt database; the trailer an etcd server
//! appends to a snapshot, unless `skip_hash_check` for a copy of the data directory's db),
//! refuses while any control plane still has etcd members, and afterwards waits for the etcd
//! service to run, or fails with what it says. The disaster-recovery procedure wipes EPHEMERAL
//! on every control plane first (`talos_reset` with `wipe: ephemeral`, `graceful: false`); the
//! others join the recovered member by themselves.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Params, Spec, Type};
use ferro_talos_client::{Credentials, ErrorKind};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::connection::{self, Target, client_error, with_connection_options};
use crate::etcd_members::{self, EtcdWait, Members};

/// bbolt's meta page magic, at offset 16 of the file (etcd's backend is a bbolt database).
const BBOLT_MAGIC: u32 = 0xED0C_DAED;

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::path("snapshot").required())
        .option(Opt::bool("skip_hash_check").default(false))
        .option(
            Opt::list("control_plane_nodes")
                .elements(Type::Str)
                .default(json!([])),
        )
        .option(Opt::bool("wait").default(true))
        .option(Opt::int("timeout").default(600))
}

/// What etcd will say of the snapshot, said first: Err names the problem and what to do.
fn check_snapshot(data: &[u8], skip_hash_check: bool) -> Result<&'static str, String> {
    if data.len() < 20 {
        return Err(format!(
            "is {} bytes long, too short for an etcd database",
            data.len()
        ));
    }
    let magic = u32::from_le_bytes([data[16], data[17], data[18], data[19]]);
    if magic != BBOLT_MAGIC {
        return Err(
            "is not an etcd database (no bbolt meta page); give a file saved by talos_etcd_snapshot \
             or talosctl etcd snapshot"
                .into(),
        );
    }
    // The etcd server appends the SHA-256 of the database to a snapshot stream: 32 bytes after a
    // whole number of 512-byte sectors (etcd's `hasChecksum`).
    if data.len() % 512 != 32 {
        return if skip_hash_check {
            Ok("no checksum (a copy of the data directory's db)")
        } else {
            Err(format!(
                "has no SHA-256 checksum (size {}): it is not a snapshot an etcd server saved; for a \
                 copy of the data directory's member/snap/db set skip_hash_check: true",
                data.len()
            ))
        };
    }
    if skip_hash_check {
        return Ok("checksum not verified (skip_hash_check)");
    }
    let (db, trailer) = data.split_at(data.len() - 32);
    if Sha256::digest(db).as_slice() != trailer {
        return Err(
            "does not match its SHA-256 checksum: the file is damaged or was cut short; take the \
             snapshot again, or set skip_hash_check: true to restore it anyway"
                .into(),
        );
    }
    Ok("checksum verified")
}

pub fn run(ctx: &mut Context, p: &Params) -> Result<ModuleResult, ModuleError> {
    let target = Target::from_params(p)?;
    let path = p.path("snapshot").unwrap_or_default();
    let data = std::fs::read(&path).map_err(|e| {
        ModuleError::new(format!(
            "snapshot {}: cannot read it ({e}); give the file talos_etcd_snapshot saved",
            path.display()
        ))
    })?;
    let skip = p.bool("skip_hash_check");
    let integrity = check_snapshot(&data, skip)
        .map_err(|why| ModuleError::new(format!("snapshot {} {why}", path.display())))?;
    let timeout = crate::options::wait_seconds(p, "timeout", 600)?;
    let others: Vec<String> = crate::options::other_control_planes(p, &target.node);
    let (creds, _) = connection::require_credentials(ctx, p)?;
    let mut opts = connection::connect_options(p, Duration::from_secs(30))?;
    opts.stream_timeout = timeout;
    let sha = hex::encode(Sha256::digest(&data));
    let result = ModuleResult::unchanged()
        .with("node", target.node.clone())
        .with("snapshot_size", data.len())
        .with("snapshot_sha256", sha)
        .with("integrity", integrity);
    connection::block_on(async {
        // Any member anywhere means etcd runs: recovering would start a second cluster.
        for node in std::iter::once(&target.node).chain(&others) {
            let t = if *node == target.node {
                Target {
                    node: target.node.clone(),
                    endpoint: target.endpoint.clone(),
                }
            } else {
                Target::for_node(p, node, "control_plane_nodes")?
            };
            match etcd_members::ask(&t, &creds, &opts).await {
                Members::Present(m) => {
                    return Ok(result.msg(format!(
                        "etcd runs with {} member(s) (asked {node}): nothing to recover",
                        m.len()
                    )));
                }
                Members::NotRunning { .. } => {}
                Members::Maintenance => {
                    return Err(ModuleError::new(format!(
                        "node {node} is in maintenance mode: apply its config first; a control plane \
                         recovers etcd once it runs its config with an empty etcd"
                    ))
                    .with("node", node.clone()));
                }
                Members::Unknown(why) => {
                    return Err(ModuleError::new(format!(
                        "cannot tell whether etcd runs on {node} ({why}); every control plane must \
                         answer before a recovery, or a second etcd cluster could start"
                    ))
                    .with("node", node.clone()));
                }
            }
        }
        let mut result = result;
        result.changed = true;
        if ctx.check_mode {
            return Ok(result.msg(format!(
                "would upload the {}-byte snapshot to {} and bootstrap etcd from it",
                data.len(),
                target.node
            )));
        }
        recover(ctx, &target, &creds, &opts, data, skip, timeout).await?;
        if p.bool("wait") {
            wait_running(&target, &creds, &opts, timeout).await?;
        }
        Ok(result.msg(format!(
            "recovered etcd on {} from the snapshot ({integrity})",
            target.node
        )))
    })?
}

async fn recover(
    ctx: &Context,
    target: &Target,
    creds: &Credentials,
    opts: &ferro_talos_client::ConnectOptions,
    data: Vec<u8>,
    skip: bool,
    timeout: Duration,
) -> Result<(), ModuleError> {
    let deadline = Instant::now() + timeout;
    let client = connection::connect(target, creds, opts.clone())
        .await
        .map_err(|e| client_error(ctx, e))?;
    client
        .etcd_recover(data)
        .await
        .map_err(|e| client_error(ctx, e))?;
    loop {
        match client.bootstrap_recover(skip).await {
            Ok(()) => return Ok(()),
            Err(e) if e.kind == ErrorKind::AlreadyExists => {
                return Err(ModuleError::new(format!(
                    "etcd's data directory on {} is not empty, so Talos will not recover into it: wipe \
                     EPHEMERAL on every control plane first (ferro.talos.talos_reset with wipe: \
                     ephemeral and graceful: false), then run this again",
                    target.node
                ))
                .with("node", target.node.clone()));
            }
            // Not ready to bootstrap yet (CRI, clock), as talos_bootstrap retries it.
            Err(e) if e.kind == ErrorKind::NotReady && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(client_error(ctx, e)),
        }
    }
}

/// Until etcd runs again; a Failed service (the restore failed) ends the wait with its message.
async fn wait_running(
    target: &Target,
    creds: &Credentials,
    opts: &ferro_talos_client::ConnectOptions,
    timeout: Duration,
) -> Result<(), ModuleError> {
    let message = match etcd_members::wait_running(target, creds, opts, timeout).await {
        Ok(()) => return Ok(()),
        Err(EtcdWait::Failed(message)) => format!(
            "the etcd service on {} failed to restore the snapshot: {message}; wipe EPHEMERAL again \
             (talos_reset wipe: ephemeral, graceful: false) before another try",
            target.node
        ),
        Err(EtcdWait::TimedOut(last)) => format!(
            "etcd on {} did not run within {}s after the recovery (last: {last})",
            target.node,
            timeout.as_secs()
        ),
    };
    Err(ModuleError::new(message)
        .with("node", target.node.clone())
        .changed(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database(pages: usize) -> Vec<u8> {
        let mut db = vec![0u8; pages * 4096];
        db[16..20].copy_from_slice(&BBOLT_MAGIC.to_le_bytes());
        db
    }

    #[test]
    fn the_snapshot_is_checked_as_etcd_will_check_it() {
        let db = database(4);
        let mut saved = db.clone();
        saved.extend_from_slice(&Sha256::digest(&db));
        assert_eq!(check_snapshot(&saved, false), Ok("checksum verified"));
        let mut damaged = saved.clone();
        damaged[5000] ^= 1;
        assert!(
            check_snapshot(&damaged, false)
                .unwrap_err()
                .contains("does not match")
        );
        assert!(check_snapshot(&damaged, true).is_ok());
        assert!(
            check_snapshot(&db, false)
                .unwrap_err()
                .contains("skip_hash_check: true")
        );
        assert!(check_snapshot(&db, true).is_ok());
        assert!(
            check_snapshot(&vec![7u8; 4096], true)
                .unwrap_err()
                .contains("not an etcd database")
        );
        assert!(check_snapshot(b"", false).unwrap_err().contains("0 bytes"));
    }
}
