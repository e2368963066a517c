//! Where a module that talks to Kubernetes gets its credentials: a `kubeconfig` file, else the
//! secrets bundle's Kubernetes CA (an admin certificate issued in memory, so `--check` works
//! before any kubeconfig exists), else the admin kubeconfig Talos issues through its API, as
//! talosctl gets it.

use std::path::{Path, PathBuf};

use ferro_ansible_protocol::{Context, ModuleError};
use ferro_talos_client::TalosClient;
use ferro_talos_kube::KubeAccess;

use crate::shared::connection::{self, SecretsSource};
use crate::shared::kubernetes_config::ENDPOINT_PLACES;

/// Where the Kubernetes credentials come from.
pub enum KubeCredentials {
    /// The bundle's Kubernetes CA (`certs.k8s`, base64 PEM): an admin certificate issued in memory.
    Bundle { crt: String, key: String },
    /// A kubeconfig file's text.
    Kubeconfig { path: PathBuf, text: String },
    /// Neither was given: the admin kubeconfig Talos issues through its API (the Kubeconfig
    /// RPC of a control plane).
    TalosApi,
    /// The task needs no Kubernetes access.
    Unused,
}

impl KubeCredentials {
    /// From the task's `kubeconfig` option, else its secrets bundle, else the Talos API.
    pub fn load(
        ctx: &mut Context,
        kubeconfig: Option<&Path>,
        secrets: &SecretsSource,
    ) -> Result<KubeCredentials, ModuleError> {
        if let Some(path) = kubeconfig {
            let path = path.to_path_buf();
            let text = std::fs::read_to_string(&path).map_err(|e| {
                ModuleError::new(format!(
                    "kubeconfig {}: cannot read it ({e}); write the cluster's admin kubeconfig there (talos_kubeconfig), \
                     or leave kubeconfig unset to use the secrets bundle",
                    path.display()
                ))
            })?;
            return Ok(KubeCredentials::Kubeconfig { path, text });
        }
        Ok(match connection::load_bundle(ctx, secrets)? {
            Some(bundle) => KubeCredentials::Bundle {
                crt: bundle.certs.k8s.crt.clone(),
                key: bundle.certs.k8s.key.clone(),
            },
            None => KubeCredentials::TalosApi,
        })
    }

    /// How to reach the API server. `kubeconfig_source` is the Talos connection that issues a
    /// kubeconfig when no other credentials were given (a control plane); `cluster_endpoint` is
    /// the config's cluster endpoint (`kubernetes_config::cluster_endpoint`, either shape), where
    /// a bundle's certificate is used;
    /// `remedy` ends a failure message (what the user can set instead).
    pub async fn access(
        &self,
        who: &str,
        kubeconfig_source: &TalosClient,
        cluster_endpoint: Option<&str>,
        remedy: &str,
    ) -> Result<KubeAccess, String> {
        match self {
            KubeCredentials::Kubeconfig { path, text } => {
                KubeAccess::from_kubeconfig(&path.display().to_string(), text)
            }
            KubeCredentials::Bundle { crt, key } => {
                let endpoint = cluster_endpoint.ok_or_else(|| {
                    format!(
                        "{who}: the node's config sets no cluster endpoint ({ENDPOINT_PLACES}), so the \
                         Kubernetes API is unknown; set kubeconfig, or {remedy}"
                    )
                })?;
                KubeAccess::from_bundle(crt, key, endpoint)
            }
            KubeCredentials::TalosApi => {
                let bytes = kubeconfig_source.kubeconfig().await.map_err(|e| {
                    format!(
                        "{who}: this needs Kubernetes credentials and Talos did not issue a kubeconfig ({e}); give \
                         the secrets bundle (secrets or secrets_file) or a kubeconfig, set endpoint to a control \
                         plane, or {remedy}"
                    )
                })?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| format!("{who}: the kubeconfig Talos issued is not UTF-8"))?;
                KubeAccess::from_kubeconfig("issued by the Talos API", &text)
            }
            KubeCredentials::Unused => {
                return Err(format!(
                    "{who}: internal error: no Kubernetes credentials were prepared"
                ));
            }
        }
        .map_err(|e| format!("{who}: {e}"))
    }
}
