//! What trustd does for the simulated nodes: which CA key signs a worker's certificate, and
//! signing the ones that waited for it.

use std::sync::Arc;

use super::State;
use crate::mcfg::StoredConfig;
use crate::tls;

/// The OS CA key a control plane's trustd would sign a worker's certificate with: any node's
/// config that carries the same CA certificate and its key.
pub fn trustd_key(st: &State, cfg: &StoredConfig) -> Option<String> {
    let (crt, _) = cfg.os_ca()?;
    st.nodes
        .iter()
        .flat_map(|n| [n.active.as_ref(), n.persisted.as_ref()])
        .flatten()
        .filter_map(StoredConfig::os_ca)
        .find(|(c, k)| *c == crt && k.is_some())
        .and_then(|(_, k)| k)
}

/// Workers whose certificate could not be signed yet (no CA key known) get a proper one as soon
/// as some node's config provides the key, as trustd would then answer their request.
pub fn refresh_unsigned_tls(st: &mut State) {
    for i in 0..st.nodes.len() {
        let n = &st.nodes[i];
        if !n.tls.as_ref().is_some_and(|t| t.awaiting_ca_key) {
            continue;
        }
        let Some(key) = n.active.as_ref().and_then(|c| trustd_key(st, c)) else {
            continue;
        };
        let n = &mut st.nodes[i];
        match tls::NodeTls::build(n, Some(key)) {
            Ok(t) => n.tls = Some(Arc::new(t)),
            Err(e) => eprintln!("talos-sim: node {i}: cannot sign the server certificate: {e:#}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcfg::Release;
    use crate::sample::SampleCluster;
    use crate::state::shared::tests::state;
    use std::sync::LazyLock;

    /// A secrets bundle's configs (an RSA key to generate: made once).
    static SAMPLE: LazyLock<SampleCluster> = LazyLock::new(SampleCluster::generate);

    fn parse(yaml: &str) -> StoredConfig {
        StoredConfig::parse(yaml.as_bytes(), Release::V1_13).unwrap()
    }

    #[test]
    fn a_worker_is_signed_once_a_control_plane_brings_the_ca_key() {
        let (cp, worker) = (parse(&SAMPLE.controlplane), parse(&SAMPLE.worker));
        let (crt, key) = cp.os_ca().unwrap();
        assert_eq!(
            worker.os_ca(),
            Some((crt, None)),
            "a worker has the CA without its key"
        );
        let mut st = state(1, 1);
        assert_eq!(trustd_key(&st, &worker), None, "no node has a config");

        st.nodes[1].active = Some(worker.clone());
        let n = &mut st.nodes[1];
        n.tls = Some(Arc::new(tls::NodeTls::build(n, None).unwrap()));
        assert!(n.tls.as_ref().unwrap().awaiting_ca_key);
        refresh_unsigned_tls(&mut st);
        assert!(
            st.nodes[1].tls.as_ref().unwrap().awaiting_ca_key,
            "still no key"
        );

        // The next-boot config counts as well as the running one.
        st.nodes[0].persisted = Some(cp);
        assert_eq!(trustd_key(&st, &worker), key);
        refresh_unsigned_tls(&mut st);
        assert!(!st.nodes[1].tls.as_ref().unwrap().awaiting_ca_key);
        assert!(
            st.nodes[0].tls.is_none(),
            "a node without TLS is left alone"
        );
    }

    #[test]
    fn only_the_same_ca_certificate_finds_a_key() {
        let cp = parse(&SAMPLE.controlplane);
        let (crt, key) = cp.os_ca().unwrap();
        let mut st = state(1, 0);
        st.nodes[0].active = Some(cp);
        let with_ca = |crt: &str| {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD.encode(crt);
            parse(&format!(
                "version: v1alpha1\nmachine:\n  type: worker\n  ca:\n    crt: {b64}\n"
            ))
        };
        assert_eq!(trustd_key(&st, &with_ca(&crt)), key);
        let other = "-----BEGIN CERTIFICATE-----\nb3RoZXI=\n-----END CERTIFICATE-----\n";
        assert_eq!(trustd_key(&st, &with_ca(other)), None);
        let no_ca = parse("version: v1alpha1\nmachine:\n  type: worker\n");
        assert_eq!(trustd_key(&st, &no_ca), None);
    }
}
