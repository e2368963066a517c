"""The README runs as written: its files and commands, taken out of README.md, against talos-sim.

A new user copies the README's site.yml, group_vars/all.yml and inventory.yml into a project and runs its
commands in order. This test does the same with the blocks as they are in README.md today, changing only
what cannot be real here: the node addresses (10.0.0.x become the simulated cluster's own loopback
addresses), the interactive vault password prompt (a password file), and the simulated cluster's address
block. When someone edits the README so that it no longer works, this test fails.
"""

import json
import os
import re
import shlex
import stat
import subprocess

import yaml

from conftest import ROOT, Ansible, PlaybookRun

README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
FILE_HEADER = re.compile(r"^# ([\w./-]+\.ya?ml)\b")
README_ADDRESS = re.compile(r"\b10\.0\.0\.(\d+)\b")


def readme_blocks(language):
    return [text for lang, text in FENCE.findall(README) if lang == language]


def readme_files():
    """The YAML blocks that start with `# <file name>`: {name: text}."""
    files = {}
    for text in readme_blocks("yaml"):
        header = FILE_HEADER.match(text)
        if header:
            files[header.group(1)] = text
    return files


def readme_block_with(language, needle):
    found = [text for text in readme_blocks(language) if needle in text]
    assert len(found) == 1, f"README.md should have one {language} block with {needle!r}, found {len(found)}"
    return found[0]


def commands(block):
    """The command lines of a shell block, without their trailing comments."""
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def to_sim_addresses(text, sim):
    """10.0.0.2-5 are the README's nodes cp1-cp3 and w1, 10.0.0.10 its cluster endpoint (a VIP in a real
    cluster; the first control plane here)."""
    mapping = {"2": 0, "3": 1, "4": 2, "5": 3, "10": 0}

    def replace(match):
        assert match.group(1) in mapping, f"README address {match.group(0)} has no simulated node"
        return sim.nodes[mapping[match.group(1)]]["address"]

    return README_ADDRESS.sub(replace, text)


class Project:
    """A playbook project made of README blocks, where README commands run."""

    def __init__(self, path, ansible):
        self.path = path
        self.ansible = ansible

    def write(self, name, text):
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def run(self, command, extra=()):
        argv = shlex.split(command) + list(extra)
        assert argv[0] in ("ansible-playbook", "ansible-vault"), command
        argv[0] = str(self.ansible.bin / argv[0])
        proc = subprocess.run(
            argv, cwd=self.path, env=self.ansible.env(), capture_output=True, text=True, timeout=900
        )
        return PlaybookRun(proc.returncode, proc.stdout, proc.stderr, [])


def changed(run, hosts):
    return {host: run.recap(host)["changed"] for host in hosts}


HOSTS = ["cp1", "cp2", "cp3", "w1"]


def test_readme_site_inventory_and_commands_run_as_written(sim_factory, tmp_path):
    files = readme_files()
    assert {"site.yml", "group_vars/all.yml", "inventory.yml"} <= set(files), sorted(files)
    group_vars = yaml.safe_load(files["group_vars/all.yml"])
    installer_tag = group_vars["talos_cluster_installer_image"].rsplit(":", 1)[1]
    assert installer_tag.startswith("v1.13."), installer_tag
    # One patch release behind the README's installer, so its upgrade commands have something to do.
    older = f"v1.13.{int(installer_tag.rsplit('.', 1)[1]) - 1}"
    sim = sim_factory(control_planes=3, workers=1, version=older)

    project = Project(tmp_path / "project", Ansible(tmp_path))
    for name, text in files.items():
        project.write(name, to_sim_addresses(text, sim))
    # The health gates fail faster on a simulated cluster than the README's defaults allow; nothing else
    # in group_vars changes.
    project.write("group_vars/all.yml", (project.path / "group_vars/all.yml").read_text() + "talos_cluster_health_timeout: 120\n")

    check, converge, upgrade_check, upgrade = commands(readme_block_with("sh", "--tags upgrade --check"))
    assert "--check" in check and "--tags" not in check

    first = project.run(check)
    assert first.rc == 0, first.output
    assert "does not exist yet; run without --check to create it" in first.output, first.output
    assert not (project.path / "secrets/prod.yaml").exists()
    assert all(n["maintenance"] for n in sim.status()), "--check touched a node"

    run = project.run(converge)
    assert run.rc == 0, run.output
    secrets = project.path / "secrets/prod.yaml"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    for name in ("talosconfig", "kubeconfig"):
        assert stat.S_IMODE((project.path / name).stat().st_mode) == 0o600, name
    assert not any(n["maintenance"] for n in sim.status())

    again = project.run(check)
    assert again.rc == 0, again.output
    assert changed(again, HOSTS) == dict.fromkeys(HOSTS, 0), again.output

    preview = project.run(upgrade_check)
    assert preview.rc == 0, preview.output
    assert all(v > 0 for v in changed(preview, HOSTS).values()), preview.output
    assert {n["version"] for n in sim.status()} == {older}, "--check upgraded a node"

    moved = project.run(upgrade)
    assert moved.rc == 0, moved.output
    assert {n["version"] for n in sim.status()} == {installer_tag}

    up_to_date = project.run(upgrade_check)
    assert up_to_date.rc == 0, up_to_date.output
    assert changed(up_to_date, HOSTS) == dict.fromkeys(HOSTS, 0), up_to_date.output

    # The Vault recipe: encrypt the bundle, take the README's variables, run with a vault password.
    recipe = yaml.safe_load(readme_block_with("yaml", "ansible.builtin.unvault"))
    encrypt = re.search(r"`(ansible-vault encrypt [^`]+)`", README).group(1)
    password = tmp_path / "vault-password"
    password.write_text("correct horse battery staple\n")
    vault = ["--vault-password-file", str(password)]
    encrypted = project.run(encrypt, vault)
    assert encrypted.rc == 0, encrypted.output
    assert secrets.read_text().startswith("$ANSIBLE_VAULT;")
    assert "--ask-vault-pass" in README
    # The encrypted file as it is, the collection decrypting it on the controller.
    as_is = project.run(check, vault)
    assert as_is.rc == 0, as_is.output
    assert changed(as_is, HOSTS) == dict.fromkeys(HOSTS, 0), as_is.output
    # The variables for modules that run elsewhere.
    variables = yaml.safe_load((project.path / "group_vars/all.yml").read_text())
    variables.update(recipe)
    project.write("group_vars/all.yml", yaml.safe_dump(variables))
    from_vault = project.run(check, vault)
    assert from_vault.rc == 0, from_vault.output
    assert changed(from_vault, HOSTS) == dict.fromkeys(HOSTS, 0), from_vault.output


def test_readme_example_renders_a_config_and_a_talosconfig(tmp_path):
    example = readme_block_with("yaml", "Render configs and the talosconfig")
    project = Project(tmp_path / "project", Ansible(tmp_path))
    project.write("render.yml", example)
    # The example's second patch is a file of the user's; any patch will do.
    project.write("patches/controlplane.yaml", "machine:\n  install:\n    disk: /dev/nvme0n1\n")
    (preview_line,) = commands(readme_block_with("sh", "render.yml"))
    preview = project.run(preview_line)
    assert preview.rc == 0, preview.output
    assert not (project.path / "rendered").exists() and not (project.path / "secrets").exists()
    run = project.run(preview_line.replace(" --check", "").replace(" --diff", ""))
    assert run.rc == 0, run.output
    rendered = project.path / "rendered/controlplane.yaml"
    assert stat.S_IMODE(rendered.stat().st_mode) == 0o600
    config = next(yaml.safe_load_all(rendered.read_text()))
    assert config["machine"]["type"] == "controlplane"
    assert config["machine"]["install"]["disk"] == "/dev/nvme0n1"
    assert config["machine"]["kubelet"]["extraArgs"]["rotate-server-certificates"] == "true"
    talosconfig = yaml.safe_load((project.path / "talosconfig").read_text())
    assert talosconfig["contexts"]["prod"]["endpoints"] == ["10.0.0.2", "10.0.0.3", "10.0.0.4"]


def test_readme_pins_the_current_release():
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    requirements = yaml.safe_load(readme_block_with("yaml", "collections:"))
    (pin,) = requirements["collections"]
    assert pin == {
        "name": f"https://github.com/ferro/talos/releases/download/v{version}/ferro-talos-{version}.tar.gz",
        "type": "url",
    }
    # The commented alternatives pin the same version.
    block = readme_block_with("yaml", "collections:")
    assert f"ferro-talos-{version}.tar.gz" in block and f"version: v{version}" in block
    # The release workflow attaches collection/build's tarball (named ferro-talos-X.Y.Z.tar.gz, as
    # test_release checks) to the release of the tag, the path the README downloads from.
    workflow = (ROOT / ".github/workflows/release.yml").read_text()
    assert 'gh release create "$GITHUB_REF_NAME" "$TARBALL"' in workflow


def test_readme_simulator_commands_run_as_written(tmp_path):
    """The console block, with the state directory in tmp_path and a free address block of the pytest
    suite's (talos_sim.BLOCKS)."""
    from talos_sim import BLOCKS

    target = os.environ["FERRO_TARGET_DIR"]
    block = readme_block_with("console", "talos-sim up")
    lines = [line[2:] for line in block.splitlines() if line.startswith("$ ")]
    assert lines[0] == "cargo build --release -p ferro-talos-sim"
    assert [shlex.split(line)[1] for line in lines[1:]] == ["up", "status", "stop"], lines

    def run(line):
        argv = shlex.split(line.replace("~/sim", str(tmp_path / "sim")))
        assert argv[0] == "target/release/talos-sim", line
        argv[0] = f"{target}/talos-sim"
        if argv[1] == "up":
            argv += ["--base-address", "auto", "--address-blocks", BLOCKS]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    up, status, stop = lines[1:]
    started = run(up)
    try:
        assert started.returncode == 0, f"{up}: {started.stdout}{started.stderr}"
        block = json.loads((tmp_path / "sim" / "run.json").read_text())["block"]
        base = f"127.0.{block}.1"
        shown = run(status)
        assert shown.returncode == 0, f"{status}: {shown.stdout}{shown.stderr}"
        assert base in shown.stdout, shown.stdout
    finally:
        stopped = run(stop)
    assert stopped.returncode == 0, f"{stop}: {stopped.stdout}{stopped.stderr}"
