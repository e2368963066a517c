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

use std::fs::File;
use std::io::{Read, Seek};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec, Type};
use ferro_talos_client::{Credentials, ErrorKind};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::shared::connection::{self, Target, with_connection_options};
use crate::shared::etcd_members::{self, EtcdWait, Members};
use crate::shared::failure::{OrFail, client_failure};

mod args;
pub use args::Args;

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

/// The snapshot file as checked: what etcd will say of it, and what the result reports.
#[derive(Debug, PartialEq)]
struct Checked {
    integrity: &'static str,
    size: u64,
    sha256: String,
}

/// What etcd will say of the snapshot, said first: Err names the problem and what to do. The
/// file is read once, a chunk at a time, since snapshots run to hundreds of MiB.
fn check_snapshot(
    mut file: impl Read,
    size: u64,
    skip_hash_check: bool,
) -> Result<Checked, String> {
    if size < 20 {
        return Err(format!(
            "is {size} bytes long, too short for an etcd database"
        ));
    }
    // The etcd server appends the SHA-256 of the database to a snapshot stream: 32 bytes after a
    // whole number of 512-byte sectors (etcd's `hasChecksum`).
    let has_hash = size % 512 == 32;
    let verify = has_hash && !skip_hash_check;
    let db_len = if has_hash { size - 32 } else { size };
    let (mut whole, mut db) = (Sha256::new(), Sha256::new());
    let (mut head, mut trailer) = (Vec::with_capacity(20), Vec::with_capacity(32));
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("cannot be read ({e})")),
        };
        let chunk = &buf[..n];
        whole.update(chunk);
        let in_db = db_len.saturating_sub(read).min(n as u64) as usize;
        if verify {
            db.update(&chunk[..in_db]);
        }
        trailer.extend_from_slice(&chunk[in_db..]);
        let more_head = (20 - head.len()).min(n);
        head.extend_from_slice(&chunk[..more_head]);
        read += n as u64;
    }
    if read != size {
        return Err(format!(
            "changed while it was read ({size} bytes, then {read}); give a snapshot nothing writes to"
        ));
    }
    let magic = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
    if magic != BBOLT_MAGIC {
        return Err(
            "is not an etcd database (no bbolt meta page); give a file saved by talos_etcd_snapshot \
             or talosctl etcd snapshot"
                .into(),
        );
    }
    let integrity = if !has_hash {
        if !skip_hash_check {
            return Err(format!(
                "has no SHA-256 checksum (size {size}): it is not a snapshot an etcd server saved; for a \
                 copy of the data directory's member/snap/db set skip_hash_check: true"
            ));
        }
        "no checksum (a copy of the data directory's db)"
    } else if skip_hash_check {
        "checksum not verified (skip_hash_check)"
    } else if db.finalize().as_slice() != trailer.as_slice() {
        return Err(
            "does not match its SHA-256 checksum: the file is damaged or was cut short; take the \
             snapshot again, or set skip_hash_check: true to restore it anyway"
                .into(),
        );
    } else {
        "checksum verified"
    };
    Ok(Checked {
        integrity,
        size,
        sha256: hex::encode(whole.finalize()),
    })
}

/// A size for messages: `256.0 MiB`.
/// A size as a person reads it: a fresh cluster's snapshot is a few hundred KiB, which "0.0 MiB"
/// would hide.
fn size_text(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes < MIB {
        format!("{} KiB", bytes.div_ceil(1024))
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        snapshot: path,
        skip_hash_check: skip,
        others,
        wait,
        timeout,
    } = args;
    let unreadable = |e: std::io::Error| {
        ModuleError::new(format!(
            "snapshot {}: cannot read it ({e}); give the file talos_etcd_snapshot saved",
            path.display()
        ))
    };
    let mut file = File::open(&path).map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(ModuleError::new(format!(
            "snapshot {} is not a file; give the file talos_etcd_snapshot saved",
            path.display()
        )));
    }
    let checked = check_snapshot(&file, meta.len(), skip)
        .map_err(|why| ModuleError::new(format!("snapshot {} {why}", path.display())))?;
    file.rewind().map_err(unreadable)?;
    let integrity = checked.integrity;
    let (creds, _) = connection::require_credentials(ctx, &connection)?;
    let mut opts = connection.connect_options(Duration::from_secs(30));
    opts.stream_timeout = timeout;
    let result = ModuleResult::unchanged()
        .with("node", target.node.clone())
        .with("snapshot_size", checked.size)
        .with("snapshot_sha256", checked.sha256.clone())
        .with("integrity", integrity);
    connection::block_on(async {
        // Any member anywhere means etcd runs: recovering would start a second cluster.
        for t in std::iter::once(&target).chain(&others) {
            let node = &t.node;
            match etcd_members::ask(t, &creds, &opts).await {
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
                checked.size, target.node
            )));
        }
        // One deadline for what follows: the upload, the bootstrap and the wait.
        let deadline = Deadline::after(timeout);
        let snapshot = Snapshot {
            file,
            size: checked.size,
        };
        recover(&target, &creds, &opts, snapshot, skip, deadline).await?;
        if wait {
            wait_running(&target, &creds, &opts, deadline).await?;
        }
        Ok(result.msg(format!(
            "recovered etcd on {} from the snapshot ({integrity})",
            target.node
        )))
    })?
}

/// When the task's `timeout` runs out, counted from the upload's start.
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    timeout: Duration,
}

impl Deadline {
    fn after(timeout: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + timeout,
            timeout,
        }
    }

    fn left(self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    fn passed(self) -> bool {
        Instant::now() >= self.at
    }
}

/// The checked snapshot file, open at its start, and its size when it was checked.
struct Snapshot {
    file: File,
    size: u64,
}

/// A reader that counts what it read: how far an upload got.
struct Counted<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Relaxed);
        Ok(n)
    }
}

async fn recover(
    target: &Target,
    creds: &Credentials,
    opts: &ferro_talos_client::ConnectOptions,
    snapshot: Snapshot,
    skip: bool,
    deadline: Deadline,
) -> Result<(), ModuleError> {
    let client = connection::connect(target, creds, opts.clone())
        .await
        .or_fail()?;
    let size = snapshot.size;
    let read = Arc::new(AtomicU64::new(0));
    let file = Counted {
        inner: snapshot.file.take(size),
        read: read.clone(),
    };
    let sent = client
        .etcd_recover(file, deadline.left())
        .await
        .map_err(|e| upload_failed(target, (size, read.load(Relaxed)), deadline, e))?;
    if sent != size {
        return Err(ModuleError::new(format!(
            "the snapshot changed while it was uploaded to {} ({size} bytes checked, {sent} sent); \
             nothing was bootstrapped: give a snapshot nothing writes to and run the task again",
            target.node
        ))
        .with("node", target.node.clone()));
    }
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
            Err(e) if e.kind == ErrorKind::NotReady && !deadline.passed() => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(client_failure(e)),
        }
    }
}

/// A failed upload, said for the user; a deadline that passed is the task's `timeout`.
fn upload_failed(
    target: &Target,
    (size, read): (u64, u64),
    deadline: Deadline,
    e: ferro_talos_client::ClientError,
) -> ModuleError {
    if e.kind != ErrorKind::Timeout {
        return client_failure(e);
    }
    ModuleError::new(format!(
        "node {}: the upload of the {} snapshot did not finish within the task's timeout of {}s \
         (about {} of it sent): raise timeout (it bounds the upload, the bootstrap and \
         the wait together), or run the task where the link to the node is faster; nothing was \
         bootstrapped, and the next run uploads the snapshot again",
        target.node,
        size_text(size),
        deadline.timeout.as_secs(),
        size_text(read),
    ))
    .with("node", target.node.clone())
}

/// Until etcd runs again; a Failed service (the restore failed) ends the wait with its message.
async fn wait_running(
    target: &Target,
    creds: &Credentials,
    opts: &ferro_talos_client::ConnectOptions,
    deadline: Deadline,
) -> Result<(), ModuleError> {
    let message = match etcd_members::wait_running(target, creds, opts, deadline.left()).await {
        Ok(()) => return Ok(()),
        Err(EtcdWait::Failed(message)) => format!(
            "the etcd service on {} failed to restore the snapshot: {message}; wipe EPHEMERAL again \
             (talos_reset wipe: ephemeral, graceful: false) before another try",
            target.node
        ),
        Err(EtcdWait::TimedOut(last)) => format!(
            "etcd on {} did not run after the recovery within the task's timeout of {}s (last: \
             {last}); raise timeout if its restore takes longer",
            target.node,
            deadline.timeout.as_secs()
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

    /// What the check says of `data`, read as from a file.
    fn check(data: &[u8], skip: bool) -> Result<&'static str, String> {
        check_snapshot(data, data.len() as u64, skip).map(|c| c.integrity)
    }

    #[test]
    fn the_snapshot_is_checked_as_etcd_will_check_it() {
        let db = database(4);
        let mut saved = db.clone();
        saved.extend_from_slice(&Sha256::digest(&db));
        assert_eq!(check(&saved, false), Ok("checksum verified"));
        let mut damaged = saved.clone();
        damaged[5000] ^= 1;
        assert!(
            check(&damaged, false)
                .unwrap_err()
                .contains("does not match")
        );
        assert!(check(&damaged, true).is_ok());
        assert!(
            check(&db, false)
                .unwrap_err()
                .contains("skip_hash_check: true")
        );
        assert!(check(&db, true).is_ok());
        assert!(
            check(&vec![7u8; 4096], true)
                .unwrap_err()
                .contains("not an etcd database")
        );
        assert!(check(b"", false).unwrap_err().contains("0 bytes"));
    }

    /// A snapshot larger than one read, whose checksum spans reads, and what the result reports.
    #[test]
    fn a_snapshot_is_checked_a_read_at_a_time() {
        let db = database(700);
        let mut saved = db.clone();
        saved.extend_from_slice(&Sha256::digest(&db));
        let checked = check_snapshot(saved.as_slice(), saved.len() as u64, false).unwrap();
        assert_eq!(
            checked,
            Checked {
                integrity: "checksum verified",
                size: saved.len() as u64,
                sha256: hex::encode(Sha256::digest(&saved)),
            }
        );
        let last = saved.len() - 1;
        saved[last] ^= 1;
        assert!(check(&saved, false).unwrap_err().contains("does not match"));
        // A file that grew or shrank between its size and its reading.
        let short = check_snapshot(&db[..8192], 9000, true).unwrap_err();
        assert!(short.contains("changed while it was read"), "{short}");
    }
}
