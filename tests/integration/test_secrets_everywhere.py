"""No secret anywhere it was not asked for: the whole end-to-end flow, run the way a user runs it (and at
-vvv with --diff), then every byte it produced is searched for every secret of the cluster.

Searched: stdout and stderr of every run, the ANSIBLE_LOG_PATH log, every file under TMPDIR,
ANSIBLE_LOCAL_TEMP and ANSIBLE_REMOTE_TMP (pointed into the test's directory, TMPDIR into a short one of
its own under /tmp: ansible-core 2.21 puts a Unix socket under TMPDIR, and a socket path longer than
107 bytes fails its start), everything else in the
test's directory (playbooks, inventory, the recorded task results, ANSIBLE_HOME), and every file written
since the test started under /tmp, /var/tmp, /dev/shm and ~/.ansible. Only the intended destinations may
hold secrets: the secrets bundle, the talosconfig, the kubeconfig, the config the user asked to render
and the user's vault-style vars file. Secrets are every value of the bundle (raw, base64-decoded PEM,
PEM body lines, token halves; see secrets_scan.py) and the private keys of the talosconfig and of every
kubeconfig issued during the test."""

import json
import os
import pathlib
import shutil
import tempfile
import time

import pytest

import yaml

from conftest import ROOT, Ansible
from secrets_scan import client_key_forms, leaks, secret_forms
from sim_cluster import site_inventory

SITE = ROOT / "examples" / "site.yml"
GLOBAL_DIRS = [pathlib.Path("/tmp"), pathlib.Path("/var/tmp"), pathlib.Path("/dev/shm"), pathlib.Path.home() / ".ansible"]


class ScannedAnsible(Ansible):
    """ansible-playbook with its log and every temporary directory inside the test's directory."""

    def __init__(self, workdir, tmpdir):
        super().__init__(workdir)
        self.log = workdir / "ansible.log"
        self.temp_dirs = {"tmpdir": tmpdir, **{name: workdir / name for name in ("local-tmp", "remote-tmp")}}
        for d in self.temp_dirs.values():
            d.mkdir(exist_ok=True)
        self.runs = []

    def env(self):
        env = super().env()
        env.pop("ANSIBLE_KEEP_REMOTE_FILES", None)
        env.update(
            {
                "ANSIBLE_LOG_PATH": str(self.log),
                "TMPDIR": str(self.temp_dirs["tmpdir"]),
                "ANSIBLE_LOCAL_TEMP": str(self.temp_dirs["local-tmp"]),
                "ANSIBLE_REMOTE_TMP": str(self.temp_dirs["remote-tmp"]),
                "ANSIBLE_REMOTE_TEMP": str(self.temp_dirs["remote-tmp"]),
            }
        )
        return env

    def run(self, *args, **kwargs):
        run = super().run(*args, **kwargs)
        self.runs.append(run)
        return run


def inventory(sim, workdir, **extra):
    cluster = workdir / "cluster"
    return site_inventory(
        sim,
        workdir / "inventory.yml",
        {
            "talos_cluster_name": "secrets",
            "talos_cluster_endpoint": sim.nodes[0]["address"],
            "talos_cluster_kubernetes_version": "1.36.1",
            "talos_cluster_secrets_file": str(cluster / "secrets.yaml"),
            "talos_cluster_generate_secrets": True,
            "talos_cluster_talosconfig": str(cluster / "talosconfig"),
            "talos_cluster_kubeconfig": str(cluster / "kubeconfig"),
            "talos_cluster_health_timeout": 30,
            **extra,
        },
    )


RENDER = """
- name: Render the control plane's config for review
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Render it
      ferro.talos.talos_config:
        secrets_file: "{{ talos_cluster_secrets_file }}"
        machine_type: controlplane
        cluster_name: "{{ talos_cluster_name }}"
        cluster_endpoint: "https://{{ talos_cluster_endpoint }}:6443"
        dest: "{{ playbook_dir }}/rendered/controlplane.yaml"
"""


def files_under(root, since=None, skip=()):
    """Regular files under root (modified at or after `since`, if given), except those in `skip`."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: None):
        here = pathlib.Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in filenames:
            path = here / name
            if path in skip or not path.is_file() or path.is_symlink():
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            if since is not None and st.st_mtime < since:
                continue
            if st.st_size > 64 * 1024 * 1024:
                continue
            found.append(path)
    return found


def read(path):
    try:
        return path.read_bytes().decode("latin-1")
    except OSError:
        return ""


@pytest.fixture
def short_tmpdir():
    path = pathlib.Path(tempfile.mkdtemp(prefix="ferro-scan-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_no_secret_outside_its_destinations(sim_factory, tmp_path, short_tmpdir):
    started = time.time() - 1
    sim = sim_factory(control_planes=1, workers=1, version="v1.13.4")
    ansible = ScannedAnsible(tmp_path, short_tmpdir)
    cluster = tmp_path / "cluster"
    site = SITE.read_text()
    kubeconfigs = []
    loud = {"diff": True, "verbosity": 3}

    # 1. A fresh cluster: secrets generated, every node configured, etcd bootstrapped, kubeconfig written.
    inv = inventory(sim, tmp_path)
    first = ansible.run(site, inventory=inv, **loud)
    assert first.rc == 0, first.output
    kubeconfigs.append((cluster / "kubeconfig").read_text())

    # 2. The user asks for a rendered config to review (an intended destination).
    (tmp_path / "rendered").mkdir()
    rendered = ansible.run(RENDER, inventory=inv, **loud)
    assert rendered.rc == 0, rendered.output

    # 3. A second converge with the bundle from a vault-style variable instead of the file, and the
    #    kubeconfig issued again.
    vault = tmp_path / "vault.yml"
    vault.write_text(yaml.safe_dump({
        "talos_cluster_secrets": yaml.safe_load((cluster / "secrets.yaml").read_text()),
        "talos_cluster_secrets_file": "",
        "talos_cluster_generate_secrets": False,
    }))
    (cluster / "kubeconfig").unlink()
    second = ansible.run(site, inventory=inv, args=["-e", f"@{vault}"], **loud)
    assert second.rc == 0, second.output
    assert not [r for r in second.results if r["result"].get("changed") and "Apply" in r["task"]]
    kubeconfigs.append((cluster / "kubeconfig").read_text())

    # 4. A check run with nothing to change, and 5. one with a patch change that shows its diff.
    check = ansible.run(site, inventory=inv, check=True, **loud)
    assert check.rc == 0, check.output
    patched = inventory(sim, tmp_path, talos_cluster_patches=[{"machine": {"nodeLabels": {"tier": "gold"}}}])
    patch = ansible.run(site, inventory=patched, check=True, **loud)
    assert patch.rc == 0, patch.output
    assert "tier: gold" in patch.stdout

    # 6. The upgrade role under --check: Talos and Kubernetes, every node asked.
    upgrade = ansible.run(
        site, inventory=inventory(sim, tmp_path), check=True,
        extra_vars={"talos_upgrade_image": "ghcr.io/siderolabs/installer:v1.13.6",
                    "talos_upgrade_kubernetes_version": "1.36.2"},
        args=["--tags", "upgrade"], **loud,
    )
    assert upgrade.rc == 0, upgrade.output
    assert "would upgrade v1.13.4 -> v1.13.6" in upgrade.stdout
    assert all(n["version"] == "v1.13.4" for n in sim.status())

    # Every secret, in every form.
    bundle_forms = secret_forms((cluster / "secrets.yaml").read_text())
    key_forms = client_key_forms((cluster / "talosconfig").read_text())
    for text in kubeconfigs:
        key_forms |= client_key_forms(kubeconfig_text=text)
    forms = bundle_forms | key_forms

    # The scan can see: the intended destinations hold what it looks for, in the forms it looks for.
    controlplane = (tmp_path / "rendered" / "controlplane.yaml").read_text()
    assert len(leaks(controlplane, bundle_forms)) >= 8, leaks(controlplane, bundle_forms)
    assert leaks((cluster / "talosconfig").read_text(), key_forms)
    assert leaks((cluster / "kubeconfig").read_text(), key_forms)
    os_key_pem = next(f for f in bundle_forms if f.startswith("-----BEGIN ED25519"))
    assert leaks(json.dumps({"msg": os_key_pem}), forms), "a JSON-escaped PEM must be found"
    # ... and it had plenty to read: -vvv output with module results, a log of every run.
    output = "".join(r.output for r in ansible.runs)
    assert len(output) > 150_000, len(output)
    assert ansible.log.stat().st_size > 100_000

    intended = {
        cluster / "secrets.yaml", cluster / "talosconfig", cluster / "kubeconfig",
        tmp_path / "rendered" / "controlplane.yaml", vault,
    }
    found = {}
    for i, run in enumerate(ansible.runs, 1):
        for name, text in (("stdout", run.stdout), ("stderr", run.stderr)):
            hits = leaks(text, forms)
            if hits:
                found[f"run {i} {name}"] = hits
    scanned = files_under(tmp_path, skip=intended) + files_under(short_tmpdir)
    for root in GLOBAL_DIRS:
        scanned += files_under(root, since=started, skip={tmp_path, short_tmpdir})
    for path in scanned:
        hits = leaks(read(path), forms)
        if hits:
            found[str(path)] = hits
    assert ansible.log in scanned and (tmp_path / "results1.jsonl") in scanned
    assert found == {}, {where: [h[:12] + "..." for h in hits] for where, hits in found.items()}
    size = sum(p.stat().st_size for p in scanned if p.exists())
    print(f"\nSCAN {len(forms)} forms; {len(ansible.runs)} runs, {len(output)} bytes of output; "
          f"{len(scanned)} files, {size} bytes; log {ansible.log.stat().st_size} bytes")

    # Nothing was left behind in the temporary directories, decrypted or not.
    for name, d in ansible.temp_dirs.items():
        assert [str(p.relative_to(d)) for p in d.rglob("*")] == [], f"left in {name}"
