"""Disaster recovery through ansible-playbook, as talos_etcd_recover's documentation has it: a snapshot
with talos_etcd_snapshot, etcd lost on every control plane, EPHEMERAL wiped on each (talos_reset
wipe: ephemeral, graceful: false), then the recovery on the first; the cluster is healthy again.

Upstream (tag v1.13.9): v1alpha1_server.go EtcdRecover and Bootstrap (recover_etcd), the etcd
service's restore (internal/app/machined/pkg/system/services/etcd.go); docs/talos-fidelity.md has the rows.
"""

import pytest
import yaml

from conftest import ROOT
from sim_cluster import converge
from talos_sim import BACKENDS, backend_args


def documented_examples():
    return yaml.safe_load(yaml.safe_load((ROOT / "plugins/modules/talos_etcd_recover.yml").read_text())["EXAMPLES"])


def play(*tasks):
    return yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": list(tasks)}])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_documented_recovery_brings_etcd_back(ansible, sim_factory, tmp_path, backend):
    sim = sim_factory(control_planes=3, workers=0, extra=backend_args(backend))
    cluster = converge(ansible, sim, tmp_path)
    cps = cluster["cps"]
    secrets = str(cluster["secrets"])
    snapshot = tmp_path / "etcd.snapshot"
    saved = ansible.run(
        play({"name": "snapshot", "ferro.talos.talos_etcd_snapshot": {"node": cps[0], "dest": str(snapshot), "secrets_file": secrets}})
    )
    assert saved.rc == 0, saved.output

    for address in cps:
        sim.control(op="fault", node=address, etcd_down=True)
    wipe, recover = documented_examples()
    for task in (wipe, recover):
        task.pop("delegate_to")
    wipe["loop"] = cps
    wipe["ferro.talos.talos_reset"].update(secrets_file=secrets, timeout=60)
    recover["ferro.talos.talos_etcd_recover"].update(
        node=cps[0], snapshot=str(snapshot), control_plane_nodes=cps, secrets_file=secrets, timeout=60
    )
    run = ansible.run(play(wipe))
    assert run.rc == 0, run.output
    for address in cps:
        sim.control(op="clear_faults", node=address)
    assert not any(n["etcd_member"] for n in sim.status())

    check = ansible.run(play(recover), check=True)
    assert check.rc == 0, check.output
    assert check.task(recover["name"])["result"]["changed"]
    assert not any(n["etcd_member"] for n in sim.status()), "--check recovered etcd"

    done = ansible.run(play(recover))
    assert done.rc == 0, done.output
    assert done.task(recover["name"])["result"]["integrity"] == "checksum verified"
    assert all(n["etcd_member"] for n in sim.status())
    health = ansible.run(
        play(
            {
                "name": "health",
                "ferro.talos.talos_health": {"node": cps[0], "control_plane_nodes": cps, "secrets_file": secrets, "timeout": 60},
            }
        )
    )
    assert health.rc == 0, health.output
    again = ansible.run(play(recover))
    assert again.rc == 0 and not again.task(recover["name"])["result"]["changed"], again.output
