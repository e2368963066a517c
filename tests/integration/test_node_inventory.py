"""The README's per-node inventory (three control planes sharing a VIP, two workers, each described once
in its host_vars as `talos_cluster_node`) converges a simulated cluster as written, changing only the
addresses: every node takes its hostname, the Kubernetes Nodes carry the inventory's labels and taints
as Talos's NodeApplyController puts them there (internal/app/machined/pkg/controllers/k8s/node_apply.go
@ v1.13.9), read back with the official Kubernetes client, and a second run changes nothing."""

import re
import time

import pytest
import yaml

from test_readme import Project, changed, readme_block_with, readme_files
from conftest import Ansible

kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes package is in tools/requirements.txt")

HOSTS = ["cp1", "cp2", "cp3", "w1", "w2"]
# The README's node addresses, in sim node order (control planes first), and its VIP.
NODE_ADDRESSES = ["192.168.1.11", "192.168.1.12", "192.168.1.13", "192.168.1.21", "192.168.1.22"]
VIP = "192.168.1.10"


def to_sim(text, sim):
    """The README's node addresses become the simulated nodes', the VIP the first control plane's."""
    mapping = {a: sim.nodes[i]["address"] for i, a in enumerate(NODE_ADDRESSES)}
    mapping[VIP] = sim.nodes[0]["address"]
    return re.sub(r"\b192\.168\.1\.\d+\b", lambda m: mapping.get(m.group(0), m.group(0)), text)


def test_readme_per_node_inventory_converges_and_labels_the_nodes(sim_factory, tmp_path):
    files = readme_files()
    sim = sim_factory(control_planes=3, workers=2)
    project = Project(tmp_path / "project", Ansible(tmp_path))
    project.write("site.yml", files["site.yml"])
    project.write("inventory-homelab.yml", to_sim(files["inventory-homelab.yml"], sim))
    check, converge = [
        line for line in readme_block_with("sh", "-i inventory-homelab.yml").splitlines() if line.strip()
    ]
    faster_gates = ["-e", "talos_cluster_health_timeout=120"]

    assert project.run(check, faster_gates).rc == 0
    run = project.run(converge, faster_gates)
    assert run.rc == 0, run.output
    assert [n["hostname"] for n in sim.status()] == HOSTS

    again = project.run(check, faster_gates)
    assert again.rc == 0, again.output
    assert changed(again, HOSTS) == dict.fromkeys(HOSTS, 0), again.output

    client = kubernetes.config.new_client_from_config(config_file=str(project.path / "kubeconfig"))
    core = kubernetes.client.CoreV1Api(client)
    deadline = time.time() + 10
    while {n.metadata.name for n in core.list_node().items} != set(HOSTS):
        assert time.time() < deadline, [n.metadata.name for n in core.list_node().items]
        time.sleep(0.3)
    nodes = {n.metadata.name: n for n in core.list_node().items}
    inventory = yaml.safe_load(files["inventory-homelab.yml"])
    for host in ("w1", "w2"):
        wanted = inventory["worker"]["hosts"][host]["talos_cluster_node"]["node_labels"]
        assert wanted.items() <= nodes[host].metadata.labels.items(), nodes[host].metadata.labels
        owned = yaml.safe_load(nodes[host].metadata.annotations["talos.dev/owned-labels"])
        assert set(wanted) <= set(owned)
    taints = [(t.key, t.value, t.effect) for t in nodes["w2"].spec.taints or []]
    assert taints == [("example.com/storage", "bulk", "NoSchedule")]
    assert not nodes["w1"].spec.taints
    assert ("node-role.kubernetes.io/control-plane", None, "NoSchedule") in [
        (t.key, t.value, t.effect) for t in nodes["cp1"].spec.taints
    ]


def test_a_misspelled_node_setting_is_refused_before_any_node_is_touched(sim_factory, tmp_path):
    files = readme_files()
    sim = sim_factory(control_planes=3, workers=2)
    project = Project(tmp_path / "project", Ansible(tmp_path))
    project.write("site.yml", files["site.yml"])
    text = to_sim(files["inventory-homelab.yml"], sim).replace("node_labels: {topology", "node_label: {topology", 1)
    project.write("inventory-homelab.yml", text)
    run = project.run("ansible-playbook -i inventory-homelab.yml site.yml")
    assert run.rc != 0
    assert "node_label" in run.output and "talos_cluster_node" in run.output, run.output
    assert all(n["maintenance"] for n in sim.status()), "a node was touched"
