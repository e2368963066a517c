//! Generated Rust bindings for the subset of the Talos gRPC API that ferro.talos
//! uses: prost messages and tonic client and server stubs, built from the
//! hand-written `.proto` files under `proto/` (field numbers from
//! `shared/talos/api.md`). This crate holds generated code only: no logic, no
//! connection handling, no helpers. Talking to nodes belongs to
//! `ferro-talos-client`; serving the API belongs to the simulator.

#![allow(clippy::all, missing_docs)]

/// `common` package: metadata envelope, data chunks, shared enums.
pub mod common {
    tonic::include_proto!("common");
}

/// `google.rpc` package: the gRPC status message carried in `common.Metadata`.
pub mod google {
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

/// `machine` package: MachineService, LifecycleService and ImageService.
pub mod machine {
    tonic::include_proto!("machine");
}

/// `cluster` package: ClusterService (HealthCheck).
pub mod cluster {
    tonic::include_proto!("cluster");
}

/// `cosi.resource` package: the read-only COSI State service.
pub mod cosi {
    pub mod resource {
        tonic::include_proto!("cosi.resource");
    }
    /// `cosi.resource.meta` package: ResourceDefinitionSpec.
    pub mod meta {
        tonic::include_proto!("cosi.resource.meta");
    }
}

/// Typed COSI resource specs that arrive as `Spec.proto_spec` bytes.
pub mod resource {
    /// `resource.config` package: MachineConfigSpec, MachineTypeSpec.
    pub mod config {
        tonic::include_proto!("resource.config");
    }
    /// `talos.resource.definitions.runtime` package: MachineStatusSpec.
    pub mod runtime {
        tonic::include_proto!("talos.resource.definitions.runtime");
    }
    /// `talos.resource.definitions.k8s` package: NodenameSpec.
    pub mod k8s {
        tonic::include_proto!("talos.resource.definitions.k8s");
    }
    /// `talos.resource.definitions.block` package: DiskSpec.
    pub mod block {
        tonic::include_proto!("talos.resource.definitions.block");
    }
    /// `talos.resource.definitions.cluster` package: MemberSpec.
    pub mod cluster {
        tonic::include_proto!("talos.resource.definitions.cluster");
    }
    /// `talos.resource.definitions.v1alpha1` package: ServiceSpec.
    pub mod v1alpha1 {
        tonic::include_proto!("talos.resource.definitions.v1alpha1");
    }
    /// `talos.resource.definitions.extensions` package: Layer (ExtensionStatusSpec).
    pub mod extensions {
        tonic::include_proto!("talos.resource.definitions.extensions");
    }
}

#[cfg(test)]
mod tests {
    use super::machine::{
        ApplyConfigurationRequest, EtcdMember, apply_configuration_request::Mode,
    };
    use prost::Message;

    #[test]
    fn apply_configuration_request_uses_fields_1_4_5_6() {
        let req = ApplyConfigurationRequest {
            data: b"ab".to_vec(),
            mode: Mode::Try as i32,
            dry_run: true,
            try_mode_timeout: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
        };
        let bytes = req.encode_to_vec();
        // Tags: (field << 3) | wire type. 1/LEN=0x0a, 4/VARINT=0x20, 5/VARINT=0x28, 6/LEN=0x32.
        let expected = [0x0a, 2, b'a', b'b', 0x20, 4, 0x28, 1, 0x32, 2, 0x08, 60];
        assert_eq!(bytes, expected);
    }

    #[test]
    fn apply_configuration_reboot_mode_is_absent_on_the_wire() {
        let req = ApplyConfigurationRequest {
            mode: Mode::Reboot as i32,
            ..Default::default()
        };
        assert!(req.encode_to_vec().is_empty());
    }

    #[test]
    fn etcd_member_has_no_field_1() {
        let member = EtcdMember {
            id: 7,
            ..Default::default()
        };
        // Field 2, varint: tag 0x10.
        assert_eq!(member.encode_to_vec(), [0x10, 7]);
        // A field-1 varint is unknown to EtcdMember and must not land in `id`.
        let decoded = EtcdMember::decode(&[0x08, 9][..]).expect("unknown fields are skipped");
        assert_eq!(decoded.id, 0);
    }
}
