//! One control plane's Kubernetes programs as child processes: kube-apiserver,
//! kube-controller-manager and kube-scheduler, upstream's own (`tools/kube-apiserver/build`),
//! with the files they read (certificates from the cluster's CA, the service-account key,
//! kubeconfigs, the audit policy) in the node's directory under the state directory.
//!
//! The flags are the ones Talos passes (`internal/app/machined/pkg/controllers/k8s/
//! control_plane_final.go` @ v1.14.1) where they decide what a client sees: the authorization
//! modes, NodeRestriction, the service-account issuer and keys, leader election, node CIDR
//! allocation, the service-account credentials per controller. They differ where the machine
//! does: etcd is the node's own member over plain HTTP (`real/process.rs`), and the controller
//! manager and scheduler bind the node's address rather than 127.0.0.1, the simulated nodes
//! sharing one host.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::mcfg::StoredConfig;
use crate::real::process::dies_with_parent;

/// The Kubernetes release the real backend runs: the version `tools/kube-apiserver/build`
/// builds (Talos v1.13.9's default, `DefaultKubernetesVersion`).
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// Where upstream's Kubernetes programs are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeBinaries {
    pub apiserver: PathBuf,
    pub controller_manager: PathBuf,
    pub scheduler: PathBuf,
}

impl KubeBinaries {
    /// The ones `tools/kube-apiserver/build` writes into `dir` (`target/upstream`).
    pub fn in_dir(dir: &Path) -> KubeBinaries {
        let at = |program: &str| dir.join(format!("{program}-{KUBERNETES_VERSION}"));
        KubeBinaries {
            apiserver: at("kube-apiserver"),
            controller_manager: at("kube-controller-manager"),
            scheduler: at("kube-scheduler"),
        }
    }

    pub fn check(&self) -> anyhow::Result<()> {
        for bin in [&self.apiserver, &self.controller_manager, &self.scheduler] {
            if !bin.is_file() {
                anyhow::bail!(
                    "{} does not exist: build upstream's Kubernetes programs with tools/kube-apiserver/build (--kubernetes real runs them)",
                    bin.display()
                );
            }
        }
        Ok(())
    }
}

/// The identities the simulator's kubelets and Talos's controllers use, issued from the
/// cluster's Kubernetes CA.
#[derive(Clone)]
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
}

const VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

pub fn issue(ca: &(String, String), cn: &str, orgs: &[&str]) -> anyhow::Result<Identity> {
    let issued = ferro_talos_secrets::pki::issue_client_cert(
        &ca.0,
        &ca.1,
        Some(cn),
        orgs,
        VALIDITY,
        time::OffsetDateTime::now_utc(),
    )?;
    Ok(Identity {
        cert_pem: issued.cert_pem,
        key_pem: issued.key_pem,
    })
}

/// What one control plane's programs run with.
pub struct ControlPlane<'a> {
    pub dir: &'a Path,
    pub cfg: &'a StoredConfig,
    pub address: Ipv4Addr,
    pub port: u16,
    pub etcd_url: String,
}

/// The audit policy: what the simulator's log of the API server is read from (`audit.rs`).
/// Node writes other than status with their answers (a cordon is read from them), evictions,
/// and the writes of stored objects by clients and Talos (not by the kubelets, controllers or
/// scheduler, not of pods, events, leases or the review APIs); nothing else.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: RequestResponse
    verbs: ["update", "patch", "delete"]
    resources: [{group: "", resources: ["nodes"]}]
  - level: Metadata
    verbs: ["create"]
    resources: [{group: "", resources: ["pods/eviction"]}]
  - level: None
    userGroups: ["system:nodes", "system:serviceaccounts"]
  - level: None
    users: ["system:kube-controller-manager", "system:kube-scheduler", "system:apiserver"]
  - level: None
    resources:
      - {group: "", resources: ["pods", "pods/status", "events", "endpoints", "nodes/status"]}
      - {group: "coordination.k8s.io"}
      - {group: "events.k8s.io"}
      - {group: "authentication.k8s.io"}
      - {group: "authorization.k8s.io"}
      - {group: "discovery.k8s.io"}
  - level: Metadata
    verbs: ["create", "update", "patch", "delete"]
  - level: None
"#;

pub const AUDIT_LOG: &str = "audit.log";

/// Writes a file only its owner reads (it may hold a key), whole or not at all.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}

fn kubeconfig(cp: &ControlPlane<'_>, who: &str, id: &Identity) -> std::io::Result<PathBuf> {
    let dir = cp.dir;
    write_private(&dir.join(format!("{who}.crt")), &id.cert_pem)?;
    write_private(&dir.join(format!("{who}.key")), &id.key_pem)?;
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {
            "server": format!("https://{}:{}", cp.address, cp.port),
            "certificate-authority": dir.join("ca.crt"),
        }}],
        "users": [{"name": who, "user": {
            "client-certificate": dir.join(format!("{who}.crt")),
            "client-key": dir.join(format!("{who}.key")),
        }}],
        "contexts": [{"name": who, "context": {"cluster": "local", "user": who}}],
        "current-context": who,
    });
    let path = dir.join(format!("{who}.kubeconfig"));
    write_private(&path, &config.to_string())?;
    Ok(path)
}

fn subnets(cfg: &StoredConfig, field: &str, default: &str) -> String {
    let v1 = cfg.v1alpha1();
    let list: Vec<String> = v1
        .and_then(|d| d.pointer(&format!("/cluster/network/{field}")))
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if list.is_empty() {
        default.to_string()
    } else {
        list.join(",")
    }
}

fn spawn(program: &Path, args: Vec<OsString>, log: &Path) -> std::io::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    dies_with_parent(&mut cmd);
    cmd.spawn()
}

/// `--name=value` (the only form the programs' boolean flags take a value in).
fn flag(name: &str, value: impl Into<OsString>) -> [OsString; 1] {
    let mut arg = OsString::from(format!("--{name}="));
    arg.push(value.into());
    [arg]
}

/// The three programs of a control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Program {
    ApiServer,
    ControllerManager,
    Scheduler,
}

impl Program {
    pub const ALL: [Program; 3] = [
        Program::ApiServer,
        Program::ControllerManager,
        Program::Scheduler,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Program::ApiServer => "kube-apiserver",
            Program::ControllerManager => "kube-controller-manager",
            Program::Scheduler => "kube-scheduler",
        }
    }

    pub fn log(self) -> String {
        format!("{}.log", self.name())
    }
}

/// What the programs' files and flags are made of: a config change that leaves these alone (an
/// inline manifest, a label) does not restart them, as Talos restarts a static pod only when its
/// spec changes. The one binary of each program serves every Kubernetes version the config names.
pub fn fingerprint(cfg: &StoredConfig, address: Ipv4Addr, port: u16) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let ca = cfg.k8s_ca().unwrap_or_default();
    for part in [
        ca.0,
        ca.1,
        cfg.service_account_key().unwrap_or_default(),
        cfg.endpoint(),
        subnets(cfg, "serviceSubnets", ""),
        subnets(cfg, "podSubnets", ""),
        format!("{address}:{port}"),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// Writes the files the control plane's programs read.
pub fn write_files(cp: &ControlPlane<'_>) -> anyhow::Result<()> {
    let dir = cp.dir;
    std::fs::create_dir_all(dir)?;
    let ca = cp
        .cfg
        .k8s_ca()
        .ok_or_else(|| anyhow::anyhow!("the config has no Kubernetes CA key (cluster.ca)"))?;
    let sa_key = cp.cfg.service_account_key().ok_or_else(|| {
        anyhow::anyhow!("the config has no service-account key (cluster.serviceAccount.key)")
    })?;
    let (ips, dns) = crate::kube::serving_names(cp.cfg, cp.address);
    let serving = ferro_talos_secrets::pki::issue_server_cert(
        &ca.0,
        &ca.1,
        "kube-apiserver",
        &ips,
        &dns,
        VALIDITY,
    )?;
    write_private(&dir.join("ca.crt"), &ca.0)?;
    write_private(&dir.join("ca.key"), &ca.1)?;
    write_private(&dir.join("apiserver.crt"), &serving.cert_pem)?;
    write_private(&dir.join("apiserver.key"), &serving.key_pem)?;
    write_private(&dir.join("service-account.key"), &sa_key)?;
    write_private(&dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
    kubeconfig(
        cp,
        Program::ControllerManager.name(),
        &issue(&ca, "system:kube-controller-manager", &[])?,
    )?;
    kubeconfig(
        cp,
        Program::Scheduler.name(),
        &issue(&ca, "system:kube-scheduler", &[])?,
    )?;
    Ok(())
}

fn args(program: Program, cp: &ControlPlane<'_>) -> Vec<OsString> {
    let dir = cp.dir;
    let path = |name: &str| dir.join(name).into_os_string();
    let address = cp.address.to_string();
    let issuer = match cp.cfg.endpoint() {
        e if e.is_empty() => format!("https://{}:{}", cp.address, cp.port),
        e => e,
    };
    let service_cidr = subnets(cp.cfg, "serviceSubnets", "10.96.0.0/12");
    let pod_cidr = subnets(cp.cfg, "podSubnets", "10.244.0.0/16");
    let kubeconfig = path(&format!("{}.kubeconfig", program.name()));
    let flags: Vec<[OsString; 1]> = match program {
        Program::ApiServer => vec![
            flag("etcd-servers", cp.etcd_url.as_str()),
            flag("bind-address", address.as_str()),
            flag("advertise-address", address.as_str()),
            flag("secure-port", cp.port.to_string()),
            flag("tls-cert-file", path("apiserver.crt")),
            flag("tls-private-key-file", path("apiserver.key")),
            flag("tls-min-version", "VersionTLS13"),
            flag("client-ca-file", path("ca.crt")),
            flag("service-account-key-file", path("service-account.key")),
            flag(
                "service-account-signing-key-file",
                path("service-account.key"),
            ),
            flag("service-account-issuer", issuer.as_str()),
            flag("api-audiences", issuer.as_str()),
            flag("service-cluster-ip-range", service_cidr.as_str()),
            flag("authorization-mode", "Node,RBAC"),
            flag("enable-admission-plugins", "NodeRestriction"),
            flag("allow-privileged", "true"),
            flag("profiling", "false"),
            flag(
                "kubelet-preferred-address-types",
                "InternalIP,ExternalIP,Hostname",
            ),
            flag("audit-policy-file", path("audit-policy.yaml")),
            flag("audit-log-path", path(AUDIT_LOG)),
            flag("cert-dir", path("certs")),
            // The default reconciler writes the advertise address into the `kubernetes`
            // Endpoints, and the API refuses a loopback address there: the simulated nodes'
            // addresses are loopback ones.
            flag("endpoint-reconciler-type", "none"),
        ],
        Program::ControllerManager => vec![
            flag("kubeconfig", kubeconfig.clone()),
            flag("authentication-kubeconfig", kubeconfig.clone()),
            flag("authorization-kubeconfig", kubeconfig),
            flag("bind-address", address.as_str()),
            flag("leader-elect", "true"),
            flag("controllers", "*"),
            flag("allocate-node-cidrs", "true"),
            flag("cluster-cidr", pod_cidr.as_str()),
            flag("service-cluster-ip-range", service_cidr.as_str()),
            flag("cluster-signing-cert-file", path("ca.crt")),
            flag("cluster-signing-key-file", path("ca.key")),
            flag("root-ca-file", path("ca.crt")),
            flag(
                "service-account-private-key-file",
                path("service-account.key"),
            ),
            flag("use-service-account-credentials", "true"),
            flag("configure-cloud-routes", "false"),
            flag("terminated-pod-gc-threshold", "100"),
            flag("profiling", "false"),
            flag("tls-min-version", "VersionTLS13"),
        ],
        Program::Scheduler => vec![
            flag("kubeconfig", kubeconfig.clone()),
            flag("authentication-kubeconfig", kubeconfig.clone()),
            flag("authorization-kubeconfig", kubeconfig),
            flag("authentication-tolerate-lookup-failure", "false"),
            flag("bind-address", address.as_str()),
            flag("leader-elect", "true"),
            flag("profiling", "false"),
            flag("tls-min-version", "VersionTLS13"),
        ],
    };
    flags.into_iter().flatten().collect()
}

/// Starts one of the control plane's programs (its files written already).
pub fn start(
    bins: &KubeBinaries,
    program: Program,
    cp: &ControlPlane<'_>,
) -> anyhow::Result<Child> {
    let binary = match program {
        Program::ApiServer => &bins.apiserver,
        Program::ControllerManager => &bins.controller_manager,
        Program::Scheduler => &bins.scheduler,
    };
    spawn(binary, args(program, cp), &cp.dir.join(program.log()))
        .map_err(|e| anyhow::anyhow!("{}: {e}", binary.display()))
}

/// The API server's address for clients.
pub fn server(address: Ipv4Addr, port: u16) -> std::net::SocketAddr {
    std::net::SocketAddr::new(IpAddr::V4(address), port)
}
