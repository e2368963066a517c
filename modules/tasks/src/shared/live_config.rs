//! A node's running machine config, read over the Talos API, for the modules that plan from it
//! (the Talos and Kubernetes upgrades).

use ferro_talos_client::{ClientError, TalosClient};
use ferro_talos_config::MachineConfig;

/// Why a node's machine config could not be read.
pub(crate) enum ReadError {
    /// The call failed (the client's error says which node and what to do).
    Client(ClientError),
    /// The node answered with a config the module cannot use; the words finish "cannot use the
    /// node's machine config: ...".
    Unusable(String),
}

/// The node's running machine config, parsed; it must hold the v1alpha1 document.
pub(crate) async fn read(client: &TalosClient) -> Result<MachineConfig, ReadError> {
    let bytes = client
        .get_machine_config()
        .await
        .map_err(ReadError::Client)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| ReadError::Unusable("it is not UTF-8 text".into()))?;
    let config = MachineConfig::parse(text)
        .map_err(|e| ReadError::Unusable(format!("it does not parse ({e:#})")))?;
    if config.v1alpha1().is_none() {
        return Err(ReadError::Unusable("it has no v1alpha1 document".into()));
    }
    Ok(config)
}
