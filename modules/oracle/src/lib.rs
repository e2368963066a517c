//! Upstream's own config library as a test oracle: `tests/oracle` is a small Go program of ours
//! linked with `github.com/siderolabs/talos/pkg/machinery` at an exact release, built from the Go
//! module proxy. [`Oracle::start`] builds it when needed (once: `tests/oracle/build` keeps a
//! binary newer than its sources) and keeps one process per test, which answers one JSON request
//! per line.
//!
//! A bare clone on a machine without Go cannot build it: a differential test asks
//! [`Oracle::start`] first and returns early when it gives `None`, after printing why. CI sets
//! `FERRO_REQUIRE_UPSTREAM=1`, which turns that skip into a failure.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// Set to `1` to fail instead of skip when the oracle cannot be built (CI does).
pub const REQUIRED_VARIABLE: &str = "FERRO_REQUIRE_UPSTREAM";
/// Where the built programs go, instead of `target/upstream` in the checkout.
pub const DIR_VARIABLE: &str = "FERRO_UPSTREAM_DIR";

/// A machinery release the oracle is built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// The newest 1.13 release.
    V1_13_9,
    /// The newest 1.14 release the Go module proxy serves here (docs/decisions/0009).
    V1_14_1,
}

impl Release {
    pub const ALL: [Release; 2] = [Release::V1_13_9, Release::V1_14_1];

    pub fn tag(self) -> &'static str {
        match self {
            Release::V1_13_9 => "v1.13.9",
            Release::V1_14_1 => "v1.14.1",
        }
    }
}

/// One running oracle process.
pub struct Oracle {
    release: Release,
    child: Child,
    input: BufWriter<ChildStdin>,
    output: BufReader<ChildStdout>,
}

fn checkout() -> PathBuf {
    // Every crate sits at modules/<name>; `cargo test` names the package under test's directory.
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    package.join("../..")
}

fn upstream_dir() -> PathBuf {
    match std::env::var_os(DIR_VARIABLE).filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => checkout().join("target/upstream"),
    }
}

/// Prints why the calling test is skipped, or panics when [`REQUIRED_VARIABLE`] is `1`.
fn skip<T>(reason: &str) -> Option<T> {
    if std::env::var(REQUIRED_VARIABLE).is_ok_and(|v| v == "1") {
        panic!("{reason}; {REQUIRED_VARIABLE}=1 makes this a failure");
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a differential test");
    // Straight to the terminal: the harness captures a passing test's output, and a skip nobody
    // sees hides itself.
    let _ = writeln!(std::io::stderr(), "\nskipped: {test}: {reason}");
    None
}

/// Where the Go module cache holds upstream's config library at `release` (the oracle's build
/// downloads it): its source and its own test data, such as the golden configs of
/// `config/types/v1alpha1/testdata/stability`. `None` after a printed reason without Go.
pub fn machinery_source(release: Release) -> Option<PathBuf> {
    // Building the oracle is what puts the module in the cache.
    Oracle::start(release)?;
    let out = Command::new("go").args(["env", "GOMODCACHE"]).output();
    let cache = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => return skip("go env GOMODCACHE failed"),
    };
    let dir = PathBuf::from(cache).join(format!(
        "github.com/siderolabs/talos/pkg/machinery@{}",
        release.tag()
    ));
    if !dir.is_dir() {
        return skip(&format!("{} is not in the Go module cache", dir.display()));
    }
    Some(dir)
}

/// Runs one of our build scripts for upstream's programs (`script`, from the checkout), which
/// exits 3 without Go; `None` after a printed reason when it cannot build `what` here.
fn build_upstream(script: &str, what: &str) -> Option<()> {
    let build = checkout().join(script);
    let built = Command::new(&build)
        .env(DIR_VARIABLE, upstream_dir())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status();
    match built {
        Ok(s) if s.success() => Some(()),
        Ok(s) if s.code() == Some(3) => {
            skip(&format!("{what} cannot be built: go is not installed"))
        }
        Ok(s) => skip(&format!("{} failed ({s})", build.display())),
        Err(e) => skip(&format!("{}: {e}", build.display())),
    }
}

impl Oracle {
    /// Builds (if needed) and starts the oracle for `release`; `None` after a printed reason when
    /// it cannot be built here.
    pub fn start(release: Release) -> Option<Oracle> {
        build_upstream("tests/oracle/build", "upstream's config library")?;
        let program = upstream_dir().join(format!("oracle-{}", release.tag()));
        let mut child = Command::new(&program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        let input = BufWriter::new(child.stdin.take().expect("piped stdin"));
        let output = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut oracle = Oracle {
            release,
            child,
            input,
            output,
        };
        let version = oracle.ask(&json!({"op": "version"}));
        assert_eq!(version["machinery"], release.tag(), "{}", program.display());
        Some(oracle)
    }

    pub fn release(&self) -> Release {
        self.release
    }

    /// One request, one answer. A panic inside upstream's code comes back as `{"panic": ...}`.
    pub fn ask(&mut self, request: &Value) -> Value {
        serde_json::to_writer(&mut self.input, request).expect("oracle request");
        self.input.write_all(b"\n").expect("oracle request");
        self.input.flush().expect("oracle request");
        let mut line = String::new();
        let read = self.output.read_line(&mut line).expect("oracle answer");
        assert!(read > 0, "the oracle ({}) exited", self.release.tag());
        serde_json::from_str(&line).expect("the oracle answers JSON")
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Upstream's etcd server and etcdutl (`tools/etcd/build`, from the Go module proxy), for
/// talos-sim's real backend: their paths, built if needed, or `None` after a printed reason.
pub fn etcd_programs() -> Option<(PathBuf, PathBuf)> {
    build_upstream("tools/etcd/build", "upstream's etcd")?;
    let dir = upstream_dir();
    Some((dir.join("etcd-v3.7.1"), dir.join("etcdutl-v3.7.1")))
}

/// The Kubernetes release whose API server the tests run (`tools/kube-apiserver/v1.36.3`: the
/// release Talos v1.14.1 defaults to).
pub const KUBE_APISERVER_VERSION: &str = "v1.36.3";

/// Upstream's kube-apiserver (`tools/kube-apiserver/build`, from the Go module proxy): its path,
/// built if needed, or `None` after a printed reason.
pub fn kube_apiserver_program() -> Option<PathBuf> {
    build_upstream("tools/kube-apiserver/build", "upstream's kube-apiserver")?;
    Some(upstream_dir().join(format!("kube-apiserver-{KUBE_APISERVER_VERSION}")))
}
