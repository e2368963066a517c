//! A blocking client for a real etcd member's JSON gateway (`/v3/...` on its client URL), the
//! calls talos-sim's real backend makes: the member list and its changes, status, snapshot.
//!
//! The gateway is etcd's own grpc-gateway over the v3 gRPC API (`server/etcdserver/api/v3rpc`
//! behind `server/embed/serve.go` @ v3.7.1): the request and answer are the protobuf messages in
//! JSON, 64-bit integers as strings, and a refusal is `{"code": <gRPC code>, "message": ...}`
//! with etcd's own text. One request per connection (HTTP/1.0), so an answer is read to the end
//! of the stream, streamed ones (the snapshot) included.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

/// What a call to a member failed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayError {
    /// Nothing answers there (connection refused, a reset, or no answer within the timeout).
    Unreachable(String),
    /// etcd refused: its gRPC code and message (e.g. 9, "etcdserver: unhealthy cluster").
    Refused { code: i32, message: String },
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatewayError::Unreachable(why) => write!(f, "{why}"),
            GatewayError::Refused { message, .. } => write!(f, "{message}"),
        }
    }
}

/// One member as etcd lists it (`etcdserverpb.Member`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    /// Empty for a member that was added but has not started yet.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

/// A member's own view (`etcdserverpb.StatusResponse`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub member_id: u64,
    pub version: String,
    pub storage_version: String,
    pub db_size: i64,
    pub db_size_in_use: i64,
    pub leader: u64,
    pub raft_index: u64,
    pub raft_term: u64,
    pub raft_applied_index: u64,
    pub is_learner: bool,
    pub errors: Vec<String>,
}

/// Whether a call needs etcd to have a leader. Talos makes its member list, removals and leaves
/// with `clientv3.WithRequireLeader` (`v1alpha1_server.go`, `LeaveEtcd` in
/// `v1alpha1_sequencer_tasks.go` @ v1.14.1); etcd then refuses at once while it has no leader
/// (`etcdserver: no leader`) where the call would otherwise wait out its deadline. The gateway
/// passes the `hasleader` metadata on from a `Grpc-Metadata-` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leader {
    Required,
    NotRequired,
}

/// The client URL of one member.
#[derive(Debug, Clone, Copy)]
pub struct Gateway {
    pub address: SocketAddr,
    pub timeout: Duration,
}

fn u64_of(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

fn i64_of(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn strings_of(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn member_of(v: &Value) -> Member {
    Member {
        id: u64_of(&v["ID"]),
        name: v["name"].as_str().unwrap_or_default().to_owned(),
        peer_urls: strings_of(&v["peerURLs"]),
        client_urls: strings_of(&v["clientURLs"]),
        is_learner: v["isLearner"].as_bool().unwrap_or(false),
    }
}

fn members_of(v: &Value) -> Vec<Member> {
    v["members"]
        .as_array()
        .map(|a| a.iter().map(member_of).collect())
        .unwrap_or_default()
}

impl Gateway {
    pub fn new(address: SocketAddr) -> Gateway {
        Gateway {
            address,
            timeout: Duration::from_secs(5),
        }
    }

    /// POSTs `body` to `path` and returns the whole answer body, or etcd's refusal.
    fn post_raw(&self, path: &str, body: &Value, leader: Leader) -> Result<Vec<u8>, GatewayError> {
        let unreachable =
            |e: std::io::Error| GatewayError::Unreachable(format!("etcd at {}: {e}", self.address));
        let mut stream =
            TcpStream::connect_timeout(&self.address, self.timeout).map_err(unreachable)?;
        stream
            .set_read_timeout(Some(self.timeout))
            .map_err(unreachable)?;
        stream
            .set_write_timeout(Some(self.timeout))
            .map_err(unreachable)?;
        let body = body.to_string();
        let leader = match leader {
            Leader::Required => "Grpc-Metadata-hasleader: true\r\n",
            Leader::NotRequired => "",
        };
        let request = format!(
            "POST {path} HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\n{leader}Content-Length: {}\r\n\r\n{body}",
            self.address,
            body.len()
        );
        stream.write_all(request.as_bytes()).map_err(unreachable)?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).map_err(unreachable)?;
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| {
                GatewayError::Unreachable(format!("etcd at {}: no HTTP answer", self.address))
            })?;
        let head = String::from_utf8_lossy(&answer[..split]).into_owned();
        let content = answer[split + 4..].to_vec();
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if status != 200 {
            let refusal: Value = serde_json::from_slice(&content).unwrap_or(Value::Null);
            return Err(GatewayError::Refused {
                code: refusal["code"].as_i64().unwrap_or(2) as i32,
                message: refusal["message"]
                    .as_str()
                    .unwrap_or("etcd refused the call")
                    .to_owned(),
            });
        }
        Ok(content)
    }

    fn post(&self, path: &str, body: Value, leader: Leader) -> Result<Value, GatewayError> {
        let content = self.post_raw(path, &body, leader)?;
        serde_json::from_slice(&content).map_err(|e| {
            GatewayError::Unreachable(format!("etcd at {}: unreadable answer: {e}", self.address))
        })
    }

    pub fn member_list(&self) -> Result<Vec<Member>, GatewayError> {
        self.post(
            "/v3/cluster/member/list",
            json!({"linearizable": true}),
            Leader::Required,
        )
        .map(|v| members_of(&v))
    }

    /// Adds a learner (`MemberAddAsLearner`); returns its id and the list after the change.
    pub fn member_add_learner(
        &self,
        peer_urls: &[String],
    ) -> Result<(u64, Vec<Member>), GatewayError> {
        let v = self.post(
            "/v3/cluster/member/add",
            json!({"peerURLs": peer_urls, "isLearner": true}),
            Leader::NotRequired,
        )?;
        Ok((u64_of(&v["member"]["ID"]), members_of(&v)))
    }

    pub fn member_promote(&self, id: u64) -> Result<(), GatewayError> {
        self.post(
            "/v3/cluster/member/promote",
            json!({"ID": id.to_string()}),
            Leader::NotRequired,
        )
        .map(drop)
    }

    pub fn member_remove(&self, id: u64) -> Result<(), GatewayError> {
        self.post(
            "/v3/cluster/member/remove",
            json!({"ID": id.to_string()}),
            Leader::Required,
        )
        .map(drop)
    }

    pub fn status(&self) -> Result<Status, GatewayError> {
        let v = self.post("/v3/maintenance/status", json!({}), Leader::NotRequired)?;
        Ok(Status {
            member_id: u64_of(&v["header"]["member_id"]),
            version: v["version"].as_str().unwrap_or_default().to_owned(),
            storage_version: v["storageVersion"].as_str().unwrap_or_default().to_owned(),
            db_size: i64_of(&v["dbSize"]),
            db_size_in_use: i64_of(&v["dbSizeInUse"]),
            leader: u64_of(&v["leader"]),
            raft_index: u64_of(&v["raftIndex"]),
            raft_term: u64_of(&v["raftTerm"]),
            raft_applied_index: u64_of(&v["raftAppliedIndex"]),
            is_learner: v["isLearner"].as_bool().unwrap_or(false),
            errors: strings_of(&v["errors"]),
        })
    }

    /// Writes one key (`Put`): tests put data in before a snapshot and look for it after a
    /// recovery.
    pub fn put(&self, key: &str, value: &str) -> Result<(), GatewayError> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        self.post(
            "/v3/kv/put",
            json!({"key": b64.encode(key), "value": b64.encode(value)}),
            Leader::NotRequired,
        )
        .map(drop)
    }

    /// Reads one key (`Range`); None when it is not there.
    pub fn get(&self, key: &str) -> Result<Option<String>, GatewayError> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let v = self.post(
            "/v3/kv/range",
            json!({"key": b64.encode(key)}),
            Leader::NotRequired,
        )?;
        let Some(value) = v["kvs"].get(0).and_then(|kv| kv["value"].as_str()) else {
            return Ok(None);
        };
        let bytes = b64.decode(value).unwrap_or_default();
        Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// The member's database as etcd's `Snapshot` streams it: the blobs of every answer, in
    /// order (a bbolt file followed by its SHA-256).
    pub fn snapshot(&self) -> Result<Vec<u8>, GatewayError> {
        use base64::Engine;
        let content = self.post_raw("/v3/maintenance/snapshot", &json!({}), Leader::NotRequired)?;
        let mut out = Vec::new();
        for chunk in serde_json::Deserializer::from_slice(&content).into_iter::<SnapshotChunk>() {
            let chunk = chunk.map_err(|e| {
                GatewayError::Unreachable(format!("etcd at {}: broken snapshot: {e}", self.address))
            })?;
            if let Some(error) = chunk.error {
                return Err(GatewayError::Refused {
                    code: error.code,
                    message: error.message,
                });
            }
            let blob = chunk.result.and_then(|r| r.blob).unwrap_or_default();
            out.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(blob)
                    .unwrap_or_default(),
            );
        }
        Ok(out)
    }
}

#[derive(Deserialize)]
struct SnapshotChunk {
    result: Option<SnapshotResult>,
    error: Option<StreamError>,
}

#[derive(Deserialize)]
struct SnapshotResult {
    blob: Option<String>,
}

#[derive(Deserialize)]
struct StreamError {
    #[serde(default)]
    code: i32,
    #[serde(default)]
    message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_read_as_etcd_writes_them() {
        // etcd v3.7.1's answer to /v3/cluster/member/list with a learner not started yet.
        let v: Value = serde_json::from_str(
            r#"{"header":{"cluster_id":"1"},"members":[{"ID":"9462562289779120274","peerURLs":["http://127.66.0.2:2380"],"isLearner":true},{"ID":"15618212654607510535","name":"n1","peerURLs":["http://127.66.0.1:2380"],"clientURLs":["http://127.66.0.1:2379"]}]}"#,
        )
        .unwrap();
        let members = members_of(&v);
        assert_eq!(members.len(), 2);
        assert_eq!(members[0].id, 9462562289779120274);
        assert!(members[0].is_learner && members[0].name.is_empty());
        assert_eq!(members[1].name, "n1");
        assert_eq!(members[1].client_urls, vec!["http://127.66.0.1:2379"]);
    }
}
