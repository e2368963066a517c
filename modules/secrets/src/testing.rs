//! One generated bundle per test binary, for the tests that need any valid bundle (the parity
//! tests read upstream's own bundles through `ferro_talos_fixtures` instead).

use std::sync::LazyLock;

use crate::Bundle;

/// Generated for the 1.6 contract: the same shape as a current bundle but with an ECDSA
/// service-account key, so it takes milliseconds instead of an RSA-4096 key generation.
static BUNDLE: LazyLock<Bundle> =
    LazyLock::new(|| Bundle::generate((1, 6)).expect("a bundle generates"));

pub fn bundle() -> &'static Bundle {
    &BUNDLE
}
