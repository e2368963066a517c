"""Starts the talos-sim binary for a test and stops it afterwards; talks to its control port.

The launcher is the binary itself (docs/talos-sim.md): `talos-sim up --detach` in a state directory
of the test's own, with `--base-address auto --address-blocks 20-249` (it picks a free 127.0.B.0/24
block, B in 20-249: the demo and Molecule use blocks below 20), `--in-memory` (the cluster's configs,
which hold its secrets, never reach the disk: test_secrets_everywhere scans every file a test writes)
and `--parent-pid` (the simulator stops by itself once this test process is gone, even when it is
killed), then `talos-sim stop`. `Sim.control()` speaks the JSON-lines control protocol directly.
"""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

BLOCKS = "20-249"
ROOT = pathlib.Path(__file__).resolve().parents[2]
UPSTREAM_DIR = pathlib.Path(os.environ.get("FERRO_UPSTREAM_DIR") or ROOT / "target" / "upstream")
# What plays etcd and the Kubernetes control plane behind the simulated control planes: the simulator's
# models, or upstream's programs (`real`: `--backend real --kubernetes real`, a real etcd member and
# kube-apiserver, kube-controller-manager and kube-scheduler on every control plane, built by
# tools/etcd/build and tools/kube-apiserver/build; talos-sim plays the kubelets and Talos's controllers).
# The real backend's tests run one at a time (one xdist group): three real control planes at once on
# the 2-core machine would time each other out.
REAL = pytest.param("real", marks=pytest.mark.xdist_group("real-backend"))
BACKENDS = ("model", REAL)


def backend_args(backend):
    """The talos-sim flags for `backend`. For `real`, upstream's programs are built
    first (once; a build keeps a binary newer than its module); without Go the test skips, saying why,
    and FERRO_REQUIRE_UPSTREAM=1 (CI) makes that a failure."""
    if backend == "model":
        return ()
    built = [UPSTREAM_DIR / "etcd-v3.7.1", UPSTREAM_DIR / "kube-apiserver-v1.36.3"]
    if shutil.which("go") is None and not all(p.is_file() for p in built):
        reason = "upstream's etcd and Kubernetes cannot be built: go is not installed (the real backend runs them)"
        if os.environ.get("FERRO_REQUIRE_UPSTREAM") == "1":
            pytest.fail(reason + "; FERRO_REQUIRE_UPSTREAM=1 makes this a failure", pytrace=False)
        pytest.skip(reason)
    if shutil.which("go") is not None:
        for build in ("etcd", "kube-apiserver"):
            subprocess.run([str(ROOT / "tools" / build / "build")], check=True, timeout=1800,
                           env={**os.environ, "FERRO_UPSTREAM_DIR": str(UPSTREAM_DIR)})
    return ("--backend", "real", "--upstream-dir", str(UPSTREAM_DIR), "--kubernetes", "real")


def wait_nodes_ready(sim, count):
    """Every Node registered and Ready: at once with the model; with --kubernetes real once the
    control plane's programs have started and the kubelets have reported."""
    deadline = time.time() + 120
    while time.time() < deadline:
        nodes = sim.control(op="kube")["nodes"]
        ready = [n for n in nodes if any(c["type"] == "Ready" and c["status"] == "True"
                                         for c in n["status"].get("conditions", []))]
        if len(ready) == count:
            return
        time.sleep(0.5)
    raise AssertionError(f"{count} Nodes never became Ready: {sim.control(op='kube')['nodes']}")


def binary():
    target = os.environ.get("FERRO_TARGET_DIR")
    if not target:
        pytest.fail("FERRO_TARGET_DIR is not set: run the tests through `make test`", pytrace=False)
    return pathlib.Path(target) / "talos-sim"


class Sim:
    def __init__(self, state_dir, nodes, control):
        self.state_dir = state_dir
        self.nodes = nodes
        self.control_address = control

    @property
    def addresses(self):
        return [n["address"] for n in self.nodes]

    def control(self, **request):
        host, port = self.control_address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall((json.dumps(request) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        reply = json.loads(data)
        if not reply.get("ok"):
            raise RuntimeError(f"talos-sim control {request}: {reply.get('error')}")
        return reply

    def status(self):
        return self.control(op="status")["nodes"]

    def stop(self):
        if self.state_dir is None:
            return
        # Fails only when the simulator is gone already (`stop` kills it if its port hangs).
        subprocess.run([str(binary()), "stop", "--state-dir", self.state_dir],
                       capture_output=True, text=True, timeout=60, check=False)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.state_dir = None


def start_sim(control_planes=3, workers=1, version="v1.13.6", node_versions=None, downtime_ms=300, extra=()):
    state_dir = tempfile.mkdtemp(prefix="talos-sim-")
    cmd = [
        str(binary()), "up", "--detach", "--in-memory",
        "--state-dir", state_dir,
        "--base-address", "auto", "--address-blocks", BLOCKS,
        "--parent-pid", str(os.getpid()),
        "--controlplanes", str(control_planes),
        "--workers", str(workers),
        "--talos-version", version,
        "--reboot-downtime-ms", str(downtime_ms),
    ]
    for index, v in (node_versions or {}).items():
        cmd += ["--node-version", f"{index}={v}"]
    cmd += list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
    ready = [line for line in proc.stdout.splitlines() if line.startswith("READY ")]
    if proc.returncode != 0 or not ready:
        shutil.rmtree(state_dir, ignore_errors=True)
        raise RuntimeError(f"talos-sim did not start: {proc.stderr}{proc.stdout}")
    # The detached simulator prints READY and the launcher its own line on the same stream; their
    # writes can meet without a newline between, so only the JSON value itself is read.
    ready, _ = json.JSONDecoder().raw_decode(ready[-1][len("READY "):])
    return Sim(state_dir, ready["nodes"], ready["control"])


@pytest.fixture
def sim_factory():
    started = []

    def make(**kwargs):
        sim = start_sim(**kwargs)
        started.append(sim)
        return sim

    yield make
    for sim in started:
        sim.stop()
