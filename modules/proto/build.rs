//! Compiles the hand-written `.proto` subset with protox (pure Rust, so no system
//! `protoc` is needed) and generates prost messages plus tonic client and server
//! stubs. Server stubs are generated because the Talos simulator serves them.

use std::path::Path;

const FILES: &[&str] = &[
    "common/common.proto",
    "google/rpc/status.proto",
    "machine/machine.proto",
    "machine/lifecycle.proto",
    "machine/image.proto",
    "cluster/cluster.proto",
    "cosi/resource.proto",
    "cosi/state.proto",
    "cosi/meta.proto",
    "resource/config.proto",
    "resource/runtime.proto",
    "resource/k8s.proto",
    "resource/block.proto",
    "resource/cluster.proto",
    "resource/extensions.proto",
    "resource/v1alpha1.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new("proto");
    println!("cargo:rerun-if-changed=proto");
    let files: Vec<_> = FILES.iter().map(|f| root.join(f)).collect();
    // protox resolves google/protobuf/*.proto from its bundled well-known types.
    let descriptors = protox::compile(&files, [root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
