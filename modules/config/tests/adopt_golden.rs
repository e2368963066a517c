//! The bundle recovered from a config talosctl generated must be the bundle talosctl generated it
//! from: `stability-secrets.yaml` and the `stability-v1.1x-base-controlplane.yaml` fixtures made
//! from it, base and with overrides (v1.13.6 for contracts 1.11-1.13: one v1alpha1 document;
//! v1.14.0-rc.1: the multi-document shape, where the Kubernetes CAs sit in documents of their own).
//!
//! Byte for byte, except the fixture's first line: `# test set of secrets ...` is a comment a
//! human put in upstream's test data, which no config carries (talosctl's own
//! `gen secrets --from-controlplane-config` does not write it either).

use ferro_talos_config::MachineConfig;
use ferro_talos_config::adopt::{WORKER_HINT, bundle_from_config};

const SECRETS: &str = "v1.13.6/stability-secrets.yaml";

fn without_leading_comments(text: &str) -> String {
    text.lines()
        .skip_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn upstream_controlplane_configs_give_back_upstream_secrets_byte_for_byte() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let secrets = ferro_talos_fixtures::read(SECRETS);
    let expected = without_leading_comments(&secrets);
    assert_eq!(
        secrets.lines().count(),
        expected.lines().count() + 1,
        "exactly one comment line is set aside"
    );
    for fixture in [
        "v1.13.6/stability-v1.13-base-controlplane.yaml",
        "v1.13.6/stability-v1.12-base-controlplane.yaml",
        "v1.13.6/stability-v1.11-base-controlplane.yaml",
        "v1.14.0-rc.1/stability-v1.14-base-controlplane.yaml",
        "v1.13.6/stability-v1.13-overrides-controlplane.yaml",
        "v1.14.0-rc.1/stability-v1.14-overrides-controlplane.yaml",
    ] {
        let cfg = MachineConfig::parse(&ferro_talos_fixtures::read(fixture)).unwrap();
        let bundle = bundle_from_config(&cfg).unwrap_or_else(|e| panic!("{fixture}: {e:#}"));
        let got = bundle.to_yaml();
        if got != expected {
            let line = got
                .lines()
                .zip(expected.lines())
                .position(|(a, b)| a != b)
                .map(|i| i + 2);
            // Values are secrets of a test set, but still: say where, not what.
            panic!("{fixture}: derived bundle differs from {SECRETS} (first at its line {line:?})");
        }
    }
}

#[test]
fn upstream_worker_configs_are_refused() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    for fixture in [
        "v1.13.6/stability-v1.13-base-worker.yaml",
        "v1.14.0-rc.1/stability-v1.14-base-worker.yaml",
    ] {
        let cfg = MachineConfig::parse(&ferro_talos_fixtures::read(fixture)).unwrap();
        let e = bundle_from_config(&cfg).unwrap_err().to_string();
        assert!(e.contains(WORKER_HINT), "{fixture}: {e}");
    }
}
