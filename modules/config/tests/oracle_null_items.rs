//! Null items in lists and maps of pointers against upstream's own loader (tests/oracle): for
//! every place `null_elements::refused_places` names, a document with a null item there is
//! refused by machinery v1.14.1 with the path talos_config reports and taken by v1.13.9; a null
//! item in a list of values is taken by both.

use ferro_talos_config::MachineConfig;
use ferro_talos_config::null_elements::{refused_null_items, refused_places};
use ferro_talos_oracle::{Oracle, Release};
use serde_json::{Map, Value, json};

/// A v1alpha1 document with a null item at `place` (`machine.disks[].partitions[]`), and the
/// path a message gives it (`machine.disks[0].partitions[0]`).
fn null_item_at(place: &str) -> (Value, String) {
    let mut display = String::new();
    let mut steps: Vec<(String, bool)> = Vec::new(); // (key, then a list)
    for segment in place.split('.') {
        let (key, list) = match segment.strip_suffix("[]") {
            Some(k) => (k, true),
            None => (segment, false),
        };
        // A map's key: any name will do.
        let key = if key == "*" { "oracle" } else { key };
        if !display.is_empty() {
            display.push('.');
        }
        display.push_str(key);
        if list {
            display.push_str("[0]");
        }
        steps.push((key.to_string(), list));
    }
    let mut value = Value::Null;
    for (key, list) in steps.into_iter().rev() {
        if list {
            value = json!([value]);
        }
        let mut map = Map::new();
        map.insert(key, value);
        value = Value::Object(map);
    }
    value["version"] = json!("v1alpha1");
    (value, display)
}

fn load(oracle: &mut Oracle, doc: &Value) -> Value {
    let text = MachineConfig {
        docs: vec![doc.clone()],
    }
    .to_patch_yaml();
    oracle.ask(&json!({"op": "load", "config": text}))
}

#[test]
fn every_place_talos_1_14_1_refuses_a_null_item_and_1_13_9_takes_it() {
    let (Some(mut new), Some(mut old)) = (
        Oracle::start(Release::V1_14_1),
        Oracle::start(Release::V1_13_9),
    ) else {
        return;
    };
    assert!(refused_places().len() > 10, "{:?}", refused_places());
    for place in refused_places() {
        let (doc, display) = null_item_at(place);
        assert_eq!(refused_null_items(&doc), vec![display.clone()], "{place}");
        let refused = load(&mut new, &doc);
        let error = refused["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{place}: 1.14.1 took it: {refused}"));
        assert!(
            error.contains(&format!("null value is not allowed at {display:?}")),
            "{place}: {error}"
        );
        let taken = load(&mut old, &doc);
        assert!(
            taken.get("error").is_none(),
            "{place}: 1.13.9 refused it: {taken}"
        );
    }
}

#[test]
fn a_null_item_in_a_list_of_values_is_taken_by_both() {
    for release in Release::ALL {
        let Some(mut oracle) = Oracle::start(release) else {
            return;
        };
        let doc = json!({"version": "v1alpha1", "machine": {"certSANs": [null]}, "cluster": {"network": {"podSubnets": [null]}}});
        assert!(refused_null_items(&doc).is_empty());
        let answer = load(&mut oracle, &doc);
        assert!(answer.get("error").is_none(), "{}: {answer}", release.tag());
    }
}
