"""Starts the talos-sim binary for a test and stops it afterwards; talks to its control port."""

import itertools
import json
import os
import pathlib
import socket
import subprocess
import time

import pytest

# Each simulated cluster gets its own 127.0.B.0/24 block (B in 20-249; the demo and Molecule use
# blocks below 20) so clusters never collide, even when a previous test's nodes are still shutting
# down. Parallel pytest workers interleave their blocks; a block someone else holds is skipped.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_counter = itertools.count(os.getpid() % 50)


def _block_is_free(block):
    with socket.socket() as s:
        try:
            s.bind((f"127.0.{block}.1", 50000))
        except OSError:
            return False
    return True


def _next_block():
    for _ in range(230):
        block = 20 + (next(_counter) * _WORKERS + _WORKER) % 230
        if _block_is_free(block):
            return block
    raise RuntimeError("no free 127.0.B.0/24 block for talos-sim")


class Sim:
    def __init__(self, proc, nodes, control):
        self.proc = proc
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
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_sim(control_planes=3, workers=1, version="v1.13.6", node_versions=None, downtime_ms=300, extra=()):
    target = os.environ.get("FERRO_TARGET_DIR")
    if not target:
        pytest.fail("FERRO_TARGET_DIR is not set: run the tests through `make test`", pytrace=False)
    binary = pathlib.Path(target) / "talos-sim"
    block = _next_block()
    cmd = [
        str(binary),
        "--control-planes", str(control_planes),
        "--workers", str(workers),
        "--base-address", f"127.0.{block}.1",
        "--talos-version", version,
        "--reboot-downtime-ms", str(downtime_ms),
        # Port 0: the simulator binds a free port and reports it in READY. A fixed port could
        # already be some connection's ephemeral local port.
        "--control-address", "127.0.0.1:0",
    ]
    for index, v in (node_versions or {}).items():
        cmd += ["--node-version", f"{index}={v}"]
    cmd += list(extra)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("READY "):
            ready = json.loads(line[len("READY "):])
            return Sim(proc, ready["nodes"], ready["control"])
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"talos-sim did not start: {proc.stderr.read()}")


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
