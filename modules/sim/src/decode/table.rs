//! The simulator's own table of upstream's config types: every registered document kind and the
//! Go types under it, generated from siderolabs/talos's `pkg/machinery/config/types` by
//! `modules/sim/tools/gen_upstream_types.py` (one JSON file per release line). Only the facts the
//! decoder needs are read from it.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde::Deserialize;

/// Which release's types a node decodes with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    V1_13,
    V1_14,
}

impl Release {
    /// The table for a node running `version` (`v1.13.9`, `v1.14.0-rc.1`, …).
    pub fn for_version(version: &str) -> Release {
        if crate::version::minor(version) >= 14 {
            Release::V1_14
        } else {
            Release::V1_13
        }
    }

    pub fn table(self) -> &'static Table {
        static V1_13: LazyLock<Table> =
            LazyLock::new(|| Table::load(include_str!("config-types-v1.13.9.json")));
        static V1_14: LazyLock<Table> =
            LazyLock::new(|| Table::load(include_str!("config-types-v1.14.1.json")));
        match self {
            Release::V1_13 => &V1_13,
            Release::V1_14 => &V1_14,
        }
    }
}

#[derive(Deserialize)]
struct RawTable {
    documents: Vec<RawDocument>,
    types: HashMap<String, RawType>,
    external: Vec<RawExternal>,
}

#[derive(Deserialize)]
struct RawDocument {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    #[serde(rename = "type")]
    go_type: String,
    #[serde(default)]
    legacy: bool,
    #[serde(default)]
    named_document: bool,
}

#[derive(Deserialize)]
struct RawType {
    kind: String,
    reflect_name: String,
    #[serde(default)]
    underlying: Option<String>,
    #[serde(default)]
    unmarshal_yaml: serde_json::Value,
    #[serde(default)]
    unmarshal_text: bool,
    #[serde(default)]
    check_keys: Option<RawKeys>,
    #[serde(default)]
    r#struct: Vec<RawField>,
    #[serde(default)]
    marshal_yaml: serde_json::Value,
    #[serde(default)]
    marshal_text: serde_json::Value,
    #[serde(default)]
    is_zero: serde_json::Value,
}

#[derive(Deserialize)]
struct RawKeys {
    #[serde(default)]
    keys: HashMap<String, String>,
    #[serde(default)]
    inline_map: Option<String>,
}

#[derive(Deserialize)]
struct RawField {
    #[serde(default)]
    key: Option<String>,
    #[serde(rename = "type")]
    go_type: String,
    #[serde(default)]
    exported: bool,
    #[serde(default)]
    inline: bool,
    #[serde(default)]
    omitempty: bool,
    #[serde(default)]
    flow: bool,
    #[serde(default)]
    embedded: bool,
}

#[derive(Deserialize)]
struct RawExternal {
    name: String,
    go_kind: String,
    #[serde(default)]
    unmarshal_text: bool,
    #[serde(default)]
    unmarshal_yaml: serde_json::Value,
}

/// A Go type the decoder may meet.
#[derive(Clone, Debug)]
pub enum GoType {
    Pointer(Box<GoType>),
    Slice(Box<GoType>),
    Map(Box<GoType>),
    /// `any` / `interface{}`: takes everything.
    Any,
    /// `string`, `bool`, `int`, `uint32`, `float64`, …
    Basic(String),
    /// A named type of the table (or an external one).
    Named(String),
}

impl GoType {
    /// Parses a type expression as the generator writes it (`[]*v1alpha1.Device`, …).
    pub fn parse(expr: &str) -> GoType {
        if let Some(rest) = expr.strip_prefix('*') {
            return GoType::Pointer(Box::new(GoType::parse(rest)));
        }
        if let Some(rest) = expr.strip_prefix("[]") {
            return GoType::Slice(Box::new(GoType::parse(rest)));
        }
        if let Some(rest) = expr.strip_prefix("map[") {
            // Config maps are keyed by strings; only the value type matters here.
            let value = rest.split_once(']').map_or("any", |(_, v)| v);
            return GoType::Map(Box::new(GoType::parse(value)));
        }
        match expr {
            "any" | "interface{}" => GoType::Any,
            _ if expr.contains('.') => GoType::Named(expr.to_string()),
            _ => GoType::Basic(expr.to_string()),
        }
    }
}

/// A named type: how Go's reflection sees it.
#[derive(Debug)]
pub struct Named {
    /// As Go prints it in errors (`v1alpha1.InstallConfig`).
    pub reflect_name: String,
    pub shape: Shape,
    /// Has its own `UnmarshalYAML`: the decoder trusts it with any node.
    pub unmarshal_yaml: bool,
    /// An `encoding.TextUnmarshaler`: scalars only.
    pub unmarshal_text: bool,
    /// Has its own `MarshalYAML` or `MarshalText`: the encoder writes what it returns.
    pub custom_marshal: bool,
    /// Has its own `IsZero` (go-yaml's `IsZeroer`, consulted by `omitempty`).
    pub is_zeroer: bool,
    /// A struct's exported fields in declaration order, as go-yaml's encoder walks them.
    pub fields: Vec<Field>,
}

/// One struct field as go-yaml's encoder sees it (`getStructInfo`).
#[derive(Debug, Clone)]
pub struct Field {
    /// The YAML key (`None` for an `,inline` field).
    pub key: Option<String>,
    pub go_type: GoType,
    pub omitempty: bool,
    pub inline: bool,
    pub flow: bool,
    /// An embedded field: its type's methods are promoted to the struct.
    pub embedded: bool,
}

#[derive(Debug)]
pub enum Shape {
    /// A struct: the keys go-yaml fills (tag names of exported fields, inline ones promoted)
    /// and the keys CheckUnknownKeys accepts, each with its field's type. `inline_map` when a
    /// `,inline` map takes every key (with the map's element type).
    Struct {
        decoded: HashMap<String, GoType>,
        known: HashMap<String, GoType>,
        inline_map: Option<GoType>,
    },
    /// A named non-struct type with this underlying type.
    Alias(GoType),
}

pub struct Document {
    pub api_version: String,
    pub kind: String,
    pub go_type: String,
    /// A `config.NamedDocument`: its id in errors is `Kind/name`.
    pub named: bool,
}

pub struct Table {
    pub documents: Vec<Document>,
    /// The legacy `v1alpha1` document's type.
    pub legacy: String,
    pub types: HashMap<String, Named>,
}

impl Table {
    fn load(json: &str) -> Table {
        let raw: RawTable =
            serde_json::from_str(json).expect("the generated upstream type table parses");
        let mut types = HashMap::new();
        for (name, t) in &raw.types {
            types.insert(name.clone(), named(t, &raw.types));
        }
        for e in &raw.external {
            types.entry(e.name.clone()).or_insert_with(|| external(e));
        }
        let legacy = raw
            .documents
            .iter()
            .find(|d| d.legacy)
            .map(|d| d.go_type.clone())
            .unwrap_or_else(|| "v1alpha1.Config".into());
        let documents = raw
            .documents
            .into_iter()
            .filter(|d| !d.legacy)
            .map(|d| Document {
                api_version: d.api_version,
                kind: d.kind,
                go_type: d.go_type,
                named: d.named_document,
            })
            .collect();
        Table {
            documents,
            legacy,
            types,
        }
    }

    pub fn named(&self, name: &str) -> Option<&Named> {
        self.types.get(name)
    }

    /// The document type registered for `kind` (any version: the registry's constructors take
    /// the version and refuse others with the same "not registered" error).
    pub fn document(&self, kind: &str, api_version: &str) -> Option<&Document> {
        self.documents
            .iter()
            .find(|d| d.kind == kind && d.api_version == api_version)
    }
}

fn truthy(v: &serde_json::Value) -> bool {
    !matches!(v, serde_json::Value::Null | serde_json::Value::Bool(false))
}

fn named(t: &RawType, all: &HashMap<String, RawType>) -> Named {
    let shape = if t.kind == "struct" {
        let mut decoded = HashMap::new();
        collect_decoded_fields(t, all, &mut decoded);
        let keys = t.check_keys.as_ref();
        Shape::Struct {
            decoded,
            known: keys
                .map(|k| {
                    k.keys
                        .iter()
                        .map(|(n, ty)| (n.clone(), GoType::parse(ty)))
                        .collect()
                })
                .unwrap_or_default(),
            // Every key of the struct goes into the inline map: values take its element type.
            inline_map: keys.and_then(|k| k.inline_map.as_deref()).map(|m| {
                match GoType::parse(m) {
                    GoType::Map(value) => *value,
                    other => other,
                }
            }),
        }
    } else {
        Shape::Alias(GoType::parse(t.underlying.as_deref().unwrap_or("any")))
    };
    Named {
        reflect_name: t.reflect_name.clone(),
        shape,
        unmarshal_yaml: truthy(&t.unmarshal_yaml),
        unmarshal_text: t.unmarshal_text,
        custom_marshal: truthy(&t.marshal_yaml) || truthy(&t.marshal_text),
        is_zeroer: truthy(&t.is_zero),
        fields: t
            .r#struct
            .iter()
            .filter(|f| f.exported && (f.inline || f.key.as_deref().is_some_and(|k| k != "-")))
            .map(|f| Field {
                key: if f.inline { None } else { f.key.clone() },
                go_type: GoType::parse(&f.go_type),
                omitempty: f.omitempty,
                inline: f.inline,
                flow: f.flow,
                embedded: f.embedded,
            })
            .collect(),
    }
}

/// go-yaml fills exported fields by tag name and promotes the fields of `,inline` structs.
fn collect_decoded_fields(
    t: &RawType,
    all: &HashMap<String, RawType>,
    out: &mut HashMap<String, GoType>,
) {
    for f in &t.r#struct {
        if f.inline {
            let inner = f.go_type.trim_start_matches('*');
            if let Some(inner) = all.get(inner).filter(|i| i.kind == "struct") {
                collect_decoded_fields(inner, all, out);
            }
            continue;
        }
        if let (true, Some(key)) = (f.exported, &f.key) {
            out.insert(key.clone(), GoType::parse(&f.go_type));
        }
    }
}

fn external(e: &RawExternal) -> Named {
    // siderolabs/crypto's PEM types have json tags only: their keys are the lower-cased field
    // names (`crt`, `key`), and their own UnmarshalYAML reads them.
    let known: HashMap<String, GoType> = match e.name.as_str() {
        "x509.PEMEncodedCertificateAndKey" => ["crt", "key"].as_slice(),
        "x509.PEMEncodedCertificate" => ["crt"].as_slice(),
        "x509.PEMEncodedKey" => ["key"].as_slice(),
        _ => [].as_slice(),
    }
    .iter()
    .map(|k| {
        (
            k.to_string(),
            GoType::Slice(Box::new(GoType::Basic("byte".into()))),
        )
    })
    .collect();
    let shape = if e.go_kind == "struct" {
        Shape::Struct {
            decoded: known.clone(),
            known,
            inline_map: None,
        }
    } else {
        Shape::Alias(GoType::parse(&e.go_kind))
    };
    Named {
        reflect_name: e.name.clone(),
        shape,
        unmarshal_yaml: truthy(&e.unmarshal_yaml),
        unmarshal_text: e.unmarshal_text,
        // Library types (PEM blocks, netip, url, durations) marshal themselves: the encoder
        // writes them as the config wrote them.
        custom_marshal: true,
        is_zeroer: false,
        fields: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_tables_load_and_know_their_documents() {
        let t13 = Release::V1_13.table();
        let t14 = Release::V1_14.table();
        assert_eq!(t13.legacy, "v1alpha1.Config");
        assert!(t13.document("HostnameConfig", "v1alpha1").is_some());
        assert!(
            t13.document("ImageVerificationConfig", "v1alpha1")
                .is_some()
        );
        assert!(
            t13.document("KubeSpanEndpointsConfig", "v1alpha1")
                .is_some()
        );
        assert!(t13.document("KubeNodeConfig", "v1alpha1").is_none());
        assert!(t14.documents.len() > t13.documents.len());
        let Some(Named {
            shape: Shape::Struct { known, .. },
            ..
        }) = t13.named("v1alpha1.KubeletConfig")
        else {
            panic!("KubeletConfig is a struct");
        };
        assert!(known.contains_key("extraArgs"));
    }
}
