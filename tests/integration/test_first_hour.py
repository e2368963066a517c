"""The mistakes a new user makes in the first hour are caught before any node is touched.

Inventory groups with other names than the role expects (every node would be rendered as a worker), a host in
neither group, and a config that would turn a control plane into a worker.
"""

import shutil
import socket
import threading

import pytest
import yaml

from conftest import ANSIBLE_BIN, ROOT
from sim_cluster import converge, role_variables, site_inventory

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
                "ansible_python_interpreter": str(ANSIBLE_BIN / "python"),
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


def info_failure(ansible, node, extra=""):
    """talos_info on `node`, expected to fail: its result."""
    run = ansible.run(
        f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: info
      ferro.talos.talos_info:
        node: "{node}"
        connect_timeout: 3
{extra}
"""
    )
    assert run.rc != 0, run.output
    return run.task("info")["result"]


def test_a_node_on_another_port_is_named_with_its_port(ansible, sample):
    """Two simulated nodes (or a forwarded port) can share an address: the message keeps the port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = info_failure(ansible, f"127.0.0.1:{port}", f"        secrets_file: {sample.secrets}")
    assert result["msg"].startswith(f"node 127.0.0.1:{port}: "), result["msg"]
    assert "unreachable" in result["msg"]


def test_a_port_that_hangs_up_during_the_handshake_is_not_called_unreachable(ansible, sample):
    """Something answers on the port but closes the connection before TLS completes (another service, a proxy
    without a backend): the node is there, so the message says what happened instead of "unreachable"."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    stop = threading.Event()

    def hang_up():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.recv(16384)
            conn.close()

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    try:
        result = info_failure(ansible, f"127.0.0.1:{port}", f"        secrets_file: {sample.secrets}")
    finally:
        stop.set()
        thread.join()
        listener.close()
    msg = result["msg"]
    assert msg.startswith(f"node 127.0.0.1:{port}: "), msg
    assert "closed the connection during the TLS handshake" in msg, msg
    assert "unreachable" not in msg, msg


def test_a_bundle_of_another_cluster_is_named_as_the_bundle(ansible, sim_factory, tmp_path, sample):
    """Credentials derived from a secrets bundle: a wrong CA points at the bundle, not at a talosconfig."""
    sim = sim_factory(control_planes=1, workers=0)
    converge(ansible, sim, tmp_path, bootstrap=False)
    result = info_failure(ansible, sim.nodes[0]["address"], f"        secrets_file: {sample.other_secrets}")
    msg = result["msg"]
    assert "not signed by the CA in the secrets bundle (a bundle of another cluster?)" in msg, msg
    assert "check that the secrets bundle (secrets_file or secrets) belongs to this cluster" in msg, msg
    assert "talosconfig" not in msg, msg


def test_a_task_sent_to_a_talos_node_over_ssh_says_to_run_it_on_the_controller(ansible, tmp_path):
    """A play over the Talos nodes without `delegate_to: localhost` or `connection: local`: Ansible connects to the
    node over SSH, which Talos does not have. The failure says what to write instead of only "port 22 refused"."""
    if shutil.which("ssh") is None:
        pytest.skip("no ssh client on this machine (.ci/run installs openssh-client)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    inventory = tmp_path / "talos-nodes.ini"
    inventory.write_text(
        "[controlplane]\n"
        f"cp1 ansible_host=127.0.0.1 ansible_port={closed_port} ansible_user=nobody "
        f"ansible_python_interpreter={ANSIBLE_BIN / 'python'}\n"
    )
    playbook = """
- hosts: controlplane
  gather_facts: false
  tasks:
    - name: info
      ferro.talos.talos_info:
        node: "{{ ansible_host }}"
"""
    run = ansible.run(playbook, inventory=inventory, args=["-e", "ansible_ssh_timeout=5"])
    assert run.rc != 0
    result = run.task("info", host="cp1")
    assert result["status"] == "unreachable", result
    msg = result["result"]["msg"]
    assert "Connection refused" in msg or "port 22" in msg or str(closed_port) in msg, msg
    assert "Talos nodes have no SSH" in msg, msg
    assert "add `delegate_to: localhost` to the task, or `connection: local` to the play" in msg, msg


def test_a_node_found_on_its_dhcp_address_gets_its_first_config_there_and_is_then_managed_on_its_static_one(
    ansible, sim_factory, tmp_path
):
    """The DHCP-to-static workflow: a machine boots into maintenance mode on a DHCP lease, its config gives it the
    static address that is its ansible_host. talos-sim's next_address fault moves the node at its install reboot,
    as the static address would."""
    sim = sim_factory(control_planes=1, workers=1)
    dhcp = sim.nodes[1]["address"]
    static = dhcp.rsplit(".", 1)[0] + ".50"
    sim.control(op="fault", node=1, next_address=static)
    variables = role_variables(tmp_path, "dhcp", sim)
    path = site_inventory(sim, tmp_path / "inventory.yml", variables)
    data = yaml.safe_load(path.read_text())
    data["all"]["children"]["worker"]["hosts"]["w1"] = {"ansible_host": static, "talos_cluster_maintenance_address": dhcp}
    path.write_text(yaml.safe_dump(data))
    site = (ROOT / "examples" / "site.yml").read_text()

    first = ansible.run(site, inventory=path)
    assert first.rc == 0, first.output
    worker = sim.status()[1]
    assert worker["address"] == static and not worker["maintenance"], worker
    apply = [r for r in first.tasks("ferro.talos.cluster : Render and apply the node's config") if r["host"] == "w1"]
    assert apply[0]["result"]["changed"] and apply[0]["result"]["maintenance"], apply

    again = ansible.run(site, inventory=path, check=True, diff=True)
    assert again.rc == 0, again.output
    assert again.recap("w1")["changed"] == 0, again.output


def test_a_missing_bundle_without_generate_names_the_role_variable(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    inv = inventory(sim, tmp_path / "inventory.yml", tmp_path, {"controlplane": [0]})
    data = yaml.safe_load(inv.read_text())
    data["all"]["vars"]["talos_cluster_generate_secrets"] = False
    inv.write_text(yaml.safe_dump(data))
    run = ansible.run(SITE_WITH_GROUPS.format(hosts="controlplane"), inventory=inv)
    assert run.rc != 0
    assert "set talos_cluster_generate_secrets: true to create it" in run.output, run.output
    assert "generate_secrets: true to create a new bundle" not in run.output
    assert untouched(sim)
