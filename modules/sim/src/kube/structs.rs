//! Kubernetes objects as `google.protobuf.Struct`, the way Talos carries them in a Manifest
//! resource's proto spec (upstream `pkg/machinery/resources/k8s/manifest.go` at v1.13.9:
//! `SingleManifest.Object` is a Struct). Struct numbers are doubles; integral ones come back as
//! integers so `53` stays `53`.

use prost_types::value::Kind;
use serde_json::{Map, Value};

pub fn to_struct(object: &Map<String, Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: object
            .iter()
            .map(|(k, v)| (k.clone(), to_value(v)))
            .collect(),
    }
}

fn to_value(v: &Value) -> prost_types::Value {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(to_value).collect(),
        }),
        Value::Object(map) => Kind::StructValue(to_struct(map)),
    };
    prost_types::Value { kind: Some(kind) }
}

/// The way back, as a client decodes the resource (tests check the round trip).
#[cfg(test)]
pub fn from_struct(s: &prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), from_value(v)))
            .collect(),
    )
}

#[cfg(test)]
fn from_value(v: &prost_types::Value) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(f)) => {
            if f.fract() == 0.0 && f.abs() < 9.0e15 {
                Value::Number(serde_json::Number::from(*f as i64))
            } else {
                serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
            }
        }
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(from_value).collect()),
        Some(Kind::StructValue(s)) => from_struct(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_round_trip_with_integers_kept() {
        let object = json!({"spec": {"ports": [{"port": 53, "name": "dns"}], "ratio": 0.5,
                            "on": true, "none": null}});
        let s = to_struct(object.as_object().unwrap());
        assert_eq!(from_struct(&s), object);
    }
}
