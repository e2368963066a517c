"""talos_reset: a converged node goes back to maintenance mode, and a cluster can be rebuilt."""

import yaml

from secrets_scan import leaks, secret_forms
from sim_cluster import converge


def reset_play(sim, secrets, confirm="reset"):
    tasks = [
        {
            "name": "reset",
            "ferro.talos.talos_reset": {
                "node": n["address"],
                "confirm": confirm,
                "graceful": False,
                "secrets_file": str(secrets),
                "timeout": 60,
            },
        }
        for n in sim.nodes
    ]
    return yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}])


def test_reset_every_node_then_rebuild(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    secrets = converge(ansible, sim, tmp_path)["secrets"]
    assert all(not n["maintenance"] for n in sim.status())

    check = ansible.run(reset_play(sim, secrets), check=True)
    assert check.rc == 0, check.output
    assert all(r["result"]["changed"] for r in check.tasks("reset"))
    assert all(not n["maintenance"] for n in sim.status()), "check mode must not reset"

    run = ansible.run(reset_play(sim, secrets))
    assert run.rc == 0, run.output
    assert all(r["result"]["changed"] for r in run.tasks("reset"))
    assert all(n["maintenance"] for n in sim.status())
    assert leaks(run.output, secret_forms(secrets.read_text())) == []

    again = ansible.run(reset_play(sim, secrets))
    assert again.rc == 0 and not any(r["result"]["changed"] for r in again.tasks("reset"))

    # From nothing again, with the same bundle.
    converge(ansible, sim, tmp_path)
    nodes = sim.status()
    assert all(not n["maintenance"] for n in nodes) and sum(n["etcd_member"] for n in nodes) == 1


def test_reset_needs_confirmation(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    secrets = converge(ansible, sim, tmp_path)["secrets"]
    run = ansible.run(reset_play(sim, secrets, confirm="yes"))
    assert run.rc != 0
    assert 'confirm must be "reset"' in run.task("reset")["result"]["msg"]
    assert all(not n["maintenance"] for n in sim.status())
