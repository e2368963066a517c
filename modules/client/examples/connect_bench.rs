//! Benchmark (prints figures, asserts nothing): the wall time of a process that connects to a
//! simulated node with mutual TLS and calls Version, beside the floor measured in the same run:
//! a fresh TLS handshake plus one gRPC call inside an already running process.
//!
//!     cargo run --release -p ferro-talos-client --example connect_bench

use std::process::Command;
use std::time::{Duration, Instant};

use ferro_talos_client::{
    Apply, ApplyMode, ConnectOptions, Credentials, TalosClient, wait_for_reboot,
};
use ferro_talos_sim::sample::SampleCluster;
use ferro_talos_sim::{Cluster, SimConfig};

const RUNS: usize = 30;

/// The child process reads the bundle the parent generated from this file.
const SECRETS_VARIABLE: &str = "CONNECT_BENCH_SECRETS";

fn credentials(bundle: &ferro_talos_secrets::Bundle) -> Credentials {
    Credentials::from_bundle(bundle, &["os:admin"], Duration::from_secs(3600)).unwrap()
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // Child mode: one connection and one Version call, as a module process would do.
    if let Some(endpoint) = std::env::args().nth(1) {
        let secrets = std::fs::read_to_string(std::env::var(SECRETS_VARIABLE).unwrap()).unwrap();
        let bundle = ferro_talos_secrets::Bundle::from_yaml(&secrets).unwrap();
        let client =
            TalosClient::connect(&endpoint, &credentials(&bundle), ConnectOptions::default())
                .await
                .unwrap();
        client.version().await.unwrap();
        return;
    }
    let b: u8 = rand_octet();
    let cluster = Cluster::start(SimConfig {
        control_planes: 1,
        base_address: std::net::Ipv4Addr::new(127, 201, b, 1),
        port: 0,
        reboot_downtime: Duration::from_millis(100),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let endpoint = cluster.endpoint(0).unwrap().to_string();
    let sample = SampleCluster::generate();
    let config = sample.controlplane;
    let secrets_dir = tempfile::tempdir().unwrap();
    let secrets_file = secrets_dir.path().join("secrets.yaml");
    std::fs::write(&secrets_file, sample.bundle.to_yaml()).unwrap();
    let maintenance = TalosClient::connect_maintenance(&endpoint, ConnectOptions::default())
        .await
        .unwrap();
    maintenance
        .apply_configuration(config.as_bytes(), ApplyMode::Auto, Apply::ForReal, None)
        .await
        .unwrap();
    let creds = credentials(&sample.bundle);
    wait_for_reboot(
        &endpoint,
        None,
        &creds,
        None,
        Duration::from_secs(30),
        Duration::from_millis(100),
    )
    .await
    .unwrap();

    let mut floor = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let client = TalosClient::connect(&endpoint, &creds, ConnectOptions::default())
            .await
            .unwrap();
        client.version().await.unwrap();
        floor.push(start.elapsed());
    }
    let me = std::env::current_exe().unwrap();
    let mut process = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let out = Command::new(&me)
            .arg(&endpoint)
            .env(SECRETS_VARIABLE, &secrets_file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        process.push(start.elapsed());
    }
    let (p, f) = (median(process), median(floor));
    println!("process: connect with mTLS + Version, median of {RUNS}: {p:.1} ms (target: 15 ms)");
    println!(
        "floor: TLS handshake + one gRPC call in a running process, median of {RUNS}: {f:.1} ms"
    );
    println!("ratio: {:.1}x", p / f);
    cluster.shutdown().await;
}

fn rand_octet() -> u8 {
    (std::process::id() % 250) as u8
}
