//! The maintenance-mode run: one spare machine booted into maintenance mode is taken through a
//! first control-plane config, etcd's bootstrap and a reset back to maintenance mode, and what it
//! answered on the way is recorded, normalised as the read-only probes' records are, so the same
//! run against talos-sim compares with it (`tools/conformance --maintenance-node`).
//!
//! Destructive, unlike the rest of this crate: the machine installs Talos and is wiped again.
//! So it needs `--i-understand-this-wipes-the-node`, refuses a node that is not in maintenance
//! mode before anything is sent, and once the config is applied it always ends with the reset,
//! also after a failed step or an interrupt (Ctrl-C, SIGTERM).
//!
//! What upstream does on the way (v1.14.1): after the first config the node installs and reboots
//! when it booted from media, then boots; a control plane's boot waits in StartAllServices for
//! every service, etcd included, whose pre-start step waits to join a cluster until one is
//! bootstrapped (`internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go`
//! StartAllServices, `internal/app/machined/pkg/system/services/etcd.go` argsForControlPlane and
//! buildInitialCluster). Bootstrap is refused with FailedPrecondition until the node's CRI is up
//! and its clock synced (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`
//! Bootstrap). The run records what the node says rather than assuming any of it.

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use ferro_talos_client::proto::machine::{ResetPartitionSpec, ResetRequest, reset_request};
use ferro_talos_client::{
    Apply, ApplyMode, ClientError, ConnectOptions, Credentials, Endpoint, ErrorKind, NodeMode,
    TalosClient, probe,
};
use ferro_talos_config::MachineConfig;
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{GenerateOptions, MachineType, installer_for_release};
use ferro_talos_secrets::{Bundle, TalosConfig};
use serde_json::{Value, json};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::files;
use crate::layout::NodeSummary;
use crate::normalise::Normaliser;
use crate::record::{self, Record};
use crate::rpcs::service_summary;
use crate::shape::Shape;
use crate::timeline::{Seen, Timeline, bucket, stage_name};
use crate::wire_shape;

/// The node's label in the report: a control plane, the first.
pub const LABEL: &str = "cp1";
/// The cluster the run makes (a placeholder in the report).
const CLUSTER_NAME: &str = "conformance";
/// The volumes the reset wipes: the config (STATE) and etcd's data (EPHEMERAL), so the node
/// keeps its installation and comes back in maintenance mode, as `talos_reset` with
/// `wipe: maintenance` and `talosctl reset --system-labels-to-wipe STATE --system-labels-to-wipe
/// EPHEMERAL` do.
const WIPED: [&str; 2] = ["STATE", "EPHEMERAL"];
/// How often a watch asks the node.
const POLL: Duration = Duration::from_millis(500);
/// Between two Bootstrap attempts the node refused as not ready yet (talos_bootstrap's pace).
const BOOTSTRAP_RETRY: Duration = Duration::from_millis(500);
/// How long the run's client certificate is valid: longer than any run.
const CREDENTIALS_VALIDITY: Duration = Duration::from_secs(24 * 3600);

/// The steps of a run, in order; the report lists every one with its outcome.
pub const STEPS: [&str; 12] = [
    "check maintenance mode",
    "render config",
    "apply config",
    "watch MachineStatus until settled",
    "EtcdMemberList before bootstrap",
    "etcd service before bootstrap",
    "bootstrap",
    "watch MachineStatus until running and ready",
    "EtcdMemberList after bootstrap",
    "etcd service after bootstrap",
    "reset",
    "wait for maintenance mode",
];

pub struct Options {
    /// The machine's address (its apid endpoint), as given.
    pub node: String,
    /// The confirmation flag: without it nothing is sent.
    pub confirmed: bool,
    pub install_disk: String,
    /// The installer; default: the release the node runs, from the contract's repository.
    pub install_image: Option<String>,
    /// How long MachineStatus and the etcd service must stay the same before bootstrap.
    pub settle: Duration,
    /// The limit of each wait: until settled, until running and ready, until back in maintenance.
    pub timeout: Duration,
    /// The deadline of each EtcdMemberList.
    pub member_list_deadline: Duration,
}

/// The run's result: the report, and whether the machine is back in maintenance mode.
pub struct Outcome {
    pub report: Value,
    /// None when the machine is back in maintenance mode (or never left it); else why not, with
    /// where the run's talosconfig was kept so the user can reset it by hand.
    pub not_back: Option<String>,
    /// A Ctrl-C or SIGTERM cut the run short (the reset still ran).
    pub interrupted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepOutcome {
    Done,
    Failed,
    TimedOut,
    Skipped,
    Interrupted,
}

impl StepOutcome {
    fn name(self) -> &'static str {
        match self {
            StepOutcome::Done => "done",
            StepOutcome::Failed => "failed",
            StepOutcome::TimedOut => "timed out",
            StepOutcome::Skipped => "skipped",
            StepOutcome::Interrupted => "interrupted",
        }
    }
}

/// What a run has collected so far.
struct Run<'a> {
    opts: &'a Options,
    normaliser: Normaliser,
    records: Vec<Record>,
    /// (step, outcome, when it started relative to the apply).
    steps: Vec<(&'static str, StepOutcome, Option<Duration>)>,
    timelines: Vec<(&'static str, Timeline)>,
    applied_at: Option<Instant>,
}

impl Run<'_> {
    fn step(&mut self, name: &'static str, outcome: StepOutcome, started: Instant) {
        debug_assert!(STEPS.contains(&name));
        let at = self
            .applied_at
            .map(|applied| started.saturating_duration_since(applied));
        self.steps.push((name, outcome, at));
        eprintln!("ferro-talos-conformance: {name}: {}", outcome.name());
    }

    fn failed(&self, probe: &str, started: Instant, e: &ClientError) -> Record {
        Record::new(probe, LABEL, started).failed(e, &self.normaliser)
    }

    /// The report: every step (those never reached as `skipped`), timelines and records.
    fn report(&self, summary: &NodeSummary, contract: Contract) -> Value {
        let mut steps = Vec::new();
        for name in STEPS {
            let entry = self.steps.iter().find(|(s, _, _)| *s == name);
            let (outcome, at) = entry.map_or((StepOutcome::Skipped, None), |(_, o, at)| (*o, *at));
            let mut step = json!({"step": name, "outcome": outcome.name()});
            if let Some(at) = at {
                step["at"] = json!(bucket(at));
            }
            steps.push(step);
        }
        let timelines: serde_json::Map<String, Value> = self
            .timelines
            .iter()
            .map(|(name, t)| (name.to_string(), t.to_json()))
            .collect();
        json!({
            "format": 1,
            "tool": "ferro-talos-conformance",
            "mode": "maintenance",
            "layout": {
                "cluster_name": null,
                "nodes": [summary],
                "endpoint": null,
            },
            "run": {
                "contract": contract.to_string(),
                "install_disk": self.opts.install_disk,
                "settle_s": self.opts.settle.as_secs_f64(),
                "member_list_deadline_s": self.opts.member_list_deadline.as_secs_f64(),
                "wiped": WIPED,
            },
            "steps": steps,
            "timelines": timelines,
            "records": self.records,
        })
    }
}

/// One call's options: a fresh connection each time (the node reboots under the watches), no
/// retries (a retry would hide what the node answered).
fn call_options(limit: Duration) -> ConnectOptions {
    ConnectOptions {
        connect_timeout: limit,
        call_timeout: limit,
        stream_timeout: limit,
        read_retries: 0,
        ..ConnectOptions::default()
    }
}

/// The limit of each call a watch makes.
const POLL_CALL_LIMIT: Duration = Duration::from_secs(5);

pub async fn run(opts: &Options) -> Result<Outcome> {
    if !opts.confirmed {
        bail!(
            "--maintenance-node {} installs Talos on that machine, bootstraps etcd on it and wipes it \
             again (STATE and EPHEMERAL): pass --i-understand-this-wipes-the-node if it is a spare \
             machine booted into maintenance mode",
            opts.node
        );
    }
    let endpoint = Endpoint::parse(&opts.node).map_err(|e| anyhow!("--maintenance-node: {e}"))?;
    let mut run = Run {
        opts,
        normaliser: Normaliser::new(),
        records: Vec::new(),
        steps: Vec::new(),
        timelines: Vec::new(),
        applied_at: None,
    };
    run.normaliser.known(&opts.node, &format!("<{LABEL}>"));
    run.normaliser.known(&endpoint.host, &format!("<{LABEL}>"));
    run.normaliser.known(CLUSTER_NAME, "<cluster>");

    // 1. Nothing is sent to a node that is not in maintenance mode.
    let started = Instant::now();
    let mode = probe(&opts.node, &call_options(Duration::from_secs(10)))
        .await
        .with_context(|| format!("cannot tell whether {} is in maintenance mode", opts.node))?;
    match mode {
        NodeMode::Maintenance => {}
        NodeMode::Configured => bail!(
            "{} is not in maintenance mode (it has a machine config: it asks for a client \
             certificate), so it was left alone; this mode only takes a spare machine booted into \
             maintenance mode (reset it to maintenance first, e.g. ferro.talos.talos_reset with \
             wipe: maintenance)",
            opts.node
        ),
        NodeMode::Unreachable => bail!(
            "{} does not answer on the Talos API, so nothing was sent; check the address and that \
             the machine is booted into maintenance mode",
            opts.node
        ),
    }
    let maintenance = TalosClient::connect_maintenance(&opts.node, call_options(POLL_CALL_LIMIT))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let asked = Instant::now();
    let version = maintenance.version().await.map_err(|e| anyhow!("{e}"))?;
    run.records.push(
        Record::new("Version without a client certificate", LABEL, asked)
            .shape(wire_shape::version(&version)),
    );
    let tag = version.version.map(|v| v.tag).unwrap_or_default();
    let mut summary = NodeSummary {
        label: LABEL.to_string(),
        machine_type: "controlplane".to_string(),
        version: tag.clone(),
        kubernetes_version: None,
        install_image: None,
    };
    run.step("check maintenance mode", StepOutcome::Done, started);

    // 2. A control-plane config of the node's own contract, from a bundle made for this run.
    let started = Instant::now();
    let contract = Contract::parse(&tag).map_err(|e| {
        anyhow!(
            "{} runs Talos {tag:?}, for which no config can be rendered ({e}); nothing was applied",
            opts.node
        )
    })?;
    let bundle = Bundle::generate((u64::from(contract.major), u64::from(contract.minor)))
        .map_err(|e| anyhow!("cannot generate the run's secrets bundle: {e}"))?;
    let mut generate = GenerateOptions::new(
        contract,
        MachineType::ControlPlane,
        CLUSTER_NAME,
        format!("https://{}:6443", bracketed(&endpoint.host)),
    );
    generate.install_disk = Some(opts.install_disk.clone());
    generate.install_image = Some(
        opts.install_image
            .clone()
            .unwrap_or_else(|| installer_for_release(contract, &tag)),
    );
    let config = MachineConfig::generate(&bundle, &generate)
        .map_err(|e| anyhow!("cannot render the control-plane config: {e}"))?;
    for secret in ferro_talos_secrets::secret_strings(&bundle) {
        run.normaliser.secret(&secret);
    }
    for secret in ferro_talos_config::redact::secret_values(&config) {
        run.normaliser.secret(&secret);
    }
    let creds = Credentials::from_bundle(&bundle, &["os:admin"], CREDENTIALS_VALIDITY)
        .map_err(|e| anyhow!("{e}"))?;
    for pem in [&creds.ca_pem, &creds.cert_pem, &creds.key_pem] {
        for line in pem.lines() {
            run.normaliser.secret(line);
        }
    }
    summary.kubernetes_version = Some(
        generate
            .kubernetes_version
            .trim_start_matches('v')
            .to_string(),
    );
    summary.install_image = generate.install_image.clone();
    // The run's talosconfig, kept only when the machine does not come back: without it nobody
    // could reach the machine to reset it.
    let recovery = Recovery::write(&bundle, &opts.node)?;
    run.normaliser
        .known(&recovery.dir.path().display().to_string(), "<tmp>");
    run.step("render config", StepOutcome::Done, started);

    // 3. The first config, over the maintenance connection.
    let mut interrupts = Interrupts::listen();
    let started = Instant::now();
    run.applied_at = Some(started);
    let probe_name = "ApplyConfiguration (first config, mode auto)";
    let applied = maintenance
        .apply_configuration(
            config.to_yaml().as_bytes(),
            ApplyMode::Auto,
            Apply::ForReal,
            None,
        )
        .await;
    drop(config);
    let applied = match applied {
        Ok(reply) => {
            let warnings = reply
                .warnings
                .iter()
                .map(|w| run.normaliser.text(w))
                .collect();
            // Only the first line: a dry run's details hold the config's diff, and nothing of
            // a config is recorded.
            let details = reply.mode_details.lines().next().unwrap_or_default();
            let record = Record::new(probe_name, LABEL, started)
                .shape(wire_shape::apply_configuration(&reply))
                .fact("mode", reply.mode().as_str_name())
                .fact("mode_details", run.normaliser.text(details))
                .ids(warnings);
            run.records.push(record);
            run.step("apply config", StepOutcome::Done, started);
            true
        }
        Err(e) => {
            let record = run.failed(probe_name, started, &e);
            run.records.push(record);
            run.step("apply config", StepOutcome::Failed, started);
            // Refused, the machine is still in maintenance mode and that is the end of it. An
            // answer lost on the way (a timeout) may hide a config it took: then it is reset.
            let mode = probe(&opts.node, &call_options(POLL_CALL_LIMIT)).await;
            if matches!(mode, Ok(NodeMode::Maintenance)) {
                recovery.discard();
                return Ok(Outcome {
                    report: run.report(&summary, contract),
                    not_back: None,
                    interrupted: false,
                });
            }
            false
        }
    };

    // 4-10 (when the config was taken), cut short by an interrupt; the reset follows either way.
    let interrupted = applied
        && tokio::select! {
            () = with_config(&mut run, &creds) => false,
            () = interrupts.next() => true,
        };
    if interrupted {
        eprintln!(
            "ferro-talos-conformance: interrupted; resetting the machine to maintenance mode"
        );
        let now = Instant::now();
        for name in &STEPS[3..10] {
            if !run.steps.iter().any(|(s, _, _)| s == name) {
                run.step(name, StepOutcome::Interrupted, now);
            }
        }
    }

    // 11-12.
    let not_back = match reset(&mut run, &creds, &mut interrupts).await {
        Ok(()) => {
            recovery.discard();
            None
        }
        Err(why) => {
            let dir = recovery.keep();
            Some(format!(
                "{} did not come back in maintenance mode ({why}); the run's talosconfig is kept in \
                 {dir}: talosctl --talosconfig {dir}/talosconfig -n {} reset --graceful=false \
                 --reboot --system-labels-to-wipe STATE --system-labels-to-wipe EPHEMERAL, then \
                 delete that directory",
                opts.node,
                endpoint.host,
                dir = dir.display(),
            ))
        }
    };
    Ok(Outcome {
        report: run.report(&summary, contract),
        not_back,
        interrupted,
    })
}

/// An IPv6 literal in a URL needs brackets.
fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// Ctrl-C and SIGTERM (how tools/conformance's end reaches this process), listened to from
/// before the apply on: one that arrives while the apply is under way is not lost, and the run
/// goes straight to the reset instead of dying with the machine configured.
struct Interrupts {
    int: Option<Signal>,
    term: Option<Signal>,
}

impl Interrupts {
    fn listen() -> Interrupts {
        Interrupts {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    /// Resolves at the next Ctrl-C or SIGTERM.
    async fn next(&mut self) {
        async fn one(s: &mut Option<Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = one(&mut self.int) => {},
            () = one(&mut self.term) => {},
        }
    }
}

/// Steps 4 to 10: what the machine does with its config, before and after bootstrap.
async fn with_config(run: &mut Run<'_>, creds: &Credentials) {
    // 4. Until MachineStatus and the etcd service stay the same for `settle` in a stage the node
    // waits in (booting or running): the state in which it waits for bootstrap.
    let settle = run.opts.settle;
    watch(
        run,
        creds,
        Watch {
            step: "watch MachineStatus until settled",
            timeline: "after apply",
            probe: "MachineStatus after apply, until settled",
        },
        |t| {
            matches!(
                t.last(),
                Some(Seen::Status { stage, etcd, .. })
                    if matches!(*stage, "booting" | "running") && etcd != "absent"
            ) && t.steady_for() >= settle
        },
    )
    .await;

    // 5-6.
    member_list(run, creds, "EtcdMemberList before bootstrap").await;
    etcd_service(run, creds, "etcd service before bootstrap").await;

    // 7. Bootstrap, asked again while the node answers "not ready yet" (as talos_bootstrap and
    // talosctl cluster create do), until the timeout.
    let started = Instant::now();
    let bootstrapped = bootstrap(run, creds, started).await;
    run.step(
        "bootstrap",
        if bootstrapped {
            StepOutcome::Done
        } else {
            StepOutcome::Failed
        },
        started,
    );

    // 8. Until running and ready.
    let until_ready = Watch {
        step: "watch MachineStatus until running and ready",
        timeline: "after bootstrap",
        probe: "MachineStatus after bootstrap, until running and ready",
    };
    if bootstrapped {
        watch(run, creds, until_ready, |t| {
            matches!(
                t.last(),
                Some(Seen::Status {
                    stage: "running",
                    ready: true,
                    ..
                })
            )
        })
        .await;
    } else {
        run.step(until_ready.step, StepOutcome::Skipped, Instant::now());
    }

    // 9-10.
    member_list(run, creds, "EtcdMemberList after bootstrap").await;
    etcd_service(run, creds, "etcd service after bootstrap").await;
}

/// The names of one watch: its step, its timeline and its record.
struct Watch {
    step: &'static str,
    timeline: &'static str,
    probe: &'static str,
}

/// Polls MachineStatus (and the etcd service) with mutual TLS until `done` says so or the
/// timeout. The timeline grows inside the run, so an interrupt keeps what was seen.
async fn watch(
    run: &mut Run<'_>,
    creds: &Credentials,
    names: Watch,
    done: impl Fn(&Timeline) -> bool,
) {
    let started = Instant::now();
    let deadline = started + run.opts.timeout;
    let origin = run.applied_at.unwrap_or(started);
    run.timelines.push((names.timeline, Timeline::new(origin)));
    let reached = loop {
        let seen = observe(run, creds).await;
        let timeline = &mut run.timelines.last_mut().expect("pushed above").1;
        if timeline.push(seen) {
            eprintln!("ferro-talos-conformance:   {}", timeline.progress());
        }
        if done(timeline) {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        tokio::time::sleep(POLL).await;
    };
    let timeline = &run.timelines.last().expect("pushed above").1;
    let record = watch_record(names.probe, timeline, reached, started);
    run.records.push(record);
    let outcome = if reached {
        StepOutcome::Done
    } else {
        StepOutcome::TimedOut
    };
    run.step(names.step, outcome, started);
}

/// One look at the configured node.
async fn observe(run: &Run<'_>, creds: &Credentials) -> Seen {
    let failed = |e: ClientError| match e.kind {
        ErrorKind::Unreachable if e.grpc_code.is_none() => Seen::Unreachable,
        _ => Seen::Failed {
            code: record::code(&e),
            message: run.normaliser.text(&e.message),
        },
    };
    let client =
        match TalosClient::connect(&run.opts.node, creds, call_options(POLL_CALL_LIMIT)).await {
            Ok(c) => c,
            Err(e) => return failed(e),
        };
    let status = match client.machine_status().await {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    let etcd = match client.service_list().await {
        Ok(list) => list
            .iter()
            .find(|s| s.id == "etcd")
            .map_or("absent".to_string(), service_summary),
        Err(e) => format!("unknown (ServiceList: {})", record::code(&e)),
    };
    Seen::Status {
        stage: stage_name(status.stage),
        ready: status.ready,
        unmet: status
            .unmet_conditions
            .into_iter()
            .map(|(n, _)| n)
            .collect(),
        etcd,
    }
}

/// A watch as a record: the states in order are its IDs. Its time is left at zero: the timeline
/// has the times, and how long a machine takes to install and boot is not something talos-sim
/// models (its reboots take what `--reboot-downtime-ms` says).
fn watch_record(probe: &str, timeline: &Timeline, reached: bool, started: Instant) -> Record {
    let mut record = Record::new(probe, LABEL, started)
        .ids(timeline.summaries())
        .fact("watch", if reached { "reached" } else { "timed out" });
    if let Some(last) = timeline.last() {
        record = record.fact("last", last.summary());
    }
    record.ms = 0;
    record
}

/// EtcdMemberList with the run's deadline: whether it answered, failed before the deadline or
/// ran into it, with the code and text. Only the call is timed, not the connection.
async fn member_list(run: &mut Run<'_>, creds: &Credentials, step: &'static str) {
    let deadline = run.opts.member_list_deadline;
    let probe_name = format!("{step} (deadline {}s)", deadline.as_secs_f64());
    let started = Instant::now();
    let client = match TalosClient::connect(&run.opts.node, creds, call_options(deadline)).await {
        Ok(c) => c,
        Err(e) => {
            let record = run
                .failed(&probe_name, started, &e)
                .fact("outcome", "no connection");
            run.records.push(record);
            run.step(step, StepOutcome::Failed, started);
            return;
        }
    };
    let called = Instant::now();
    let answer = client.etcd_member_list().await;
    let took = called.elapsed();
    let mut record = match &answer {
        Ok(members) => Record::new(&probe_name, LABEL, called)
            .shape(wire_shape::etcd_members(members))
            .fact("outcome", "answered")
            .fact("members", members.len().to_string())
            .fact(
                "learners",
                members.iter().filter(|m| m.is_learner).count().to_string(),
            ),
        Err(e) => {
            // The client's own timer and a DeadlineExceeded from the node both mean the call ran
            // into the deadline; so does an error that came only at its very end.
            let at_deadline = e.kind == ErrorKind::Timeout
                || e.grpc_code == Some(4)
                || took >= deadline.mul_f64(0.9);
            run.failed(&probe_name, called, e).fact(
                "outcome",
                if at_deadline {
                    "hit the deadline"
                } else {
                    "failed before the deadline"
                },
            )
        }
    };
    record.ms = took.as_millis() as u64;
    run.records.push(record);
    // Whatever it answered is the evidence: a refusal is recorded, not a failure of the step.
    run.step(step, StepOutcome::Done, started);
}

/// The etcd service as ServiceList has it: state and health, and its events' states and
/// messages in order (normalised, repeats dropped, no times).
async fn etcd_service(run: &mut Run<'_>, creds: &Credentials, step: &'static str) {
    let started = Instant::now();
    let answer =
        match TalosClient::connect(&run.opts.node, creds, call_options(POLL_CALL_LIMIT)).await {
            Ok(client) => client.service_list().await,
            Err(e) => Err(e),
        };
    let (record, outcome) = match answer {
        Ok(list) => match list.iter().find(|s| s.id == "etcd") {
            Some(etcd) => {
                let mut events: Vec<String> = Vec::new();
                for e in etcd.events.iter().flat_map(|e| e.events.iter()) {
                    let line = format!("{}: {}", e.state, run.normaliser.text(&e.msg));
                    if events.last() != Some(&line) {
                        events.push(line);
                    }
                }
                let health = etcd.health.clone().unwrap_or_default();
                let record = Record::new(step, LABEL, started)
                    .shape(wire_shape::services(std::slice::from_ref(etcd)))
                    .fact("service", service_summary(etcd))
                    .fact("health_message", run.normaliser.text(&health.last_message))
                    .ids(events);
                (record, StepOutcome::Done)
            }
            None => (
                Record::new(step, LABEL, started).fact("service", "absent"),
                StepOutcome::Done,
            ),
        },
        Err(e) => (run.failed(step, started, &e), StepOutcome::Failed),
    };
    run.records.push(record);
    run.step(step, outcome, started);
}

/// Bootstrap until it is accepted, refused for good, or the timeout; the refusals on the way are
/// the record's IDs (distinct, in order).
async fn bootstrap(run: &mut Run<'_>, creds: &Credentials, started: Instant) -> bool {
    let deadline = started + run.opts.timeout;
    let mut refusals: Vec<String> = Vec::new();
    let probe_name = "Bootstrap";
    loop {
        let answer = match TalosClient::connect(
            &run.opts.node,
            creds,
            call_options(POLL_CALL_LIMIT),
        )
        .await
        {
            Ok(client) => client.bootstrap().await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(()) => {
                let record = Record::new(probe_name, LABEL, started).ids(refusals);
                run.records.push(record);
                return true;
            }
            Err(e) if e.kind == ErrorKind::NotReady && Instant::now() < deadline => {
                let seen = run.failed(probe_name, started, &e);
                let line = format!("{}: {}", seen.code, seen.message);
                if !refusals.contains(&line) {
                    refusals.push(line);
                }
                tokio::time::sleep(BOOTSTRAP_RETRY).await;
            }
            Err(e) => {
                let record = run.failed(probe_name, started, &e).ids(refusals);
                run.records.push(record);
                return false;
            }
        }
    }
}

/// Steps 11-12: the reset (STATE and EPHEMERAL, not graceful, reboot), then until the machine
/// answers in maintenance mode again. Err says why it is not back.
async fn reset(
    run: &mut Run<'_>,
    creds: &Credentials,
    interrupts: &mut Interrupts,
) -> std::result::Result<(), String> {
    let started = Instant::now();
    let probe_name = "Reset (STATE and EPHEMERAL wiped, not graceful, reboot)";
    let request = ResetRequest {
        graceful: false,
        reboot: true,
        system_partitions_to_wipe: WIPED
            .iter()
            .map(|label| ResetPartitionSpec {
                label: label.to_string(),
                wipe: true,
            })
            .collect(),
        user_disks_to_wipe: Vec::new(),
        mode: reset_request::WipeMode::All as i32,
    };
    // A node that is away (still rebooting from its install, say) is asked again until the
    // timeout: the machine must not be left with a config nobody has the keys to.
    let deadline = started + run.opts.timeout;
    let answer =
        loop {
            let answer =
                match TalosClient::connect(&run.opts.node, creds, call_options(POLL_CALL_LIMIT))
                    .await
                {
                    Ok(client) => client.reset(request.clone()).await,
                    Err(e) => Err(e),
                };
            match answer {
                Err(e) if e.kind.is_transient() && Instant::now() < deadline => {
                    tokio::time::sleep(POLL).await;
                }
                other => break other,
            }
        };
    match answer {
        Ok(actor_id) => {
            let mut shape = Shape::new();
            shape.text("actor_id", &actor_id);
            run.records
                .push(Record::new(probe_name, LABEL, started).shape(shape));
            run.step("reset", StepOutcome::Done, started);
        }
        Err(e) => {
            let why = e.to_string();
            let record = run.failed(probe_name, started, &e);
            run.records.push(record);
            run.step("reset", StepOutcome::Failed, started);
            return Err(format!("the reset failed: {}", run.normaliser.text(&why)));
        }
    }

    // Until the node answers without a client certificate: configured, away, then maintenance.
    let started = Instant::now();
    let origin = run.applied_at.unwrap_or(started);
    let deadline = started + run.opts.timeout;
    let mut timeline = Timeline::new(origin);
    let waited = tokio::select! {
        back = wait_for_maintenance(run, creds, &mut timeline, deadline) => Some(back),
        () = interrupts.next() => None,
    };
    let Some(back) = waited else {
        run.timelines.push(("after reset", timeline));
        run.step(
            "wait for maintenance mode",
            StepOutcome::Interrupted,
            started,
        );
        return Err("the wait for it was interrupted".to_string());
    };
    run.records.push(watch_record(
        "after reset, until maintenance mode",
        &timeline,
        back,
        started,
    ));
    run.timelines.push(("after reset", timeline));
    if !back {
        run.step("wait for maintenance mode", StepOutcome::TimedOut, started);
        return Err(format!(
            "it was not in maintenance mode within {}s",
            run.opts.timeout.as_secs()
        ));
    }
    let asked = Instant::now();
    let version =
        match TalosClient::connect_maintenance(&run.opts.node, call_options(POLL_CALL_LIMIT)).await
        {
            Ok(client) => client.version().await,
            Err(e) => Err(e),
        };
    let probe_name = "Version without a client certificate, after the reset";
    let record = match version {
        Ok(v) => Record::new(probe_name, LABEL, asked).shape(wire_shape::version(&v)),
        Err(e) => run.failed(probe_name, asked, &e),
    };
    run.records.push(record);
    run.step("wait for maintenance mode", StepOutcome::Done, started);
    Ok(())
}

/// Polls until the node answers in maintenance mode (true) or the deadline (false).
async fn wait_for_maintenance(
    run: &Run<'_>,
    creds: &Credentials,
    timeline: &mut Timeline,
    deadline: Instant,
) -> bool {
    loop {
        let seen = match probe(&run.opts.node, &call_options(POLL_CALL_LIMIT)).await {
            Ok(NodeMode::Maintenance) => Seen::Maintenance,
            Ok(NodeMode::Unreachable) => Seen::Unreachable,
            Ok(NodeMode::Configured) => observe(run, creds).await,
            Err(e) => Seen::Failed {
                code: record::code(&e),
                message: run.normaliser.text(&e.message),
            },
        };
        if timeline.push(seen) {
            eprintln!("ferro-talos-conformance:   {}", timeline.progress());
        }
        if timeline.last() == Some(&Seen::Maintenance) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The run's talosconfig in a private directory: deleted when the machine is back in maintenance
/// mode, kept (and named in the error) when it is not.
struct Recovery {
    dir: tempfile::TempDir,
}

impl Recovery {
    fn write(bundle: &Bundle, node: &str) -> Result<Recovery> {
        let dir = tempfile::Builder::new()
            .prefix("ferro-conformance-node-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .context("cannot create a private directory for the run's talosconfig")?;
        let hosts = vec![
            Endpoint::parse(node)
                .map(|e| e.host)
                .unwrap_or_else(|_| node.to_string()),
        ];
        let talosconfig = TalosConfig::for_cluster(
            bundle,
            CLUSTER_NAME,
            &hosts,
            &hosts,
            time::OffsetDateTime::now_utc(),
        )
        .map_err(|e| anyhow!("cannot make the run's talosconfig: {e}"))?;
        let path: PathBuf = dir.path().join("talosconfig");
        files::write_private(&path, talosconfig.to_yaml().as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Recovery { dir })
    }

    fn discard(self) {
        drop(self.dir);
    }

    /// Keeps the directory; its path.
    fn keep(self) -> PathBuf {
        self.dir.keep()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(confirmed: bool) -> Options {
        Options {
            // Nothing listens here: a test that got past the checks would fail to connect.
            node: "127.0.0.1:9".into(),
            confirmed,
            install_disk: "/dev/sda".into(),
            install_image: None,
            settle: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            member_list_deadline: Duration::from_secs(1),
        }
    }

    #[tokio::test]
    async fn nothing_is_sent_without_the_confirmation() {
        let err = run(&options(false)).await.err().unwrap().to_string();
        assert!(err.contains("--i-understand-this-wipes-the-node"), "{err}");
    }

    #[tokio::test]
    async fn a_node_that_does_not_answer_is_left_alone() {
        let err = run(&options(true)).await.err().unwrap().to_string();
        assert!(err.contains("does not answer"), "{err}");
        assert!(err.contains("nothing was sent"), "{err}");
    }

    #[test]
    fn ipv6_hosts_get_brackets() {
        assert_eq!(bracketed("fd00::2"), "[fd00::2]");
        assert_eq!(bracketed("10.0.0.2"), "10.0.0.2");
    }
}
