"""tools/conformance against a talos-sim cluster standing in for a real one.

The comparison has to say `same` for every probe when both sides are talos-sim, and `differs` for
exactly the probes a known fault on the "real" side changes. The report must hold no secret, and
the simulator the tool starts must be gone when it ends, also when it is interrupted.
"""

import json
import os
import re
import signal
import socket
import subprocess
import time

from conftest import ROOT
from secrets_scan import client_key_forms, leaks, secret_forms
from sim_cluster import converge

TOOL = ROOT / "tools" / "conformance"
# Short health checks: on the faulty side they wait this long before failing.
HEALTH_TIMEOUT = 3


def conformance(cluster, sim, tmp_path, *extra):
    cmd = [
        str(TOOL), "--no-cargo",
        "--talosconfig", str(cluster["talosconfig"]),
        "--nodes", ",".join(sim.addresses),
        "--report", str(tmp_path / "report.md"),
        "--json", str(tmp_path / "report.json"),
        "--health-timeout", str(HEALTH_TIMEOUT),
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=os.environ)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = (tmp_path / "report.md").read_text()
    assert proc.stdout.strip() == report.strip()
    return report, json.loads((tmp_path / "report.json").read_text()), proc.stderr


def sim_block(stderr):
    match = re.search(r"converging talos-sim on 127\.0\.(\d+)\.0/24", stderr)
    assert match, stderr
    return int(match.group(1))


def block_in_use(block):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((f"127.0.{block}.1", 50000))
        except OSError:
            return True
    return False


def assert_no_secrets(cluster, *texts):
    forms = secret_forms(cluster["secrets"].read_text()) | client_key_forms(cluster["talosconfig"].read_text())
    for text in texts:
        assert leaks(text, forms) == []
        assert "-----BEGIN" not in text


def interrupted_run(cluster, sim):
    """Starts the tool, interrupts it (Ctrl-C) once its simulator is up; returns the simulator's block
    and what the tool printed."""
    cmd = [str(TOOL), "--no-cargo", "--talosconfig", str(cluster["talosconfig"]), "--nodes", ",".join(sim.addresses)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ)
    try:
        started = ""
        for line in proc.stderr:
            if "converging talos-sim" in line:
                started = line
                break
        block = sim_block(started)
        assert block_in_use(block)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode != 0
    return block, stderr


def wait_until_free(block, timeout=10):
    deadline = time.time() + timeout
    while block_in_use(block) and time.time() < deadline:
        time.sleep(0.1)
    return not block_in_use(block)


def test_talos_sim_conforms_to_itself(sim_factory, ansible, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    cluster = converge(ansible, sim, tmp_path)
    report, result, stderr = conformance(cluster, sim, tmp_path)

    differing = [(p["node"], p["probe"], p["differences"]) for p in result["probes"] if p["result"] != "same"]
    assert differing == [], report
    probes = {p["probe"] for p in result["probes"]}
    # Every read-only RPC the modules make and every module that talks to a node.
    for expected in (
        "Version", "Hostname", "ServiceList", "EtcdMemberList", "EtcdStatus", "Kubeconfig", "HealthCheck",
        "COSI Get MachineConfigs.config.talos.dev config/v1alpha1",
        "COSI Get MachineConfigs.config.talos.dev config/persistent",
        "COSI Get MachineStatuses.runtime.talos.dev runtime/machine",
        "COSI List ExtensionStatuses.runtime.talos.dev runtime",
        "ApplyConfiguration dry run: own live config",
        "ApplyConfiguration dry run: unknown key machine.kubelet.extraArgz",
        "module talos_info", "module talos_apply (own live config)", "module talos_upgrade (to its own version)",
        "module talos_reset", "module talos_health", "module talos_bootstrap (already bootstrapped)",
        "module talos_kubeconfig (to a new file)", "module talos_etcd_snapshot (to a new file)",
        "module talos_kubernetes_upgrade (to its own version)",
    ):
        assert expected in probes, expected
    assert len(re.findall(r"^same ", report, re.M)) == len(result["probes"])
    by_key = {(p["node"], p["probe"]): p["real"] for p in result["probes"]}
    # A converged cluster is its own idempotence check: its own config and version change nothing.
    assert by_key[("cp1", "module talos_apply (own live config)")]["facts"]["changed"] == "false"
    assert by_key[("w1", "module talos_upgrade (to its own version)")]["facts"]["changed"] == "false"
    assert by_key[("cp1", "module talos_kubernetes_upgrade (to its own version)")]["facts"]["changed"] == "false"
    # Node-specific values are placeholders: the nodes' addresses appear nowhere.
    for address in sim.addresses:
        assert address not in report and address not in json.dumps(result)
    assert "<cp1>" in json.dumps(result)
    assert_no_secrets(cluster, report, json.dumps(result))
    # Nothing on the "real" cluster changed, and the tool's own simulator is gone.
    assert not any(n["maintenance"] for n in sim.status())
    assert not block_in_use(sim_block(stderr))

    # Interrupted (Ctrl-C) while its simulator runs, the tool still stops it. (Part of this test
    # rather than a test of its own, so it needs no second converged cluster.)
    block, stderr = interrupted_run(cluster, sim)
    assert "interrupted; the talos-sim it started is stopped" in stderr
    assert wait_until_free(block)


def test_a_fault_on_the_real_side_is_flagged_exactly_where_it_shows(sim_factory, ansible, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    cluster = converge(ansible, sim, tmp_path)
    sim.control(op="fault", node=0, etcd_down=True)
    report, result, _ = conformance(cluster, sim, tmp_path)

    differing = {(p["node"], p["probe"]) for p in result["probes"] if p["result"] == "differs"}
    assert differing == {
        ("cp1", "ServiceList"),
        ("cp1", "EtcdStatus"),
        ("cp1", "HealthCheck"),
        ("cp1", "module talos_health"),
    }, report
    by_key = {(p["node"], p["probe"]): p for p in result["probes"]}
    status = {d["aspect"]: d for d in by_key[("cp1", "EtcdStatus")]["differences"]}
    assert status["code"]["real"] != "OK" and status["code"]["talos_sim"] == "OK"
    services = {d["aspect"]: d for d in by_key[("cp1", "ServiceList")]["differences"]}
    assert services["service etcd"] == {"aspect": "service etcd", "real": "Running unhealthy",
                                        "talos_sim": "Running healthy"}
    # Both sides are printed for each difference.
    assert re.search(r"^differs  cp1   EtcdStatus\n\s+code: real .*\n\s+talos-sim \"OK\"", report, re.M), report
    assert_no_secrets(cluster, report, json.dumps(result))
