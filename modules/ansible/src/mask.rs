//! Masking of secrets in the final result.
//!
//! The rule, applied to every string in the result (object keys included) and to the text of every
//! number:
//! - a value that equals a secret exactly becomes `********`, whatever the secret's length;
//! - a secret of at least [`MIN_SUBSTRING_LEN`] characters is also replaced wherever it occurs
//!   inside a longer string. Shorter secrets (`1`, `yes`, `443`) would otherwise shred unrelated
//!   text, so they are only masked as whole values;
//! - booleans and nulls are never masked; the empty string is never a secret.
//!
//! Ansible's `remove_values` writes `VALUE_SPECIFIED_IN_NO_LOG_PARAMETER` for whole values; one
//! marker for both cases is simpler to read and to test.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// What replaces a secret.
pub const MASK: &str = "********";

/// Secrets shorter than this (in characters) are only masked as whole values.
pub const MIN_SUBSTRING_LEN: usize = 4;

/// A set of secrets, longest first so that a secret containing another is masked whole.
#[derive(Default)]
pub struct Masker {
    secrets: Vec<String>,
}

// Written by hand: the whole point of this type is to hold secrets.
impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Masker({} secrets)", self.secrets.len())
    }
}

impl Masker {
    /// A masker for these secrets (empty strings are ignored).
    pub fn new<I, S>(secrets: I) -> Masker
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let set: BTreeSet<String> = secrets
            .into_iter()
            .map(Into::into)
            .filter(|s| !s.is_empty())
            .collect();
        let mut secrets: Vec<String> = set.into_iter().collect();
        secrets.sort_by(|a, b| {
            b.chars()
                .count()
                .cmp(&a.chars().count())
                .then_with(|| a.cmp(b))
        });
        Masker { secrets }
    }

    /// Masks one string.
    pub fn mask_str(&self, text: &str) -> String {
        if self.secrets.iter().any(|s| s == text) {
            return MASK.to_string();
        }
        let mut out = text.to_string();
        for secret in self
            .secrets
            .iter()
            .filter(|s| s.chars().count() >= MIN_SUBSTRING_LEN)
        {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        out
    }

    /// Masks every string, key and number in a JSON value.
    pub fn mask_value(&self, value: Value) -> Value {
        if self.secrets.is_empty() {
            return value;
        }
        match value {
            Value::String(s) => Value::String(self.mask_str(&s)),
            Value::Number(n) => {
                let text = n.to_string();
                let masked = self.mask_str(&text);
                if masked == text {
                    Value::Number(n)
                } else {
                    Value::String(masked)
                }
            }
            Value::Array(items) => {
                Value::Array(items.into_iter().map(|v| self.mask_value(v)).collect())
            }
            Value::Object(map) => {
                let mut out = Map::with_capacity(map.len());
                for (key, v) in map {
                    out.insert(self.mask_str(&key), self.mask_value(v));
                }
                Value::Object(out)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_values_and_substrings() {
        let m = Masker::new(["s3cr3t", "abc", ""]);
        assert_eq!(m.mask_str("s3cr3t"), MASK);
        assert_eq!(
            m.mask_str("token=s3cr3t; again s3cr3t"),
            "token=********; again ********"
        );
        assert_eq!(m.mask_str("abc"), MASK);
        // Short secrets leave longer text alone.
        assert_eq!(m.mask_str("abcdef"), "abcdef");
        assert_eq!(m.mask_str(""), "");
    }

    #[test]
    fn longest_secret_first() {
        let m = Masker::new(["pass", "password123"]);
        assert_eq!(m.mask_str("x password123 y pass"), "x ******** y ********");
    }

    #[test]
    fn nested_values_keys_and_numbers() {
        let m = Masker::new(["hunter22", "1234"]);
        let v = json!({
            "msg": "login with hunter22 failed",
            "hunter22": {"list": ["a", "hunter22", 1234, 12345, true, null]},
            "pin": 1234
        });
        assert_eq!(
            m.mask_value(v),
            json!({
                "msg": "login with ******** failed",
                "********": {"list": ["a", MASK, MASK, "********5", true, null]},
                "pin": MASK
            })
        );
    }

    #[test]
    fn multibyte_secrets() {
        let m = Masker::new(["пароль"]);
        assert_eq!(m.mask_str("мой пароль!"), "мой ********!");
        assert!(!format!("{m:?}").contains("пароль"));
    }
}
