"""talos_kubernetes_upgrade moves the whole cluster's Kubernetes the way talosctl upgrade-k8s does
(pkg/cluster/kubernetes/talos_managed.go and kubelet.go at Talos v1.13.9): checks first, then
kube-apiserver on every control plane, then kube-controller-manager, then kube-scheduler, each
node waiting until its static pod carries the new config version (the `talos.dev/config-version`
annotation, from the component's `controlplane` config resource: control_plane_static_pod.go)
and is Ready; kube-proxy; then the kubelets, control planes first, each until its Node reports the
new version and is Ready.

The order is read from talos-sim's log of component restarts, and each pod and Node from its
Kubernetes API; a module that moved node by node, or did not wait, fails here."""

import yaml

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
