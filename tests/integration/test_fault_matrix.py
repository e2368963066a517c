"""Faults injected into talos-sim while the roles converge and upgrade a cluster, the way a user runs them
(examples/site.yml: serial 1, the cluster role, then the upgrade role under --tags upgrade).

For every fault: the playbook fails, the failure names the node and says what failed, no node after the
failing one is touched (the simulator's view of every node and its live config are unchanged), the
talosconfig and the secrets files are byte for byte what they were (mode 0600), and no rendered config is
left in the temporary directory.

One cluster serves every case: it is converged once, and after each case the faults are cleared and every
node is brought back to its address and powered on. The cases only need "before" to be the state just
before them, so what an earlier case left (a patch on the first node, a newer Talos) does not matter."""

import base64
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time

import pytest
import yaml

from conftest import ROOT, Ansible
from sim_cluster import site_inventory
from talos_sim import start_sim

SITE = ROOT / "examples" / "site.yml"
OLD, NEW = "v1.13.4", "v1.13.6"
IMAGE = f"ghcr.io/siderolabs/installer:{NEW}"
# Short waits keep the matrix fast: the simulator reboots in 0.3 s and answers health at once.
TIMEOUTS = {
    "talos_cluster_health_timeout": 5,
    "talos_cluster_apply_timeout": 6,
    "talos_upgrade_health_timeout": 5,
    "talos_upgrade_timeout": 8,
}


class FaultAnsible(Ansible):
    """ansible-playbook with TMPDIR in the test's directory, so leftovers can be found."""

    def __init__(self, workdir):
        super().__init__(workdir)
        self.tmpdir = workdir / "tmpdir"
        self.tmpdir.mkdir()

    def env(self):
        env = super().env()
        env.pop("ANSIBLE_KEEP_REMOTE_FILES", None)
        env["TMPDIR"] = str(self.tmpdir)
        return env


class Cluster:
    def __init__(self, sim, ansible, workdir, foreign_secrets):
        self.sim = sim
        self.ansible = ansible
        self.workdir = workdir
        self.dir = workdir / "cluster"
        self.secrets = self.dir / "secrets.yaml"
        self.talosconfig = self.dir / "talosconfig"
        self.addresses = {n["index"]: n["address"] for n in sim.nodes}
        self.hosts = {n["index"]: h for n, h in zip(sim.nodes, ["cp1", "cp2", "cp3", "w1"])}
        # A bundle from another cluster, as a user who points at the wrong vault file has.
        self.foreign_secrets = workdir / "other-cluster" / "secrets.yaml"
        self.foreign_secrets.parent.mkdir()
        shutil.copy(foreign_secrets, self.foreign_secrets)
        os.chmod(self.foreign_secrets, 0o600)
        self.expired_talosconfig = workdir / "expired" / "talosconfig"
        self.foreign_talosconfig = workdir / "other-cluster" / "talosconfig"
        # A fault injected from a thread mid-run, stopped by heal().
        self.watcher = None
        self.stop_watching = threading.Event()

    def inventory(self, **extra):
        return site_inventory(
            self.sim,
            self.workdir / "inventory.yml",
            {
                "talos_cluster_name": "faults",
                "talos_cluster_endpoint": self.sim.nodes[0]["address"],
                "talos_cluster_kubernetes_version": "1.36.1",
                "talos_cluster_secrets_file": str(self.secrets),
                "talos_cluster_talosconfig": str(self.talosconfig),
                "talos_cluster_kubeconfig": str(self.dir / "kubeconfig"),
                "talos_cluster_generate_secrets": True,
                **TIMEOUTS,
                **extra,
            },
        )

    def site(self, args=(), **extra):
        return self.ansible.run(SITE.read_text(), inventory=self.inventory(**extra), args=args)

    def config_sha(self, address):
        """The node's live config digest, read with the talos_info binary directly (no playbook)."""
        args = self.workdir / "talos_info-args.json"
        args.write_text(json.dumps({"node": address, "talosconfig": str(self.talosconfig), "connect_timeout": 3,
                                    "_ansible_module_name": "talos_info"}))
        binary = os.path.join(os.environ["FERRO_TARGET_DIR"], "ferro-talos")
        proc = subprocess.run([binary, str(args)], capture_output=True, text=True, timeout=30)
        out = json.loads(proc.stdout)
        return out.get("talos", {}).get("config_sha256") or f"unreadable: {out.get('msg')}"

    def state(self):
        """Per node: what the simulator reports (address, power, version, boots, stage) and the live config."""
        found = {}
        for n in self.sim.status():
            keep = ("address", "up", "listening", "version", "pending_version", "boot_id", "stage",
                    "maintenance", "has_staged_config", "machine_type", "etcd_member")
            found[n["index"]] = {k: n[k] for k in keep}
            found[n["index"]]["config"] = self.config_sha(n["address"]) if n["listening"] else None
        return found

    def files(self):
        """Digest and mode of every credentials file a case must leave alone."""
        paths = [self.secrets, self.talosconfig, self.foreign_secrets]
        paths += [p for p in (self.expired_talosconfig, self.foreign_talosconfig) if p.exists()]
        return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), os.stat(p).st_mode & 0o777) for p in paths}

    def heal(self):
        """Clear every fault and bring every node back, up and on its own address."""
        if self.watcher:
            self.stop_watching.set()
            self.watcher.join()
            self.watcher = None
            self.stop_watching.clear()
        self.sim.control(op="health_fail", text=None)
        for index in self.addresses:
            self.sim.control(op="clear_faults", node=index)
        for n in self.sim.status():
            original = self.addresses[n["index"]]
            if n["address"] != original:
                self.sim.control(op="fault", node=n["index"], next_address=original)
                self.sim.control(op="reboot", node=n["index"])
            elif not n["up"]:
                self.sim.control(op="power_on", node=n["index"])
        deadline = time.time() + 20
        while time.time() < deadline:
            nodes = self.sim.status()
            if all(n["listening"] and n["stage"] == "running" and n["address"] == self.addresses[n["index"]]
                   for n in nodes):
                return
            time.sleep(0.2)
        raise AssertionError(f"the cluster did not recover: {self.sim.status()}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, sample):
    workdir = tmp_path_factory.mktemp("faults")
    sim = start_sim(control_planes=3, workers=1, version=OLD, downtime_ms=300)
    try:
        c = Cluster(sim, FaultAnsible(workdir), workdir, sample.other_secrets)
        first = c.site()
        assert first.rc == 0, "the cluster did not converge:\n" + first.output
        assert all(not n["maintenance"] for n in sim.status())
        write_talosconfig(c.talosconfig, c.secrets, c.expired_talosconfig, expired=True)
        write_talosconfig(c.talosconfig, c.foreign_secrets, c.foreign_talosconfig)
        yield c
    finally:
        sim.stop()


def write_talosconfig(good, secrets, dest, expired=False):
    """The cluster's talosconfig with a new admin certificate signed by the OS CA of `secrets`. With the
    cluster's own bundle and expired=True: right CA, right role, but it expired 35 days ago. With another
    cluster's bundle: a talosconfig from that cluster (its CA and its certificate)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    os_ca = yaml.safe_load(secrets.read_text())["certs"]["os"]
    # Talos labels its Ed25519 keys "ED25519 PRIVATE KEY"; the body is plain PKCS#8.
    ca_pem = base64.b64decode(os_ca["key"]).replace(b"ED25519 PRIVATE KEY", b"PRIVATE KEY")
    ca_key = serialization.load_pem_private_key(ca_pem, None)
    ca_crt = x509.load_pem_x509_certificate(base64.b64decode(os_ca["crt"]))
    key = ed25519.Ed25519PrivateKey.generate()
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(days=400), now - datetime.timedelta(days=35)) if expired else (
        now - datetime.timedelta(hours=1), now + datetime.timedelta(days=365))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "os:admin")]))
        .issuer_name(ca_crt.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
        )
        .sign(ca_key, None)
    )
    cfg = yaml.safe_load(good.read_text())
    context = cfg["contexts"][cfg["context"]]
    context["ca"] = os_ca["crt"]
    context["crt"] = base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()
    context["key"] = base64.b64encode(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    ).decode()
    dest.parent.mkdir(exist_ok=True)
    dest.write_text(yaml.safe_dump(cfg))
    os.chmod(dest, 0o600)


# --- how each case runs ---------------------------------------------------------------------------

def label_patch(case):
    """A change every node accepts without a reboot."""
    return {"talos_cluster_patches": [{"machine": {"nodeLabels": {"fault-case": case}}}]}


def disk_patch(case):
    """A change that makes every node reboot (a new disk mount)."""
    disk = {"device": "/dev/sdb", "partitions": [{"mountpoint": f"/var/mnt/{case}"}]}
    return {"talos_cluster_patches": [{"machine": {"disks": [disk]}}]}


def converge(c, case, reboot=False, **extra):
    return c.site(**(disk_patch(case) if reboot else label_patch(case)), **extra)


def upgrade(c, **extra):
    return c.site(args=["--tags", "upgrade"], talos_upgrade_image=IMAGE, **extra)


def upgrade_with_talosconfig(c, talosconfig):
    """A user's own rolling upgrade with the module and a talosconfig (the roles use the bundle)."""
    play = {
        "name": "Upgrade Talos one node at a time",
        "hosts": "controlplane:worker",
        "gather_facts": False,
        "serial": 1,
        "order": "inventory",
        "tasks": [
            {
                "name": "Upgrade the node",
                "ferro.talos.talos_upgrade": {
                    "node": "{{ ansible_host }}",
                    "image": IMAGE,
                    "talosconfig": str(talosconfig),
                    "timeout": 8,
                },
                "delegate_to": "localhost",
            }
        ],
    }
    return c.ansible.run(yaml.safe_dump([play]), inventory=c.inventory())


def fault(**fields):
    def inject(c, node):
        c.sim.control(op="fault", node=node, **fields)
    return inject


def health_fail(c, node):
    c.sim.control(op="health_fail", text="node talos-w1 is not ready (injected by the fault matrix)")


def no_fault(c, node):
    pass


def next_address(c, node):
    """The node's next reboot brings it up on .77 of its block instead of its own address."""
    c.sim.control(op="fault", node=node, next_address=c.addresses[node].rsplit(".", 1)[0] + ".77")


def health_fails_once_upgraded(c, node):
    """The health gate starts failing as soon as `node` is back on the new Talos: the gate after it fails."""
    def watch():
        while not c.stop_watching.wait(0.05):
            if c.sim.status()[node]["version"] == NEW:
                health_fail(c, node)
                return
    c.watcher = threading.Thread(target=watch, daemon=True)
    c.watcher.start()


# id, phase, what is injected on which node, how the playbook runs, which node's failure is expected,
# which nodes may change (those before the failing one in the rollout, and the failing one itself),
# and words the failure must contain besides the node's address.
CP1, CP2, CP3, W1 = 0, 1, 2, 3
CASES = [
    ("converge-node-unreachable", "converge", fault(unreachable=True), CP2,
     lambda c: converge(c, "unreachable"), set(), ["unreachable", "powered on"]),
    ("converge-reboot-never-returns", "converge", fault(never_return=True), CP2,
     lambda c: converge(c, "never", reboot=True), {CP1, CP2}, ["did not come back", "console"]),
    ("converge-back-on-another-address", "converge", next_address, CP2,
     lambda c: converge(c, "moved", reboot=True), {CP1, CP2}, ["did not come back", "another address"]),
    ("converge-health-gate-fails", "converge", health_fail, CP1,
     lambda c: converge(c, "gate"), {CP1}, ["health check", "failed", "not ready (injected"]),
    ("converge-apply-rejected", "converge", fault(reject_config="machine.nodeLabels: invalid label (injected)"), CP2,
     lambda c: converge(c, "rejected"), {CP1}, ["Talos rejected the configuration", "invalid label"]),
    ("converge-wrong-ca", "converge", no_fault, CP1,
     lambda c: converge(c, "wrong-ca", talos_cluster_secrets_file=str(c.foreign_secrets),
                        talos_cluster_generate_secrets=False),
     set(), ["not signed by the CA in the secrets bundle", "the secrets bundle (secrets_file or secrets) belongs to this cluster"]),
    ("upgrade-etcd-member-down", "upgrade", fault(etcd_down=True), CP3,
     lambda c: upgrade(c), set(), ["etcd", "quorum", "no node was touched"]),
    ("upgrade-reboot-never-returns", "upgrade", fault(never_return=True), CP2,
     lambda c: upgrade(c), {CP1, CP2}, ["did not come back", NEW]),
    ("upgrade-health-gate-fails-after-the-first-node", "upgrade", health_fails_once_upgraded, CP1,
     lambda c: upgrade(c), {CP1}, ["health check", "failed", "not ready (injected"]),
    ("upgrade-node-unreachable", "upgrade", fault(unreachable=True), W1,
     lambda c: upgrade(c), set(), ["unreachable"]),
    ("upgrade-wrong-ca", "upgrade", no_fault, CP1,
     lambda c: upgrade(c, talos_upgrade_secrets_file=str(c.foreign_secrets)), set(), ["not signed by the CA"]),
    ("upgrade-talosconfig-from-another-cluster", "upgrade", no_fault, CP1,
     lambda c: upgrade_with_talosconfig(c, c.foreign_talosconfig), set(), ["not signed by the CA", "talosconfig"]),
    ("upgrade-expired-client-certificate", "upgrade", no_fault, CP1,
     lambda c: upgrade_with_talosconfig(c, c.expired_talosconfig), set(), ["client certificate", "expired"]),
]


def failures(run):
    """(host, task, message) of every failed task result, one per failed loop item."""
    found = []
    for r in run.results:
        if r["status"] not in ("failed", "unreachable"):
            continue
        statuses = r.get("item_statuses", [])
        items = [i for i, status in zip(r["result"].get("results", []), statuses) if status == "failed"]
        for source in items or [r["result"]]:
            found.append((r["host"], r["task"], source.get("msg", "")))
    return found


def leftovers(directory):
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


@pytest.mark.parametrize("case,phase,inject,node,play,touched,words", CASES, ids=[c[0] for c in CASES])
def test_fault(cluster, case, phase, inject, node, play, touched, words):
    c = cluster
    c.heal()
    if phase == "upgrade":
        # Every node a Talos release behind: an upgrade would move each of them.
        for index in c.addresses:
            c.sim.control(op="set_version", node=index, version=OLD)
    address = c.addresses[node]
    before = c.state()
    files_before = c.files()
    inject(c, node)
    try:
        run = play(c)
    finally:
        c.heal()
    # Read after healing: clearing a fault (unreachable, etcd down) changes nothing else on a node, and
    # a node that the run did touch keeps the marks (new boot, config, version).
    after = c.state()

    assert run.rc != 0, run.output
    found = failures(run)
    assert found, f"no task failed:\n{run.output}"
    # The play stops at the first failing task: every failure is from one task on one host.
    assert len({(host, task) for host, task, _ in found}) == 1, found
    messages = [msg for _, _, msg in found]
    named = [m for m in messages if address in m]
    assert named, f"no failure names {address}: {messages}"
    for word in words:
        assert any(word in m for m in named), f"{word!r} not in {named}"
    assert not any("Traceback" in m or "panicked" in m for m in messages), messages

    for index in c.addresses:
        if index not in touched:
            assert after[index] == before[index], f"{c.hosts[index]} was touched: {before[index]} -> {after[index]}"
    if node in touched:
        # The faulty node itself was reached: it is the last one the run touched.
        assert after[node] != before[node]
    assert c.files() == files_before
    assert all(mode == 0o600 for _, mode in c.files().values())
    # Nothing (a rendered config holds secrets) is left in TMPDIR, nor in Ansible's own temp.
    assert leftovers(c.ansible.tmpdir) == []
    assert leftovers(c.workdir / "ansible-home" / "tmp") == []
    print(f"\nMATRIX {case}: {named[0]}")
