//! The `talos-sim` subcommands against real processes: a cluster kept in a state directory
//! survives stop/up (configs byte for byte, boot id, etcd, versions, client credentials over
//! real mTLS), `stop`/`status`/`up` report misuse clearly, and the `slow` fault makes a client
//! deadline expire with the node named.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use ferro_talos_client::{
    Apply, ApplyMode, ConnectOptions, Credentials, ErrorKind, RebootMode, TalosClient,
    containerd_system, wait_for_reboot,
};
use ferro_talos_sim::sample::SampleCluster;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_talos-sim");
/// One bundle and its control-plane config per test binary, from the collection's generator.
static SAMPLE: std::sync::LazyLock<SampleCluster> =
    std::sync::LazyLock::new(SampleCluster::generate);

/// The sample config with a comment, so its bytes are recognisably the ones applied.
fn controlplane_config() -> String {
    let cfg = &SAMPLE.controlplane;
    format!("# kept across restarts\n{cfg}")
}

/// A random 127.x.y.1 block no other test binary uses (they take 100-249).
fn base_address() -> String {
    let b: [u8; 2] = rand::random();
    format!("127.{}.{}.1", 50 + b[0] % 50, b[1])
}

/// A running `talos-sim up`; killed if a test fails before stopping it.
struct Up {
    child: Child,
    ready: Value,
    /// The human-readable lines printed before READY.
    text: String,
}

impl Drop for Up {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Up {
    fn endpoint(&self, i: usize) -> String {
        let n = &self.ready["nodes"][i];
        format!("{}:{}", n["address"].as_str().unwrap(), n["port"])
    }
}

fn up(dir: &Path, args: &[&str]) -> Up {
    let child = Command::new(BIN)
        .arg("up")
        .arg("--state-dir")
        .arg(dir)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Owned by `Up` at once, so a failed assertion below still kills and reaps it.
    let mut u = Up {
        child,
        ready: Value::Null,
        text: String::new(),
    };
    let mut out = BufReader::new(u.child.stdout.take().unwrap());
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "talos-sim up ended before READY; output so far:\n{}",
            u.text
        );
        if let Some(json) = line.strip_prefix("READY ") {
            u.ready = serde_json::from_str(json).unwrap();
            return u;
        }
        u.text.push_str(&line);
    }
}

fn sim(args: &[&str], dir: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .arg("--state-dir")
        .arg(dir)
        .output()
        .unwrap()
}

/// For `up` invocations that must fail: never hang the test if one starts serving instead.
fn sim_failing(args: &[&str], dir: &Path) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .arg("--state-dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    panic!(
        "talos-sim {args:?} did not fail: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn status_json(dir: &Path) -> Value {
    let o = sim(&["status", "--json"], dir);
    assert!(o.status.success(), "status failed: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn stop(mut u: Up, dir: &Path) {
    let o = sim(&["stop"], dir);
    assert!(o.status.success(), "stop failed: {}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("stopped"));
    // `stop` returns only once the simulator has exited.
    let code = u.child.try_wait().unwrap();
    let code = match code {
        Some(c) => c,
        None => {
            // Exited but maybe not reaped by us yet: wait briefly.
            std::thread::sleep(Duration::from_millis(200));
            u.child
                .try_wait()
                .unwrap()
                .expect("talos-sim still runs after stop")
        }
    };
    assert!(code.success(), "exit status {code:?}");
    assert!(!dir.join("run.json").exists(), "run.json removed on exit");
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        connect_timeout: Duration::from_secs(5),
        call_timeout: Duration::from_secs(10),
        stream_timeout: Duration::from_secs(30),
        ..ConnectOptions::default()
    }
}

async fn wait_back(ep: &str, creds: &Credentials, old: Option<&str>) {
    wait_for_reboot(
        ep,
        None,
        creds,
        old,
        Duration::from_secs(20),
        Duration::from_millis(100),
    )
    .await
    .unwrap();
}

/// Applies the control-plane config to a maintenance-mode node through the real client and waits
/// until it is back configured; returns the config and admin credentials that stand for a
/// talosconfig written once and kept.
async fn configure(ep: &str) -> (String, Credentials) {
    let bundle = SAMPLE.bundle.clone();
    let creds =
        Credentials::from_bundle(&bundle, &["os:admin"], Duration::from_secs(3600)).unwrap();
    let config = controlplane_config();
    let m = TalosClient::connect_maintenance(ep, opts()).await.unwrap();
    m.apply_configuration(config.as_bytes(), ApplyMode::Auto, Apply::ForReal, None)
        .await
        .unwrap();
    wait_back(ep, &creds, None).await;
    (config, creds)
}

/// etcd may need a moment after bootstrap before it lists members.
async fn members(c: &TalosClient) -> usize {
    for _ in 0..50 {
        if let Ok(m) = c.etcd_member_list().await
            && !m.is_empty()
        {
            return m.len();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no etcd members");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_cluster_survives_stop_and_up() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().join("cluster");
    let base = base_address();
    let first = up(
        &dir,
        &[
            "--controlplanes",
            "1",
            "--workers",
            "1",
            "--talos-version",
            "1.13.4",
            "--base-address",
            &base,
            "--port",
            "0",
            "--reboot-downtime-ms",
            "200",
            // Bootstrap right away; tests/bootstrap.rs covers the settling time.
            "--bootstrap-settle-ms",
            "0",
        ],
    );
    assert!(
        first.text.contains("started a new cluster"),
        "{}",
        first.text
    );
    assert!(
        first.text.contains(&base),
        "addresses printed: {}",
        first.text
    );
    assert_eq!(first.ready["nodes"][0]["version"], "v1.13.4");
    let ep = first.endpoint(0);
    let worker_ep = first.endpoint(1);

    // Configure node 0 through the real client.
    let (config, creds) = configure(&ep).await;
    let c = TalosClient::connect(&ep, &creds, opts()).await.unwrap();
    c.bootstrap().await.unwrap();
    assert_eq!(members(&c).await, 1);
    // An upgrade installs v1.13.6 for the next boot.
    let image = "ghcr.io/siderolabs/installer:v1.13.6";
    c.image_pull(image, containerd_system()).await.unwrap();
    let outcome = c
        .lifecycle_upgrade(image, containerd_system())
        .await
        .unwrap();
    assert_eq!(outcome.exit_code, 0, "{:?}", outcome.lines);
    let boot_before = c.boot_id().await.unwrap().expect("admin reads boot_id");
    drop(c);

    // The state directory holds the applied bytes under their digest.
    let state: Value =
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap();
    let name = state["nodes"][0]["running_config"].as_str().unwrap();
    assert_eq!(
        std::fs::read(dir.join(name)).unwrap(),
        config.as_bytes(),
        "config stored byte for byte"
    );
    assert_eq!(state["nodes"][0]["pending_version"], "v1.13.6");
    assert_eq!(state["nodes"][1]["running_config"], Value::Null);
    assert!(state["etcd_members"].is_array());

    let running = status_json(&dir);
    assert_eq!(running["running"], true);
    assert_eq!(running["bootstrapped"], true);
    assert_eq!(running["nodes"][0]["mode"], "configured");
    assert_eq!(running["nodes"][0]["state"], "up");
    assert_eq!(running["nodes"][1]["mode"], "maintenance");

    stop(first, &dir);
    let stopped = status_json(&dir);
    assert_eq!(stopped["running"], false);
    assert_eq!(stopped["nodes"][0]["mode"], "configured");
    assert_eq!(stopped["nodes"][0]["state"], "stopped");
    assert_eq!(stopped["nodes"][0]["pending_version"], "v1.13.6");
    let table = sim(&["status"], &dir);
    assert!(table.status.success());
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.contains("stopped"), "{table}");
    assert!(table.contains("configured"), "{table}");

    // Up again from the directory alone: same nodes, same addresses, same everything.
    let second = up(&dir, &[]);
    assert!(second.text.contains("brought back"), "{}", second.text);
    assert_eq!(second.endpoint(0), ep);
    assert_eq!(second.endpoint(1), worker_ep);
    let c = TalosClient::connect(&ep, &creds, opts()).await.unwrap();
    assert_eq!(c.get_machine_config().await.unwrap(), config.as_bytes());
    assert_eq!(
        c.boot_id().await.unwrap().as_deref(),
        Some(boot_before.as_str()),
        "a simulator restart is not a node reboot"
    );
    assert_eq!(members(&c).await, 1);
    let err = c.bootstrap().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::AlreadyExists, "{err}");
    assert_eq!(c.version().await.unwrap().version.unwrap().tag, "v1.13.4");
    // The installed upgrade takes effect at the next boot.
    c.reboot(RebootMode::Default).await.unwrap();
    wait_back(&ep, &creds, Some(&boot_before)).await;
    let c = TalosClient::connect(&ep, &creds, opts()).await.unwrap();
    assert_eq!(c.version().await.unwrap().version.unwrap().tag, "v1.13.6");
    // The worker is still in maintenance mode.
    let w = TalosClient::connect_maintenance(&worker_ep, opts())
        .await
        .unwrap();
    assert!(w.version().await.unwrap().features.is_none());
    drop((c, w));
    stop(second, &dir);

    // And the upgrade is remembered too.
    let third = up(&dir, &[]);
    let c = TalosClient::connect(&ep, &creds, opts()).await.unwrap();
    assert_eq!(c.version().await.unwrap().version.unwrap().tag, "v1.13.6");
    assert_eq!(c.get_machine_config().await.unwrap(), config.as_bytes());
    drop(c);
    stop(third, &dir);
}

#[test]
fn stop_status_and_up_report_misuse_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nothing-here");

    let o = sim(&["status"], &dir);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no talos-sim state in"),
        "{}",
        stderr(&o)
    );
    let o = sim(&["stop"], &dir);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no talos-sim is running"),
        "{}",
        stderr(&o)
    );
    let o = sim(
        &["fault", "--node", "0", "--kind", "slow", "--delay-ms", "5"],
        &dir,
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no talos-sim is running"),
        "{}",
        stderr(&o)
    );

    // A running cluster: a second `up` is refused, flags that contradict the stored cluster too.
    let base = base_address();
    let u = up(
        &dir,
        &[
            "--control-planes",
            "1",
            "--base-address",
            &base,
            "--port",
            "0",
        ],
    );
    let o = sim_failing(&["up"], &dir);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("already serves"), "{}", stderr(&o));
    let o = sim(&["status"], &dir);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("running (pid"), "{text}");
    assert!(text.contains(&base), "{text}");
    assert!(text.contains("maintenance"), "{text}");
    stop(u, &dir);
    let o = sim(&["stop"], &dir);
    assert!(!o.status.success(), "stopping twice fails");
    assert!(
        stderr(&o).contains("no talos-sim is running"),
        "{}",
        stderr(&o)
    );

    let o = sim_failing(
        &["up", "--workers", "2", "--talos-version", "v1.12.0"],
        &dir,
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("--workers 2 (stored: 0)"), "{e}");
    assert!(
        e.contains("--talos-version v1.12.0 (stored: v1.13.6)"),
        "{e}"
    );

    // A damaged state file: a clear error naming the file, never a panic.
    std::fs::write(dir.join("state.json"), b"{\"format\": 1, \"nodes\": [").unwrap();
    for args in [&["status"][..], &["up"][..]] {
        let o = sim_failing(args, &dir);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains("state.json is not a valid talos-sim state file"),
            "{e}"
        );
        assert!(!e.contains("panicked"), "{e}");
    }
    // A state file naming a config that is not there.
    let state = format!(
        r#"{{"format":1,"control_planes":1,"workers":0,"base_address":"{base}","port":0,
        "talos_version":"v1.13.6","reboot_downtime_ms":100,"etcd_members":null,"health_fail":null,
        "nodes":[{{"index":0,"role":"controlplane","hostname":"h","address":"{base}","port":0,
        "up":true,"version":"v1.13.6","pending_version":null,"schematic":null,"boot_id":"b",
        "running_config":"configs/{}.yaml","next_boot_config":null,"etcd_data":false,
        "reboot_pending":false,"config_version":1,"config_updated_unix_ms":0,
        "try_rollback_unix_ms":null}}]}}"#,
        "0".repeat(64)
    );
    std::fs::write(dir.join("state.json"), state).unwrap();
    let o = sim_failing(&["up"], &dir);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("node 0") && e.contains("cannot read"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_answers_run_into_the_client_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let base = base_address();
    let u = up(
        dir,
        &[
            "--controlplanes",
            "2",
            "--base-address",
            &base,
            "--port",
            "0",
        ],
    );
    let ep = u.endpoint(1);
    let short = ConnectOptions {
        call_timeout: Duration::from_millis(400),
        read_retries: 0,
        ..opts()
    };
    let c = TalosClient::connect_maintenance(&ep, short.clone())
        .await
        .unwrap();
    c.version().await.expect("answers in time before the fault");

    let o = sim(
        &[
            "fault",
            "--node",
            "1",
            "--kind",
            "slow",
            "--delay-ms",
            "3000",
        ],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let started = std::time::Instant::now();
    let err = c.version().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the deadline, not the delay, ended it"
    );
    let text = err.to_string();
    let addr = ep.split(':').next().unwrap();
    assert!(text.contains(addr), "the error names the node: {text}");
    assert!(text.contains("timed out"), "{text}");
    assert!(
        text.contains("no answer within 400ms"),
        "the limit that ran out: {text}"
    );
    assert_eq!(status_json(dir)["nodes"][1]["faults"]["slow_ms"], 3000);

    // Only that node is slow.
    let other = TalosClient::connect_maintenance(&u.endpoint(0), short.clone())
        .await
        .unwrap();
    other.version().await.expect("node 0 is not slow");

    // A delay below the deadline only slows the answer down.
    let o = sim(
        &[
            "fault",
            "--node",
            u.ready["nodes"][1]["address"].as_str().unwrap(),
            "--kind",
            "slow",
            "--delay-ms",
            "150",
        ],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let started = std::time::Instant::now();
    c.version().await.expect("answers within the deadline");
    assert!(started.elapsed() >= Duration::from_millis(150));

    let o = sim(&["fault", "--node", "1", "--clear"], dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = TalosClient::connect_maintenance(&ep, short).await.unwrap();
    c.version().await.expect("fast again after clear_faults");
    assert_eq!(
        status_json(dir)["nodes"][1]["faults"]["slow_ms"],
        Value::Null
    );

    let o = sim(&["fault", "--node", "1", "--kind", "slow"], dir);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("delay_ms"), "{}", stderr(&o));
    stop(u, dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_on_disk_before_the_simulator_dies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let base = base_address();
    let mut first = up(
        dir,
        &[
            "--base-address",
            &base,
            "--port",
            "0",
            "--reboot-downtime-ms",
            "200",
        ],
    );
    let ep = first.endpoint(0);
    let (config, creds) = configure(&ep).await;

    // SIGKILL: no shutdown path runs, so whatever is on disk was written when it changed.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);
    assert!(
        dir.join("run.json").exists(),
        "a killed simulator leaves run.json"
    );
    let o = sim(&["stop"], dir);
    assert!(
        !o.status.success(),
        "a stale run.json is not a running simulator"
    );
    assert_eq!(status_json(dir)["nodes"][0]["mode"], "configured");

    let second = up(dir, &[]);
    assert_eq!(second.endpoint(0), ep);
    let c = TalosClient::connect(&ep, &creds, opts()).await.unwrap();
    assert_eq!(c.get_machine_config().await.unwrap(), config.as_bytes());
    drop(c);
    stop(second, dir);
}

#[test]
fn detached_up_returns_once_ready() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let base = base_address();
    let o = Command::new(BIN)
        .args(["up", "--detach", "--base-address", &base, "--port", "0"])
        .arg("--state-dir")
        .arg(dir)
        .output()
        .unwrap();
    // Stop it whatever the assertions below say.
    struct StopOnDrop<'a>(&'a Path);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            let _ = sim(&["stop"], self.0);
        }
    }
    let _guard = StopOnDrop(dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains("READY "), "{out}");
    assert!(out.contains("running in the background"), "{out}");
    let s = status_json(dir);
    assert_eq!(s["running"], true);
    assert_eq!(
        s["nodes"][0]["address"].as_str().unwrap().split(':').next(),
        Some(base.as_str())
    );
    let o = sim(&["stop"], dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(status_json(dir)["running"], false);
}

/// What the pytest fixture runs: a detached simulator in a free block of a list, kept in memory,
/// that stops by itself once its parent process is gone.
#[test]
fn a_detached_in_memory_simulator_takes_a_free_block_and_dies_with_its_parent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut parent = Command::new("sleep").arg("60").spawn().unwrap();
    // A listener in one block of the list: that block is skipped.
    let busy = std::net::TcpListener::bind("127.0.241.1:0");
    let o = Command::new(BIN)
        .args(["up", "--detach", "--in-memory", "--base-address", "auto"])
        .args(["--address-blocks", "241-249", "--controlplanes", "2"])
        .args(["--parent-pid", &parent.id().to_string()])
        .arg("--state-dir")
        .arg(dir)
        .output()
        .unwrap();
    struct StopOnDrop<'a>(&'a Path);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            let _ = sim(&["stop"], self.0);
        }
    }
    let _guard = StopOnDrop(dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let ready: Value = serde_json::from_str(
        out.lines()
            .find_map(|l| l.strip_prefix("READY "))
            .unwrap_or_else(|| panic!("{out}")),
    )
    .unwrap();
    let s = status_json(dir);
    let block = s["block"].as_u64().expect("status --json names the block") as u8;
    assert!((241..=249).contains(&block), "{s}");
    if busy.is_ok() {
        assert_ne!(block, 241, "a block with a listener is skipped");
    }
    let run: Value = serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["block"], block);
    assert_eq!(ready["nodes"][1]["address"], format!("127.0.{block}.2"));
    assert!(
        !dir.join("state.json").exists() && !dir.join("configs").exists(),
        "nothing of the cluster on disk"
    );
    // A second in-memory simulator in the same list gets another block.
    let other = tempfile::tempdir().unwrap();
    let second = up(
        other.path(),
        &[
            "--in-memory",
            "--base-address",
            "auto",
            "--address-blocks",
            "241-249",
        ],
    );
    assert_ne!(
        second.ready["nodes"][0]["address"],
        ready["nodes"][0]["address"]
    );
    let o = sim(&["stop"], other.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("stopped") && !text.contains("state kept"),
        "{text}"
    );
    drop(second);

    // The parent goes: the simulator follows (it checks every 200 ms).
    parent.kill().unwrap();
    parent.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while status_json_or_none(dir).is_some_and(|s| s["running"] == true) {
        assert!(
            std::time::Instant::now() < deadline,
            "still running after its parent exited"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(dir.join("talos-sim.log")).unwrap();
    assert!(log.contains("has exited; stopping"), "{log}");
    assert!(!dir.join("run.json").exists(), "a clean exit: {log}");

    // A directory with a stored cluster is not silently ignored.
    std::fs::write(dir.join("state.json"), b"{}").unwrap();
    let o = sim_failing(&["up", "--in-memory", "--port", "0"], dir);
    assert!(
        stderr(&o).contains("holds a stored cluster"),
        "{}",
        stderr(&o)
    );
    let o = sim_failing(
        &["up", "--parent-pid", "999999999", "--port", "0"],
        other.path(),
    );
    assert!(stderr(&o).contains("no such process"), "{}", stderr(&o));
}

/// `status --json`, or None once the directory holds nothing to show.
fn status_json_or_none(dir: &Path) -> Option<Value> {
    let o = sim(&["status", "--json"], dir);
    o.status
        .success()
        .then(|| serde_json::from_slice(&o.stdout).unwrap())
}
