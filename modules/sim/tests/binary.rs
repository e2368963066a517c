//! The `talos-sim` binary: READY line, control protocol, clean exit on SIGTERM.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

fn control(
    stream: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    req: &str,
) -> serde_json::Value {
    stream.write_all(format!("{req}\n").as_bytes()).unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap()
}

#[test]
fn ready_line_control_protocol_and_sigterm() {
    let b: [u8; 2] = rand::random();
    let base = format!("127.{}.{}.1", 200 + b[0] % 50, b[1]);
    let port = 20000 + rand::random::<u16>() % 30000;
    let control_port = 20000 + rand::random::<u16>() % 30000;
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("sim.pid");
    let mut child = Command::new(env!("CARGO_BIN_EXE_talos-sim"))
        .args([
            "--control-planes",
            "1",
            "--workers",
            "1",
            "--base-address",
            &base,
        ])
        .args(["--port", &port.to_string(), "--node-version", "1=v1.10.7"])
        .args(["--control-address", &format!("127.0.0.1:{control_port}")])
        .arg("--pid-file")
        .arg(&pid_file)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let json = line
        .strip_prefix("READY ")
        .unwrap_or_else(|| panic!("expected READY, got {line:?}"));
    let ready: serde_json::Value = serde_json::from_str(json).unwrap();
    let nodes = ready["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0]["address"], base.as_str());
    assert_eq!(nodes[0]["role"], "controlplane");
    assert_eq!(nodes[1]["role"], "worker");
    assert_eq!(nodes[1]["version"], "v1.10.7");
    assert_eq!(nodes[0]["maintenance"], true);
    assert!(pid_file.exists());
    TcpStream::connect((base.as_str(), port)).expect("node 0 listens");

    let mut stream = TcpStream::connect(ready["control"].as_str().unwrap()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let r = control(
        &mut stream,
        &mut reader,
        r#"{"op":"fault","node":0,"unreachable":true}"#,
    );
    assert_eq!(r["ok"], true, "{r}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        TcpStream::connect((base.as_str(), port)).is_err(),
        "unreachable node refuses connections"
    );
    let r = control(&mut stream, &mut reader, r#"{"op":"status"}"#);
    assert_eq!(r["nodes"][0]["faults"]["unreachable"], true);
    assert_eq!(r["nodes"][0]["listening"], false);
    let r = control(
        &mut stream,
        &mut reader,
        r#"{"op":"clear_faults","node":0}"#,
    );
    assert_eq!(r["ok"], true);
    let r = control(
        &mut stream,
        &mut reader,
        r#"{"op":"fault","node":0,"bogus":true}"#,
    );
    assert_eq!(r["ok"], false);
    assert!(r["error"].as_str().unwrap().contains("unknown fault"));
    let r = control(
        &mut stream,
        &mut reader,
        r#"{"op":"set_version","node":"nope","version":"v1.13.6"}"#,
    );
    assert_eq!(r["ok"], false);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let code = child.wait().unwrap();
    assert!(code.success(), "exit status {code:?}");
    assert!(!pid_file.exists(), "pid file removed on exit");
}
