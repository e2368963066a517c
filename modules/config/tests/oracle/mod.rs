//! What the differential tests share: the collection's render options as the oracle's JSON, and
//! one render through the collection's code and through upstream's (tests/oracle).

use ferro_talos_config::MachineConfig;
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::GenerateOptions;
use ferro_talos_config::normalize::Rules;
use ferro_talos_config::patch::Patch;
use ferro_talos_oracle::{Oracle, Release};
use ferro_talos_secrets::Bundle;
use serde_json::{Value, json};

/// The release whose talosctl renders a contract's configs as the collection does: 1.14.1 for
/// 1.14, and the newest 1.13 (v1.13.9) for 1.11 to 1.13. (talosctl 1.14.1 renders the older
/// contracts too, but its YAML library single-quotes `off` and the like, where 1.13.9 double-quotes:
/// `ferro_talos_goyaml::quoted_for_yaml_1_1`.)
pub fn releases_for(contract: Contract) -> &'static [Release] {
    if contract.greater_than(1, 13) {
        &[Release::V1_14_1]
    } else {
        &[Release::V1_13_9]
    }
}

pub fn options_json(o: &GenerateOptions) -> Value {
    json!({
        "contract": o.contract.to_string(),
        "machine_type": o.machine_type.as_str(),
        "cluster_name": o.cluster_name,
        "endpoint": o.endpoint,
        "kubernetes_version": o.kubernetes_version,
        "install_disk": o.install_disk,
        "install_image": o.install_image,
        "additional_sans": o.additional_sans,
        "dns_domain": o.dns_domain,
        "pod_subnets": o.pod_subnets,
        "service_subnets": o.service_subnets,
        "allow_scheduling_on_control_planes": o.allow_scheduling_on_control_planes,
        "local_api_server_port": o.local_api_server_port,
        "install_extra_kernel_args": o.install_extra_kernel_args,
        "sysctls": o.sysctls,
        "cni": o.cni.as_ref().map(|c| json!({"name": c.name, "urls": c.urls})),
        "registry_mirrors": o.registry_mirrors.iter().map(|(h, u)| json!([h, u])).collect::<Vec<_>>(),
        "kubespan": o.kubespan,
    })
}

/// What one side made of a render: the config text, or that it refused (the texts of a refusal
/// differ between the two programs and are not compared here).
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Config(String),
    Refused(String),
}

impl Outcome {
    pub fn same_verdict(&self, other: &Outcome) -> bool {
        match (self, other) {
            (Outcome::Config(a), Outcome::Config(b)) => a == b,
            (Outcome::Refused(_), Outcome::Refused(_)) => true,
            _ => false,
        }
    }
}

/// The collection's render: talos_config's path (generate, patches, encode for the contract).
pub fn ours(bundle: &Bundle, o: &GenerateOptions, patches: &[String]) -> Outcome {
    let refused = |e: ferro_talos_config::error::Error| Outcome::Refused(e.to_string());
    let mut cfg = match MachineConfig::generate(bundle, o) {
        Ok(c) => c,
        Err(e) => return refused(e),
    };
    let mut parsed = Vec::new();
    for p in patches {
        match Patch::parse(p) {
            Ok(p) => parsed.push(p),
            Err(e) => return refused(e),
        }
    }
    if let Err(e) = cfg.apply_patches_with(&parsed, Rules::for_contract(o.contract)) {
        return refused(e);
    }
    // talos_config refuses documents the contract's release does not know (modules/tasks/src/shared/render.rs).
    let unknown = ferro_talos_config::known_keys::kinds_unknown_to(&cfg, o.contract);
    if !unknown.is_empty() {
        return Outcome::Refused(unknown.join("; "));
    }
    Outcome::Config(cfg.to_yaml_with(Rules::for_contract(o.contract)))
}

/// Upstream's render, or `None` where upstream's generate has no option for this input (a 1.14
/// CNI other than one custom URL) or where upstream's JSON 6902 path changes the config by its
/// round trip through YAML 1.1 (`json6902_lossless` in tests/oracle/generate.go: `yes` becomes
/// `true`, `<<` a merge key). The collection applies JSON 6902 patches to the decoded documents,
/// which keeps every value; those cases are counted by the callers, not compared.
pub fn theirs(
    oracle: &mut Oracle,
    bundle_yaml: &str,
    o: &GenerateOptions,
    patches: &[String],
) -> Option<Outcome> {
    let answer = oracle.ask(&json!({
        "op": "generate",
        "secrets": bundle_yaml,
        "options": options_json(o),
        "patches": patches,
    }));
    if answer.get("unsupported").is_some() || answer["json6902_lossless"] == false {
        return None;
    }
    if let Some(p) = answer.get("panic") {
        panic!(
            "upstream's generate panicked ({}): {p}",
            oracle.release().tag()
        );
    }
    Some(
        match (answer["config"].as_str(), answer["error"].as_str()) {
            (Some(c), _) => Outcome::Config(c.to_string()),
            (None, Some(e)) => Outcome::Refused(e.to_string()),
            _ => panic!("oracle answer without config or error: {answer}"),
        },
    )
}

/// Upstream's encoder loses a few values: a block scalar with a leading space inside a sequence
/// item gets the indicator `|4`, which either does not parse back at all ("did not find expected
/// '-' indicator") or parses as something else (`- |4` over ` #` reads as an empty string and a
/// comment). Where upstream's text does not read back as written, in upstream's own loader and
/// encoder, the comparison is of values: upstream must make of our text exactly the text it
/// wrote itself. `Ok(false)` when upstream's text reads back as written (compare bytes then).
pub fn upstream_loses_what_we_keep(
    oracle: &mut Oracle,
    ours: &str,
    theirs: &str,
) -> Result<bool, String> {
    let reencode = |oracle: &mut Oracle, text: &str| {
        let answer = oracle.ask(&json!({"op": "reencode", "config": text}));
        answer["config"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| answer["error"].as_str().unwrap_or("no answer").to_string())
    };
    if reencode(oracle, theirs).as_deref() == Ok(theirs) {
        return Ok(false);
    }
    match reencode(oracle, ours) {
        Ok(again) if again == theirs => Ok(true),
        Ok(again) => Err(format!(
            "upstream's text does not read back, and ours holds other values: {}",
            explain(
                &Outcome::Config(again),
                &Outcome::Config(theirs.to_string())
            )
        )),
        Err(e) => Err(format!(
            "upstream's text does not read back, nor does ours: {e}"
        )),
    }
}

/// Where the two configs first differ (three lines of each from there), for the failure
/// message. The bundles are fresh test bundles: no user's secret is ever in these.
pub fn explain(ours: &Outcome, theirs: &Outcome) -> String {
    let short = |s: &str| s.chars().take(200).collect::<String>();
    match (ours, theirs) {
        (Outcome::Config(a), Outcome::Config(b)) => {
            let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
            let at = (0..a.len().max(b.len()))
                .find(|&i| a.get(i) != b.get(i))
                .unwrap_or(0);
            let window = |l: &[&str]| {
                l.iter()
                    .skip(at)
                    .take(3)
                    .map(|x| short(x))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            format!(
                "line {}:\n  ours:     {}\n  upstream: {}",
                at + 1,
                window(&a),
                window(&b)
            )
        }
        (Outcome::Config(_), Outcome::Refused(e)) => {
            format!("we render it; upstream refuses: {}", short(e))
        }
        (Outcome::Refused(e), Outcome::Config(_)) => {
            format!("upstream renders it; we refuse: {}", short(e))
        }
        _ => unreachable!("two refusals agree"),
    }
}
