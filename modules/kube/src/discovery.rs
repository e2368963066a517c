//! Where an object of a given `apiVersion` and `kind` lives in the API: its resource's plural
//! name and whether it is namespaced, from the API server's discovery documents (`/api/v1`,
//! `/apis/<group>/<version>`), so objects of any kind, including those of custom resource
//! definitions a manifest brings, can be applied without a table of our own.

use std::collections::HashMap;

use serde::Deserialize;

use crate::access::Kube;
use crate::error::{KubeError, KubeErrorKind, Result};
use crate::objects::get_path;

/// One served resource, enough to build its paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiResource {
    /// `apps/v1`, `v1`.
    pub api_version: String,
    pub plural: String,
    pub namespaced: bool,
}

impl ApiResource {
    /// The collection path: `/apis/apps/v1/namespaces/kube-system/daemonsets`, `/api/v1/namespaces`.
    pub fn collection(&self, namespace: &str) -> String {
        let base = if self.api_version.contains('/') {
            format!("/apis/{}", self.api_version)
        } else {
            format!("/api/{}", self.api_version)
        };
        if self.namespaced {
            format!("{base}/namespaces/{namespace}/{}", self.plural)
        } else {
            format!("{base}/{}", self.plural)
        }
    }
}

#[derive(Deserialize)]
struct ResourceList {
    #[serde(default)]
    resources: Vec<ResourceEntry>,
}

#[derive(Deserialize)]
struct ResourceEntry {
    name: String,
    kind: String,
    #[serde(default)]
    namespaced: bool,
}

/// The discovery documents read so far, one per group version.
#[derive(Default)]
pub struct Discovery {
    by_group_version: HashMap<String, Vec<ResourceEntry>>,
}

impl Discovery {
    /// Forgets what was read of `api_version`, so a resource a new CRD defines is seen.
    pub fn forget(&mut self, api_version: &str) {
        self.by_group_version.remove(api_version);
    }

    /// The resource serving `kind` in `api_version`; a `NotFound` error when the API server does
    /// not serve it (a custom resource whose definition is not installed yet).
    pub async fn resolve(
        &mut self,
        kube: &Kube,
        api_version: &str,
        kind: &str,
    ) -> Result<ApiResource> {
        if !self.by_group_version.contains_key(api_version) {
            let entries = read(kube, api_version).await?;
            self.by_group_version
                .insert(api_version.to_string(), entries);
        }
        let entries = &self.by_group_version[api_version];
        entries
            .iter()
            .find(|e| e.kind == kind && !e.name.contains('/'))
            .map(|e| ApiResource {
                api_version: api_version.to_string(),
                plural: e.name.clone(),
                namespaced: e.namespaced,
            })
            .ok_or_else(|| not_served(kube, api_version, kind))
    }
}

fn not_served(kube: &Kube, api_version: &str, kind: &str) -> KubeError {
    KubeError::new(
        KubeErrorKind::NotFound,
        format!(
            "Kubernetes API {}: no resource of kind {kind} is served in {api_version}; install its CustomResourceDefinition first, or correct apiVersion and kind",
            kube.endpoint
        ),
    )
}

async fn read(kube: &Kube, api_version: &str) -> Result<Vec<ResourceEntry>> {
    let path = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    let what = format!("discover the resources of {api_version}");
    let req = get_path(&path).map_err(|e| kube.error(&what, e))?;
    match kube.transport.send::<ResourceList>(req).await {
        Ok(list) => Ok(list.resources),
        Err(e) if e.code() == Some(404) => Ok(Vec::new()),
        Err(e) => Err(kube.error(&what, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collections_of_core_grouped_and_cluster_scoped_resources() {
        let ds = ApiResource {
            api_version: "apps/v1".into(),
            plural: "daemonsets".into(),
            namespaced: true,
        };
        assert_eq!(
            ds.collection("kube-system"),
            "/apis/apps/v1/namespaces/kube-system/daemonsets"
        );
        let cm = ApiResource {
            api_version: "v1".into(),
            plural: "configmaps".into(),
            namespaced: true,
        };
        assert_eq!(
            cm.collection("kube-system"),
            "/api/v1/namespaces/kube-system/configmaps"
        );
        let cr = ApiResource {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            plural: "clusterroles".into(),
            namespaced: false,
        };
        assert_eq!(
            cr.collection("ignored"),
            "/apis/rbac.authorization.k8s.io/v1/clusterroles"
        );
    }
}
