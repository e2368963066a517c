//! The in-process layer for testing modules: a simulated Talos cluster started in this process
//! (the `ferro-talos-sim` library, over real gRPC and mTLS on loopback), and each module's `run`
//! called through `ferro_ansible_protocol::execute`, the same path the program takes for Ansible
//! (argument validation, check and diff flags, secret masking), with an args file as Ansible
//! writes it.
//!
//! `four_checks` runs a task the way a careful user does: `--check --diff`, for real, again, and
//! `--check` once more. Between the runs it compares what the cluster and the task's files look
//! like, so "check mode changed nothing" and "the re-run changed nothing" are observed, not taken
//! from the module's own `changed`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferro_ansible_protocol::{Outcome, execute};
use ferro_talos_sim::{Cluster, SimConfig};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

pub use ferro_talos_tasks::catalog::Module;

/// How a task is run: Ansible's `--check` and `--diff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    Real,
    Check,
}

/// A simulated cluster in this process, with a directory for the task's files (the secrets
/// bundle, rendered configs, kubeconfigs, snapshots). Both go when it is dropped.
pub struct Sim {
    cluster: Option<Cluster>,
    runtime: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
}

impl Sim {
    /// `control_planes` + `workers` nodes in maintenance mode on a random 127.2xx.y.0/24 block
    /// (the simulator's own tests use 127.100-199, the pytest fixture 127.0.20-249), apid on 50000
    /// as on Talos, and reboots of 100 ms so a test with installs and upgrades stays short.
    pub fn start(control_planes: usize, workers: usize) -> Sim {
        Sim::start_version(control_planes, workers, &SimConfig::default().talos_version)
    }

    /// As [`Sim::start`], every node running Talos `version` (such as `v1.14.0-rc.1`).
    #[allow(dead_code)] // not every test binary starts another release
    pub fn start_version(control_planes: usize, workers: usize, version: &str) -> Sim {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime for the simulator");
        let cluster = loop {
            let b: [u8; 2] = rand::random();
            let cfg = SimConfig {
                control_planes,
                workers,
                base_address: Ipv4Addr::new(127, 200 + b[0] % 50, b[1], 1),
                reboot_downtime: Duration::from_millis(100),
                talos_version: version.to_string(),
                ..SimConfig::default()
            };
            // A block another test holds fails to bind: take another.
            if let Ok(cluster) = runtime.block_on(Cluster::start(cfg)) {
                break cluster;
            }
        };
        Sim {
            cluster: Some(cluster),
            runtime,
            dir: tempfile::tempdir().expect("a directory for the task's files"),
        }
    }

    pub fn cluster(&self) -> &Cluster {
        self.cluster
            .as_ref()
            .expect("the cluster runs until the Sim is dropped")
    }

    /// Runs `f` inside the simulator's runtime: for the cluster's calls that start its tasks
    /// (a reboot, a power-on).
    pub fn within<T>(&self, f: impl FnOnce(&Cluster) -> T) -> T {
        let _entered = self.runtime.enter();
        f(self.cluster())
    }

    /// `address` of node `index`, as an inventory names it.
    pub fn node(&self, index: usize) -> String {
        self.cluster().nodes()[index].address.to_string()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// What a task could change: every node as the simulator reports it (mode, version, boot id,
    /// etcd membership, pulled images...), the configs it runs and boots with, and every file in the task directory
    /// with its mode and content hash.
    pub fn world(&self) -> Value {
        let nodes = self.cluster().nodes();
        let configs: Vec<_> = (0..nodes.len())
            .map(|i| self.cluster().config_digests(i))
            .collect();
        json!({
            "nodes": serde_json::to_value(nodes).expect("node infos serialize"),
            "configs": configs,
            "files": files(self.dir.path()),
        })
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(cluster) = self.cluster.take() {
            self.runtime.block_on(cluster.shutdown());
        }
    }
}

fn files(dir: &Path) -> BTreeMap<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("the task directory reads") {
        let entry = entry.expect("a directory entry");
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            for (inner, seen) in files(&path) {
                out.insert(format!("{name}/{inner}"), seen);
            }
            continue;
        }
        let mode = entry.metadata().expect("metadata").permissions().mode() & 0o777;
        let bytes = std::fs::read(&path).expect("the file reads");
        out.insert(
            name,
            format!("{mode:o} {}", hex::encode(Sha256::digest(bytes))),
        );
    }
    out
}

/// Runs `module` once with `args`, as Ansible would with `--check --diff` or for real.
pub fn run(module: &Module, args: &Value, how: Run) -> Outcome {
    let mut args: Map<String, Value> = args.as_object().expect("args are a mapping").clone();
    args.insert("_ansible_module_name".into(), json!(module.name));
    args.insert("_ansible_check_mode".into(), json!(how == Run::Check));
    args.insert("_ansible_diff".into(), json!(how == Run::Check));
    let file = tempfile::NamedTempFile::new().expect("an args file");
    std::fs::write(file.path(), Value::Object(args).to_string()).expect("the args file writes");
    execute(module.name, &(module.spec)(), Some(file.path()), module.run)
}

/// Runs `module` for real and insists that it succeeded: for a test's preconditions.
pub fn run_ok(module: &Module, args: &Value) -> Value {
    let outcome = run(module, args, Run::Real);
    assert!(!outcome.failed(), "{}: {}", module.name, outcome.json);
    outcome.json
}

/// What a task is, for `four_checks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// It converges something: the first real run changes it, a second one finds nothing to do.
    Converges,
    /// It only reads: never changed, nothing touched, in any mode.
    Reads,
    /// Every real run makes something new (a snapshot): changed each time, never in check mode's
    /// world.
    MakesNew,
}

/// The four results of `four_checks`.
pub struct FourRuns {
    pub check: Value,
    pub real: Value,
    pub again: Value,
    pub check_after: Value,
}

/// `--check --diff`, real, real again, `--check`: asserts what each run reports and, comparing
/// `sim.world()` around each, what it did; returns the four results for the test's own checks.
pub fn four_checks(sim: &Sim, module: &Module, args: &Value, kind: Kind) -> FourRuns {
    let name = module.name;
    let before = sim.world();
    let check = run(module, args, Run::Check);
    assert!(!check.failed(), "{name} --check: {}", check.json);
    assert_eq!(
        sim.world(),
        before,
        "{name} --check changed the cluster or a file"
    );
    assert_eq!(
        changed(&check),
        kind != Kind::Reads,
        "{name} --check: {}",
        check.json
    );

    let real = run(module, args, Run::Real);
    assert!(!real.failed(), "{name}: {}", real.json);
    assert_eq!(changed(&real), kind != Kind::Reads, "{name}: {}", real.json);
    let after_real = sim.world();
    match kind {
        Kind::Reads => assert_eq!(
            after_real, before,
            "{name} only reads, but changed something"
        ),
        Kind::Converges | Kind::MakesNew => assert_ne!(
            after_real, before,
            "{name} said changed but nothing changed in the cluster or its files"
        ),
    }

    let again = run(module, args, Run::Real);
    assert!(!again.failed(), "{name} again: {}", again.json);
    assert_eq!(
        changed(&again),
        kind == Kind::MakesNew,
        "{name} again: {}",
        again.json
    );
    if kind != Kind::MakesNew {
        assert_eq!(sim.world(), after_real, "{name} again changed something");
    }

    let settled = sim.world();
    let check_after = run(module, args, Run::Check);
    assert!(
        !check_after.failed(),
        "{name} --check after: {}",
        check_after.json
    );
    assert_eq!(
        changed(&check_after),
        kind == Kind::MakesNew,
        "{name} --check after: {}",
        check_after.json
    );
    assert_eq!(
        sim.world(),
        settled,
        "{name} --check after changed something"
    );

    FourRuns {
        check: check.json,
        real: real.json,
        again: again.json,
        check_after: check_after.json,
    }
}

fn changed(outcome: &Outcome) -> bool {
    outcome.json["changed"] == json!(true)
}

/// The secret values of a bundle file: every string except certificates and the cluster id, and
/// the secret half of each `id.secret` token.
pub fn bundle_secrets(bundle: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(bundle).expect("the bundle reads");
    let doc: Value = serde_saphyr::from_str(&text).expect("the bundle is YAML");
    let mut out = Vec::new();
    collect_secrets(&doc, None, &mut out);
    out.retain(|s| s.len() >= 16);
    out
}

fn collect_secrets(v: &Value, key: Option<&str>, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => map
            .iter()
            .for_each(|(k, v)| collect_secrets(v, Some(k), out)),
        Value::Array(items) => items.iter().for_each(|v| collect_secrets(v, key, out)),
        Value::String(s) if !matches!(key, Some("crt" | "id")) => {
            out.push(s.clone());
            out.extend(s.split('.').map(String::from));
        }
        _ => {}
    }
}

/// Asserts that no secret of the bundle appears anywhere in `results`.
pub fn assert_no_secret(bundle: &Path, results: &[&Value]) {
    let secrets = bundle_secrets(bundle);
    assert!(!secrets.is_empty(), "the bundle holds secrets");
    for result in results {
        let text = result.to_string();
        for s in &secrets {
            assert!(
                !text.contains(s.as_str()),
                "a secret of the bundle is in a result: {result}"
            );
        }
    }
}
