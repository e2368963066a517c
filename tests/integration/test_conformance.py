"""tools/conformance against a talos-sim cluster standing in for a real one.

The comparison has to say `same` for every probe when both sides are talos-sim, and `differs` for
exactly the probes a known fault on the "real" side changes. The report must hold no secret, and
the simulator the tool starts must be gone when it ends, also when it is interrupted.

The maintenance-mode run (`--maintenance-node`) against a talos-sim node standing in for a spare
machine must record what the simulator did (its stages, read by the test from the simulator's own
control port while the tool runs), every step in order, and end with the node in maintenance mode.
"""

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

from conftest import ROOT, run_module
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
    # MachineStatus too: an unhealthy etcd is an unmet "services" condition, so the node is not ready
    # (internal/app/machined/pkg/controllers/runtime/machine_status.go @ v1.14.1, servicesCheck).
    # The only member down, no etcd answers: the member list waits out its deadline (Talos's
    # clientv3 waits for a connection, internal/pkg/etcd/etcd.go @ v1.14.1), and so do the modules
    # that read it (talos_info, talos_bootstrap's check, talos_reset's guard, which refuses).
    assert differing == {
        ("cp1", "ServiceList"),
        ("cp1", "EtcdMemberList"),
        ("cp1", "EtcdStatus"),
        ("cp1", "COSI Get MachineStatuses.runtime.talos.dev runtime/machine"),
        ("cp1", "HealthCheck"),
        ("cp1", "module talos_info"),
        ("cp1", "module talos_reset"),
        ("cp1", "module talos_health"),
        ("cp1", "module talos_bootstrap (already bootstrapped)"),
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


# ---- one spare machine in maintenance mode ------------------------------------------------------

# The steps of a maintenance-mode run, in order (modules/conformance/src/maintenance.rs STEPS).
MAINTENANCE_STEPS = [
    "check maintenance mode",
    "render config",
    "apply config",
    "watch MachineStatus until settled",
    "EtcdMemberList before bootstrap",
    "etcd service before bootstrap",
    "bootstrap",
    "watch MachineStatus until running and ready",
    "EtcdMemberList after bootstrap",
    "etcd service after bootstrap",
    "reset",
    "wait for maintenance mode",
]
# Short, so the run stays quick whether talos-sim's EtcdMemberList fails at once or waits for the
# deadline before bootstrap.
MEMBER_LIST_DEADLINE = 3


def maintenance_run(node, tmp_path, confirm=True):
    cmd = [
        str(TOOL), "--no-cargo",
        "--maintenance-node", node,
        "--settle", "2",
        "--member-list-deadline", str(MEMBER_LIST_DEADLINE),
        "--wait-timeout", "120",
        "--report", str(tmp_path / "maintenance.md"),
        "--json", str(tmp_path / "maintenance.json"),
    ]
    if confirm:
        cmd.append("--i-understand-this-wipes-the-node")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ)


class StateWatch:
    """What the simulator itself says about one node while the tool runs (its control port, polled
    every 20 ms): each distinct (stage, maintenance, bootstrapped, etcd members), in order."""

    def __init__(self, sim, index):
        self.sim, self.index = sim, index
        self.states = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self):
        while not self.done.is_set():
            reply = self.sim.control(op="status")
            node = reply["nodes"][self.index]
            state = {"stage": node["stage"], "maintenance": node["maintenance"], "up": node["up"],
                     "bootstrapped": reply["bootstrapped"], "etcd_members": reply["etcd_members"]}
            if not self.states or self.states[-1] != state:
                self.states.append(state)
            time.sleep(0.02)

    def stop(self):
        self.done.set()
        self.thread.join(timeout=10)


def dedup(items):
    out = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def is_subsequence(short, long):
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def test_a_spare_machine_is_applied_bootstrapped_and_reset_to_maintenance(sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    spare, configured = sim.addresses

    # Without the confirmation nothing is sent.
    proc = maintenance_run(spare, tmp_path, confirm=False)
    assert proc.returncode != 0
    assert "--i-understand-this-wipes-the-node" in proc.stderr
    assert not (tmp_path / "maintenance.json").exists()

    watch = StateWatch(sim, 0)
    try:
        proc = maintenance_run(spare, tmp_path)
    finally:
        watch.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = (tmp_path / "maintenance.md").read_text()
    result = json.loads((tmp_path / "maintenance.json").read_text())
    assert proc.stdout.strip() == report.strip()
    real = result["runs"]["real"]
    sim_states = watch.states

    # Every step, in order, done on both sides.
    for side in ("real", "talos_sim"):
        steps = result["runs"][side]["steps"]
        assert [s["step"] for s in steps] == MAINTENANCE_STEPS, steps
        assert {s["outcome"] for s in steps} == {"done"}, steps

    # The stages the report shows are the simulator's own, in its order.
    seen = []
    for name in ("after apply", "after bootstrap", "after reset"):
        assert real["timelines"][name], name
        for entry in real["timelines"][name]:
            assert entry["at"], entry
            if "stage" in entry:
                seen.append(entry["stage"])
            elif entry.get("mode") == "maintenance":
                seen.append("maintenance")
    sim_stages = dedup(s["stage"] for s in sim_states)
    assert is_subsequence(dedup(seen), sim_stages), (seen, sim_stages)
    # The state it waited in for bootstrap is the one the simulator held just before bootstrap.
    first_bootstrapped = next(i for i, s in enumerate(sim_states) if s["bootstrapped"])
    before = [s for s in sim_states[:first_bootstrapped] if not s["maintenance"] and s["up"]]
    assert before, sim_states
    settled = real["timelines"]["after apply"][-1]
    assert settled["stage"] == before[-1]["stage"], (settled, sim_states)
    assert settled["etcd_service"] != "absent"
    after = real["timelines"]["after bootstrap"][-1]
    assert (after["stage"], after["ready"]) == ("running", True)
    assert real["timelines"]["after reset"][-1] == {"at": real["timelines"]["after reset"][-1]["at"],
                                                   "mode": "maintenance"}

    records = {p["probe"]: p["real"] for p in result["probes"]}
    deadline = f"(deadline {MEMBER_LIST_DEADLINE}s)"
    # Before bootstrap: the member list's outcome agrees with its code and its time, and with the
    # simulator, which had no members then.
    assert all(s["etcd_members"] == 0 for s in sim_states[:first_bootstrapped])
    early = records[f"EtcdMemberList before bootstrap {deadline}"]
    outcome = early["facts"]["outcome"]
    if outcome == "answered":
        assert early["code"] == "OK" and early["facts"]["members"] == "0", early
    elif outcome == "hit the deadline":
        assert early["code"] != "OK" and early["ms"] >= 0.9 * MEMBER_LIST_DEADLINE * 1000, early
    else:
        assert outcome == "failed before the deadline", early
        assert early["code"] != "OK" and early["ms"] < MEMBER_LIST_DEADLINE * 1000, early
    # After bootstrap: the members the simulator had.
    late = records[f"EtcdMemberList after bootstrap {deadline}"]
    members = max(s["etcd_members"] for s in sim_states if s["bootstrapped"])
    assert (late["code"], late["facts"]["outcome"], late["facts"]["members"]) == ("OK", "answered", str(members))
    assert records["etcd service before bootstrap"]["facts"]["service"]
    assert records["etcd service after bootstrap"]["facts"]["service"].startswith("Running")
    assert records["Bootstrap"]["code"] == "OK"
    assert records["Reset (STATE and EPHEMERAL wiped, not graceful, reboot)"]["code"] == "OK"
    assert records["after reset, until maintenance mode"]["facts"]["last"] == "maintenance mode"

    # Reset back to maintenance mode, seen by the simulator too: it was bootstrapped on the way.
    assert any(s["bootstrapped"] for s in sim_states)
    assert sim_states[-1]["maintenance"], sim_states
    assert sim.status()[0]["maintenance"]

    # Both sides are talos-sim: what does not depend on timing answers the same.
    by_probe = {p["probe"]: p for p in result["probes"]}
    for probe in ("Version without a client certificate", "ApplyConfiguration (first config, mode auto)",
                  f"EtcdMemberList before bootstrap {deadline}", f"EtcdMemberList after bootstrap {deadline}",
                  "etcd service after bootstrap", "Reset (STATE and EPHEMERAL wiped, not graceful, reboot)",
                  "Version without a client certificate, after the reset"):
        assert by_probe[probe]["result"] == "same", by_probe[probe]
    assert all(p["talos_sim"] is not None for p in result["probes"])
    for heading in ("## MachineStatus after apply", "## MachineStatus after bootstrap",
                    "## MachineStatus after reset", "| EtcdMemberList before bootstrap | done"):
        assert heading in report, report

    # Normalised and secret-free: no address of the node, no key material.
    text = report + json.dumps(result)
    for address in sim.addresses:
        assert address not in text
    assert "<cp1>" in text or "cp1" in text
    assert "-----BEGIN" not in text and "PRIVATE KEY" not in text
    assert not block_in_use(int(re.search(r"talos-sim, 127\.0\.(\d+)\.0/24", proc.stderr).group(1)))

    # A node that has a config is refused and keeps it.
    cluster = tmp_path / "other"
    cluster.mkdir()
    config = cluster / "worker.yaml"
    run_module("talos_config", {"secrets_file": str(cluster / "secrets.yaml"), "generate_secrets": True,
                                "machine_type": "worker", "cluster_name": "other",
                                "cluster_endpoint": f"https://{spare}:6443", "dest": str(config)}, cluster)
    run_module("talos_apply", {"node": configured, "config": str(config),
                               "secrets_file": str(cluster / "secrets.yaml"), "wait": False}, cluster)
    (tmp_path / "maintenance.json").unlink()
    proc = maintenance_run(configured, tmp_path)
    assert proc.returncode != 0
    assert "is not in maintenance mode" in proc.stderr and "left alone" in proc.stderr, proc.stderr
    assert not (tmp_path / "maintenance.json").exists()
    assert not sim.status()[1]["maintenance"]
