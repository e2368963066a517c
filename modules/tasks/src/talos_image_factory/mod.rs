//! `talos_image_factory`: a schematic on a Talos Image Factory, and the installer and boot asset
//! URLs of a Talos version built from it.
//!
//! Upstream: siderolabs/image-factory v1.5.0 (`internal/frontend/http/`: `POST /schematics`
//! answers 201 with the ID whether or not the factory held it; `GET /schematics/{id}` is 404 for
//! one it does not hold; extension names are only checked when an image is built). The factory is
//! content-addressed: the ID is the SHA-256 of the schematic's canonical YAML, computed here too
//! (`ferro_talos_factory::Schematic`), so check mode asks the factory whether it holds that ID
//! with a read and creates nothing; a real run creates the schematic only when it is missing.
//! With `talos_version`, every extension and the overlay are checked against what the factory
//! offers for that version before anything is created, which the factory itself does only when
//! an image is built.
//!
//! An Enterprise factory with authentication (`factory_username`, `factory_password`: HTTP Basic,
//! `docs/authentication.md` @ v1.5.0) writes the caller's identity into the schematic's `owner`
//! when it creates it (`internal/frontend/http/configuration.go` `handleSchematicCreate`), and
//! the owner is part of the canonical text, so of the ID: `owner` says which identity that is, so
//! check mode predicts the factory's ID. A schematic owned by another identity is 403 there.

use ferro_ansible_protocol::{Context, Diff, ModuleError, ModuleResult, Opt, Spec, Type};
use ferro_talos_factory::{BootAssets, Factory, FactoryError, FactoryErrorKind, Schematic};
use serde_json::{Value, json};

mod args;
pub use args::{Args, FactoryCredentials};

/// The public factory (the Terraform provider's `image_factory_url` default).
const PUBLIC_FACTORY: &str = "https://factory.talos.dev";

pub fn spec() -> Spec {
    Spec::new()
        .option(Opt::str("factory_url").default(PUBLIC_FACTORY))
        .option(Opt::str("pxe_url"))
        .option(Opt::path("ca_file"))
        .option(Opt::str("factory_username"))
        .option(Opt::str("factory_password").no_log())
        .option(Opt::str("owner"))
        .option(
            Opt::list("extensions")
                .elements(Type::Str)
                .default(json!([])),
        )
        .option(
            Opt::list("extra_kernel_args")
                .elements(Type::Str)
                .default(json!([])),
        )
        .option(
            Opt::list("meta")
                .elements(Type::Dict)
                .options(
                    Spec::new()
                        .option(Opt::int("key").required())
                        .option(Opt::str("value").required()),
                )
                .default(json!([])),
        )
        .option(
            Opt::dict("overlay").options(
                Spec::new()
                    .option(Opt::str("name").required())
                    .option(Opt::str("image").required())
                    .option(Opt::dict("options")),
            ),
        )
        .option(Opt::dict("schematic"))
        .option(Opt::str("talos_version"))
        .option(Opt::str("platform"))
        .option(Opt::str("sbc"))
        .option(
            Opt::str("architecture")
                .choices(&["amd64", "arm64"])
                .default("amd64"),
        )
        .option(Opt::int("timeout").default(30))
        .mutually_exclusive(&["schematic", "extensions"])
        .mutually_exclusive(&["schematic", "extra_kernel_args"])
        .mutually_exclusive(&["schematic", "meta"])
        .mutually_exclusive(&["schematic", "overlay"])
        .mutually_exclusive(&["platform", "sbc"])
        .required_together(&["factory_username", "factory_password"])
}

pub fn run(ctx: &mut Context, args: Args) -> Result<ModuleResult, ModuleError> {
    let Args {
        factory_url,
        pxe_url: pxe,
        ca_file,
        credentials,
        schematic,
        target,
        talos_version: version,
        timeout,
    } = args;
    let mut factory = Factory::new(&factory_url, ca_file.as_deref(), timeout)
        .map_err(|e| factory_failure(e, "factory_url"))?;
    if let Some(c) = &credentials {
        factory = factory.with_credentials(&c.username, &c.password);
    }
    crate::shared::connection::block_on(ensure(ctx, &factory, &schematic, version.as_deref()))?.map(
        |(id, changed, extensions)| {
            let canonical = schematic.canonical_yaml();
            let mut result = ModuleResult::new(changed)
                .with("schematic_id", id.clone())
                .with("schematic", canonical.clone())
                .with("factory_url", factory.url().to_string());
            if let Some(v) = &version {
                let assets = BootAssets::new(factory.url(), &pxe, &id, v, &target);
                result = result
                    .with("talos_version", v.clone())
                    .with("installer", assets.installer.clone())
                    .with("urls", assets.to_json())
                    .with("extensions", extensions);
            }
            if changed {
                result = result.diff(Diff {
                    before: Some(Value::String(String::new())),
                    after: Some(Value::String(canonical)),
                    before_header: Some(format!("{}/schematics/{id} (absent)", factory.url())),
                    after_header: Some(format!("{}/schematics/{id}", factory.url())),
                    prepared: None,
                });
            }
            let verb = match (changed, ctx.check_mode) {
                (false, _) => "holds",
                (true, true) => "would create",
                (true, false) => "created",
            };
            result.msg(format!("{} {verb} schematic {id}", factory.url()))
        },
    )
}

/// Checks the schematic against the factory, creates it where it is missing (not in check
/// mode); the ID, whether it was (or would be) created, and the extensions' details.
async fn ensure(
    ctx: &mut Context,
    factory: &Factory,
    schematic: &Schematic,
    version: Option<&str>,
) -> Result<(String, bool, Value), ModuleError> {
    let extensions = match version {
        Some(v) => check_offered(factory, schematic, v).await?,
        None => Value::Array(Vec::new()),
    };
    let local_id = schematic.id();
    let held = factory
        .schematic(&local_id)
        .await
        .map_err(|e| factory_failure(e, "factory_url"))?;
    if held.is_some() {
        return Ok((local_id, false, extensions));
    }
    if ctx.check_mode {
        return Ok((local_id, true, extensions));
    }
    let id = factory
        .create(schematic)
        .await
        .map_err(|e| factory_failure(e, "schematic"))?;
    if id != local_id {
        ctx.warn(format!(
            "{} named the schematic {id}, not {local_id} as computed here from its canonical form; \
             check mode would report the wrong ID for it (please report the schematic)",
            factory.url()
        ));
    }
    Ok((id, true, extensions))
}

/// Every extension and the overlay must be ones the factory offers for `version`: the factory
/// accepts any name when the schematic is created and fails only when an image is built.
async fn check_offered(
    factory: &Factory,
    schematic: &Schematic,
    version: &str,
) -> Result<Value, ModuleError> {
    let offered = match factory.extensions(version).await {
        Ok(list) => list,
        Err(e) if e.kind == FactoryErrorKind::NotFound => {
            let versions = factory.versions().await.unwrap_or_default();
            let newest: Vec<&String> = versions.iter().rev().take(5).collect();
            return Err(ModuleError::new(format!(
                "talos_version {version} is not one {} builds (its newest: {}); set talos_version \
                 to a released version",
                factory.url(),
                newest
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Err(e) => return Err(factory_failure(e, "factory_url")),
    };
    let mut details = Vec::new();
    for name in &schematic.official_extensions {
        match offered.iter().find(|e| &e.name == name) {
            Some(e) => details.push(json!({
                "name": e.name, "ref": e.reference, "digest": e.digest, "description": e.description,
            })),
            None => {
                let tail = name.rsplit('/').next().unwrap_or(name);
                let near: Vec<&str> = offered
                    .iter()
                    .filter(|e| {
                        e.name.contains(tail) || tail.contains(e.name.rsplit('/').next().unwrap_or(""))
                    })
                    .map(|e| e.name.as_str())
                    .take(5)
                    .collect();
                let hint = if near.is_empty() {
                    String::new()
                } else {
                    format!(" (did you mean {}?)", near.join(", "))
                };
                return Err(ModuleError::new(format!(
                    "extensions: {name:?} is not an official extension of Talos {version} on {}{hint}; \
                     names are written as the factory lists them, like siderolabs/iscsi-tools",
                    factory.url()
                )));
            }
        }
    }
    if let Some(overlay) = &schematic.overlay {
        let overlays = factory
            .overlays(version)
            .await
            .map_err(|e| factory_failure(e, "factory_url"))?;
        if !overlays.iter().any(|o| o.name == overlay.name) {
            let names: Vec<&str> = overlays.iter().map(|o| o.name.as_str()).collect();
            return Err(ModuleError::new(format!(
                "overlay {:?} is not an official overlay of Talos {version} on {} (it offers: {})",
                overlay.name,
                factory.url(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )));
        }
    }
    Ok(Value::Array(details))
}

fn factory_failure(e: FactoryError, option: &str) -> ModuleError {
    let advice = match e.kind {
        FactoryErrorKind::Config => format!("; check {option}"),
        FactoryErrorKind::Unreachable => {
            "; check factory_url and that the controller reaches it (a self-hosted factory may need ca_file)".into()
        }
        FactoryErrorKind::Refused if option == "schematic" => {
            "; the factory refused the schematic as written".into()
        }
        FactoryErrorKind::Unauthenticated => {
            "; the factory wants credentials, or refused these: set factory_username and factory_password \
             (with Auth0, the token as the password)"
                .into()
        }
        FactoryErrorKind::Forbidden => {
            "; the schematic belongs to another identity there: set owner to the identity factory_username \
             authenticates as"
                .into()
        }
        _ => String::new(),
    };
    ModuleError::new(format!("{}{advice}", e.message))
}
