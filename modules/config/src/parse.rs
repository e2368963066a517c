//! Reading machine configs from YAML text.

use ferro_talos_secrets::yaml::kind_name;
use serde_json::Value;

use crate::document::{MachineConfig, mixed_identity};
use crate::error::{Error, ErrorKind, Result};

impl MachineConfig {
    /// Parses a (multi-document, `---` separated) machine config. Empty documents are skipped.
    ///
    /// Plain scalars are typed the YAML 1.2 way, as Talos's typed decoder effectively does for
    /// the fields that matter: `off`/`yes` stay strings, `true`/`false` are booleans, numbers are
    /// numbers. Integers written with leading zeros (`0644`) or underscores are kept as text so
    /// the encoder can reproduce them (for example as `0o644` for file permissions).
    pub fn parse(text: &str) -> Result<MachineConfig> {
        // No snippets in errors: the input may hold keys and tokens.
        let options = serde_saphyr::options! {
            strict_booleans: true,
            leading_zero_numbers_as_strings: true,
            underscored_numbers_as_strings: true,
            with_snippet: false,
        };
        let docs: Vec<Value> =
            serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
                let doc = e
                    .location()
                    .map(|l| document_number(text, l.line()))
                    .unwrap_or(1);
                // The library's hint about its own options means nothing to a config author.
                let what = e
                    .to_string()
                    .replace(", set DuplicateKeyPolicy in Options if acceptable", "");
                invalid(format!("YAML document {doc}: {what}"))
            })?;
        let mut out = Vec::with_capacity(docs.len());
        for (i, doc) in docs.into_iter().enumerate() {
            match doc {
                Value::Null => {}
                Value::Object(_) => {
                    if let Some(why) = mixed_identity(&doc) {
                        return Err(invalid(format!("YAML document {}: {why}", i + 1)));
                    }
                    out.push(doc)
                }
                other => {
                    return Err(invalid(format!(
                        "YAML document {}: expected a mapping at the top level, found {}",
                        i + 1,
                        kind_name(&other)
                    )));
                }
            }
        }
        Ok(MachineConfig { docs: out })
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidConfig, message)
}

/// The 1-based number of the document that holds `line` (1-based), counting `---` markers.
fn document_number(text: &str, line: u64) -> usize {
    let mut doc = 1;
    let mut seen_content = false;
    for (i, l) in text.lines().enumerate() {
        if (i as u64) + 1 >= line {
            break;
        }
        let is_marker = l == "---" || l.starts_with("--- ");
        if is_marker {
            // A leading `---` opens the first document rather than starting a second one.
            if seen_content {
                doc += 1;
            }
            seen_content = true;
        } else if !l.trim().is_empty() && !l.trim_start().starts_with('#') {
            seen_content = true;
        }
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn multi_document_and_empty_documents() {
        let c = MachineConfig::parse("a: 1\n---\n---\nkind: X\n---\n").unwrap();
        assert_eq!(c.docs, vec![json!({"a": 1}), json!({"kind": "X"})]);
    }

    #[test]
    fn scalar_typing() {
        let c = MachineConfig::parse(
            "auto: off\nwipe: false\nq: \"true\"\nn: 5443\ny: yes\np: 0644\nu: 1_000\ne: \"\"\nf: 1.5\n",
        )
        .unwrap();
        assert_eq!(
            c.docs[0],
            json!({"auto": "off", "wipe": false, "q": "true", "n": 5443, "y": "yes", "p": "0644",
                   "u": "1_000", "e": "", "f": 1.5})
        );
    }

    #[test]
    fn keeps_key_order() {
        let c = MachineConfig::parse("z: 1\na: 2\nm: 3\n").unwrap();
        let keys: Vec<_> = c.docs[0].as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["z", "a", "m"]);
    }

    #[test]
    fn errors_name_the_document() {
        let e = MachineConfig::parse("a: 1\n---\nb: [1, 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("document 2"), "{e}");
        let e = MachineConfig::parse("a: 1\n---\n- x\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("document 2") && e.contains("mapping"), "{e}");
        let e = MachineConfig::parse("a: 1\na: 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("document 1"), "{e}");
    }

    #[test]
    fn v1alpha1_keys_and_kind_in_one_document_are_refused() {
        // Found by fuzz/patch_engine: `machine:` (null) next to `kind:` rendered as `kind: null`,
        // which then read back as a different document.
        let e = MachineConfig::parse("machine:\nkind: \n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("document 1") && e.contains("`machine`") && e.contains("`kind`"),
            "{e}"
        );
        let e = MachineConfig::parse("a: 1\n---\napiVersion: v1alpha1\ncluster: {}\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("document 2") && e.contains("`cluster`") && e.contains("`apiVersion`"),
            "{e}"
        );
        assert!(MachineConfig::parse("version: v1alpha1\nmachine: {}\n---\nkind: X\n").is_ok());
    }

    #[test]
    fn error_does_not_echo_input() {
        let e = MachineConfig::parse("token: s3cr3t-value\n  bad: [\n")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cr3t-value"), "{e}");
    }
}
