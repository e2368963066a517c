"""talos_resource_info through ansible-playbook: the disks of a machine in maintenance mode, read
without credentials, pick its install disk as the module's documented example does; a configured
node's volumes; the secrets namespace refused.

Upstream (tag v1.13.9): pkg/machinery/resources/block/disk.go and volume_status.go;
docs/talos-fidelity.md has the rows.
"""

import yaml

from conftest import ROOT
from sim_cluster import converge


def play(*tasks):
    return yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": list(tasks)}])


def documented_examples():
    return yaml.safe_load(yaml.safe_load((ROOT / "plugins/modules/talos_resource_info.yml").read_text())["EXAMPLES"])


def test_the_documented_example_picks_the_install_disk_of_a_machine_in_maintenance(ansible, sim_factory):
    sim = sim_factory(control_planes=1, workers=0)
    read, pick = documented_examples()
    read["ferro.talos.talos_resource_info"]["node"] = sim.nodes[0]["address"]
    read.pop("delegate_to")
    report = {"name": "report", "ansible.builtin.debug": {"var": "talos_cluster_install_disk"}}
    run = ansible.run(play(read, pick, report), check=True)
    assert run.rc == 0, run.output
    assert run.task("report")["result"]["talos_cluster_install_disk"] == "/dev/sdb"
    assert all(n["maintenance"] for n in sim.status())


def test_volumes_of_a_configured_node_and_secrets_refused(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    secrets = converge(ansible, sim, tmp_path)["secrets"]
    node = sim.nodes[0]["address"]
    volumes = {
        "name": "volumes",
        "ferro.talos.talos_resource_info": {
            "node": node,
            "type": "VolumeStatuses.block.talos.dev",
            "id": "EPHEMERAL",
            "secrets_file": str(secrets),
        },
    }
    run = ansible.run(play(volumes))
    assert run.rc == 0, run.output
    (ephemeral,) = run.task("volumes")["result"]["resources"]
    assert ephemeral["spec"]["phase"] == "ready" and ephemeral["spec"]["mountSpec"]["targetPath"] == "/var"

    refused = {
        "name": "secrets",
        "ferro.talos.talos_resource_info": {
            "node": node,
            "namespace": "secrets",
            "type": "OSRootSecrets.secrets.talos.dev",
            "secrets_file": str(secrets),
        },
    }
    run = ansible.run(play(refused))
    assert run.rc != 0
    assert "would land in the task's result" in run.task("secrets")["result"]["msg"]
