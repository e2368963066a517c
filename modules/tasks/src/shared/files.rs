//! Files a module writes: always whole, through a temporary file and a rename.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context, Result, anyhow};

/// Mode for every file that holds secrets (configs, bundles, talosconfig, kubeconfig).
pub const SECRET_MODE: u32 = 0o600;

/// Reads a file that may not exist yet.
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow!("cannot read {}: {e}", path.display())),
    }
}

/// A config option's value: a path when it is one line naming an existing file, else the YAML
/// itself. A single line that is neither (no file, no `key: value`) is an error.
pub fn read_file_or_content(value: &str) -> Result<String> {
    if !value.contains('\n') {
        let path = Path::new(value.trim());
        if path.is_file() {
            return fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()));
        }
        if !value.contains(':') {
            return Err(anyhow!(
                "{value} is neither an existing file nor machine config YAML"
            ));
        }
    }
    Ok(value.to_string())
}

/// Writes `content` to `path` atomically with `mode`: a reader sees the old file or the new one,
/// never a partial one, and the secret never sits in a file with wider permissions.
/// Missing parent directories are created.
pub fn write_atomic(path: &Path, content: &[u8], mode: u32) -> Result<()> {
    write_atomic_with(path, mode, |file| Ok(file.write_all(content)?))
}

/// Like [`write_atomic`], for content too large to hold in memory: `fill` writes into the
/// temporary file (created with `mode`), which replaces `path` only when `fill` succeeds.
pub fn write_atomic_with<T>(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> Result<T>,
) -> Result<T> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{} is not a file path", path.display()))?
        .to_string_lossy()
        .into_owned();
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{name}.{}.{:08x}.tmp",
        std::process::id(),
        rand::random::<u32>()
    ));
    let result = (|| -> Result<T> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        let value = fill(&mut file)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
            .with_context(|| format!("cannot move {} into place", path.display()))?;
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(value)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_with_mode_and_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/secret.yaml");
        write_atomic(&path, b"one", SECRET_MODE).unwrap();
        write_atomic(&path, b"two", SECRET_MODE).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let leftovers: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file may be left behind");
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should go makes the rename fail.
        let path = dir.path().join("taken");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("x"), "keep").unwrap();
        assert!(write_atomic(&path, b"new", SECRET_MODE).is_err());
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn read_optional_missing_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_optional(&dir.path().join("nope")).unwrap().is_none());
    }
}
