"""talos_etcd_snapshot: a snapshot from a control plane lands in a 0600 file; check mode writes nothing."""

import hashlib
import os

import yaml

from secrets_scan import leaks, secret_forms
from sim_cluster import converge


def snapshot_play(node, secrets, dest, **extra):
    task = {"name": "snapshot", "ferro.talos.talos_etcd_snapshot": {"node": node, "secrets_file": str(secrets), "dest": str(dest), **extra}}
    return yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}])


def test_snapshot_from_a_control_plane(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    cluster = converge(ansible, sim, tmp_path)
    dest = tmp_path / "backup" / "etcd.snapshot"

    check = ansible.run(snapshot_play(cluster["cps"][0], cluster["secrets"], dest), check=True)
    assert check.rc == 0, check.output
    assert check.task("snapshot")["result"]["changed"] is True
    assert not dest.exists()

    run = ansible.run(snapshot_play(cluster["cps"][0], cluster["secrets"], dest))
    assert run.rc == 0, run.output
    result = run.task("snapshot")["result"]
    data = dest.read_bytes()
    assert result["size"] == len(data) > 0
    assert result["sha256"] == hashlib.sha256(data).hexdigest()
    assert os.stat(dest).st_mode & 0o777 == 0o600
    assert [p.name for p in dest.parent.iterdir()] == ["etcd.snapshot"]
    assert leaks(run.output, secret_forms(cluster["secrets"].read_text())) == []


def test_snapshot_from_a_worker_fails_and_writes_nothing(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=1)
    cluster = converge(ansible, sim, tmp_path)
    dest = tmp_path / "backup" / "etcd.snapshot"
    run = ansible.run(snapshot_play(cluster["workers"][0], cluster["secrets"], dest))
    assert run.rc != 0
    assert "control plane" in run.task("snapshot")["result"]["msg"]
    assert not dest.exists()
    assert not dest.parent.exists() or list(dest.parent.iterdir()) == []
