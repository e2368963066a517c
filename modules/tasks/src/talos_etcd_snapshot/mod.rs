//! `talos_etcd_snapshot`: save an etcd snapshot from a control plane to a file on the controller.

use std::path::Path;
use std::time::Duration;

use anyhow::anyhow;
use ferro_ansible_protocol::{Context, ModuleError, ModuleResult, Opt, Spec};
use sha2::Digest;

use crate::shared::connection::{self, with_connection_options};
use crate::shared::failure::{OrFail, client_failure};
use crate::shared::files::{SECRET_MODE, write_atomic_with};

mod args;
pub use args::Args;

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::path("dest").required())
        .option(Opt::int("timeout").default(600))
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        dest,
        timeout,
    } = args;
    if dest.is_dir() {
        return Err(dest_not_a_file(&dest));
    }
    let (creds, _) = connection::require_credentials(ctx, &connection)?;
    let mut opts = connection.connect_options(Duration::from_secs(30));
    opts.stream_timeout = timeout;
    let result = ModuleResult::changed()
        .with("node", target.node.clone())
        .with("dest", dest.display().to_string());
    if ctx.check_mode {
        // A snapshot is always new; say what would happen without reading etcd.
        return Ok(result.msg(format!(
            "would save an etcd snapshot from {} to {}",
            target.node,
            dest.display()
        )));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ModuleError::new(format!("cannot start the async runtime: {e}")))?;
    let client = rt
        .block_on(connection::connect(&target, &creds, opts))
        .or_fail()?;
    // The snapshot holds every Kubernetes Secret: it is streamed into a 0600 temporary file and
    // only renamed into place once complete.
    let mut failure = None;
    let written = write_atomic_with(&dest, SECRET_MODE, |file| {
        let mut hashing = HashingWriter {
            inner: file,
            hash: sha2::Sha256::new(),
        };
        match rt.block_on(client.etcd_snapshot(&mut hashing)) {
            Ok(size) => Ok((size, hex::encode(hashing.hash.finalize()))),
            Err(e) => {
                let msg = e.to_string();
                failure = Some(e);
                Err(anyhow!(msg))
            }
        }
    });
    let (size, sha) = match (written, failure) {
        (Ok(v), _) => v,
        (Err(_), Some(e)) => return Err(client_failure(e)),
        (Err(e), None) => return Err(ModuleError::new(format!("{e:#}"))),
    };
    if size == 0 {
        return Err(ModuleError::new(format!(
            "node {} sent an empty etcd snapshot; is etcd running there (talos_info shows its members)?",
            target.node
        )));
    }
    Ok(result.with("size", size).with("sha256", sha).msg(format!(
        "saved an etcd snapshot of {size} bytes from {} to {}",
        target.node,
        dest.display()
    )))
}

/// Said when `dest` is empty, or (found in `run`, since it asks the filesystem) a directory.
fn dest_not_a_file(dest: &Path) -> ModuleError {
    ModuleError::new(format!(
        "dest must be a file path for the snapshot, got {:?}",
        dest.display().to_string()
    ))
}

/// Hashes what passes through, so the result can name the snapshot's digest.
struct HashingWriter<'a, W> {
    inner: &'a mut W,
    hash: sha2::Sha256,
}

impl<W: std::io::Write> std::io::Write for HashingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
