//! talos_image_factory against the simulator's test Image Factory (`ferro_talos_sim::factory`,
//! written from image-factory v1.5.0's API with its own canonical form): `--check --diff`, real,
//! again and `--check`, reading the factory's store between the runs, so "check mode created
//! nothing" and "the second run found the schematic" are seen on the factory, not taken from the
//! module's own `changed`.

mod common;

use common::{Module, Run, run};
use ferro_talos_sim::factory::FactoryServer;
use ferro_talos_tasks::talos_image_factory;
use serde_json::{Value, json};

const FACTORY: Module = Module {
    name: "talos_image_factory",
    spec: talos_image_factory::spec,
    run: talos_image_factory::run,
};

struct Served {
    server: FactoryServer,
    _runtime: tokio::runtime::Runtime,
}

fn factory() -> Served {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = runtime
        .block_on(FactoryServer::start(
            "127.0.0.1:0".parse().expect("an address"),
        ))
        .expect("the test factory starts");
    Served {
        server,
        _runtime: runtime,
    }
}

fn ok(args: &Value, how: Run) -> Value {
    let outcome = run(&FACTORY, args, how);
    assert!(!outcome.failed(), "{}", outcome.json);
    outcome.json
}

#[test]
fn a_schematic_is_created_once_and_its_urls_follow() {
    let f = factory();
    let args = json!({
        "factory_url": f.server.url(),
        "extensions": ["siderolabs/iscsi-tools", "siderolabs/util-linux-tools"],
        "extra_kernel_args": ["net.ifnames=0"],
        "talos_version": "1.13.9",
    });
    let check = ok(&args, Run::Check);
    assert_eq!(check["changed"], json!(true), "{check}");
    assert!(
        f.server.schematic_ids().is_empty(),
        "--check created a schematic"
    );
    assert_eq!(f.server.posts(), 0);
    let id = check["schematic_id"].as_str().expect("an id").to_string();
    assert!(
        check["diff"].to_string().contains("siderolabs/iscsi-tools"),
        "{check}"
    );

    let real = ok(&args, Run::Real);
    assert_eq!(real["changed"], json!(true));
    // The factory's own reading of the schematic gives the ID check mode computed.
    assert_eq!(f.server.schematic_ids(), vec![id.clone()]);
    assert_eq!(real["schematic_id"], json!(id));
    assert_eq!(real["warnings"], Value::Null, "{real}");
    let host = f.server.url().trim_start_matches("http://").to_string();
    assert_eq!(
        real["installer"],
        json!(format!("{host}/metal-installer/{id}:v1.13.9"))
    );
    assert_eq!(
        real["urls"]["iso"],
        json!(format!(
            "{}/image/{id}/v1.13.9/metal-amd64.iso",
            f.server.url()
        ))
    );
    assert_eq!(
        real["urls"]["pxe"],
        json!(format!("http://pxe.{host}/pxe/{id}/v1.13.9/metal-amd64"))
    );
    assert_eq!(real["extensions"].as_array().map(Vec::len), Some(2));

    let again = ok(&args, Run::Real);
    assert_eq!(again["changed"], json!(false), "{again}");
    assert_eq!(f.server.posts(), 1, "the second run posted again");
    let check_after = ok(&args, Run::Check);
    assert_eq!(check_after["changed"], json!(false));
    assert_eq!(check_after["schematic_id"], json!(id));
}

/// The IDs of upstream's own tests, through the module and the test factory: the empty
/// schematic and a board's overlay.
#[test]
fn the_empty_schematic_and_a_boards_overlay_have_upstreams_ids() {
    let f = factory();
    let empty = ok(&json!({"factory_url": f.server.url()}), Run::Real);
    assert_eq!(
        empty["schematic_id"],
        json!("376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba")
    );
    let rpi = ok(
        &json!({"factory_url": f.server.url(), "sbc": "rpi_generic", "talos_version": "v1.13.9"}),
        Run::Real,
    );
    assert_eq!(
        rpi["schematic_id"],
        json!("ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9")
    );
    assert!(
        rpi["urls"]["disk_image"]
            .as_str()
            .is_some_and(|u| u.ends_with("/v1.13.9/metal-arm64.raw.xz")),
        "{rpi}"
    );
    assert_eq!(rpi["urls"]["iso"], Value::Null);
}

/// What the factory would only refuse when an image is built is refused before anything is
/// created, naming the option; so is input the factory's decoder refuses.
#[test]
fn bad_input_fails_naming_what_to_write_and_creates_nothing() {
    let f = factory();
    let url = f.server.url();
    for (args, words) in [
        (
            json!({"factory_url": url, "extensions": ["siderolabs/iscsi"], "talos_version": "v1.13.9"}),
            vec![
                "extensions: \"siderolabs/iscsi\" is not an official extension",
                "siderolabs/iscsi-tools",
            ],
        ),
        (
            json!({"factory_url": url, "extensions": ["ghcr.io/siderolabs/iscsi-tools:v0.1.0"]}),
            vec!["no tag or digest"],
        ),
        (
            json!({"factory_url": url, "talos_version": "v1.99.0"}),
            vec!["talos_version v1.99.0 is not one", "v1.13.9"],
        ),
        (
            json!({"factory_url": url, "talos_version": "latest"}),
            vec!["is not a Talos version"],
        ),
        (
            json!({"factory_url": url, "schematic": {"customization": {"extensions": ["x"]}}}),
            vec!["schematic.customization has no key \"extensions\""],
        ),
        (
            json!({"factory_url": url, "sbc": "rpi4"}),
            vec!["sbc \"rpi4\"", "rpi_generic"],
        ),
        (
            json!({"factory_url": url, "platform": "metal", "sbc": "rpi_generic"}),
            vec!["mutually exclusive"],
        ),
        (
            json!({"factory_url": url, "meta": [{"key": 300, "value": "x"}]}),
            vec!["meta[0].key must be a META key from 0 to 255"],
        ),
        (
            json!({"factory_url": "factory.talos.dev"}),
            vec!["no http:// or https:// scheme"],
        ),
        (
            json!({"factory_url": "http://127.0.0.1:1", "timeout": 2}),
            vec!["check factory_url"],
        ),
    ] {
        for how in [Run::Check, Run::Real] {
            let outcome = run(&FACTORY, &args, how);
            let msg = outcome.msg().unwrap_or_default().to_string();
            assert!(outcome.failed(), "{args}: {}", outcome.json);
            for w in &words {
                assert!(msg.contains(w), "{w:?} missing from {msg:?}");
            }
        }
    }
    assert!(f.server.schematic_ids().is_empty());
}
