//! What every module that talks to a node shares: the connection options, where credentials
//! come from, the async runtime, and turning client errors into module failures.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use crate::shared::failure::OrFail;
use ferro_ansible_protocol::{Context, ModuleError, Opt, Params, Spec, Type};
use ferro_talos_client::{
    ClientError, ConnectOptions, Credentials, ErrorKind, NodeMode, TalosClient, probe,
    read_talosconfig, select_context,
};
use ferro_talos_secrets::Bundle;
use serde_json::{Map, Value};

/// Lifetime of an admin certificate derived in memory from the secrets bundle: long enough for
/// one module run, short enough to be worthless if it ever leaked.
const DERIVED_CERT_VALIDITY: Duration = Duration::from_secs(3600);

/// Adds the connection options (documented in `plugins/doc_fragments/connection.py` and each
/// module's sidecar) to a module's spec.
pub fn with_connection_options(spec: Spec) -> Spec {
    shared_connection_options(spec.option(Opt::str("node").required()))
}

/// The connection options of a module that reads one node or many at once: `node`, or `nodes`.
pub fn with_connection_options_for_nodes(spec: Spec) -> Spec {
    shared_connection_options(
        spec.option(Opt::str("node"))
            .option(Opt::list("nodes").elements(Type::Str))
            .mutually_exclusive(&["node", "nodes"])
            .required_one_of(&["node", "nodes"]),
    )
}

fn shared_connection_options(spec: Spec) -> Spec {
    spec.option(Opt::str("endpoint"))
        .option(Opt::path("talosconfig"))
        .option(Opt::str("context"))
        .option(Opt::path("secrets_file"))
        .option(Opt::dict("secrets").no_log())
        .option(secrets_file_decrypted())
        .option(Opt::int("connect_timeout").default(10))
        .mutually_exclusive(&["secrets_file", "secrets"])
}

/// Set only by the collection's action plugin (`plugins/action/talos_module.py`): the content of a
/// `secrets_file` encrypted with Ansible Vault, decrypted on the controller, where the vault password
/// is. Undocumented, because users set `secrets_file`; the path still names the bundle in messages.
pub const SECRETS_FILE_DECRYPTED: &str = "secrets_file_decrypted";

pub fn secrets_file_decrypted() -> Opt {
    Opt::dict(SECRETS_FILE_DECRYPTED).no_log()
}

/// The connection options of a task, read once at the door (every module's `Args` holds one).
#[derive(Clone, Debug)]
pub struct ConnectionArgs {
    /// `endpoint`, trimmed; None when unset or blank (then calls go to the node itself).
    pub endpoint: Option<String>,
    /// `talosconfig`, when set (else `$TALOSCONFIG`, then `~/.talos/config`).
    pub talosconfig: Option<PathBuf>,
    /// `context`: the talosconfig context, else its current one.
    pub context: Option<String>,
    pub secrets: SecretsSource,
    /// `connect_timeout`: how long to wait for a TCP and TLS connection.
    pub connect_timeout: Duration,
}

/// Where the task's secrets bundle comes from, if it gave one.
#[derive(Clone)]
pub enum SecretsSource {
    None,
    /// `secrets`: the bundle itself.
    Inline(Map<String, Value>),
    /// `secrets_file`, with the action plugin's decrypted copy when the file is vault-encrypted.
    File {
        path: PathBuf,
        decrypted: Option<Map<String, Value>>,
    },
}

/// Never the bundle's values: only where it came from.
impl std::fmt::Debug for SecretsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretsSource::None => f.write_str("None"),
            SecretsSource::Inline(_) => f.write_str("Inline(..)"),
            SecretsSource::File { path, .. } => write!(f, "File({})", path.display()),
        }
    }
}

impl SecretsSource {
    /// `secrets`, else `secrets_file` with the action plugin's decrypted copy of a vaulted file.
    pub fn from_params(p: &Params) -> SecretsSource {
        if let Some(dict) = p.dict("secrets") {
            SecretsSource::Inline(dict.clone())
        } else if let Some(path) = p.path("secrets_file") {
            SecretsSource::File {
                path,
                decrypted: p.dict(SECRETS_FILE_DECRYPTED).cloned(),
            }
        } else {
            SecretsSource::None
        }
    }
}

impl ConnectionArgs {
    /// The options [`with_connection_options`] adds, checked.
    pub fn from_params(p: &Params) -> Result<ConnectionArgs, ModuleError> {
        let connect = p.int("connect_timeout").unwrap_or(10);
        if !(1..=600).contains(&connect) {
            return Err(ModuleError::new(format!(
                "connect_timeout must be between 1 and 600 seconds, got {connect}"
            )));
        }
        let secrets = SecretsSource::from_params(p);
        Ok(ConnectionArgs {
            endpoint: p
                .str("endpoint")
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_string),
            talosconfig: p.path("talosconfig"),
            context: p.str("context").map(str::to_string),
            secrets,
            connect_timeout: Duration::from_secs(connect as u64),
        })
    }

    /// The target for `node` (named `option` in messages), reached through `endpoint` when set.
    pub fn target(&self, node: &str, option: &str) -> Result<Target, ModuleError> {
        let node = node.trim().to_string();
        if node.is_empty() {
            return Err(ModuleError::new(format!(
                "{option} must be the address of a Talos node, got an empty string"
            )));
        }
        let endpoint = self.endpoint.clone().unwrap_or_else(|| node.clone());
        Ok(Target { node, endpoint })
    }

    /// The connect options of the task; `call_timeout` bounds each unary call.
    pub fn connect_options(&self, call_timeout: Duration) -> ConnectOptions {
        ConnectOptions {
            connect_timeout: self.connect_timeout,
            call_timeout,
            ..ConnectOptions::default()
        }
    }
}

/// The task's `node` option as a target, with its connection options.
pub fn node_target(p: &Params, connection: &ConnectionArgs) -> Result<Target, ModuleError> {
    connection.target(p.str("node").unwrap_or_default(), "node")
}

/// The bundle in `secrets_file` at `path`, from the action plugin's `decrypted` copy when there is
/// one, else read from the file; None when the file does not exist.
pub fn read_bundle_file(
    path: &std::path::Path,
    decrypted: Option<&Map<String, Value>>,
) -> Result<Option<Bundle>, ModuleError> {
    if let Some(dict) = decrypted {
        return Bundle::from_value(&Value::Object(dict.clone()))
            .map(Some)
            .map_err(|e| ModuleError::new(format!("secrets_file {}: {e:#}", path.display())));
    }
    match std::fs::read_to_string(path) {
        Ok(text) => bundle_from_file(path, &text).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ModuleError::new(format!(
            "secrets_file {}: cannot read it: {e}",
            path.display()
        ))),
    }
}

/// Where to connect: the node itself unless an endpoint (a control plane, a VIP) is given, in
/// which case calls are routed to the node with `node` metadata.
pub struct Target {
    pub node: String,
    pub endpoint: String,
}

impl Target {
    /// Whether calls go through another node's apid.
    pub fn routed(&self) -> bool {
        host_of(&self.endpoint) != host_of(&self.node)
    }

    /// Where a node in maintenance mode is reached: always the node itself, since no endpoint
    /// can route to it (it does not know the cluster's CA yet).
    pub fn maintenance_address(&self) -> &str {
        if self.routed() {
            &self.node
        } else {
            &self.endpoint
        }
    }
}

/// Whether the node is configured or in maintenance mode, asked the way the task will talk to it.
///
/// Unrouted, a probe of the node tells. Routed through an endpoint, the node is asked through the
/// endpoint with mutual TLS (the normal case, where the controller may not reach the node at all);
/// only when the endpoint cannot vouch for the node is it probed directly, since a node in
/// maintenance mode is reachable nowhere else.
pub async fn node_mode(
    target: &Target,
    creds: Option<&Credentials>,
    opts: &ConnectOptions,
) -> Result<NodeMode, ClientError> {
    let (true, Some(creds)) = (target.routed(), creds) else {
        return probe(target.maintenance_address(), opts).await;
    };
    let routed = match connect(target, creds, opts.clone()).await {
        Ok(client) => client.version().await.map(|_| NodeMode::Configured),
        Err(e) => Err(e),
    };
    match routed {
        Err(e) if e.kind == ErrorKind::NotInCluster => {
            match probe(target.maintenance_address(), opts).await? {
                NodeMode::Maintenance => Ok(NodeMode::Maintenance),
                _ => Err(ClientError {
                    message: format!(
                        "{}; and {} does not answer as a node in maintenance mode when reached directly",
                        e.message, target.node
                    ),
                    ..e
                }),
            }
        }
        other => other,
    }
}

pub(crate) fn host_of(addr: &str) -> &str {
    let a = addr.trim_start_matches("https://");
    if let Some(rest) = a.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match a.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !h.contains(':') => h,
        _ => a,
    }
}

/// Where the credentials of a run came from, reported in results.
#[derive(Clone, Debug)]
pub enum CredentialSource {
    Talosconfig(PathBuf),
    Secrets,
}

impl CredentialSource {
    pub fn describe(&self) -> String {
        match self {
            CredentialSource::Talosconfig(p) => format!("talosconfig {}", p.display()),
            CredentialSource::Secrets => {
                "an admin certificate derived in memory from the secrets bundle".into()
            }
        }
    }
}

/// The credentials for a run, or None when there are none to be had (a node in maintenance mode
/// needs none). Order: the secrets bundle when given (a fresh certificate, always valid for the
/// cluster's CA), else the talosconfig (`talosconfig`, `$TALOSCONFIG`, `~/.talos/config`) when it
/// exists. Every secret seen is registered for masking.
pub fn credentials(
    ctx: &mut Context,
    connection: &ConnectionArgs,
) -> Result<Option<(Credentials, CredentialSource)>, ModuleError> {
    if let Some(bundle) = load_bundle(ctx, &connection.secrets)? {
        let creds = derive_from_bundle(ctx, &bundle)?;
        return Ok(Some((creds, CredentialSource::Secrets)));
    }
    let path = match &connection.talosconfig {
        Some(path) if path.is_file() => Some(path.clone()),
        Some(_) => None,
        None => ferro_talos_client::resolve_path(
            None,
            |k| std::env::var(k).ok(),
            std::env::var_os("HOME").map(PathBuf::from),
            |p| p.is_file(),
        )
        .ok()
        .filter(|p| p.is_file()),
    };
    let Some(path) = path else {
        return Ok(None);
    };
    let config = read_talosconfig(&path).or_fail()?;
    let (_, context) = select_context(&config, connection.context.as_deref()).or_fail()?;
    ctx.mask(context.key.clone());
    let creds = Credentials::from_context(context).or_fail()?;
    ctx.mask(creds.key_pem.clone());
    Ok(Some((creds, CredentialSource::Talosconfig(path))))
}

/// The endpoints of the talosconfig context the credentials came from (empty for a bundle):
/// where talosctl sends calls that only a control plane answers.
pub fn talosconfig_endpoints(
    connection: &ConnectionArgs,
    source: &CredentialSource,
) -> Vec<String> {
    let CredentialSource::Talosconfig(path) = source else {
        return Vec::new();
    };
    read_talosconfig(path)
        .ok()
        .and_then(|config| {
            select_context(&config, connection.context.as_deref())
                .ok()
                .map(|(_, c)| c.endpoints.clone())
        })
        .unwrap_or_default()
}

/// Like [`credentials`], but failing with a message that says how to provide them.
pub fn require_credentials(
    ctx: &mut Context,
    connection: &ConnectionArgs,
) -> Result<(Credentials, CredentialSource), ModuleError> {
    credentials(ctx, connection)?.ok_or_else(|| {
        let where_ = match &connection.talosconfig {
            Some(path) => format!("talosconfig {} does not exist", path.display()),
            None => "no talosconfig was found ($TALOSCONFIG, ~/.talos/config)".to_string(),
        };
        ModuleError::new(format!(
            "no credentials for the Talos API: {where_}; set talosconfig to an existing file, or secrets_file/secrets \
             to derive an admin certificate from the cluster's secrets bundle"
        ))
    })
}

/// The bundle in the text of `secrets_file`. A file encrypted with Ansible Vault cannot be read
/// here (a module never sees the vault password): the error says how to pass it decrypted.
pub fn bundle_from_file(path: &std::path::Path, text: &str) -> Result<Bundle, ModuleError> {
    if text.trim_start().starts_with("$ANSIBLE_VAULT;") {
        return Err(ModuleError::new(format!(
            "secrets_file {0} is encrypted with Ansible Vault, which a module cannot decrypt (it \
             never sees your vault password); pass the bundle decrypted by Ansible instead: \
             secrets: \"{{{{ lookup('ansible.builtin.unvault', '{0}') | from_yaml }}}}\" \
             (for the cluster role, set talos_cluster_secrets to that and leave \
             talos_cluster_secrets_file empty)",
            path.display()
        )));
    }
    Bundle::from_yaml(text)
        .map_err(|e| ModuleError::new(format!("secrets_file {}: {e:#}", path.display())))
}

/// The bundle from `secrets`/`secrets_file`, if one was given; its secrets are masked from here on.
pub fn load_bundle(
    ctx: &mut Context,
    secrets: &SecretsSource,
) -> Result<Option<Bundle>, ModuleError> {
    let bundle = match secrets {
        SecretsSource::Inline(dict) => Bundle::from_value(&Value::Object(dict.clone()))
            .map_err(|e| ModuleError::new(format!("secrets: {e:#}")))?,
        SecretsSource::File { path, decrypted } => read_bundle_file(path, decrypted.as_ref())?
            .ok_or_else(|| {
                ModuleError::new(format!(
                    "secrets_file {}: cannot read it: the file does not exist",
                    path.display()
                ))
            })?,
        SecretsSource::None => return Ok(None),
    };
    for s in ferro_talos_secrets::secret_strings(&bundle) {
        ctx.mask(s);
    }
    Ok(Some(bundle))
}

fn derive_from_bundle(ctx: &mut Context, bundle: &Bundle) -> Result<Credentials, ModuleError> {
    let creds =
        Credentials::from_bundle(bundle, &["os:admin"], DERIVED_CERT_VALIDITY).map_err(|e| {
            ModuleError::new(format!(
                "secrets: cannot derive an admin certificate: {}",
                e.message
            ))
        })?;
    ctx.mask(creds.key_pem.clone());
    Ok(creds)
}

/// Opens a mutual-TLS client to `target` (routed to the node when the endpoint differs).
pub async fn connect(
    target: &Target,
    creds: &Credentials,
    opts: ConnectOptions,
) -> Result<TalosClient, ClientError> {
    let client = TalosClient::connect(&target.endpoint, creds, opts).await?;
    Ok(if target.routed() {
        client.with_node(&target.node)
    } else {
        client
    })
}

/// Runs a module's async body on a current-thread runtime: a module is one short-lived process.
pub fn block_on<F: Future>(future: F) -> Result<F::Output, ModuleError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ModuleError::new(format!("cannot start the async runtime: {e}")))?;
    Ok(rt.block_on(future))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_comparison_ignores_ports_and_brackets() {
        assert_eq!(host_of("10.0.0.1:50000"), "10.0.0.1");
        assert_eq!(host_of("[fd00::1]:50000"), "fd00::1");
        assert_eq!(host_of("fd00::1"), "fd00::1");
        assert_eq!(host_of("https://cp.example.com:50000"), "cp.example.com");
        let t = Target {
            node: "10.0.0.5".into(),
            endpoint: "10.0.0.5:50000".into(),
        };
        assert!(!t.routed());
        let t = Target {
            node: "10.0.0.5".into(),
            endpoint: "10.0.0.2".into(),
        };
        assert!(t.routed());
    }
}
