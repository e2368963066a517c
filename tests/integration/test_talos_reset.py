"""talos_reset: each wipe mode does what Talos does with that request, and a cluster can be rebuilt.

Upstream (tag v1.13.9 of siderolabs/talos): internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
(Reset) and internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go (the Reset sequence). talos-sim
follows them (modules/sim/src/reset.rs); docs/talos-fidelity.md has the rows.
"""

import yaml

from secrets_scan import leaks, secret_forms
from sim_cluster import converge


def reset_play(sim, secrets, confirm="reset", nodes=None, **options):
    tasks = [
        {
            "name": "reset",
            "ferro.talos.talos_reset": {
                "node": n["address"],
                "confirm": confirm,
                "graceful": False,
                "secrets_file": str(secrets),
                "timeout": 60,
                **options,
            },
        }
        for n in (nodes or sim.nodes)
    ]
    return yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}])


def test_reset_every_node_to_maintenance_then_rebuild(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    secrets = converge(ansible, sim, tmp_path)["secrets"]
    assert all(not n["maintenance"] and n["installed"] for n in sim.status())

    check = ansible.run(reset_play(sim, secrets), check=True)
    assert check.rc == 0, check.output
    for r in check.tasks("reset"):
        assert r["result"]["changed"]
        assert r["result"]["wiped"] == ["STATE", "EPHEMERAL"]
        assert r["result"]["needs_installation_media"] is False
        assert "reboot it into maintenance mode" in r["result"]["msg"]
    assert all(not n["maintenance"] for n in sim.status()), "check mode must not reset"

    run = ansible.run(reset_play(sim, secrets))
    assert run.rc == 0, run.output
    assert all(r["result"]["changed"] for r in run.tasks("reset"))
    # STATE and EPHEMERAL are gone, Talos stays installed: the nodes boot from disk into maintenance mode.
    assert all(n["maintenance"] and n["installed"] for n in sim.status())
    assert leaks(run.output, secret_forms(secrets.read_text())) == []

    again = ansible.run(reset_play(sim, secrets))
    assert again.rc == 0 and not any(r["result"]["changed"] for r in again.tasks("reset"))

    # From nothing again, with the same bundle. Installed already, so no install reboot this time.
    boots = {n["index"]: n["boot_id"] for n in sim.status()}
    converge(ansible, sim, tmp_path)
    nodes = sim.status()
    assert all(not n["maintenance"] for n in nodes) and sum(n["etcd_member"] for n in nodes) == 1
    assert {n["index"]: n["boot_id"] for n in nodes} == boots


def test_reset_needs_confirmation(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    secrets = converge(ansible, sim, tmp_path)["secrets"]
    run = ansible.run(reset_play(sim, secrets, confirm="yes"))
    assert run.rc != 0
    assert 'confirm must be "reset"' in run.task("reset")["result"]["msg"]
    assert all(not n["maintenance"] for n in sim.status())


def test_a_full_system_disk_wipe_is_confirmed_separately_and_needs_installation_media(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    secrets = converge(ansible, sim, tmp_path, bootstrap=False)["secrets"]

    # The word that confirms ordinary resets does not wipe a bootloader.
    refused = ansible.run(reset_play(sim, secrets, wipe="system_disk"))
    assert refused.rc != 0
    msg = refused.task("reset")["result"]["msg"]
    assert 'confirm must be "wipe-system-disk" for wipe=system_disk' in msg and "installation media" in msg
    assert sim.status()[0]["installed"]

    run = ansible.run(reset_play(sim, secrets, confirm="wipe-system-disk", wipe="system_disk"))
    assert run.rc == 0, run.output
    result = run.task("reset")["result"]
    assert result["changed"] and result["needs_installation_media"] is True
    assert result["wiped"] == ["the whole system disk"]
    assert result["state"] == "it no longer answers"
    assert "boots again only from installation media" in run.output  # the warning, in the normal output
    node = sim.status()[0]
    assert node["unbootable"] and not node["installed"] and not node["up"]

    # With installation media it is a new machine: maintenance mode, nothing installed.
    assert sim.control(op="boot_media", node=0, attached=True)["ok"]
    assert sim.control(op="power_on", node=0)["ok"]
    node = sim.status()[0]
    assert node["maintenance"] and not node["installed"]


def test_user_disks_keep_the_config_and_maintenance_nodes_refuse_other_wipes(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    secrets = converge(ansible, sim, tmp_path)["secrets"]
    before = sim.status()[0]

    run = ansible.run(reset_play(sim, secrets, wipe="user_disks", user_disks=["/dev/sdb"]))
    assert run.rc == 0, run.output
    result = run.task("reset")["result"]
    assert result["wiped"] == ["/dev/sdb"] and result["state"] == "it is back with its config"
    after = sim.status()[0]
    assert after["boot_id"] != before["boot_id"]
    assert not after["maintenance"] and after["etcd_member"], "config and etcd survive a user disk wipe"

    # Talos wipes nothing without disks: the module says so instead of sending an empty request.
    run = ansible.run(reset_play(sim, secrets, wipe="user_disks"))
    assert run.rc != 0 and "user_disks must name the disks" in run.task("reset")["result"]["msg"]

    # In maintenance mode Talos refuses Reset (admin only): wiping disks there fails with what to do.
    assert ansible.run(reset_play(sim, secrets)).rc == 0
    run = ansible.run(reset_play(sim, secrets, wipe="user_disks", user_disks=["/dev/sdb"]))
    assert run.rc != 0
    msg = run.task("reset")["result"]["msg"]
    assert "is in maintenance mode, where Talos refuses Reset" in msg and "/dev/sdb" in msg


def test_reboot_false_powers_the_node_off(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    secrets = converge(ansible, sim, tmp_path, bootstrap=False)["secrets"]
    run = ansible.run(reset_play(sim, secrets, reboot=False))
    assert run.rc == 0, run.output
    result = run.task("reset")["result"]
    assert result["state"] == "it no longer answers" and "power it off" not in result["msg"]
    node = sim.status()[0]
    assert not node["up"] and node["stage"] == "shutting down" and node["installed"]
    assert sim.control(op="power_on", node=0)["ok"]
    assert sim.status()[0]["maintenance"]
