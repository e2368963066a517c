//! The simulator's Kubernetes API checked against upstream's own API server.
//!
//! One sequence of requests goes to talos-sim's model of the API (an in-process request to a
//! bootstrapped simulated control plane) and to a real kube-apiserver (the release
//! `ferro_talos_oracle::KUBE_APISERVER_VERSION`, built from the Go module proxy by
//! `tools/kube-apiserver/build`) backed by a real etcd member (`tools/etcd/build`). The requests are
//! the ones the collection makes: server-side apply as the manifest sync and Talos's own
//! bootstrap make them (field managers, conflicts, force, dry runs), the inventory's PUT, deletes,
//! label selectors, discovery, and what a drain and `delete_kubernetes_node` do to a Node. Each answer is compared where the modules read it: the status
//! code, a refusal's reason and message, and the fields of an object the request is about.
//!
//! The real server is reached with curl, an independent client, over TLS with the cluster's CA
//! and an admin (system:masters) client certificate from the same secrets bundle. Both servers
//! die with the test (`PR_SET_PDEATHSIG`), on this test's own loopback block.
//!
//! Without Go the test prints why and returns; `FERRO_REQUIRE_UPSTREAM=1` (CI) makes that a
//! failure.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use ferro_talos_secrets::pki;
use ferro_talos_sim::real::process::dies_with_parent;
use serde_json::{Value, json};

/// This test's own loopback block (the simulated clusters take 127.100.0.0 to 127.199.255.255).
fn server_address() -> Ipv4Addr {
    let b: u8 = rand::random();
    Ipv4Addr::new(127, 98, b, 1)
}

/// A real etcd member and a real kube-apiserver on it, stopped when dropped.
struct RealApi {
    etcd: Child,
    apiserver: Child,
    address: Ipv4Addr,
    dir: tempfile::TempDir,
}

impl Drop for RealApi {
    fn drop(&mut self) {
        for child in [&mut self.apiserver, &mut self.etcd] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn decode_b64(b64: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

impl RealApi {
    /// Starts both and waits until the API server is ready; None (after a printed reason) where
    /// upstream's programs cannot be built here.
    fn start() -> Option<RealApi> {
        let (etcd_program, _) = ferro_talos_oracle::etcd_programs()?;
        let apiserver_program = ferro_talos_oracle::kube_apiserver_program()?;
        let address = server_address();
        let dir = tempfile::tempdir().unwrap();
        let bundle = &SAMPLE.bundle;
        let ca_crt = decode_b64(&bundle.certs.k8s.crt);
        let ca_key = decode_b64(&bundle.certs.k8s.key);
        let sa_key = decode_b64(&bundle.certs.k8s_service_account.key);
        let serving = pki::issue_server_cert(
            &ca_crt,
            &ca_key,
            "kube-apiserver",
            &[IpAddr::V4(address)],
            &["kubernetes".to_string()],
            Duration::from_secs(3600),
        )
        .unwrap();
        let admin = pki::issue_client_cert(
            &ca_crt,
            &ca_key,
            Some("admin"),
            &["system:masters"],
            Duration::from_secs(3600),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
        let d = dir.path();
        let ca = write(d, "ca.crt", &ca_crt);
        let tls_crt = write(d, "apiserver.crt", &serving.cert_pem);
        let tls_key = write(d, "apiserver.key", &serving.key_pem);
        let sa = write(d, "service-account.key", &sa_key);
        write(d, "admin.crt", &admin.cert_pem);
        write(d, "admin.key", &admin.key_pem);
        let client_url = format!("http://{address}:2379");
        let peer_url = format!("http://{address}:2380");
        let mut etcd = Command::new(etcd_program);
        dies_with_parent(&mut etcd);
        let etcd = etcd
            .args(["--name", "oracle", "--data-dir"])
            .arg(d.join("etcd"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("oracle={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The flags that decide what these requests see, as Talos passes them
        // (internal/app/machined/pkg/controllers/k8s/control_plane_final.go @ v1.14.1); the
        // service-account issuer and key are the cluster's.
        let mut apiserver = Command::new(apiserver_program);
        dies_with_parent(&mut apiserver);
        let apiserver = apiserver
            .args(["--etcd-servers", &client_url])
            .args(["--bind-address", &address.to_string()])
            .args(["--advertise-address", &address.to_string()])
            .args(["--secure-port", "6443"])
            .arg("--tls-cert-file")
            .arg(&tls_crt)
            .arg("--tls-private-key-file")
            .arg(&tls_key)
            .arg("--client-ca-file")
            .arg(&ca)
            .arg("--service-account-key-file")
            .arg(&sa)
            .arg("--service-account-signing-key-file")
            .arg(&sa)
            .args([
                "--service-account-issuer",
                &format!("https://{address}:6443"),
            ])
            .args(["--api-audiences", &format!("https://{address}:6443")])
            .args(["--service-cluster-ip-range", "10.96.0.0/12"])
            .args(["--authorization-mode", "Node,RBAC"])
            .args(["--enable-admission-plugins", "NodeRestriction"])
            .arg("--allow-privileged=true")
            .arg("--cert-dir")
            .arg(d.join("certs"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("kube-apiserver.log")).unwrap())
            .spawn()
            .unwrap();
        let mut api = RealApi {
            etcd,
            apiserver,
            address,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if api.request("GET", "/readyz", None, b"").0 == 200 {
                break;
            }
            let exited = api.apiserver.try_wait().unwrap().is_some();
            if exited || Instant::now() > deadline {
                let log = std::fs::read_to_string(api.dir.path().join("kube-apiserver.log"))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                panic!(
                    "kube-apiserver on {address} exited or was not ready within 90 s; its log ends:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Some(api)
    }

    /// One request as the admin, through curl: the status code and the JSON answer (Null when
    /// the answer is not JSON).
    fn request(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> (u16, Value) {
        let d = self.dir.path();
        let mut curl = Command::new("curl");
        curl.args(["-sS", "--max-time", "30", "-X", method])
            .arg("--cacert")
            .arg(d.join("ca.crt"))
            .arg("--cert")
            .arg(d.join("admin.crt"))
            .arg("--key")
            .arg(d.join("admin.key"))
            .args(["-w", "\n%{http_code}", "-H", "Accept: application/json"]);
        if let Some(ct) = content_type {
            curl.args(["-H", &format!("Content-Type: {ct}"), "--data-binary", "@-"]);
        }
        let out = curl
            .arg(format!("https://{}:6443{path}", self.address))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(body)?;
                child.wait_with_output()
            })
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let (answer, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (
            code.trim().parse().unwrap_or(0),
            serde_json::from_str(answer).unwrap_or(Value::Null),
        )
    }
}

/// What the modules read of an answer: the code; for a refusal its reason and message; for an
/// object the fields `pick` names (a JSON pointer each).
fn view(code: u16, body: &Value, pick: &[&str]) -> Value {
    if code >= 400 {
        return json!({"code": code, "reason": body["reason"], "message": body["message"]});
    }
    let mut fields = serde_json::Map::new();
    for pointer in pick {
        fields.insert(
            (*pointer).to_string(),
            body.pointer(pointer).cloned().unwrap_or(Value::Null),
        );
    }
    json!({"code": code, "fields": fields})
}

/// managedFields without their timestamps: who owns what, and how it got it.
fn owners(body: &Value) -> Value {
    let mut entries: Vec<Value> = body["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut e| {
            e.as_object_mut().unwrap().remove("time");
            e
        })
        .collect();
    entries.sort_by_key(|e| e["manager"].to_string());
    Value::Array(entries)
}

const APPLY: Option<&str> = Some("application/apply-patch+yaml");
const JSON: Option<&str> = Some("application/json");

struct Step {
    what: &'static str,
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Value,
    /// The fields of a successful answer to compare.
    pick: &'static [&'static str],
    /// Also compare managedFields (without times).
    owners: bool,
    /// Compare only the end of a refusal's message (after its last `: `): where upstream prints
    /// the whole patched object first.
    message_end: bool,
}

fn step(what: &'static str, method: &'static str, path: impl Into<String>) -> Step {
    Step {
        what,
        method,
        path: path.into(),
        content_type: None,
        body: Value::Null,
        pick: &[],
        owners: false,
        message_end: false,
    }
}

impl Step {
    fn body(mut self, content_type: Option<&'static str>, body: Value) -> Step {
        self.content_type = content_type;
        self.body = body;
        self
    }
    fn pick(mut self, pick: &'static [&'static str]) -> Step {
        self.pick = pick;
        self
    }
    fn owners(mut self) -> Step {
        self.owners = true;
        self
    }
    fn message_end(mut self) -> Step {
        self.message_end = true;
        self
    }
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"}, "data": data})
}

fn labelled(name: &str, tier: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default", "labels": {"ferro-tier": tier}}})
}

fn daemon_set(image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "probe", "namespace": "default", "labels": {"k8s-app": "probe"}},
        "spec": {"selector": {"matchLabels": {"k8s-app": "probe"}},
            "template": {"metadata": {"labels": {"k8s-app": "probe"}},
                "spec": {"containers": [{"name": "probe", "image": image}]}}}})
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "probe"}},
            "template": {"metadata": {"labels": {"app": "probe"}},
                "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}}}})
}

/// The sequence, in order: each step may depend on what the steps before it did.
fn steps() -> Vec<Step> {
    let cm = "/api/v1/namespaces/default/configmaps/app";
    let ds = "/apis/apps/v1/namespaces/default/daemonsets/probe";
    vec![
        step("apply without a field manager", "PATCH", cm)
            .body(APPLY, config_map("app", json!({"a": "1"}))),
        step("a dry-run create", "PATCH", format!("{cm}?fieldManager=talos&dryRun=All"))
            .body(APPLY, config_map("app", json!({"a": "1"})))
            .pick(&["/data", "/metadata/resourceVersion", "/metadata/generation"]),
        step("the dry run created nothing", "GET", cm),
        step("apply creates", "PATCH", format!("{cm}?fieldManager=talos"))
            .body(APPLY, config_map("app", json!({"a": "1"})))
            .pick(&["/data", "/metadata/generation"])
            .owners(),
        step("the same apply again", "PATCH", format!("{cm}?fieldManager=talos"))
            .body(APPLY, config_map("app", json!({"a": "1"})))
            .pick(&["/data"])
            .owners(),
        step("another manager's conflicting apply", "PATCH", format!("{cm}?fieldManager=flux"))
            .body(APPLY, config_map("app", json!({"a": "2"}))),
        step("the same value from another manager shares the field", "PATCH", format!("{cm}?fieldManager=flux"))
            .body(APPLY, config_map("app", json!({"a": "1"})))
            .pick(&["/data"])
            .owners(),
        step("forced, the other manager takes the field", "PATCH", format!("{cm}?fieldManager=flux&force=true"))
            .body(APPLY, config_map("app", json!({"a": "3"})))
            .pick(&["/data"])
            .owners(),
        step("the first manager drops a field it no longer owns", "PATCH", format!("{cm}?fieldManager=talos"))
            .body(APPLY, config_map("app", json!({"b": "1"})))
            .pick(&["/data"])
            .owners(),
        step("a manager drops a field it owns alone", "PATCH", format!("{cm}?fieldManager=talos"))
            .body(APPLY, config_map("app", json!({"c": "1"})))
            .pick(&["/data"])
            .owners(),
        step("a name that is not the path's", "PATCH", format!("{cm}?fieldManager=talos"))
            .body(APPLY, config_map("other", json!({}))),
        step("a namespaced object in a missing namespace", "PATCH", "/api/v1/namespaces/nope/configmaps/x?fieldManager=talos")
            .body(APPLY, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "nope"}})),
        step("PUT replaces the object", "PUT", cm)
            .body(JSON, config_map("app", json!({"x_y__Kind": ""})))
            .pick(&["/data"]),
        step("PUT of an object that is not there", "PUT", "/api/v1/namespaces/default/configmaps/absent")
            .body(JSON, config_map("absent", json!({}))),
        step("DELETE", "DELETE", cm).pick(&["/kind", "/status", "/details/name", "/details/kind"]),
        step("gone", "GET", cm),
        step("DELETE of what is gone", "DELETE", cm),
        step("labelled a", "PATCH", "/api/v1/namespaces/default/configmaps/la?fieldManager=talos")
            .body(APPLY, labelled("la", "a")),
        step("labelled b", "PATCH", "/api/v1/namespaces/default/configmaps/lb?fieldManager=talos")
            .body(APPLY, labelled("lb", "b")),
        step("labelled c", "PATCH", "/api/v1/namespaces/default/configmaps/lc?fieldManager=talos")
            .body(APPLY, labelled("lc", "c")),
        step("a set-based selector", "GET", "/api/v1/namespaces/default/configmaps?labelSelector=ferro-tier%20in%20(a,b),ferro-tier!=b")
            .pick(&["/kind", "/items/0/metadata/name", "/items/1"]),
        step("an existence selector", "GET", "/api/v1/namespaces/default/configmaps?labelSelector=ferro-tier,!nothing")
            .pick(&["/items/0/metadata/name", "/items/1/metadata/name", "/items/2/metadata/name", "/items/3"]),
        step("a selector that does not parse", "GET", "/api/v1/namespaces/default/configmaps?labelSelector=ferro-tier%20in%20a"),
        step("a DaemonSet is created at generation 1", "PATCH", format!("{ds}?fieldManager=talos"))
            .body(APPLY, daemon_set("registry.k8s.io/pause:3.10"))
            .pick(&["/metadata/generation", "/spec/updateStrategy", "/spec/revisionHistoryLimit", "/spec/template/spec/containers/0/image"]),
        step("a no-op apply keeps its generation", "PATCH", format!("{ds}?fieldManager=talos"))
            .body(APPLY, daemon_set("registry.k8s.io/pause:3.10"))
            .pick(&["/metadata/generation"]),
        step("a changed template bumps it", "PATCH", format!("{ds}?fieldManager=talos"))
            .body(APPLY, daemon_set("registry.k8s.io/pause:3.11"))
            .pick(&["/metadata/generation"]),
        step("a Deployment's defaults", "PATCH", "/apis/apps/v1/namespaces/default/deployments/probe?fieldManager=talos")
            .body(APPLY, deployment())
            .pick(&["/metadata/generation", "/spec/replicas", "/spec/strategy", "/spec/revisionHistoryLimit", "/spec/progressDeadlineSeconds"]),
        step("core discovery names configmaps", "GET", "/api/v1")
            .pick(&["/kind", "/groupVersion"]),
        step("apps discovery", "GET", "/apis/apps/v1").pick(&["/kind", "/groupVersion"]),
        step("an unknown group version", "GET", "/apis/nothing.example.com/v1"),
        step("an unknown group", "GET", "/apis/nothing.example.com"),
    ]
}

/// What the drain and `delete_kubernetes_node` do to a Node: kubectl's cordon and uncordon
/// (strategic merge patches), labels by merge patch, and the delete.
fn node_steps(node: &str) -> Vec<Step> {
    const STRATEGIC: Option<&str> = Some("application/strategic-merge-patch+json");
    const MERGE: Option<&str> = Some("application/merge-patch+json");
    let path = format!("/api/v1/nodes/{node}");
    vec![
        step("cordon", "PATCH", path.clone())
            .body(STRATEGIC, json!({"spec": {"unschedulable": true}}))
            // Not its taints: the unschedulable taint is the node lifecycle controller's, which
            // the model plays and the bare server has not.
            .pick(&["/spec/unschedulable"]),
        step("a cordon that is not a boolean", "PATCH", path.clone())
            .body(STRATEGIC, json!({"spec": {"unschedulable": "yes"}})),
        step("uncordon", "PATCH", path.clone())
            .body(STRATEGIC, json!({"spec": {"unschedulable": false}}))
            .pick(&["/spec/unschedulable"]),
        step("a label by merge patch", "PATCH", path.clone())
            .body(
                MERGE,
                json!({"metadata": {"labels": {"ferro.example/probe": "1"}}}),
            )
            .pick(&["/metadata/labels/ferro.example~1probe"]),
        step("the label removed", "PATCH", path.clone())
            .body(
                MERGE,
                json!({"metadata": {"labels": {"ferro.example/probe": null}}}),
            )
            .pick(&["/metadata/labels/ferro.example~1probe"]),
        step("a Node that is not there", "PATCH", "/api/v1/nodes/absent")
            .body(STRATEGIC, json!({"spec": {"unschedulable": true}})),
        step("a label that is not a string", "PATCH", path.clone())
            .body(
                MERGE,
                json!({"metadata": {"labels": {"ferro.example/probe": 1}}}),
            )
            .message_end(),
        step("delete the Node", "DELETE", path.clone()).pick(&[
            "/kind",
            "/status",
            "/details/name",
            "/details/kind",
        ]),
        step("the Node is gone", "GET", path.clone()),
        step("delete it again", "DELETE", path),
    ]
}

/// The entry of `resource` in a discovery answer, with its verbs sorted.
fn discovered(list: &Value, resource: &str) -> Value {
    let mut entry = list["resources"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == resource))
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(verbs) = entry.get_mut("verbs").and_then(Value::as_array_mut) {
        verbs.sort_by_key(|v| v.to_string());
    }
    if let Some(e) = entry.as_object_mut() {
        // The storage version hash is the server's digest of its storage version; the model
        // does not compute it.
        e.remove("storageVersionHash");
    }
    entry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_api_answers_as_upstreams_api_server() {
    // Started from the test's own thread, which outlives both servers (they die with it).
    let Some(real) = RealApi::start() else {
        return;
    };
    let cluster = bootstrapped(1, 0).await;
    // The simulated control plane's Node is the kubelet's; on the real server the test registers
    // one of the same name, as a kubelet would, so the same Node requests go to both.
    let (_, nodes) = cluster.kube_request(0, "GET", "/api/v1/nodes", None, b"");
    let node = nodes["items"][0]["metadata"]["name"]
        .as_str()
        .expect("the control plane registers its Node")
        .to_string();
    let registered = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}});
    let (code, answer) = real.request(
        "POST",
        "/api/v1/nodes",
        JSON,
        registered.to_string().as_bytes(),
    );
    assert_eq!(code, 201, "{answer}");
    let mut differences = Vec::new();
    for s in steps().into_iter().chain(node_steps(&node)) {
        let body = if s.body.is_null() {
            Vec::new()
        } else {
            s.body.to_string().into_bytes()
        };
        let (mcode, model) = cluster.kube_request(0, s.method, &s.path, s.content_type, &body);
        let (rcode, upstream) = real.request(s.method, &s.path, s.content_type, &body);
        let mut mine = view(mcode, &model, s.pick);
        let mut theirs = view(rcode, &upstream, s.pick);
        if s.message_end {
            for v in [&mut mine, &mut theirs] {
                let end = v["message"]
                    .as_str()
                    .and_then(|m| m.rsplit_once(": "))
                    .map(|(_, end)| end.to_string());
                v["message"] = json!(end);
            }
        }
        if s.owners && mcode < 400 {
            mine["owners"] = owners(&model);
            theirs["owners"] = owners(&upstream);
        }
        if s.path == "/api/v1" {
            mine["configmaps"] = discovered(&model, "configmaps");
            theirs["configmaps"] = discovered(&upstream, "configmaps");
        }
        if s.path == "/apis/apps/v1" {
            mine["daemonsets"] = discovered(&model, "daemonsets");
            theirs["daemonsets"] = discovered(&upstream, "daemonsets");
        }
        if mine != theirs {
            differences.push(format!(
                "{} ({} {}):\n  model:    {mine}\n  upstream: {theirs}",
                s.what, s.method, s.path
            ));
        }
    }
    cluster.shutdown().await;
    assert!(
        differences.is_empty(),
        "the model answers otherwise than kube-apiserver {}:\n{}",
        ferro_talos_oracle::KUBE_APISERVER_VERSION,
        differences.join("\n")
    );
}
