//! `talos_config`: the secrets bundle, one node type's machine config and the talosconfig.

use std::path::Path;

use anyhow::Result;
use ferro_ansible_protocol::{Context, Diff, ModuleError, ModuleResult, Opt, Spec, Type};
use ferro_talos_config::normalize::Rules;
use ferro_talos_config::{MachineConfig, diff, redact, risk};
use ferro_talos_secrets::{Bundle, TalosConfig};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::sha256_hex;
use crate::shared::connection::{SecretsSource, read_bundle_file};
use crate::shared::files::{SECRET_MODE, read_optional, write_atomic};
use crate::shared::render;

mod args;
pub use args::Args;
use args::{MissingSecrets, TalosconfigArgs};

/// The option naming a control plane's machine config to recover the secrets bundle from, as
/// `talosctl gen secrets --from-controlplane-config` does.
const FROM_CONFIG: &str = "secrets_from_controlplane_config";

/// The options of `talos_config`, mirrored in `plugins/modules/talos_config.yml`.
pub fn spec() -> Spec {
    let spec = Spec::new()
        .option(Opt::path("secrets_file"))
        .option(Opt::dict("secrets").no_log())
        .option(crate::shared::connection::secrets_file_decrypted())
        .option(Opt::bool("generate_secrets").default(false))
        .option(Opt::path(FROM_CONFIG));
    render::options(spec)
        .option(Opt::path("dest"))
        .option(Opt::path("talosconfig"))
        .option(
            Opt::list("endpoints")
                .elements(Type::Str)
                .default(json!([])),
        )
        .option(Opt::list("nodes").elements(Type::Str).default(json!([])))
        .option(Opt::int("talosconfig_renew_before").default(30))
        .option(Opt::bool("return_content").default(false))
        .mutually_exclusive(&["secrets_file", "secrets"])
        .mutually_exclusive(&[FROM_CONFIG, "generate_secrets"])
        .mutually_exclusive(&[FROM_CONFIG, "secrets"])
        .required_by(FROM_CONFIG, &["secrets_file"])
        .required_one_of(&["dest", "talosconfig", "secrets_file"])
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let now = OffsetDateTime::now_utc();
    let mut result = ModuleResult::unchanged();
    let mut changed = false;
    let mut messages: Vec<String> = Vec::new();

    let contract = args.contract;
    result = result.with("contract_reason", args.contract_reason.clone());

    // Secrets first: everything else is derived from them.
    let (bundle, source) = load_secrets(ctx, &args)?;
    if let Some(b) = &bundle {
        for s in ferro_talos_secrets::secret_strings(b) {
            ctx.mask(s);
        }
    }
    let secrets_generated = source == Source::Generated;
    result = result.with("secrets_generated", secrets_generated);
    if let MissingSecrets::DeriveFrom(_) = &args.missing_secrets {
        result = result.with("secrets_derived", matches!(source, Source::Derived));
    }
    if source == Source::Derived {
        changed = true;
        let path = args.secrets_file().unwrap_or(Path::new(""));
        let from = match &args.missing_secrets {
            MissingSecrets::DeriveFrom(from) => from.as_path(),
            _ => Path::new(""),
        };
        let line = format!(
            "{} the secrets bundle derived from {} to {}",
            if ctx.check_mode {
                "would write"
            } else {
                "wrote"
            },
            from.display(),
            path.display()
        );
        if ctx.diff {
            result = result.diff(Diff::prepared(format!("{line} (mode 0600)\n")));
        }
        messages.push(line);
    }
    if secrets_generated {
        changed = true;
        let path = args.secrets_file().unwrap_or(Path::new(""));
        messages.push(if ctx.check_mode {
            format!("would generate a new secrets bundle in {}", path.display())
        } else {
            format!("generated a new secrets bundle in {}", path.display())
        });
    }

    // The machine config.
    let mut rendered: Option<render::Rendered> = None;
    if let Some(options) = &args.render {
        let r = render::render(ctx, options, bundle.as_ref())?;
        result = result.with(r.shape_key, r.shape_records.clone());
        rendered = Some(r);
    }

    if let Some(r) = &rendered {
        let (cfg, text, rules) = (&r.config, &r.text, r.rules);
        let sha = sha256_hex(text.as_bytes());
        result = result
            .with("config_sha256", sha)
            .with("contract", format!("v{contract}"));
        if args.return_content {
            result = result.with("config", text.clone());
        }
        if let Some(dest) = &args.dest {
            let outcome = converge_config_file(ctx, dest, cfg, text, rules)?;
            if outcome.changed {
                changed = true;
                messages.push(if ctx.check_mode {
                    format!("would write {}", dest.display())
                } else {
                    format!("wrote {}", dest.display())
                });
            }
            result = result
                .with("changed_paths", outcome.changed_paths)
                .with("risky_changes", outcome.risky)
                .with("config_path", dest.display().to_string());
            if let Some(d) = outcome.diff {
                result = result.diff(d);
            }
        }
    }

    // The talosconfig.
    if let Some(talosconfig) = &args.talosconfig {
        let path = &talosconfig.path;
        let Some(bundle) = &bundle else {
            return Err(ModuleError::new(
                "talosconfig needs the secrets bundle to issue an admin certificate: set secrets_file or secrets",
            ));
        };
        let cluster_name = cluster_name(&args, rendered.as_ref().map(|r| &r.config))
            .ok_or_else(|| ModuleError::new("talosconfig needs cluster_name (the context name)"))?;
        let outcome = converge_talosconfig(ctx, talosconfig, bundle, &cluster_name, now)?;
        if outcome.changed {
            changed = true;
            messages.push(format!(
                "{} {}: {}",
                if ctx.check_mode {
                    "would write"
                } else {
                    "wrote"
                },
                path.display(),
                outcome.reason
            ));
        }
        result = result
            .with("talosconfig_changed", outcome.changed)
            .with("talosconfig_reason", outcome.reason);
        if let Some(d) = outcome.diff {
            result = result.diff(d);
        }
    }

    // Write the generated bundle last among the checks but before reporting: if anything above
    // failed, no new bundle was left behind that the user did not get a config for.
    if source != Source::Given && !ctx.check_mode {
        let path = args.secrets_file().unwrap_or(Path::new(""));
        let b = bundle
            .as_ref()
            .ok_or_else(|| ModuleError::new("internal error: no bundle"))?;
        write_atomic(path, b.to_yaml().as_bytes(), SECRET_MODE).map_err(module_error)?;
    }

    let msg = if messages.is_empty() {
        "everything is up to date".to_string()
    } else {
        messages.join("; ")
    };
    result.changed = changed;
    Ok(result.msg(msg))
}

/// Where the task's bundle came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// `secrets`, an existing `secrets_file`, or none at all.
    Given,
    /// Made now for a new cluster (`generate_secrets`); to be written to `secrets_file`.
    Generated,
    /// Recovered now from `secrets_from_controlplane_config`; to be written to `secrets_file`.
    Derived,
}

fn load_secrets(ctx: &mut Context, args: &Args) -> Result<(Option<Bundle>, Source), ModuleError> {
    let (path, decrypted) = match &args.secrets {
        SecretsSource::Inline(dict) => {
            let bundle = Bundle::from_value(&Value::Object(dict.clone()))
                .map_err(|e| ModuleError::new(format!("secrets: {e:#}")))?;
            return Ok((Some(bundle), Source::Given));
        }
        SecretsSource::None => return Ok((None, Source::Given)),
        SecretsSource::File { path, decrypted } => (path, decrypted.as_ref()),
    };
    if let MissingSecrets::DeriveFrom(from) = &args.missing_secrets {
        return adopt(ctx, path, decrypted, from);
    }
    let contract = args.contract;
    match read_bundle_file(path, decrypted)? {
        Some(bundle) => Ok((Some(bundle), Source::Given)),
        None if matches!(args.missing_secrets, MissingSecrets::Generate) => {
            let bundle = Bundle::generate((u64::from(contract.major), u64::from(contract.minor)))
                .map_err(module_error)?;
            Ok((Some(bundle), Source::Generated))
        }
        None => Err(ModuleError::new(format!(
            "secrets_file {} does not exist; set generate_secrets: true to create a new bundle \
             (only for a new cluster: a new bundle cannot manage a cluster built from another one), \
             or {FROM_CONFIG}: <its controlplane.yaml> to recover the bundle of a cluster that exists",
            path.display()
        ))),
    }
}

/// The bundle of an existing cluster, recovered from its control plane's config `from`: to be
/// written when `secrets_file` does not exist, the file's own when it holds the same bundle, and a
/// failure when it holds another (a file holding keys is never overwritten).
fn adopt(
    ctx: &mut Context,
    path: &Path,
    decrypted: Option<&Map<String, Value>>,
    from: &Path,
) -> Result<(Option<Bundle>, Source), ModuleError> {
    let fail = |why: String| ModuleError::new(format!("{FROM_CONFIG} {}: {why}", from.display()));
    let text = match std::fs::read_to_string(from) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(fail(
                "does not exist; give the path of the control plane's machine config (the \
                 controlplane.yaml that talosctl gen config wrote)"
                    .into(),
            ));
        }
        Err(e) => return Err(fail(format!("cannot read it: {e}"))),
    };
    if text.trim_start().starts_with("$ANSIBLE_VAULT;") {
        return Err(fail(format!(
            "is encrypted with Ansible Vault, which this option does not decrypt; derive the \
             bundle from a decrypted copy (ansible-vault decrypt --output controlplane.yaml {}), \
             then delete the copy",
            from.display()
        )));
    }
    let cfg = MachineConfig::parse(&text).map_err(|e| {
        fail(format!(
            "not a machine config ({e:#}); give the control plane's machine config \
             (controlplane.yaml)"
        ))
    })?;
    for s in redact::secret_values(&cfg) {
        ctx.mask(s);
    }
    let derived = ferro_talos_config::adopt::bundle_from_config(&cfg)
        .map_err(|e| fail(format!("cannot recover the secrets bundle from it: {e:#}")))?;
    for s in ferro_talos_secrets::secret_strings(&derived) {
        ctx.mask(s);
    }
    let Some(existing) = read_bundle_file(path, decrypted)? else {
        return Ok((Some(derived), Source::Derived));
    };
    for s in ferro_talos_secrets::secret_strings(&existing) {
        ctx.mask(s);
    }
    if existing == derived {
        return Ok((Some(existing), Source::Given));
    }
    Err(ModuleError::new(format!(
        "secrets_file {} holds another bundle than the one {FROM_CONFIG} {} holds (they differ in \
         {}); it is never overwritten. If {} is the cluster's config, move {} aside and run again; \
         otherwise point {FROM_CONFIG} at the control-plane config of the cluster that bundle is for",
        path.display(),
        from.display(),
        differing_keys(&existing.to_value(), &derived.to_value(), "").join(", "),
        from.display(),
        path.display(),
    )))
}

/// The dotted key paths whose values differ between two bundles' file forms (names, never values).
fn differing_keys(a: &Value, b: &Value, at: &str) -> Vec<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .flat_map(|k| {
                    let path = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    differing_keys(
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        &path,
                    )
                })
                .collect()
        }
        _ if a == b => Vec::new(),
        _ => vec![at.to_string()],
    }
}

struct FileOutcome {
    changed: bool,
    changed_paths: Vec<String>,
    risky: Value,
    diff: Option<Diff>,
}

/// Compares the new config with the file already at `dest` after normalisation (both sides
/// re-encoded by the same encoder), and writes it when it differs.
fn converge_config_file(
    ctx: &mut Context,
    dest: &Path,
    cfg: &MachineConfig,
    text: &str,
    rules: Rules,
) -> Result<FileOutcome, ModuleError> {
    let existing_text = read_optional(dest).map_err(module_error)?;
    let existing = match &existing_text {
        Some(t) => match MachineConfig::parse(t) {
            Ok(c) => Some(c),
            Err(_) => {
                ctx.warn(format!(
                    "{} does not hold a valid config; it will be replaced",
                    dest.display()
                ));
                None
            }
        },
        None => None,
    };
    if let Some(old) = &existing {
        for s in redact::secret_values(old) {
            ctx.mask(s);
        }
    }
    let before = existing.clone().unwrap_or_default();
    let same = existing
        .as_ref()
        .map(|c| c.to_yaml_with(rules) == text)
        .unwrap_or(false);
    let changed_paths = if same {
        Vec::new()
    } else {
        diff::changed_paths(&before, cfg)
    };
    let risky: Vec<Value> = risk::risky_changes(&before, cfg)
        .into_iter()
        .map(|r| json!({"path": r.path, "reason": r.reason}))
        .collect();
    let diff = (!same && ctx.diff).then(|| {
        let (b, a) = redact::redacted_pair(&before, cfg);
        let before_text = if existing_text.is_some() {
            b.to_yaml_with(rules)
        } else {
            String::new()
        };
        Diff::new(before_text, a.to_yaml_with(rules)).headers(
            format!("{} (secrets masked)", dest.display()),
            format!("{} (secrets masked)", dest.display()),
        )
    });
    if !same && !ctx.check_mode {
        write_atomic(dest, text.as_bytes(), SECRET_MODE).map_err(module_error)?;
    }
    Ok(FileOutcome {
        changed: !same,
        changed_paths,
        risky: Value::Array(risky),
        diff,
    })
}

struct TalosconfigOutcome {
    changed: bool,
    reason: String,
    diff: Option<Diff>,
}

fn converge_talosconfig(
    ctx: &mut Context,
    talosconfig: &TalosconfigArgs,
    bundle: &Bundle,
    cluster_name: &str,
    now: OffsetDateTime,
) -> Result<TalosconfigOutcome, ModuleError> {
    let TalosconfigArgs {
        path,
        endpoints,
        nodes,
        renew_before,
    } = talosconfig;
    let (path, renew_before) = (path.as_path(), *renew_before);
    let (os_ca_crt, _) = bundle.os_ca_pem().map_err(module_error)?;

    let existing_text = read_optional(path).map_err(module_error)?;
    let existing = existing_text.as_deref().map(TalosConfig::from_yaml);
    let (mut desired, reason) = match existing {
        None => (None, "no talosconfig yet".to_string()),
        Some(Err(e)) => (
            None,
            format!("the existing file is not a valid talosconfig ({e:#})"),
        ),
        Some(Ok(cfg)) => match cfg.needs_renewal(cluster_name, &os_ca_crt, renew_before, now) {
            Some(why) => (Some(cfg), why),
            None => {
                let reason =
                    "admin certificate is valid and signed by the cluster's CA".to_string();
                (Some(cfg), reason)
            }
        },
    };
    if let Some(c) = desired
        .as_ref()
        .and_then(|cfg| cfg.contexts.get(cluster_name))
    {
        ctx.mask(c.key.clone());
    }
    let keep_cert = desired
        .as_ref()
        .map(|c| {
            c.needs_renewal(cluster_name, &os_ca_crt, renew_before, now)
                .is_none()
        })
        .unwrap_or(false);
    let mut reason = reason;
    let new_cfg = if keep_cert {
        // Keep the certificate; only endpoints, nodes and the current context may change.
        let mut cfg = desired.take().expect("checked above");
        let context = cfg
            .contexts
            .get_mut(cluster_name)
            .expect("checked by needs_renewal");
        let mut updates = Vec::new();
        if &context.endpoints != endpoints {
            context.endpoints = endpoints.clone();
            updates.push("endpoints");
        }
        if &context.nodes != nodes {
            context.nodes = nodes.clone();
            updates.push("nodes");
        }
        if cfg.context.as_deref() != Some(cluster_name) {
            cfg.context = Some(cluster_name.to_string());
            updates.push("current context");
        }
        if !updates.is_empty() {
            reason = format!("{reason}; updated {}", updates.join(" and "));
        }
        cfg
    } else {
        let fresh = TalosConfig::for_cluster(bundle, cluster_name, endpoints, nodes, now)
            .map_err(module_error)?;
        match desired.take() {
            // Other contexts in the file are the user's: keep them.
            Some(mut cfg) => {
                let ctx_value = fresh
                    .contexts
                    .get(cluster_name)
                    .cloned()
                    .expect("just issued");
                cfg.contexts.insert(cluster_name.to_string(), ctx_value);
                cfg.context = Some(cluster_name.to_string());
                reason = format!("re-issued the admin certificate: {reason}");
                cfg
            }
            None => {
                reason = format!("issued an admin certificate: {reason}");
                fresh
            }
        }
    };
    if let Some(c) = new_cfg.contexts.get(cluster_name) {
        ctx.mask(c.key.clone());
    }
    let text = new_cfg.to_yaml();
    let changed = existing_text.as_deref() != Some(text.as_str());
    let diff = (changed && ctx.diff)
        .then(|| Diff::prepared(format!("talosconfig {}: {reason}\n", path.display())));
    if changed && !ctx.check_mode {
        write_atomic(path, text.as_bytes(), SECRET_MODE).map_err(module_error)?;
    }
    Ok(TalosconfigOutcome {
        changed,
        reason,
        diff,
    })
}

fn cluster_name(args: &Args, cfg: Option<&MachineConfig>) -> Option<String> {
    if let Some(name) = &args.cluster_name {
        return Some(name.clone());
    }
    cfg?.v1alpha1()?
        .pointer("/cluster/clusterName")?
        .as_str()
        .map(str::to_string)
}

/// The whole error chain (`{:#}`), of an anyhow error or of a library crate's typed one.
fn module_error(e: impl std::fmt::Display) -> ModuleError {
    ModuleError::new(format!("{e:#}"))
}
