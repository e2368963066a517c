"""talos_upgrade through ansible-playbook against talos-sim: version direction, check mode, rolling
upgrades, refusals that touch nothing, a node that never comes back, and malformed input.

Each cluster is first configured with talos_config, talos_apply and talos_bootstrap (CONVERGE)."""

import time

import pytest
import yaml

from conftest import ANSIBLE_BIN, ROOT
from secrets_scan import leaks, secret_forms
from talos_sim import BACKENDS, backend_args

GHCR = "ghcr.io/siderolabs/installer"
SCHEMATIC = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
# Talos 1.14's stock installer: the Image Factory's of the empty schematic (pkg/images/images.go @ v1.14.1).
FACTORY_1_14 = "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
TASK = "Upgrade the node"


CONVERGE = """
- name: Secrets and talosconfig
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Create the secrets bundle and the talosconfig
      ferro.talos.talos_config:
        secrets_file: "{{ talos_secrets_file }}"
        generate_secrets: true
        cluster_name: "{{ talos_cluster_name }}"
        talosconfig: "{{ talos_talosconfig }}"
        endpoints: "{{ groups['controlplane'] | map('extract', hostvars, 'ansible_host') | list }}"

- name: Configure the nodes one at a time
  hosts: controlplane:worker
  gather_facts: false
  serial: 1
  order: inventory
  tasks:
    - name: Render the config
      ferro.talos.talos_config:
        secrets_file: "{{ talos_secrets_file }}"
        machine_type: "{{ 'controlplane' if 'controlplane' in group_names else 'worker' }}"
        cluster_name: "{{ talos_cluster_name }}"
        cluster_endpoint: "{{ talos_cluster_endpoint }}"
        # The release the nodes were installed from: its own installer goes into the configs.
        talos_version: v1.13.6
        kubernetes_version: "{{ talos_kubernetes_version }}"
        dest: "{{ talos_render_dir }}/{{ inventory_hostname }}.yaml"
    - name: Apply the config
      ferro.talos.talos_apply:
        node: "{{ ansible_host }}"
        config: "{{ talos_render_dir }}/{{ inventory_hostname }}.yaml"
        secrets_file: "{{ talos_secrets_file }}"
    - name: Bootstrap etcd on the first control plane
      ferro.talos.talos_bootstrap:
        node: "{{ ansible_host }}"
        control_plane_nodes: "{{ groups['controlplane'] | map('extract', hostvars, 'ansible_host') | list }}"
        secrets_file: "{{ talos_secrets_file }}"
      when: inventory_hostname == groups['controlplane'][0]
"""


def inventory_for(sim, tmp_path, kubernetes="1.36.1"):
    cps = [n for n in sim.nodes if n["role"] == "controlplane"]
    workers = [n for n in sim.nodes if n["role"] == "worker"]
    (tmp_path / "rendered").mkdir(exist_ok=True)
    data = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": str(ANSIBLE_BIN / "python"),
                "talos_cluster_name": "upgrade",
                "talos_cluster_endpoint": f"https://{cps[0]['address']}:6443",
                "talos_kubernetes_version": kubernetes,
                "talos_secrets_file": str(tmp_path / "cluster" / "secrets.yaml"),
                "talos_talosconfig": str(tmp_path / "cluster" / "talosconfig"),
                "talos_render_dir": str(tmp_path / "rendered"),
            },
            "hosts": {"localhost": None},
            "children": {
                "controlplane": {"hosts": {f"cp{i + 1}": {"ansible_host": n["address"]} for i, n in enumerate(cps)}},
                "worker": {"hosts": {f"w{i + 1}": {"ansible_host": n["address"]} for i, n in enumerate(workers)}},
            },
        }
    }
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(data))
    return path


HEALTHY = """
- name: Wait until every control plane is a voting etcd member
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Health
      ferro.talos.talos_health:
        node: "{{ hostvars[groups['controlplane'][0]].ansible_host }}"
        control_plane_nodes: "{{ groups['controlplane'] | map('extract', hostvars, 'ansible_host') | list }}"
        secrets_file: "{{ talos_secrets_file }}"
        timeout: 60
"""


def converged(ansible, sim_factory, tmp_path, kubernetes="1.36.1", healthy=False, **sim_kwargs):
    """A talos-sim cluster configured and bootstrapped with talos_config, talos_apply and
    talos_bootstrap; returns (sim, inventory). With `healthy`, also waits for talos_health: real
    etcd (`--backend real`) takes the joining control planes one learner at a time, so right after
    the bootstrap not every one is a voting member yet."""
    sim = sim_factory(**sim_kwargs)
    inventory = inventory_for(sim, tmp_path, kubernetes)
    run = ansible.run(CONVERGE, inventory=inventory)
    assert run.rc == 0, run.output
    assert all(not n["maintenance"] for n in sim.status())
    if healthy:
        run = ansible.run(HEALTHY, inventory=inventory)
        assert run.rc == 0, run.output
    return sim, inventory


def upgrade(ansible, inventory, args, check=False, serial=None, credentials="talosconfig"):
    """Runs talos_upgrade on every node (control planes first), with `args` added to each task."""
    task_args = {"node": "{{ ansible_host }}", "timeout": 60, **args}
    if credentials == "talosconfig":
        task_args["talosconfig"] = "{{ talos_talosconfig }}"
    elif credentials == "secrets":
        task_args["secrets_file"] = "{{ talos_secrets_file }}"
    play = {
        "hosts": "controlplane:worker",
        "gather_facts": False,
        "order": "inventory",
        "tasks": [{"name": TASK, "ferro.talos.talos_upgrade": task_args}],
    }
    if serial:
        play["serial"] = serial
    return ansible.run(yaml.safe_dump([play]), inventory=inventory, check=check)


def results(run):
    return {r["host"]: r for r in run.tasks(TASK)}


def snapshot(sim):
    return [(n["version"], n["boot_id"]) for n in sim.status()]


def test_direction_comes_from_the_nodes(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1)

    same = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6"}, check=True)
    assert same.rc == 0, same.output
    for host, r in results(same).items():
        res = r["result"]
        assert res["changed"] is False, (host, res)
        assert res["current_version"] == "v1.13.6" and res["target_version"] == "v1.13.6"
        assert res["upgrade_path"] == "lifecycle"
        assert "up to date" in res["msg"]

    newer = upgrade(ansible, inventory, {"talos_version": "1.14.1"}, check=True)
    assert newer.rc == 0, newer.output
    for r in results(newer).values():
        res = r["result"]
        assert res["changed"] is True and res["os_upgrade"] is True
        assert res["target_version"] == "v1.14.1"
        # ghcr.io carries no 1.14 installer; talosctl upgrade 1.14 defaults to the factory's.
        assert res["target_image"] == f"{FACTORY_1_14}:v1.14.1", res
        assert "would upgrade v1.13.6 -> v1.14.1" in res["msg"]
        # The live config still installs 1.13.6; the module says so and leaves it.
        assert res["install_image"] == f"{GHCR}:v1.13.6"
        assert any("machine.install.image" in w for w in res.get("warnings", [])), res

    # The same factory image at the same version but another schematic is an upgrade too.
    schematic = upgrade(ansible, inventory, {"image": f"factory.talos.dev/installer/{SCHEMATIC}:v1.13.6"}, check=True)
    assert schematic.rc == 0, schematic.output
    for r in results(schematic).values():
        assert r["result"]["changed"] is True
        assert "schematic change" in r["result"]["os_reason"]

    # Nodes on 1.14.2 with the target 1.13.6: a downgrade, refused, nothing touched.
    for n in sim.status():
        sim.control(op="set_version", node=n["index"], version="v1.14.2")
    before = snapshot(sim)
    down = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6"})
    assert down.rc != 0
    for r in results(down).values():
        assert r["status"] == "failed"
        res = r["result"]
        assert "downgrade" in res["msg"] and "allow_downgrade" in res["msg"], res["msg"]
        assert "nothing was changed" in res["msg"]
        assert res["changed"] is False and res["current_version"] == "v1.14.2"
    assert snapshot(sim) == before


def test_check_mode_on_an_up_to_date_cluster(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=3, workers=1)
    before = snapshot(sim)
    run = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6", "kubernetes_version": "1.36.1"}, check=True)
    assert run.rc == 0, run.output
    found = results(run)
    assert set(found) == {"cp1", "cp2", "cp3", "w1"}
    for host, r in found.items():
        res = r["result"]
        assert res["changed"] is False, (host, res)
        assert res["current_version"] == "v1.13.6"
        k8s = res["kubernetes"]
        assert k8s["current"] == "1.36.1" and k8s["target"] == "1.36.1"
        expected = {"kubelet"} if host == "w1" else {
            "kubelet", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"}
        assert set(k8s["components"]) == expected
        assert not any(c["changed"] for c in k8s["components"].values())
    assert snapshot(sim) == before


def test_check_before_the_first_talosconfig_uses_the_secrets(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1, version="v1.13.4")
    (tmp_path / "cluster" / "talosconfig").unlink()
    before = snapshot(sim)
    run = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6", "kubernetes_version": "1.36.1"},
                  check=True, credentials="secrets")
    assert run.rc == 0, run.output
    for r in results(run).values():
        res = r["result"]
        assert res["changed"] is True and res["current_version"] == "v1.13.4"
        assert "secrets bundle" in res["credentials"]
    assert snapshot(sim) == before
    assert not (tmp_path / "cluster" / "talosconfig").exists()
    forms = secret_forms((tmp_path / "cluster" / "secrets.yaml").read_text())
    assert leaks(run.output, forms) == []
    assert leaks(repr(run.results), forms) == []


def test_rolling_upgrade_one_node_at_a_time(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=3, workers=1, version="v1.13.4")
    before = {n["address"]: n["boot_id"] for n in sim.status()}
    run = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6"}, serial=1)
    assert run.rc == 0, run.output
    # With serial: 1 each node's task ends (verified) before the next one starts.
    order = [r["host"] for r in run.tasks(TASK)]
    assert order == ["cp1", "cp2", "cp3", "w1"]
    for r in run.tasks(TASK):
        res = r["result"]
        assert res["changed"] is True
        assert res["current_version"] == "v1.13.4" and res["version_after"] == "v1.13.6"
        assert res["upgrade_path"] == "lifecycle"
        assert res["boot_id_before"] != res["boot_id_after"]
        assert "verified" in res["msg"]
    for n in sim.status():
        assert n["version"] == "v1.13.6"
        assert n["boot_id"] != before[n["address"]]

    again = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6"}, serial=1)
    assert again.rc == 0, again.output
    assert all(r["result"]["changed"] is False for r in again.tasks(TASK))
    forms = secret_forms((tmp_path / "cluster" / "secrets.yaml").read_text())
    assert leaks(run.output, forms) == [] and leaks(repr(run.results), forms) == []


def test_legacy_path_for_nodes_before_the_lifecycle_api(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1)
    for n in sim.status():
        sim.control(op="set_version", node=n["index"], version="v1.12.4")
    run = upgrade(ansible, inventory, {"talos_version": "v1.13.6"}, serial=1)
    assert run.rc == 0, run.output
    for r in run.tasks(TASK):
        assert r["result"]["upgrade_path"] == "legacy"
        assert r["result"]["version_after"] == "v1.13.6"
    assert all(n["version"] == "v1.13.6" for n in sim.status())


def test_a_legacy_upgrade_that_fails_on_the_node_fails_at_once(ansible, sim_factory, tmp_path):
    """Upstream's legacy Upgrade answers first and runs its sequence afterwards; the sequence stops the node's
    services before the installer runs, and a failed installer leaves them stopped with no reboot
    (internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go Upgrade and v1alpha1_controller.go Run at
    v1.13.9). The module sees the failed sequence event instead of waiting for a reboot that never comes."""
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=0)
    sim.control(op="set_version", node=0, version="v1.12.4")
    sim.control(op="fault", node=0, installer_fails=True)
    before = snapshot(sim)
    started = time.monotonic()
    run = upgrade(ansible, inventory, {"talos_version": "v1.13.6", "timeout": 600})
    elapsed = time.monotonic() - started
    assert run.rc != 0
    res = run.task(TASK)["result"]
    msg = res["msg"]
    assert "failed on the node in its upgrade phase, after Talos had stopped its services" in msg, msg
    assert 'task "upgrade" failed: exit code 1' in msg and "still runs v1.12.4" in msg and "reboot it" in msg, msg
    assert res["changed"] is True, "the node's services were stopped"
    assert elapsed < 120, f"waited {elapsed:.0f}s for a reboot that never comes"
    assert snapshot(sim) == before
    assert sim.status()[0]["stage"] == "rebooting"


def test_schematic_change_at_the_same_version_then_idempotent(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1)
    image = f"factory.talos.dev/installer/{SCHEMATIC}:v1.13.6"
    run = upgrade(ansible, inventory, {"image": image}, serial=1)
    assert run.rc == 0, run.output
    for r in run.tasks(TASK):
        res = r["result"]
        assert res["changed"] is True and "schematic change" in res["os_reason"]
        assert res["schematic_after"] == SCHEMATIC
    assert all(n["schematic"] == SCHEMATIC for n in sim.status())
    # The nodes now report the schematic they run, so the old install image in the config
    # no longer makes the module upgrade again.
    again = upgrade(ansible, inventory, {"image": image}, serial=1)
    assert again.rc == 0, again.output
    for r in again.tasks(TASK):
        assert r["result"]["changed"] is False, r["result"]
        assert r["result"]["schematic_source"] == "extensions"


def test_worker_upgraded_through_a_control_plane_endpoint(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1, version="v1.13.4")
    cp, worker = sim.nodes[0], sim.nodes[1]
    task = {
        "name": TASK,
        "ferro.talos.talos_upgrade": {
            "node": worker["address"],
            "endpoint": cp["address"],
            "image": f"{GHCR}:v1.13.6",
            "talosconfig": str(tmp_path / "cluster" / "talosconfig"),
            "timeout": 60,
        },
    }
    run = ansible.run(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]))
    assert run.rc == 0, run.output
    res = run.task(TASK)["result"]
    assert res["version_after"] == "v1.13.6" and res["node"] == worker["address"]
    versions = {n["address"]: n["version"] for n in sim.status()}
    assert versions == {cp["address"]: "v1.13.4", worker["address"]: "v1.13.6"}


def test_staged_upgrade_with_powercycle_uses_the_legacy_api(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=0, version="v1.13.4")
    run = upgrade(ansible, inventory, {"talos_version": "v1.13.6", "stage": True, "reboot_mode": "powercycle"})
    assert run.rc == 0, run.output
    res = run.task(TASK)["result"]
    assert res["upgrade_path"] == "legacy" and res["version_after"] == "v1.13.6"
    assert sim.status()[0]["version"] == "v1.13.6"


def test_kubernetes_upgrade_node_by_node(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, kubernetes="1.35.2", control_planes=1, workers=1)
    before = snapshot(sim)
    run = upgrade(ansible, inventory, {"kubernetes_version": "1.36.1"}, serial=1)
    assert run.rc == 0, run.output
    found = results(run)
    for host, r in found.items():
        res = r["result"]
        assert res["changed"] is True, res
        comps = res["kubernetes"]["components"]
        assert comps["kubelet"]["target_image"] == "ghcr.io/siderolabs/kubelet:v1.36.1"
        assert all(c["changed"] for c in comps.values())
    cp = found["cp1"]["result"]
    assert cp["manifests_not_synced"][0]["name"] == "kube-proxy"
    assert cp["manifests_not_synced"][0]["image"].endswith(":v1.35.2")
    assert found["w1"]["result"]["manifests_not_synced"] == []
    # Applied without a reboot.
    assert snapshot(sim) == before

    again = upgrade(ansible, inventory, {"kubernetes_version": "1.36.1"}, check=True)
    assert again.rc == 0, again.output
    for r in results(again).values():
        assert r["result"]["changed"] is False
        assert r["result"]["kubernetes"]["current"] == "1.36.1"


def test_os_then_kubernetes_in_one_task(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, kubernetes="1.35.2",
                               control_planes=1, workers=1, version="v1.13.4")
    run = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6", "kubernetes_version": "1.36.1"}, serial=1)
    assert run.rc == 0, run.output
    for r in run.tasks(TASK):
        res = r["result"]
        assert res["version_after"] == "v1.13.6"
        assert res["kubernetes"]["components"]["kubelet"]["changed"] is True
        assert "Kubernetes 1.35.2 -> 1.36.1" in res["msg"]
    assert all(n["version"] == "v1.13.6" for n in sim.status())


def test_installer_range_refusal_names_the_way_through(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1)
    for n in sim.status():
        sim.control(op="set_version", node=n["index"], version="v1.10.7")
    before = snapshot(sim)
    run = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6"})
    assert run.rc != 0
    for r in results(run).values():
        assert r["status"] == "failed"
        msg = r["result"]["msg"]
        assert "upgrade to the latest 1.11.x, then 1.12.x first" in msg, msg
        assert "v1.10.7" in msg
    assert snapshot(sim) == before


def test_kubernetes_jump_of_two_minors_is_refused(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, kubernetes="1.34.2", control_planes=1, workers=1)
    before = snapshot(sim)
    run = upgrade(ansible, inventory, {"kubernetes_version": "1.36.1"})
    assert run.rc != 0
    for r in results(run).values():
        assert r["status"] == "failed"
        msg = r["result"]["msg"]
        assert "unsupported upgrade path 1.34->1.36" in msg and "1.35.x" in msg, msg
    assert snapshot(sim) == before
    # The configs still carry 1.34.2.
    check = upgrade(ansible, inventory, {"kubernetes_version": "1.35.0"}, check=True)
    assert check.rc == 0, check.output
    assert all(r["result"]["kubernetes"]["current"] == "1.34.2" for r in check.tasks(TASK))


def test_a_control_plane_is_not_taken_down_when_etcd_could_lose_quorum(ansible, sim_factory, tmp_path):
    """Upstream's legacy Upgrade refuses on a control plane when etcd has exactly two members or a member is not
    healthy (internal/pkg/etcd/etcd.go ValidateForUpgrade at v1.13.9); the LifecycleService path has no such guard
    on the server (internal/app/lifecycle/lifecycle.go), so the module checks before anything moves."""
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=2, workers=0, version="v1.13.4")
    before = snapshot(sim)
    for check in (True, False):
        run = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6"}, check=check)
        assert run.rc != 0
        for r in run.tasks(TASK):
            assert "etcd has 2 members" in r["result"]["msg"] and "nothing was changed" in r["result"]["msg"], r
    assert snapshot(sim) == before


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unhealthy_etcd_member_stops_a_control_plane_upgrade(ansible, sim_factory, tmp_path, backend):
    """With the real backend the member is a real etcd process, stopped: the module sees what etcd says."""
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=3, workers=0,
                               version="v1.13.4", healthy=True, extra=backend_args(backend))
    sick = sim.nodes[1]["address"]
    sim.control(op="fault", node=1, etcd_down=True)
    before = snapshot(sim)
    run = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6"})
    assert run.rc != 0
    for r in run.tasks(TASK):
        msg = r["result"]["msg"]
        assert f"on {sick} is not healthy" in msg and "all members must be healthy" in msg, msg
    assert snapshot(sim) == before


def test_reboot_that_never_returns_fails_within_the_timeout(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=3, workers=1, version="v1.13.4")
    first = sim.status()[0]
    sim.control(op="fault", node=first["index"], never_return=True)
    before = snapshot(sim)
    started = time.monotonic()
    run = upgrade(ansible, inventory, {"image": f"{GHCR}:v1.13.6", "timeout": 15}, serial=1)
    elapsed = time.monotonic() - started
    assert run.rc != 0
    tasks = run.tasks(TASK)
    assert [r["host"] for r in tasks] == ["cp1"], run.output
    res = tasks[0]["result"]
    assert tasks[0]["status"] == "failed"
    assert "did not come back" in res["msg"], res["msg"]
    assert res["changed"] is True
    assert elapsed < 15 + 45, elapsed
    # The rollout stopped there: every other node keeps its version and boot.
    after = snapshot(sim)
    assert after[1:] == before[1:]


BAD_INPUTS = [
    ("no target", {}, "kubernetes_version"),
    ("image and talos_version", {"image": f"{GHCR}:v1.13.6", "talos_version": "1.13.6"}, "mutually exclusive"),
    ("image without tag", {"image": GHCR}, "image"),
    ("image tag not a version", {"image": f"{GHCR}:latest"}, "image"),
    ("image with spaces", {"image": "ghcr.io/sidero labs/installer:v1.13.6"}, "image"),
    ("talos_version without patch", {"talos_version": "1.13"}, "talos_version"),
    ("talos_version nonsense", {"talos_version": "banana"}, "talos_version"),
    ("installer_repository with a tag", {"talos_version": "1.13.6", "installer_repository": f"{GHCR}:v1.13.5"}, "installer_repository"),
    ("installer_repository with image", {"image": f"{GHCR}:v1.13.6", "installer_repository": "registry.local/installer"}, "installer_repository"),
    # ghcr.io carries no installer from 1.14 (v1.14.0 release notes, "Default Installer Image").
    ("image unpublished", {"image": f"{GHCR}:v1.14.1"}, "not published"),
    ("installer_repository unpublished", {"talos_version": "1.14.1", "installer_repository": GHCR}, "not published"),
    ("kubernetes_version nonsense", {"kubernetes_version": "v1.x"}, "kubernetes_version"),
    ("reboot_mode unknown", {"image": f"{GHCR}:v1.13.6", "reboot_mode": "force"}, "reboot_mode"),
    ("timeout zero", {"image": f"{GHCR}:v1.13.6", "timeout": 0}, "timeout"),
    ("timeout not a number", {"image": f"{GHCR}:v1.13.6", "timeout": "soon"}, "timeout"),
    ("allow_downgrade not a bool", {"image": f"{GHCR}:v1.13.6", "allow_downgrade": "maybe"}, "allow_downgrade"),
    ("no wait with OS and Kubernetes", {"image": f"{GHCR}:v1.13.6", "kubernetes_version": "1.36.1", "wait": False}, "wait"),
    ("empty node", {"node": "", "image": f"{GHCR}:v1.13.6"}, "node"),
    ("no credentials", {"image": f"{GHCR}:v1.13.6", "secrets_file": None, "talosconfig": "/nonexistent/talosconfig"}, "talosconfig"),
    ("node unreachable", {"image": f"{GHCR}:v1.13.6", "connect_timeout": 2}, "unreachable"),
]


@pytest.mark.parametrize("name,args,expected", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input(ansible, sample, name, args, expected):
    task_args = {"node": "127.0.251.9", "secrets_file": str(sample.secrets), **args}
    task_args = {k: v for k, v in task_args.items() if v is not None}
    task = {"name": "bad", "ferro.talos.talos_upgrade": task_args}
    run = ansible.run(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]))
    assert run.rc != 0
    entry = run.task("bad")
    assert entry["status"] == "failed"
    msg = entry["result"]["msg"]
    assert expected in msg, msg
    assert "panicked" not in run.output and "internal error" not in msg
