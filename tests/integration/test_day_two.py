"""Day two through ansible-playbook: scaling down by a control plane and a worker, removing a dead
etcd member, rebooting and shutting nodes down.

Upstream (tag v1.13.9 of siderolabs/talos): the Reset sequence cordons and drains, leaves etcd and
aborts when leaving fails (internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go);
EtcdLeaveCluster and EtcdRemoveMemberByID (internal/app/machined/internal/server/v1alpha1/
v1alpha1_server.go, internal/pkg/etcd/etcd.go) within etcd's strict reconfiguration checks; a Node
left behind fails the health check (pkg/cluster/check/kubernetes.go); Reboot and Shutdown answer at
once and run their sequences. docs/talos-fidelity.md has the rows. The Nodes are read back with the
official Python Kubernetes client, not the collection's own.
"""

import time

import pytest
import yaml

from talos_sim import BACKENDS, backend_args
from test_talos_upgrade import converged

kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes package is in tools/requirements.txt")


def play(*tasks, hosts="localhost"):
    return yaml.safe_dump([{"hosts": hosts, "gather_facts": False, "tasks": list(tasks)}])


def state(sim):
    """What a task could change on each node."""
    return [(n["address"], n["maintenance"], n["up"], n["etcd_member"], n["boot_id"]) for n in sim.status()]


def kube_nodes(ansible, inventory, tmp_path):
    """The Node names, through the official client with the admin kubeconfig talos_kubeconfig writes."""
    dest = tmp_path / "kubeconfig"
    run = ansible.run(
        play(
            {
                "name": "kubeconfig",
                "ferro.talos.talos_kubeconfig": {
                    "node": "{{ hostvars['cp1'].ansible_host }}",
                    "dest": str(dest),
                    "secrets_file": "{{ talos_secrets_file }}",
                },
            }
        ),
        inventory=inventory,
    )
    assert run.rc == 0, run.output
    client = kubernetes.config.new_client_from_config(config_file=str(dest))
    return sorted(n.metadata.name for n in kubernetes.client.CoreV1Api(client).list_node().items)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale_down_by_a_control_plane_and_a_worker(ansible, sim_factory, tmp_path, backend):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=3, workers=2, extra=backend_args(backend))
    names = {n["address"]: n["hostname"].lower() for n in sim.status()}
    deadline = time.time() + 10
    while len(kube_nodes(ansible, inventory, tmp_path)) < 5:
        assert time.time() < deadline, "the five Nodes did not register"
        time.sleep(0.5)
    leaving = ["cp3", "w2"]
    remove = play(
        *[
            {
                "name": f"remove {host}",
                "ferro.talos.talos_reset": {
                    "node": f"{{{{ hostvars['{host}'].ansible_host }}}}",
                    "confirm": "reset",
                    "delete_kubernetes_node": True,
                    "secrets_file": "{{ talos_secrets_file }}",
                    "timeout": 60,
                },
            }
            for host in leaving
        ]
    )
    before = state(sim)
    check = ansible.run(remove, inventory=inventory, check=True)
    assert check.rc == 0, check.output
    for host in leaving:
        result = check.task(f"remove {host}")["result"]
        assert result["changed"] and result["kubernetes_node"]["existed"], result
        assert "then delete its Kubernetes Node" in result["msg"], result["msg"]
    assert state(sim) == before, "--check changed the cluster"

    run = ansible.run(remove, inventory=inventory)
    assert run.rc == 0, run.output
    gone = {}
    for host in leaving:
        result = run.task(f"remove {host}")["result"]
        assert result["kubernetes_node"]["deleted"], result
        gone[result["node"]] = result["kubernetes_node"]["name"]
    status = {n["address"]: n for n in sim.status()}
    for address in gone:
        assert status[address]["maintenance"] and not status[address]["etcd_member"]
    assert sum(n["etcd_member"] for n in sim.status()) == 2
    assert kube_nodes(ansible, inventory, tmp_path) == sorted(
        name for address, name in names.items() if address not in gone
    )

    stay_cps = [n["address"] for n in sim.nodes if n["role"] == "controlplane" and n["address"] not in gone]
    stay_workers = [n["address"] for n in sim.nodes if n["role"] == "worker" and n["address"] not in gone]
    health = ansible.run(
        play(
            {
                "name": "health",
                "ferro.talos.talos_health": {
                    "node": stay_cps[0],
                    "control_plane_nodes": stay_cps,
                    "worker_nodes": stay_workers,
                    "secrets_file": "{{ talos_secrets_file }}",
                    "timeout": 60,
                },
            }
        ),
        inventory=inventory,
    )
    assert health.rc == 0, health.output

    again = ansible.run(remove, inventory=inventory)
    assert again.rc == 0, again.output
    assert not any(again.task(f"remove {host}")["result"]["changed"] for host in leaving)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dead_control_plane_leaves_etcd_by_id_and_a_healthy_one_would_leave_itself(ansible, sim_factory, tmp_path, backend):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=3, workers=0, extra=backend_args(backend))
    cp = [n["address"] for n in sim.nodes]
    secrets = {"secrets_file": "{{ talos_secrets_file }}"}
    # Real etcd takes the joining control planes one learner at a time (the model: all at once), so
    # the cluster is healthy, every control plane a voting member, only a moment after the converge.
    healthy = play({"name": "health", "ferro.talos.talos_health": {"node": cp[0], "control_plane_nodes": cp, "timeout": 60, **secrets}})
    run = ansible.run(healthy, inventory=inventory)
    assert run.rc == 0, run.output

    # cp3 goes down for good: powered off without a drain.
    off = play({"name": "off", "ferro.talos.talos_shutdown": {"node": cp[2], "force": True, "timeout": 30, **secrets}})
    run = ansible.run(off, inventory=inventory)
    assert run.rc == 0, run.output
    assert run.task("off")["result"]["answered"] and not sim.status()[2]["up"]
    again = ansible.run(off, inventory=inventory)
    assert again.rc == 0, again.output
    result = again.task("off")["result"]
    assert not result["changed"] and not result["answered"], result
    assert any("nothing was sent" in w for w in result.get("warnings", [])), result

    remove_dead = play({"name": "member", "ferro.talos.talos_etcd_member": {"node": cp[0], "member": cp[2], **secrets}})
    check = ansible.run(remove_dead, inventory=inventory, check=True)
    assert check.rc == 0, check.output
    result = check.task("member")["result"]
    assert result["changed"] and result["method"] == "remove_by_id", result
    assert sim.status()[2]["etcd_member"], "--check removed the member"
    run = ansible.run(remove_dead, inventory=inventory)
    assert run.rc == 0, run.output
    assert len(run.task("member")["result"]["members"]) == 2
    assert [n["etcd_member"] for n in sim.status()] == [True, True, False]
    again = ansible.run(remove_dead, inventory=inventory)
    assert not again.task("member")["result"]["changed"], again.output

    # A reboot brings cp1 back on a new boot; cp2, healthy, would leave etcd from its own node.
    before = sim.status()[0]["boot_id"]
    reboot = ansible.run(play({"name": "reboot", "ferro.talos.talos_reboot": {"node": cp[0], "timeout": 60, **secrets}}), inventory=inventory)
    assert reboot.rc == 0, reboot.output
    result = reboot.task("reboot")["result"]
    assert result["boot_id_before"] == before and result["boot_id"] == sim.status()[0]["boot_id"] != before, result
    # A reboot returns once the node answers; its etcd member starts a moment later (a real etcd
    # process takes its time), and until then the guard calls it unhealthy: asked again, as a playbook
    # would with `until`.
    leave = play({"name": "member", "ferro.talos.talos_etcd_member": {"node": cp[0], "member": cp[1], **secrets},
                  "register": "left", "until": "left is succeeded", "retries": 15, "delay": 2})
    check = ansible.run(leave, inventory=inventory, check=True)
    assert check.rc == 0, check.output
    assert check.task("member")["result"]["method"] == "leave"


def test_the_readme_scale_down_runs_as_written(ansible, sim_factory, tmp_path):
    """README.md's scale_down.yml, with its addresses mapped onto a simulated 3+1 cluster."""
    from sim_cluster import converge
    from test_readme import Project, readme_files, to_sim_addresses

    sim = sim_factory(control_planes=3, workers=1)
    cluster = converge(ansible, sim, tmp_path, cluster_name="prod")
    project = Project(tmp_path / "project", ansible)
    project.write("secrets/prod.yaml", cluster["secrets"].read_text())
    project.write("scale_down.yml", to_sim_addresses(readme_files()["scale_down.yml"], sim))

    check = project.run("ansible-playbook scale_down.yml --check")
    assert check.rc == 0, check.output
    assert [n["maintenance"] for n in sim.status()] == [False] * 4, "--check reset a node"
    run = project.run("ansible-playbook scale_down.yml")
    assert run.rc == 0, run.output
    assert [(n["maintenance"], n["etcd_member"]) for n in sim.status()] == [
        (False, True),
        (False, True),
        (True, False),
        (True, False),
    ]
    again = project.run("ansible-playbook scale_down.yml")
    assert again.rc == 0 and again.recap()["changed"] == 0, again.output


@pytest.mark.parametrize("backend", BACKENDS)
def test_with_etcd_quorum_lost_the_modules_refuse_and_change_nothing(ansible, sim_factory, tmp_path, backend):
    """Two of three members stopped: etcd has no quorum (with the real backend, two real etcd processes
    are stopped). Neither a graceful reset of the last live control plane nor the removal of a stopped
    member may go ahead; each fails naming etcd, and no node changes."""
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=3, workers=0, healthy=True,
                               extra=backend_args(backend))
    cp = [n["address"] for n in sim.nodes]
    secrets = {"secrets_file": "{{ talos_secrets_file }}"}
    for index in (1, 2):
        sim.control(op="fault", node=index, etcd_down=True)
    before = state(sim)
    reset = play({"name": "reset", "ferro.talos.talos_reset": {"node": cp[0], "confirm": "reset", "timeout": 60, **secrets}})
    remove = play({"name": "member", "ferro.talos.talos_etcd_member": {"node": cp[0], "member": cp[2], **secrets}})
    for task, name in ((reset, "reset"), (remove, "member")):
        run = ansible.run(task, inventory=inventory)
        assert run.rc != 0, run.output
        msg = run.task(name)["result"]["msg"]
        # Either the module's own verdict from each member's health, or, once etcd noticed (real
        # etcd: about an election timeout), etcd's refusal of what Talos asks with
        # clientv3.WithRequireLeader (v1alpha1_server.go @ v1.14.1; interceptor.go @ v3.7.1), the
        # member list too: both say the quorum is the matter, neither waits out a deadline.
        assert "quorum" in msg, msg
        assert state(sim) == before, f"{name} changed the cluster: {msg}"
