"""Adopting a cluster that already exists: talos_config's `secrets_from_controlplane_config` recovers the
secrets bundle from the control plane's config (as `talosctl gen secrets --from-controlplane-config`), and a
node converged from the recovered bundle has nothing to do, through ansible-playbook against talos-sim."""

import re
import shlex
import stat
import subprocess

import yaml

from conftest import ROOT
from secrets_scan import leaks, secret_forms


def play(tasks):
    return yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}])


def render_options(node):
    return {
        "machine_type": "controlplane",
        "cluster_name": "adopted",
        "cluster_endpoint": f"https://{node}:6443",
        "talos_version": "v1.13",
        "install_disk": "/dev/vda",
    }


def adopt(ansible, secrets, controlplane, check=False, diff=False, args=(), **extra):
    task = {"name": "adopt", "ferro.talos.talos_config": {
        "secrets_file": str(secrets), "secrets_from_controlplane_config": str(controlplane), **extra}}
    return ansible.run(play([task]), check=check, diff=diff, args=args)


def apply_rendered(ansible, node, secrets, check=False, diff=False):
    task = {"name": "apply", "ferro.talos.talos_apply": {
        "node": node, "secrets_file": str(secrets), "render": render_options(node)}}
    return ansible.run(play([task]), check=check, diff=diff)


def test_a_cluster_is_adopted_from_its_controlplane_config(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    node = sim.nodes[0]["address"]
    secrets = tmp_path / "secrets.yaml"
    controlplane = tmp_path / "controlplane.yaml"
    made = ansible.run(play([{"name": "render", "ferro.talos.talos_config": {
        "secrets_file": str(secrets), "generate_secrets": True, "dest": str(controlplane), **render_options(node)}}]))
    assert made.rc == 0, made.output
    # The cluster runs, configured from the original bundle.
    configured = apply_rendered(ansible, node, secrets)
    assert configured.rc == 0 and configured.task("apply")["result"]["changed"], configured.output
    original = secrets.read_bytes()
    forms = secret_forms(original.decode())
    secrets.unlink()

    check = adopt(ansible, secrets, controlplane, check=True, diff=True)
    assert check.rc == 0, check.output
    result = check.task("adopt")["result"]
    assert result["changed"] and result["secrets_derived"] and not result["secrets_generated"], result
    assert result["msg"] == f"would write the secrets bundle derived from {controlplane} to {secrets}", result
    assert not secrets.exists(), "check mode wrote the bundle"

    real = adopt(ansible, secrets, controlplane)
    assert real.rc == 0, real.output
    assert real.task("adopt")["result"]["changed"] and real.task("adopt")["result"]["secrets_derived"]
    assert secrets.read_bytes() == original, "the derived bundle is the original, byte for byte"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600

    again = adopt(ansible, secrets, controlplane, check=True, diff=True)
    assert again.rc == 0, again.output
    assert again.task("adopt")["result"]["changed"] is False, again.output
    assert again.task("adopt")["result"]["secrets_derived"] is False

    # A node configured from the original has nothing to do when converged from the derived bundle.
    converge = apply_rendered(ansible, node, secrets, check=True, diff=True)
    assert converge.rc == 0, converge.output
    assert converge.task("apply")["result"]["changed"] is False, converge.task("apply")["result"]["msg"]

    for run in (check, real, again, converge):
        assert leaks(run.output, forms) == []
    assert sorted(p.name for p in (tmp_path / "ansible-home" / "tmp").rglob("*")) == []


def test_bad_input_fails_naming_the_option_and_what_to_give(ansible, sample, tmp_path):
    secrets = tmp_path / "secrets.yaml"
    not_yaml = tmp_path / "not-yaml.yaml"
    not_yaml.write_text("machine: [unclosed\n")
    other = tmp_path / "other.yaml"
    other.write_bytes(sample.other_secrets.read_bytes())
    cases = [
        # (what is wrong, the adopt task's files and options, words the failure must say)
        ("a worker's config", (secrets, sample.worker, {}),
         ["secrets_from_controlplane_config", str(sample.worker),
          "a worker config holds no CA keys; use the control plane's config"]),
        ("not YAML", (secrets, not_yaml, {}),
         ["secrets_from_controlplane_config", "not a machine config", "controlplane.yaml"]),
        ("no such file", (secrets, tmp_path / "nowhere.yaml", {}),
         ["secrets_from_controlplane_config", "does not exist", "controlplane.yaml"]),
        ("another cluster's bundle in secrets_file", (other, sample.controlplane, {}),
         [str(other), str(sample.controlplane), "never overwritten", "certs.os.key"]),
        ("with generate_secrets", (secrets, sample.controlplane, {"generate_secrets": True}),
         ["mutually exclusive", "secrets_from_controlplane_config", "generate_secrets"]),
    ]
    forms = secret_forms(sample.secrets.read_text()) | secret_forms(sample.other_secrets.read_text())
    for what, (bundle, config, extra), words in cases:
        for check in (True, False):
            run = adopt(ansible, bundle, config, check=check, **extra)
            assert run.rc != 0, f"{what}: {run.output}"
            msg = run.task("adopt")["result"]["msg"]
            for word in words:
                assert word in msg, f"{what}: {word!r} not in {msg!r}"
            assert "panicked" not in run.output and "Traceback" not in run.output, run.output
            assert leaks(run.output, forms) == [], what
    assert not secrets.exists(), "a failed task wrote a bundle"
    assert other.read_bytes() == sample.other_secrets.read_bytes(), "another cluster's bundle was overwritten"


README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def adoption_section():
    start = README.index("## Adopting a cluster you already run")
    end = README.index("\n## ", start + 1)
    return README[start:end]


def test_the_readme_recipe_runs_as_written(ansible, sim_factory, tmp_path):
    """The README's adoption playbook, then its Vault recipe: encrypted, the bundle still matches."""
    section = adoption_section()
    blocks = FENCE.findall(section)
    (playbook,) = [text for lang, text in blocks if lang == "yaml" and "secrets_from_controlplane_config" in text]
    sim = sim_factory(control_planes=1, workers=0)
    node = sim.nodes[0]["address"]
    project = tmp_path / "project"
    (project / "secrets").mkdir(parents=True)
    made = ansible.run(play([{"name": "render", "ferro.talos.talos_config": {
        "secrets_file": str(tmp_path / "original.yaml"), "generate_secrets": True,
        "dest": str(project / "controlplane.yaml"), **render_options(node)}}]))
    assert made.rc == 0, made.output
    (project / "adopt.yml").write_text(re.sub(r"\b10\.0\.0\.\d+\b", node, playbook))
    derive, vaulted = ([c for c in (line.split("#", 1)[0].strip() for line in text.splitlines()) if c]
                       for lang, text in blocks if lang == "sh")
    assert derive == ["ansible-playbook adopt.yml --check", "ansible-playbook adopt.yml"], derive

    def sh(command, *extra):
        argv = shlex.split(command) + list(extra)
        assert argv[0] in ("ansible-playbook", "ansible-vault"), command
        argv[0] = str(ansible.bin / argv[0])
        return subprocess.run(argv, cwd=project, env=ansible.env(), capture_output=True, text=True, timeout=600)

    preview = sh(derive[0])
    assert preview.returncode == 0, preview.stdout + preview.stderr
    assert not (project / "secrets" / "prod.yaml").exists() and not (project / "talosconfig").exists()
    proc = sh(derive[1])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bundle = project / "secrets" / "prod.yaml"
    assert bundle.read_bytes() == (tmp_path / "original.yaml").read_bytes()
    assert stat.S_IMODE((project / "talosconfig").stat().st_mode) == 0o600

    encrypt, check = vaulted
    password = tmp_path / "vault-password"
    password.write_text("correct horse battery staple\n")
    vault = ["--vault-password-file", str(password)]
    proc = sh(encrypt, *vault)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert bundle.read_text().startswith("$ANSIBLE_VAULT;")
    # The encrypted bundle is decrypted in memory and still equals what the config holds: no change.
    proc = sh(check.replace(" --ask-vault-pass", ""), *vault)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0", proc.stdout), proc.stdout
    # The SOPS recipe's variables are the cluster role's.
    (variables,) = [yaml.safe_load(text) for lang, text in blocks if lang == "yaml" and "community.sops.sops" in text]
    specs = yaml.safe_load((ROOT / "roles/cluster/meta/argument_specs.yml").read_text())
    assert set(variables) <= set(specs["argument_specs"]["main"]["options"]), variables
