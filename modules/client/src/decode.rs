//! What the node's replies decode to: the machine config and the MachineStatus out of their COSI
//! specs (protobuf first, YAML as the fallback), and the kubeconfig out of its archive.

use std::io::Read as _;

use ferro_talos_proto::resource::config::MachineConfigSpec;
use ferro_talos_proto::resource::runtime::{MachineStage, MachineStatusSpec};
use prost::Message as _;

/// The node's lifecycle stage and readiness (COSI MachineStatus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineStatus {
    pub stage: MachineStage,
    pub ready: bool,
    /// Unmet conditions as (name, reason).
    pub unmet_conditions: Vec<(String, String)>,
}

/// Pick the machine config out of a COSI spec: the typed `proto_spec` keeps the
/// bytes exactly; `yaml_spec` (a YAML string scalar) is the fallback.
pub fn decode_machine_config(
    proto_spec: &[u8],
    yaml_spec: &str,
) -> std::result::Result<Vec<u8>, String> {
    if !proto_spec.is_empty() {
        let spec = MachineConfigSpec::decode(proto_spec)
            .map_err(|e| format!("the MachineConfig spec is not decodable: {e}"))?;
        if !spec.yaml_marshalled.is_empty() {
            return Ok(spec.yaml_marshalled);
        }
    }
    if yaml_spec.trim().is_empty() {
        return Err("the MachineConfig resource has an empty spec".into());
    }
    match serde_saphyr::from_str::<String>(yaml_spec) {
        Ok(s) => Ok(s.into_bytes()),
        // Very old Talos rendered the config as a YAML map: that is the config itself.
        Err(_) => Ok(yaml_spec.as_bytes().to_vec()),
    }
}

/// Decode MachineStatus from `proto_spec`, else from `yaml_spec`.
pub fn decode_machine_status(
    proto_spec: &[u8],
    yaml_spec: &str,
) -> std::result::Result<MachineStatus, String> {
    if !proto_spec.is_empty() {
        let spec = MachineStatusSpec::decode(proto_spec)
            .map_err(|e| format!("the MachineStatus spec is not decodable: {e}"))?;
        let status = spec.status.unwrap_or_default();
        return Ok(MachineStatus {
            stage: MachineStage::try_from(spec.stage).unwrap_or(MachineStage::Unknown),
            ready: status.ready,
            unmet_conditions: status
                .unmet_conditions
                .into_iter()
                .map(|c| (c.name, c.reason))
                .collect(),
        });
    }
    #[derive(serde::Deserialize, Default)]
    struct YamlCondition {
        #[serde(default)]
        name: String,
        #[serde(default)]
        reason: String,
    }
    #[derive(serde::Deserialize, Default)]
    struct YamlStatus {
        #[serde(default)]
        ready: bool,
        #[serde(default, rename = "unmetConditions")]
        unmet_conditions: Vec<YamlCondition>,
    }
    #[derive(serde::Deserialize)]
    struct YamlSpec {
        stage: String,
        #[serde(default)]
        status: YamlStatus,
    }
    let spec: YamlSpec = serde_saphyr::from_str(yaml_spec).map_err(|e| {
        format!("the MachineStatus spec is neither protobuf nor YAML with `stage`: {e}")
    })?;
    let stage = match spec.stage.as_str() {
        "booting" => MachineStage::Booting,
        "installing" => MachineStage::Installing,
        "maintenance" => MachineStage::Maintenance,
        "running" => MachineStage::Running,
        "rebooting" => MachineStage::Rebooting,
        "shutting down" => MachineStage::ShuttingDown,
        "resetting" => MachineStage::Resetting,
        "upgrading" => MachineStage::Upgrading,
        _ => MachineStage::Unknown,
    };
    Ok(MachineStatus {
        stage,
        ready: spec.status.ready,
        unmet_conditions: spec
            .status
            .unmet_conditions
            .into_iter()
            .map(|c| (c.name, c.reason))
            .collect(),
    })
}

/// The `kubeconfig` file out of the gzip-compressed tar Talos sends.
pub fn extract_kubeconfig(archive: &[u8]) -> std::result::Result<Vec<u8>, String> {
    if archive.is_empty() {
        return Err("the node sent an empty kubeconfig archive".into());
    }
    let gz = flate2::read::GzDecoder::new(archive);
    let mut tar = tar::Archive::new(gz);
    let entries = tar
        .entries()
        .map_err(|e| format!("the kubeconfig archive is not a gzip tar: {e}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("the kubeconfig archive is corrupt: {e}"))?;
        let is_kubeconfig = entry
            .path()
            .map(|p| p.file_name().is_some_and(|n| n == "kubeconfig"))
            .unwrap_or(false);
        if is_kubeconfig {
            let mut data = Vec::new();
            entry
                .read_to_end(&mut data)
                .map_err(|e| format!("the kubeconfig archive is corrupt: {e}"))?;
            return Ok(data);
        }
    }
    Err("the kubeconfig archive has no `kubeconfig` file".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_config_prefers_proto_spec_bytes() {
        let spec = MachineConfigSpec {
            yaml_marshalled: b"# comment kept\nversion: v1alpha1\n".to_vec(),
        };
        let got = decode_machine_config(&spec.encode_to_vec(), "ignored").unwrap();
        assert_eq!(got, b"# comment kept\nversion: v1alpha1\n");
    }

    #[test]
    fn machine_config_falls_back_to_yaml_string_scalar() {
        let yaml = "|\n    version: v1alpha1\n    machine:\n        type: worker\n";
        let got = decode_machine_config(&[], yaml).unwrap();
        assert_eq!(got, b"version: v1alpha1\nmachine:\n    type: worker\n");
        assert!(decode_machine_config(&[], "").is_err());
    }

    #[test]
    fn machine_status_from_proto_and_yaml() {
        use ferro_talos_proto::resource::runtime::{MachineStatusStatus, UnmetCondition};
        let spec = MachineStatusSpec {
            stage: MachineStage::Running as i32,
            status: Some(MachineStatusStatus {
                ready: false,
                unmet_conditions: vec![UnmetCondition {
                    name: "nodeReady".into(),
                    reason: "kubelet".into(),
                }],
            }),
        };
        let st = decode_machine_status(&spec.encode_to_vec(), "").unwrap();
        assert_eq!(st.stage, MachineStage::Running);
        assert!(!st.ready);
        assert_eq!(
            st.unmet_conditions,
            [("nodeReady".to_string(), "kubelet".to_string())]
        );

        let st =
            decode_machine_status(&[], "stage: rebooting\nstatus:\n    ready: true\n").unwrap();
        assert_eq!(st.stage, MachineStage::Rebooting);
        assert!(st.ready);
    }

    fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, data) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o600);
            header.set_cksum();
            builder.append_data(&mut header, name, *data).unwrap();
        }
        let tar = builder.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn kubeconfig_is_extracted_from_tar_gz() {
        let archive = tar_gz(&[("kubeconfig", b"apiVersion: v1\n")]);
        assert_eq!(extract_kubeconfig(&archive).unwrap(), b"apiVersion: v1\n");
        let other = tar_gz(&[("other", b"x")]);
        assert!(
            extract_kubeconfig(&other)
                .unwrap_err()
                .contains("no `kubeconfig`")
        );
        assert!(extract_kubeconfig(b"not gzip").is_err());
    }
}
