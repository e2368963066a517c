//! Telling node modes apart and waiting for a node to come back from a reboot.

use std::time::{Duration, Instant};

use crate::client::{ConnectOptions, TalosClient};
use crate::credentials::Credentials;
use crate::error::{ClientError, ErrorKind, Result, human_duration};
use ferro_talos_proto::resource::runtime::MachineStage;

/// What a node at an endpoint currently is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeMode {
    /// Serves without client certificates and has no machine config.
    Maintenance,
    /// Requires mutual TLS: it has a machine config.
    Configured,
    /// Nothing answered (refused, timed out, no route).
    Unreachable,
}

/// Probe an endpoint without credentials. A node in maintenance mode completes the
/// TLS handshake without a client certificate and answers Version without
/// `features`; a configured node rejects the connection ("certificate required").
///
/// With TLS 1.3 a configured node's "certificate required" alert reaches the client only on the
/// first read, and depending on timing it surfaces as a reset, a cancelled call or an alert. So
/// an unclear answer is asked again, and a node that keeps answering the handshake but refuses
/// a certificate-less client is taken as configured: the mutual-TLS connection that follows
/// reports the precise error if it is anything else.
pub async fn probe(endpoint: &str, opts: &ConnectOptions) -> Result<NodeMode> {
    const ATTEMPTS: u32 = 3;
    let mut last = Ok(NodeMode::Unreachable);
    for attempt in 1..=ATTEMPTS {
        last = probe_once(endpoint, opts).await;
        match &last {
            Ok(NodeMode::Maintenance) | Ok(NodeMode::Configured) => return last,
            Err(e) if matches!(e.kind, ErrorKind::Credentials | ErrorKind::InvalidEndpoint) => {
                return last;
            }
            _ if attempt < ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(150 * u64::from(attempt))).await;
            }
            _ => {}
        }
    }
    match last {
        Err(_) => Ok(NodeMode::Configured),
        other => other,
    }
}

async fn probe_once(endpoint: &str, opts: &ConnectOptions) -> Result<NodeMode> {
    let mut opts = opts.clone();
    opts.read_retries = 0;
    let client = match TalosClient::connect_maintenance(endpoint, opts).await {
        Ok(c) => c,
        Err(e) => return classify_probe(e),
    };
    match client.version().await {
        Ok(v) if v.features.is_none() => Ok(NodeMode::Maintenance),
        // Only a configured node fills `features`; seeing it here would mean the
        // node served us without a client certificate, which Talos never does.
        Ok(_) => Ok(NodeMode::Configured),
        Err(e) => classify_probe(e),
    }
}

fn classify_probe(e: ClientError) -> Result<NodeMode> {
    match e.kind {
        ErrorKind::ClientCertRejected | ErrorKind::PermissionDenied => Ok(NodeMode::Configured),
        ErrorKind::Unreachable | ErrorKind::ConnectionClosed | ErrorKind::Timeout => {
            Ok(NodeMode::Unreachable)
        }
        _ => Err(e.during("probe node mode")),
    }
}

/// How a node came back from a reboot.
#[derive(Debug, Clone)]
pub struct RebootDone {
    /// The new boot ID, when it could be read.
    pub boot_id: Option<String>,
    /// Talos version tag reported after the reboot.
    pub version_tag: String,
}

/// Poll `endpoint` (targeting `node` through it when given) until the node answers
/// again after a reboot. With `old_boot_id`, success is a different boot ID; without
/// it (the role may not read it, or the node was in maintenance mode), success is
/// answering with our credentials after having been unreachable or having refused
/// them. Each poll uses a fresh connection. Ends with a `Timeout` error naming the
/// last state seen at `timeout`; fails at once on problems waiting cannot fix
/// (expired or unusable credentials, a role that may not call Version).
pub async fn wait_for_reboot(
    endpoint: &str,
    node: Option<&str>,
    creds: &Credentials,
    old_boot_id: Option<&str>,
    timeout: Duration,
    poll_interval: Duration,
) -> Result<RebootDone> {
    let started = Instant::now();
    let deadline = started + timeout;
    let target = node.unwrap_or(endpoint).to_string();
    let mut went_away = false;
    let mut last_state = String::from("no answer yet");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::new(
                &target,
                "wait for reboot",
                ErrorKind::Timeout,
                format!(
                    "the node did not come back within {} (last state: {last_state}); \
                     check its console, or whether it came back on another address",
                    human_duration(timeout)
                ),
            ));
        }
        match poll_once(endpoint, node, creds, attempt_options(left)).await {
            Ok((boot_id, tag)) => {
                let changed = match (old_boot_id, &boot_id) {
                    (Some(old), Some(new)) => old != new,
                    _ => went_away,
                };
                if changed {
                    return Ok(RebootDone {
                        boot_id,
                        version_tag: tag,
                    });
                }
                last_state = "answering, but not rebooted yet".into();
            }
            Err(e) => {
                match e.kind {
                    // Problems on our side that waiting cannot fix.
                    ErrorKind::Credentials
                    | ErrorKind::ClientCertExpired
                    | ErrorKind::InvalidEndpoint
                    | ErrorKind::PermissionDenied => return Err(e.during("wait for reboot")),
                    // Everything else means "not the node we expect yet": down,
                    // still booting, or still presenting its maintenance
                    // certificate (a node leaving maintenance mode shows a
                    // self-signed certificate until it reboots). A success after
                    // any of these is a node that went away and came back.
                    _ => went_away = true,
                }
                last_state = e.to_string();
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(poll_interval.min(left)).await;
    }
}

/// One poll's connection options while waiting, with `left` of the wait remaining: a fresh
/// connection, no retries, and a limit that gives the last attempt a fair chance rather than a
/// sliver of time that would turn "not back yet" into a misleading timeout.
fn attempt_options(left: Duration) -> ConnectOptions {
    let limit = left.clamp(Duration::from_secs(1), Duration::from_secs(10));
    ConnectOptions {
        connect_timeout: limit,
        call_timeout: limit,
        stream_timeout: limit,
        read_retries: 0,
        ..ConnectOptions::default()
    }
}

async fn poll_once(
    endpoint: &str,
    node: Option<&str>,
    creds: &Credentials,
    opts: ConnectOptions,
) -> Result<(Option<String>, String)> {
    let client = TalosClient::connect(endpoint, creds, opts).await?;
    let client = match node {
        Some(n) => client.with_node(n),
        None => client,
    };
    let version = client.version().await?;
    let tag = version.version.map(|v| v.tag).unwrap_or_default();
    let boot_id = client.boot_id().await?;
    Ok((boot_id, tag))
}

/// How a node came up after its first config.
#[derive(Debug, Clone)]
pub struct FirstBoot {
    /// The boot ID it runs with, when it could be read.
    pub boot_id: Option<String>,
    /// The wait saw it reboot after it first answered with mutual TLS: the install reboot of a
    /// node booted from installation media. False when Talos was installed already and it
    /// booted on without one.
    pub install_reboot: bool,
    /// The node's boot waits for etcd: a control plane stays BOOTING until etcd is bootstrapped
    /// or lets it join. False once it is RUNNING.
    pub waiting_for_etcd: bool,
}

/// After a first config: poll with mutual TLS until the node's MachineStatus says RUNNING.
///
/// Upstream (v1.13.9) the node answers with mutual TLS as soon as it holds the config, before
/// anything else happens (`internal/app/machined/pkg/controllers/config/acquire.go`); booted from
/// installation media it then installs and reboots (stages INSTALLING, REBOOTING, BOOTING,
/// RUNNING), installed already it boots on (BOOTING, RUNNING) with no reboot
/// (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go`). So the first mutual-TLS
/// answer means nothing yet: RUNNING ends the wait, and so does BOOTING while the etcd service
/// waits in its pre stage. A control plane's boot ends only once its etcd is up
/// (`StartAllServices` in `v1alpha1_sequencer_tasks.go`, etcd's `buildInitialCluster` in
/// `internal/app/machined/pkg/system/services/etcd.go` @ v1.14.1), so before bootstrap it stays
/// BOOTING; upstream's own bootstrapper accepts BOOTING for that reason (`pkg/cluster/
/// bootstrap.go`). Neither waits for `ready`, which needs the Kubernetes API.
pub async fn wait_until_running(
    endpoint: &str,
    node: Option<&str>,
    creds: &Credentials,
    timeout: Duration,
    poll_interval: Duration,
) -> Result<FirstBoot> {
    let started = Instant::now();
    let deadline = started + timeout;
    let target = node.unwrap_or(endpoint).to_string();
    let mut first_boot_id: Option<String> = None;
    let mut answered = false;
    let mut went_away = false;
    let mut last_state = String::from("no answer yet");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::new(
                &target,
                "wait for the first boot",
                ErrorKind::Timeout,
                format!(
                    "the node was not running its config within {} (last state: {last_state}); \
                     check its console, or whether it came back on another address",
                    human_duration(timeout)
                ),
            ));
        }
        match poll_stage(endpoint, node, creds, attempt_options(left)).await {
            Ok(polled) => {
                if !answered {
                    answered = true;
                    first_boot_id.clone_from(&polled.boot_id);
                }
                let waiting_for_etcd = polled.stage == MachineStage::Booting && polled.etcd_waits;
                if polled.stage == MachineStage::Running || waiting_for_etcd {
                    let rebooted_since = match (&first_boot_id, &polled.boot_id) {
                        (Some(first), Some(now)) => first != now,
                        _ => false,
                    };
                    return Ok(FirstBoot {
                        boot_id: polled.boot_id,
                        install_reboot: went_away || rebooted_since,
                        waiting_for_etcd,
                    });
                }
                last_state = format!("answering, stage {}", stage_name(polled.stage));
            }
            Err(e) => {
                match e.kind {
                    ErrorKind::Credentials
                    | ErrorKind::ClientCertExpired
                    | ErrorKind::InvalidEndpoint
                    | ErrorKind::PermissionDenied => {
                        return Err(e.during("wait for the first boot"));
                    }
                    // Down (the install reboot), or not serving our certificate yet (a worker
                    // waits for a control plane's trustd).
                    _ => went_away |= answered,
                }
                last_state = e.to_string();
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(poll_interval.min(left)).await;
    }
}

/// What one poll of a booting node saw.
struct Polled {
    stage: MachineStage,
    boot_id: Option<String>,
    /// In BOOTING: the etcd service waits in its pre stage (`Preparing`), which is where a
    /// control plane's etcd waits to join or to be bootstrapped.
    etcd_waits: bool,
}

async fn poll_stage(
    endpoint: &str,
    node: Option<&str>,
    creds: &Credentials,
    opts: ConnectOptions,
) -> Result<Polled> {
    let client = TalosClient::connect(endpoint, creds, opts).await?;
    let client = match node {
        Some(n) => client.with_node(n),
        None => client,
    };
    let status = client.machine_status().await?;
    let boot_id = client.boot_id().await?;
    let etcd_waits = status.stage == MachineStage::Booting
        && client
            .service_list()
            .await?
            .iter()
            .any(|s| s.id == "etcd" && s.state == "Preparing");
    Ok(Polled {
        stage: status.stage,
        boot_id,
        etcd_waits,
    })
}

fn stage_name(stage: MachineStage) -> &'static str {
    match stage {
        MachineStage::Unknown => "unknown",
        MachineStage::Booting => "booting",
        MachineStage::Installing => "installing",
        MachineStage::Maintenance => "maintenance",
        MachineStage::Running => "running",
        MachineStage::Rebooting => "rebooting",
        MachineStage::ShuttingDown => "shutting down",
        MachineStage::Resetting => "resetting",
        MachineStage::Upgrading => "upgrading",
    }
}

/// A sequence that a node started in the background (a legacy upgrade, a reset) and that
/// failed, as the node published it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceFailure {
    /// The sequence's name, such as `upgrade`.
    pub sequence: String,
    /// The node's own words, such as `sequence failed: error running phase 9 in upgrade
    /// sequence: …`.
    pub message: String,
    /// The phases the sequence started, in order, as its PhaseEvents named them: the last one is
    /// the phase that failed (empty when the node published none for this actor).
    pub phases: Vec<String>,
}

impl SequenceFailure {
    /// The phase that failed: the last one the sequence started (None when it named none).
    pub fn failed_phase(&self) -> Option<&str> {
        self.phases.last().map(String::as_str)
    }
}

/// Waits for the failure of the sequence `actor_id` started: upstream's controller publishes a
/// SequenceEvent with an error and that actor id when a background sequence fails
/// (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_controller.go`, Run), which is how
/// `talosctl upgrade --wait` tells a failed legacy upgrade from a slow one. Replays what the node
/// buffered first, so a failure published before the watch started is still seen. Never returns
/// while the node keeps quiet or goes away (a reboot ends the stream): race it against the wait
/// for the reboot. The controller's `runPhase` publishes a PhaseEvent START for each phase with
/// the same actor id, and the failure comes after the failed phase's STOP, so the phases started
/// tell how far the sequence got.
pub async fn sequence_failure(client: &TalosClient, actor_id: &str) -> SequenceFailure {
    use ferro_talos_proto::machine::{EventsRequest, PhaseEvent, SequenceEvent, phase_event};
    use prost::Message;
    let request = EventsRequest {
        tail_events: -1,
        with_actor_id: actor_id.to_string(),
        ..Default::default()
    };
    let Ok(mut events) = client.events(request).await else {
        return std::future::pending().await;
    };
    let mut phases = Vec::new();
    // The stream is open for as long as the node is up; a quiet minute is no reason to stop.
    loop {
        match events.next(Duration::from_secs(3600)).await {
            Ok(Some(event)) => {
                let Some(data) = event.data else {
                    continue;
                };
                if data.type_url == "talos/runtime/machine.PhaseEvent" {
                    if let Ok(p) = PhaseEvent::decode(data.value.as_slice())
                        && p.action == phase_event::Action::Start as i32
                    {
                        phases.push(p.phase);
                    }
                    continue;
                }
                if data.type_url != "talos/runtime/machine.SequenceEvent" {
                    continue;
                }
                let Ok(seq) = SequenceEvent::decode(data.value.as_slice()) else {
                    continue;
                };
                if let Some(error) = seq.error {
                    return SequenceFailure {
                        sequence: seq.sequence,
                        message: error.message,
                        phases,
                    };
                }
            }
            Ok(None) | Err(_) => return std::future::pending().await,
        }
    }
}
