"""talos-sim's Kubernetes API through an independent client: the Python `kubernetes` package (the
official client, urllib3 over OpenSSL), with the admin kubeconfig talos_kubeconfig writes. It checks
what the collection's drain relies on, from outside the collection's own Kubernetes client:
authentication by the admin certificate, Nodes that follow the Talos side, cordons, evictions that a
PodDisruptionBudget refuses with 429 and the `DisruptionBudget` cause (kubernetes
pkg/registry/core/pod/storage/eviction.go), and `/version` from the API server's image."""

import http.client
import json
import ssl
import time

import pytest
import yaml

from test_talos_upgrade import converged

kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes package is in tools/requirements.txt")

KUBECONFIG_PLAY = """
- hosts: cp1
  gather_facts: false
  tasks:
    - name: Write the admin kubeconfig
      ferro.talos.talos_kubeconfig:
        node: "{{ ansible_host }}"
        dest: "{{ kubeconfig }}"
        secrets_file: "{{ talos_secrets_file }}"
"""


def ready(conditions):
    return any(c.type == "Ready" and c.status == "True" for c in conditions or [])


def test_the_admin_kubeconfig_works_with_the_official_client(ansible, sim_factory, tmp_path):
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1)
    dest = tmp_path / "kubeconfig"
    run = ansible.run(KUBECONFIG_PLAY, inventory=inventory, extra_vars={"kubeconfig": str(dest)})
    assert run.rc == 0, run.output

    client = kubernetes.config.new_client_from_config(config_file=str(dest))
    core = kubernetes.client.CoreV1Api(client)
    names = {n["hostname"].lower() for n in sim.status()}
    deadline = time.time() + 10
    while True:
        nodes = core.list_node().items
        if {n.metadata.name for n in nodes} == names and all(ready(n.status.conditions) for n in nodes):
            break
        assert time.time() < deadline, [(n.metadata.name, n.status.conditions) for n in nodes]
        time.sleep(0.3)
    cp, worker = (sim.status()[i]["hostname"].lower() for i in (0, 1))
    by_name = {n.metadata.name: n for n in nodes}
    assert "node-role.kubernetes.io/control-plane" in by_name[cp].metadata.labels
    assert "node-role.kubernetes.io/control-plane" not in by_name[worker].metadata.labels
    assert by_name[worker].status.node_info.kubelet_version == "v1.36.1"
    assert by_name[worker].status.node_info.boot_id == sim.status()[1]["boot_id"]
    assert {a.address for a in by_name[worker].status.addresses} >= {sim.status()[1]["address"]}

    # The API server's version is the tag of the kube-apiserver image in the control plane's config.
    version = kubernetes.client.VersionApi(client).get_code()
    assert version.git_version == "v1.36.1" and version.minor == "36"

    # Static pods on the control plane, DaemonSet pods everywhere, by field selector.
    on_cp = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={cp}").items
    mirrors = [p for p in on_cp if "kubernetes.io/config.mirror" in (p.metadata.annotations or {})]
    assert {p.metadata.labels["k8s-app"] for p in mirrors} == {
        "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
    assert {p.spec.containers[0].image for p in mirrors if p.metadata.labels["k8s-app"] == "kube-apiserver"} == {
        "registry.k8s.io/kube-apiserver:v1.36.1"}
    on_worker = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={worker}").items
    assert {o.kind for p in on_worker for o in p.metadata.owner_references} >= {"DaemonSet"}

    # A cordon, read back, and in the simulator's log.
    core.patch_node(worker, {"spec": {"unschedulable": True}})
    assert core.read_node(worker).spec.unschedulable is True
    core.patch_node(worker, {"spec": {"unschedulable": None}})
    assert not core.read_node(worker).spec.unschedulable
    assert [e["action"] for e in sim.control(op="kube")["log"] if e["node"] == worker][:2] == ["cordon", "uncordon"]

    # Evictions: allowed while the budget has room, 429 with the budget's cause when it has none.
    sim.control(op="workload", namespace="default", name="solo", replicas=1, min_available=1)
    deadline = time.time() + 10
    while True:
        pods = core.list_namespaced_pod("default", label_selector="app=solo").items
        if pods and ready(pods[0].status.conditions):
            break
        assert time.time() < deadline
        time.sleep(0.2)
    pod = pods[0].metadata.name
    eviction = kubernetes.client.V1Eviction(metadata=kubernetes.client.V1ObjectMeta(name=pod, namespace="default"))
    with pytest.raises(kubernetes.client.ApiException) as blocked:
        core.create_namespaced_pod_eviction(pod, "default", eviction)
    assert blocked.value.status == 429
    status = json.loads(blocked.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"] == [{
        "reason": "DisruptionBudget",
        "message": "The disruption budget solo needs 1 healthy pods and has 1 currently"}]
    budgets = kubernetes.client.PolicyV1Api(client).list_namespaced_pod_disruption_budget("default").items
    assert [(b.metadata.name, b.status.disruptions_allowed) for b in budgets] == [("solo", 0)]
    with pytest.raises(kubernetes.client.ApiException) as missing:
        core.read_namespaced_pod("no-such-pod", "default")
    assert missing.value.status == 404

    # Without a client certificate the API server answers 401, with a Status body.
    doc = yaml.safe_load(dest.read_text())
    server = doc["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    ca = tmp_path / "ca.pem"
    import base64
    ca.write_bytes(base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]))
    conn = http.client.HTTPSConnection(host, int(port), context=ssl.create_default_context(cafile=str(ca)), timeout=10)
    conn.request("GET", "/api/v1/nodes")
    answer = conn.getresponse()
    assert answer.status == 401 and json.loads(answer.read())["reason"] == "Unauthorized"


def apply_patch(client, path, obj, **query):
    """A server-side apply through the client's raw request path (param_serialize, call_api): PATCH with
    application/apply-patch+yaml (the body is JSON, which is YAML). Returns the status code and the
    decoded object."""
    request = client.param_serialize(
        "PATCH", path, query_params=list(query.items()),
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
        body=json.dumps(obj), auth_settings=["BearerToken"])
    resp = client.call_api(*request)
    return resp.status, json.loads(resp.read())


def test_bootstrap_manifests_and_server_side_apply_with_the_official_client(ansible, sim_factory, tmp_path):
    """Talos's bootstrap manifests as objects (DaemonSets, the inventory ConfigMap, found through the
    dynamic client's discovery) and server-side apply's resourceVersion rules: a dry-run create has
    none, a create gets one, an apply that changes nothing keeps it, one that changes data moves it."""
    sim, inventory = converged(ansible, sim_factory, tmp_path, control_planes=1, workers=1)
    dest = tmp_path / "kubeconfig"
    run = ansible.run(KUBECONFIG_PLAY, inventory=inventory, extra_vars={"kubeconfig": str(dest)})
    assert run.rc == 0, run.output
    client = kubernetes.config.new_client_from_config(config_file=str(dest))

    dyn = kubernetes.dynamic.DynamicClient(client)
    daemonsets = dyn.resources.get(api_version="apps/v1", kind="DaemonSet")
    names = {d.metadata.name for d in daemonsets.get(namespace="kube-system").items}
    assert names == {"kube-proxy", "kube-flannel"}
    apps = kubernetes.client.AppsV1Api(client)
    proxy = apps.read_namespaced_daemon_set("kube-proxy", "kube-system")
    assert proxy.metadata.annotations["config.k8s.io/owning-inventory"] == "talos-bootstrap-manifests-inventory"
    assert [(m.manager, m.operation) for m in proxy.metadata.managed_fields] == [("talos", "Apply")]
    core = kubernetes.client.CoreV1Api(client)
    maps = {c.metadata.name: c for c in core.list_namespaced_config_map("kube-system").items}
    inventory_keys = set(maps["talos-bootstrap-manifests-inventory"].data)
    assert {"kube-system_kube-proxy_apps_DaemonSet", "kube-system_coredns_apps_Deployment",
            "_system__talos-nodes_rbac.authorization.k8s.io_ClusterRoleBinding"} <= inventory_keys
    assert {"coredns", "kubeconfig-in-cluster", "kube-flannel-cfg"} <= set(maps)

    path = "/api/v1/namespaces/default/configmaps/ssa"
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "namespace": "default"},
           "data": {"a": "1"}}
    code, dry = apply_patch(client, path, obj, fieldManager="talos", force="true", dryRun="All")
    assert code == 201 and "resourceVersion" not in dry["metadata"], dry
    code, created = apply_patch(client, path, obj, fieldManager="talos", force="true")
    assert code == 201
    rv = created["metadata"]["resourceVersion"]
    code, same = apply_patch(client, path, obj, fieldManager="talos", force="true")
    assert code == 200 and same["metadata"]["resourceVersion"] == rv
    obj["data"]["a"] = "2"
    _, changed = apply_patch(client, path, obj, fieldManager="talos", force="true")
    assert changed["metadata"]["resourceVersion"] != rv
    assert core.read_namespaced_config_map("ssa", "default").data == {"a": "2"}
    code, refused = apply_patch(client, path, obj)
    # No field manager: 422 Invalid, as kube-apiserver v1.36.3 answers (modules/sim/tests/real_kube_api.rs).
    assert code == 422 and refused["reason"] == "Invalid"
    writes = [e["pod"] for e in sim.control(op="kube")["log"] if e["action"] == "apply" and e["node"] == ""]
    assert writes[-2:] == ["ConfigMap/default/ssa", "ConfigMap/default/ssa"]
