//! `MachineConfig::generate` against Talos's own golden outputs (config.md §3.2), byte for byte.

use ferro_talos_config::MachineConfig;
use ferro_talos_config::contract::Contract;
use ferro_talos_config::generate::{GenerateOptions, MachineType};
use ferro_talos_config::normalize::Rules;
use ferro_talos_config::patch::Patch;
use ferro_talos_secrets::{Bundle, bundle};
use serde_json::Value;

mod stability;
use stability::{base, overrides};

fn fixture(version: &str, name: &str) -> String {
    ferro_talos_fixtures::read(&format!("{version}/{name}"))
}

/// Test-only bundle reader: the secrets crate owns the real loader.
fn stability_bundle() -> Bundle {
    let v: Value = serde_saphyr::from_str(&fixture("v1.13.6", "stability-secrets.yaml")).unwrap();
    let s = |path: &[&str]| -> String {
        let mut cur = &v;
        for p in path {
            cur = cur.get(*p).unwrap_or_else(|| panic!("missing {path:?}"));
        }
        cur.as_str()
            .unwrap_or_else(|| panic!("{path:?} not a string"))
            .to_string()
    };
    let pair = |name: &str| bundle::CertAndKey {
        crt: s(&["certs", name, "crt"]),
        key: s(&["certs", name, "key"]),
    };
    Bundle {
        cluster: bundle::ClusterSecrets {
            id: s(&["cluster", "id"]),
            secret: s(&["cluster", "secret"]),
        },
        secrets: bundle::Secrets {
            bootstrap_token: s(&["secrets", "bootstraptoken"]),
            secretbox_encryption_secret: Some(s(&["secrets", "secretboxencryptionsecret"])),
            aescbc_encryption_secret: None,
        },
        trustd_info: bundle::TrustdInfo {
            token: s(&["trustdinfo", "token"]),
        },
        certs: bundle::Certs {
            etcd: pair("etcd"),
            k8s: pair("k8s"),
            k8s_aggregator: pair("k8saggregator"),
            k8s_service_account: bundle::KeyOnly {
                key: s(&["certs", "k8sserviceaccount", "key"]),
            },
            os: pair("os"),
        },
    }
}

fn assert_same(got: &str, want: &str, what: &str) {
    if got != want {
        let diff = similar::TextDiff::from_lines(want, got);
        panic!(
            "{what} differs from the fixture:\n{}",
            diff.unified_diff().header("fixture", "generated")
        );
    }
}

fn render(opts: &GenerateOptions, patches: &[&str]) -> String {
    let mut cfg = MachineConfig::generate(&stability_bundle(), opts).unwrap();
    let patches: Vec<Patch> = patches.iter().map(|p| Patch::parse(p).unwrap()).collect();
    cfg.apply_patches(&patches).unwrap();
    cfg.to_yaml_with(Rules::for_contract(opts.contract))
}

#[test]
fn base_controlplane_1_11_1_12_1_13() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    for (c, file) in [
        (Contract::V1_11, "stability-v1.11-base-controlplane.yaml"),
        (Contract::V1_12, "stability-v1.12-base-controlplane.yaml"),
        (Contract::V1_13, "stability-v1.13-base-controlplane.yaml"),
    ] {
        let got = render(&base(c, MachineType::ControlPlane), &[]);
        assert_same(&got, &fixture("v1.13.6", file), file);
    }
}

#[test]
fn base_worker_1_13() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let got = render(&base(Contract::V1_13, MachineType::Worker), &[]);
    assert_same(
        &got,
        &fixture("v1.13.6", "stability-v1.13-base-worker.yaml"),
        "1.13 worker",
    );
}

#[test]
fn overrides_1_13_with_stability_patch() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let patch = fixture("v1.13.6", "stability-patch.yaml");
    for (t, file) in [
        (
            MachineType::ControlPlane,
            "stability-v1.13-overrides-controlplane.yaml",
        ),
        (MachineType::Worker, "stability-v1.13-overrides-worker.yaml"),
    ] {
        let got = render(&overrides(Contract::V1_13, t), &[&patch]);
        assert_same(&got, &fixture("v1.13.6", file), file);
    }
}

#[test]
fn base_1_14() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    for (t, file) in [
        (
            MachineType::ControlPlane,
            "stability-v1.14-base-controlplane.yaml",
        ),
        (MachineType::Worker, "stability-v1.14-base-worker.yaml"),
    ] {
        let got = render(&base(Contract::V1_14, t), &[]);
        assert_same(&got, &fixture("v1.14.0-rc.1", file), file);
    }
}

/// The 1.14 fixtures were patched with a kubelet `clusterDNS` instead of the 1.13 extraMounts.
#[test]
fn overrides_1_14_with_cluster_dns_patch() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let patch = "apiVersion: v1alpha1\nkind: KubeletConfig\nclusterDNS:\n  - 3.3.3.3\n";
    for (t, file) in [
        (
            MachineType::ControlPlane,
            "stability-v1.14-overrides-controlplane.yaml",
        ),
        (MachineType::Worker, "stability-v1.14-overrides-worker.yaml"),
    ] {
        let got = render(&overrides(Contract::V1_14, t), &[patch]);
        assert_same(&got, &fixture("v1.14.0-rc.1", file), file);
    }
}

#[test]
fn cli_defaults_add_install_disk_and_image() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let opts = GenerateOptions::new(
        Contract::CURRENT,
        MachineType::ControlPlane,
        "c",
        "https://c:6443",
    );
    let out = MachineConfig::generate(&stability_bundle(), &opts)
        .unwrap()
        .to_yaml();
    assert!(out.contains(
        "    install:\n        disk: /dev/sda\n        image: ghcr.io/siderolabs/installer:v1.13.9\n        wipe: false\n"
    ));
    // The newest 1.13 release's defaults (pkg/machinery/constants/constants.go at v1.13.9).
    assert!(out.contains("image: registry.k8s.io/kube-apiserver:v1.36.3\n"));
}

#[test]
fn contract_switches_for_registries_and_kubespan() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let mut o = base(Contract::V1_11, MachineType::Worker);
    o.registry_mirrors = vec![
        ("docker.io".into(), "https://m1".into()),
        ("docker.io".into(), "https://m2".into()),
    ];
    o.kubespan = true;
    let out = render(&o, &[]);
    assert!(
        out.contains("    network:\n        kubespan:\n            enabled: true\n"),
        "{out}"
    );
    assert!(out.contains(
        "    registries:\n        mirrors:\n            docker.io:\n                endpoints:\n                    - https://m1\n                    - https://m2\n    features:\n"
    ), "{out}");
    assert!(!out.contains("kind: HostnameConfig"));

    o.contract = Contract::V1_13;
    let out = render(&o, &[]);
    assert!(
        !out.contains("    registries:\n        mirrors") && !out.contains("kubespan:"),
        "{out}"
    );
    assert!(out.ends_with(
        "kind: RegistryMirrorConfig\nname: docker.io\nendpoints:\n    - url: https://m1\n    - url: https://m2\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n---\napiVersion: v1alpha1\nkind: KubeSpanConfig\nenabled: true\n"
    ), "{out}");
}

#[test]
fn generate_rejects_bad_inputs() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let b = stability_bundle();
    let mut o = base(Contract::V1_13, MachineType::Worker);
    o.endpoint = "base:6443".into();
    let e = MachineConfig::generate(&b, &o).unwrap_err().to_string();
    assert!(e.contains("https://base:6443"), "{e}");
    let mut o = base(Contract::V1_13, MachineType::Worker);
    o.contract = Contract::new(1, 9);
    let e = MachineConfig::generate(&b, &o).unwrap_err().to_string();
    assert!(e.contains("supported contracts"), "{e}");
    let mut o = base(Contract::V1_14, MachineType::ControlPlane);
    let mut bad = b.clone();
    bad.certs.k8s.crt = "not base64!".into();
    o.cluster_name = "x".into();
    let e = MachineConfig::generate(&bad, &o).unwrap_err().to_string();
    assert!(
        e.contains("certs.k8s.crt") && !e.contains("not base64!"),
        "{e}"
    );
}

/// talosctl v1.14.1's CLI defaults for the 1.14 contract: the installer goes into
/// `UnattendedInstallConfig` (`pkg/machinery/config/generate/init.go` unattendedInstallConfig @
/// v1.14.1) and is the Image Factory's vanilla installer with talosctl's own tag
/// (`cmd/talosctl/cmd/mgmt/gen/config.go` --install-image, `pkg/images/images.go` @ v1.14.1), and
/// Kubernetes is 1.37.0 (`pkg/machinery/constants/constants.go` @ v1.14.1). Upstream's stability
/// fixtures set no install image (`installer: {}`), so they pin the rest of the document.
#[test]
fn cli_defaults_1_14_add_the_factory_installer() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let opts = GenerateOptions::new(
        Contract::V1_14,
        MachineType::ControlPlane,
        "c",
        "https://c:6443",
    );
    let out = MachineConfig::generate(&stability_bundle(), &opts)
        .unwrap()
        .to_yaml();
    assert!(
        out.contains(
            "kind: UnattendedInstallConfig\ninstaller:\n    image: factory.talos.dev/metal-installer/\
             376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1\n\
             provisioning:\n    diskSelector:\n        match: disk.dev_path == \"/dev/sda\"\n"
        ),
        "{out}"
    );
    assert!(!out.contains("ghcr.io/siderolabs/installer"), "{out}");
    assert!(
        out.contains("image: registry.k8s.io/kube-apiserver:v1.37.0\n"),
        "{out}"
    );
}
