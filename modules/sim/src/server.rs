//! apid's listener, one per node: binds `<node address>:<port>` while the node is up, does the TLS
//! handshake with the node's current personality and serves gRPC over the accepted streams.
//! A reboot drops the listener and every open connection, as a real node going away does.

use std::sync::Arc;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tonic::codegen::Service as _;
use tonic::service::Routes;

use crate::routing::Ctx;
use crate::services;
use crate::state::Shared;

const MAX_MESSAGE: usize = 32 * 1024 * 1024;

/// `initial` is the listener bound at start-up (used while the node keeps its first address).
pub async fn run_node(shared: Arc<Shared>, idx: usize, mut initial: Option<TcpListener>) {
    let Some(run_tx) = shared.run.get(idx) else {
        return;
    };
    let Some(port) = shared.lock().nodes.get(idx).map(|n| n.port) else {
        return;
    };
    let mut run = run_tx.subscribe();
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let rs = run.borrow_and_update().clone();
        if !rs.listening {
            tokio::select! {
                r = run.changed() => if r.is_err() { return },
                _ = shutdown.changed() => return,
            }
            continue;
        }
        let reuse = initial
            .take()
            .filter(|l| l.local_addr().is_ok_and(|a| a.ip() == rs.address));
        let bound = match reuse {
            Some(l) => Ok(l),
            None => TcpListener::bind((rs.address, port)).await,
        };
        let listener = match bound {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "talos-sim: node {idx} cannot listen on {}:{port}: {e}",
                    rs.address
                );
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {},
                    _ = run.changed() => {},
                    _ = shutdown.changed() => return,
                }
                continue;
            }
        };
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                acc = listener.accept() => {
                    if let Ok((tcp, _)) = acc {
                        conns.spawn(serve_conn(shared.clone(), idx, tcp));
                    }
                }
                r = run.changed() => {
                    if r.is_err() || *run.borrow() != rs {
                        break;
                    }
                }
                _ = shutdown.changed() => {
                    conns.abort_all();
                    return;
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        // The node went away (reboot, unreachable, moved): close everything.
        conns.abort_all();
        drop(listener);
    }
}

async fn serve_conn(shared: Arc<Shared>, idx: usize, tcp: TcpStream) {
    let node_tls = {
        let st = shared.lock();
        st.nodes.get(idx).and_then(|n| n.tls.clone())
    };
    let Some(node_tls) = node_tls else { return };
    // Talos's apid is written in Go, whose sockets have TCP_NODELAY on; without it small gRPC
    // frames wait for delayed ACKs (~40 ms) and the simulator would be slower than a real node.
    let _ = tcp.set_nodelay(true);
    let acceptor = tokio_rustls::TlsAcceptor::from(node_tls.config.clone());
    let handshake = acceptor.accept(tcp).into_fallible();
    let tls = match tokio::time::timeout(Duration::from_secs(10), handshake).await {
        Ok(Ok(tls)) => tls,
        Ok(Err((_, tcp))) => return linger_close(tcp).await,
        Err(_) => return,
    };
    let roles = if node_tls.maintenance {
        // Maintenance mode: every peer is a reader.
        vec!["os:reader".to_string()]
    } else {
        tls.get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| crate::pki::roles_of(c))
            .unwrap_or_default()
    };
    let ctx = Ctx {
        shared,
        endpoint: idx,
        roles: Arc::new(roles),
        maintenance: node_tls.maintenance,
    };
    let svc = Slow {
        routes: services::routes(ctx.clone(), MAX_MESSAGE),
        shared: ctx.shared,
        endpoint: idx,
    };
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(tls), svc)
        .await;
}

/// After a failed handshake rustls has written its alert (e.g. "certificate required"). Closing
/// at once with the client's early data unread would make the kernel send a reset, and the
/// client might never read the alert; so send FIN and drain for a moment first.
async fn linger_close(mut tcp: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tcp.shutdown().await;
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Ok(n) = tcp.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

/// The gRPC routes behind the `slow` fault: every answer waits the largest delay of the nodes
/// involved (the endpoint and any `node`/`nodes` routing target) before the call runs.
struct Slow {
    routes: Routes,
    shared: Arc<Shared>,
    endpoint: usize,
}

impl Slow {
    fn delay(&self, headers: &http::HeaderMap) -> Duration {
        let targets: Vec<usize> = ["node", "nodes"]
            .iter()
            .flat_map(|k| headers.get_all(*k))
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| self.shared.resolve(name.trim()))
            .chain([self.endpoint])
            .collect();
        let st = self.shared.lock();
        let ms = targets
            .iter()
            .filter_map(|i| st.nodes.get(*i)?.faults.slow_ms)
            .max()
            .unwrap_or(0);
        Duration::from_millis(ms)
    }
}

/// The `grpc-timeout` header's value: at most 8 digits and a unit, `H`, `M`, `S`, `m` (ms), `u`
/// (µs) or `n` (ns) (gRPC over HTTP/2, "Timeout").
fn grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl hyper::service::Service<http::Request<Incoming>> for Slow {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn call(&self, req: http::Request<Incoming>) -> Self::Future {
        let delay = self.delay(req.headers());
        if let Some(deadline) = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| grpc_timeout(v.to_str().ok()?))
            && let Ok(mut deadlines) = self.shared.deadlines.lock()
        {
            deadlines.insert(req.uri().path().to_string(), deadline);
        }
        let mut routes = self.routes.clone();
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            std::future::poll_fn(|cx| {
                tonic::codegen::Service::<http::Request<Incoming>>::poll_ready(&mut routes, cx)
            })
            .await?;
            routes.call(req).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_read_as_the_spec_writes_them() {
        assert_eq!(grpc_timeout("600000m"), Some(Duration::from_secs(600)));
        assert_eq!(grpc_timeout("10S"), Some(Duration::from_secs(10)));
        assert_eq!(grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(grpc_timeout("1500u"), Some(Duration::from_micros(1500)));
        assert_eq!(grpc_timeout("7n"), Some(Duration::from_nanos(7)));
        for bad in ["", "S", "123456789S", "10s", "-1S", "1.5S"] {
            assert_eq!(grpc_timeout(bad), None, "{bad}");
        }
    }
}
