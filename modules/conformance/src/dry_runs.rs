//! ApplyConfiguration as dry runs only (`dry_run: true`: Talos validates and compares, and changes
//! nothing): the node's own live config, which should change nothing, and two configs Talos's
//! strict decoding rejects, for the exact code and text of the rejection.

use std::time::{Duration, Instant};

use ferro_talos_client::{Apply, ApplyMode, TalosClient};
use ferro_talos_config::MachineConfig;
use serde_json::{Value, json};

use crate::layout::Node;
use crate::normalise::Normaliser;
use crate::record::Record;
use crate::wire_shape;

/// The modules' try timeout (talos_apply's default), sent with every dry run as they send it.
const TRY_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn probes(client: &TalosClient, node: &Node, normaliser: &Normaliser) -> Vec<Record> {
    let mut out = Vec::new();
    for (probe, config) in configs(node) {
        out.push(dry_run(client, normaliser, &node.label, probe, config).await);
    }
    out
}

async fn dry_run(
    client: &TalosClient,
    normaliser: &Normaliser,
    label: &str,
    probe: &str,
    config: Result<Vec<u8>, String>,
) -> Record {
    let started = Instant::now();
    let config = match config {
        Ok(c) => c,
        Err(why) => return Record::not_run(probe, label, &why, normaliser),
    };
    // dry_run = true: Talos validates and compares, and changes nothing.
    match client
        .apply_configuration(&config, ApplyMode::Auto, Apply::DryRun, Some(TRY_TIMEOUT))
        .await
    {
        Ok(reply) => {
            // mode_details holds Talos's diff of the config, secrets included: only its
            // summary line (the second, as talos_apply reads it) is kept.
            let summary = reply.mode_details.lines().nth(1).unwrap_or_default();
            let warnings: Vec<String> = reply.warnings.iter().map(|w| normaliser.text(w)).collect();
            Record::new(probe, label, started)
                .shape(wire_shape::apply_configuration(&reply))
                .fact("mode", reply.mode().as_str_name())
                .fact("summary", normaliser.text(summary))
                .ids(warnings)
        }
        Err(e) => Record::new(probe, label, started).failed(&e, normaliser),
    }
}

/// The configs the dry runs send: the node's own live config (nothing to change), the same with an
/// unknown key, and the same with a document of an unknown kind (Talos rejects both).
fn configs(node: &Node) -> Vec<(&'static str, Result<Vec<u8>, String>)> {
    let mut text = String::from_utf8_lossy(&node.live_config).into_owned();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let unknown_kind = format!(
        "{text}---\napiVersion: v1alpha1\nkind: ConformanceProbeUnknownKind\nname: conformance-probe\n"
    );
    vec![
        (
            "ApplyConfiguration dry run: own live config",
            Ok(node.live_config.clone()),
        ),
        (
            "ApplyConfiguration dry run: unknown key machine.kubelet.extraArgz",
            with_unknown_key(&node.parsed_config).map(String::into_bytes),
        ),
        (
            "ApplyConfiguration dry run: unknown document kind",
            Ok(unknown_kind.into_bytes()),
        ),
    ]
}

fn with_unknown_key(config: &MachineConfig) -> Result<String, String> {
    let mut config = config.clone();
    let v1 = config
        .v1alpha1_mut()
        .ok_or("the live config has no v1alpha1 document")?;
    let machine = v1
        .get_mut("machine")
        .and_then(Value::as_object_mut)
        .ok_or("the live config has no machine section")?;
    let kubelet = machine
        .entry("kubelet")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("machine.kubelet of the live config is not a mapping")?;
    kubelet.insert("extraArgz".into(), json!({"conformance-probe": "true"}));
    Ok(config.to_yaml())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unknown_key_is_the_only_change() {
        let live = "version: v1alpha1\nmachine:\n    type: worker\n    kubelet:\n        image: ghcr.io/siderolabs/kubelet:v1.36.1\ncluster:\n    clusterName: prod\n";
        let parsed = MachineConfig::parse(live).unwrap();
        let changed = MachineConfig::parse(&with_unknown_key(&parsed).unwrap()).unwrap();
        let kubelet = changed
            .v1alpha1()
            .unwrap()
            .pointer("/machine/kubelet")
            .unwrap();
        assert_eq!(kubelet["extraArgz"]["conformance-probe"], "true");
        assert_eq!(kubelet["image"], "ghcr.io/siderolabs/kubelet:v1.36.1");
        assert_eq!(
            changed.v1alpha1().unwrap()["cluster"]["clusterName"],
            "prod"
        );
    }
}
