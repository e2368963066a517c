//! Files this tool writes: all of them may hold a node's config or a report, so they are private.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Creates `path` with mode 0600 (never over an existing file) and writes `data`.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(data)
}
