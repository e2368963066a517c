//! The document kinds the config crate knows, against those upstream's own loader registers
//! (tests/oracle, machinery v1.13.9 and v1.14.1): every kind is registered by 1.14.1, and 1.13.9
//! refuses exactly `KINDS_SINCE_1_14`, with the text `kinds_unknown_to` gives.

use ferro_talos_config::known_keys::{KINDS_SINCE_1_14, known_kinds};
use ferro_talos_oracle::{Oracle, Release};
use serde_json::json;

fn refusals(release: Release) -> Option<Vec<(String, String)>> {
    let mut oracle = Oracle::start(release)?;
    Some(
        known_kinds()
            .into_iter()
            .filter_map(|kind| {
                let answer = oracle.ask(&json!({
                    "op": "load",
                    "config": format!("apiVersion: v1alpha1\nkind: {kind}\n"),
                }));
                let error = answer["error"].as_str()?;
                error
                    .contains("not registered")
                    .then(|| (kind.to_string(), error.to_string()))
            })
            .collect(),
    )
}

#[test]
fn talos_1_14_1_registers_every_kind_the_collection_knows() {
    let Some(refused) = refusals(Release::V1_14_1) else {
        return;
    };
    assert_eq!(refused, Vec::<(String, String)>::new());
}

#[test]
fn talos_1_13_9_refuses_exactly_the_kinds_new_in_1_14() {
    let Some(refused) = refusals(Release::V1_13_9) else {
        return;
    };
    let kinds: Vec<&str> = refused.iter().map(|(k, _)| k.as_str()).collect();
    let mut expected = KINDS_SINCE_1_14.to_vec();
    expected.sort_unstable();
    let mut got = kinds.clone();
    got.sort_unstable();
    assert_eq!(got, expected);
    for (kind, error) in &refused {
        assert!(
            error.ends_with(&format!("{kind:?} \"v1alpha1\": not registered")),
            "{error}"
        );
    }
}
