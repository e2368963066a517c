"""Shared fixtures: run real ansible-playbook against the installed ferro.talos collection."""

import json
import os
import pathlib
import subprocess
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
FIXTURES = SHARED / "talos" / "fixtures"
HERE = pathlib.Path(__file__).resolve().parent


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
        self.bin = ROOT / ".venv" / "bin"
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


@pytest.fixture
def fixtures():
    if not FIXTURES.is_dir():
        pytest.fail(f"golden fixtures not found at {FIXTURES}", pytrace=False)
    return FIXTURES


from talos_sim import sim_factory  # noqa: E402,F401  (pytest fixture)
