//! A small Image Factory for tests, written from the factory's API (siderolabs/image-factory
//! v1.5.0 `internal/frontend/http/`, `docs/api.md`) and not from the collection's client: its own
//! strict decoding and canonical YAML (`schematic.rs`), so that a test against it is a second
//! opinion on the module's. Plain HTTP on a loopback address.
//!
//! Routes: `POST /schematics`, `GET /schematics/{id}`, `GET /versions`,
//! `GET /version/{v}/extensions/official`, `GET /version/{v}/overlays/official`, with the
//! factory's statuses and plain-text errors; and `GET /_talos-sim/state`, what tests read to see
//! that check mode stored nothing.
//!
//! [`FactoryServer::start_authenticated`] is an Enterprise factory with htpasswd authentication
//! (`enterprise/auth/auth.go` `Middleware`, `internal/frontend/http/configuration.go`,
//! `internal/schematic/schematic.go` `Get`, `docs/api.md` @ v1.5.0): the schematic routes take
//! HTTP Basic credentials of one of its users, or answer 401 `authentication required to access
//! this schematic`; a created schematic's `owner` is set to the user (another owner in the body is
//! 403 `access denied`), and reading a schematic another user owns is 403 `access denied`. The
//! version lists stay public.

mod catalog;
mod schematic;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What the factory holds: schematics by ID (canonical text and owner), how many times one was
/// posted, and, when it authenticates, its users and their passwords.
#[derive(Default)]
struct Store {
    schematics: BTreeMap<String, (String, String)>,
    posts: usize,
    users: Option<BTreeMap<String, String>>,
}

/// A running test factory.
pub struct FactoryServer {
    pub address: SocketAddr,
    store: Arc<Mutex<Store>>,
    task: JoinHandle<()>,
}

impl FactoryServer {
    /// Serves on `address` (port 0 picks one) until stopped or dropped with the runtime.
    pub async fn start(address: SocketAddr) -> anyhow::Result<FactoryServer> {
        FactoryServer::serve(address, Store::default()).await
    }

    /// An Enterprise factory whose schematic routes authenticate these users (name, password).
    pub async fn start_authenticated(
        address: SocketAddr,
        users: &[(&str, &str)],
    ) -> anyhow::Result<FactoryServer> {
        let users = users
            .iter()
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .collect();
        let store = Store {
            users: Some(users),
            ..Store::default()
        };
        FactoryServer::serve(address, store).await
    }

    async fn serve(address: SocketAddr, store: Store) -> anyhow::Result<FactoryServer> {
        let listener = TcpListener::bind(address).await?;
        let address = listener.local_addr()?;
        let store = Arc::new(Mutex::new(store));
        let shared = store.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let store = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let store = store.clone();
                        async move { Ok::<_, Infallible>(answer(&store, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        Ok(FactoryServer {
            address,
            store,
            task,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The IDs of the schematics stored.
    pub fn schematic_ids(&self) -> Vec<String> {
        self.store
            .lock()
            .map(|s| s.schematics.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn posts(&self) -> usize {
        self.store.lock().map(|s| s.posts).unwrap_or_default()
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

type Response = hyper::Response<Full<Bytes>>;

fn respond(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response {
    hyper::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()))
        .unwrap_or_default()
}

/// Go's `http.Error`: plain text and a newline.
fn error(status: u16, text: &str) -> Response {
    respond(status, "text/plain; charset=utf-8", format!("{text}\n"))
}

/// The list answers set no content type; Go sniffs JSON text as plain text.
fn sniffed_json(value: serde_json::Value) -> Response {
    respond(200, "text/plain; charset=utf-8", format!("{value}\n"))
}

/// Who a request comes from on a factory with users.
enum Caller {
    /// The factory authenticates no one.
    Anyone,
    User(String),
    /// Missing or wrong credentials: 401.
    Refused,
}

fn caller(store: &Mutex<Store>, parts: &http::request::Parts) -> Caller {
    use base64::Engine;
    let s = store.lock().unwrap_or_else(|e| e.into_inner());
    let Some(users) = &s.users else {
        return Caller::Anyone;
    };
    let credentials = parts
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Basic ")
                .or_else(|| v.strip_prefix("basic "))
        })
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
        .and_then(|raw| String::from_utf8(raw).ok());
    match credentials.as_deref().and_then(|c| c.split_once(':')) {
        Some((user, password)) if users.get(user).is_some_and(|p| p == password) => {
            Caller::User(user.to_string())
        }
        _ => Caller::Refused,
    }
}

/// The 401 of the factory's error handler, with its Basic challenge.
fn unauthorized() -> Response {
    let mut r = error(401, "authentication required to access this schematic");
    r.headers_mut().insert(
        http::header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static(
            r#"Basic realm="Image Factory Enterprise", charset="UTF-8""#,
        ),
    );
    r
}

async fn answer(store: &Mutex<Store>, req: hyper::Request<Incoming>) -> Response {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (parts.method.as_str(), segments.as_slice()) {
        ("POST", ["schematics"]) => {
            let user = match caller(store, &parts) {
                Caller::Anyone => None,
                Caller::User(user) => Some(user),
                Caller::Refused => return unauthorized(),
            };
            let text = String::from_utf8_lossy(&body);
            match schematic::canonical(&text, user.as_deref()) {
                Err(schematic::Refusal::Invalid(why)) => error(400, &why),
                Err(schematic::Refusal::OtherOwner) => error(403, "access denied"),
                Ok(canonical) => {
                    let id = schematic::id_of(&canonical);
                    let mut s = store.lock().unwrap_or_else(|e| e.into_inner());
                    s.posts += 1;
                    let owner = user.unwrap_or_default();
                    s.schematics.insert(id.clone(), (canonical.clone(), owner));
                    respond(
                        201,
                        "application/json",
                        format!("{}\n", json!({"id": id, "schematic": canonical})),
                    )
                }
            }
        }
        ("GET", ["schematics", id]) => {
            let user = match caller(store, &parts) {
                Caller::Anyone => None,
                Caller::User(user) => Some(user),
                Caller::Refused => return unauthorized(),
            };
            let s = store.lock().unwrap_or_else(|e| e.into_inner());
            match s.schematics.get(*id) {
                // With authentication, a schematic with no owner matches no caller.
                Some((_, owner)) if user.as_ref().is_some_and(|u| u != owner) => {
                    error(403, "access denied")
                }
                Some((canonical, _)) => respond(200, "application/yaml", canonical.clone()),
                None => error(404, "schematic not found"),
            }
        }
        ("GET", ["versions"]) => sniffed_json(json!(catalog::VERSIONS)),
        ("GET", ["version", version, "extensions", "official"]) => {
            match catalog::known_version(version) {
                Err(status) => version_error(status, version),
                Ok(_) => sniffed_json(json!(catalog::extensions())),
            }
        }
        ("GET", ["version", version, "overlays", "official"]) => {
            match catalog::known_version(version) {
                Err(status) => version_error(status, version),
                Ok(v) => sniffed_json(json!(catalog::overlays(&v))),
            }
        }
        ("GET", ["_talos-sim", "state"]) => {
            let s = store.lock().unwrap_or_else(|e| e.into_inner());
            respond(
                200,
                "application/json",
                json!({"schematics": s.schematics.keys().collect::<Vec<_>>(), "posts": s.posts})
                    .to_string(),
            )
        }
        _ => error(404, "404 page not found"),
    }
}

/// An unknown version is NotFound without its `v`; one that is not a version at all is the
/// handler's unclassified error, a 500 (`meta.go`, `artifacts/manager.go` @ v1.5.0).
fn version_error(status: u16, version: &str) -> Response {
    if status == 404 {
        error(
            404,
            &format!(
                "version {} is not available",
                version.trim_start_matches('v')
            ),
        )
    } else {
        error(500, "internal server error")
    }
}
