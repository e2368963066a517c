"""Shared fixtures: run real ansible-playbook against the installed ferro.talos collection."""

import json
import os
import pathlib
import subprocess
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Upstream's golden fixtures: beside the checkout, or where FERRO_TALOS_FIXTURES points. Only the
# parity tests need them; everything else uses bundles and configs the project generates itself.
FIXTURES = pathlib.Path(os.environ.get("FERRO_TALOS_FIXTURES") or ROOT.parent / "shared" / "talos" / "fixtures")
HERE = pathlib.Path(__file__).resolve().parent
# The ansible-core the playbooks run with: the project's venv (2.19, the oldest supported), or another
# one, e.g. tools/test's ansible-core 2.21 smoke run (FERRO_ANSIBLE_BIN=.venv-newest/bin).
ANSIBLE_BIN = pathlib.Path(os.environ.get("FERRO_ANSIBLE_BIN") or ROOT / ".venv" / "bin")
# The options every sample config is rendered with: those of upstream's "base" golden configs.
SAMPLE_RENDER = {
    "cluster_name": "base",
    "cluster_endpoint": "https://base:6443",
    "kubernetes_version": "1.28.0",
    "talos_version": "v1.13",
    "install_image": "",
    "install_disk": "",
    "validate": False,
}


def _required_env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run the tests through `make test`", pytrace=False)
    return value


class PlaybookRun:
    """What one ansible-playbook run produced: exit code, all output and the task results."""

    def __init__(self, rc, stdout, stderr, results):
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.results = results

    @property
    def output(self):
        return self.stdout + self.stderr

    def task(self, name, host=None):
        """The single result of the task called `name` (on `host`, if given)."""
        found = [r for r in self.results if r["task"] == name and (host is None or r["host"] == host)]
        assert len(found) == 1, f"expected one result for task {name!r}, got {len(found)}:\n{self.output}"
        return found[0]

    def tasks(self, name):
        return [r for r in self.results if r["task"] == name]

    def recap(self, host="localhost"):
        """The PLAY RECAP counters for `host`, e.g. {'ok': 3, 'changed': 0, ...}."""
        for line in self.stdout.splitlines():
            parts = line.split()
            if parts and parts[0] == host and ":" in line and "ok=" in line:
                return {k: int(v) for k, v in (p.split("=") for p in parts[2:] if "=" in p)}
        raise AssertionError(f"no recap line for {host}:\n{self.stdout}")


class Ansible:
    def __init__(self, workdir):
        self.workdir = workdir
        self.collections = _required_env("FERRO_COLLECTIONS_PATH")
        self.bin = ANSIBLE_BIN
        self.counter = 0

    def env(self):
        home = self.workdir / "ansible-home"
        env = dict(os.environ)
        env.update(
            {
                "ANSIBLE_HOME": str(home),
                "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
                "ANSIBLE_REMOTE_TEMP": str(home / "tmp"),
                "ANSIBLE_COLLECTIONS_PATH": self.collections,
                "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
                "ANSIBLE_CALLBACK_PLUGINS": str(HERE / "callback_plugins"),
                "ANSIBLE_CALLBACKS_ENABLED": "record_results",
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_FORCE_COLOR": "0",
                "ANSIBLE_RETRY_FILES_ENABLED": "false",
                "ANSIBLE_HOST_KEY_CHECKING": "false",
            }
        )
        return env

    def run(self, playbook, check=False, diff=False, verbosity=0, extra_vars=None, inventory=None, args=()):
        """Write `playbook` (YAML text) to a file and run it; returns a PlaybookRun."""
        self.counter += 1
        path = self.workdir / f"playbook{self.counter}.yml"
        path.write_text(textwrap.dedent(playbook))
        record = self.workdir / f"results{self.counter}.jsonl"
        if inventory is None:
            inventory = self.workdir / "inventory.ini"
            inventory.write_text(
                "localhost ansible_connection=local ansible_python_interpreter=" + str(self.bin / "python") + "\n"
            )
        cmd = [str(self.bin / "ansible-playbook"), "-i", str(inventory), str(path)]
        if check:
            cmd.append("--check")
        if diff:
            cmd.append("--diff")
        if verbosity:
            cmd.append("-" + "v" * verbosity)
        if extra_vars:
            cmd += ["-e", json.dumps(extra_vars)]
        cmd += list(args)
        env = self.env()
        env["FERRO_RECORD_FILE"] = str(record)
        proc = subprocess.run(cmd, cwd=self.workdir, env=env, capture_output=True, text=True, timeout=600)
        results = []
        if record.exists():
            results = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
        return PlaybookRun(proc.returncode, proc.stdout, proc.stderr, results)


@pytest.fixture
def ansible(tmp_path):
    return Ansible(tmp_path)


def golden_fixtures():
    """The golden fixtures directory; skips the calling test with the reason when it is absent,
    or fails it when FERRO_REQUIRE_FIXTURES=1 (CI)."""
    if FIXTURES.is_dir():
        return FIXTURES
    reason = f"golden fixtures not found at {FIXTURES} (put upstream's fixtures there or set FERRO_TALOS_FIXTURES)"
    if os.environ.get("FERRO_REQUIRE_FIXTURES") == "1":
        pytest.fail(reason + "; FERRO_REQUIRE_FIXTURES=1 makes this a failure", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def fixtures():
    return golden_fixtures()


def run_module(name, args, workdir):
    """Runs a module of the build directly with an args file, as Ansible does; its JSON. The build's one
    program, ferro-talos, runs the module the args file names (Ansible always sets _ansible_module_name)."""
    target = _required_env("FERRO_TARGET_DIR")
    args_file = workdir / f"{name}-args.json"
    args_file.write_text(json.dumps({**args, "_ansible_module_name": name}))
    proc = subprocess.run([os.path.join(target, "ferro-talos"), str(args_file)], capture_output=True, text=True,
                          timeout=120)
    args_file.unlink()
    result = json.loads(proc.stdout)
    assert not result.get("failed"), f"{name}: {result.get('msg')}"
    return result


class Sample:
    """A secrets bundle made by the project's own generator, the worker and control-plane configs
    rendered from it with the options of upstream's base configs, and a second, unrelated bundle."""

    def __init__(self, workdir):
        self.secrets = workdir / "secrets.yaml"
        self.other_secrets = workdir / "other-secrets.yaml"
        self.worker = workdir / "worker.yaml"
        self.controlplane = workdir / "controlplane.yaml"
        for machine_type, dest in (("worker", self.worker), ("controlplane", self.controlplane)):
            args = {"secrets_file": str(self.secrets), "generate_secrets": True, "machine_type": machine_type}
            run_module("talos_config", {**args, **SAMPLE_RENDER, "dest": str(dest)}, workdir)
        args = {"secrets_file": str(self.other_secrets), "generate_secrets": True, "machine_type": "worker"}
        run_module("talos_config", {**args, **SAMPLE_RENDER}, workdir)


@pytest.fixture(scope="session")
def sample(tmp_path_factory):
    return Sample(tmp_path_factory.mktemp("sample"))


from talos_sim import sim_factory  # noqa: E402,F401  (pytest fixture)
