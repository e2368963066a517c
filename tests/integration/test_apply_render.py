"""talos_apply's `render`: the config rendered in the apply's own process from the secrets bundle, exactly as
talos_config writes it to `dest`, so a converge needs one task per node and no rendered config on disk."""

import yaml

from secrets_scan import leaks, secret_forms


def play(tasks):
    return yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}])


def render_options(node):
    return {
        "machine_type": "controlplane",
        "cluster_name": "inplace",
        "cluster_endpoint": f"https://{node}:6443",
        "talos_version": "v1.13",
        "install_disk": "/dev/vda",
        "patches": [{"machine": {"nodeLabels": {"rack": "r1"}}}],
    }


def apply_rendered(ansible, node, secrets, check=False, diff=False, **render):
    task = {
        "name": "apply",
        "ferro.talos.talos_apply": {
            "node": node,
            "secrets_file": str(secrets),
            "render": {**render_options(node), **render},
        },
    }
    return ansible.run(play([task]), check=check, diff=diff)


def test_a_config_rendered_in_place_is_the_one_talos_config_writes(ansible, sim_factory, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    node = sim.nodes[0]["address"]
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    secrets = cluster / "secrets.yaml"
    dest = cluster / "controlplane.yaml"
    written = ansible.run(play([{
        "name": "render",
        "ferro.talos.talos_config": {
            "secrets_file": str(secrets), "generate_secrets": True, "dest": str(dest), **render_options(node),
        },
    }]))
    assert written.rc == 0, written.output
    rendered = written.task("render")["result"]
    files = sorted(p.name for p in cluster.iterdir())

    check = apply_rendered(ansible, node, secrets, check=True, diff=True)
    assert check.rc == 0, check.output
    result = check.task("apply")["result"]
    assert result["changed"] and result["maintenance"], result
    # The same bytes talos_config wrote, with what talos_config says about them.
    assert result["config_sha256"] == rendered["config_sha256"]
    assert result["contract"] == rendered["contract"] == "v1.13"
    # nodeLabels moves to a KubeNodeConfig document in 1.14: said the same way by both modules.
    assert result["deprecated_for_1_14"] == rendered["deprecated_for_1_14"] != []
    assert "rack: r1" in check.output  # the diff shows the rendered config
    assert sim.status()[0]["maintenance"], "check mode touched the node"

    run = apply_rendered(ansible, node, secrets)
    assert run.rc == 0, run.output
    assert run.task("apply")["result"]["changed"]
    assert not sim.status()[0]["maintenance"]

    # The node runs exactly the file talos_config wrote: applying that file has nothing to do.
    same = ansible.run(play([{
        "name": "apply",
        "ferro.talos.talos_apply": {"node": node, "secrets_file": str(secrets), "config": str(dest)},
    }]), check=True)
    assert same.rc == 0, same.output
    assert same.task("apply")["result"]["changed"] is False, same.task("apply")["result"]["msg"]

    again = apply_rendered(ansible, node, secrets)
    assert again.rc == 0 and again.task("apply")["result"]["changed"] is False, again.output
    check_after = apply_rendered(ansible, node, secrets, check=True, diff=True)
    assert check_after.rc == 0 and check_after.task("apply")["result"]["changed"] is False, check_after.output

    # A changed render option is a change of the node's config, shown in the diff.
    drift = apply_rendered(ansible, node, secrets, check=True, diff=True,
                           patches=[{"machine": {"nodeLabels": {"rack": "r2"}}}])
    assert drift.rc == 0 and drift.task("apply")["result"]["changed"], drift.output
    assert "machine.nodeLabels.rack" in drift.task("apply")["result"]["changed_paths"]

    forms = secret_forms(secrets.read_text())
    for r in (check, run, again, check_after, drift):
        assert leaks(r.output, forms) == []
    # Nothing was written beside the bundle and the file talos_config wrote.
    assert sorted(p.name for p in cluster.iterdir()) == files
    assert sorted(p.name for p in (tmp_path / "ansible-home" / "tmp").rglob("*")) == []


def test_bad_render_options_fail_naming_what_to_write(ansible, sim_factory, sample, tmp_path):
    sim = sim_factory(control_planes=1, workers=0)
    node = sim.nodes[0]["address"]
    talosconfig = tmp_path / "talosconfig"
    made = ansible.run(play([{
        "name": "talosconfig",
        "ferro.talos.talos_config": {"secrets_file": str(sample.secrets), "cluster_name": "x",
                                     "talosconfig": str(talosconfig), "endpoints": [node]},
    }]))
    assert made.rc == 0, made.output
    options = render_options(node)
    cases = [
        # (what is wrong, talos_apply's arguments, words the failure must say)
        ("credentials without the bundle",
         {"talosconfig": str(talosconfig), "render": options},
         ["render needs the secrets bundle", "secrets_file", "talos_config"]),
        ("config and render", {"secrets_file": str(sample.secrets), "config": str(sample.controlplane),
                               "render": options},
         ["config", "render", "mutually exclusive"]),
        ("neither config nor render", {"secrets_file": str(sample.secrets)}, ["config", "render"]),
        ("no machine type", {"secrets_file": str(sample.secrets),
                             "render": {k: v for k, v in options.items() if k != "machine_type"}},
         ["render.machine_type", "render.base_config"]),
        ("a typo in a patch", {"secrets_file": str(sample.secrets),
                               "render": {**options, "patches": [{"machine": {"kubelet": {"extraArgz": {}}}}]}},
         ["render:", "extraArgz", "extraArgs"]),
        ("an unknown contract", {"secrets_file": str(sample.secrets), "render": {**options, "talos_version": "v9"}},
         ["render: talos_version"]),
        ("an unknown render option", {"secrets_file": str(sample.secrets), "render": {**options, "dest": "x"}},
         ["dest", "render"]),
    ]
    for what, args, words in cases:
        for check in (True, False):
            run = ansible.run(play([{"name": "apply", "ferro.talos.talos_apply": {"node": node, **args}}]), check=check)
            assert run.rc != 0, f"{what}: {run.output}"
            msg = run.task("apply")["result"]["msg"]
            for word in words:
                assert word in msg, f"{what}: {word!r} not in {msg!r}"
            assert "panicked" not in run.output and "Traceback" not in run.output, run.output
    assert sim.status()[0]["maintenance"], "a failed task touched the node"
