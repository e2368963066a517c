//! Finding and reading a talosconfig the way talosctl does (api.md §11): an explicit
//! path, else `$TALOSCONFIG`, else `$TALOS_HOME/config` (absolute `TALOS_HOME` only)
//! or `~/.talos/config`, else `/var/run/secrets/talos.dev/config`; then choosing a
//! context. The file format itself belongs to `ferro-talos-secrets`
//! ([`TalosConfig`]); this module never writes or creates files.

use std::path::{Path, PathBuf};

pub use ferro_talos_secrets::talosconfig::{Context, TalosConfig};

use crate::error::{ClientError, ErrorKind, Result};

/// Path used inside Kubernetes pods (read-only).
const IN_POD_PATH: &str = "/var/run/secrets/talos.dev/config";

fn config_error(what: impl Into<String>) -> ClientError {
    ClientError::new("", "load talosconfig", ErrorKind::Credentials, what)
}

/// Read and parse the talosconfig at `path`.
pub fn read_talosconfig(path: &Path) -> Result<TalosConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| config_error(format!("cannot read {}: {e}", path.display())))?;
    TalosConfig::from_yaml(&text).map_err(|e| config_error(format!("{}: {e:#}", path.display())))
}

/// Find the talosconfig (see module docs) and parse it.
pub fn load_talosconfig(explicit: Option<&Path>) -> Result<TalosConfig> {
    let path = resolve_path(
        explicit,
        |k| std::env::var(k).ok(),
        home_dir(),
        |p| p.is_file(),
    )?;
    read_talosconfig(&path)
}

/// The named context, or the current one when `name` is `None`.
pub fn select_context<'a>(
    cfg: &'a TalosConfig,
    name: Option<&str>,
) -> Result<(&'a str, &'a Context)> {
    let name = match name.or(cfg.context.as_deref()) {
        Some(n) if !n.is_empty() => n,
        _ => {
            return Err(config_error(
                "no context selected: the talosconfig has no current `context`; name one explicitly",
            ));
        }
    };
    cfg.contexts
        .get_key_value(name)
        .map(|(k, v)| (k.as_str(), v))
        .ok_or_else(|| {
            let known: Vec<&str> = cfg.contexts.keys().map(String::as_str).collect();
            config_error(format!(
                "context {name:?} not found in the talosconfig (known contexts: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })
}

/// The user's home directory from `$HOME`.
fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// Decide which talosconfig file to use. `env` reads environment variables and
/// `exists` tells whether a path is an existing file; both are parameters so the
/// order can be tested without touching the real environment.
pub fn resolve_path(
    explicit: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
    home: Option<PathBuf>,
    exists: impl Fn(&Path) -> bool,
) -> Result<PathBuf> {
    if let Some(p) = explicit {
        // An explicit path must exist: a module must not silently use another file.
        if exists(p) {
            return Ok(p.to_path_buf());
        }
        return Err(config_error(format!(
            "talosconfig {} does not exist",
            p.display()
        )));
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = env("TALOSCONFIG").filter(|v| !v.is_empty()) {
        candidates.push(PathBuf::from(p));
    }
    match env("TALOS_HOME").filter(|v| Path::new(v).is_absolute()) {
        Some(h) => candidates.push(Path::new(&h).join("config")),
        None => {
            if let Some(home) = home {
                candidates.push(home.join(".talos").join("config"));
            }
        }
    }
    candidates.push(PathBuf::from(IN_POD_PATH));
    if let Some(found) = candidates.iter().find(|p| exists(p)) {
        return Ok(found.clone());
    }
    let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    Err(config_error(format!(
        "no talosconfig found (tried {}); pass a path or set TALOSCONFIG",
        tried.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn exists_in(files: &[&str]) -> impl Fn(&Path) -> bool {
        let set: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
        move |p| set.iter().any(|f| f == p)
    }

    const HOME: &str = "/home/op";

    #[test]
    fn explicit_path_wins_and_must_exist() {
        let env = env_of(&[("TALOSCONFIG", "/env/config")]);
        let p = resolve_path(
            Some(Path::new("/x/tc")),
            &env,
            Some(HOME.into()),
            exists_in(&["/x/tc", "/env/config"]),
        )
        .unwrap();
        assert_eq!(p, PathBuf::from("/x/tc"));
        let err = resolve_path(
            Some(Path::new("/x/missing")),
            &env,
            Some(HOME.into()),
            exists_in(&["/env/config"]),
        )
        .unwrap_err();
        assert!(err.message.contains("/x/missing does not exist"), "{err}");
    }

    #[test]
    fn talosconfig_env_before_home() {
        let env = env_of(&[("TALOSCONFIG", "/env/config")]);
        let files = exists_in(&["/env/config", "/home/op/.talos/config"]);
        assert_eq!(
            resolve_path(None, &env, Some(HOME.into()), &files).unwrap(),
            PathBuf::from("/env/config")
        );
        // A TALOSCONFIG pointing nowhere falls through to the next candidate.
        let env = env_of(&[("TALOSCONFIG", "/nowhere")]);
        assert_eq!(
            resolve_path(None, &env, Some(HOME.into()), &files).unwrap(),
            PathBuf::from("/home/op/.talos/config")
        );
    }

    #[test]
    fn talos_home_replaces_dot_talos_only_when_absolute() {
        let files = exists_in(&["/th/config", "/home/op/.talos/config"]);
        let env = env_of(&[("TALOS_HOME", "/th")]);
        assert_eq!(
            resolve_path(None, &env, Some(HOME.into()), &files).unwrap(),
            PathBuf::from("/th/config")
        );
        let env = env_of(&[("TALOS_HOME", "relative/th")]);
        assert_eq!(
            resolve_path(None, &env, Some(HOME.into()), &files).unwrap(),
            PathBuf::from("/home/op/.talos/config")
        );
        // With an absolute TALOS_HOME, ~/.talos/config is not consulted.
        let env = env_of(&[("TALOS_HOME", "/empty")]);
        let err = resolve_path(None, &env, Some(HOME.into()), &files).unwrap_err();
        assert!(err.message.contains("/empty/config"), "{err}");
        assert!(!err.message.contains(".talos"), "{err}");
    }

    #[test]
    fn in_pod_path_is_last_and_none_found_lists_candidates() {
        let env = env_of(&[]);
        assert_eq!(
            resolve_path(None, &env, Some(HOME.into()), exists_in(&[IN_POD_PATH])).unwrap(),
            PathBuf::from(IN_POD_PATH)
        );
        let err = resolve_path(None, &env, Some(HOME.into()), exists_in(&[])).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Credentials);
        assert!(err.message.contains("/home/op/.talos/config"), "{err}");
        assert!(err.message.contains(IN_POD_PATH), "{err}");
    }

    const YAML: &str = "context: prod\ncontexts:\n    prod:\n        endpoints:\n            - 10.5.0.2\n            - 10.5.0.3\n        nodes:\n            - 10.5.0.4\n        ca: Y2E=\n        crt: Y3J0\n        key: a2V5\n    lab:\n        endpoints: []\n        target: 192.168.1.10\n        ca: \"\"\n        crt: \"\"\n        key: \"\"\n";

    #[test]
    fn parses_contexts_and_selects_current_or_named() {
        let cfg = TalosConfig::from_yaml(YAML).unwrap();
        let (name, ctx) = select_context(&cfg, None).unwrap();
        assert_eq!(name, "prod");
        assert_eq!(ctx.endpoints, ["10.5.0.2", "10.5.0.3"]);
        assert_eq!(ctx.nodes, ["10.5.0.4"]);
        let (name, lab) = select_context(&cfg, Some("lab")).unwrap();
        assert_eq!(name, "lab");
        assert_eq!(
            lab.endpoints,
            ["192.168.1.10"],
            "target is appended to endpoints"
        );
        let err = select_context(&cfg, Some("nope")).unwrap_err();
        assert!(err.message.contains("known contexts: lab, prod"), "{err}");
    }

    #[test]
    fn debug_never_shows_key_material() {
        let cfg = TalosConfig::from_yaml(YAML).unwrap();
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("a2V5"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
    }

    #[test]
    fn missing_client_cert_is_a_clear_error() {
        let cfg = TalosConfig::from_yaml(YAML).unwrap();
        let (_, lab) = select_context(&cfg, Some("lab")).unwrap();
        let err = crate::Credentials::from_context(lab).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Credentials);
        assert!(!err.to_string().contains("a2V5"), "{err}");
    }

    #[test]
    fn unreadable_or_malformed_files_are_credential_errors() {
        let dir = std::env::temp_dir().join(format!("ferro-client-tc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config");
        std::fs::write(&path, "contexts: 5\n").unwrap();
        let err = read_talosconfig(&path).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Credentials);
        assert!(err.message.contains("contexts"), "{err}");
        let err = read_talosconfig(&dir.join("missing")).unwrap_err();
        assert!(err.message.contains("cannot read"), "{err}");
        std::fs::write(&path, YAML).unwrap();
        let cfg = load_talosconfig(Some(&path)).unwrap();
        assert_eq!(cfg.context.as_deref(), Some("prod"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_current_context_is_a_clear_error() {
        let cfg = TalosConfig::from_yaml("contexts:\n    a:\n        endpoints: []\n").unwrap();
        let err = select_context(&cfg, None).unwrap_err();
        assert!(err.message.contains("no context selected"), "{err}");
    }
}
