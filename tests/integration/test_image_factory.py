"""talos_image_factory through ansible-playbook against `talos-sim factory`, the project's test
Image Factory (written from siderolabs/image-factory v1.5.0's API, with a canonical form of its
own): check mode creates nothing, the schematic is created once, its installer goes into a
node's config with talos_config, and what the factory would only refuse when it builds an image
fails before anything is created.
"""

import json
import os
import subprocess
import urllib.request

import pytest
import yaml

from talos_sim import binary


@pytest.fixture
def factory():
    """A test factory on 127.0.0.1 (an ephemeral port), stopped when the test ends."""
    proc = subprocess.Popen(
        [str(binary()), "factory", "--listen", "127.0.0.1:0", "--parent-pid", str(os.getpid())],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("READY "), line
    url = json.loads(line[len("READY ") :])["url"]
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def stored(url):
    with urllib.request.urlopen(f"{url}/_talos-sim/state", timeout=10) as answer:
        return json.load(answer)


def play(*tasks):
    return yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": list(tasks)}])


def test_schematic_created_once_and_its_installer_goes_into_the_config(ansible, factory, tmp_path):
    schematic = {
        "name": "schematic",
        "ferro.talos.talos_image_factory": {
            "factory_url": factory,
            "extensions": ["siderolabs/iscsi-tools", "siderolabs/util-linux-tools"],
            "talos_version": "v1.13.9",
        },
        "register": "image",
    }
    check = ansible.run(play(schematic), check=True, diff=True)
    assert check.rc == 0, check.output
    result = check.task("schematic")["result"]
    assert result["changed"] and stored(factory) == {"schematics": [], "posts": 0}
    assert "siderolabs/iscsi-tools" in check.output  # the diff

    render = {
        "name": "render",
        "ferro.talos.talos_config": {
            "secrets_file": str(tmp_path / "secrets.yaml"),
            "generate_secrets": True,
            "machine_type": "worker",
            "cluster_name": "factory",
            "cluster_endpoint": "https://127.0.0.1:6443",
            "install_image": "{{ image.installer }}",
            "dest": str(tmp_path / "worker.yaml"),
        },
    }
    run = ansible.run(play(schematic, render))
    assert run.rc == 0, run.output
    result = run.task("schematic")["result"]
    assert result["changed"]
    assert stored(factory) == {"schematics": [result["schematic_id"]], "posts": 1}
    assert result["schematic_id"] == check.task("schematic")["result"]["schematic_id"]
    host = factory.removeprefix("http://")
    assert result["installer"] == f"{host}/metal-installer/{result['schematic_id']}:v1.13.9"
    config = yaml.safe_load_all((tmp_path / "worker.yaml").read_text())
    v1alpha1 = next(d for d in config if d and "machine" in d)
    assert v1alpha1["machine"]["install"]["image"] == result["installer"]

    again = ansible.run(play(schematic))
    assert again.rc == 0, again.output
    assert not again.task("schematic")["result"]["changed"]
    assert stored(factory)["posts"] == 1


def test_an_unknown_extension_fails_before_anything_is_created(ansible, factory):
    task = {
        "name": "schematic",
        "ferro.talos.talos_image_factory": {
            "factory_url": factory,
            "extensions": ["siderolabs/iscsi"],
            "talos_version": "v1.13.9",
        },
    }
    for check in (True, False):
        run = ansible.run(play(task), check=check)
        assert run.rc != 0
        msg = run.task("schematic")["result"]["msg"]
        assert '"siderolabs/iscsi" is not an official extension of Talos v1.13.9' in msg, msg
        assert "siderolabs/iscsi-tools" in msg, msg
    assert stored(factory) == {"schematics": [], "posts": 0}


def test_the_readme_factory_example_runs_as_written(ansible, factory, tmp_path):
    """README.md's factory.yml, with the test factory's URL where the public factory would be."""
    from test_readme import Project, readme_files

    text = readme_files()["factory.yml"]
    module = "      ferro.talos.talos_image_factory:\n"
    assert module in text
    project = Project(tmp_path / "project", ansible)
    project.write("factory.yml", text.replace(module, module + f"        factory_url: {factory}\n"))
    check = project.run("ansible-playbook factory.yml --check")
    assert check.rc == 0, check.output
    assert stored(factory)["posts"] == 0
    run = project.run("ansible-playbook factory.yml")
    assert run.rc == 0, run.output
    assert "/metal-installer/" in run.output and "metal-amd64.iso" in run.output, run.output
    assert len(stored(factory)["schematics"]) == 1


def test_the_cluster_role_gives_workers_their_schematic_and_the_upgrade_keeps_it(ansible, sim_factory, factory, tmp_path):
    """talos_cluster_schematic in the workers' group vars: the schematic is made once for both workers, and
    --tags upgrade moves them to the factory's installer of that schematic, the control plane to the plain one."""
    from test_cluster_e2e import changed_tasks, inventory_for, site

    sim = sim_factory(control_planes=1, workers=2, version="v1.13.4")
    inventory = inventory_for(
        sim,
        tmp_path,
        {
            "talos_cluster_installer_image": "ghcr.io/siderolabs/installer:v1.13.4",
            "talos_cluster_image_factory_url": factory,
        },
    )
    data = yaml.safe_load(inventory.read_text())
    data["all"]["children"]["worker"]["vars"] = {"talos_cluster_schematic": {"extensions": ["siderolabs/iscsi-tools"]}}
    inventory.write_text(yaml.safe_dump(data))

    check = site(ansible, inventory, check=True)
    assert check.rc == 0, check.output
    assert stored(factory)["posts"] == 0, "--check created a schematic"

    first = site(ansible, inventory)
    assert first.rc == 0, first.output
    made = stored(factory)
    assert len(made["schematics"]) == 1 and made["posts"] == 1, made
    schematic_id = made["schematics"][0]
    again = site(ansible, inventory)
    assert again.rc == 0, again.output
    assert changed_tasks(again) == [], changed_tasks(again)
    assert stored(factory)["posts"] == 1

    data["all"]["vars"]["talos_cluster_installer_image"] = "ghcr.io/siderolabs/installer:v1.13.6"
    inventory.write_text(yaml.safe_dump(data))
    upgrade = site(ansible, inventory, args=["--tags", "upgrade"])
    assert upgrade.rc == 0, upgrade.output
    nodes = {n["role"] + str(i): n for i, n in enumerate(sim.status())}
    assert {n["version"] for n in nodes.values()} == {"v1.13.6"}
    workers = [n for n in sim.status() if n["role"] == "worker"]
    assert [n["schematic"] for n in workers] == [schematic_id, schematic_id], workers
    control_plane = next(n for n in sim.status() if n["role"] == "controlplane")
    assert control_plane["schematic"] != schematic_id
