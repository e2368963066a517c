//! COSI resources (`State/Get`, `State/List`) and the typed ones the modules read: the machine
//! config, the machine type, the Kubernetes node name and the MachineStatus.

use ferro_talos_proto::cosi::resource::{GetRequest, ListRequest, ListResponse, Resource};
use ferro_talos_proto::resource::config::{MachineType, MachineTypeSpec};
use ferro_talos_proto::resource::k8s::NodenameSpec;
use prost::Message as _;

use crate::client::TalosClient;
use crate::decode::{MachineStatus, decode_machine_config, decode_machine_status};
use crate::error::{ClientError, ErrorKind, Result};

impl TalosClient {
    /// COSI `State/Get` of one resource.
    pub async fn get_resource(&self, namespace: &str, kind: &str, id: &str) -> Result<Resource> {
        let op = format!("get {kind} {namespace}/{id}");
        let resp = self
            .read(&op, || {
                let mut c = self.state();
                let req = self.request(
                    GetRequest {
                        namespace: namespace.to_string(),
                        r#type: kind.to_string(),
                        id: id.to_string(),
                        options: None,
                    },
                    self.opts.call_timeout,
                )?;
                Ok(async move { c.get(req).await })
            })
            .await?;
        resp.resource.ok_or_else(|| {
            ClientError::new(
                self.target(),
                &op,
                ErrorKind::Other,
                "the reply has no resource",
            )
        })
    }

    /// COSI `State/List`: every resource of a type, in the order the node sends them.
    pub async fn list_resources(&self, namespace: &str, kind: &str) -> Result<Vec<Resource>> {
        let op = format!("list {kind} {namespace}");
        let limit = self.opts.call_timeout;
        let req = self.request(
            ListRequest {
                namespace: namespace.to_string(),
                r#type: kind.to_string(),
                options: None,
            },
            limit,
        )?;
        let replies: Vec<ListResponse> = self.collect(&op, limit, self.state().list(req)).await?;
        Ok(replies.into_iter().filter_map(|r| r.resource).collect())
    }

    /// The active machine config, byte for byte as the node stores it.
    pub async fn get_machine_config(&self) -> Result<Vec<u8>> {
        let op = "read machine config";
        let res = self
            .get_resource("config", "MachineConfigs.config.talos.dev", "v1alpha1")
            .await
            .map_err(|e| e.during(op))?;
        let spec = res.spec.unwrap_or_default();
        decode_machine_config(&spec.proto_spec, &spec.yaml_spec)
            .map_err(|why| ClientError::new(self.target(), op, ErrorKind::Other, why))
    }

    /// The config the next boot loads (the `persistent` MachineConfig), when the node has one:
    /// ahead of the running config after a staged apply, behind it while a try runs. `None` when
    /// the node publishes none, which means the running config is the one kept.
    pub async fn get_persistent_machine_config(&self) -> Result<Option<Vec<u8>>> {
        let op = "read the persistent machine config";
        let res = match self
            .get_resource("config", "MachineConfigs.config.talos.dev", "persistent")
            .await
        {
            Ok(res) => res,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.during(op)),
        };
        let spec = res.spec.unwrap_or_default();
        decode_machine_config(&spec.proto_spec, &spec.yaml_spec)
            .map(Some)
            .map_err(|why| ClientError::new(self.target(), op, ErrorKind::Other, why))
    }

    /// The node's machine type (init, controlplane, worker; unknown in maintenance).
    pub async fn machine_type(&self) -> Result<MachineType> {
        let op = "read machine type";
        let res = self
            .get_resource("config", "MachineTypes.config.talos.dev", "machine-type")
            .await
            .map_err(|e| e.during(op))?;
        let spec = res.spec.unwrap_or_default();
        let typed = MachineTypeSpec::decode(spec.proto_spec.as_slice()).map_err(|e| {
            ClientError::new(
                self.target(),
                op,
                ErrorKind::Other,
                format!("undecodable spec: {e}"),
            )
        })?;
        Ok(MachineType::try_from(typed.machine_type).unwrap_or(MachineType::Unknown))
    }

    /// The name the node's kubelet registers with Kubernetes (COSI `k8s/Nodename`, what talosctl's
    /// drain reads: upstream `cmd/talosctl/pkg/talos/nodedrain` at v1.13.9); None when the node
    /// skips Kubernetes registration.
    pub async fn nodename(&self) -> Result<Option<String>> {
        let op = "read the Kubernetes node name";
        let res = self
            .get_resource("k8s", "Nodenames.kubernetes.talos.dev", "nodename")
            .await
            .map_err(|e| e.during(op))?;
        let spec = res.spec.unwrap_or_default();
        let typed = NodenameSpec::decode(spec.proto_spec.as_slice()).map_err(|e| {
            ClientError::new(
                self.target(),
                op,
                ErrorKind::Other,
                format!("the Nodename spec is not decodable: {e}"),
            )
        })?;
        Ok((!typed.skip_node_registration && !typed.nodename.is_empty()).then_some(typed.nodename))
    }

    /// The node's stage and readiness.
    pub async fn machine_status(&self) -> Result<MachineStatus> {
        let op = "read machine status";
        let res = self
            .get_resource("runtime", "MachineStatuses.runtime.talos.dev", "machine")
            .await
            .map_err(|e| e.during(op))?;
        let spec = res.spec.unwrap_or_default();
        decode_machine_status(&spec.proto_spec, &spec.yaml_spec)
            .map_err(|why| ClientError::new(self.target(), op, ErrorKind::Other, why))
    }
}
