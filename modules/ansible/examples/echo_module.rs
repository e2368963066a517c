//! A tiny module for the protocol's integration tests: it echoes what it was given, and can fail,
//! panic or register a secret at run time on request (`mode`).

use ferro_ansible_protocol::{Diff, ModuleError, ModuleResult, Opt, Spec, Type, run_module};
use serde_json::json;

fn main() {
    let spec = Spec::new()
        .option(Opt::str("name").required().alias("n"))
        .option(Opt::str("token").no_log())
        .option(Opt::dict("secrets").no_log())
        .option(Opt::bool("force").default(false))
        .option(Opt::int("timeout").default(600))
        .option(Opt::path("dest"))
        .option(Opt::list("tags").elements(Type::Str))
        .option(
            Opt::str("mode")
                .choices(&["ok", "fail", "panic", "mask", "mask_panic"])
                .default("ok"),
        );
    run_module("echo_module", spec, |ctx, p| {
        let name = p.str("name").unwrap_or_default().to_string();
        let token = p.str("token").unwrap_or_default().to_string();
        match p.str("mode").unwrap_or("ok") {
            "fail" => {
                return Err(
                    ModuleError::new(format!("could not greet {name} with token {token}"))
                        .with("node", "10.5.0.2")
                        .with("grpc_code", 14),
                );
            }
            "panic" => panic!("boom while using token {token}"),
            "mask" => ctx.mask("runtime-secret-value\n"),
            "mask_panic" => {
                ctx.mask("runtime-secret-value");
                panic!("lost runtime-secret-value");
            }
            _ => {}
        }
        let runtime = if ctx.check_mode {
            ""
        } else {
            "runtime-secret-value"
        };
        Ok(ModuleResult::new(!ctx.check_mode)
            .msg(format!("hello {name}, token {token} {runtime}"))
            .with("check_mode", ctx.check_mode)
            .with("diff_mode", ctx.diff)
            .with("verbosity", ctx.verbosity)
            .with("module_name", ctx.module_name.clone())
            .with("force", p.bool("force"))
            .with("timeout", p.int("timeout"))
            .with("dest", p.str("dest"))
            .with("tags", p.str_list("tags"))
            .with(
                "nested",
                json!({"deep": [{"token": token}], (token.clone()): "key"}),
            )
            .with("secrets_seen", p.dict("secrets").map(|m| json!(m)))
            .diff(
                Diff::new(format!("token: {token}\n"), "token: hidden\n")
                    .headers("before", "after"),
            ))
    })
}
