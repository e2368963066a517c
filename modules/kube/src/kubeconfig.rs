//! The parts of a kubeconfig a client certificate or token login needs: the current context's
//! cluster (server, CA, TLS server name) and user (client certificate and key, or a token).
//! kube's own loader (its `config` feature) handles every auth plugin too and adds about 1 MiB
//! of code to every module (docs/decisions/0007-kubernetes-client.md); plugins are refused here
//! with a message saying what to use instead.

use base64::Engine as _;
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case", default)]
struct File {
    current_context: String,
    contexts: Vec<Named<Context>>,
    clusters: Vec<Named<Cluster>>,
    users: Vec<Named<User>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Named<T: Default> {
    name: String,
    #[serde(alias = "context", alias = "cluster", alias = "user")]
    item: T,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case", default)]
struct Cluster {
    server: String,
    certificate_authority_data: Option<String>,
    certificate_authority: Option<String>,
    tls_server_name: Option<String>,
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case", default)]
struct User {
    client_certificate_data: Option<String>,
    client_certificate: Option<String>,
    client_key_data: Option<String>,
    client_key: Option<String>,
    token: Option<String>,
    token_file: Option<String>,
    exec: Option<serde_json::Value>,
    auth_provider: Option<serde_json::Value>,
}

/// What the transport needs from a kubeconfig. No `Debug`: it holds a private key.
pub struct Login {
    pub server: String,
    pub ca_pem: Vec<u8>,
    pub tls_server_name: Option<String>,
    /// PEM certificate chain and PEM key.
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
    pub token: Option<String>,
}

fn data_or_file(
    data: &Option<String>,
    file: &Option<String>,
    what: &str,
) -> Result<Option<Vec<u8>>, String> {
    if let Some(b64) = data {
        return base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map(Some)
            .map_err(|_| format!("its {what}-data is not base64"));
    }
    match file {
        Some(path) => std::fs::read(path)
            .map(Some)
            .map_err(|e| format!("its {what} file {path}: {e}")),
        None => Ok(None),
    }
}

/// The entry called `name` of a kubeconfig list (contexts, clusters, users).
fn named<'a, T: Default>(list: &'a [Named<T>], name: &str) -> Option<&'a T> {
    list.iter().find(|n| n.name == name).map(|n| &n.item)
}

impl Login {
    /// The current context's login, from a kubeconfig's YAML text.
    pub fn from_yaml(text: &str) -> Result<Login, String> {
        let file: File =
            serde_saphyr::from_str(text).map_err(|e| format!("it is not a kubeconfig ({e})"))?;
        let context = named(&file.contexts, &file.current_context).ok_or_else(|| {
            format!(
                "its current-context {:?} is not among its contexts",
                file.current_context
            )
        })?;
        let cluster = named(&file.clusters, &context.cluster).ok_or_else(|| {
            format!(
                "its context names the cluster {:?}, which it does not have",
                context.cluster
            )
        })?;
        let user = named(&file.users, &context.user).ok_or_else(|| {
            format!(
                "its context names the user {:?}, which it does not have",
                context.user
            )
        })?;
        if cluster.server.is_empty() {
            return Err("its cluster has no server".into());
        }
        if cluster.insecure_skip_tls_verify {
            return Err("it sets insecure-skip-tls-verify; give the cluster's CA (certificate-authority-data) instead".into());
        }
        if user.exec.is_some() || user.auth_provider.is_some() {
            return Err(
                "its user authenticates with an exec or auth-provider plugin, which this collection does not run; use a \
                 kubeconfig with a client certificate or a token (talos_kubeconfig writes one)"
                    .into(),
            );
        }
        let ca_pem = data_or_file(&cluster.certificate_authority_data, &cluster.certificate_authority, "certificate-authority")?
            .ok_or("its cluster has no certificate-authority-data: the API server's certificate cannot be checked")?;
        let cert = data_or_file(
            &user.client_certificate_data,
            &user.client_certificate,
            "client-certificate",
        )?;
        let key = data_or_file(&user.client_key_data, &user.client_key, "client-key")?;
        let client_identity = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err("its user has a client certificate or a client key, not both".into()),
        };
        let token = match (&user.token, &user.token_file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(path)) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("its token file {path}: {e}"))?
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        if client_identity.is_none() && token.is_none() {
            return Err("its user has neither a client certificate nor a token".into());
        }
        Ok(Login {
            server: cluster.server.clone(),
            ca_pem,
            tls_server_name: cluster.tls_server_name.clone(),
            client_identity,
            token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn the_current_context_decides() {
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: b\nclusters:\n- name: one\n  cluster:\n    server: https://1.1.1.1:6443\n    certificate-authority-data: {ca}\n- name: two\n  cluster:\n    server: https://2.2.2.2:6443\n    certificate-authority-data: {ca}\ncontexts:\n- name: a\n  context: {{cluster: one, user: u}}\n- name: b\n  context: {{cluster: two, user: u, namespace: default}}\nusers:\n- name: u\n  user:\n    token: abc\npreferences: {{}}\n",
            ca = b64("CA")
        );
        let login = Login::from_yaml(&text).unwrap();
        assert_eq!(login.server, "https://2.2.2.2:6443");
        assert_eq!(login.ca_pem, b"CA");
        assert_eq!(login.token.as_deref(), Some("abc"));
    }

    #[test]
    fn what_is_refused_says_why() {
        let base = |user: &str, cluster_extra: &str| {
            format!(
                "current-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://h:6443\n    certificate-authority-data: {}\n{cluster_extra}contexts:\n- name: c\n  context: {{cluster: k, user: u}}\nusers:\n- name: u\n  user:\n{user}",
                b64("CA")
            )
        };
        let err = |t: String| Login::from_yaml(&t).err().unwrap();
        assert!(err(base("    exec: {command: aws}\n", "")).contains("exec or auth-provider"));
        assert!(
            err(base(
                "    token: t\n",
                "    insecure-skip-tls-verify: true\n"
            ))
            .contains("insecure-skip-tls-verify")
        );
        assert!(
            err(base(
                &format!("    client-certificate-data: {}\n", b64("C")),
                ""
            ))
            .contains("not both")
        );
        assert!(err(base("    username: x\n", "")).contains("neither"));
        assert!(
            Login::from_yaml("current-context: x\n")
                .err()
                .unwrap()
                .contains("\"x\"")
        );
    }
}
