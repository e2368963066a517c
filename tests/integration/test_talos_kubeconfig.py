"""talos_kubeconfig through real ansible-playbook runs against talos-sim."""

import base64
import os
import stat

import pytest
import yaml

from secrets_scan import leaks, secret_forms
from sim_cluster import converge


def fetch(ansible, args, check=False, diff=False, name="kubeconfig"):
    task = {"name": name, "ferro.talos.talos_kubeconfig": args}
    run = ansible.run(
        yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]), check=check, diff=diff
    )
    return run, run.task(name)["result"]


def key_forms(kubeconfig_text):
    """The client key of a kubeconfig in every form it could leak in."""
    doc = yaml.safe_load(kubeconfig_text)
    key_b64 = doc["users"][0]["user"]["client-key-data"]
    pem = base64.b64decode(key_b64).decode()
    body = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    return {key_b64, pem.strip(), "".join(body)} | {line for line in body if len(line) >= 16}


@pytest.fixture
def cluster(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    info = converge(ansible, sim, tmp_path, cluster_name="kc")
    info["sim"] = sim
    return info


def test_writes_once_then_keeps_and_check_mode_writes_nothing(ansible, cluster, tmp_path):
    dest = tmp_path / "kube" / "config"
    args = {"node": cluster["cps"][0], "secrets_file": str(cluster["secrets"]), "dest": str(dest)}

    check, result = fetch(ansible, args, check=True, diff=True)
    assert check.rc == 0, check.output
    assert result["changed"] is True and "no kubeconfig yet" in result["reason"]
    assert not dest.exists(), "check mode must not write"

    first, result = fetch(ansible, args)
    assert first.rc == 0, first.output
    assert result["changed"] is True
    assert result["dest"] == str(dest)
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o600
    text = dest.read_text()
    doc = yaml.safe_load(text)
    assert doc["clusters"][0]["cluster"]["server"] == f"https://{cluster['cps'][0]}:6443"
    assert doc["current-context"] == "admin@kc"
    assert result["server"] == f"https://{cluster['cps'][0]}:6443"

    second, result = fetch(ansible, args, diff=True)
    assert second.rc == 0, second.output
    assert result["changed"] is False, result
    assert "current" in result["reason"]
    assert dest.read_text() == text

    check_again, result = fetch(ansible, args, check=True)
    assert check_again.rc == 0 and result["changed"] is False
    assert check_again.recap()["changed"] == 0

    # A talosconfig works as well as the bundle.
    via_talosconfig = {"node": cluster["cps"][0], "talosconfig": str(cluster["talosconfig"]), "dest": str(dest)}
    run, result = fetch(ansible, via_talosconfig)
    assert run.rc == 0, run.output
    assert result["changed"] is False

    forms = secret_forms(cluster["secrets"].read_text()) | key_forms(text)
    for r in (check, first, second, check_again, run):
        assert leaks(r.output, forms) == []
        assert leaks(repr(r.results), forms) == []


def test_rewrites_near_expiry_with_force_and_for_another_cluster(ansible, cluster, tmp_path):
    dest = tmp_path / "kubeconfig"
    args = {"node": cluster["cps"][0], "secrets_file": str(cluster["secrets"]), "dest": str(dest)}
    assert fetch(ansible, args)[0].rc == 0
    first = dest.read_text()

    # The admin certificate lives a year: 400 days of headroom forces a new one.
    run, result = fetch(ansible, {**args, "renew_before": 400})
    assert run.rc == 0, run.output
    assert result["changed"] is True and "expires" in result["reason"]
    assert dest.read_text() != first

    run, result = fetch(ansible, {**args, "force": True})
    assert run.rc == 0 and result["changed"] is True and "force" in result["reason"]

    # A file for another server is replaced.
    doc = yaml.safe_load(dest.read_text())
    doc["clusters"][0]["cluster"]["server"] = "https://192.0.2.1:6443"
    dest.write_text(yaml.safe_dump(doc))
    run, result = fetch(ansible, args)
    assert run.rc == 0 and result["changed"] is True
    assert "server" in result["reason"]

    # Garbage in dest is replaced, not echoed.
    dest.write_text("client-key-data: [NOTAKEYBUTSECRETLIKE\n")
    run, result = fetch(ansible, args)
    assert run.rc == 0 and result["changed"] is True
    assert "NOTAKEYBUTSECRETLIKE" not in run.output


def test_worker_node_fails_clearly(ansible, cluster, tmp_path):
    dest = tmp_path / "kubeconfig"
    run, result = fetch(ansible, {"node": cluster["workers"][0], "secrets_file": str(cluster["secrets"]), "dest": str(dest)})
    assert run.rc != 0
    assert "kubeconfig is only available on control plane nodes" in result["msg"]
    assert cluster["workers"][0] in result["msg"]
    assert not dest.exists()


def test_missing_credentials_fail_clearly(ansible, cluster, tmp_path):
    dest = tmp_path / "kubeconfig"
    run, result = fetch(ansible, {"node": cluster["cps"][0], "talosconfig": str(tmp_path / "nope"), "dest": str(dest)})
    assert run.rc != 0
    assert "no credentials" in result["msg"] and "secrets_file" in result["msg"]
    assert not dest.exists()


BAD_INPUTS = [
    ("unknown option", {"node": "127.0.0.1", "dest": "{d}", "colour": "blue"}, "Unsupported parameters"),
    ("missing dest", {"node": "127.0.0.1", "secrets_file": "{s}"}, "dest"),
    ("empty dest", {"node": "127.0.0.1", "dest": "", "secrets_file": "{s}"}, "dest"),
    ("dest is a directory", {"node": "127.0.0.1", "dest": "{o}", "secrets_file": "{s}"}, "dest must be a file path"),
    ("missing node", {"dest": "{d}", "secrets_file": "{s}"}, "node"),
    ("empty node", {"node": "", "dest": "{d}", "secrets_file": "{s}"}, "node must be"),
    ("negative renew window", {"node": "127.0.0.1", "dest": "{d}", "renew_before": -1, "secrets_file": "{s}"}, "renew_before"),
    ("huge renew window", {"node": "127.0.0.1", "dest": "{d}", "renew_before": 5000, "secrets_file": "{s}"}, "renew_before"),
    ("renew window not a number", {"node": "127.0.0.1", "dest": "{d}", "renew_before": "soon"}, "renew_before"),
    ("force not a bool", {"node": "127.0.0.1", "dest": "{d}", "force": "maybe"}, "force"),
    ("both secrets sources", {"node": "127.0.0.1", "dest": "{d}", "secrets_file": "{s}", "secrets": {"cluster": {}}}, "mutually exclusive"),
    ("malformed secrets dict", {"node": "127.0.0.1", "dest": "{d}", "secrets": {"cluster": {"id": "x"}}}, "secrets"),
    ("zero connect timeout", {"node": "127.0.0.1", "dest": "{d}", "connect_timeout": 0, "secrets_file": "{s}"}, "connect_timeout"),
    ("no credentials", {"node": "127.0.0.1", "dest": "{d}", "talosconfig": "{o}/talosconfig"}, "no credentials"),
    ("nothing listening", {"node": "127.0.0.1:1", "dest": "{d}", "secrets_file": "{s}", "connect_timeout": 2}, "unreachable"),
]


@pytest.mark.parametrize("name,args,expected", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_fails_clearly_and_writes_nothing(ansible, sample, tmp_path, name, args, expected):
    out = tmp_path / "out"
    out.mkdir()
    secrets = sample.secrets

    def fill(value):
        if isinstance(value, str):
            return value.replace("{s}", str(secrets)).replace("{d}", str(out / "kubeconfig")).replace("{o}", str(out))
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    run, result = fetch(ansible, fill(args), name="bad")
    assert run.rc != 0
    assert run.task("bad")["status"] == "failed"
    assert expected in result["msg"], result["msg"]
    assert "panicked" not in run.output and "internal error" not in result["msg"]
    assert list(out.iterdir()) == [], "a failed task must not leave files behind"
