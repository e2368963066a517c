//! Arbitrary bytes as a base machine config plus config patches, through the pure pipeline the
//! `talos_config` and `talos_apply` modules run: `MachineConfig::parse`, `Patch::parse_optional`,
//! `apply_patches` (strategic merge with `$patch: delete`, RFC 6902), then encoding, duplicate
//! warnings, validation, redaction, changed paths and risky changes.
//!
//! Input: the text (invalid UTF-8 replaced) split on NUL bytes; the first part is the base config,
//! each further part (at most 4) one patch. Without a NUL the whole input is the base config.
//!
//! Properties:
//! - no panic anywhere;
//! - every error has a non-empty message;
//! - a failed `apply_patches` leaves the config unchanged;
//! - the encoded config parses back and re-encodes to the same text (what the modules'
//!   "already up to date" comparison relies on); `FERRO_FUZZ_ROUNDTRIP=0` turns this one off.

#![no_main]

use std::sync::OnceLock;

use ferro_talos_config::MachineConfig;
use ferro_talos_config::patch::{Patch, duplicate_warnings};
use ferro_talos_config::{diff, redact, risk, validate};
use libfuzzer_sys::fuzz_target;

const MAX_PATCHES: usize = 4;

fn roundtrip() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("FERRO_FUZZ_ROUNDTRIP").is_none_or(|v| v != "0"))
}

fn check_message(what: &str, e: &impl std::fmt::Display) {
    let msg = format!("{e:#}");
    assert!(!msg.trim().is_empty(), "{what}: error without a message");
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let base_text = parts.next().unwrap_or("");
    let base = match MachineConfig::parse(base_text) {
        Ok(cfg) => cfg,
        Err(e) => {
            check_message("base config", &e);
            return;
        }
    };

    let mut patches = Vec::new();
    for part in parts.take(MAX_PATCHES) {
        match Patch::parse_optional(part) {
            Ok(Some(patch)) => {
                let _ = format!("{patch:?}");
                patches.push(patch);
            }
            Ok(None) => {
                // parse must refuse what parse_optional drops as empty.
                match Patch::parse(part) {
                    Ok(_) => panic!("Patch::parse accepted a patch parse_optional found empty"),
                    Err(e) => check_message("empty patch", &e),
                }
            }
            Err(e) => check_message("patch", &e),
        }
    }

    let mut cfg = base.clone();
    if let Err(e) = cfg.apply_patches(&patches) {
        check_message("apply_patches", &e);
        assert!(cfg == base, "a failed apply_patches changed the config");
    }

    let yaml = cfg.to_yaml();
    let _ = format!("{cfg:?}");
    let _ = duplicate_warnings(&cfg);
    let _ = validate::validate(&cfg);
    let _ = redact::secret_values(&cfg);
    let _ = redact::secret_paths(&cfg);
    let _ = diff::changed_paths(&base, &cfg);
    let _ = risk::risky_changes(&base, &cfg);
    let (before, after) = redact::redacted_pair(&base, &cfg);
    let _ = before.to_yaml();
    let _ = after.to_yaml();

    if roundtrip() {
        let again = match MachineConfig::parse(&yaml) {
            Ok(c) => c,
            Err(e) => panic!("the encoded config does not parse back: {e:#}"),
        };
        assert!(
            again.to_yaml() == yaml,
            "the encoded config does not re-encode to the same text"
        );
    }
});
