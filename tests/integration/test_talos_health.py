"""talos_health through real ansible-playbook runs against talos-sim."""

import threading
import time

import pytest
import yaml

from secrets_scan import leaks, secret_forms
from sim_cluster import converge
from talos_sim import backend_args, wait_nodes_ready


def gate(ansible, args, check=False, name="gate"):
    task = {"name": name, "ferro.talos.talos_health": args}
    run = ansible.run(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]), check=check)
    return run, run.task(name)["result"]


def by_status(result, status):
    return [(c["name"], c["node"]) for c in result["checks"] if c["status"] == status]


@pytest.fixture
def cluster(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=3, workers=1)
    info = converge(ansible, sim, tmp_path)
    info["sim"] = sim
    info["args"] = {
        "node": info["cps"][0],
        "secrets_file": str(info["secrets"]),
        "control_plane_nodes": info["cps"],
        "worker_nodes": info["workers"],
    }
    return info


def test_healthy_cluster_passes_in_normal_and_check_mode(ansible, cluster):
    run, result = gate(ansible, {**cluster["args"], "timeout": 60})
    assert run.rc == 0, run.output
    assert result["changed"] is False
    assert by_status(result, "failed") == [] and by_status(result, "pending") == []
    names = {c["name"] for c in result["checks"]}
    assert names == {
        "Talos API answers",
        "etcd members are the control planes",
        "etcd is running and healthy",
        "core services are up",
        "Talos cluster health check",
    }
    # Every node answered and had its services checked.
    nodes = cluster["cps"] + cluster["workers"]
    assert sorted(n for (c, n) in by_status(result, "ok") if c == "Talos API answers") == sorted(nodes)
    assert sorted(n for (c, n) in by_status(result, "ok") if c == "core services are up") == sorted(nodes)
    assert result["control_plane_nodes"] == cluster["cps"]
    assert any("etcd to be healthy: OK" in m for m in result["talos_health_messages"])
    assert "healthy" in result["msg"]

    # Check mode runs the same checks for real; control planes discovered from etcd; a talosconfig works too.
    args = {"node": cluster["cps"][1], "talosconfig": str(cluster["talosconfig"]), "timeout": 60}
    run, result = gate(ansible, args, check=True)
    assert run.rc == 0, run.output
    assert result["changed"] is False
    assert sorted(result["control_plane_nodes"]) == sorted(cluster["cps"])
    assert any(c["name"] == "Talos cluster health check" and c["status"] == "ok" for c in result["checks"])
    assert run.recap()["changed"] == 0

    # Asked through another control plane's apid (talosctl -e ENDPOINT -n NODE).
    args = {**cluster["args"], "node": cluster["cps"][2], "endpoint": cluster["cps"][0], "timeout": 60}
    routed, result = gate(ansible, args)
    assert routed.rc == 0, routed.output
    assert ("Talos cluster health check", cluster["cps"][2]) in by_status(result, "ok")

    forms = secret_forms(cluster["secrets"].read_text())
    assert leaks(run.output + routed.output, forms) == []


def test_talos_health_check_failure_fails_within_the_timeout(ansible, cluster):
    cluster["sim"].control(op="health_fail", text="node 10.9.9.9 is not ready")
    start = time.time()
    run, result = gate(ansible, {**cluster["args"], "timeout": 6})
    took = time.time() - start
    assert run.rc != 0
    msg = result["msg"]
    assert msg.startswith(f"health check 'Talos cluster health check' failed on {cluster['cps'][0]}: "), msg
    assert "node 10.9.9.9 is not ready" in msg
    assert "timeout 6s" in msg
    assert took < 6 + 30, f"took {took:.1f}s for a 6 s timeout"
    assert ("Talos cluster health check", cluster["cps"][0]) in by_status(result, "failed")
    assert any("10.9.9.9" in m for m in result["talos_health_messages"])


def test_etcd_down_on_one_control_plane_names_it(ansible, cluster):
    sick = cluster["cps"][1]
    cluster["sim"].control(op="fault", node=1, etcd_down=True)
    run, result = gate(ansible, {**cluster["args"], "timeout": 3})
    assert run.rc != 0
    assert result["msg"].startswith(f"health check 'etcd is running and healthy' failed on {sick}: "), result["msg"]
    assert "not healthy" in result["msg"]
    assert ("etcd is running and healthy", sick) in by_status(result, "failed")
    assert ("Talos cluster health check", cluster["cps"][0]) in by_status(result, "pending")


def test_gate_waits_until_the_cluster_recovers(ansible, cluster):
    sim = cluster["sim"]
    sim.control(op="fault", node=2, etcd_down=True)
    timer = threading.Timer(5, lambda: sim.control(op="clear_faults", node=2))
    timer.start()
    try:
        run, result = gate(ansible, {**cluster["args"], "timeout": 60})
    finally:
        timer.cancel()
    assert run.rc == 0, run.output
    assert result["rounds"] > 1
    assert result["elapsed"] >= 4


def test_unreachable_worker_is_named(ansible, cluster):
    worker = cluster["workers"][0]
    cluster["sim"].control(op="fault", node=3, unreachable=True)
    run, result = gate(ansible, {**cluster["args"], "timeout": 3})
    assert run.rc != 0
    assert result["msg"].startswith(f"health check 'Talos API answers' failed on {worker}: "), result["msg"]
    assert "unreachable" in result["msg"]
    assert result["msg"].count("powered on") == 1, "the advice is given once"
    assert ("core services are up", worker) in by_status(result, "pending")


def test_etcd_member_missing_for_a_listed_control_plane(ansible, cluster):
    # The worker claimed as a control plane: etcd has no member for it.
    worker = cluster["workers"][0]
    args = {**cluster["args"], "control_plane_nodes": cluster["cps"] + [worker], "worker_nodes": [], "timeout": 3}
    run, result = gate(ansible, args)
    assert run.rc != 0
    assert result["msg"].startswith(
        f"health check 'etcd members are the control planes' failed on {cluster['cps'][0]}: member {worker} missing"
    ), result["msg"]


def test_cluster_before_bootstrap_fails_clearly(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    info = converge(ansible, sim, tmp_path, bootstrap=False)
    run, result = gate(ansible, {"node": info["cps"][0], "secrets_file": str(info["secrets"]), "timeout": 3})
    assert run.rc != 0
    msg = result["msg"]
    assert msg.startswith(f"health check 'etcd members are the control planes' failed on {info['cps'][0]}: "), msg
    assert "bootstrap" in msg
    assert ("etcd is running and healthy", info["cps"][0]) in by_status(result, "failed")


def test_nodes_in_maintenance_mode_fail_on_the_api_check(ansible, sim_factory, sample, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    secrets = sample.secrets
    run, result = gate(ansible, {"node": sim.addresses[0], "secrets_file": str(secrets), "timeout": 2})
    assert run.rc != 0
    assert result["msg"].startswith(f"health check 'Talos API answers' failed on {sim.addresses[0]}: "), result["msg"]
    assert "panicked" not in run.output


BAD_INPUTS = [
    ("unknown option", {"node": "127.0.0.1", "colour": "blue"}, "Unsupported parameters"),
    ("missing node", {"timeout": 5}, "node"),
    ("empty node", {"node": " "}, "node must be"),
    ("zero timeout", {"node": "127.0.0.1", "timeout": 0}, "timeout must be"),
    ("huge timeout", {"node": "127.0.0.1", "timeout": 100000}, "timeout must be"),
    ("timeout not a number", {"node": "127.0.0.1", "timeout": "soon"}, "timeout"),
    ("empty control plane list", {"node": "127.0.0.1", "control_plane_nodes": []}, "control_plane_nodes"),
    ("url as a node", {"node": "127.0.0.1", "control_plane_nodes": ["https://10.0.0.1:50000"]}, "control_plane_nodes[0]"),
    ("empty node in list", {"node": "127.0.0.1", "worker_nodes": ["10.0.0.4", ""]}, "worker_nodes[1]"),
    ("duplicate worker", {"node": "127.0.0.1", "worker_nodes": ["10.0.0.4", "10.0.0.4"]}, "listed twice"),
    ("node in both lists", {"node": "127.0.0.1", "control_plane_nodes": ["10.0.0.1"], "worker_nodes": ["10.0.0.1"]}, "worker_nodes"),
    ("list as a dict", {"node": "127.0.0.1", "control_plane_nodes": {"a": 1}}, "control_plane_nodes"),
    ("both secrets sources", {"node": "127.0.0.1", "secrets_file": "{s}", "secrets": {"cluster": {}}}, "mutually exclusive"),
    ("zero connect timeout", {"node": "127.0.0.1", "connect_timeout": 0, "secrets_file": "{s}"}, "connect_timeout"),
    ("missing secrets file", {"node": "127.0.0.1", "secrets_file": "{o}/nope.yaml"}, "secrets_file"),
    ("no credentials", {"node": "127.0.0.1", "talosconfig": "{o}/talosconfig"}, "no credentials"),
]


@pytest.mark.parametrize("name,args,expected", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_fails_clearly(ansible, sample, tmp_path, name, args, expected):
    out = tmp_path / "out"
    out.mkdir()
    secrets = sample.secrets

    def fill(value):
        if isinstance(value, str):
            return value.replace("{s}", str(secrets)).replace("{o}", str(out))
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    run, result = gate(ansible, fill(args), name="bad")
    assert run.rc != 0
    assert run.task("bad")["status"] == "failed"
    assert expected in result["msg"], result["msg"]
    assert "panicked" not in run.output and "internal error" not in result["msg"]
    assert list(out.iterdir()) == []


def test_talos_check_needs_every_node_of_the_cluster_listed(ansible, cluster):
    """Talos's "all k8s nodes to report" check needs the listed nodes and the Kubernetes nodes to match both ways
    (pkg/cluster/check/kubernetes.go, cluster.NodesMatch at v1.13.9); its wait ends with a bare DeadlineExceeded
    "context deadline exceeded" (v1alpha1_cluster.go), so the module names the check from the progress lines."""
    args = {**cluster["args"], "worker_nodes": [], "timeout": 4}
    run, result = gate(ansible, args)
    assert run.rc != 0
    msg = result["msg"]
    assert "all k8s nodes to report: unexpected nodes with IPs" in msg, msg
    assert cluster["workers"][0] in msg and "list every node of the cluster" in msg
    assert "context deadline exceeded" not in msg


def test_a_certain_wrong_ca_fails_at_once(ansible, cluster, sample):
    """Credentials from another cluster: every configured node presents a certificate from a CA they do not trust.
    Waiting cannot fix that, so the gate fails in its first round instead of retrying until its timeout."""
    args = {**cluster["args"], "secrets_file": str(sample.other_secrets), "timeout": 120}
    start = time.time()
    run, result = gate(ansible, args)
    took = time.time() - start
    assert run.rc != 0
    assert "not signed by the CA in the secrets bundle" in result["msg"], result["msg"]
    assert took < 30, f"took {took:.1f}s: a certain failure must not wait for the 120 s timeout"


@pytest.mark.xdist_group("real-backend")
def test_with_the_real_control_plane_talos_reads_kubernetes_from_its_api(ansible, sim_factory, tmp_path):
    """Talos's Kubernetes checks list the Nodes through the API server (`K8sAllNodesSchedulableAssertion`,
    pkg/cluster/check/kubernetes.go @ v1.14.1): a Node cordoned straight through the real API server,
    which the simulated machines know nothing of, fails the check with upstream's text until it is
    uncordoned. The model could not see it."""
    from test_kubernetes_api import kubernetes

    sim = sim_factory(control_planes=1, workers=1, extra=backend_args("real"))
    cluster = converge(ansible, sim, tmp_path)
    wait_nodes_ready(sim, 2)
    args = {"node": cluster["cps"][0], "secrets_file": str(cluster["secrets"]),
            "control_plane_nodes": cluster["cps"], "worker_nodes": cluster["workers"]}
    run, result = gate(ansible, {**args, "timeout": 90})
    assert run.rc == 0, run.output
    said = "\n".join(result["talos_health_messages"])
    for line in ("all k8s nodes to report: OK", "all control plane components to be ready: OK",
                 "coredns to report ready: OK", "all k8s nodes to report schedulable: OK"):
        assert line in said, said
    # Skipped while the DaemonSet controller has not counted its nodes yet (0 desired), as upstream does.
    assert "kube-proxy to report ready: OK" in said or "kube-proxy to report ready: SKIP" in said, said

    dest = tmp_path / "kubeconfig"
    wrote = ansible.run(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ferro.talos.talos_kubeconfig": {"node": cluster["cps"][0], "dest": str(dest), "secrets_file": str(cluster["secrets"])}}]}]))
    assert wrote.rc == 0, wrote.output
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(dest)))
    worker = next(n.metadata.name for n in core.list_node().items
                  if "node-role.kubernetes.io/control-plane" not in (n.metadata.labels or {}))
    core.patch_node(worker, {"spec": {"unschedulable": True}})
    run, result = gate(ansible, {**args, "timeout": 5})
    assert run.rc != 0, run.output
    assert f"all k8s nodes to report schedulable: some nodes are not schedulable: [{worker}]" in \
        "\n".join(result["talos_health_messages"]), result["talos_health_messages"]

    core.patch_node(worker, {"spec": {"unschedulable": False}})
    run, result = gate(ansible, {**args, "timeout": 60})
    assert run.rc == 0, run.output
