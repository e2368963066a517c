//! The error of every fallible function here: what failed ([`ErrorKind`]) and a sentence for
//! humans. Messages never quote config or patch values that may be secret (parse errors name a
//! document, line and column; delete errors name only identifier-like selector values).
//!
//! An error may wrap the one it was built on (`config patch 2` around why that patch failed):
//! `{}` prints the outermost message, `{:#}` the whole chain joined with ": ", as anyhow prints
//! its context chains, and [`std::error::Error::source`] walks it.

/// What failed, independent of the wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Machine config text that is not YAML, not mappings, or mixes the v1alpha1 keys with a
    /// typed document's ([`MachineConfig::parse`](crate::MachineConfig::parse)).
    InvalidConfig,
    /// Patch text that is no patch: empty, not YAML or JSON, or a document Talos would refuse
    /// (unknown keys or kinds, missing identity, duplicates) ([`Patch::parse`]); also a
    /// malformed `$patch` marker, which [`MachineConfig::apply_patch`] finds.
    ///
    /// [`Patch::parse`]: crate::patch::Patch::parse
    /// [`MachineConfig::apply_patch`]: crate::MachineConfig::apply_patch
    InvalidPatch,
    /// A well-formed patch that does not apply to this config: a type conflict in the merge, a
    /// `$patch: delete` or JSON patch path that is not there, a JSON patch on a multi-document
    /// config.
    PatchFailed,
    /// A Talos version that is not `MAJOR.MINOR[.PATCH]`.
    InvalidContract,
    /// A version contract this crate cannot render (outside
    /// [`Contract::SUPPORTED`](crate::contract::Contract::SUPPORTED)).
    UnsupportedContract,
    /// A cluster endpoint that is not (and cannot be made) an `https://host[:port]` URL.
    InvalidEndpoint,
    /// A container image reference that is not one
    /// ([`check_reference`](crate::image::check_reference)).
    InvalidImage,
    /// A [`GenerateOptions`](crate::generate::GenerateOptions) value other than the contract and
    /// endpoint: an empty cluster name, or a Kubernetes version, registry mirror or CNI name that
    /// does not read.
    InvalidOptions,
    /// A secrets bundle field that
    /// [`MachineConfig::generate`](crate::MachineConfig::generate) cannot decode (not base64 of
    /// PEM).
    InvalidBundle,
    /// A machine config that does not give back the secrets bundle it was made from
    /// ([`adopt::bundle_from_config`](crate::adopt::bundle_from_config)): no v1alpha1 document,
    /// a worker's config, or a secret field missing or invalid.
    NoBundleInConfig,
    /// A disk size or size condition (`>= 100GB`) that does not read as Talos reads one
    /// ([`SizeCondition::parse`](crate::disk_size::SizeCondition::parse)).
    InvalidDiskSize,
}

/// A failed operation of this crate: its kind and message, and the error it wraps (see
/// `ferro_talos_error` for how it prints).
pub type Error = ferro_talos_error::Error<ErrorKind>;

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MachineConfig;
    use crate::contract::Contract;
    use crate::generate::{GenerateOptions, MachineType, endpoint_url, validate_endpoint};
    use crate::image::check_reference;
    use crate::patch::Patch;

    /// (kind, `{}`, `{:#}`) of a failure; the texts are the ones callers printed before this type
    /// replaced anyhow, and must not change (modules and playbook tests assert them).
    fn seen<T>(r: Result<T>) -> (ErrorKind, String, String) {
        let Err(e) = r else {
            panic!("expected an error")
        };
        (e.kind(), e.to_string(), format!("{e:#}"))
    }

    fn same(kind: ErrorKind, text: &str) -> (ErrorKind, String, String) {
        (kind, text.to_string(), text.to_string())
    }

    #[test]
    fn patch_text_failures_are_invalid_patch() {
        assert_eq!(
            seen(Patch::parse("key: [unclosed\n")),
            (
                ErrorKind::InvalidPatch,
                "config patch is not valid YAML".into(),
                "config patch is not valid YAML: YAML document 1: unclosed bracket '[' at line 1, \
                 column 6"
                    .into()
            )
        );
        assert_eq!(
            seen(Patch::parse("")),
            same(
                ErrorKind::InvalidPatch,
                "config patch is empty: it holds no YAML document"
            )
        );
        // The machine config parser's words, but about a patch.
        assert_eq!(
            seen(Patch::parse("42\n")),
            same(
                ErrorKind::InvalidPatch,
                "YAML document 1: expected a mapping at the top level, found a number"
            )
        );
    }

    #[test]
    fn apply_failures_name_the_patch() {
        let base = MachineConfig::parse("version: v1alpha1\nmachine:\n  type: worker\n").unwrap();
        let ok = Patch::parse("machine:\n  install:\n    wipe: true\n").unwrap();
        let apply = |text: &str| {
            let mut cfg = base.clone();
            cfg.apply_patches(&[ok.clone(), Patch::parse(text).unwrap()])
        };
        assert_eq!(
            seen(apply("[{\"op\":\"remove\",\"path\":\"/nope\"}]")),
            (
                ErrorKind::PatchFailed,
                "config patch 2".into(),
                "config patch 2: JSON patch failed: operation '/0' failed at path '/nope': path is \
                 invalid"
                    .into()
            )
        );
        assert_eq!(
            seen(apply("machine:\n  install:\n    $patch: replace\n")),
            (
                ErrorKind::InvalidPatch,
                "config patch 2".into(),
                "config patch 2: machine.install: unsupported $patch value \"replace\", only \
                 \"delete\" is supported"
                    .into()
            )
        );
    }

    #[test]
    fn config_endpoint_contract_and_image_failures() {
        assert_eq!(
            seen(MachineConfig::parse("a: 1\n---\n- x\n")),
            same(
                ErrorKind::InvalidConfig,
                "YAML document 2: expected a mapping at the top level, found a list"
            )
        );
        assert_eq!(
            seen(validate_endpoint("base:6443")),
            same(
                ErrorKind::InvalidEndpoint,
                "invalid cluster endpoint \"base:6443\": it must be a URL starting with \
                 https://; try \"https://base:6443\""
            )
        );
        assert_eq!(
            seen(endpoint_url("10.0.0.10/api")),
            same(
                ErrorKind::InvalidEndpoint,
                "invalid cluster endpoint \"10.0.0.10/api\": write an address (10.0.0.10, \
                 10.0.0.10:6443) or a URL (https://10.0.0.10:6443)"
            )
        );
        assert_eq!(
            seen(Contract::parse("1.x")),
            same(
                ErrorKind::InvalidContract,
                "invalid Talos version \"1.x\": expected MAJOR.MINOR with an optional leading \
                 \"v\" and optional patch/pre-release suffix, e.g. \"v1.13\" or \"1.13.6\""
            )
        );
        assert_eq!(
            seen(Contract::parse("v1.10")),
            same(
                ErrorKind::UnsupportedContract,
                "unsupported Talos version contract 1.10 (from \"v1.10\"); supported contracts: \
                 1.11, 1.12, 1.13, 1.14"
            )
        );
        assert_eq!(
            seen(check_reference("")),
            same(
                ErrorKind::InvalidImage,
                "the image reference is empty; write one such as \
                 ghcr.io/siderolabs/installer:v1.13.9 or \
                 factory.talos.dev/installer/SCHEMATIC:v1.13.9"
            )
        );
    }

    #[test]
    fn generate_failures_say_which_input() {
        let bundle = ferro_talos_secrets::Bundle::generate((1, 6)).unwrap();
        let opts = |contract| {
            GenerateOptions::new(contract, MachineType::ControlPlane, "c", "https://c:6443")
        };
        let mut o = opts(Contract::V1_13);
        o.cluster_name = " ".into();
        assert_eq!(
            seen(MachineConfig::generate(&bundle, &o)),
            same(ErrorKind::InvalidOptions, "cluster name must not be empty")
        );
        let mut o = opts(Contract::V1_13);
        o.contract = Contract::new(1, 9);
        assert_eq!(
            seen(MachineConfig::generate(&bundle, &o)).0,
            ErrorKind::UnsupportedContract
        );
        let mut o = opts(Contract::V1_13);
        o.endpoint = "base:6443".into();
        assert_eq!(
            seen(MachineConfig::generate(&bundle, &o)).0,
            ErrorKind::InvalidEndpoint
        );
        let mut bad = bundle.clone();
        bad.certs.k8s_service_account.key = "%".into();
        assert_eq!(
            seen(MachineConfig::generate(&bad, &opts(Contract::V1_14))),
            (
                ErrorKind::InvalidBundle,
                "service account key".into(),
                "service account key: secrets bundle field certs.k8sserviceaccount.key is not \
                 valid base64"
                    .into()
            )
        );
    }
}
