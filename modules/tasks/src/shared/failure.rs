//! A Talos client error as a module's failure, in one place: the translated message (which node,
//! what failed, what to do) plus `node` and `grpc_code` as result fields.
//!
//! Neither `ClientError` nor `ModuleError` is this crate's, so Rust's orphan rule forbids a
//! `From` between them here; [`OrFail::or_fail`] is that conversion for `?`.

use ferro_ansible_protocol::ModuleError;
use ferro_talos_client::ClientError;
use serde_json::json;

/// A client error as a module failure.
pub fn client_failure(e: ClientError) -> ModuleError {
    let mut err = ModuleError::new(e.to_string()).with("node", e.node.clone());
    if let Some(code) = e.grpc_code {
        err = err.with("grpc_code", json!(code));
    }
    err
}

/// `call().await.or_fail()?`: a client call's error becomes the module's failure.
pub trait OrFail<T> {
    fn or_fail(self) -> Result<T, ModuleError>;
}

impl<T> OrFail<T> for Result<T, ClientError> {
    fn or_fail(self) -> Result<T, ModuleError> {
        self.map_err(client_failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferro_talos_client::ErrorKind;

    #[test]
    fn the_failure_names_the_node_and_keeps_the_grpc_code() {
        let mut e = ClientError::new("10.5.0.2", "version", ErrorKind::Unreachable, "refused");
        e.grpc_code = Some(14);
        let failed: Result<(), ModuleError> = Err(e).or_fail();
        let failure = failed.unwrap_err();
        assert!(
            failure.msg.starts_with("node 10.5.0.2: version: "),
            "{}",
            failure.msg
        );
        assert_eq!(failure.fields["node"], "10.5.0.2");
        assert_eq!(failure.fields["grpc_code"], 14);
    }
}
