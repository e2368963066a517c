"""Reaching nodes through a control plane, for networks where the controller reaches only the control planes.

talos-sim's `firewalled` fault refuses the controller's connections to a node while the other nodes still reach
it. Upstream facts pinned here (tag v1.13.9 of siderolabs/talos): apid forwards a call with `node` metadata only
from a control plane, dialling the target with a client config that trusts only the cluster's OS CA
(internal/app/apid/pkg/provider/provider.go, ClientConfig: WithCACertPEM); a node in maintenance mode serves a
certificate from a self-signed CA of its own (internal/app/machined/pkg/controllers/secrets/maintenance_root.go).
So a node in maintenance mode cannot be reached through an endpoint: its first config goes to it directly.
"""

import yaml

from conftest import ROOT
from sim_cluster import role_variables, site_inventory


def render_and_apply(ansible, sim, tmp_path, applies):
    """Secrets and both configs, then one talos_apply per (name, args) in `applies`: the playbook run."""
    cluster = tmp_path / "cluster"
    secrets = cluster / "secrets.yaml"
    cp, worker = sim.nodes[0]["address"], sim.nodes[1]["address"]
    tasks = [
        {
            "name": f"render {kind}",
            "ferro.talos.talos_config": {
                "secrets_file": str(secrets),
                "generate_secrets": True,
                "machine_type": kind,
                "cluster_name": "routed",
                "cluster_endpoint": f"https://{cp}:6443",
                "dest": str(cluster / f"{kind}.yaml"),
            },
        }
        for kind in ("controlplane", "worker")
    ]
    for name, args in applies:
        kind = "controlplane" if args["node"] == cp else "worker"
        tasks.append(
            {
                "name": name,
                "ferro.talos.talos_apply": {"config": str(cluster / f"{kind}.yaml"), "secrets_file": str(secrets), **args},
                "ignore_errors": True,
            }
        )
    return ansible.run(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))


def test_a_node_in_maintenance_mode_gets_its_first_config_directly_and_later_ones_through_the_endpoint(
    ansible, sim_factory, tmp_path
):
    sim = sim_factory(control_planes=1, workers=1)
    cp, worker = sim.nodes[0]["address"], sim.nodes[1]["address"]
    run = render_and_apply(
        ansible,
        sim,
        tmp_path,
        [
            ("control plane", {"node": cp}),
            ("first", {"node": worker, "endpoint": cp}),
            ("again", {"node": worker, "endpoint": cp}),
        ],
    )
    assert run.rc == 0, run.output
    first = run.task("first")
    assert first["status"] == "ok" and first["result"]["changed"], first
    assert first["result"]["maintenance"] is True
    again = run.task("again")["result"]
    assert again["changed"] is False and not again.get("maintenance"), again
    assert not any(n["maintenance"] for n in sim.status())


def test_a_firewalled_node_in_maintenance_mode_is_explained(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    cp, worker = sim.nodes[0]["address"], sim.nodes[1]["address"]
    sim.control(op="fault", node=1, firewalled=True)
    run = render_and_apply(ansible, sim, tmp_path, [("control plane", {"node": cp}), ("first", {"node": worker, "endpoint": cp, "connect_timeout": 3})])
    assert run.task("control plane")["status"] == "ok"
    result = run.task("first")
    assert result["status"] == "failed", result
    msg = result["result"]["msg"]
    assert msg.startswith(f"node {worker}: "), msg
    assert "the node is in maintenance mode (its first config is applied to the node directly" in msg, msg
    assert f"{worker} does not answer as a node in maintenance mode when reached directly" in msg, msg
    assert sim.status()[1]["maintenance"]


def test_the_roles_route_through_a_control_plane_when_the_workers_are_firewalled(ansible, sim_factory, tmp_path):
    """Converge, then the workers are reachable only from the cluster: a converge, a health gate and a Talos
    upgrade all go through the control plane named in talos_cluster_api_endpoint."""
    sim = sim_factory(control_planes=1, workers=1, version="v1.13.5")
    cp = sim.nodes[0]["address"]
    variables = role_variables(
        tmp_path,
        "routed",
        sim,
        talos_cluster_kubernetes_version="1.36.1",
        talos_cluster_installer_image="ghcr.io/siderolabs/installer:v1.13.5",
        talos_upgrade_etcd_snapshot=False,
    )
    site = (ROOT / "examples" / "site.yml").read_text()
    inventory = site_inventory(sim, tmp_path / "inventory.yml", variables)
    first = ansible.run(site, inventory=inventory)
    assert first.rc == 0, first.output

    sim.control(op="fault", node=1, firewalled=True)
    direct = ansible.run(site, inventory=inventory, check=True)
    assert direct.rc != 0, "a firewalled worker must not answer the controller directly"

    inventory = site_inventory(sim, tmp_path / "inventory.yml", {**variables, "talos_cluster_api_endpoint": cp})
    routed = ansible.run(site, inventory=inventory)
    assert routed.rc == 0, routed.output
    assert routed.recap("w1")["changed"] == 0, routed.output

    newer = {**variables, "talos_cluster_api_endpoint": cp, "talos_cluster_installer_image": "ghcr.io/siderolabs/installer:v1.13.6"}
    inventory = site_inventory(sim, tmp_path / "inventory.yml", newer)
    upgrade = ansible.run(site, inventory=inventory, args=["--tags", "upgrade"])
    assert upgrade.rc == 0, upgrade.output
    assert [n["version"] for n in sim.status()] == ["v1.13.6", "v1.13.6"]
    assert sim.status()[1]["faults"]["firewalled"], "the worker stayed behind its firewall throughout"
