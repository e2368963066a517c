//! kube-apiserver's listener, one per control plane: while the node is up, configured as a
//! control plane and the cluster is bootstrapped, it binds `<node address>:<endpoint port>`
//! (6443 unless the cluster endpoint says otherwise) and serves HTTP/1.1 over TLS with a serving
//! certificate from the cluster's Kubernetes CA. Client certificates are optional at the TLS
//! layer, as on a real API server: without one a request is answered 401.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::api::{self, Request};
use crate::mcfg::StoredConfig;
use crate::state::Shared;

const POLL: Duration = Duration::from_millis(100);
const DEFAULT_PORT: u16 = 6443;

/// Where and with what the node's API server serves now; None while it does not.
#[derive(Clone, PartialEq)]
pub(crate) struct Serving {
    pub address: Ipv4Addr,
    pub port: u16,
    pub generation: u64,
    pub config_version: u64,
}

pub(crate) fn endpoint_port(cfg: &StoredConfig) -> u16 {
    let endpoint = cfg.endpoint();
    let authority = endpoint
        .split("://")
        .nth(1)
        .unwrap_or(&endpoint)
        .split('/')
        .next()
        .unwrap_or("");
    authority
        .rsplit_once(':')
        .filter(|(host, _)| !host.is_empty() && !authority.ends_with(']'))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(DEFAULT_PORT)
}

/// Where node `idx`'s API server serves now, and with which config: None while it does not.
pub(crate) fn serving(shared: &Shared, idx: usize) -> Option<(Serving, StoredConfig)> {
    let st = shared.lock();
    let n = st.nodes.get(idx)?;
    let cfg = n.active.as_ref()?;
    let serves = st.etcd.is_some()
        && n.up
        && n.is_control_plane()
        && !n.services_stopped
        && n.reachable_from_controller();
    serves.then(|| {
        (
            Serving {
                address: n.address,
                port: endpoint_port(cfg),
                generation: n.generation,
                config_version: n.config_version,
            },
            cfg.clone(),
        )
    })
}

/// The addresses and names kube-apiserver's serving certificate is for: the node's address,
/// loopback, the in-cluster names and the cluster endpoint's host (Talos's `APIServerCertSANs`).
pub(crate) fn serving_names(cfg: &StoredConfig, address: Ipv4Addr) -> (Vec<IpAddr>, Vec<String>) {
    let mut ips: Vec<IpAddr> = vec![IpAddr::V4(address), IpAddr::V4(Ipv4Addr::LOCALHOST)];
    let mut dns: Vec<String> = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "localhost",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let endpoint = cfg.endpoint();
    let host = endpoint
        .split("://")
        .nth(1)
        .unwrap_or(&endpoint)
        .split('/')
        .next()
        .unwrap_or("")
        .rsplit_once(':')
        .map(|(h, _)| h.trim_matches(|c| c == '[' || c == ']').to_string())
        .unwrap_or_default();
    match host.parse::<IpAddr>() {
        Ok(ip) => ips.push(ip),
        Err(_) if !host.is_empty() => dns.push(host),
        Err(_) => {}
    }
    (ips, dns)
}

fn tls_config(cfg: &StoredConfig, address: Ipv4Addr) -> Result<Arc<rustls::ServerConfig>> {
    let (ca_crt, ca_key) = cfg
        .k8s_ca()
        .ok_or_else(|| anyhow!("the config has no Kubernetes CA key (cluster.ca)"))?;
    let (ips, dns) = serving_names(cfg, address);
    let leaf = crate::pki::issue_server_cert(&ca_crt, &ca_key, "kube-apiserver", &ips, &dns)?;
    let certs = CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| anyhow!("invalid certificate PEM"))?;
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes())
        .map_err(|_| anyhow!("invalid key PEM"))?;
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_crt.as_bytes()) {
        roots
            .add(c.map_err(|_| anyhow!("invalid CA PEM"))?)
            .context("the Kubernetes CA")?;
    }
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crate::tls::provider())
            .allow_unauthenticated()
            .build()
            .context("client verifier")?;
    let mut server = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .context("serving certificate")?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(server))
}

pub async fn run(shared: Arc<Shared>, idx: usize) {
    // With `--kubernetes real` upstream's kube-apiserver serves there (`real/kubernetes`).
    if shared.real_kube.is_some() {
        return;
    }
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let Some((now, cfg)) = serving(&shared, idx) else {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => continue,
                _ = shutdown.changed() => return,
            }
        };
        let tls = match tls_config(&cfg, now.address) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("talos-sim: node {idx}: the Kubernetes API cannot serve: {e:#}");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        let listener = match TcpListener::bind((now.address, now.port)).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "talos-sim: node {idx}: the Kubernetes API cannot listen on {}:{}: {e}",
                    now.address, now.port
                );
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        set_listening(&shared, idx, true);
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                acc = listener.accept() => {
                    if let Ok((tcp, _)) = acc {
                        conns.spawn(serve_conn(shared.clone(), idx, tcp, tls.clone()));
                    }
                }
                _ = tokio::time::sleep(POLL) => {
                    if serving(&shared, idx).map(|(s, _)| s) != Some(now.clone()) {
                        break;
                    }
                }
                _ = shutdown.changed() => {
                    conns.abort_all();
                    set_listening(&shared, idx, false);
                    return;
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        // The node went down or its config changed: connections end as a restarting API
        // server's do.
        conns.abort_all();
        drop(listener);
        set_listening(&shared, idx, false);
    }
}

fn set_listening(shared: &Shared, idx: usize, listening: bool) {
    if let Some(n) = shared.lock().nodes.get_mut(idx) {
        n.kube_api_listening = listening;
    }
}

async fn serve_conn(
    shared: Arc<Shared>,
    idx: usize,
    tcp: TcpStream,
    tls: Arc<rustls::ServerConfig>,
) {
    let _ = tcp.set_nodelay(true);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
    else {
        return;
    };
    let groups = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| crate::pki::roles_of(c));
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let shared = shared.clone();
        let groups = groups.clone();
        async move { Ok::<_, Infallible>(answer(&shared, idx, groups, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn answer(
    shared: &Shared,
    idx: usize,
    groups: Option<Vec<String>>,
    req: hyper::Request<Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let content_type = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or(v).trim().to_string());
    let response = api::handle(
        shared,
        &Request {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query(),
            content_type: content_type.as_deref(),
            body: &body,
            user_agent: parts
                .headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
            groups,
            serving: idx,
        },
    );
    // A text answer is plain text, as the API server's own 404 for a path no API serves.
    let (content_type, body) = match response.body {
        serde_json::Value::String(text) => ("text/plain; charset=utf-8", text),
        json => ("application/json", json.to_string()),
    };
    hyper::Response::builder()
        .status(response.code)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::new())))
}
