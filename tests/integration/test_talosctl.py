"""Upstream's own talosctl, built from the Go module proxy at v1.13.9 and v1.14.1
(tools/talosctl/build), as an independent client of talos-sim: over real mutual TLS, with the
talosconfig the collection's talos_config module writes.

talosctl decodes every resource spec by its Go type (`get` prints what it decoded), so these tests
check talos-sim's encodings field by field on the decoded values, not just exit codes. Its
operations wait the way talosctl waits (`--wait`: cmd/talosctl/pkg/talos/action/tracker.go), and
`health --server=false` runs upstream's pkg/cluster/check against the simulated cluster,
Kubernetes API included.

Without Go the tests skip, saying why; FERRO_REQUIRE_UPSTREAM=1 (CI) makes that a failure."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import time

import pytest
import yaml

from conftest import Ansible, ROOT
from talos_sim import start_sim
from test_talos_upgrade import CONVERGE, FACTORY_1_14, GHCR, inventory_for

VERSIONS = ("v1.13.9", "v1.14.1")
UPSTREAM_DIR = pathlib.Path(os.environ.get("FERRO_UPSTREAM_DIR") or ROOT / "target" / "upstream")
if not UPSTREAM_DIR.is_absolute():
    UPSTREAM_DIR = ROOT / UPSTREAM_DIR


# ---------------------------------------------------------------------------------------------
# The binaries


def _unavailable(reason):
    if os.environ.get("FERRO_REQUIRE_UPSTREAM") == "1":
        pytest.fail(reason + "; FERRO_REQUIRE_UPSTREAM=1 makes this a failure", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def talosctl_binaries():
    """{version: path} of upstream's talosctl builds; builds what is missing when Go is here
    (tools/talosctl/build is a no-op for an up-to-date binary)."""
    paths = {v: UPSTREAM_DIR / f"talosctl-{v}" for v in VERSIONS}
    missing = [v for v, p in paths.items() if not os.access(p, os.X_OK)]
    if missing:
        if shutil.which("go") is None:
            _unavailable(f"talosctl {', '.join(missing)} not built in {UPSTREAM_DIR} and `go` is not installed "
                         "(tools/talosctl/build builds it from the Go module proxy)")
        proc = subprocess.run([str(ROOT / "tools" / "talosctl" / "build"), *missing], capture_output=True,
                              text=True, timeout=3600, env={**os.environ, "FERRO_UPSTREAM_DIR": str(UPSTREAM_DIR)})
        if proc.returncode != 0:
            _unavailable(f"tools/talosctl/build failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return paths


class Talosctl:
    def __init__(self, binary, version, talosconfig):
        self.binary = binary
        self.version = version
        self.talosconfig = talosconfig

    def run(self, *args, nodes=None, check=True, timeout=120):
        cmd = [str(self.binary), "--talosconfig", str(self.talosconfig)]
        if nodes:
            cmd += ["--nodes", ",".join(nodes)]
        cmd += [str(a) for a in args]
        # No ~/.talos or ~/.kube of the machine's user is read or written.
        env = {**os.environ, "HOME": str(pathlib.Path(self.talosconfig).parent), "TALOSCONFIG": str(self.talosconfig)}
        env.pop("KUBECONFIG", None)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if check:
            assert proc.returncode == 0, f"talosctl {self.version} {' '.join(cmd[3:])} failed ({proc.returncode}):\n" \
                                         f"{proc.stdout}\n{proc.stderr}"
        return proc

    def get(self, resource, *args, nodes=None):
        """`talosctl get -o json`: the decoded resources (one JSON document each)."""
        out = self.run("get", resource, *args, "-o", "json", nodes=nodes).stdout
        return json_stream(out)


def json_stream(text):
    decoder, docs, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return docs
        doc, i = decoder.raw_decode(text, i)
        docs.append(doc)


# ---------------------------------------------------------------------------------------------
# Clusters


def converge_cluster(workdir, control_planes=1, workers=1, kubernetes="1.36.1", **sim_kwargs):
    """A talos-sim cluster configured and bootstrapped with talos_config, talos_apply and
    talos_bootstrap (test_talos_upgrade's CONVERGE); returns (sim, inventory, talosconfig)."""
    sim = start_sim(control_planes=control_planes, workers=workers, **sim_kwargs)
    try:
        ansible = Ansible(workdir)
        inventory = inventory_for(sim, workdir, kubernetes)
        run = ansible.run(CONVERGE, inventory=inventory)
        assert run.rc == 0, run.output
    except BaseException:
        sim.stop()
        raise
    return sim, ansible, inventory, workdir / "cluster" / "talosconfig"


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One converged cluster (two control planes, one worker) for every read-only test."""
    sim, ansible, inventory, talosconfig = converge_cluster(tmp_path_factory.mktemp("talosctl-reads"),
                                                            control_planes=2, workers=1)
    yield {"sim": sim, "ansible": ansible, "inventory": inventory, "talosconfig": talosconfig,
           "nodes": {n["address"]: n for n in sim.status()}}
    sim.stop()


@pytest.fixture(params=VERSIONS)
def version(request):
    return request.param


@pytest.fixture
def ctl(talosctl_binaries, shared, version):
    return Talosctl(talosctl_binaries[version], version, shared["talosconfig"])


def roles(shared):
    by_role = {"controlplane": [], "worker": []}
    for address, n in shared["nodes"].items():
        by_role[n["role"]].append(address)
    return by_role["controlplane"], by_role["worker"]


def table(text):
    """A talosctl table (columns separated by two or more spaces) as a list of dicts."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = re.split(r"\s{2,}", lines[0].strip())
    return [dict(zip(header, re.split(r"\s{2,}", line.strip()))) for line in lines[1:]]


# ---------------------------------------------------------------------------------------------
# Reads: one shared cluster


def test_version_names_client_and_each_server(ctl, shared):
    cps, workers = roles(shared)
    everyone = cps + workers
    out = ctl.run("version", nodes=everyone).stdout
    client, _, servers = out.partition("Server:")
    assert f"Tag:         {ctl.version}" in client, out
    # One block per node, each with that node's own tag (pkg/machinery/version/version.go).
    blocks = re.findall(r"NODE:\s+(\S+)\n\s+Tag:\s+(\S+)", servers)
    assert sorted(blocks) == sorted((a, shared["nodes"][a]["version"]) for a in everyone), out
    assert servers.count("Enabled:     RBAC") == len(everyone), out
    # The hidden --json prints each VersionResponse message as protojson.
    for address in everyone:
        [msg] = [json.loads(line) for line in ctl.run("version", "--json", nodes=[address]).stdout.splitlines()
                 if line.startswith("{")]
        assert msg["version"]["tag"] == shared["nodes"][address]["version"], msg
        assert (msg["version"]["os"], msg["version"]["arch"]) == ("linux", "amd64"), msg
        assert msg["platform"] == {"name": "metal", "mode": "metal"}, msg
        assert msg["features"] == {"rbac": True}, msg


def test_get_members_decodes_every_member_of_the_cluster(ctl, shared):
    """Members (pkg/machinery/resources/cluster/member.go): one per node that runs a config and
    announces itself through discovery, id the node name, spec from the node's local affiliate
    (internal/app/machined/pkg/controllers/cluster/local_affiliate.go, member.go)."""
    cps, workers = roles(shared)
    for address in (cps[0], workers[0]):
        members = ctl.get("members", nodes=[address])
        assert {m["node"] for m in members} == {address}
        by_id = {m["metadata"]["id"]: m for m in members}
        expected = {n["hostname"].lower(): n for n in shared["nodes"].values()}
        assert sorted(by_id) == sorted(expected), by_id
        ids = set()
        for name, m in by_id.items():
            node = expected[name]
            assert m["metadata"]["namespace"] == "cluster" and m["metadata"]["type"] == "Members.cluster.talos.dev"
            spec = m["spec"]
            assert spec["hostname"] == node["hostname"]
            assert spec["addresses"] == [node["address"]]
            assert spec["machineType"] == node["role"]
            assert spec["operatingSystem"] == f"Talos ({node['version']})"
            if node["role"] == "controlplane":
                assert spec["controlPlane"] == {"apiServerPort": 6443}, spec
            else:
                assert "controlPlane" not in spec, spec
            # The node identity: 32 random bytes in github.com/jxskiss/base62, five or six bits a
            # letter, so 43 to 52 letters (adapters/cluster/identity.go @ v1.14.1); the simulator's
            # encoder is checked against upstream's in members.rs.
            assert re.fullmatch(r"[0-9A-Za-z]{43,52}", spec["nodeId"]), spec
            ids.add(spec["nodeId"])
        assert len(ids) == len(by_id)


def test_get_machinestatus(ctl, shared):
    cps, workers = roles(shared)
    for address in cps + workers:
        # Right after the converge a node's kubelet may not have reported Ready yet (Talos then
        # says so in unmetConditions, as talos-sim does here): wait for it, as `talosctl health` would.
        deadline = time.monotonic() + 60
        while True:
            [status] = ctl.get("machinestatus", nodes=[address])
            if status["spec"].get("status", {}).get("ready") or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert status["metadata"]["id"] == "machine" and status["metadata"]["namespace"] == "runtime"
        assert status["spec"]["stage"] == "running", status
        assert status["spec"]["status"]["ready"] is True, status
        assert not status["spec"]["status"].get("unmetConditions"), status


def test_get_disks_decodes_the_system_disk(ctl, shared):
    cps, _ = roles(shared)
    disks = ctl.get("disks", nodes=[cps[0]])
    by_id = {d["metadata"]["id"]: d["spec"] for d in disks}
    assert "sda" in by_id, by_id
    sda = by_id["sda"]
    assert sda["dev_path"] == "/dev/sda", sda
    assert sda["size"] > 0 and sda["pretty_size"], sda
    assert sda["io_size"] > 0 and sda["sector_size"] > 0, sda


def test_get_extensions_without_a_schematic_is_empty(ctl, shared):
    cps, workers = roles(shared)
    assert ctl.get("extensions", nodes=[cps[0]]) == []


def test_services_lists_what_the_node_runs(ctl, shared):
    cps, workers = roles(shared)
    for address, expected in ((cps[0], {"apid", "etcd", "kubelet", "machined", "trustd"}),
                              (workers[0], {"apid", "kubelet", "machined"})):
        rows = table(ctl.run("services", nodes=[address]).stdout)
        assert {r["NODE"] for r in rows} == {address}
        states = {r["SERVICE"]: (r["STATE"], r["HEALTH"]) for r in rows}
        assert expected <= set(states), states
        for service in expected:
            assert states[service][0] == "Running", states
        # One service in detail: its events, decoded.
        detail = ctl.run("service", "etcd" if address == cps[0] else "kubelet", nodes=[address]).stdout
        assert re.search(r"STATE\s+Running", detail), detail
        assert "HEALTH" in detail and "EVENTS" in detail, detail


def test_etcd_members_and_status(ctl, shared):
    cps, _ = roles(shared)
    names = {shared["nodes"][a]["hostname"].lower(): a for a in cps}
    members = table(ctl.run("etcd", "members", nodes=[cps[0]]).stdout)
    assert sorted(m["HOSTNAME"] for m in members) == sorted(names), members
    for m in members:
        address = names[m["HOSTNAME"]]
        assert m["PEER URLS"] == f"https://{address}:2380", m
        assert m["CLIENT URLS"] == f"https://{address}:2379", m
        assert m["LEARNER"] == "false", m
        assert re.fullmatch(r"[0-9a-f]{1,16}", m["ID"]), m
    ids = {m["ID"] for m in members}

    status = table(ctl.run("etcd", "status", nodes=cps).stdout)
    assert sorted(s["NODE"] for s in status) == sorted(cps), status
    leaders = {s["LEADER"] for s in status}
    assert len(leaders) == 1 and leaders <= ids, status
    for s in status:
        assert s["MEMBER"] in ids, s
        assert int(s["RAFT INDEX"]) >= int(s["RAFT APPLIED INDEX"]) > 0, s
        assert int(s["RAFT TERM"]) > 0 and s["LEARNER"] == "false", s
        assert s.get("ERRORS", "") in ("", "<none>"), s


def test_get_resource_definitions_carry_upstreams_aliases(ctl, shared):
    """talosctl finds a type by the aliases cosi-project/runtime fills in
    (`pkg/resource/meta/spec/resource_definition.go` Fill) and decodes them from the proto spec."""
    cps, _ = roles(shared)
    [rd] = ctl.get("rd", "machinestatuses.runtime.talos.dev", nodes=[cps[0]])
    assert rd["spec"]["type"] == "MachineStatuses.runtime.talos.dev"
    assert rd["spec"]["displayType"] == "MachineStatus"
    assert rd["spec"]["defaultNamespace"] == "runtime"
    assert rd["spec"]["aliases"] == ["machinestatus", "ms"], rd
    assert rd["spec"]["allAliases"] == ["machinestatuses", "machinestatuses.runtime", "machinestatuses.runtime.talos",
                                        "machinestatus", "ms"], rd
    [mc] = ctl.get("rd", "machineconfigs.config.talos.dev", nodes=[cps[0]])
    assert mc["spec"]["sensitivity"] == "sensitive", mc


# ---------------------------------------------------------------------------------------------
# etcd snapshot, kubeconfig, apply-config --dry-run


def test_etcd_snapshot_passes_etcds_own_checks(ctl, shared, tmp_path):
    """talosctl checks the file the way etcd does (the sha256 trailer, then etcdutl's
    snapshot status: cmd/talosctl/cmd/talos/etcd.go)."""
    cps, _ = roles(shared)
    path = tmp_path / "etcd.snapshot"
    out = ctl.run("etcd", "snapshot", path, nodes=[cps[0]]).stdout
    size = path.stat().st_size
    assert f'etcd snapshot saved to "{path}" ({size} bytes)' in out, out
    info = re.search(r"snapshot info: hash ([0-9a-f]{8}), revision (\d+), total keys (\d+), total size (\d+)", out)
    assert info, out
    assert int(info.group(2)) > 0 and int(info.group(3)) > 0, out


def test_kubeconfig_is_the_clusters_admin_kubeconfig(ctl, shared, tmp_path):
    cps, _ = roles(shared)
    path = tmp_path / "kubeconfig"
    ctl.run("kubeconfig", path, nodes=[cps[0]])
    doc = yaml.safe_load(path.read_text())
    assert doc["current-context"] == "admin@upgrade", doc["current-context"]
    assert doc["clusters"][0]["cluster"]["server"] == f"https://{cps[0]}:6443"
    assert doc["users"][0]["user"]["client-certificate-data"] and doc["users"][0]["user"]["client-key-data"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_apply_config_dry_run_on_a_configured_node(ctl, shared):
    cps, _ = roles(shared)
    config = shared["inventory"].parent / "rendered" / "cp1.yaml"
    text = config.read_text()
    out = ctl.run("apply-config", "--dry-run", "--file", config, nodes=[cps[0]])
    # The config the node runs: nothing changes (server ApplyConfiguration dry run).
    assert "Dry run summary:" in out.stdout + out.stderr, out
    assert "No changes." in out.stdout + out.stderr, out
    changed = text.replace("    install:\n", "    sysctls:\n        net.ipv4.ip_forward: \"1\"\n    install:\n", 1)
    assert changed != text
    config.with_name("cp1-changed.yaml").write_text(changed)
    out = ctl.run("apply-config", "--dry-run", "--file", config.with_name("cp1-changed.yaml"), nodes=[cps[0]])
    summary = out.stdout + out.stderr
    assert "Applied configuration without a reboot (skipped in dry-run)" in summary, summary
    assert "+        net.ipv4.ip_forward: \"1\"" in summary, summary


def test_apply_config_dry_run_in_maintenance_mode(talosctl_binaries, version, sample, tmp_path):
    sim = start_sim(control_planes=1, workers=0)
    try:
        [node] = sim.nodes
        # Upstream's base config names no install disk; Talos rejects it, so one is added.
        text = sample.controlplane.read_text()
        assert text.count("    install:\n        wipe: false\n") == 1
        config = tmp_path / "controlplane.yaml"
        config.write_text(text.replace("    install:\n        wipe: false\n",
                                       "    install:\n        disk: /dev/sda\n        wipe: false\n"))
        # No talosconfig is needed: --insecure talks to the maintenance API without a certificate.
        ctl = Talosctl(talosctl_binaries[version], version, tmp_path / "no-talosconfig")
        out = ctl.run("apply-config", "--insecure", "--dry-run", "--file", config, "--endpoints", node["address"],
                      nodes=[node["address"]])
        summary = out.stdout + out.stderr
        assert "Dry run summary:" in summary and "Applied configuration without a reboot (skipped in dry-run)" in summary, summary
        refused = ctl.run("apply-config", "--insecure", "--dry-run", "--file", sample.controlplane,
                          "--endpoints", node["address"], nodes=[node["address"]], check=False)
        assert refused.returncode != 0
        assert "either install disk or diskSelector should be defined" in refused.stderr, refused.stderr
        assert sim.status()[0]["maintenance"] is True
    finally:
        sim.stop()


def test_health_runs_upstreams_cluster_checks_client_side(ctl, shared):
    """`health --server=false`: upstream's pkg/cluster/check (DefaultClusterChecks, ExtraClusterChecks)
    against the sim, the cluster's nodes from its Members, the Kubernetes API included."""
    cps, workers = roles(shared)
    out = ctl.run("health", "--server=false", "--wait-timeout", "90s", nodes=[cps[0]], timeout=150)
    final = {}
    for line in (out.stdout + out.stderr).splitlines():
        m = re.match(r"waiting for (.+?): (.+)$", line)
        if m and m.group(2) != "...":
            final[m.group(1)] = m.group(2)
    # Every check of DefaultClusterChecks ran and passed, none skipped (a resource type the sim
    # did not serve would make some skip or fail).
    assert set(final) == {
        "etcd to be healthy", "etcd members to be consistent across nodes", "etcd members to be control plane nodes",
        "apid to be ready", "all nodes memory sizes", "all nodes disk sizes", "no diagnostics",
        "kubelet to be healthy", "all nodes to finish boot sequence", "all k8s nodes to report",
        "all control plane static pods to be running", "all control plane components to be ready",
        "all k8s nodes to report ready", "kube-proxy to report ready", "coredns to report ready",
        "all k8s nodes to report schedulable",
    }, final
    assert set(final.values()) == {"OK"}, final


def plan_of_dry_run(output):
    """(component, node) in the order talosctl's upgrade-k8s --dry-run would move them
    (pkg/cluster/kubernetes/talos_managed.go: updating "<component>" ..., then " > "<node>": ...)."""
    steps, component = [], None
    for line in output.splitlines():
        # Static pods are named in quotes, kube-proxy and the kubelet are not.
        m = re.match(r'updating "?([\w-]+)"? to version', line.strip())
        if m:
            component = m.group(1)
            continue
        m = re.match(r'> "([\d.]+)": starting update', line.strip())
        if m and component:
            steps.append((component, m.group(1)))
    return steps


def test_upgrade_k8s_dry_run_plans_what_talos_kubernetes_upgrade_plans(ctl, shared):
    cps, workers = roles(shared)
    out = ctl.run("upgrade-k8s", "--dry-run", "--to", "1.36.2", nodes=[cps[0]], timeout=300)
    theirs = plan_of_dry_run(out.stdout + out.stderr)
    assert theirs, out.stdout + out.stderr

    play = [{"hosts": "cp1", "gather_facts": False, "tasks": [{"name": "plan", "ferro.talos.talos_kubernetes_upgrade": {
        "node": "{{ ansible_host }}",
        "control_plane_nodes": cps,
        "worker_nodes": workers,
        "kubernetes_version": "1.36.2",
        "secrets_file": "{{ talos_secrets_file }}",
        "timeout": 20,
    }}]}]
    run = shared["ansible"].run(yaml.safe_dump(play), inventory=shared["inventory"], check=True)
    assert run.rc == 0, run.output
    ours = [(s["component"], s["node"]) for s in run.task("plan")["result"]["steps"]]
    assert ours == theirs, (ours, theirs)


# ---------------------------------------------------------------------------------------------
# Operations, each with talosctl's default wait (it follows the node's events:
# cmd/talosctl/pkg/talos/action/tracker.go). One cluster, the tests in order: reboots, upgrades,
# then the resets that take the workers out.


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    sim, ansible, inventory, talosconfig = converge_cluster(tmp_path_factory.mktemp("talosctl-ops"),
                                                            control_planes=1, workers=2)
    yield {"sim": sim, "talosconfig": talosconfig}
    sim.stop()


def node_state(sim, address):
    return next(n for n in sim.status() if n["address"] == address)


def ops_nodes(ops):
    status = ops["sim"].status()
    return ([n["address"] for n in status if n["role"] == "controlplane"],
            [n["address"] for n in status if n["role"] == "worker"])


def test_reboot_waits_until_the_node_is_back(talosctl_binaries, version, ops):
    ctl = Talosctl(talosctl_binaries[version], version, ops["talosconfig"])
    cps, workers = ops_nodes(ops)
    node = workers[0]
    before = node_state(ops["sim"], node)["boot_id"]
    ctl.run("reboot", "--timeout", "3m", nodes=[node], timeout=240)
    after = node_state(ops["sim"], node)
    assert after["boot_id"] != before and after["up"] and after["stage"] == "running", after


# Talos 1.14 publishes no stock ghcr.io installer; its own is the Image Factory's (see test_talos_upgrade).
UPGRADES = {"v1.13.9": ("controlplane", f"{GHCR}:v1.13.7"), "v1.14.1": ("worker", f"{FACTORY_1_14}:v1.14.1")}


def test_upgrade_moves_the_node_to_the_installers_release(talosctl_binaries, version, ops):
    ctl = Talosctl(talosctl_binaries[version], version, ops["talosconfig"])
    cps, workers = ops_nodes(ops)
    role, image = UPGRADES[version]
    target = image.rsplit(":", 1)[1]
    node = cps[0] if role == "controlplane" else workers[0]
    before = node_state(ops["sim"], node)
    # talosctl's default drain (kubectl's: it evicts through the policy/v1 subresource the API
    # discovery names), with a shorter drain timeout than its 5 minutes.
    ctl.run("upgrade", "--image", image, "--drain-timeout", "30s", "--timeout", "3m", nodes=[node], timeout=300)
    after = node_state(ops["sim"], node)
    assert after["version"] == target and after["boot_id"] != before["boot_id"], after
    assert after["stage"] == "running" and after["up"], after
    [msg] = [json.loads(line) for line in ctl.run("version", "--json", nodes=[node]).stdout.splitlines()
             if line.startswith("{")]
    assert msg["version"]["tag"] == target
    if image.startswith("factory.talos.dev/"):
        # An Image Factory installer brings its schematic as an extension (ExtensionStatusSpec,
        # upstream's extensions.Layer, decoded from the proto spec).
        schematic = image.rsplit("/", 1)[1].split(":")[0]
        specs = {e["spec"]["metadata"]["name"]: e["spec"] for e in ctl.get("extensions", nodes=[node])}
        assert specs["schematic"]["image"] == "001.sqsh" and specs["schematic"]["metadata"]["version"] == schematic, specs
        assert specs["iscsi-tools"]["metadata"]["compatibility"] == {"talos": {"version": ">= v1.13.0"}}, specs


def test_reset_of_state_and_ephemeral(talosctl_binaries, version, ops):
    """talosctl's defaults: graceful, then power off (`--reboot=false`); its wait ends with the
    sequence (`cmd/talosctl/cmd/talos/reset.go`). With `--reboot` the node would come back in
    maintenance mode, where the talosconfig's client certificate no longer gets an answer, so the
    wait could not end: upstream's too."""
    ctl = Talosctl(talosctl_binaries[version], version, ops["talosconfig"])
    _, workers = ops_nodes(ops)
    node = workers[VERSIONS.index(version)]
    out = ctl.run("reset", "--system-labels-to-wipe", "STATE", "--system-labels-to-wipe", "EPHEMERAL",
                  "--timeout", "3m", nodes=[node], timeout=240)
    report = out.stdout + out.stderr
    for phase in ("drain", "cleanup"):
        assert f"phase: {phase} action: STOP" in report, report
    # The power-off follows the sequence's end.
    deadline = time.monotonic() + 15
    while node_state(ops["sim"], node)["up"] and time.monotonic() < deadline:
        time.sleep(0.5)
    after = node_state(ops["sim"], node)
    assert not after["up"], after
