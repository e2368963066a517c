"""talos_config through real ansible-playbook runs against the installed collection."""

import os
import stat
import subprocess

import pytest
import yaml

from secrets_scan import leaks, secret_forms

STABILITY = "v1.13.6/stability-secrets.yaml"


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def play(tasks, check_mode=None):
    """A one-play playbook on localhost with the given tasks (YAML text, indented 4 spaces)."""
    return f"""
- hosts: localhost
  gather_facts: false
  tasks:
{tasks}
"""


def golden_task(fixtures, dest, contract, machine_type, overrides):
    extra = ""
    if overrides:
        extra = f"""
        additional_sans: [foo, bar]
        allow_scheduling_on_control_planes: true
        dns_domain: example.com
        install_disk: /dev/vda
        registry_mirrors:
          ghcr.io: https://ghcr.io.my-mirror.com
        validate: false
        install_extra_kernel_args: [foo=bar, bar=baz]
        local_api_server_port: 5443
        patches:
          - machine:
              sysctls:
                foo: bar
            cluster:
              network:
                cni:
                  name: custom
                  urls: [https://example.com/cni.yaml]
          - "@{fixtures}/v1.13.6/stability-patch.yaml"
"""
    else:
        extra = """
        install_disk: ""
        validate: false
"""
    return f"""
    - name: render {machine_type} {contract}
      ferro.talos.talos_config:
        secrets_file: {fixtures}/{STABILITY}
        machine_type: {machine_type}
        cluster_name: base
        cluster_endpoint: https://base:6443
        kubernetes_version: 1.28.0
        talos_version: {contract}
        install_image: ""
        dest: {dest}{extra}"""


@pytest.mark.parametrize(
    "contract,machine_type,variant",
    [
        ("v1.11", "controlplane", "base"),
        ("v1.12", "controlplane", "base"),
        ("v1.13", "controlplane", "base"),
        ("v1.13", "worker", "base"),
        ("v1.13", "controlplane", "overrides"),
        ("v1.13", "worker", "overrides"),
    ],
)
def test_golden_parity_through_ansible(ansible, fixtures, tmp_path, contract, machine_type, variant):
    dest = tmp_path / "out.yaml"
    task = golden_task(fixtures, dest, contract, machine_type, variant == "overrides")
    run = ansible.run(play(task))
    assert run.rc == 0, run.output
    golden = fixtures / "v1.13.6" / f"stability-{contract}-{variant}-{machine_type}.yaml"
    assert dest.read_text() == golden.read_text()
    assert mode_of(dest) == 0o600
    result = run.task(f"render {machine_type} {contract}")["result"]
    assert result["changed"] is True
    assert len(result["config_sha256"]) == 64


def test_second_run_is_unchanged_and_check_mode_writes_nothing(ansible, sample, tmp_path):
    dest = tmp_path / "cp.yaml"
    talosconfig = tmp_path / "talosconfig"
    tasks = f"""
    - name: render
      ferro.talos.talos_config:
        secrets_file: {sample.secrets}
        machine_type: controlplane
        cluster_name: demo
        cluster_endpoint: https://10.5.0.10:6443
        patches:
          - machine:
              disks:
                - device: /dev/sdb
                  partitions:
                    - mountpoint: /var/mnt/data
        dest: {dest}
        talosconfig: {talosconfig}
        endpoints: [10.5.0.2, 10.5.0.3]
"""
    check = ansible.run(play(tasks), check=True, diff=True)
    assert check.rc == 0, check.output
    assert check.task("render")["result"]["changed"] is True
    assert not dest.exists() and not talosconfig.exists(), "check mode must not write"

    first = ansible.run(play(tasks))
    assert first.rc == 0, first.output
    assert first.task("render")["result"]["changed"] is True
    assert mode_of(dest) == 0o600 and mode_of(talosconfig) == 0o600
    config_before = dest.read_text()
    talosconfig_before = talosconfig.read_text()

    second = ansible.run(play(tasks), diff=True)
    assert second.rc == 0, second.output
    result = second.task("render")["result"]
    assert result["changed"] is False, result
    assert result["talosconfig_changed"] is False
    assert "valid" in result["talosconfig_reason"]
    # Rendering from a pristine base: the patch's disk is there exactly once after two runs.
    assert dest.read_text() == config_before
    assert talosconfig.read_text() == talosconfig_before
    cfg = list(yaml.safe_load_all(config_before))[0]
    assert [d["device"] for d in cfg["machine"]["disks"]] == ["/dev/sdb"]

    check_again = ansible.run(play(tasks), check=True, diff=True)
    assert check_again.rc == 0
    assert check_again.recap()["changed"] == 0

    tc = yaml.safe_load(talosconfig_before)
    assert tc["context"] == "demo"
    assert tc["contexts"]["demo"]["endpoints"] == ["10.5.0.2", "10.5.0.3"]


def test_talosconfig_is_reissued_near_expiry_and_for_another_ca(ansible, sample, tmp_path):
    talosconfig = tmp_path / "talosconfig"
    base = f"""
    - name: talosconfig
      ferro.talos.talos_config:
        secrets_file: "{{{{ secrets }}}}"
        cluster_name: demo
        talosconfig: {talosconfig}
        talosconfig_renew_before: "{{{{ renew }}}}"
"""
    stability = str(sample.secrets)
    run = ansible.run(play(base), extra_vars={"secrets": stability, "renew": 30})
    assert run.rc == 0, run.output
    first = talosconfig.read_text()

    # The admin certificate lives 365 days: asking for 400 days of headroom forces a new one.
    run = ansible.run(play(base), extra_vars={"secrets": stability, "renew": 400})
    assert run.rc == 0, run.output
    result = run.task("talosconfig")["result"]
    assert result["changed"] is True and result["talosconfig_changed"] is True
    assert "expire" in result["talosconfig_reason"]
    assert talosconfig.read_text() != first

    # A bundle with another CA: the existing certificate no longer matches it.
    other = sample.other_secrets
    run = ansible.run(play(base), extra_vars={"secrets": str(other), "renew": 30})
    assert run.rc == 0, run.output
    result = run.task("talosconfig")["result"]
    assert result["talosconfig_changed"] is True
    assert "CA" in result["talosconfig_reason"] or "signed" in result["talosconfig_reason"]


def test_generate_secrets_only_when_missing(ansible, tmp_path):
    secrets = tmp_path / "sub" / "secrets.yaml"
    tasks = f"""
    - name: bundle
      ferro.talos.talos_config:
        secrets_file: {secrets}
        generate_secrets: true
"""
    check = ansible.run(play(tasks), check=True)
    assert check.rc == 0, check.output
    assert check.task("bundle")["result"]["secrets_generated"] is True
    assert not secrets.exists()

    run = ansible.run(play(tasks))
    assert run.rc == 0, run.output
    assert run.task("bundle")["result"]["secrets_generated"] is True
    assert mode_of(secrets) == 0o600
    bundle = yaml.safe_load(secrets.read_text())
    assert set(bundle) == {"cluster", "secrets", "trustdinfo", "certs"}
    content = secrets.read_text()

    again = ansible.run(play(tasks))
    assert again.rc == 0
    assert again.task("bundle")["result"]["changed"] is False
    assert secrets.read_text() == content, "an existing bundle is never replaced"
    # Nothing from the new bundle may reach the output.
    forms = secret_forms(content)
    assert leaks(run.output + again.output + check.output, forms) == []


def test_missing_secrets_fail_without_generating(ansible, tmp_path):
    secrets = tmp_path / "secrets.yaml"
    dest = tmp_path / "cp.yaml"
    tasks = f"""
    - name: render
      ferro.talos.talos_config:
        secrets_file: {secrets}
        machine_type: controlplane
        cluster_name: demo
        cluster_endpoint: https://10.5.0.10:6443
        dest: {dest}
"""
    run = ansible.run(play(tasks))
    assert run.rc != 0
    msg = run.task("render")["result"]["msg"]
    assert "does not exist" in msg and "generate_secrets" in msg
    assert not secrets.exists() and not dest.exists()


def test_secrets_from_a_vault_style_variable(ansible, sample, tmp_path):
    dest = tmp_path / "w.yaml"
    tasks = f"""
    - name: render
      ferro.talos.talos_config:
        secrets: "{{{{ lookup('file', '{sample.secrets}') | from_yaml }}}}"
        machine_type: worker
        cluster_name: base
        cluster_endpoint: https://base:6443
        kubernetes_version: 1.28.0
        install_disk: ""
        install_image: ""
        validate: false
        dest: {dest}
"""
    run = ansible.run(play(tasks), verbosity=3)
    assert run.rc == 0, run.output
    assert dest.read_text() == sample.worker.read_text()
    forms = secret_forms((sample.secrets).read_text())
    assert leaks(run.output, forms) == []
    assert leaks(repr(run.results), forms) == []


def test_changed_patch_diff_shows_the_key_path_and_no_secret(ansible, sample, tmp_path):
    dest = tmp_path / "cp.yaml"
    tasks = f"""
    - name: render
      ferro.talos.talos_config:
        secrets_file: {sample.secrets}
        machine_type: controlplane
        cluster_name: demo
        cluster_endpoint: https://10.5.0.10:6443
        install_image: "{{{{ image }}}}"
        patches:
          - cluster:
              extraManifests: "{{{{ manifests }}}}"
        dest: {dest}
"""
    old = {
        "image": "ghcr.io/siderolabs/installer:v1.13.4",
        "manifests": ["https://example.com/approver.yaml", "https://example.com/metrics.yaml"],
    }
    assert ansible.run(play(tasks), extra_vars=old).rc == 0
    new = {"image": "ghcr.io/siderolabs/installer:v1.13.6", "manifests": []}
    run = ansible.run(play(tasks), extra_vars=new, check=True, diff=True, verbosity=3)
    assert run.rc == 0, run.output
    result = run.task("render")["result"]
    assert result["changed"] is True
    assert "machine.install.image" in result["changed_paths"]
    assert "cluster.extraManifests" in result["changed_paths"]
    risky = {r["path"] for r in result["risky_changes"]}
    assert "cluster.extraManifests" in risky
    assert "machine.install.image" in risky
    assert "+        image: ghcr.io/siderolabs/installer:v1.13.6" in run.stdout
    forms = secret_forms((sample.secrets).read_text())
    assert leaks(run.output, forms) == []
    assert leaks(repr(run.results), forms) == []
    assert "******" in run.stdout


def test_patch_an_existing_config(ansible, sample, tmp_path):
    base = sample.worker
    dest = tmp_path / "patched.yaml"
    tasks = f"""
    - name: patch
      ferro.talos.talos_config:
        base_config: {base}
        patches:
          - machine:
              install:
                disk: /dev/nvme0n1
              nodeLabels:
                role: storage
          - |
            apiVersion: v1alpha1
            kind: HostnameConfig
            auto: "off"
            hostname: worker-1
        dest: {dest}
"""
    run = ansible.run(play(tasks))
    assert run.rc == 0, run.output
    docs = list(yaml.safe_load_all(dest.read_text()))
    assert docs[0]["machine"]["nodeLabels"] == {"role": "storage"}
    assert docs[0]["machine"]["install"]["disk"] == "/dev/nvme0n1"
    assert docs[1] == {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "off", "hostname": "worker-1"}
    again = ansible.run(play(tasks))
    assert again.task("patch")["result"]["changed"] is False


BAD_INPUTS = [
    ("unknown option", {"secrets_file": "{s}", "colour": "blue"}, "Unsupported parameters"),
    ("bad machine_type", {"secrets_file": "{s}", "machine_type": "master", "dest": "{d}"}, "machine_type"),
    ("bad contract", {"secrets_file": "{s}", "talos_version": "v0.9", "dest": "{d}", "machine_type": "worker"}, "talos_version"),
    ("http endpoint", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "http://x:6443", "dest": "{d}"}, "https"),
    ("missing endpoint", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "dest": "{d}"}, "cluster_endpoint"),
    ("broken patch", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "patches": ["machine: [unclosed"]}, "patches[0]"),
    ("json patch on multi-doc", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "patches": [[{"op": "add", "path": "/machine/certSANs/-", "value": "a"}]]}, "multi-document"),
    ("missing patch file", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "patches": ["@/nonexistent/patch.yaml"]}, "cannot read patch file"),
    ("both secrets sources", {"secrets_file": "{s}", "secrets": {"cluster": {}}, "dest": "{d}", "machine_type": "worker"}, "mutually exclusive"),
    ("malformed secrets dict", {"secrets": {"cluster": {"id": "x"}}, "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}"}, "secrets"),
    ("base_config with machine_type", {"base_config": "{s}", "machine_type": "worker", "dest": "{d}"}, "mutually exclusive"),
    ("negative renew window", {"secrets_file": "{s}", "cluster_name": "x", "talosconfig": "{d}", "talosconfig_renew_before": -1}, "talosconfig_renew_before"),
    ("renew window not a number", {"secrets_file": "{s}", "cluster_name": "x", "talosconfig": "{d}", "talosconfig_renew_before": "soon"}, "talosconfig_renew_before"),
    ("patches not a list of patches", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "patches": [42]}, "patches[0]"),
    ("invalid rendered config", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "patches": [{"persist": False}]}, "not valid"),
    ("dest without a config", {"secrets_file": "{s}", "dest": "{d}"}, "machine_type"),
    ("delete on a missing path", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "patches": [{"machine": {"network": {"hostname": {"$patch": "delete"}}}}]}, "patches"),
    ("truncated secrets file", {"secrets_file": "{truncated}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}"}, "secrets_file"),
    ("corrupt secrets file", {"secrets_file": "{corrupt}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}"}, "secrets_file"),
    ("unwritable dest", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{blocker}/cp.yaml"}, "cannot"),
    ("machine_type wrong type", {"secrets_file": "{s}", "machine_type": ["worker"], "dest": "{d}"}, "machine_type"),
    ("additional_sans wrong type", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "additional_sans": {"a": 1}}, "additional_sans"),
    ("bad kubernetes_version", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "kubernetes_version": "latest"}, "kubernetes_version"),
    ("placeholder install image", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "install_image": "factory.talos.dev/installer/<schematic>:v1.13.6"}, "install_image: \"factory.talos.dev/installer/<schematic>:v1.13.6\" holds a placeholder"),
    ("install image not a reference", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "install_image": "ghcr.io/SideroLabs/installer:v1.13.9"}, "install_image"),
    # Talos decodes a patch strictly (configloader/internal/decoder/decoder.go, configpatcher/load.go at v1.13.9).
    ("typo in a patch", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "patches": [{"machine": {"kubelet": {"extraArgz": {"v": "2"}}}}]}, "patches[0]: document 1: unknown keys found during decoding: machine.kubelet.extraArgz (did you mean machine.kubelet.extraArgs?)"),
    ("unknown document kind in a patch", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "patches": ["apiVersion: v1alpha1\nkind: HostnameConfg\nhostname: a\n"]}, "unknown document kind \"HostnameConfg\" (did you mean HostnameConfig?)"),
    ("registry mirror not a URL string", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "registry_mirrors": {"ghcr.io": 5}}, "registry_mirrors"),
    # Talos 1.14.1's decoder refuses a null item in a list of pointers (xyaml.CheckNullElements,
    # siderolabs/gen v0.8.8, called from configloader/internal/decoder/decoder.go @ v1.14.1).
    ("empty list item in a 1.14 patch", {"secrets_file": "{s}", "machine_type": "worker", "cluster_name": "x", "cluster_endpoint": "https://x:6443", "dest": "{d}", "talos_version": "v1.14", "patches": ["machine:\n  network:\n    interfaces:\n      - interface: eth0\n        routes:\n          -\n"]}, "patches[0]: null value is not allowed at \"machine.network.interfaces[0].routes[0]\""),
]


@pytest.mark.parametrize("name,args,expected", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_fails_clearly_and_writes_nothing(ansible, sample, tmp_path, name, args, expected):
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "dest.yaml"

    good = (sample.secrets).read_text()
    truncated = tmp_path / "truncated.yaml"
    truncated.write_text(good[: len(good) // 2])
    corrupt = tmp_path / "corrupt.yaml"
    # The base64 of "-----BEGIN EC PRIVATE KEY-----", the start of every EC key field.
    ec_key = "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0t"
    assert ec_key in good
    corrupt.write_text(good.replace(ec_key, "not base64 at all!!", 1))
    # The tests run as root, which ignores directory permissions: a file where the parent
    # directory should be makes dest unwritable for anyone.
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory\n")

    def fill(value):
        if isinstance(value, str):
            for key, path in (("{truncated}", truncated), ("{corrupt}", corrupt), ("{blocker}", blocker)):
                value = value.replace(key, str(path))
            return value.replace("{s}", str(sample.secrets)).replace("{d}", str(dest))
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    task = {"name": "bad", "ferro.talos.talos_config": fill(args)}
    playbook = yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}])
    run = ansible.run(playbook)
    assert run.rc != 0
    entry = run.task("bad")
    assert entry["status"] == "failed"
    result = entry["result"]
    assert expected in result["msg"], result["msg"]
    assert "panicked" not in run.output and "internal error" not in result["msg"]
    assert list(out.iterdir()) == [], "a failed task must not leave files behind"
    assert blocker.read_text() == "a file, not a directory\n"


def test_return_content_masks_secrets(ansible, sample, tmp_path):
    tasks = f"""
    - name: render
      ferro.talos.talos_config:
        secrets_file: {sample.secrets}
        machine_type: controlplane
        cluster_name: demo
        cluster_endpoint: https://10.5.0.10:6443
        return_content: true
"""
    run = ansible.run(play(tasks), verbosity=1)
    assert run.rc == 0, run.output
    config = run.task("render")["result"]["config"]
    assert "clusterName: demo" in config
    forms = secret_forms((sample.secrets).read_text())
    assert leaks(config, forms) == [] and leaks(run.output, forms) == []
    assert "********" in config


def test_a_full_release_picks_its_own_installer(ansible, sample, tmp_path):
    """talosctl writes its own release tag as the installer (v1.13.9 writes installer:v1.13.9, with Kubernetes
    1.36.3 from pkg/machinery/constants/constants.go at v1.13.9). A full talos_version does the same, so a config
    for nodes booted from v1.13.4 media never points them at another release by a default."""

    def render(name, **options):
        dest = tmp_path / f"{name}.yaml"
        tasks = f"""
    - name: render
      ferro.talos.talos_config:
        secrets_file: {sample.secrets}
        machine_type: worker
        cluster_name: demo
        cluster_endpoint: https://10.5.0.10:6443
        dest: {dest}
{"".join(f"        {k}: {v}{chr(10)}" for k, v in options.items())}"""
        run = ansible.run(play(tasks))
        assert run.rc == 0, run.output
        return yaml.safe_load_all(dest.read_text()).__next__()["machine"]

    assert render("contract")["install"]["image"] == "ghcr.io/siderolabs/installer:v1.13.9"
    assert render("contract")["kubelet"]["image"] == "ghcr.io/siderolabs/kubelet:v1.36.3"
    assert render("release", talos_version="v1.13.4")["install"]["image"] == "ghcr.io/siderolabs/installer:v1.13.4"
    assert render("bare", talos_version="1.12.5")["install"]["image"] == "ghcr.io/siderolabs/installer:v1.12.5"
    explicit = render("explicit", talos_version="v1.13.4", install_image="registry.example/installer:v1.13.5")
    assert explicit["install"]["image"] == "registry.example/installer:v1.13.5"


ENDPOINT_FORMS = [
    ("127.0.10.1", "https://127.0.10.1:6443"),
    ("127.0.10.1:6443", "https://127.0.10.1:6443"),
    ("fd00::10", "https://[fd00::10]:6443"),
    ("[fd00::10]", "https://[fd00::10]:6443"),
    ("[fd00::10]:6443", "https://[fd00::10]:6443"),
    ("k8s.example.com", "https://k8s.example.com:6443"),
    ("https://10.0.0.10:6443", "https://10.0.0.10:6443"),
    ("https://lb.example.com", "https://lb.example.com"),
]


@pytest.mark.parametrize("given,written", ENDPOINT_FORMS, ids=[f[0] for f in ENDPOINT_FORMS])
def test_every_endpoint_form_is_read_once_in_the_module(ansible, sample, tmp_path, given, written):
    """Users write the endpoint as an address, address:port, bracketed or bare IPv6, or a URL; each becomes one
    https URL (before, `127.0.10.1:6443` became `https://127.0.10.1:6443:6443` in the role)."""
    dest = tmp_path / "w.yaml"
    tasks = f"""
    - name: render
      ferro.talos.talos_config:
        secrets_file: {sample.secrets}
        machine_type: worker
        cluster_name: demo
        cluster_endpoint: "{given}"
        dest: {dest}
"""
    run = ansible.run(play(tasks))
    assert run.rc == 0, run.output
    cfg = next(yaml.safe_load_all(dest.read_text()))
    assert cfg["cluster"]["controlPlane"]["endpoint"] == written
    warnings = run.task("render")["result"].get("warnings", [])
    # Only a URL without a port is worth a word: clients then use 443, not the API server's 6443.
    assert any("names no port" in w for w in warnings) == (written == "https://lb.example.com"), warnings


def test_a_vault_encrypted_secrets_file_is_decrypted_on_the_controller(ansible, sample, tmp_path):
    """A module never sees the vault password; the collection's action plugin decrypts a vault-encrypted secrets_file
    on the controller, in memory, with the password given to ansible-playbook. Without one it says what to give;
    the unvault lookup, the way that works anywhere, works too."""
    password = tmp_path / "vault-password"
    password.write_text("correct horse battery staple\n")
    encrypted = tmp_path / "secrets.vault.yaml"
    encrypted.write_text(sample.secrets.read_text())
    vault = subprocess.run(
        [str(ansible.bin / "ansible-vault"), "encrypt", "--vault-password-file", str(password), str(encrypted)],
        env=ansible.env(), capture_output=True, text=True,
    )
    assert vault.returncode == 0, vault.stderr
    assert encrypted.read_text().startswith("$ANSIBLE_VAULT;")

    dest = tmp_path / "w.yaml"
    direct = f"""
    - name: render
      ferro.talos.talos_config:
        secrets_file: {encrypted}
        machine_type: worker
        cluster_name: demo
        cluster_endpoint: 10.5.0.10
        dest: {dest}
"""
    run = ansible.run(play(direct))
    assert run.rc != 0
    msg = run.task("render")["result"]["msg"]
    assert "is encrypted with Ansible Vault and could not be decrypted" in msg, msg
    assert "--ask-vault-pass or --vault-password-file" in msg, msg
    assert not dest.exists()

    run = ansible.run(play(direct), diff=True, verbosity=3, args=["--vault-password-file", str(password)])
    assert run.rc == 0, run.output
    assert dest.exists()
    assert leaks(run.output, secret_forms(sample.secrets.read_text())) == []
    assert encrypted.read_text().startswith("$ANSIBLE_VAULT;"), "the vault file must stay encrypted"
    dest.unlink()

    advised = f"""
    - name: render
      ferro.talos.talos_config:
        secrets: "{{{{ lookup('ansible.builtin.unvault', '{encrypted}') | from_yaml }}}}"
        machine_type: worker
        cluster_name: demo
        cluster_endpoint: 10.5.0.10
        dest: {dest}
"""
    run = ansible.run(play(advised), args=["--vault-password-file", str(password)])
    assert run.rc == 0, run.output
    assert dest.exists()
    assert leaks(run.output, secret_forms(sample.secrets.read_text())) == []


OLD_SHAPE = {"machine": {"nodeLabels": {"rack": "r1"}, "kubelet": {"extraArgs": {"max-pods": "150"}}},
             "cluster": {"proxy": {"disabled": True}}}


def render_task(sample, dest, talos_version, patches, name="render", **extra):
    task = {"name": name, "ferro.talos.talos_config": {
        "secrets_file": str(sample.secrets), "machine_type": "controlplane", "cluster_name": "shape",
        "cluster_endpoint": "https://10.0.0.1:6443", "talos_version": talos_version, "patches": patches,
        "dest": str(dest), **extra}}
    return yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}])


def test_patches_in_the_old_shape_warn_for_1_13_and_convert_for_1_14(ansible, sample, tmp_path):
    """Talos 1.14 moves .machine.nodeLabels, .machine.kubelet and .cluster.proxy into KubeNodeConfig, KubeletConfig and
    KubeProxyConfig (hack/release.toml, pkg/machinery/config/types/v1alpha1/v1alpha1_types.go Deprecated: notes at
    v1.14.0-rc.1), and its conflict checks refuse the old fields beside them (types/k8s/node.go, kubelet.go, proxy.go)."""
    # 1.13: rendered as written, each field a warning naming where it moves.
    run = ansible.run(render_task(sample, tmp_path / "v13.yaml", "v1.13", [OLD_SHAPE]))
    assert run.rc == 0, run.output
    result = run.task("render")["result"]
    assert result["contract"] == "v1.13" and result["contract_reason"] == "talos_version is v1.13"
    moved = {r["path"]: r["to"] for r in result["deprecated_for_1_14"]}
    assert moved == {".machine.nodeLabels": "KubeNodeConfig.labels",
                     ".machine.kubelet.extraArgs": "KubeletConfig.extraArgs",
                     ".cluster.proxy.disabled": "KubeProxyConfig.enabled (inverted)"}, moved
    assert "for 1.14 it must be written as those documents" in run.output
    # 1.14: refused, showing the same settings as 1.14 documents; nothing written.
    dest = tmp_path / "v14.yaml"
    run = ansible.run(render_task(sample, dest, "v1.14", [OLD_SHAPE]))
    assert run.rc != 0
    msg = run.task("render")["result"]["msg"]
    assert "written for the config shape before Talos 1.14" in msg and "convert_patches: true" in msg, msg
    shown = msg.split("convert it on every run:\n", 1)[1]
    assert not dest.exists()
    # The form the message shows, written by hand, renders the same bytes as the automatic conversion.
    run = ansible.run(render_task(sample, tmp_path / "by-hand.yaml", "v1.14", [shown]))
    assert run.rc == 0, run.output
    run = ansible.run(render_task(sample, dest, "v1.14", [OLD_SHAPE], convert_patches=True))
    assert run.rc == 0, run.output
    result = run.task("render")["result"]
    assert {r["path"] for r in result["converted_patches"]} == set(moved)
    assert dest.read_text() == (tmp_path / "by-hand.yaml").read_text()
    text = dest.read_text()
    assert "kind: KubeNodeConfig" in text and "rack: r1" in text and "nodeLabels" not in text
