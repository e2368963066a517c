//! The tasks crate's layout is a rule, not a habit: each module is one folder under `src/`, it
//! reads its options in one place (`args.rs`, its typed `Args`, checked before anything is read
//! or connected), and what modules share lives in `src/shared/`. These tests read the sources, so
//! a module that reads `Params` in its body again, or an `args.rs` that starts reading files,
//! fails here with the file named.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ferro_talos_tasks::catalog::MODULES;

/// The shared files that read an option group of their own, each used only from a module's
/// `args.rs`, and why the group is shared.
const SHARED_OPTION_READERS: &[(&str, &str)] = &[
    (
        "shared/connection.rs",
        "the connection options every node module takes",
    ),
    (
        "shared/options.rs",
        "waits in seconds, other control planes, the test builder",
    ),
    (
        "shared/node_settings.rs",
        "node_settings, read by talos_config and talos_apply's render",
    ),
    (
        "shared/kubernetes_manifests.rs",
        "the manifest sync options of both upgrade modules",
    ),
    (
        "shared/render/args.rs",
        "the render options of talos_config and talos_apply",
    ),
];

/// What a module's `args.rs` must not do: it checks options, it does not act on them.
const NOT_IN_ARGS: &[&str] = &[
    "std::fs",
    "read_to_string",
    "Context",
    "block_on",
    "TalosClient",
    "async fn",
    ".await",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(src()).unwrap().display().to_string()
}

/// The code of a file without its comments, so that prose may still name `Params`.
fn code(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn names_params(code: &str) -> bool {
    code.split(|c: char| !c.is_alphanumeric() && c != '_')
        .any(|word| word == "Params")
}

#[test]
fn every_module_is_one_folder_with_its_args() {
    let folders: BTreeSet<String> = std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && p.file_name().unwrap() != "shared")
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let modules: BTreeSet<String> = MODULES.iter().map(|m| m.name.to_string()).collect();
    assert_eq!(
        folders, modules,
        "src/ holds one folder per module of catalog::MODULES, and shared/"
    );
    for module in &modules {
        for file in ["mod.rs", "args.rs"] {
            assert!(
                src().join(module).join(file).is_file(),
                "src/{module}/{file} is missing: a module's options are read in its args.rs"
            );
        }
    }
}

#[test]
fn a_module_reads_its_options_only_in_its_args() {
    let mut offenders = Vec::new();
    for module in MODULES {
        for file in rust_files(&src().join(module.name)) {
            if file.file_name().unwrap() != "args.rs" && names_params(&code(&file)) {
                offenders.push(relative(&file));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "these files read Params outside args.rs; read the option into the module's Args \
         instead: {offenders:?}"
    );
}

#[test]
fn shared_code_reads_options_only_in_the_listed_option_groups() {
    let allowed: BTreeSet<&str> = SHARED_OPTION_READERS.iter().map(|(f, _)| *f).collect();
    let readers: BTreeSet<String> = rust_files(&src().join("shared"))
        .into_iter()
        .filter(|f| names_params(&code(f)))
        .map(|f| relative(&f))
        .collect();
    let unlisted: Vec<&String> = readers
        .iter()
        .filter(|f| !allowed.contains(f.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "shared files that read Params but are no listed option group (take typed values, or \
         add the group to SHARED_OPTION_READERS with its reason): {unlisted:?}"
    );
    let stale: Vec<&&str> = allowed.iter().filter(|f| !readers.contains(**f)).collect();
    assert!(
        stale.is_empty(),
        "listed as option readers but read no Params: {stale:?}"
    );
}

#[test]
fn args_check_options_and_do_nothing_else() {
    let mut offenders = Vec::new();
    for file in rust_files(&src()) {
        if file.file_name().unwrap() != "args.rs" {
            continue;
        }
        let code = code(&file);
        let body = match code.find("#[cfg(test)]") {
            Some(i) => &code[..i],
            None => &code,
        };
        for word in NOT_IN_ARGS {
            if body.contains(word) {
                offenders.push(format!("{}: {word}", relative(&file)));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "args.rs files that act instead of checking (read files and connect in run): \
         {offenders:?}"
    );
}

#[test]
fn the_rules_see_what_they_look_for() {
    // The scanner itself: a rule that can never fire is no rule.
    assert!(names_params("fn f(p: &Params) {}"));
    assert!(names_params(
        "use ferro_ansible_protocol::{Context, Params};"
    ));
    assert!(!names_params("struct Parameters; let params = 1;"));
    let with_comment = std::env::temp_dir().join(format!("layout-{}.rs", std::process::id()));
    std::fs::write(&with_comment, "// reads Params\nfn f() {}\n").unwrap();
    assert!(!names_params(&code(&with_comment)));
    std::fs::remove_file(&with_comment).unwrap();
}
