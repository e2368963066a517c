"""talos_upgrade drains a node around its OS upgrade, through ansible-playbook against talos-sim's
Kubernetes API: cordon, evictions through the Eviction API with PodDisruptionBudgets holding,
upgrade, Node Ready on the new boot, uncordon. talosctl does the same by default (`--drain`,
`--drain-timeout 5m`: cmd/talosctl/cmd/talos/upgrade.go and cmd/talosctl/pkg/talos/nodedrain/ at
Talos v1.13.9); the simulator's 429 and its cause follow kubernetes'
pkg/registry/core/pod/storage/eviction.go. The order is read from the simulator's log of what its
API server accepted, so a drain that ran after the reboot, or not at all, fails here."""

import time

import pytest
import yaml

from talos_sim import BACKENDS, backend_args, wait_nodes_ready
from test_talos_upgrade import converged

GHCR = "ghcr.io/siderolabs/installer"
TASK = "Upgrade the node"


def upgrade_one(ansible, inventory, host, args, check=False, credentials="talosconfig"):
    task_args = {"node": "{{ ansible_host }}", "timeout": 90, "talos_version": "1.13.9", **args}
    if credentials == "talosconfig":
        task_args["talosconfig"] = "{{ talos_talosconfig }}"
    else:
        task_args["secrets_file"] = "{{ talos_secrets_file }}"
    play = [{"hosts": host, "gather_facts": False, "tasks": [{"name": TASK, "ferro.talos.talos_upgrade": task_args}]}]
    run = ansible.run(yaml.safe_dump(play), inventory=inventory, check=check)
    found = run.tasks(TASK)
    assert len(found) == 1, run.output
    return run, found[0]


def kube(sim):
    return sim.control(op="kube")


def node_name(sim, index):
    return sim.status()[index]["hostname"].lower()


def pods_on(sim, name, app):
    return [p["metadata"]["name"] for p in kube(sim)["pods"]
            if p["spec"].get("nodeName") == name and p["metadata"]["labels"].get("app") == app]


def wait_ready_pods(sim, app, count):
    # Upstream's controllers, scheduler and the kubelets' reports take a few seconds with
    # --kubernetes real; the model's a moment.
    deadline = time.time() + 60
    while time.time() < deadline:
        pods = [p for p in kube(sim)["pods"] if p["metadata"]["labels"].get("app") == app]
        # A pod the ReplicaSet controller just created has no conditions until it is scheduled.
        ready = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                        for c in p["status"].get("conditions", []))]
        if len(ready) == count:
            return pods
        time.sleep(0.2)
    raise AssertionError(f"{app}: {count} pods never became Ready")


def log_of(sim, name):
    return [(e["action"], e.get("pod")) for e in kube(sim)["log"] if e["node"] == name]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_os_upgrade_drains_the_node_and_uncordons_it(ansible, sim_factory, tmp_path, backend):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=2,
                               extra=backend_args(backend))
    wait_nodes_ready(sim, 3)
    # Two replicas, at most one down at a time: on one node both may have to leave one by one.
    sim.control(op="workload", namespace="default", name="web", replicas=2, min_available=1)
    wait_ready_pods(sim, "web", 2)
    w1 = node_name(sim, 1)
    on_w1 = pods_on(sim, w1, "web")
    assert on_w1, kube(sim)["pods"]

    # Check mode names the pods that would go and touches nothing; here with the kubeconfig
    # talos_kubeconfig writes (the other runs: the Talos API's kubeconfig, the bundle).
    kubeconfig = tmp_path / "kubeconfig"
    write = [{"hosts": "cp1", "gather_facts": False, "tasks": [{"ferro.talos.talos_kubeconfig": {
        "node": "{{ ansible_host }}", "dest": str(kubeconfig), "secrets_file": "{{ talos_secrets_file }}"}}]}]
    assert ansible.run(yaml.safe_dump(write), inventory=inventory).rc == 0
    run, preview = upgrade_one(ansible, inventory, "w1", {"kubeconfig": str(kubeconfig)}, check=True)
    assert run.rc == 0, run.output
    drain = preview["result"]["drain"]
    assert drain["node_name"] == w1
    evict = {p["pod"] for p in drain["evict"]}
    assert {f"default/{p}" for p in on_w1} <= evict, drain
    assert all(p["controller"].startswith("ReplicaSet/") for p in drain["evict"]), drain
    assert {s["reason"].split()[0] for s in drain["skip"]} == {"DaemonSet"}, drain
    assert "would drain Node" in preview["result"]["msg"]
    assert log_of(sim, w1) == []

    boot_before = sim.status()[1]["boot_id"]
    run, done = upgrade_one(ansible, inventory, "w1", {})
    assert run.rc == 0, run.output
    res = done["result"]
    assert res["changed"] is True
    assert res["drain"]["uncordoned"] is True and res["drain"]["already_cordoned"] is False
    assert {f"default/{p}" for p in on_w1} <= set(res["drain"]["evicted"]), res["drain"]
    node = sim.status()[1]
    assert node["version"] == "v1.13.9" and node["boot_id"] != boot_before

    # What the API server saw, in order: cordon, every eviction, the reboot, the uncordon.
    actions = [a for a, _ in log_of(sim, w1) if a != "eviction_blocked"]
    assert actions[0] == "cordon" and actions[-1] == "uncordon", actions
    assert actions.index("node_down") > max(i for i, a in enumerate(actions) if a == "evict"), actions
    assert actions.count("node_down") == 1
    evicted = {p for a, p in log_of(sim, w1) if a == "evict"}
    assert {f"default/{p}" for p in on_w1} <= evicted
    # The budget held throughout and the pods run elsewhere; the node takes pods again.
    wait_ready_pods(sim, "web", 2)
    w1_node = next(n for n in kube(sim)["nodes"] if n["metadata"]["name"] == w1)
    assert not w1_node["spec"].get("unschedulable"), w1_node

    # Up to date now: no drain, no change.
    run, again = upgrade_one(ansible, inventory, "w1", {})
    assert run.rc == 0 and again["result"]["changed"] is False, run.output
    assert "drain" not in again["result"]
    assert log_of(sim, w1)[-1][0] == "uncordon"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_budget_that_allows_no_disruption_stops_the_upgrade(ansible, sim_factory, tmp_path, backend):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1,
                               extra=backend_args(backend))
    wait_nodes_ready(sim, 2)
    sim.control(op="workload", namespace="default", name="db", replicas=1, min_available=1)
    [db] = wait_ready_pods(sim, "db", 1)
    w1 = node_name(sim, 1)
    assert db["spec"]["nodeName"] == w1
    before = (sim.status()[1]["version"], sim.status()[1]["boot_id"])

    run, failed = upgrade_one(ansible, inventory, "w1", {"drain_timeout": 3}, credentials="secrets")
    assert run.rc != 0 and failed["status"] == "failed", run.output
    msg = failed["result"]["msg"]
    pod = f"default/{db['metadata']['name']}"
    assert f"pod {pod}" in msg and "PodDisruptionBudget default/db" in msg, msg
    assert "The disruption budget db needs 1 healthy pods and has 1 currently" in msg, msg
    assert f"Node {w1} was uncordoned again" in msg and "Talos was not upgraded" in msg, msg
    assert "drain_timeout" in msg
    assert failed["result"]["changed"] is False
    # Talos untouched; Kubernetes as it was.
    assert (sim.status()[1]["version"], sim.status()[1]["boot_id"]) == before
    actions = [a for a, _ in log_of(sim, w1)]
    assert actions[0] == "cordon" and actions[-1] == "uncordon" and "node_down" not in actions, actions
    assert "eviction_blocked" in actions

    # With drain off the node is upgraded without a word to Kubernetes: only its reboot shows.
    seen = len(log_of(sim, w1))
    run, done = upgrade_one(ansible, inventory, "w1", {"drain": False}, credentials="secrets")
    assert run.rc == 0, run.output
    assert "drain" not in done["result"] and sim.status()[1]["version"] == "v1.13.9"
    assert [a for a, _ in log_of(sim, w1)[seen:]] == ["node_down"]
