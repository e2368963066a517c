"""The mistakes a new user makes in the first hour are caught before any node is touched.

Inventory groups with other names than the role expects (every node would be rendered as a worker), a host in
neither group, and a config that would turn a control plane into a worker.
"""

import yaml

from conftest import ROOT
from sim_cluster import converge

# A play over the user's own group names, as someone who named the groups differently writes it.
SITE_WITH_GROUPS = """
- name: Converge
  hosts: {hosts}
  gather_facts: false
  serial: 1
  roles:
    - role: ferro.talos.cluster
"""


def inventory(sim, path, tmp_path, groups):
    """An inventory whose groups are `groups`: {group name: [node indexes]}."""
    data = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": str(ROOT / ".venv" / "bin" / "python"),
                "talos_cluster_name": "first-hour",
                "talos_cluster_endpoint": f"https://{sim.nodes[0]['address']}:6443",
                "talos_cluster_secrets_file": str(tmp_path / "cluster" / "secrets.yaml"),
                "talos_cluster_talosconfig": str(tmp_path / "cluster" / "talosconfig"),
                "talos_cluster_kubeconfig": str(tmp_path / "cluster" / "kubeconfig"),
                "talos_cluster_generate_secrets": True,
                "talos_cluster_health_timeout": 30,
            },
            "children": {
                group: {"hosts": {f"node{i}": {"ansible_host": sim.nodes[i]["address"]} for i in indexes}}
                for group, indexes in groups.items()
            },
        }
    }
    path.write_text(yaml.safe_dump(data))
    return path


def untouched(sim):
    return all(n["maintenance"] for n in sim.status())


def test_misnamed_groups_stop_the_run_before_any_node(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    inv = inventory(sim, tmp_path / "inventory.yml", tmp_path, {"controlplanes": [0], "workers": [1]})
    run = ansible.run(SITE_WITH_GROUPS.format(hosts="controlplanes:workers"), inventory=inv)
    assert run.rc != 0
    out = run.output
    assert "the inventory has no control plane: group 'controlplane' is missing or empty" in out, out
    assert "groups found: controlplanes, workers" in out
    assert "set talos_cluster_controlplane_group" in out
    assert untouched(sim), "no node may get a config"
    assert not (tmp_path / "cluster" / "talosconfig").exists()


def test_a_host_in_neither_group_stops_the_run(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    inv = inventory(sim, tmp_path / "inventory.yml", tmp_path, {"controlplane": [0], "storage": [1]})
    run = ansible.run(SITE_WITH_GROUPS.format(hosts="controlplane:storage"), inventory=inv)
    assert run.rc != 0
    assert "node1 is in neither 'controlplane' nor 'worker' (its groups: storage)" in run.output, run.output
    assert untouched(sim)


def test_a_config_that_changes_the_machine_type_is_refused(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    cluster = converge(ansible, sim, tmp_path, bootstrap=False)
    cp = cluster["cps"][0]
    worker_config = tmp_path / "worker.yaml"
    tasks = [
        {
            "name": "render a worker config",
            "ferro.talos.talos_config": {
                "secrets_file": str(cluster["secrets"]),
                "machine_type": "worker",
                "cluster_name": "gate",
                "cluster_endpoint": f"https://{cp}:6443",
                "dest": str(worker_config),
            },
        },
        {
            "name": "apply",
            "ferro.talos.talos_apply": {"node": cp, "config": str(worker_config), "secrets_file": str(cluster["secrets"])},
        },
    ]
    render = yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks[:1]}])
    assert ansible.run(render).rc == 0
    playbook = yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks[1:]}])
    before = sim.status()[0]
    for check in (True, False):
        run = ansible.run(playbook, check=check)
        assert run.rc != 0
        result = run.task("apply")["result"]
        assert result["msg"].startswith(f"node {cp} runs as a controlplane, and this config makes it a worker"), result
        assert "allow_machine_type_change" in result["msg"]
        assert result["live_machine_type"] == "controlplane" and result["machine_type"] == "worker"
    after = sim.status()[0]
    assert after["machine_type"] == "controlplane" and after["boot_id"] == before["boot_id"]


def test_group_defaults_for_the_connection_options_leave_talos_config_alone(ansible, sample, tmp_path):
    """module_defaults for group/ferro.talos.talos set the connection options; talos_config, whose talosconfig option
    is a file it writes, is not in the group, so a render-only task neither fails on them nor writes a talosconfig."""
    talosconfig = tmp_path / "talosconfig"
    dest = tmp_path / "worker.yaml"
    playbook = f"""
- hosts: localhost
  gather_facts: false
  module_defaults:
    group/ferro.talos.talos:
      talosconfig: {talosconfig}
      connect_timeout: 5
  tasks:
    - name: render
      ferro.talos.talos_config:
        secrets_file: {sample.secrets}
        machine_type: worker
        cluster_name: demo
        cluster_endpoint: 10.5.0.10
        dest: {dest}
"""
    run = ansible.run(playbook)
    assert run.rc == 0, run.output
    assert dest.exists()
    assert not talosconfig.exists(), "a render-only task must not write a talosconfig"
