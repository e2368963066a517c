//! The result being built while the run goes: what it found, what it warns about and whether the
//! node has changed, so that a failure part-way still reports everything up to it.

use ferro_ansible_protocol::ModuleError;
use ferro_talos_client::ClientError;
use serde_json::{Map, Value, json};

/// The result being built: fields, warnings, and whether the node was changed so far.
pub(super) struct Report {
    pub(super) fields: Map<String, Value>,
    pub(super) warnings: Vec<String>,
    pub(super) changed: bool,
}

impl Report {
    pub(super) fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.fields.insert(key.to_string(), value.into());
    }

    /// A failure that keeps everything reported so far.
    pub(super) fn fail(&self, msg: impl Into<String>) -> ModuleError {
        let mut err = ModuleError::new(msg).changed(self.changed);
        for (k, v) in &self.fields {
            err = err.with(k.clone(), v.clone());
        }
        err
    }

    pub(super) fn client_fail(&self, e: ClientError) -> ModuleError {
        let mut err = self.fail(e.to_string());
        if let Some(code) = e.grpc_code {
            err = err.with("grpc_code", json!(code));
        }
        err
    }
}
