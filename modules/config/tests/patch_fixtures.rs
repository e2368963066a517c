//! Patching, redaction, diff, risk, live-apply and validation against Talos's golden stability
//! fixtures (config.md §3.2, §9).

use ferro_talos_config::MachineConfig;
use ferro_talos_config::diff::changed_paths;
use ferro_talos_config::document::DocId;
use ferro_talos_config::encode::encode_document;
use ferro_talos_config::live::reboot_required;
use ferro_talos_config::patch::{Patch, duplicate_warnings};
use ferro_talos_config::redact::{MASK, redacted, redacted_pair, secret_values};
use ferro_talos_config::risk::risky_changes;
use ferro_talos_config::validate::{Mode, check, validate_mode};

fn fixture(name: &str) -> String {
    ferro_talos_fixtures::read(name)
}

fn load(name: &str) -> MachineConfig {
    MachineConfig::parse(&fixture(name)).expect("fixture parses")
}

/// The `overrides` generation options expressed as one strategic patch (config.md §3.2).
const OVERRIDES_AS_PATCH: &str = r#"
machine:
  certSANs: [foo, bar]
  install:
    disk: /dev/vda
    extraKernelArgs: [foo=bar, bar=baz]
  sysctls:
    foo: bar
cluster:
  controlPlane:
    localAPIServerPort: 5443
  network:
    cni:
      name: custom
      urls: [https://example.com/cni.yaml]
    dnsDomain: example.com
  apiServer:
    certSANs: [foo, bar]
  allowSchedulingOnControlPlanes: true
---
apiVersion: v1alpha1
kind: RegistryMirrorConfig
name: ghcr.io
endpoints:
  - url: https://ghcr.io.my-mirror.com
"#;

fn sorted_by_id(c: &MachineConfig) -> Vec<(DocId, serde_json::Value)> {
    let mut v: Vec<_> = c.docs.iter().map(|d| (DocId::of(d), d.clone())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn base_plus_patches_equals_overrides_golden() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let mut cfg = load("v1.13.6/stability-v1.13-base-controlplane.yaml");
    let patches = [
        Patch::parse(OVERRIDES_AS_PATCH).unwrap(),
        Patch::parse(&fixture("v1.13.6/stability-patch.yaml")).unwrap(),
    ];
    cfg.apply_patches(&patches).unwrap();
    let golden = load("v1.13.6/stability-v1.13-overrides-controlplane.yaml");
    // Key order is the encoder's business; document order differs because patches append.
    assert_eq!(sorted_by_id(&cfg), sorted_by_id(&golden));
    assert!(DocId::of(&cfg.docs[0]).is_v1alpha1());
    assert!(duplicate_warnings(&cfg).is_empty());
}

#[test]
fn stability_patch_only_touches_extra_mounts() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let base = load("v1.13.6/stability-v1.13-base-worker.yaml");
    let mut cfg = base.clone();
    cfg.apply_patch(&Patch::parse(&fixture("v1.13.6/stability-patch.yaml")).unwrap())
        .unwrap();
    assert_eq!(
        changed_paths(&base, &cfg),
        vec!["machine.kubelet.extraMounts"]
    );
    let golden = load("v1.13.6/stability-v1.13-overrides-worker.yaml");
    assert_eq!(
        cfg.v1alpha1().unwrap()["machine"]["kubelet"]["extraMounts"],
        golden.v1alpha1().unwrap()["machine"]["kubelet"]["extraMounts"]
    );
    // Applying it again duplicates the mount: render from the pristine base instead.
    cfg.apply_patch(&Patch::parse(&fixture("v1.13.6/stability-patch.yaml")).unwrap())
        .unwrap();
    let mounts = cfg.v1alpha1().unwrap()["machine"]["kubelet"]["extraMounts"]
        .as_array()
        .unwrap();
    assert_eq!(mounts.len(), 2);
}

#[test]
fn json_patch_fails_on_generated_multi_document_config() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let mut cfg = load("v1.13.6/stability-v1.13-base-controlplane.yaml");
    let p = Patch::parse("- op: remove\n  path: /cluster/apiServer/admissionControl\n").unwrap();
    let e = cfg.apply_patch(&p).unwrap_err().to_string();
    assert!(
        e.contains("JSON6902 patches are not supported for multi-document machine configuration")
    );
}

#[test]
fn redaction_of_golden_configs_leaks_nothing() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    for name in [
        "v1.13.6/stability-v1.13-base-controlplane.yaml",
        "v1.13.6/stability-v1.13-base-worker.yaml",
        "v1.14.0-rc.1/stability-v1.14-base-controlplane.yaml",
        "v1.14.0-rc.1/stability-v1.14-base-worker.yaml",
    ] {
        let cfg = load(name);
        let secrets = secret_values(&cfg);
        assert!(!secrets.is_empty(), "{name}: no secrets found");
        let shown = serde_json::to_string(&redacted(&cfg).docs).unwrap();
        for s in &secrets {
            assert!(
                !shown.contains(s.as_str()),
                "{name}: a secret of length {} leaked",
                s.len()
            );
        }
        // Public certificates stay visible.
        assert!(
            shown.contains("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t")
                || shown.contains("BEGIN CERTIFICATE")
        );
    }
    let cp = redacted(&load("v1.13.6/stability-v1.13-base-controlplane.yaml"));
    let v1 = cp.v1alpha1().unwrap();
    for p in [
        "/machine/token",
        "/machine/ca/key",
        "/cluster/secret",
        "/cluster/token",
        "/cluster/secretboxEncryptionSecret",
        "/cluster/ca/key",
        "/cluster/aggregatorCA/key",
        "/cluster/serviceAccount/key",
        "/cluster/etcd/ca/key",
    ] {
        assert_eq!(v1.pointer(p).unwrap(), MASK, "{p}");
    }
    let cp14 = redacted(&load("v1.14.0-rc.1/stability-v1.14-base-controlplane.yaml"));
    let find = |kind: &str| {
        cp14.docs
            .iter()
            .find(|d| d["kind"] == kind)
            .unwrap()
            .clone()
    };
    assert_eq!(find("DiscoveryIdentityConfig")["clusterSecret"], MASK);
    assert_eq!(
        find("KubeServiceAccountConfig")["issuer"]["privateKey"],
        MASK
    );
    assert_eq!(find("KubeAPIServerCAConfig")["issuingCA"]["key"], MASK);
    let etcd = serde_json::to_string(&find("KubeEtcdEncryptionConfig")).unwrap();
    assert!(etcd.contains("\"secret\":\"******\""), "{etcd}");
}

#[test]
fn redacted_pair_of_same_bundle_marks_nothing_changed() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let a = load("v1.13.6/stability-v1.13-base-controlplane.yaml");
    let b = load("v1.13.6/stability-v1.13-overrides-controlplane.yaml");
    let (ra, rb) = redacted_pair(&a, &b);
    let text = serde_json::to_string(&(ra.docs, rb.docs)).unwrap();
    assert!(!text.contains("(changed)"));
    // Structural diff of the masked pair is the same as of the raw pair.
    assert_eq!(
        changed_paths(&a, &b),
        changed_paths(&redacted(&a), &redacted(&b))
    );
}

#[test]
fn overrides_are_live_and_risky_where_expected() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let base = load("v1.13.6/stability-v1.13-base-controlplane.yaml");
    let over = load("v1.13.6/stability-v1.13-overrides-controlplane.yaml");
    // Every override sits in a live section (certSANs, kubelet, install, sysctls, cluster).
    assert!(!reboot_required(&base, &over));
    let risks = risky_changes(&base, &over);
    let paths: Vec<&str> = risks.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["machine.install.disk"]);
    // Going back removes the SANs.
    let back: Vec<String> = risky_changes(&over, &base)
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert!(back.contains(&"machine.certSANs".to_string()));
    assert!(back.contains(&"cluster.apiServer.certSANs".to_string()));
}

#[test]
fn golden_configs_validate() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    for name in [
        "v1.13.6/stability-v1.13-base-controlplane.yaml",
        "v1.13.6/stability-v1.13-base-worker.yaml",
        "v1.13.6/stability-v1.13-overrides-controlplane.yaml",
        "v1.13.6/stability-v1.13-overrides-worker.yaml",
        "v1.14.0-rc.1/stability-v1.14-base-controlplane.yaml",
        "v1.14.0-rc.1/stability-v1.14-base-worker.yaml",
        "v1.14.0-rc.1/stability-v1.14-overrides-controlplane.yaml",
        "v1.14.0-rc.1/stability-v1.14-overrides-worker.yaml",
    ] {
        let f = check(&load(name), Mode::Cloud);
        assert!(f.errors.is_empty(), "{name}: {:?}", f.errors);
    }
    // The base variant has no install disk, and the overrides one mixes extraKernelArgs with
    // grubUseUKICmdline: both are metal-mode errors, as with `talosctl validate --mode metal`.
    let e = validate_mode(
        &load("v1.13.6/stability-v1.13-base-worker.yaml"),
        Mode::Metal,
    )
    .unwrap_err();
    assert!(
        e.iter().any(|e| e.contains("install disk or diskSelector")),
        "{e:?}"
    );
    let e = validate_mode(
        &load("v1.13.6/stability-v1.13-overrides-worker.yaml"),
        Mode::Metal,
    )
    .unwrap_err();
    assert!(e.iter().any(|e| e.contains("extraKernelArgs")), "{e:?}");
}

#[test]
fn patched_base_encodes_to_the_golden_overrides_bytes() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let mut cfg = load("v1.13.6/stability-v1.13-base-controlplane.yaml");
    cfg.apply_patches(&[
        Patch::parse(OVERRIDES_AS_PATCH).unwrap(),
        Patch::parse(&fixture("v1.13.6/stability-patch.yaml")).unwrap(),
    ])
    .unwrap();
    // Generation puts registry documents before HostnameConfig (config.md §3.5); patches
    // append, so compare document by document in the golden order.
    let golden_text = fixture("v1.13.6/stability-v1.13-overrides-controlplane.yaml");
    let golden_cfg = MachineConfig::parse(&golden_text).unwrap();
    for gdoc in &golden_cfg.docs {
        let id = DocId::of(gdoc);
        let ours = cfg
            .docs
            .iter()
            .find(|d| DocId::of(d) == id)
            .expect("document present");
        assert_eq!(encode_document(ours), encode_document(gdoc), "{id:?}");
    }
    let v1 = encode_document(cfg.v1alpha1().unwrap());
    assert!(
        golden_text.starts_with(&v1),
        "v1alpha1 document differs from the golden bytes"
    );
}
