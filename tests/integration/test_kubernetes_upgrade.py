"""talos_kubernetes_upgrade moves the whole cluster's Kubernetes the way talosctl upgrade-k8s does
(pkg/cluster/kubernetes/talos_managed.go and kubelet.go at Talos v1.13.9): checks first, then
kube-apiserver on every control plane, then kube-controller-manager, then kube-scheduler, each
node waiting until its static pod carries the new config version (the `talos.dev/config-version`
annotation, from the component's `controlplane` config resource: control_plane_static_pod.go)
and is Ready; kube-proxy; then the kubelets, control planes first, each until its Node reports the
new version and is Ready.

The order is read from talos-sim's log of component restarts, and each pod and Node from its
Kubernetes API; a module that moved node by node, or did not wait, fails here."""

import time

import pytest
import yaml

from talos_sim import BACKENDS, backend_args, wait_nodes_ready
from test_talos_upgrade import converged

TASK = "Upgrade Kubernetes"
STATIC = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]
# talos-sim's restart time of a component (modules/sim/src/kube/components.rs RESTART).
RESTART_MS = 700


def k8s_upgrade(ansible, inventory, version, check=False, **extra):
    args = {
        "node": "{{ ansible_host }}",
        "control_plane_nodes": "{{ groups['controlplane'] | map('extract', hostvars, 'ansible_host') | list }}",
        "worker_nodes": "{{ groups['worker'] | map('extract', hostvars, 'ansible_host') | list }}",
        "kubernetes_version": version,
        "secrets_file": "{{ talos_secrets_file }}",
        "timeout": 20,
        **extra,
    }
    play = [{"hosts": "cp1", "gather_facts": False, "tasks": [{"name": TASK, "ferro.talos.talos_kubernetes_upgrade": args}]}]
    run = ansible.run(yaml.safe_dump(play), inventory=inventory, check=check)
    found = run.tasks(TASK)
    assert len(found) == 1, run.output
    return run, found[0]["result"]


def restarts(sim):
    return [(e["pod"], e["node"], e["at_ms"]) for e in sim.control(op="kube")["log"] if e["action"] == "restart"]


def names(sim):
    return {n["address"]: n["hostname"].lower() for n in sim.status()}


def pods(sim, component):
    return [p for p in sim.control(op="kube")["pods"] if p["metadata"]["labels"].get("k8s-app") == component]


def node_versions(sim):
    return {n["metadata"]["name"]: n["status"]["nodeInfo"]["kubeletVersion"] for n in sim.control(op="kube")["nodes"]}


def assert_order(sim, log, control_planes, workers):
    """Every API server before any controller-manager, before any scheduler, kubelets last
    (control planes first), one node at a time: each restart starts after the previous one is
    done (the sim takes RESTART_MS to bring a component back)."""
    by_name = names(sim)
    cps = [by_name[a] for a in control_planes]
    ws = [by_name[a] for a in workers]
    expected = [(c, n) for c in STATIC for n in cps] + [("kubelet", n) for n in cps + ws]
    moved = [(c, n) for c, n, _ in log]
    assert moved == expected, moved
    times = [t for _, _, t in log]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(g >= RESTART_MS for g in gaps), f"a component moved before the one before it was back: {gaps}"


def test_a_patch_upgrade_moves_component_by_component_across_the_cluster(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=2, workers=1)
    addresses = [n["address"] for n in sim.status()]
    cps, ws = addresses[:2], addresses[2:]

    # Check mode: the plan in order, every step from 1.36.1 to 1.36.2, nothing restarted.
    run, plan = k8s_upgrade(ansible, inventory, "1.36.2", check=True)
    assert run.rc == 0, run.output
    assert plan["changed"] is True and plan["kubernetes"] == {"current": "1.36.1", "target": "1.36.2"}
    order = [(s["component"], s["node"]) for s in plan["steps"]]
    assert order == ([(c, n) for c in STATIC for n in cps] + [("kube-proxy", n) for n in cps]
                     + [("kubelet", n) for n in cps + ws]), order
    assert all(s["state"] == "would move" and s["target_image"].endswith(":v1.36.2") for s in plan["steps"]), plan
    assert plan["msg"].startswith("would move 11 component(s) from 1.36.1 to 1.36.2: kube-apiserver on")
    assert restarts(sim) == []

    run, done = k8s_upgrade(ansible, inventory, "1.36.2")
    assert run.rc == 0, run.output
    assert done["changed"] is True and all(s["state"] == "moved" for s in done["steps"]), done
    assert {(p["node"], p["image"].rsplit("/", 1)[-1]) for p in done["prepulled"]} >= {
        (cps[0], "kube-apiserver:v1.36.2"), (ws[0], "kubelet:v1.36.2")}, done["prepulled"]
    # kube-proxy is a DaemonSet: its config image changes, no pod restarts with it.
    assert_order(sim, [r for r in restarts(sim) if r[0] != "kube-proxy"], cps, ws)

    # Each static pod runs the new image at its new config version and is Ready; every Node
    # reports the new kubelet.
    for component in STATIC:
        found = pods(sim, component)
        assert len(found) == 2
        for p in found:
            assert p["spec"]["containers"][0]["image"].endswith(":v1.36.2"), p["spec"]
            assert p["metadata"]["annotations"]["talos.dev/config-version"] == "2", p["metadata"]
            assert any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])
    assert set(node_versions(sim).values()) == {"v1.36.2"}, node_versions(sim)

    # Converged: no change, nothing restarts, in a real run and in check mode.
    seen = len(restarts(sim))
    for check in (False, True):
        run, again = k8s_upgrade(ansible, inventory, "1.36.2", check=check)
        assert run.rc == 0 and again["changed"] is False, run.output
        assert all(s["state"] == "at target" for s in again["steps"])
        assert again["msg"] == "Kubernetes is at 1.36.2 on every node; the bootstrap manifests are in sync: nothing to do"
        assert again["manifests"] and {m["action"] for m in again["manifests"]} == {"unchanged"}, again["manifests"]
    assert len(restarts(sim)) == seen


def test_a_minor_upgrade_and_the_checks_that_come_first(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, kubernetes="1.35.4", control_planes=1, workers=1)
    addresses = [n["address"] for n in sim.status()]

    # Two minors at once, and a version Talos 1.13 does not run: refused before anything moves,
    # naming the path through 1.36.
    run, refused = k8s_upgrade(ansible, inventory, "1.37.0")
    assert run.rc != 0 and refused["changed"] is False, run.output
    msg = refused["msg"]
    assert "supports Kubernetes 1.31.0 to 1.36.x, not 1.37.0" in msg and "upgrade through 1.36.x first" in msg, msg
    assert f"{addresses[1]}: kubelet:" in msg, msg
    assert restarts(sim) == []

    run, done = k8s_upgrade(ansible, inventory, "1.36.2")
    assert run.rc == 0, run.output
    assert done["kubernetes"] == {"current": "1.35.4", "target": "1.36.2"}
    assert_order(sim, [r for r in restarts(sim) if r[0] != "kube-proxy"], addresses[:1], addresses[1:])
    assert set(node_versions(sim).values()) == {"v1.36.2"}


def test_an_api_server_that_never_becomes_ready_stops_the_upgrade_there(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=2, workers=1)
    cps = [n["address"] for n in sim.status()][:2]
    sim.control(op="fault", node=1, kind="apiserver_never_ready")

    run, failed = k8s_upgrade(ansible, inventory, "1.36.2", timeout=4)
    assert run.rc != 0, run.output
    msg = failed["msg"]
    assert msg.startswith(f"kube-apiserver on {cps[1]}: the static pod did not become Ready with"), msg
    assert "within 4 s" in msg and "is not Ready" in msg, msg
    assert f"already moved: kube-apiserver on {cps[0]}" in msg, msg
    assert f"talosctl -n {cps[1]} logs kube-apiserver" in msg
    assert failed["node"] == cps[1] and failed["component"] == "kube-apiserver"
    # Only the two API servers moved; the other components kept their version everywhere.
    by_name = names(sim)
    assert [(c, n) for c, n, _ in restarts(sim)] == [("kube-apiserver", by_name[a]) for a in cps]
    for component in ("kube-controller-manager", "kube-scheduler"):
        assert all(p["spec"]["containers"][0]["image"].endswith(":v1.36.1") for p in pods(sim, component))
    assert set(node_versions(sim).values()) == {"v1.36.1"}


def test_a_kubelet_that_keeps_its_old_version_stops_the_upgrade(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=2)
    addresses = [n["address"] for n in sim.status()]
    sim.control(op="fault", node=1, kind="kubelet_version_stuck")

    run, failed = k8s_upgrade(ansible, inventory, "1.36.2", timeout=4)
    assert run.rc != 0, run.output
    msg = failed["msg"]
    by_name = names(sim)
    assert msg.startswith(f"kubelet on {addresses[1]}: the Node did not report kubelet v1.36.2 and Ready"), msg
    assert f"Node {by_name[addresses[1]]} reports kubelet v1.36.1" in msg, msg
    # The second worker's kubelet was never touched.
    assert node_versions(sim)[by_name[addresses[2]]] == "v1.36.1"
    assert ("kubelet", by_name[addresses[2]]) not in [(c, n) for c, n, _ in restarts(sim)]


# The bootstrap manifest sync at the end of the upgrade (talos_managed.go `PerformManifestsSync`,
# `syncManifestsSSA` @ v1.13.9; go-kubernetes v0.2.38 kubernetes/ssa): Talos itself only creates
# missing objects (internal/app/machined/pkg/controllers/k8s/manifest_apply.go), so only the sync
# moves an existing DaemonSet, edits a ConfigMap an inline manifest changed or prunes one it dropped.
# Everything the sync did is checked through the official Python client, not the module's result.

PROXY = "DaemonSet/kube-system/kube-proxy"

RECONFIGURE = """
- hosts: cp1
  gather_facts: false
  tasks:
    - name: Render the config with the inline manifests
      ferro.talos.talos_config:
        secrets_file: "{{ talos_secrets_file }}"
        machine_type: controlplane
        cluster_name: "{{ talos_cluster_name }}"
        cluster_endpoint: "{{ talos_cluster_endpoint }}"
        talos_version: v1.13.6
        kubernetes_version: "{{ talos_kubernetes_version }}"
        patches: "{{ [{'cluster': {'inlineManifests': inline}}] }}"
        dest: "{{ talos_render_dir }}/cp1.yaml"
    - name: Apply it
      ferro.talos.talos_apply:
        node: "{{ ansible_host }}"
        config: "{{ talos_render_dir }}/cp1.yaml"
        secrets_file: "{{ talos_secrets_file }}"
"""


def kube_client(ansible, inventory, tmp_path):
    from test_kubernetes_api import KUBECONFIG_PLAY, kubernetes

    dest = tmp_path / "kubeconfig"
    run = ansible.run(KUBECONFIG_PLAY, inventory=inventory, extra_vars={"kubeconfig": str(dest)})
    assert run.rc == 0, run.output
    client = kubernetes.config.new_client_from_config(config_file=str(dest))
    return kubernetes, kubernetes.client.CoreV1Api(client), kubernetes.client.AppsV1Api(client)


def object_writes(sim, since=0):
    """The stored-object writes the simulated API server accepted (empty `node`), after `since` log entries."""
    return [(e["action"], e["pod"]) for e in sim.control(op="kube")["log"][since:] if e["node"] == ""]


def actions(result):
    return {m["object"]: m["action"] for m in result["manifests"]}


def inline(name, *docs):
    return {"name": name, "contents": "---\n".join(yaml.safe_dump(d) for d in docs)}


def config_map(name, namespace="default", **data):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_upgrade_ends_by_syncing_the_new_kube_proxy_to_its_daemon_set(ansible, sim_factory, tmp_path, backend):
    """With the real backend the DaemonSet's rollout is upstream's controller's, its pods the
    scheduler's, their readiness what the kubelets report."""
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1,
                               extra=backend_args(backend))
    wait_nodes_ready(sim, 2)
    _, core, apps = kube_client(ansible, inventory, tmp_path)

    def proxy_image():
        return apps.read_namespaced_daemon_set("kube-proxy", "kube-system").spec.template.spec.containers[0].image

    assert proxy_image().endswith(":v1.36.1")
    start = len(sim.control(op="kube")["log"])

    # Check mode: the plan knows the DaemonSet would get the image the upgrade patches, nothing else moves.
    run, plan = k8s_upgrade(ansible, inventory, "1.36.2", check=True)
    assert run.rc == 0, run.output
    planned = actions(plan)
    assert planned[PROXY] == "configured", plan["manifests"]
    assert {a for o, a in planned.items() if o != PROXY} == {"unchanged"}, plan["manifests"]
    assert "ConfigMap/kube-system/coredns" in planned and "Secret/kube-system/bootstrap-token-" in " ".join(planned)
    assert f"bootstrap manifests would change: 1 configured ({PROXY})" in plan["msg"], plan["msg"]
    assert proxy_image().endswith(":v1.36.1") and object_writes(sim, start) == []

    run, done = k8s_upgrade(ansible, inventory, "1.36.2")
    assert run.rc == 0, run.output
    assert actions(done)[PROXY] == "configured" and f"bootstrap manifests change: 1 configured ({PROXY})" in done["msg"]
    # Only the DaemonSet was written, once, after the last kubelet came back; its pods run the new image.
    log = sim.control(op="kube")["log"][start:]
    writes = [(e["action"], e["pod"]) for e in log if e["node"] == ""]
    assert writes == [("apply", PROXY)], writes
    last_restart = max(i for i, e in enumerate(log) if e["action"] == "restart")
    assert [i for i, e in enumerate(log) if e["pod"] == PROXY][0] > last_restart, log
    assert proxy_image().endswith(":v1.36.2")
    proxies = core.list_namespaced_pod("kube-system", label_selector="k8s-app=kube-proxy").items
    assert len(proxies) == 2 and all(p.spec.containers[0].image.endswith(":v1.36.2") for p in proxies)
    assert all(any(c.type == "Ready" and c.status == "True" for c in p.status.conditions) for p in proxies)
    ds = apps.read_namespaced_daemon_set("kube-proxy", "kube-system")
    assert ds.status.observed_generation == ds.metadata.generation and ds.status.number_ready == 2

    # Converged: every object unchanged, nothing written.
    seen = len(sim.control(op="kube")["log"])
    run, again = k8s_upgrade(ansible, inventory, "1.36.2")
    assert run.rc == 0 and again["changed"] is False, run.output
    assert set(actions(again).values()) == {"unchanged"}
    assert object_writes(sim, seen) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_inline_manifests_are_synced_pruned_and_another_inventory_s_objects_are_left_alone(
        ansible, sim_factory, tmp_path, backend):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1,
                               extra=backend_args(backend))
    wait_nodes_ready(sim, 2)
    kubernetes, core, _ = kube_client(ansible, inventory, tmp_path)

    def reconfigure(*manifests):
        run = ansible.run(RECONFIGURE, inventory=inventory, extra_vars={"inline": list(manifests)})
        assert run.rc == 0, run.output

    def data(name, namespace="default"):
        return core.read_namespaced_config_map(name, namespace).data

    def inventory_keys():
        return set(data("talos-bootstrap-manifests-inventory", "kube-system"))

    # A new inline manifest is created by Talos itself; the sync then finds it unchanged.
    team = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
    reconfigure(inline("extra", team, config_map("settings", "team", a="1"), config_map("extra", a="1")))
    deadline = time.time() + 10
    while "default_extra__ConfigMap" not in inventory_keys():
        assert time.time() < deadline, inventory_keys()
        time.sleep(0.3)
    run, same = k8s_upgrade(ansible, inventory, "1.36.1")
    assert run.rc == 0 and same["changed"] is False, run.output
    assert actions(same)["ConfigMap/team/settings"] == "unchanged" and actions(same)["Namespace/team"] == "unchanged"

    # An edit reaches the cluster only through the sync (Talos does not update what exists).
    reconfigure(inline("extra", team, config_map("settings", "team", a="1"), config_map("extra", a="2")))
    time.sleep(1)
    assert data("extra") == {"a": "1"}
    run, plan = k8s_upgrade(ansible, inventory, "1.36.1", check=True)
    assert run.rc == 0 and plan["changed"] is True, run.output
    assert actions(plan)["ConfigMap/default/extra"] == "configured" and data("extra") == {"a": "1"}
    assert plan["msg"] == ("Kubernetes is at 1.36.1 on every node; bootstrap manifests would change: "
                           "1 configured (ConfigMap/default/extra)"), plan["msg"]
    run, done = k8s_upgrade(ansible, inventory, "1.36.1")
    assert run.rc == 0 and done["changed"] is True, run.output
    assert data("extra") == {"a": "2"}

    # Dropped from the config: pruned (the namespace's objects after it), and gone from the inventory.
    reconfigure(inline("extra", config_map("extra", a="2")))
    run, plan = k8s_upgrade(ansible, inventory, "1.36.1", check=True)
    assert run.rc == 0, run.output
    assert {o for o, a in actions(plan).items() if a == "pruned"} == {"Namespace/team", "ConfigMap/team/settings"}
    assert "team_settings__ConfigMap" in inventory_keys()
    run, done = k8s_upgrade(ansible, inventory, "1.36.1")
    assert run.rc == 0 and done["changed"] is True, run.output
    # A deleted Namespace is Terminating until the namespace controller has emptied it, then gone.
    deadline = time.time() + 30
    while True:
        try:
            phase = core.read_namespace("team").status.phase
        except kubernetes.client.ApiException as gone:
            assert gone.status == 404
            break
        assert phase == "Terminating" and time.time() < deadline, phase
        time.sleep(0.3)
    assert "team_settings__ConfigMap" not in inventory_keys() and "default_extra__ConfigMap" in inventory_keys()
    run, kept = k8s_upgrade(ansible, inventory, "1.36.1", manifests_prune=False)
    assert run.rc == 0 and kept["changed"] is False, run.output

    # An object another inventory owns: refused before anything is written, unless adopt_all.
    theirs = config_map("theirs", a="mine")
    theirs["metadata"]["annotations"] = {"config.k8s.io/owning-inventory": "someone-else"}
    core.create_namespaced_config_map("default", theirs)
    reconfigure(inline("extra", config_map("extra", a="3"), config_map("theirs", a="ours")))
    # Talos's own apply of the new config records the object that exists in its inventory (and
    # writes nothing else); with the real backend that takes a moment.
    deadline = time.time() + 10
    while "default_theirs__ConfigMap" not in inventory_keys():
        assert time.time() < deadline, inventory_keys()
        time.sleep(0.3)
    seen = len(sim.control(op="kube")["log"])
    run, refused = k8s_upgrade(ansible, inventory, "1.36.1")
    assert run.rc != 0, run.output
    assert "ConfigMap/default/theirs: the live object belongs to another inventory" in refused["msg"], refused["msg"]
    assert "manifests_inventory_policy: adopt_all" in refused["msg"]
    assert object_writes(sim, seen) == [] and data("extra") == {"a": "2"} and data("theirs") == {"a": "mine"}
    run, adopted = k8s_upgrade(ansible, inventory, "1.36.1", manifests_inventory_policy="adopt_all")
    assert run.rc == 0, run.output
    assert actions(adopted)["ConfigMap/default/theirs"] == "configured" and data("theirs") == {"a": "ours"}


def test_a_daemon_set_that_never_rolls_out_fails_the_sync_after_the_components_moved(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1)
    sim.control(op="fault", node=1, kind="daemonset_rollout_stuck")

    run, failed = k8s_upgrade(ansible, inventory, "1.36.2", manifests_timeout=3)
    assert run.rc != 0, run.output
    msg = failed["msg"]
    assert msg.startswith(f"bootstrap manifests: applied, but not reconciled within 3s: {PROXY} ("), msg
    assert "ready 1 of 2 pods" in msg or "available 1 of 2 pods" in msg, msg
    assert "every component had moved (kube-apiserver on" in msg and "run the task again" in msg, msg
    assert failed["changed"] is True
    # The components are all on the target: only the rollout is left.
    assert set(node_versions(sim).values()) == {"v1.36.2"}


def test_objects_of_an_api_the_next_minor_removes_stop_the_upgrade_before_anything_moves(
        ansible, sim_factory, tmp_path):
    """go-kubernetes v0.2.38 kubernetes/upgrade/checks.go lists each API resource the next minor removes
    (1.32: podschedulingcontexts.v1alpha3.resource.k8s.io) and refuses while it holds objects. The
    simulated API server serves that API through a CRD here, so the objects exist as they would on 1.31."""
    sim, inventory = converged(ansible, sim_factory, tmp_path, kubernetes="1.31.4", control_planes=1, workers=1)
    kubernetes, _, _ = kube_client(ansible, inventory, tmp_path)
    client = kubernetes.config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "podschedulingcontexts.resource.k8s.io"},
           "spec": {"group": "resource.k8s.io", "scope": "Namespaced",
                    "names": {"plural": "podschedulingcontexts", "singular": "podschedulingcontext",
                              "kind": "PodSchedulingContext"},
                    "versions": [{"name": "v1alpha3", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
    kubernetes.client.ApiextensionsV1Api(client).create_custom_resource_definition(crd)
    custom = kubernetes.client.CustomObjectsApi(client)
    custom.create_namespaced_custom_object("resource.k8s.io", "v1alpha3", "default", "podschedulingcontexts", {
        "apiVersion": "resource.k8s.io/v1alpha3", "kind": "PodSchedulingContext", "metadata": {"name": "left-over"}})

    run, refused = k8s_upgrade(ansible, inventory, "1.32.1")
    assert run.rc != 0 and refused["changed"] is False, run.output
    assert refused["msg"] == ("Kubernetes 1.32.1 no longer serves API resources the cluster still stores: "
                              "1 podschedulingcontexts.v1alpha3.resource.k8s.io; migrate them to a served version "
                              "first; nothing was changed"), refused["msg"]
    assert restarts(sim) == []

    custom.delete_namespaced_custom_object("resource.k8s.io", "v1alpha3", "default", "podschedulingcontexts", "left-over")
    run, plan = k8s_upgrade(ansible, inventory, "1.32.1", check=True)
    assert run.rc == 0 and plan["changed"] is True, run.output
