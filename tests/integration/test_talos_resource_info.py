"""talos_resource_info through ansible-playbook: the disks of a machine in maintenance mode, read
without credentials, pick its install disk as the module's documented example does; a configured
node's volumes; a type by its alias from its own namespace; the secrets namespace and a type
upstream marks sensitive refused, nothing of it in the output.

Upstream (tag v1.13.9): pkg/machinery/resources/block/disk.go and volume_status.go;
pkg/machinery/resources/cluster/config.go (DiscoveryConfigs, `Sensitivity: meta.Sensitive`);
pkg/machinery/client/resources.go ResolveResourceKind (aliases); docs/talos-fidelity.md has the rows.
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
    read, pick = documented_examples()[:2]
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


def test_an_alias_reads_from_its_own_namespace_and_a_sensitive_type_is_refused(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    secrets = converge(ansible, sim, tmp_path)["secrets"]
    node = sim.nodes[0]["address"]
    by_alias = documented_examples()[2]
    args = by_alias["ferro.talos.talos_resource_info"]
    args.pop("talosconfig")
    args.update(node=node, secrets_file=str(secrets))
    by_alias.pop("delegate_to")
    by_alias["name"] = "nodename"
    run = ansible.run(play(by_alias))
    assert run.rc == 0, run.output
    (nodename,) = run.task("nodename")["result"]["resources"]
    assert nodename["namespace"] == "k8s" and nodename["type"] == "Nodenames.kubernetes.talos.dev"

    refused = {
        "name": "discovery",
        "ferro.talos.talos_resource_info": {"node": node, "type": "discoveryconfig", "secrets_file": str(secrets)},
    }
    run = ansible.run(play(refused))
    assert run.rc != 0
    result = run.task("discovery")["result"]
    assert 'type "discoveryconfig" is DiscoveryConfigs.cluster.talos.dev, which may hold secrets' in result["msg"], result
    assert "pkg/machinery/resources/cluster/config.go" in result["msg"]
    assert "resources" not in result
    assert "serviceEncryptionKey" not in run.output
