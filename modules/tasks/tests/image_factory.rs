//! talos_image_factory against the simulator's test Image Factory (`ferro_talos_sim::factory`,
//! written from image-factory v1.5.0's API with its own canonical form): `--check --diff`, real,
//! again and `--check`, reading the factory's store between the runs, so "check mode created
//! nothing" and "the second run found the schematic" are seen on the factory, not taken from the
//! module's own `changed`.

mod common;

use common::{Run, run};
use ferro_talos_sim::factory::FactoryServer;
use ferro_talos_tasks::catalog::{Module, named};
use serde_json::{Value, json};

const FACTORY: &Module = named("talos_image_factory");

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
    let outcome = run(FACTORY, args, how);
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
            let outcome = run(FACTORY, &args, how);
            let msg = outcome.msg().unwrap_or_default().to_string();
            assert!(outcome.failed(), "{args}: {}", outcome.json);
            for w in &words {
                assert!(msg.contains(w), "{w:?} missing from {msg:?}");
            }
        }
    }
    assert!(f.server.schematic_ids().is_empty());
}

fn authenticated_factory(users: &[(&str, &str)]) -> Served {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = runtime
        .block_on(FactoryServer::start_authenticated(
            "127.0.0.1:0".parse().expect("an address"),
            users,
        ))
        .expect("the test factory starts");
    Served {
        server,
        _runtime: runtime,
    }
}

/// An Enterprise factory with authentication stamps the caller's identity into the schematic's
/// `owner` when it creates it, and the owner is part of the canonical text the ID hashes
/// (image-factory v1.5.0 `internal/frontend/http/configuration.go` `handleSchematicCreate`,
/// `pkg/schematic/schematic.go` `Schematic.ID`, `docs/authentication.md` "Ownership"); reading a
/// schematic another identity owns is 403. The ID below is the default schematic's with
/// `Owner: "alice"`, computed with upstream's `Schematic.ID` (upstream's integration tests compute
/// such IDs at start-up, `internal/integration/schematic_test.go`, and pin none).
#[test]
fn an_authenticated_factory_owns_the_schematic_and_check_mode_predicts_its_id() {
    const ALICES_DEFAULT: &str = "325e789382e85e76ab77e38cb320a816e2c9550cb5afe960b21f75e06605e2e9";
    let f = authenticated_factory(&[("alice", "s3cret-pw"), ("bob", "hunter2-pw")]);
    let args = json!({
        "factory_url": f.server.url(),
        "factory_username": "alice", "factory_password": "s3cret-pw", "owner": "alice",
    });
    let check = ok(&args, Run::Check);
    assert_eq!(check["changed"], json!(true), "{check}");
    assert_eq!(check["schematic_id"], json!(ALICES_DEFAULT), "{check}");
    assert!(f.server.schematic_ids().is_empty(), "--check created one");

    let real = ok(&args, Run::Real);
    assert_eq!(f.server.schematic_ids(), vec![ALICES_DEFAULT.to_string()]);
    assert_eq!(real["schematic_id"], json!(ALICES_DEFAULT));
    assert_eq!(
        real["schematic"],
        json!("owner: alice\ncustomization: {}\n")
    );
    assert_eq!(real["warnings"], Value::Null, "{real}");
    let again = ok(&args, Run::Real);
    assert_eq!(again["changed"], json!(false), "{again}");
    assert_eq!(f.server.posts(), 1);

    let failed = |args: &Value| {
        let outcome = run(FACTORY, args, Run::Check);
        assert!(outcome.failed(), "{args}: {}", outcome.json);
        let text = outcome.json.to_string();
        assert!(
            !text.contains("s3cret-pw") && !text.contains("hunter2-pw"),
            "{text}"
        );
        outcome.json["msg"].as_str().unwrap_or_default().to_string()
    };
    // Bob claiming Alice's schematic: the factory's owner check refuses him.
    let mut bob = args.clone();
    bob["factory_username"] = json!("bob");
    bob["factory_password"] = json!("hunter2-pw");
    let msg = failed(&bob);
    assert!(
        msg.contains("HTTP 403") && msg.contains("set owner"),
        "{msg}"
    );
    // No credentials, or wrong ones: 401, naming the options.
    let anonymous = json!({"factory_url": f.server.url(), "owner": "alice"});
    let msg = failed(&anonymous);
    assert!(
        msg.contains("HTTP 401") && msg.contains("factory_username and factory_password"),
        "{msg}"
    );
    let mut wrong = args.clone();
    wrong["factory_password"] = json!("hunter2-pw");
    assert!(failed(&wrong).contains("HTTP 401"));
    // Credentials without the owner they stand for: the ID cannot be predicted.
    let mut no_owner = args.clone();
    no_owner.as_object_mut().unwrap().remove("owner");
    let msg = failed(&no_owner);
    assert!(msg.starts_with("owner: "), "{msg}");
    // An owner in the schematic itself counts the same; two that differ are refused.
    let mut in_schematic = args.clone();
    in_schematic.as_object_mut().unwrap().remove("owner");
    in_schematic["schematic"] = json!({"owner": "alice"});
    assert_eq!(
        ok(&in_schematic, Run::Check)["schematic_id"],
        json!(ALICES_DEFAULT)
    );
    in_schematic["owner"] = json!("bob");
    assert!(failed(&in_schematic).contains("differ"));
}
