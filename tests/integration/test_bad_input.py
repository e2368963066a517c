"""Malformed input to the node modules: each a clear failed result naming the problem, no panic."""

import pytest
import yaml

# Nothing listens here: tests that get past validation fail as "unreachable", quickly.
NOWHERE = "127.0.251.9"

COMMON = [
    ("unknown option", {"node": NOWHERE, "colour": "blue"}, "Unsupported parameters"),
    ("missing node", {}, "node"),
    ("empty node", {"node": ""}, "node"),
    ("both secrets sources", {"node": NOWHERE, "secrets_file": "{s}", "secrets": {"a": 1}}, "mutually exclusive"),
    ("secrets file missing", {"node": NOWHERE, "secrets_file": "/nonexistent/secrets.yaml"}, "secrets_file"),
    ("secrets dict malformed", {"node": NOWHERE, "secrets": {"cluster": {"id": "x"}}}, "secrets"),
    ("connect_timeout not a number", {"node": NOWHERE, "connect_timeout": "soon"}, "connect_timeout"),
    ("connect_timeout zero", {"node": NOWHERE, "connect_timeout": 0, "secrets_file": "{s}"}, "connect_timeout"),
    ("talosconfig context unknown", {"node": NOWHERE, "talosconfig": "{t}", "context": "nope"}, "context"),
    ("talosconfig not yaml", {"node": NOWHERE, "talosconfig": "{bad}"}, "talosconfig"),
]

APPLY = [
    ("config missing", {"node": NOWHERE}, "config"),
    ("config not yaml", {"node": NOWHERE, "config": "machine: [unclosed\ncluster: x"}, "config"),
    ("config file missing", {"node": NOWHERE, "config": "/nonexistent/cp.yaml"}, "config"),
    ("config without v1alpha1", {"node": NOWHERE, "config": "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n"}, "v1alpha1"),
    ("bad mode", {"node": NOWHERE, "config": "{c}", "mode": "yolo"}, "mode"),
    ("bad insecure", {"node": NOWHERE, "config": "{c}", "insecure": "sometimes"}, "insecure"),
    ("negative timeout", {"node": NOWHERE, "config": "{c}", "timeout": -5}, "timeout"),
    ("try_timeout zero", {"node": NOWHERE, "config": "{c}", "try_timeout": 0}, "try_timeout"),
    ("wait not a bool", {"node": NOWHERE, "config": "{c}", "wait": "perhaps"}, "wait"),
    ("node unreachable", {"node": NOWHERE, "config": "{c}", "connect_timeout": 2}, "nothing answers"),
]

BOOTSTRAP = [
    ("timeout too large", {"node": NOWHERE, "timeout": 10**9}, "timeout"),
    ("control_plane_nodes not a list of strings", {"node": NOWHERE, "control_plane_nodes": [{"a": 1}]}, "control_plane_nodes"),
    ("wait not a bool", {"node": NOWHERE, "wait": "perhaps"}, "wait"),
    ("node unreachable", {"node": NOWHERE, "secrets_file": "{s}", "connect_timeout": 2}, "unreachable"),
]

INFO = [
    ("node unreachable with credentials", {"node": NOWHERE, "secrets_file": "{s}", "connect_timeout": 2}, "unreachable"),
    ("node unreachable without credentials", {"node": NOWHERE, "connect_timeout": 2}, "unreachable"),
]

RESET = [
    ("confirm missing", {"node": NOWHERE}, "confirm"),
    ("confirm not the word", {"node": NOWHERE, "confirm": "yes"}, "confirm must be"),
    ("bad wipe", {"node": NOWHERE, "confirm": "reset", "wipe": "everything"}, "wipe"),
    ("system disk with the ordinary word", {"node": NOWHERE, "confirm": "reset", "wipe": "system_disk"}, 'confirm must be "wipe-system-disk"'),
    ("user_disks mode without disks", {"node": NOWHERE, "confirm": "reset", "wipe": "user_disks"}, "user_disks must name the disks"),
    ("user_disks without their mode", {"node": NOWHERE, "confirm": "reset", "user_disks": ["/dev/sdb"]}, "user_disks is only used with wipe=user_disks"),
    ("user disk not a device", {"node": NOWHERE, "confirm": "reset", "wipe": "user_disks", "user_disks": ["sdb"]}, "not a device path"),
    ("graceful not a bool", {"node": NOWHERE, "confirm": "reset", "graceful": "maybe"}, "graceful"),
    ("timeout zero", {"node": NOWHERE, "confirm": "reset", "timeout": 0}, "timeout"),
    ("node unreachable", {"node": NOWHERE, "confirm": "reset", "secrets_file": "{s}", "connect_timeout": 2}, "unreachable"),
    ("delete_kubernetes_node without waiting", {"node": NOWHERE, "confirm": "reset", "delete_kubernetes_node": True, "wait": False}, "delete_kubernetes_node needs wait: true"),
    ("delete_kubernetes_node keeping the config", {"node": NOWHERE, "confirm": "reset", "wipe": "user_disks", "user_disks": ["/dev/sdb"], "delete_kubernetes_node": True}, "remove delete_kubernetes_node"),
]

REBOOT = [
    ("bad mode", {"node": NOWHERE, "secrets_file": "{s}", "mode": "hard"}, "mode"),
    ("timeout zero", {"node": NOWHERE, "secrets_file": "{s}", "timeout": 0}, "timeout"),
    ("no credentials", {"node": NOWHERE, "talosconfig": "/nonexistent/talosconfig"}, "no credentials"),
    ("node unreachable", {"node": NOWHERE, "secrets_file": "{s}", "connect_timeout": 2}, "does not answer"),
]

SHUTDOWN = [
    ("force not a bool", {"node": NOWHERE, "secrets_file": "{s}", "force": "hard"}, "force"),
    ("timeout too large", {"node": NOWHERE, "secrets_file": "{s}", "timeout": 10**9}, "timeout"),
    ("no credentials", {"node": NOWHERE, "talosconfig": "/nonexistent/talosconfig"}, "no credentials"),
]

ETCD_MEMBER = [
    ("member missing", {"node": NOWHERE, "secrets_file": "{s}"}, "member"),
    ("member empty", {"node": NOWHERE, "secrets_file": "{s}", "member": " "}, "member must name the etcd member"),
    ("state present", {"node": NOWHERE, "secrets_file": "{s}", "member": "cp3", "state": "present"}, "state"),
    ("node unreachable", {"node": NOWHERE, "secrets_file": "{s}", "member": "cp3", "connect_timeout": 2}, "does not answer"),
]

SNAPSHOT = [
    ("dest missing", {"node": NOWHERE, "secrets_file": "{s}"}, "dest"),
    ("dest a directory", {"node": NOWHERE, "secrets_file": "{s}", "dest": "{dir}"}, "dest must be a file path"),
    ("timeout too large", {"node": NOWHERE, "secrets_file": "{s}", "dest": "{snap}", "timeout": 10**9}, "timeout"),
    ("no credentials", {"node": NOWHERE, "dest": "{snap}", "talosconfig": "/nonexistent/talosconfig"}, "no credentials"),
    ("node unreachable", {"node": NOWHERE, "secrets_file": "{s}", "dest": "{snap}", "connect_timeout": 2}, "unreachable"),
]

CASES = (
    [("talos_apply", *c) for c in COMMON + APPLY]
    + [("talos_bootstrap", *c) for c in COMMON + BOOTSTRAP]
    + [("talos_info", *c) for c in COMMON + INFO]
    + [("talos_reset", *c) for c in RESET]
    + [("talos_etcd_snapshot", *c) for c in SNAPSHOT]
    + [("talos_reboot", *c) for c in REBOOT]
    + [("talos_shutdown", *c) for c in SHUTDOWN]
    + [("talos_etcd_member", *c) for c in ETCD_MEMBER]
)


@pytest.mark.parametrize("module,name,args,expected", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_bad_input(ansible, sample, tmp_path, module, name, args, expected):
    config = tmp_path / "cp.yaml"
    config.write_text(sample.worker.read_text())
    talosconfig = tmp_path / "talosconfig"
    talosconfig.write_text("context: a\ncontexts:\n    a:\n        endpoints: []\n")
    bad = tmp_path / "bad-talosconfig"
    bad.write_text("context: [unclosed\n")
    out = tmp_path / "out"
    out.mkdir()
    values = {
        "{s}": str(sample.secrets),
        "{c}": str(config),
        "{t}": str(talosconfig),
        "{bad}": str(bad),
        "{dir}": str(out),
        "{snap}": str(out / "etcd.snapshot"),
    }

    def fill(value):
        if isinstance(value, str):
            return values.get(value, value)
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    args = dict(args)
    if module == "talos_apply" and name != "config missing":
        # Common cases test the shared options: give apply a valid config so only they are wrong.
        args.setdefault("config", "{c}")
    task = {"name": "bad", f"ferro.talos.{module}": fill(args)}
    run = ansible.run(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]))
    assert run.rc != 0
    entry = run.task("bad")
    assert entry["status"] == "failed"
    msg = entry["result"]["msg"]
    assert expected in msg, msg
    assert "internal error" not in msg and "panicked" not in run.output
    # Nothing half-written: no snapshot, no temporary file left beside it.
    assert list(out.iterdir()) == []
