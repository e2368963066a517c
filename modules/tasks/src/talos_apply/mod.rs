//! `talos_apply`: apply a machine config to one node, honestly in check mode.

use std::time::{Duration, Instant};

use ferro_ansible_protocol::{Context, Diff, ModuleError, ModuleResult, Opt, Spec};
use ferro_talos_client::{
    Apply, ApplyMode, ClientError, ConnectOptions, Credentials, ErrorKind, FirstBoot, NodeMode,
    TalosClient, wait_for_reboot, wait_until_running,
};
use ferro_talos_config::{MachineConfig, diff, live, redact, risk};
use serde_json::{Value, json};

use crate::sha256_hex;
use crate::shared::connection::{self, ConnectionArgs, Target, with_connection_options};
use crate::shared::failure::{OrFail, client_failure};
use crate::shared::files::read_file_or_content;
use crate::shared::render::{self, RenderArgs};

mod args;
pub use args::Args;
use args::ConfigSource;

pub fn spec() -> Spec {
    with_connection_options(Spec::new())
        .option(Opt::str("config").no_log())
        .option(Opt::dict("render").options(render::options(Spec::new())))
        .option(
            Opt::str("mode")
                .choices(&["auto", "no_reboot", "reboot", "staged", "try"])
                .default("auto"),
        )
        .option(Opt::int("try_timeout").default(60))
        .option(
            Opt::str("insecure")
                .choices(&["auto", "always", "never"])
                .default("auto"),
        )
        .option(Opt::bool("wait").default(true))
        .option(Opt::int("timeout").default(600))
        .option(Opt::str("expected_address"))
        .option(Opt::bool("allow_machine_type_change").default(false))
        .option(Opt::bool("refuse_risky_changes").default(false))
        .mutually_exclusive(&["config", "render"])
        .required_one_of(&["config", "render"])
}

/// Everything the run needs: the options, and the config read or rendered (its secrets masked).
struct Request {
    target: Target,
    expected_address: String,
    text: String,
    desired: MachineConfig,
    mode: ApplyMode,
    mode_name: String,
    try_timeout: Duration,
    node_mode: Option<NodeMode>,
    wait: bool,
    timeout: Duration,
    allow_machine_type_change: bool,
    refuse_risky_changes: bool,
    /// With `render`: what `talos_config` would report about the config it renders.
    rendered: Option<RenderReport>,
}

/// The facts `talos_config` returns about a config it renders, returned the same way here.
struct RenderReport {
    contract: String,
    shape_key: &'static str,
    shape_records: Vec<Value>,
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let opts = args.connection.connect_options(Duration::from_secs(60));
    let creds = connection::credentials(ctx, &args.connection)?;
    let req = request(ctx, args)?;
    connection::block_on(apply(ctx, &req, creds.map(|(c, _)| c), opts))?
}

/// The config to apply, read or rendered, checked as a machine config before any node is asked.
fn request(ctx: &mut Context, args: Args) -> Result<Request, ModuleError> {
    let (text, rendered) = match &args.config {
        ConfigSource::Render(options) => {
            let (text, report) = render_in_place(ctx, &args.connection, options)?;
            (text, Some(report))
        }
        ConfigSource::Given(raw) => {
            let text = read_file_or_content(raw)
                .map_err(|e| ModuleError::new(format!("config: {e:#}")))?;
            (text, None)
        }
    };
    // A rendered config is read back as a file written by talos_config would be, so both ways
    // compare and send exactly the same thing.
    let desired = MachineConfig::parse(&text)
        .map_err(|e| ModuleError::new(format!("config is not a valid machine config: {e:#}")))?;
    if desired.v1alpha1().is_none() {
        return Err(ModuleError::new(
            "config has no v1alpha1 document (machine/cluster): render it with ferro.talos.talos_config",
        ));
    }
    for s in redact::secret_values(&desired) {
        ctx.mask(s);
    }
    Ok(Request {
        target: args.target,
        expected_address: args.expected_address,
        text,
        desired,
        mode: args.mode,
        mode_name: args.mode_name,
        try_timeout: args.try_timeout,
        node_mode: args.node_mode,
        wait: args.wait,
        timeout: args.timeout,
        allow_machine_type_change: args.allow_machine_type_change,
        refuse_risky_changes: args.refuse_risky_changes,
        rendered,
    })
}

/// Renders the config from `render`'s options and the task's secrets bundle, as talos_config
/// would write it to `dest`; its secrets are masked from here on.
fn render_in_place(
    ctx: &mut Context,
    connection: &ConnectionArgs,
    options: &RenderArgs,
) -> Result<(String, RenderReport), ModuleError> {
    let in_render = |e: ModuleError| ModuleError::new(format!("render: {}", e.msg()));
    let Some(bundle) = connection::load_bundle(ctx, &connection.secrets)? else {
        return Err(ModuleError::new(
            "render needs the secrets bundle to render the config from: set secrets_file or \
             secrets (a talosconfig only holds client credentials), or render it with \
             ferro.talos.talos_config and pass the file as config",
        ));
    };
    let rendered = render::render(ctx, options, Some(&bundle)).map_err(in_render)?;
    let report = RenderReport {
        contract: format!("v{}", options.contract),
        shape_key: rendered.shape_key,
        shape_records: rendered.shape_records,
    };
    Ok((rendered.text, report))
}

/// `machine.type` of a config (`controlplane`, `worker`, `init`), if it has one.
fn machine_type(cfg: &MachineConfig) -> Option<&str> {
    cfg.v1alpha1()?.get("machine")?.get("type")?.as_str()
}

/// Refuses a config that changes the node's machine type unless the task allows it: the usual
/// cause is a host in the wrong inventory group, and applying it would take a control plane out
/// of etcd or make a worker try to run one.
fn check_machine_type(req: &Request, live: &MachineConfig) -> Result<(), ModuleError> {
    let (Some(running), Some(wanted)) = (machine_type(live), machine_type(&req.desired)) else {
        return Ok(());
    };
    if running == wanted || req.allow_machine_type_change {
        return Ok(());
    }
    Err(ModuleError::new(format!(
        "node {} runs as a {running}, and this config makes it a {wanted}; nothing was applied. \
         Check that the host is in the right inventory group (control planes and workers are told \
         apart by group), or set allow_machine_type_change: true if you mean to change its role",
        req.target.node
    ))
    .with("node", req.target.node.clone())
    .with("live_machine_type", running)
    .with("machine_type", wanted))
}

async fn apply(
    ctx: &mut Context,
    req: &Request,
    creds: Option<Credentials>,
    opts: ConnectOptions,
) -> Result<ModuleResult, ModuleError> {
    let node_mode = match req.node_mode {
        Some(mode) => mode,
        None => connection::node_mode(&req.target, creds.as_ref(), &opts)
            .await
            .or_fail()?,
    };
    match node_mode {
        NodeMode::Maintenance => apply_first(ctx, req, creds.as_ref(), opts).await,
        NodeMode::Configured => {
            let creds = creds.ok_or_else(|| {
                ModuleError::new(format!(
                    "node {} is configured and needs client credentials: set talosconfig, secrets_file or secrets",
                    req.target.node
                ))
                .with("node", req.target.node.clone())
            })?;
            apply_configured(ctx, req, &creds, opts).await
        }
        NodeMode::Unreachable => Err(ModuleError::new(format!(
            "node {}: nothing answers on {} (port 50000 unless given): check that the node is powered on and the address is right",
            req.target.node, req.target.endpoint
        ))
        .with("node", req.target.node.clone())),
    }
}

/// A node in maintenance mode gets its first config over an unauthenticated connection. It then
/// answers with mutual TLS at once, and installs and reboots when it booted from installation
/// media (or boots on when Talos is installed): the task waits until it runs the config.
async fn apply_first(
    ctx: &mut Context,
    req: &Request,
    creds: Option<&Credentials>,
    opts: ConnectOptions,
) -> Result<ModuleResult, ModuleError> {
    // Upstream (v1alpha1_server.go ApplyConfiguration at v1.13.9) takes both modes in maintenance
    // mode, but neither gives the node a config to run: STAGED only writes the persistent config
    // (the node stays in maintenance, a media-booted one loses it at the next boot), TRY runs it
    // without storing it and rolls back to nothing. Waiting for either would wait for nothing.
    if matches!(req.mode, ApplyMode::Staged | ApplyMode::Try) {
        return Err(ModuleError::new(format!(
            "node {} is in maintenance mode, where mode={} does not give it a config to run \
             ({}); apply its first config with mode auto or no_reboot",
            req.target.node,
            req.mode_name,
            if req.mode == ApplyMode::Staged {
                "Talos only stores a staged config, and the node stays in maintenance mode"
            } else {
                "Talos runs a try config without storing it and then rolls it back"
            }
        ))
        .with("node", req.target.node.clone()));
    }
    let empty = MachineConfig::default();
    let mut result = base_result(req, &empty, true)
        .with("maintenance", true)
        .with("reboot_required", true);
    if ctx.diff {
        result = result.diff(config_diff(&empty, &req.desired, &req.target.node));
    }
    if ctx.check_mode {
        return Ok(result.msg(format!(
            "would apply the first config to {} (the node is in maintenance mode)",
            req.target.node
        )));
    }
    let client = TalosClient::connect_maintenance(req.target.maintenance_address(), opts.clone())
        .await
        .or_fail()?;
    let reply = client
        .apply_configuration(
            req.text.as_bytes(),
            req.mode,
            Apply::ForReal,
            Some(req.try_timeout),
        )
        .await
        .or_fail()?;
    for w in &reply.warnings {
        ctx.warn(format!("{}: {w}", req.target.node));
    }
    if !req.wait {
        return Ok(result.msg(format!(
            "applied the first config to {}; not waiting for it to come back",
            req.target.node
        )));
    }
    let Some(creds) = creds else {
        ctx.warn(
            "no credentials given, so the node's new config could not be verified".to_string(),
        );
        return Ok(result.msg(format!("applied the first config to {}", req.target.node)));
    };
    let first = verify_first_boot(req, creds).await?;
    let how = if first.install_reboot {
        "it installed Talos, rebooted and runs"
    } else {
        "it runs"
    };
    // A control plane's boot waits for etcd until it is bootstrapped or lets it join: said, not
    // waited out (a first control plane would wait for ever).
    let etcd = if first.waiting_for_etcd {
        "; its boot waits for etcd (bootstrap it with ferro.talos.talos_bootstrap, or it joins once etcd lets it)"
    } else {
        ""
    };
    Ok(result
        .with("install_reboot", first.install_reboot)
        .with("reboot_required", first.install_reboot)
        .with("waiting_for_etcd", first.waiting_for_etcd)
        .msg(format!(
            "applied the first config to {}; {how} that config on {}{etcd}",
            req.target.node, req.expected_address
        )))
}

async fn apply_configured(
    ctx: &mut Context,
    req: &Request,
    creds: &Credentials,
    opts: ConnectOptions,
) -> Result<ModuleResult, ModuleError> {
    let client = connection::connect(&req.target, creds, opts)
        .await
        .or_fail()?;
    let live_bytes = client.get_machine_config().await.or_fail()?;
    let live = node_config(ctx, req, &live_bytes, "current")?;
    check_machine_type(req, &live)?;
    // What the next boot loads: the `persistent` MachineConfig, ahead of the running one after a
    // staged apply and behind it while a try runs (pkg/machinery/resources/config/machine_config.go
    // at v1.13.9). Without one, the running config is what is kept.
    let next_boot = match client.get_persistent_machine_config().await.or_fail()? {
        Some(bytes) => node_config(ctx, req, &bytes, "persistent")?,
        None => live.clone(),
    };
    // Both sides through the same encoder, so formatting never counts as a change.
    let desired_yaml = req.desired.to_yaml();
    let runs = live.to_yaml() == desired_yaml;
    let kept = next_boot.to_yaml() == desired_yaml;
    if let Some(done) = already_done(req, runs, kept) {
        return Ok(base_result(req, &live, false)
            .with("reboot_required", false)
            .with("staged_pending", kept && !runs)
            .with("try_pending", runs && !kept)
            .msg(done));
    }
    check_risky_changes(ctx, req, &live)?;
    let reboot_required = live::reboot_required(&live, &req.desired);
    let mut result = base_result(req, &live, true).with("reboot_required", reboot_required);
    if reboot_required {
        result = result.with("reboot_reasons", live::reboot_reasons(&live, &req.desired));
    }
    if ctx.diff {
        result = result.diff(config_diff(&live, &req.desired, &req.target.node));
    }
    if ctx.check_mode {
        // Talos itself decides the mode: ask it with a dry run, which changes nothing.
        let reply = client
            .apply_configuration(
                req.text.as_bytes(),
                req.mode,
                Apply::DryRun,
                Some(req.try_timeout),
            )
            .await
            .map_err(|e| apply_error(req, e))?;
        let (result, pending) = pending_until_reboot(result, reboot_required, reply.mode());
        let resolved = mode_label(reply.mode());
        // The dry-run text carries Talos's own, unmasked diff: keep only its summary line.
        let summary = reply
            .mode_details
            .lines()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        return Ok(result
            .with("resolved_mode", resolved)
            .with("dry_run", summary)
            .msg(format!(
                "would apply the config to {} ({resolved}){pending}",
                req.target.node
            )));
    }
    let old_boot_id = client.boot_id().await.unwrap_or(None);
    let reply = client
        .apply_configuration(
            req.text.as_bytes(),
            req.mode,
            Apply::ForReal,
            Some(req.try_timeout),
        )
        .await
        .map_err(|e| apply_error(req, e))?;
    for w in &reply.warnings {
        ctx.warn(format!("{}: {w}", req.target.node));
    }
    let resolved = reply.mode();
    let (with_pending, pending) = pending_until_reboot(result, reboot_required, resolved);
    result = with_pending.with("resolved_mode", mode_label(resolved));
    if !pending.is_empty() {
        ctx.warn(format!("{}{pending}", req.target.node));
    }
    let msg = match resolved {
        ApplyMode::Staged => format!(
            "staged the config on {}; it takes effect at the next reboot",
            req.target.node
        ),
        ApplyMode::Try => format!(
            "applied the config to {} in try mode; it is rolled back after {}s unless applied again",
            req.target.node,
            req.try_timeout.as_secs()
        ),
        ApplyMode::Reboot if req.wait => {
            verify_back(req, creds, old_boot_id.as_deref()).await?;
            format!(
                "applied the config to {} with a reboot; it is back on {} with that config",
                req.target.node, req.expected_address
            )
        }
        ApplyMode::Reboot => format!(
            "applied the config to {}; it is rebooting (not waiting)",
            req.target.node
        ),
        _ => {
            verify_live(&client, req).await?;
            format!(
                "applied the config to {} without a reboot{pending}",
                req.target.node
            )
        }
    };
    Ok(result.msg(msg))
}

/// Says each risky change (dropped manifests, a new install disk or image, ...) in the normal
/// output, where an operator sees it without `-v`, and stops before anything is applied when the
/// task refuses them.
fn check_risky_changes(
    ctx: &mut Context,
    req: &Request,
    live: &MachineConfig,
) -> Result<(), ModuleError> {
    let risky = risk::risky_changes(live, &req.desired);
    for r in &risky {
        ctx.warn(format!(
            "{}: risky change at {}: {}",
            req.target.node, r.path, r.reason
        ));
    }
    if req.refuse_risky_changes && !risky.is_empty() {
        let list: Vec<String> = risky
            .iter()
            .map(|r| format!("{} ({})", r.path, r.reason))
            .collect();
        return Err(ModuleError::new(format!(
            "node {}: the config makes risky changes, and refuse_risky_changes is set: {}; nothing \
             was applied. Check them in the diff (--check --diff), then apply without \
             refuse_risky_changes",
            req.target.node,
            list.join("; ")
        ))
        .with("node", req.target.node.clone()));
    }
    Ok(())
}

/// A config read from the node (`which`: current or persistent), its secrets masked from here on.
fn node_config(
    ctx: &mut Context,
    req: &Request,
    bytes: &[u8],
    which: &str,
) -> Result<MachineConfig, ModuleError> {
    let cfg = MachineConfig::parse(&String::from_utf8_lossy(bytes)).map_err(|e| {
        ModuleError::new(format!(
            "node {}: its {which} config cannot be parsed ({e:#}); compare it by hand with talosctl get mc",
            req.target.node
        ))
    })?;
    for s in redact::secret_values(&cfg) {
        ctx.mask(s);
    }
    Ok(cfg)
}

/// Whether the node already has what the task asks for, and in what words. A staged config counts
/// once it is what the next boot loads; a config being tried counts only for another try (any
/// other mode applies it again, which makes it permanent and cancels the rollback).
fn already_done(req: &Request, runs: bool, kept: bool) -> Option<String> {
    let node = &req.target.node;
    match (req.mode, runs, kept) {
        (_, true, true) => Some(format!("{node} already runs this config")),
        (ApplyMode::Staged, false, true) => Some(format!(
            "{node} already has this config staged; it takes effect at the next reboot"
        )),
        (ApplyMode::Try, true, false) => Some(format!(
            "{node} already runs this config in try mode; it is rolled back unless applied with mode auto or no_reboot"
        )),
        _ => None,
    }
}

/// A configured node's refusal of an apply. Talos 1.14 answers `mode: reboot` with Unimplemented
/// (`the REBOOT mode is not supported, …`, ApplyConfiguration in v1alpha1_server.go @ v1.14.1):
/// say which mode and which module do what was asked.
fn apply_error(req: &Request, e: ClientError) -> ModuleError {
    let reboot_gone = req.mode == ApplyMode::Reboot && e.kind == ErrorKind::Unimplemented;
    let mut err = client_failure(e);
    if reboot_gone {
        err.msg.push_str(
            "; Talos 1.14 applies no config with a reboot: set mode: auto (the change then waits \
             for the next boot, `pending_reboot` in the result) and reboot the node with \
             ferro.talos.talos_reboot",
        );
    }
    err
}

/// Talos 1.14 resolves AUTO to NO_REBOOT for every change (its `CanApplyImmediate` check is gone:
/// `v1alpha1_server.go` ApplyConfiguration at v1.14.0-rc.1), and nothing reports that a change
/// waits for a reboot. When Talos applied without a reboot a change that 1.13's rules say needs
/// one, the result says so instead of `reboot_required: true` with nothing rebooting: the change is
/// pending until the node's next reboot. Returns the result and a message suffix (empty if not).
fn pending_until_reboot(
    result: ModuleResult,
    reboot_required: bool,
    resolved: ApplyMode,
) -> (ModuleResult, String) {
    if !reboot_required || resolved != ApplyMode::NoReboot {
        return (result.with("pending_reboot", false), String::new());
    }
    (
        result
            .with("reboot_required", false)
            .with("pending_reboot", true),
        "; Talos applies it without a reboot, so the changes in reboot_reasons take effect only \
         at the node's next reboot (reboot it to make them active)"
            .to_string(),
    )
}

/// After a first config: wait until the node runs it (MachineStatus RUNNING, or BOOTING while
/// its etcd waits: `wait_until_running`) on `expected_address`, then check that it runs the
/// config we sent. How it came up (the install reboot, waiting for etcd) is returned.
async fn verify_first_boot(req: &Request, creds: &Credentials) -> Result<FirstBoot, ModuleError> {
    let started = Instant::now();
    let (endpoint, node) = back_on(req);
    let first = wait_until_running(
        &endpoint,
        node.as_deref(),
        creds,
        req.timeout,
        Duration::from_millis(500),
    )
    .await
    .map_err(|e| not_back(req, e))?;
    verify_live_on(req, creds, &endpoint, started).await?;
    Ok(first)
}

/// Where a node that left maintenance mode or rebooted is asked: through the endpoint when the
/// task routes through one, otherwise on the address it should come back on.
fn back_on(req: &Request) -> (String, Option<String>) {
    if req.target.routed() {
        (
            req.target.endpoint.clone(),
            Some(req.expected_address.clone()),
        )
    } else {
        (req.expected_address.clone(), None)
    }
}

/// The failure of a node that did not come back where it should.
fn not_back(req: &Request, e: ferro_talos_client::ClientError) -> ModuleError {
    let mut err = ModuleError::new(format!(
        "node {} did not come back on {} within {}s after applying the config: {}; \
         if it came back on another address (DHCP lease, changed machine.network), set \
         expected_address or fix the node's address; check the node's console",
        req.target.node,
        req.expected_address,
        req.timeout.as_secs(),
        e.message
    ))
    .with("node", req.target.node.clone())
    .with("expected_address", req.expected_address.clone());
    if let Some(code) = e.grpc_code {
        err = err.with("grpc_code", code);
    }
    err
}

/// Connects to the node where it came back and checks it runs the config we sent.
async fn verify_live_on(
    req: &Request,
    creds: &Credentials,
    endpoint: &str,
    started: Instant,
) -> Result<(), ModuleError> {
    let target = Target {
        node: req.expected_address.clone(),
        endpoint: endpoint.to_string(),
    };
    let left = req
        .timeout
        .saturating_sub(started.elapsed())
        .max(Duration::from_secs(5));
    let opts = ConnectOptions {
        call_timeout: left.min(Duration::from_secs(30)),
        ..ConnectOptions::default()
    };
    let client = connection::connect(&target, creds, opts).await.or_fail()?;
    verify_live(&client, req).await
}

/// After a reboot: wait until the node answers on `expected_address` with mutual TLS, then check
/// that it runs the config we sent. A node that does not come back there fails the task with
/// both addresses named.
async fn verify_back(
    req: &Request,
    creds: &Credentials,
    old_boot_id: Option<&str>,
) -> Result<(), ModuleError> {
    let started = Instant::now();
    let (endpoint, node) = back_on(req);
    wait_for_reboot(
        &endpoint,
        node.as_deref(),
        creds,
        old_boot_id,
        req.timeout,
        Duration::from_millis(500),
    )
    .await
    .map_err(|e| not_back(req, e))?;
    verify_live_on(req, creds, &endpoint, started).await
}

/// Reads the config back and fails when the node does not run what we sent.
async fn verify_live(client: &TalosClient, req: &Request) -> Result<(), ModuleError> {
    let live = client.get_machine_config().await.or_fail()?;
    let same = std::str::from_utf8(&live)
        .ok()
        .and_then(|t| MachineConfig::parse(t).ok())
        .is_some_and(|c| c.to_yaml() == req.desired.to_yaml());
    if !same {
        return Err(ModuleError::new(format!(
            "node {} accepted the config but does not run it afterwards (rolled back?); check talosctl get mc and its logs",
            req.target.node
        ))
        .with("node", req.target.node.clone()));
    }
    Ok(())
}

fn base_result(req: &Request, before: &MachineConfig, changed: bool) -> ModuleResult {
    let risky: Vec<Value> = risk::risky_changes(before, &req.desired)
        .into_iter()
        .map(|r| json!({"path": r.path, "reason": r.reason}))
        .collect();
    let changed_paths = if changed {
        diff::changed_paths(before, &req.desired)
    } else {
        Vec::new()
    };
    let result = ModuleResult::new(changed)
        .with("node", req.target.node.clone())
        .with("mode", req.mode_name.clone())
        .with("config_sha256", sha256_hex(req.text.as_bytes()))
        .with("changed_paths", changed_paths)
        .with("risky_changes", risky);
    match &req.rendered {
        Some(r) => result
            .with("contract", r.contract.clone())
            .with(r.shape_key, r.shape_records.clone()),
        None => result,
    }
}

fn config_diff(before: &MachineConfig, after: &MachineConfig, node: &str) -> Diff {
    let (b, a) = redact::redacted_pair(before, after);
    let before_text = if before.docs.is_empty() {
        String::new()
    } else {
        b.to_yaml()
    };
    Diff::new(before_text, a.to_yaml()).headers(
        format!("{node} (live config, secrets masked)"),
        format!("{node} (desired config, secrets masked)"),
    )
}

fn mode_label(mode: ApplyMode) -> &'static str {
    match mode {
        ApplyMode::Reboot => "reboot",
        ApplyMode::Auto => "auto",
        ApplyMode::NoReboot => "no_reboot",
        ApplyMode::Staged => "staged",
        ApplyMode::Try => "try",
    }
}
