"""A whole cluster converged by examples/site.yml against talos-sim, the way a user runs it."""

import os
import shutil

import yaml

from conftest import ROOT
from secrets_scan import leaks, secret_forms
from sim_cluster import site_inventory

SITE = ROOT / "examples" / "site.yml"
# Task names as the results report them: examples/site.yml runs the ferro.talos.cluster role.
APPLY = "ferro.talos.cluster : Render and apply the node's config"
BOOTSTRAP = "ferro.talos.cluster : Bootstrap etcd once, on the first control plane"


def inventory_for(sim, tmp_path, extra_vars=None):
    return site_inventory(
        sim,
        tmp_path / "inventory.yml",
        {
            "talos_cluster_name": "e2e",
            "talos_cluster_endpoint": f"https://{sim.nodes[0]['address']}:6443",
            "talos_cluster_talos_version": "v1.13",
            "talos_cluster_kubernetes_version": "1.36.1",
            "talos_cluster_secrets_file": str(tmp_path / "cluster" / "secrets.yaml"),
            "talos_cluster_talosconfig": str(tmp_path / "cluster" / "talosconfig"),
            "talos_cluster_kubeconfig": str(tmp_path / "cluster" / "kubeconfig"),
            "talos_cluster_generate_secrets": True,
            "talos_cluster_health_timeout": 60,
            **(extra_vars or {}),
        },
    )


def site(ansible, inventory, **kwargs):
    return ansible.run(SITE.read_text(), inventory=inventory, **kwargs)


def changed_tasks(run):
    return [(r["task"], r["host"]) for r in run.results if r["result"].get("changed")]


def test_fresh_cluster_converges_then_stays_converged(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=3, workers=1)
    inventory = inventory_for(sim, tmp_path)

    # Check mode on a cluster in maintenance mode: nothing is touched, nothing fails.
    check = site(ansible, inventory, check=True, diff=True)
    assert check.rc == 0, check.output
    assert all(n["maintenance"] for n in sim.status())
    assert not (tmp_path / "cluster" / "secrets.yaml").exists()

    first = site(ansible, inventory)
    assert first.rc == 0, first.output
    nodes = sim.status()
    assert all(not n["maintenance"] for n in nodes), nodes
    assert sum(n["etcd_member"] for n in nodes) == 3
    applied = [r for r in first.results if r["task"] == APPLY]
    assert len(applied) == 4 and all(r["result"]["changed"] for r in applied)
    boot = first.task(BOOTSTRAP, host="cp1")["result"]
    assert boot["changed"] is True
    assert os.stat(tmp_path / "cluster" / "talosconfig").st_mode & 0o777 == 0o600

    second = site(ansible, inventory)
    assert second.rc == 0, second.output
    assert changed_tasks(second) == []

    check_again = site(ansible, inventory, check=True, diff=True)
    assert check_again.rc == 0, check_again.output
    assert changed_tasks(check_again) == []
    forms = secret_forms((tmp_path / "cluster" / "secrets.yaml").read_text())
    for run in (first, second, check_again):
        assert leaks(run.output, forms) == []


def test_check_before_any_talosconfig_on_an_existing_cluster(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=3, workers=1)
    inventory = inventory_for(sim, tmp_path)
    assert site(ansible, inventory).rc == 0
    # The operator's checkout has the secrets (e.g. from the vault) but no talosconfig yet.
    os.remove(tmp_path / "cluster" / "talosconfig")
    run = site(ansible, inventory, check=True, diff=True)
    assert run.rc == 0, run.output
    boot = run.task(BOOTSTRAP, host="cp1")["result"]
    assert boot["changed"] is False and boot["bootstrap_needed"] is False
    assert "already bootstrapped" in boot["msg"]
    assert not (tmp_path / "cluster" / "talosconfig").exists()


def test_changed_patch_shows_the_key_path_and_no_secret(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    patches = [{"cluster": {"extraManifests": ["https://example.com/approver.yaml"]}}]
    inventory = inventory_for(sim, tmp_path, {"talos_cluster_patches": patches})
    assert site(ansible, inventory).rc == 0
    # Dropping the manifest and labelling the nodes: the diff names exactly those paths.
    new = [{"machine": {"nodeLabels": {"tier": "gold"}}}]
    inventory = inventory_for(sim, tmp_path, {"talos_cluster_patches": new})
    run = site(ansible, inventory, check=True, diff=True, verbosity=3)
    assert run.rc == 0, run.output
    cp = run.task(APPLY, host="cp1")["result"]
    assert cp["changed"] is True
    assert set(cp["changed_paths"]) == {"cluster.extraManifests", "machine.nodeLabels.tier"}
    assert any(r["path"] == "cluster.extraManifests" for r in cp["risky_changes"])
    assert "tier: gold" in run.stdout
    forms = secret_forms((tmp_path / "cluster" / "secrets.yaml").read_text())
    assert leaks(run.output, forms) == []
    assert leaks(repr(run.results), forms) == []

    # The dropped manifest is said in the normal output, without -v (the user story's operator found it only
    # by reading key names in a diff), and a cautious run stops on it before anything is applied.
    plain = site(ansible, inventory, check=True)
    assert "risky change at cluster.extraManifests" in plain.output, plain.output
    cautious = inventory_for(sim, tmp_path, {"talos_cluster_patches": new, "talos_cluster_refuse_risky_changes": True})
    before = {n["index"]: n["boot_id"] for n in sim.status()}
    refused = site(ansible, cautious)
    assert refused.rc != 0
    msg = refused.task(APPLY, host="cp1")["result"]["msg"]
    assert "refuse_risky_changes is set" in msg and "cluster.extraManifests" in msg and "nothing was applied" in msg
    assert {n["index"]: n["boot_id"] for n in sim.status()} == before
    inventory = inventory_for(sim, tmp_path, {"talos_cluster_patches": new})  # the same file, not cautious again
    still = site(ansible, inventory, check=True)
    assert set(still.task(APPLY, host="cp1")["result"]["changed_paths"]) == {
        "cluster.extraManifests",
        "machine.nodeLabels.tier",
    }, "the refused change must not have been applied"


def test_node_back_on_another_address_fails_naming_both(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    inventory = inventory_for(sim, tmp_path)
    assert site(ansible, inventory).rc == 0
    worker = [n for n in sim.nodes if n["role"] == "worker"][0]
    moved_to = worker["address"].rsplit(".", 1)[0] + ".77"
    sim.control(op="fault", node=worker["index"], next_address=moved_to)
    # A change that needs a reboot (machine.disks) makes the node reboot into the new address.
    patches = [{"machine": {"disks": [{"device": "/dev/sdb", "partitions": [{"mountpoint": "/var/mnt/d"}]}]}}]
    inventory = inventory_for(sim, tmp_path, {"talos_cluster_patches": patches, "talos_cluster_apply_timeout": 10})
    run = site(ansible, inventory)
    assert run.rc != 0
    failed = [r for r in run.results if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["host"] == "w1", run.output
    msg = failed[0]["result"]["msg"]
    assert worker["address"] in msg and "another address" in msg
