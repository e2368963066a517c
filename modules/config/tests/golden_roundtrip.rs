//! Every golden fixture must survive parse -> encode byte for byte.

use ferro_talos_config::MachineConfig;
use ferro_talos_config::normalize::Rules;
use std::path::PathBuf;

fn config_fixtures() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for version in ["v1.13.6", "v1.14.0-rc.1"] {
        let dir = ferro_talos_fixtures::dir().join(version);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with("stability-v1.") && name.ends_with(".yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_config_fixture_round_trips() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let files = config_fixtures();
    assert_eq!(
        files.len(),
        10,
        "expected 10 config fixtures, found {files:?}"
    );
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let cfg =
            MachineConfig::parse(&text).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        // The talosctl that wrote the fixture decides the encoding rules.
        let rules = if path.to_string_lossy().contains("v1.14") {
            Rules::V1_14
        } else {
            Rules::V1_13
        };
        let out = cfg.to_yaml_with(rules);
        if out != text {
            let first = out.lines().zip(text.lines()).position(|(a, b)| a != b);
            panic!(
                "{} does not round-trip; first differing line {first:?}\n{out}",
                path.display()
            );
        }
    }
}

#[test]
fn round_trip_reorders_keys_into_struct_order() {
    if !ferro_talos_fixtures::available() {
        return;
    }
    let dir = ferro_talos_fixtures::dir().join("v1.13.6");
    let text = std::fs::read_to_string(dir.join("stability-v1.13-base-worker.yaml")).unwrap();
    let mut cfg = MachineConfig::parse(&text).unwrap();
    // Reverse every mapping's key order; the encoder must restore Talos's order.
    fn reverse(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                let mut entries: Vec<_> = std::mem::take(m).into_iter().collect();
                entries.reverse();
                for (k, mut x) in entries {
                    reverse(&mut x);
                    m.insert(k, x);
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(reverse),
            _ => {}
        }
    }
    cfg.docs.iter_mut().for_each(reverse);
    assert_eq!(cfg.to_yaml(), text);
}
