//! The bootstrap manifests a control plane renders from its machine config (COSI
//! `Manifests.kubernetes.talos.dev` in namespace `controlplane`): kube-proxy, CoreDNS, the CNI,
//! RBAC and the bootstrap token, plus `cluster.inlineManifests`. `talosctl upgrade-k8s` reads them
//! from one node and server-side applies them (go-kubernetes v0.2.38
//! `kubernetes/manifests/get.go`, used by upstream `pkg/cluster/kubernetes/talos_managed.go` at
//! v1.13.9). Each object travels as a `google.protobuf.Struct`, so numbers arrive as doubles.

use ferro_talos_proto::resource::k8s::ManifestSpec;
use prost::Message;
use prost_types::value::Kind;
use serde_json::{Map, Number, Value};

use crate::client::TalosClient;
use crate::error::{ClientError, ErrorKind, Result};

const NAMESPACE: &str = "controlplane";
const TYPE: &str = "Manifests.kubernetes.talos.dev";

/// One rendered manifest: its COSI id (`10-kube-proxy`, `99-<inline name>`) and its objects in
/// order.
#[derive(Debug, Clone, PartialEq)]
pub struct BootstrapManifest {
    pub id: String,
    pub objects: Vec<Value>,
}

impl TalosClient {
    /// Every bootstrap manifest the node renders, sorted by id as Talos lists them (the apply
    /// order of upstream's `GetBootstrapManifests` before it stages them).
    pub async fn bootstrap_manifests(&self) -> Result<Vec<BootstrapManifest>> {
        let op = "read the bootstrap manifests";
        let resources = self
            .list_resources(NAMESPACE, TYPE)
            .await
            .map_err(|e| e.during(op))?;
        let mut manifests = Vec::with_capacity(resources.len());
        for res in resources {
            let id = res.metadata.map(|m| m.id).unwrap_or_default();
            let spec = res.spec.unwrap_or_default();
            let decoded = ManifestSpec::decode(spec.proto_spec.as_slice()).map_err(|e| {
                ClientError::new(
                    self.target(),
                    op,
                    ErrorKind::Other,
                    format!("manifest {id}: the spec is not decodable: {e}"),
                )
            })?;
            let objects = decoded
                .items
                .into_iter()
                .map(|item| struct_to_json(item.object.unwrap_or_default()))
                .collect();
            manifests.push(BootstrapManifest { id, objects });
        }
        manifests.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(manifests)
    }
}

/// A Struct as JSON. Struct numbers are doubles; an integral one is written as an integer so that
/// `replicas: 2` or `port: 53` reach the API server as integers, as the YAML Talos rendered had
/// them.
pub fn struct_to_json(s: prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .into_iter()
            .map(|(k, v)| (k, value_to_json(v)))
            .collect::<Map<String, Value>>(),
    )
}

fn value_to_json(v: prost_types::Value) -> Value {
    match v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(b),
        Some(Kind::StringValue(s)) => Value::String(s),
        Some(Kind::NumberValue(n)) => number(n),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.into_iter().map(value_to_json).collect()),
    }
}

fn number(n: f64) -> Value {
    // 2^53: beyond it a double no longer holds every integer, so it cannot have been one exactly.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if n.fract() == 0.0 && n.abs() <= EXACT {
        return Value::Number(Number::from(n as i64));
    }
    Number::from_f64(n).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::{ListValue, Struct, Value as PValue};

    fn num(n: f64) -> PValue {
        PValue {
            kind: Some(Kind::NumberValue(n)),
        }
    }

    #[test]
    fn integral_numbers_become_integers_and_others_stay_floats() {
        let s = Struct {
            fields: [
                ("replicas".to_string(), num(2.0)),
                ("ratio".to_string(), num(0.5)),
                ("negative".to_string(), num(-3.0)),
                (
                    "ports".to_string(),
                    PValue {
                        kind: Some(Kind::ListValue(ListValue {
                            values: vec![num(53.0)],
                        })),
                    },
                ),
                (
                    "none".to_string(),
                    PValue {
                        kind: Some(Kind::NullValue(0)),
                    },
                ),
            ]
            .into_iter()
            .collect(),
        };
        let json = struct_to_json(s);
        assert_eq!(
            serde_json::to_string(&json).unwrap(),
            r#"{"negative":-3,"none":null,"ports":[53],"ratio":0.5,"replicas":2}"#
        );
    }
}
