//! The control protocol served by a running cluster: the JSON lines the Python tests send get
//! the replies they read, and the typed client sees the same.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use ferro_talos_sim::control::{ControlClient, FaultChange, FaultFields, NodeRef, Reply, Request};
use ferro_talos_sim::{Cluster, FaultKind, SimConfig};
use serde_json::Value;

/// One raw line, as `Sim.control(**request)` sends it, and the reply as JSON.
fn raw(control: SocketAddr, line: &str) -> Value {
    let mut s = TcpStream::connect(control).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).unwrap();
    assert!(reply.ends_with('\n'), "one line per reply: {reply:?}");
    serde_json::from_str(&reply).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_requests_get_the_replies_they_read() {
    let cluster = Cluster::start(SimConfig {
        control_address: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        ..common::config(2, 1)
    })
    .await
    .unwrap();
    let control = cluster.control_address().unwrap();
    let worker = cluster.node(2).unwrap().address.to_string();

    tokio::task::spawn_blocking(move || {
        let r = raw(control, r#"{"op": "status"}"#);
        assert_eq!(r["ok"], true, "{r}");
        let nodes = r["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 3);
        for key in ["index", "address", "role", "hostname", "maintenance", "version", "boot_id", "faults"] {
            assert!(nodes[0].get(key).is_some(), "status node has {key}: {r}");
        }
        assert_eq!(r["bootstrapped"], false);
        assert_eq!(r["etcd_members"], 0);
        assert_eq!(r["reboot_downtime_ms"], 300);

        let ok = |line: &str| {
            let r = raw(control, line);
            assert_eq!(r, serde_json::json!({"ok": true}), "{line}");
        };
        ok(r#"{"op": "fault", "node": 1, "etcd_down": true}"#);
        ok(r#"{"op": "fault", "node": 1, "kind": "slow", "delay_ms": 2000}"#);
        ok(&format!(
            r#"{{"op": "fault", "node": "{worker}", "next_address": "127.0.21.77", "reject_config": "no"}}"#
        ));
        let client = ControlClient::new(control);
        let s = client.status().unwrap();
        assert!(s.nodes[1].faults.etcd_down);
        assert_eq!(s.nodes[1].faults.slow_ms, Some(2000));
        assert_eq!(s.nodes[2].faults.next_address, Some("127.0.21.77".parse().unwrap()));
        // null clears one fault and leaves the others.
        ok(r#"{"op": "fault", "node": 2, "next_address": null}"#);
        let f = client.status().unwrap().nodes[2].faults.clone();
        assert_eq!((f.next_address, f.reject_config.as_deref()), (None, Some("no")));
        ok(r#"{"op": "clear_faults", "node": 1}"#);
        assert_eq!(client.status().unwrap().nodes[1].faults, Default::default());

        ok(r#"{"op": "health_fail", "text": "node x is not ready"}"#);
        assert_eq!(client.status().unwrap().health_fail.as_deref(), Some("node x is not ready"));
        ok(r#"{"op": "health_fail", "text": null}"#);
        assert_eq!(client.status().unwrap().health_fail, None);
        ok(r#"{"op": "set_version", "node": 0, "version": "v1.12.4"}"#);
        assert_eq!(client.status().unwrap().nodes[0].version, "v1.12.4");
        ok(r#"{"op": "downtime", "ms": 250}"#);
        assert_eq!(client.status().unwrap().reboot_downtime_ms, 250);
        ok(r#"{"op": "boot_media", "node": 0, "attached": false}"#);
        assert!(!client.status().unwrap().nodes[0].boot_media);

        let r = raw(control, r#"{"op": "kube"}"#);
        assert_eq!(r["ok"], true);
        assert!(r["nodes"].is_array() && r["pods"].is_array() && r["log"].is_array(), "{r}");

        let r = raw(control, r#"{"op": "reboot", "node": 1}"#);
        assert_eq!(r["ok"], true);
        assert!(!r["actor_id"].as_str().unwrap().is_empty(), "{r}");

        let refused = |line: &str, want: &str| {
            let r = raw(control, line);
            assert_eq!(r["ok"], false, "{line}: {r}");
            let e = r["error"].as_str().unwrap();
            assert!(e.contains(want), "{line}: {e}");
        };
        refused(r#"{"op": "power_on", "node": 0}"#, "node 0 is already up");
        refused(r#"{"op": "fault", "node": 9, "never_return": true}"#, "no node 9: the cluster has 3 nodes");
        refused(r#"{"op": "fault", "node": "10.1.1.1", "never_return": true}"#, "no node with address or hostname");
        refused(r#"{"op": "fault", "node": 1, "kind": "slow"}"#, "needs \"delay_ms\"");
        refused(
            r#"{"op": "workload", "namespace": "default", "name": "web", "replicas": 2, "min_available": 1}"#,
            "not bootstrapped",
        );
        refused(r#"{"op": "explode"}"#, "unknown op \"explode\"; expected one of status,");

        // The typed client: a refusal is an error with the simulator's reason.
        let e = client
            .send(&Request::Fault {
                node: NodeRef::Index(7),
                change: FaultChange::Kind { kind: FaultKind::EtcdDown, delay_ms: None },
            })
            .unwrap_err();
        assert!(e.to_string().contains("no node 7"), "{e}");
        let r = client
            .send(&Request::Fault {
                node: NodeRef::Index(0),
                change: FaultChange::Fields(FaultFields {
                    never_return: Some(true),
                    ..FaultFields::default()
                }),
            })
            .unwrap();
        assert!(matches!(r, Reply::Done), "{r:?}");
        assert!(client.status().unwrap().nodes[0].faults.never_return);

        let r = raw(control, r#"{"op": "stop"}"#);
        assert_eq!(r, serde_json::json!({"ok": true, "stopping": true}));
    })
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(5), cluster.stop_requested())
        .await
        .expect("stop asks the simulator to stop");
    cluster.shutdown().await;
}
