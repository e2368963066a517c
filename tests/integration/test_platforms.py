"""The collection as it ships: one static program per platform, and the two ways the action plugin runs it.

- bin/ferro-talos-linux-x86_64 and -linux-aarch64 are statically linked ELF executables (no program
  interpreter, no dynamic section), so they run on any Linux (glibc of any age, musl, an EE image). The
  x86_64 one runs with an empty environment; the aarch64 one under qemu's user-mode emulation when the
  machine has it (CI installs it and sets FERRO_REQUIRE_QEMU=1).
- The same tasks give the same results run in place on the controller and transferred the way Ansible
  runs any binary module (FERRO_TALOS_IN_PLACE=0): check mode, diff mode, no_log, warnings, the task's
  environment and return values.
"""

import json
import os
import pathlib
import shutil
import struct
import subprocess

import pytest
import yaml

from sim_cluster import converge

PROGRAMS = {"linux-x86_64": 62, "linux-aarch64": 183}  # ELF e_machine: EM_X86_64, EM_AARCH64
PT_DYNAMIC, PT_INTERP = 2, 3


def installed_bin():
    return pathlib.Path(os.environ["FERRO_COLLECTIONS_PATH"]) / "ansible_collections" / "ferro" / "talos" / "bin"


def elf_facts(path):
    """(e_machine, the program header types) of a 64-bit little-endian ELF file."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path} is not a 64-bit LE ELF file"
    machine = struct.unpack_from("<H", data, 18)[0]
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    return machine, types


def render_args(tmp_path, name):
    """talos_config in check mode: generate a bundle and render a worker config (nothing is written)."""
    args = tmp_path / f"{name}-args.json"
    args.write_text(json.dumps({
        "_ansible_module_name": "talos_config",
        "_ansible_check_mode": True,
        "secrets_file": str(tmp_path / f"{name}-secrets.yaml"),
        "generate_secrets": True,
        "machine_type": "worker",
        "cluster_name": "static",
        "cluster_endpoint": "https://10.0.0.1:6443",
    }))
    return args


@pytest.mark.parametrize("platform", sorted(PROGRAMS))
def test_each_shipped_program_is_a_static_executable_for_its_platform(platform):
    machine, types = elf_facts(installed_bin() / f"ferro-talos-{platform}")
    assert machine == PROGRAMS[platform]
    assert PT_INTERP not in types and PT_DYNAMIC not in types, f"{platform}: linked dynamically ({types})"


def test_the_x86_64_program_runs_with_an_empty_environment(tmp_path):
    proc = subprocess.run([str(installed_bin() / "ferro-talos-linux-x86_64"), str(render_args(tmp_path, "x86"))],
                          env={}, capture_output=True, text=True, timeout=60)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and not result.get("failed"), result
    assert result["contract"] == "v1.13" and result["secrets_generated"] is True


def test_the_aarch64_program_runs_under_emulation(tmp_path):
    qemu = shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")
    if not qemu:
        reason = "qemu-aarch64-static not found: install qemu-user-static to run the aarch64 program"
        if os.environ.get("FERRO_REQUIRE_QEMU") == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    proc = subprocess.run([qemu, str(installed_bin() / "ferro-talos-linux-aarch64"), str(render_args(tmp_path, "arm"))],
                          env={}, capture_output=True, text=True, timeout=120)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and not result.get("failed"), result
    assert result["contract"] == "v1.13"


# Results that differ between two runs of the same task whatever path ran it.
VOLATILE = {"boot_id", "uptime", "duration_ms", "elapsed_ms"}


def comparable(value):
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def test_in_place_and_transferred_runs_give_the_same_results(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    cluster = converge(ansible, sim, tmp_path, bootstrap=False)
    cp = cluster["cps"][0]
    tasks = [
        # The talosconfig comes from the task's environment (TALOSCONFIG), as talosctl reads it.
        {"name": "facts", "ferro.talos.talos_info": {"node": cp}, "environment": {"TALOSCONFIG": str(cluster["talosconfig"])}},
        # A diff, a change in check mode, and a warning (the endpoint URL without a port).
        {"name": "render", "ferro.talos.talos_config": {
            "secrets_file": str(cluster["secrets"]), "machine_type": "controlplane", "cluster_name": "gate",
            "cluster_endpoint": f"https://{cp}", "dest": str(tmp_path / "render.yaml"),
            "patches": [{"machine": {"nodeLabels": {"path": "PATH"}}}]}},
        # no_log: the result is censored the same way.
        {"name": "secret", "ferro.talos.talos_info": {"node": cp, "secrets_file": str(cluster["secrets"])},
         "no_log": True},
        # A failure with its message.
        {"name": "refused", "ferro.talos.talos_reset": {"node": cp, "secrets_file": str(cluster["secrets"])},
         "ignore_errors": True},
    ]
    playbook = yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}])
    runs = {}
    for path, switch in (("in place", "1"), ("transferred", "0")):
        os.environ["FERRO_TALOS_IN_PLACE"] = switch
        try:
            run = ansible.run(playbook, check=True, diff=True, verbosity=3)
        finally:
            del os.environ["FERRO_TALOS_IN_PLACE"]
        assert run.rc == 0, run.output
        runs[path] = run
    transferred_commands = runs["transferred"].output
    assert "PUT " in transferred_commands and "/ferro-talos " in transferred_commands, "nothing was transferred"
    assert "PUT " not in runs["in place"].output, "the in-place run copied something"
    for name in ("facts", "render", "secret", "refused"):
        a, b = runs["in place"].task(name), runs["transferred"].task(name)
        assert a["status"] == b["status"], name
        assert comparable(a["result"]) == comparable(b["result"]), name
    assert runs["in place"].task("facts")["result"]["talos"]["version"]
    assert runs["in place"].task("render")["result"]["diff"], "diff mode"
    assert any("port" in w for w in runs["in place"].task("render")["result"].get("warnings", [])), "warnings"
    assert runs["in place"].task("secret")["result"].get("censored"), "no_log"
    assert runs["in place"].task("refused")["status"] == "failed"
