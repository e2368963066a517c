//! The factory's API (image-factory v1.5.0 `internal/frontend/http/`): schematics by ID, creating
//! one, and the versions, extensions and overlays it offers. Its error answers are plain text
//! (`http.Error`), a 404 for what it does not know and a 400 for what it refuses; list answers
//! carry no JSON content type, so none is required here.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::error::{FactoryError, FactoryErrorKind};
use crate::http::{Answer, Endpoint};
use crate::schematic::Schematic;

/// An official extension of a Talos version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtensionInfo {
    /// What a schematic names: `siderolabs/amd-ucode`.
    pub name: String,
    pub reference: String,
    pub digest: String,
    pub description: String,
}

/// An official overlay (a board's firmware and device trees) of a Talos version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverlayInfo {
    pub name: String,
    pub image: String,
    pub reference: String,
}

pub struct Factory {
    endpoint: Endpoint,
}

impl Factory {
    pub fn new(
        url: &str,
        ca_file: Option<&Path>,
        timeout: Duration,
    ) -> Result<Factory, FactoryError> {
        Ok(Factory {
            endpoint: Endpoint::new(url, ca_file, timeout)?,
        })
    }

    /// Sends every request with HTTP Basic credentials, as an Enterprise factory with
    /// authentication takes them (`docs/authentication.md` "The `Authorization` header" @
    /// image-factory v1.5.0: an htpasswd user and password, or under Auth0 any user name and the
    /// token as the password).
    pub fn with_credentials(mut self, username: &str, password: &str) -> Factory {
        self.endpoint.set_basic_auth(username, password);
        self
    }

    pub fn url(&self) -> &str {
        &self.endpoint.base
    }

    /// The canonical YAML the factory holds for `id`, None when it has none.
    pub async fn schematic(&self, id: &str) -> Result<Option<String>, FactoryError> {
        let answer = self.endpoint.get(&format!("/schematics/{id}")).await?;
        match answer.status {
            200 => Ok(Some(String::from_utf8_lossy(&answer.body).into_owned())),
            404 => Ok(None),
            _ => Err(self.failure(&format!("read schematic {id}"), &answer)),
        }
    }

    /// Stores the schematic; the factory's ID for it. The factory answers 201 whether or not it
    /// held the schematic already.
    pub async fn create(&self, schematic: &Schematic) -> Result<String, FactoryError> {
        let answer = self
            .endpoint
            .post_yaml("/schematics", &schematic.canonical_yaml())
            .await?;
        if answer.status != 201 && answer.status != 200 {
            return Err(self.failure("create the schematic", &answer));
        }
        let json: Value = serde_json::from_slice(&answer.body).map_err(|_| {
            FactoryError::new(
                FactoryErrorKind::Server,
                format!("{}: the answer to POST /schematics is not JSON", self.url()),
            )
        })?;
        json.get("id")
            .and_then(Value::as_str)
            .filter(|id| id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_string)
            .ok_or_else(|| {
                FactoryError::new(
                    FactoryErrorKind::Server,
                    format!(
                        "{}: the answer to POST /schematics has no schematic id",
                        self.url()
                    ),
                )
            })
    }

    /// The Talos versions the factory builds, oldest first.
    pub async fn versions(&self) -> Result<Vec<String>, FactoryError> {
        let answer = self.endpoint.get("/versions").await?;
        if answer.status != 200 {
            return Err(self.failure("list Talos versions", &answer));
        }
        let list = self.json_list(&answer, "/versions")?;
        Ok(list
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect())
    }

    pub async fn extensions(&self, version: &str) -> Result<Vec<ExtensionInfo>, FactoryError> {
        let list = self.version_list(version, "extensions").await?;
        Ok(list
            .iter()
            .map(|e| ExtensionInfo {
                name: field(e, "name"),
                reference: field(e, "ref"),
                digest: field(e, "digest"),
                description: field(e, "description"),
            })
            .collect())
    }

    pub async fn overlays(&self, version: &str) -> Result<Vec<OverlayInfo>, FactoryError> {
        let list = self.version_list(version, "overlays").await?;
        Ok(list
            .iter()
            .map(|o| OverlayInfo {
                name: field(o, "name"),
                image: field(o, "image"),
                reference: field(o, "ref"),
            })
            .collect())
    }

    /// `/version/{version}/{what}/official`: the official extensions or overlays of a version.
    async fn version_list(&self, version: &str, what: &str) -> Result<Vec<Value>, FactoryError> {
        let path = format!("/version/{version}/{what}/official");
        let answer = self.endpoint.get(&path).await?;
        if answer.status != 200 {
            return Err(self.failure(&format!("list the {what} of Talos {version}"), &answer));
        }
        self.json_list(&answer, &path)
    }

    fn json_list(&self, answer: &Answer, path: &str) -> Result<Vec<Value>, FactoryError> {
        match serde_json::from_slice::<Value>(&answer.body) {
            Ok(Value::Array(items)) => Ok(items),
            _ => Err(FactoryError::new(
                FactoryErrorKind::Server,
                format!("{}{path}: the answer is not a JSON list", self.url()),
            )),
        }
    }

    /// A failure answer in words: what was asked, the status and the factory's own text.
    fn failure(&self, what: &str, answer: &Answer) -> FactoryError {
        let kind = match answer.status {
            404 => FactoryErrorKind::NotFound,
            401 => FactoryErrorKind::Unauthenticated,
            403 => FactoryErrorKind::Forbidden,
            400..=499 => FactoryErrorKind::Refused,
            _ => FactoryErrorKind::Server,
        };
        let text: String = String::from_utf8_lossy(&answer.body)
            .trim()
            .chars()
            .take(400)
            .collect();
        FactoryError::new(
            kind,
            format!(
                "{} could not {what}: HTTP {}: {text}",
                self.url(),
                answer.status
            ),
        )
    }
}

/// A string field of a JSON object, empty when absent.
fn field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}
