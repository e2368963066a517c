//! `talos_kubeconfig`: the cluster's admin kubeconfig, fetched from a control plane and written
//! to `dest` only when it matters. Talos issues a new client certificate on every call, so the
//! comparison looks at the stable parts (cluster, context, user names) and at whether the client
//! certificate already in `dest` is still good, never at the bytes.

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use ferro_ansible_protocol::{Context, Diff, ModuleError, ModuleResult, Opt, Spec};
use ferro_talos_client::ErrorKind;
use ferro_talos_secrets::CertInfo;
use serde_json::Value;
use time::OffsetDateTime;

use crate::shared::connection::{self, with_connection_options};
use crate::shared::failure::client_failure;
use crate::shared::files::{SECRET_MODE, read_optional, write_atomic};

mod args;
pub use args::Args;

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::path("dest").required())
        .option(Opt::bool("force").default(false))
        .option(Opt::int("renew_before").default(30))
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        connection,
        target,
        dest,
        force,
        renew_before,
    } = args;
    if dest.is_dir() {
        return Err(dest_is_a_directory(&dest));
    }
    let opts = connection.connect_options(Duration::from_secs(30));
    let (creds, _) = connection::require_credentials(ctx, &connection)?;

    let fetched = connection::block_on(async {
        let client = connection::connect(&target, &creds, opts).await?;
        client.kubeconfig().await
    })?
    .map_err(|e| {
        let unimplemented = e.kind == ErrorKind::Unimplemented;
        let err = client_failure(e.clone());
        if unimplemented && e.message.contains("control plane") {
            ModuleError::new(format!(
                "{}: kubeconfig is only available on control plane nodes; set node to a control plane",
                target.node
            ))
            .with("node", target.node.clone())
        } else {
            err
        }
    })?;
    let fetched_text = String::from_utf8(fetched).map_err(|_| {
        ModuleError::new(format!(
            "{}: the node sent a kubeconfig that is not UTF-8",
            target.node
        ))
    })?;
    let new = Kubeconfig::parse(&fetched_text).map_err(|why| {
        ModuleError::new(format!(
            "{}: the node sent an unusable kubeconfig: {why}",
            target.node
        ))
    })?;
    new.mask_secrets(ctx);

    let existing = read_optional(&dest).map_err(|e| ModuleError::new(format!("dest: {e:#}")))?;
    let old = existing.as_deref().map(Kubeconfig::parse);
    if let Some(Ok(old)) = &old {
        old.mask_secrets(ctx);
    }
    let now = OffsetDateTime::now_utc();
    let decision = match &old {
        None => Some("no kubeconfig yet".to_string()),
        Some(Err(why)) => Some(format!(
            "the existing file is not a usable kubeconfig ({why})"
        )),
        Some(Ok(_)) if force => Some("force is set".to_string()),
        Some(Ok(old)) => old.needs_rewrite(&new, renew_before, now),
    };
    let before = match &old {
        Some(Ok(o)) => o.summary(),
        _ => String::new(),
    };
    let result_base = |changed: bool, reason: String| {
        ModuleResult::new(changed)
            .with("dest", dest.display().to_string())
            .with("reason", reason)
            .with("server", new.server.clone())
            .with("context", new.context.clone())
    };
    match decision {
        None => {
            let reason = "kubeconfig is current: same cluster, context and user, and the client certificate is valid \
                          and signed by the cluster CA"
                .to_string();
            Ok(result_base(false, reason.clone()).msg(reason))
        }
        Some(reason) => {
            if !ctx.check_mode {
                write_atomic(&dest, fetched_text.as_bytes(), SECRET_MODE)
                    .map_err(|e| ModuleError::new(format!("dest: {e:#}")))?;
            }
            let verb = if ctx.check_mode {
                "would write"
            } else {
                "wrote"
            };
            let msg = format!("{verb} {}: {reason}", dest.display());
            let diff = Diff::new(before, new.summary()).headers(
                format!("{} (before)", dest.display()),
                format!("{} (after)", dest.display()),
            );
            Ok(result_base(true, reason).msg(msg).diff(diff))
        }
    }
}

/// Said when `dest` ends in `/`, or (found in `run`, since it asks the filesystem) is a directory.
fn dest_is_a_directory(dest: &Path) -> ModuleError {
    ModuleError::new(format!(
        "dest must be a file path, but {} is a directory",
        dest.display()
    ))
}

/// The parts of a kubeconfig the module reasons about.
#[derive(Clone, Default)]
struct Kubeconfig {
    /// Clusters as (name, server, certificate-authority-data), sorted.
    clusters: Vec<(String, String, String)>,
    /// Contexts as (name, cluster, user, namespace), sorted.
    contexts: Vec<(String, String, String, String)>,
    users: Vec<String>,
    context: String,
    /// The current context's cluster server and CA, and its user's certificate and key.
    server: String,
    ca_pem: Option<String>,
    cert_pem: Option<String>,
    key_b64: String,
    key_pem: Option<String>,
}

// Never print certificates or keys.
impl std::fmt::Debug for Kubeconfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubeconfig")
            .field("context", &self.context)
            .field("server", &self.server)
            .finish()
    }
}

fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    v.pointer(path).and_then(Value::as_str).unwrap_or("")
}

fn b64_text(value: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()?;
    String::from_utf8(bytes).ok()
}

impl Kubeconfig {
    /// Parses kubeconfig YAML. Errors never quote the text (it holds a private key).
    fn parse(text: &str) -> Result<Kubeconfig, String> {
        let doc: Value = serde_saphyr::from_str(text).map_err(|e| match e.location() {
            Some(loc) => format!(
                "not valid YAML (line {}, column {})",
                loc.line(),
                loc.column()
            ),
            None => "not valid YAML".to_string(),
        })?;
        if !doc.is_object() {
            return Err("not a YAML mapping".into());
        }
        let list = |key: &str| {
            doc.get(key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let mut clusters: Vec<_> = list("clusters")
            .iter()
            .map(|c| {
                (
                    str_at(c, "/name").to_string(),
                    str_at(c, "/cluster/server").to_string(),
                    str_at(c, "/cluster/certificate-authority-data").to_string(),
                )
            })
            .collect();
        clusters.sort();
        let mut contexts: Vec<_> = list("contexts")
            .iter()
            .map(|c| {
                (
                    str_at(c, "/name").to_string(),
                    str_at(c, "/context/cluster").to_string(),
                    str_at(c, "/context/user").to_string(),
                    str_at(c, "/context/namespace").to_string(),
                )
            })
            .collect();
        contexts.sort();
        let users_raw = list("users");
        let mut users: Vec<String> = users_raw
            .iter()
            .map(|u| str_at(u, "/name").to_string())
            .collect();
        users.sort();
        let context = str_at(&doc, "/current-context").to_string();
        if context.is_empty() {
            return Err("it has no current-context".into());
        }
        let Some((_, cluster_name, user_name, _)) =
            contexts.iter().find(|c| c.0 == context).cloned()
        else {
            return Err(format!(
                "current-context {context:?} is not among its contexts"
            ));
        };
        let Some((_, server, ca_b64)) = clusters.iter().find(|c| c.0 == cluster_name).cloned()
        else {
            return Err(format!(
                "context {context:?} names cluster {cluster_name:?}, which is not among its clusters"
            ));
        };
        let user = users_raw.iter().find(|u| str_at(u, "/name") == user_name);
        let cert_b64 = user
            .map(|u| str_at(u, "/user/client-certificate-data"))
            .unwrap_or("");
        let key_b64 = user
            .map(|u| str_at(u, "/user/client-key-data"))
            .unwrap_or("")
            .to_string();
        Ok(Kubeconfig {
            clusters,
            contexts,
            users,
            context,
            server,
            ca_pem: b64_text(&ca_b64),
            cert_pem: b64_text(cert_b64),
            key_pem: b64_text(&key_b64),
            key_b64,
        })
    }

    fn mask_secrets(&self, ctx: &mut Context) {
        if !self.key_b64.is_empty() {
            ctx.mask(self.key_b64.clone());
        }
        if let Some(pem) = &self.key_pem {
            ctx.mask(pem.trim().to_string());
            for line in pem
                .lines()
                .filter(|l| !l.starts_with("-----") && l.len() >= 16)
            {
                ctx.mask(line.to_string());
            }
        }
    }

    /// A secret-free description for diffs.
    fn summary(&self) -> String {
        let mut out = format!("current-context: {}\n", self.context);
        for (name, server, ca) in &self.clusters {
            let ca_sha = crate::sha256_hex(ca.as_bytes());
            out.push_str(&format!(
                "cluster {name}: server {server}, CA sha256 {}\n",
                &ca_sha[..16]
            ));
        }
        for (name, cluster, user, ns) in &self.contexts {
            out.push_str(&format!(
                "context {name}: cluster {cluster}, user {user}, namespace {ns}\n"
            ));
        }
        for user in &self.users {
            out.push_str(&format!("user {user}\n"));
        }
        out
    }

    /// Why `self` (the file in dest) must be replaced by `new`, or None to keep it.
    fn needs_rewrite(
        &self,
        new: &Kubeconfig,
        renew_before: Duration,
        now: OffsetDateTime,
    ) -> Option<String> {
        if self.clusters != new.clusters {
            let servers = |k: &Kubeconfig| {
                k.clusters
                    .iter()
                    .map(|c| c.1.clone())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if servers(self) != servers(new) {
                return Some(format!(
                    "the cluster server changed ({} -> {})",
                    servers(self),
                    servers(new)
                ));
            }
            return Some("the cluster name or CA changed".into());
        }
        if self.contexts != new.contexts || self.context != new.context {
            return Some("the context changed".into());
        }
        if self.users != new.users {
            return Some("the user changed".into());
        }
        let (Some(cert_pem), Some(ca_pem)) = (&self.cert_pem, &self.ca_pem) else {
            return Some("the existing file has no client certificate or CA data".into());
        };
        let Ok(cert) = CertInfo::parse(cert_pem) else {
            return Some("the existing client certificate cannot be read".into());
        };
        if !cert.issuer_matches(ca_pem) {
            return Some("the existing client certificate is not signed by the cluster CA".into());
        }
        if !self.key_pem.as_deref().is_some_and(|k| cert.key_matches(k)) {
            return Some("the existing client key does not match its certificate".into());
        }
        let left = cert.remaining(now);
        if left <= renew_before {
            return Some(format!(
                "the client certificate expires in {} day(s), within renew_before ({} days)",
                left.as_secs() / 86_400,
                renew_before.as_secs() / 86_400
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferro_talos_secrets::{Bundle, pki};

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn kubeconfig(ca: &(String, String), server: &str, days: u64) -> String {
        let now = OffsetDateTime::now_utc();
        let issued = pki::issue_client_cert(
            &ca.0,
            &ca.1,
            Some("admin"),
            &["system:masters"],
            Duration::from_secs(days * 86_400),
            now,
        )
        .unwrap();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n    - name: demo\n      cluster:\n        server: {server}\n        certificate-authority-data: {}\nusers:\n    - name: admin@demo\n      user:\n        client-certificate-data: {}\n        client-key-data: {}\ncontexts:\n    - context:\n        cluster: demo\n        namespace: default\n        user: admin@demo\n      name: admin@demo\ncurrent-context: admin@demo\n",
            b64(&ca.0),
            b64(&issued.cert_pem),
            b64(&issued.key_pem)
        )
    }

    fn ca() -> (String, String) {
        Bundle::generate((1, 13)).unwrap().os_ca_pem().unwrap()
    }

    #[test]
    fn fresh_certificate_with_same_cluster_is_kept() {
        let ca = ca();
        let now = OffsetDateTime::now_utc();
        let old = Kubeconfig::parse(&kubeconfig(&ca, "https://10.0.0.1:6443", 365)).unwrap();
        let new = Kubeconfig::parse(&kubeconfig(&ca, "https://10.0.0.1:6443", 365)).unwrap();
        assert_eq!(
            old.needs_rewrite(&new, Duration::from_secs(30 * 86_400), now),
            None
        );
        assert_eq!(new.server, "https://10.0.0.1:6443");
    }

    #[test]
    fn server_ca_and_expiry_changes_are_rewritten() {
        let ca = ca();
        let now = OffsetDateTime::now_utc();
        let renew = Duration::from_secs(30 * 86_400);
        let new = Kubeconfig::parse(&kubeconfig(&ca, "https://10.0.0.1:6443", 365)).unwrap();
        let moved = Kubeconfig::parse(&kubeconfig(&ca, "https://10.0.0.9:6443", 365)).unwrap();
        assert!(
            moved
                .needs_rewrite(&new, renew, now)
                .unwrap()
                .contains("server")
        );
        let expiring = Kubeconfig::parse(&kubeconfig(&ca, "https://10.0.0.1:6443", 10)).unwrap();
        assert!(
            expiring
                .needs_rewrite(&new, renew, now)
                .unwrap()
                .contains("expires")
        );
        let other =
            Kubeconfig::parse(&kubeconfig(&self::ca(), "https://10.0.0.1:6443", 365)).unwrap();
        assert!(
            other
                .needs_rewrite(&new, renew, now)
                .unwrap()
                .contains("CA")
        );
    }

    #[test]
    fn parse_errors_never_quote_the_text() {
        let err = Kubeconfig::parse("client-key-data: [SECRETKEYDATA").unwrap_err();
        assert!(!err.contains("SECRETKEYDATA"), "{err}");
        let err = Kubeconfig::parse("apiVersion: v1\nclusters: []\n").unwrap_err();
        assert!(err.contains("current-context"), "{err}");
    }

    #[test]
    fn debug_and_summary_hold_no_key() {
        let ca = ca();
        let k = Kubeconfig::parse(&kubeconfig(&ca, "https://10.0.0.1:6443", 365)).unwrap();
        let shown = format!("{k:?}{}", k.summary());
        assert!(!shown.contains(&k.key_b64));
        assert!(shown.contains("https://10.0.0.1:6443"));
    }
}
