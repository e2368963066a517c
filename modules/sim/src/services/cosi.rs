//! `cosi.resource.State` Get/List/Watch (api.md §8) for the few resources our modules read:
//! the machine config (sensitive), the machine type and the machine status, the node name, the
//! extension statuses, the control plane's component configs (sensitive) and its bootstrap
//! manifests; and the discovery config (sensitive, `discovery.rs`), which no module reads: it is
//! there so tests prove a sensitive resource the node does serve never reaches a result. Writes
//! are refused.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use ferro_talos_proto::cosi::meta::ResourceDefinitionSpec;
use ferro_talos_proto::cosi::meta::resource_definition_spec::Sensitivity;
use ferro_talos_proto::cosi::resource::state_server::State as CosiState;
use ferro_talos_proto::cosi::resource::*;
use ferro_talos_proto::resource::config::{MachineConfigSpec, MachineTypeSpec};
use ferro_talos_proto::resource::extensions::{
    Compatibility, Constraint, Layer, Metadata as ExtensionMetadata,
};
use ferro_talos_proto::resource::k8s::{
    ApiServerConfigSpec, ControllerManagerConfigSpec, ManifestSpec, NodenameSpec,
    SchedulerConfigSpec, SingleManifest, StaticPodStatusSpec,
};
use ferro_talos_proto::resource::runtime::{
    MachineStatusSpec, MachineStatusStatus, UnmetCondition,
};
use ferro_talos_proto::resource::v1alpha1::ServiceSpec;
use prost::Message;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use super::block;
use super::discovery::{self, DISCOVERY_CONFIG, DISCOVERY_CONFIG_ID};
use super::k8s_configs::{
    KUBELET_CONFIG, KUBELET_CONFIG_ID, KUBELET_SPEC, MANIFESTS_CONFIG, MANIFESTS_CONFIG_ID,
    STATIC_POD_STATUS,
};
use super::members::MEMBERS;
use crate::mcfg::MachineType;
use crate::routing::{BoxStream, Ctx, Target};
use crate::state::Shared;

pub struct Cosi(pub Ctx);

const MC: (&str, &str) = ("config", "MachineConfigs.config.talos.dev");
const MT: (&str, &str) = ("config", "MachineTypes.config.talos.dev");
const MS: (&str, &str) = ("runtime", "MachineStatuses.runtime.talos.dev");
/// Image Factory installers add a `schematic` extension whose version is the schematic id.
/// Extension statuses are numbered by install order ("0", "1", ...: upstream's
/// `internal/app/machined/pkg/controllers/runtime/extension_status.go` at v1.13.9), so the
/// simulator puts a system extension first and the schematic after it, as a factory image with
/// extensions has them.
const EXT: (&str, &str) = ("runtime", "ExtensionStatuses.runtime.talos.dev");
/// The kubelet's node name: the hostname, lower-cased (upstream
/// `internal/app/machined/pkg/controllers/k8s/nodename.go` at v1.13.9); configured nodes only.
const NODENAME: (&str, &str) = ("k8s", "Nodenames.kubernetes.talos.dev");
/// A control plane's component configs, rendered from the machine config; their version is what
/// the static pods' `talos.dev/config-version` annotation carries (upstream
/// `pkg/machinery/resources/k8s/apiserver_config.go` and siblings at v1.13.9: namespace
/// `controlplane`, one resource per component with the component's name as id, sensitive; from
/// 1.14 a second one with id `final-<component>`, `FinalPrefix` in `resources/k8s/k8s.go` @
/// v1.14.1).
const CONTROL_PLANE_CONFIGS: &[(&str, &str)] = &[
    ("APIServerConfigs.kubernetes.talos.dev", "kube-apiserver"),
    (
        "ControllerManagerConfigs.kubernetes.talos.dev",
        "kube-controller-manager",
    ),
    ("SchedulerConfigs.kubernetes.talos.dev", "kube-scheduler"),
];
/// The bootstrap manifests a control plane renders (upstream
/// `pkg/machinery/resources/k8s/manifest.go` at v1.13.9: namespace `controlplane`, one resource
/// per manifest id, proto spec `ManifestSpec` of Structs; no sensitivity set, which is
/// NonSensitive, so os:reader reads them too, bootstrap token and all).
const MANIFESTS: (&str, &str) = ("controlplane", "Manifests.kubernetes.talos.dev");
/// Talos's diagnostics (`pkg/machinery/resources/runtime/diagnostic.go` @ v1.13.9): warnings
/// machined raises about the node's setup. The simulator raises none, so the list is empty, as on
/// a healthy node (upstream's `NoDiagnostics` check then passes; a type Talos did not know would
/// make it skip).
const DIAGNOSTICS: (&str, &str) = ("runtime", "Diagnostics.runtime.talos.dev");
/// machined's services as resources (`pkg/machinery/resources/v1alpha1/service.go` @ v1.13.9,
/// written by `internal/app/machined/pkg/system/service_runner.go`): one per running service, id
/// its name, with whether it is healthy; talosctl's `upgrade-k8s` watches the kubelet's. The
/// package is v1alpha1 but the namespace `runtime` (`resources/v1alpha1/v1alpha1.go`).
const SERVICES: (&str, &str) = ("runtime", "Services.v1alpha1.talos.dev");
const NAMESPACES: &[&str] = &[
    "config",
    "runtime",
    "network",
    "k8s",
    "controlplane",
    "cluster",
    "secrets",
    "meta",
    "etcd",
    "v1alpha1",
];

fn control_plane_config(ns: &str, ty: &str) -> Option<&'static str> {
    CONTROL_PLANE_CONFIGS
        .iter()
        .find(|(t, _)| ns == "controlplane" && *t == ty)
        .map(|(_, id)| *id)
}

fn meta(ns: &str, ty: &str, id: &str, version: u64, at: SystemTime) -> Metadata {
    Metadata {
        namespace: ns.into(),
        r#type: ty.into(),
        id: id.into(),
        version: version.to_string(),
        owner: String::new(),
        phase: "running".into(),
        created: Some(at.into()),
        updated: Some(at.into()),
        finalizers: vec![],
        labels: Default::default(),
        annotations: Default::default(),
    }
}

fn yaml_string(s: &str) -> String {
    serde_saphyr::to_string(&s.to_string()).unwrap_or_default()
}

/// The resource definitions: one per registered type, id the type in lower case
/// (cosi-project/runtime `pkg/resource/meta/resource_definition.go` `ID`), readable by every role
/// (it is not sensitive itself): how `talosctl get` and the modules learn a type's default
/// namespace and sensitivity.
const RD: (&str, &str) = ("meta", "ResourceDefinitions.meta.cosi.dev");

/// Every type the simulator serves: (namespace, type, whether upstream marks it sensitive in its
/// resource definition, `Sensitivity: meta.Sensitive`).
fn registered() -> Vec<(&'static str, &'static str, bool)> {
    let mut out = vec![
        (MC.0, MC.1, true),
        (MT.0, MT.1, false),
        (MS.0, MS.1, false),
        (EXT.0, EXT.1, false),
        (NODENAME.0, NODENAME.1, false),
        (MANIFESTS.0, MANIFESTS.1, false),
        (block::DISKS.0, block::DISKS.1, false),
        (block::VOLUMES.0, block::VOLUMES.1, false),
        (DISCOVERY_CONFIG.0, DISCOVERY_CONFIG.1, true),
        (RD.0, RD.1, false),
        (MEMBERS.0, MEMBERS.1, false),
        (KUBELET_CONFIG.0, KUBELET_CONFIG.1, false),
        (MANIFESTS_CONFIG.0, MANIFESTS_CONFIG.1, false),
        (STATIC_POD_STATUS.0, STATIC_POD_STATUS.1, false),
        (DIAGNOSTICS.0, DIAGNOSTICS.1, false),
        (KUBELET_SPEC.0, KUBELET_SPEC.1, false),
        (SERVICES.0, SERVICES.1, false),
    ];
    out.extend(
        CONTROL_PLANE_CONFIGS
            .iter()
            .map(|(ty, _)| ("controlplane", *ty, true)),
    );
    out
}

/// Checks namespace/type registration and sensitivity (Talos's access filter,
/// `internal/app/resources/access.go` `AccessPolicy`: a sensitive type is os:admin only, "not
/// authorized" for every other role).
fn check_access(t: &Target, ns: &str, ty: &str) -> Result<(), Status> {
    if !NAMESPACES.contains(&ns) {
        return Err(Status::permission_denied(format!(
            "namespace {ns:?} is not supported"
        )));
    }
    let Some((_, _, sensitive)) = registered()
        .into_iter()
        .find(|(n, y, _)| *n == ns && *y == ty)
    else {
        return Err(Status::permission_denied(format!(
            "resource type {ty:?} is not supported"
        )));
    };
    if sensitive && !t.is_admin() {
        return Err(Status::permission_denied("not authorized"));
    }
    Ok(())
}

/// The aliases upstream gives a type beyond the automatic ones (each type's
/// `ResourceDefinition()` in `pkg/machinery/resources/...` @ v1.13.9 and v1.14.1): only
/// ExtensionStatuses has one among the types the simulator serves.
fn user_aliases(ty: &str) -> Vec<String> {
    match ty {
        "ExtensionStatuses.runtime.talos.dev" => vec!["extensions".into()],
        _ => vec![],
    }
}

/// `pluralize.Singular` for the type names the simulator serves (…Statuses, …s).
fn singular(name: &str) -> String {
    match name.strip_suffix("uses") {
        Some(stem) => format!("{stem}us"),
        None => name.strip_suffix('s').unwrap_or(name).to_string(),
    }
}

/// A resource definition as upstream fills it (cosi-project/runtime
/// `pkg/resource/meta/spec/resource_definition.go` `Fill` @ v1.16.2, the same at v1.14.1): the
/// display type is the singular of the type's name; the aliases are the user's, then the display
/// type in lower case and the abbreviation of the name's capitals when it has more than one;
/// all aliases are the name in lower case, with each of its suffix's leading parts, then the
/// aliases. `talosctl get members` finds the type by these (`ResolveResourceKind` in
/// `pkg/machinery/client/resources.go`) and decodes them from the proto spec, so a definition
/// without one matches only by its full id. The simulator names no print columns.
fn definition(ns: &str, ty: &str, sensitive: bool) -> (ResourceDefinitionSpec, String) {
    let (name, suffix) = ty.split_once('.').unwrap_or((ty, ""));
    let display = singular(name);
    let mut aliases = user_aliases(ty);
    aliases.push(display.to_lowercase());
    let capitals: String = name.chars().filter(|c| c.is_uppercase()).collect();
    if capitals.chars().count() > 1 {
        aliases.push(capitals.to_lowercase());
        if !capitals.ends_with('S') {
            aliases.push(format!("{capitals}s").to_lowercase());
        }
    }
    let parts: Vec<&str> = suffix.split('.').collect();
    let mut all_aliases = vec![name.to_lowercase()];
    for i in 1..parts.len() {
        all_aliases.push(format!("{}.{}", name.to_lowercase(), parts[..i].join(".")));
    }
    all_aliases.extend(aliases.iter().cloned());
    let list = |items: &[String]| {
        if items.is_empty() {
            " []\n".to_string()
        } else {
            let mut out = String::from("\n");
            for i in items {
                out.push_str(&format!("    - {i}\n"));
            }
            out
        }
    };
    // In the field order of `ResourceDefinitionSpec`, `sensitivity` left out when empty.
    let mut yaml = format!(
        "type: {ty}\ndisplayType: {display}\ndefaultNamespace: {ns}\naliases:{}allAliases:{}printColumns: []\n",
        list(&aliases),
        list(&all_aliases)
    );
    if sensitive {
        yaml.push_str("sensitivity: sensitive\n");
    }
    let spec = ResourceDefinitionSpec {
        resource_type: ty.into(),
        display_type: display,
        default_namespace: ns.into(),
        aliases,
        all_aliases,
        print_columns: vec![],
        sensitivity: if sensitive {
            Sensitivity::Sensitive as i32
        } else {
            Sensitivity::NonSensitive as i32
        },
    };
    (spec, yaml)
}

/// Every resource of (ns, type) on the node, by id.
fn resources(shared: &Shared, idx: usize, ns: &str, ty: &str) -> BTreeMap<String, Resource> {
    let st = shared.lock();
    let n = &st.nodes[idx];
    let mut out = BTreeMap::new();
    if (ns, ty) == RD {
        for (def_ns, def_ty, sensitive) in registered() {
            let id = def_ty.to_lowercase();
            let (spec, yaml_spec) = definition(def_ns, def_ty, sensitive);
            out.insert(
                id.clone(),
                Resource {
                    metadata: Some(meta(ns, ty, &id, 1, n.config_updated)),
                    spec: Some(Spec {
                        proto_spec: spec.encode_to_vec(),
                        yaml_spec,
                    }),
                },
            );
        }
    } else if (ns, ty) == MC {
        let mut add = |id: &str, cfg: &crate::mcfg::StoredConfig, version: u64| {
            let text = String::from_utf8_lossy(&cfg.raw).into_owned();
            let mut m = meta(ns, ty, id, version, n.config_updated);
            m.annotations
                .insert("talos.dev/yaml-spec".into(), "1".into());
            let spec = Spec {
                proto_spec: MachineConfigSpec {
                    yaml_marshalled: cfg.raw.clone(),
                }
                .encode_to_vec(),
                yaml_spec: yaml_string(&text),
            };
            out.insert(
                id.to_string(),
                Resource {
                    metadata: Some(m),
                    spec: Some(spec),
                },
            );
        };
        if let Some(a) = &n.active {
            add("v1alpha1", a, n.config_version);
        }
        if let Some(p) = &n.persisted
            && n.active.as_ref().map(|a| &a.raw) != Some(&p.raw)
        {
            add("persistent", p, n.config_version + 1);
        }
    } else if (ns, ty) == MT {
        let (value, name) = match n.machine_type() {
            None => (0, "unknown"),
            Some(MachineType::Init) => (1, "init"),
            Some(MachineType::ControlPlane) => (2, "controlplane"),
            Some(MachineType::Worker) => (3, "worker"),
        };
        let spec = Spec {
            proto_spec: MachineTypeSpec {
                machine_type: value,
            }
            .encode_to_vec(),
            yaml_spec: format!("{name}\n"),
        };
        out.insert(
            "machine-type".into(),
            Resource {
                metadata: Some(meta(
                    ns,
                    ty,
                    "machine-type",
                    n.config_version + 1,
                    n.config_updated,
                )),
                spec: Some(spec),
            },
        );
    } else if (ns, ty) == MS {
        // Readiness as upstream's MachineStatusController computes it (boot_stage.rs).
        let unmet = crate::boot_stage::unmet_conditions(&st, idx);
        let ready = unmet.is_empty();
        let spec = MachineStatusSpec {
            stage: n.stage.proto() as i32,
            status: Some(MachineStatusStatus {
                ready,
                unmet_conditions: unmet
                    .iter()
                    .map(|c| UnmetCondition {
                        name: c.name.to_string(),
                        reason: c.reason.clone(),
                    })
                    .collect(),
            }),
        };
        let mut yaml = format!(
            "stage: {}\nstatus:\n    ready: {ready}\n",
            n.stage.yaml_name()
        );
        if !unmet.is_empty() {
            yaml.push_str("    unmetConditions:\n");
            for c in &unmet {
                yaml.push_str(&format!(
                    "        - name: {}\n          reason: {}\n",
                    c.name, c.reason
                ));
            }
        }
        // A new version whenever what it says changes, so a watch sees each change.
        let version = n.generation * 64 + n.stage.proto() as u64 * 4 + unmet.len() as u64;
        out.insert(
            "machine".into(),
            Resource {
                metadata: Some(meta(ns, ty, "machine", version, SystemTime::now())),
                spec: Some(Spec {
                    proto_spec: spec.encode_to_vec(),
                    yaml_spec: yaml,
                }),
            },
        );
    } else if (ns, ty) == NODENAME && n.active.is_some() {
        let name = crate::kube::node_name(n);
        let spec = NodenameSpec {
            nodename: name.clone(),
            hostname_version: "1".into(),
            skip_node_registration: false,
        };
        out.insert(
            "nodename".into(),
            Resource {
                metadata: Some(meta(ns, ty, "nodename", n.config_version, n.config_updated)),
                spec: Some(Spec {
                    proto_spec: spec.encode_to_vec(),
                    yaml_spec: format!(
                        "nodename: {name}\nhostnameVersion: \"1\"\nskipNodeRegistration: false\n"
                    ),
                }),
            },
        );
    } else if let Some(id) = control_plane_config(ns, ty)
        && n.is_control_plane()
        && let Some(state) = n.components.get(id)
    {
        let image = state.image.clone().unwrap_or_default();
        let (proto_spec, yaml_spec) = match id {
            "kube-apiserver" => (
                ApiServerConfigSpec {
                    image: image.clone(),
                }
                .encode_to_vec(),
                format!("image: {image}\n"),
            ),
            "kube-controller-manager" => (
                ControllerManagerConfigSpec {
                    enabled: true,
                    image: image.clone(),
                }
                .encode_to_vec(),
                format!("enabled: true\nimage: {image}\n"),
            ),
            _ => (
                SchedulerConfigSpec {
                    enabled: true,
                    image: image.clone(),
                }
                .encode_to_vec(),
                format!("enabled: true\nimage: {image}\n"),
            ),
        };
        // Talos 1.14 also keeps the `final-` resource the static pod is rendered from, with its
        // own version (`control_plane_final.go` @ v1.14.1; `kube/components.rs`). Its spec here is
        // the same image (the real one adds the rendered args).
        if crate::kube::has_final_configs(&n.version) {
            let final_id = format!("final-{id}");
            out.insert(
                final_id.clone(),
                Resource {
                    metadata: Some(meta(
                        ns,
                        ty,
                        &final_id,
                        state.final_version,
                        state.changed_at,
                    )),
                    spec: Some(Spec {
                        proto_spec: proto_spec.clone(),
                        yaml_spec: yaml_spec.clone(),
                    }),
                },
            );
        }
        out.insert(
            id.to_string(),
            Resource {
                metadata: Some(meta(ns, ty, id, state.version, state.changed_at)),
                spec: Some(Spec {
                    proto_spec,
                    yaml_spec,
                }),
            },
        );
    } else if (ns, ty) == DISCOVERY_CONFIG
        && let Some(cfg) = &n.active
        && let Some(yaml_spec) = discovery::spec_yaml(cfg, crate::version::minor(&n.version))
    {
        out.insert(
            DISCOVERY_CONFIG_ID.into(),
            Resource {
                metadata: Some(meta(
                    ns,
                    ty,
                    DISCOVERY_CONFIG_ID,
                    n.config_version,
                    n.config_updated,
                )),
                spec: Some(Spec {
                    proto_spec: vec![],
                    yaml_spec,
                }),
            },
        );
    } else if (ns, ty) == MANIFESTS && n.is_control_plane() {
        for (id, r) in n.components.manifests().iter() {
            let spec = ManifestSpec {
                items: r
                    .objects
                    .iter()
                    .filter_map(|o| o.as_object())
                    .map(|o| SingleManifest {
                        object: Some(crate::kube::to_struct(o)),
                    })
                    .collect(),
            };
            out.insert(
                id.clone(),
                Resource {
                    metadata: Some(meta(ns, ty, id, r.version, r.updated)),
                    spec: Some(Spec {
                        proto_spec: spec.encode_to_vec(),
                        yaml_spec: serde_saphyr::to_string(&r.objects).unwrap_or_default(),
                    }),
                },
            );
        }
    } else if (ns, ty) == KUBELET_CONFIG
        && let Some(spec) = super::k8s_configs::kubelet(n)
    {
        out.insert(
            KUBELET_CONFIG_ID.into(),
            Resource {
                metadata: Some(meta(
                    ns,
                    ty,
                    KUBELET_CONFIG_ID,
                    n.config_version,
                    n.config_updated,
                )),
                spec: Some(Spec {
                    yaml_spec: super::k8s_configs::kubelet_yaml(&spec),
                    proto_spec: spec.encode_to_vec(),
                }),
            },
        );
    } else if (ns, ty) == MANIFESTS_CONFIG
        && let Some(spec) = super::k8s_configs::manifests(n)
    {
        out.insert(
            MANIFESTS_CONFIG_ID.into(),
            Resource {
                metadata: Some(meta(
                    ns,
                    ty,
                    MANIFESTS_CONFIG_ID,
                    n.config_version,
                    n.config_updated,
                )),
                spec: Some(Spec {
                    yaml_spec: super::k8s_configs::manifests_yaml(&spec),
                    proto_spec: spec.encode_to_vec(),
                }),
            },
        );
    } else if (ns, ty) == KUBELET_SPEC
        && let Some((spec, yaml_spec)) = super::k8s_configs::kubelet_spec(n)
    {
        out.insert(
            "kubelet".into(),
            Resource {
                metadata: Some(meta(ns, ty, "kubelet", n.config_version, n.config_updated)),
                spec: Some(Spec {
                    proto_spec: spec.encode_to_vec(),
                    yaml_spec,
                }),
            },
        );
    } else if (ns, ty) == SERVICES {
        for (name, state, healthy, _) in super::machine::service_states(&st, idx) {
            if state != "Running" {
                continue;
            }
            let spec = ServiceSpec {
                running: true,
                healthy: healthy == Some(true),
                unknown: healthy.is_none(),
            };
            out.insert(
                name.into(),
                Resource {
                    metadata: Some(meta(ns, ty, name, n.generation, n.config_updated)),
                    spec: Some(Spec {
                        proto_spec: spec.encode_to_vec(),
                        yaml_spec: format!(
                            "running: true\nhealthy: {}\nunknown: {}\n",
                            spec.healthy, spec.unknown
                        ),
                    }),
                },
            );
        }
    } else if (ns, ty) == STATIC_POD_STATUS {
        for (id, status) in super::k8s_configs::static_pods(&st, idx) {
            let spec = StaticPodStatusSpec {
                pod_status: Some(crate::kube::to_struct(&status)),
            };
            let yaml_spec = serde_saphyr::to_string(&serde_json::json!({ "podStatus": status }))
                .unwrap_or_default();
            out.insert(
                id.clone(),
                Resource {
                    metadata: Some(meta(ns, ty, &id, n.generation, n.config_updated)),
                    spec: Some(Spec {
                        proto_spec: spec.encode_to_vec(),
                        yaml_spec,
                    }),
                },
            );
        }
    } else if (ns, ty) == MEMBERS {
        for (id, (spec, yaml_spec)) in super::members::members(&st, idx) {
            out.insert(
                id.clone(),
                Resource {
                    metadata: Some(meta(ns, ty, &id, n.config_version, n.config_updated)),
                    spec: Some(Spec {
                        proto_spec: spec.encode_to_vec(),
                        yaml_spec,
                    }),
                },
            );
        }
    } else if (ns, ty) == block::DISKS {
        for (id, proto_spec, yaml_spec) in block::disks() {
            let m = meta(ns, ty, &id, 1, n.config_updated);
            out.insert(
                id,
                Resource {
                    metadata: Some(m),
                    spec: Some(Spec {
                        proto_spec,
                        yaml_spec,
                    }),
                },
            );
        }
    } else if (ns, ty) == block::VOLUMES {
        for (id, proto_spec, yaml_spec) in block::volumes(n) {
            let m = meta(ns, ty, &id, n.generation, n.config_updated);
            out.insert(
                id,
                Resource {
                    metadata: Some(m),
                    spec: Some(Spec {
                        proto_spec,
                        yaml_spec,
                    }),
                },
            );
        }
    } else if (ns, ty) == EXT
        && let Some(schematic) = &n.schematic
    {
        // Each with its proto spec too: talosctl decodes ExtensionStatusSpec (upstream's
        // `extensions.Layer`, `pkg/machinery/resources/runtime/extension_status.go`) from it and
        // shows an empty spec without one.
        let layer = |image: &str,
                     name: &str,
                     version: &str,
                     author: &str,
                     description: &str,
                     talos: Option<&str>| Layer {
            image: image.into(),
            metadata: Some(ExtensionMetadata {
                name: name.into(),
                version: version.into(),
                author: author.into(),
                description: description.into(),
                compatibility: talos.map(|v| Compatibility {
                    talos: Some(Constraint { version: v.into() }),
                }),
                extra_info: String::new(),
            }),
        };
        let extensions = [
            (
                layer("000.sqsh", "iscsi-tools", "v0.2.0", "Sidero Labs", "open-iscsi tools", Some(">= v1.13.0")),
                "image: 000.sqsh\nmetadata:\n    name: iscsi-tools\n    version: v0.2.0\n    author: Sidero Labs\n    description: open-iscsi tools\n    compatibility:\n        talos:\n            version: '>= v1.13.0'\n"
                    .to_string(),
            ),
            (
                layer("001.sqsh", "schematic", schematic, "", "Image Factory schematic", None),
                format!(
                    "image: 001.sqsh\nmetadata:\n    name: schematic\n    version: {schematic}\n    description: Image Factory schematic\n"
                ),
            ),
        ];
        for (index, (spec, yaml)) in extensions.into_iter().enumerate() {
            let id = index.to_string();
            out.insert(
                id.clone(),
                Resource {
                    metadata: Some(meta(ns, ty, &id, n.generation, n.config_updated)),
                    spec: Some(Spec {
                        proto_spec: spec.encode_to_vec(),
                        yaml_spec: yaml,
                    }),
                },
            );
        }
    }
    out
}

fn version_of(r: &Resource) -> String {
    r.metadata
        .as_ref()
        .map(|m| m.version.clone())
        .unwrap_or_default()
}

fn event(resource: Resource, ty: EventType, old: Option<Resource>) -> WatchResponse {
    WatchResponse {
        event: vec![Event {
            resource: Some(resource),
            event_type: ty as i32,
            old,
            error: None,
            bookmark: None,
        }],
    }
}

#[tonic::async_trait]
impl CosiState for Cosi {
    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let t = self
            .0
            .single(request.metadata(), "/cosi.resource.State/Get")?;
        let r = request.get_ref();
        check_access(&t, &r.namespace, &r.r#type)?;
        let mut all = resources(&self.0.shared, t.idx, &r.namespace, &r.r#type);
        match all.remove(&r.id) {
            Some(resource) => Ok(Response::new(GetResponse {
                resource: Some(resource),
            })),
            None => Err(Status::not_found(format!(
                "resource {}({}/{}@undefined) doesn't exist",
                r.r#type, r.namespace, r.id
            ))),
        }
    }

    type ListStream = BoxStream<ListResponse>;
    async fn list(
        &self,
        request: Request<ListRequest>,
    ) -> Result<Response<Self::ListStream>, Status> {
        let t = self
            .0
            .single(request.metadata(), "/cosi.resource.State/List")?;
        let r = request.get_ref();
        check_access(&t, &r.namespace, &r.r#type)?;
        let items: Vec<Result<ListResponse, Status>> =
            resources(&self.0.shared, t.idx, &r.namespace, &r.r#type)
                .into_values()
                .map(|resource| {
                    Ok(ListResponse {
                        resource: Some(resource),
                    })
                })
                .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(items))))
    }

    type WatchStream = BoxStream<WatchResponse>;
    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let t = self
            .0
            .single(request.metadata(), "/cosi.resource.State/Watch")?;
        let r = request.get_ref().clone();
        check_access(&t, &r.namespace, &r.r#type)?;
        let shared = self.0.shared.clone();
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            let current = |shared: &Shared| {
                let mut all = resources(shared, t.idx, &r.namespace, &r.r#type);
                if let Some(id) = &r.id {
                    all.retain(|k, _| k == id);
                }
                all
            };
            if tx.send(Ok(WatchResponse { event: vec![] })).await.is_err() {
                return;
            }
            let mut seen = current(&shared);
            if let Some(id) = &r.id {
                let first = match seen.get(id) {
                    Some(res) => event(res.clone(), EventType::Created, None),
                    // A tombstone, as upstream's server sends it (cosi-project/runtime
                    // `pkg/state/impl/inmem/collection.go` Watch, `pkg/resource/protobuf`
                    // `FromResource` and `Marshal` @ v1.16.2): version undefined and an empty
                    // spec, which is present all the same; a client's decoder refuses a
                    // resource without one ("spec is missing").
                    None => event(
                        Resource {
                            metadata: Some(Metadata {
                                version: "undefined".into(),
                                ..meta(&r.namespace, &r.r#type, id, 0, SystemTime::now())
                            }),
                            spec: Some(Spec::default()),
                        },
                        EventType::Destroyed,
                        None,
                    ),
                };
                if tx.send(Ok(first)).await.is_err() {
                    return;
                }
            } else if r.options.as_ref().is_some_and(|o| o.bootstrap_contents) {
                for res in seen.values() {
                    if tx
                        .send(Ok(event(res.clone(), EventType::Created, None)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                if r.api_version >= 1 {
                    let boot = WatchResponse {
                        event: vec![Event {
                            resource: None,
                            event_type: EventType::Bootstrapped as i32,
                            old: None,
                            error: None,
                            bookmark: None,
                        }],
                    };
                    if tx.send(Ok(boot)).await.is_err() {
                        return;
                    }
                }
            }
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if tx.is_closed() {
                    return;
                }
                let now = current(&shared);
                let mut out = Vec::new();
                for (id, res) in &now {
                    match seen.get(id) {
                        None => out.push(event(res.clone(), EventType::Created, None)),
                        Some(old) if version_of(old) != version_of(res) || old.spec != res.spec => {
                            out.push(event(res.clone(), EventType::Updated, Some(old.clone())))
                        }
                        _ => {}
                    }
                }
                for (id, old) in &seen {
                    if !now.contains_key(id) {
                        out.push(event(old.clone(), EventType::Destroyed, None));
                    }
                }
                for e in out {
                    if tx.send(Ok(e)).await.is_err() {
                        return;
                    }
                }
                seen = now;
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}
