"""AWX and Ansible Automation Platform run playbooks in an execution environment (EE): a container image
ansible-builder makes from examples/execution-environment/. No container engine is needed to check what
matters for ferro.talos, so the test does what each build stage does, outside a container:

  - `ansible-builder create` accepts the example and writes the build context;
  - the galaxy stage's `ansible-galaxy collection install -r requirements.yml` installs the collection;
  - the builder stage's introspect.py reads meta/execution-environment.yml and finds nothing to install
    (the modules are static programs: no Python packages, no system packages);
  - a module runs from where the EE keeps collections, with an empty environment, as it runs in the EE.
"""

import json
import os
import pathlib
import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT

EXAMPLE = ROOT / "examples" / "execution-environment"
VENV_BIN = ROOT / ".venv" / "bin"


def run(cmd, cwd, env=None):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout}{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """The build context ansible-builder makes from the example, with the release URL swapped for the
    tarball this test run built (the released one does not exist for an unreleased commit)."""
    tarball = os.environ.get("FERRO_COLLECTION_TARBALL")
    if not tarball:
        pytest.fail("FERRO_COLLECTION_TARBALL is not set: run the tests through `make test`", pytrace=False)
    work = tmp_path_factory.mktemp("ee")
    for name in ("execution-environment.yml", "requirements.yml"):
        shutil.copy(EXAMPLE / name, work / name)
    requirements = yaml.safe_load((work / "requirements.yml").read_text())
    [collection] = requirements["collections"]
    assert collection["type"] == "url" and collection["name"].endswith(".tar.gz"), collection
    requirements["collections"] = [{"name": str(pathlib.Path(tarball).resolve()), "type": "file"}]
    (work / "requirements.yml").write_text(yaml.safe_dump(requirements))
    run([VENV_BIN / "ansible-builder", "create", "-f", "execution-environment.yml", "-c", "context"], cwd=work)
    return work / "context"


def test_the_example_makes_a_build_context_that_installs_the_collection(context):
    containerfile = next(p for p in (context / "Containerfile", context / "Dockerfile") if p.exists())
    text = containerfile.read_text()
    assert "ansible-galaxy collection install" in text and "-r requirements.yml" in text, text
    assert "ansible-core>=2.19,<2.22" in text, "the EE must install an ansible-core the collection supports"
    copied = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert copied["collections"][0]["type"] == "file"


def test_the_installed_collection_needs_nothing_in_the_image_and_runs_there(context, tmp_path):
    # The galaxy stage, as the Containerfile runs it, into a path of our own.
    collections = tmp_path / "usr-share-ansible-collections"
    env = {**os.environ, "ANSIBLE_HOME": str(tmp_path / "ansible-home"), "ANSIBLE_GALAXY_DISABLE_GPG_VERIFY": "1"}
    run([VENV_BIN / "ansible-galaxy", "collection", "install", "-r", "requirements.yml",
         "--collections-path", collections], cwd=context / "_build", env=env)
    installed = collections / "ansible_collections" / "ferro" / "talos"
    assert (installed / "meta" / "execution-environment.yml").is_file(), "the EE file must ship in the tarball"

    # The builder stage: introspect.py collects every collection's Python and system requirements.
    pip_out, bindep_out = tmp_path / "requirements.txt", tmp_path / "bindep.txt"
    proc = run([VENV_BIN / "python", context / "_build" / "scripts" / "introspect.py", "introspect",
                f"--write-pip={pip_out}", f"--write-bindep={bindep_out}", collections], cwd=tmp_path)
    found = yaml.safe_load(proc.stdout)
    assert not found["python"] and not found["system"], proc.stdout
    for written in (pip_out, bindep_out):  # introspect writes these only when there is something to install
        lines = written.read_text().split() if written.exists() else []
        assert lines == [], f"{written.name} would install {lines}"
    # The control: the same collection declaring a Python package is seen, so the empty result above
    # comes from ferro.talos's meta/execution-environment.yml, not from introspect missing the collection.
    control = tmp_path / "control"
    shutil.copytree(collections, control / "x", symlinks=True)
    control_meta = control / "x" / "ansible_collections" / "ferro" / "talos" / "meta"
    (control_meta / "execution-environment.yml").write_text("version: 1\ndependencies:\n  python: ee-control.txt\n")
    (control_meta.parent / "ee-control.txt").write_text("ferro-control-package\n")
    proc = run([VENV_BIN / "python", context / "_build" / "scripts" / "introspect.py", "introspect", control / "x"],
               cwd=tmp_path)
    assert "ferro-control-package" in proc.stdout, proc.stdout

    # In the EE the controller is the container: the action plugin runs the linux-x86_64 program in place.
    # An empty environment stands in for the image's (no Rust, no libraries beside the program).
    program = installed / "bin" / "ferro-talos-linux-x86_64"
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"_ansible_module_name": "talos_config", "generate_secrets": True,
                                "secrets_file": str(tmp_path / "secrets.yaml"), "machine_type": "worker",
                                "cluster_name": "ee", "cluster_endpoint": "https://ee:6443"}))
    proc = subprocess.run(["env", "-i", str(program), str(args)], capture_output=True, text=True, timeout=60)
    result = json.loads(proc.stdout)
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True and (tmp_path / "secrets.yaml").stat().st_mode & 0o777 == 0o600


def test_the_readme_builds_the_example_and_pins_the_same_release():
    readme = (ROOT / "README.md").read_text()
    assert "cd examples/execution-environment\nansible-builder build" in readme
    example_url = yaml.safe_load((EXAMPLE / "requirements.yml").read_text())["collections"][0]["name"]
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert example_url.endswith(f"/v{version}/ferro-talos-{version}.tar.gz"), example_url
    assert f"- name: {example_url}\n" in readme, "the example pins another release than the README's install section"
