"""talos_apply against nodes of different Talos versions, as upstream resolves the apply modes."""

import time

import yaml

from sim_cluster import converge


def render_and_apply(ansible, cluster, tmp_path, patch, name, mode="auto", check=False, try_timeout=60, expect_ok=True):
    """Renders the first control plane's config with `patch` (rendering always runs for real) and applies it
    with `mode`; returns the apply's result (which must succeed unless `expect_ok` is false)."""
    cp = cluster["cps"][0]
    dest = tmp_path / f"{name}.yaml"

    def play(tasks):
        return yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}])

    render = {
        "name": "render",
        "ferro.talos.talos_config": {
            "secrets_file": str(cluster["secrets"]),
            "machine_type": "controlplane",
            "cluster_name": "gate",
            "cluster_endpoint": f"https://{cp}:6443",
            "patches": [patch],
            "dest": str(dest),
        },
    }
    assert ansible.run(play([render])).rc == 0
    apply = {
        "name": "apply",
        "ferro.talos.talos_apply": {
            "node": cp,
            "config": str(dest),
            "secrets_file": str(cluster["secrets"]),
            "mode": mode,
            "try_timeout": try_timeout,
        },
    }
    run = ansible.run(play([apply]), check=check)
    if expect_ok:
        assert run.rc == 0, run.output
    return run


# machine.env is not live-applicable under Talos 1.13's rules.
ENV_CHANGE = {"machine": {"env": {"HTTPS_PROXY": "http://proxy.example:3128"}}}


def apply_env_change(ansible, cluster, tmp_path, check=False):
    return render_and_apply(ansible, cluster, tmp_path, ENV_CHANGE, "env", check=check)


def test_talos_1_14_applies_without_a_reboot_and_the_result_says_the_change_waits(ansible, sim_factory, tmp_path):
    """Talos 1.14 resolves AUTO to NO_REBOOT for every change (internal/app/machined/internal/server/v1alpha1/
    v1alpha1_server.go at v1.14.0-rc.1): the result must not claim a reboot that never comes."""
    sim = sim_factory(control_planes=1, workers=0, version="v1.14.0-rc.1")
    cluster = converge(ansible, sim, tmp_path, bootstrap=False)
    boot = sim.status()[0]["boot_id"]

    check = apply_env_change(ansible, cluster, tmp_path, check=True)
    assert check.rc == 0, check.output
    result = check.task("apply")["result"]
    assert result["resolved_mode"] == "no_reboot"
    assert result["reboot_required"] is False and result["pending_reboot"] is True
    assert "machine.env" in " ".join(result["reboot_reasons"])
    assert "take effect only at the node's next reboot" in result["msg"]

    run = apply_env_change(ansible, cluster, tmp_path)
    assert run.rc == 0, run.output
    result = run.task("apply")["result"]
    assert result["changed"] and result["pending_reboot"] is True and result["reboot_required"] is False
    assert "take effect only at the node's next reboot" in run.output  # the warning, in the normal output
    assert sim.status()[0]["boot_id"] == boot, "1.14 does not reboot for a config"


def test_talos_1_14_refuses_mode_reboot_and_the_error_says_what_to_use(ansible, sim_factory, tmp_path):
    """Talos 1.14 answers a REBOOT apply on a configured node with Unimplemented, before it validates
    (ApplyConfiguration in internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go at v1.14.1): the task
    fails naming the mode and the module to use instead, in check mode too, and the node neither changes nor
    reboots."""
    sim = sim_factory(control_planes=1, workers=0, version="v1.14.1")
    cluster = converge(ansible, sim, tmp_path, bootstrap=False)
    boot = sim.status()[0]["boot_id"]
    for check in (True, False):
        run = render_and_apply(ansible, cluster, tmp_path, ENV_CHANGE, "env", mode="reboot", check=check, expect_ok=False)
        assert run.rc != 0, run.output
        msg = run.task("apply")["result"]["msg"]
        assert "the REBOOT mode is not supported" in msg, msg
        assert "set mode: auto" in msg and "talos_reboot" in msg, msg
    assert sim.status()[0]["boot_id"] == boot


def test_talos_1_13_reboots_for_the_same_change(ansible, sim_factory, tmp_path):
    """The same change on 1.13: AUTO resolves to REBOOT (CanApplyImmediate fails) and the task waits for it."""
    sim = sim_factory(control_planes=1, workers=0)
    cluster = converge(ansible, sim, tmp_path, bootstrap=False)
    boot = sim.status()[0]["boot_id"]
    run = apply_env_change(ansible, cluster, tmp_path)
    assert run.rc == 0, run.output
    result = run.task("apply")["result"]
    assert result["resolved_mode"] == "reboot" and result["reboot_required"] is True
    assert result["pending_reboot"] is False
    assert sim.status()[0]["boot_id"] != boot


def test_staged_and_try_are_refused_for_a_first_config(ansible, sim_factory, sample, tmp_path):
    """In maintenance mode Talos takes STAGED and TRY (v1alpha1_server.go at v1.13.9) but neither gives the node a
    config to run: STAGED only writes the persistent config, TRY rolls back to nothing. The task says so at once
    instead of waiting its whole timeout for a node that never leaves maintenance mode."""
    sim = sim_factory(control_planes=1, workers=0)
    node = sim.nodes[0]["address"]
    for mode in ("staged", "try"):
        tasks = [
            {
                "name": "apply",
                "ferro.talos.talos_apply": {
                    "node": node,
                    "config": str(sample.controlplane),
                    "secrets_file": str(sample.secrets),
                    "mode": mode,
                    "timeout": 600,
                },
            }
        ]
        for check in (True, False):
            run = ansible.run(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]), check=check)
            assert run.rc != 0
            msg = run.task("apply")["result"]["msg"]
            assert msg.startswith(f"node {node} is in maintenance mode, where mode={mode} does not give it a config"), msg
            assert "mode auto or no_reboot" in msg
    status = sim.status()[0]
    assert status["maintenance"] and not status["has_staged_config"]


def apply_labels(ansible, cluster, tmp_path, mode, label, check=False, try_timeout=60):
    """A node label (live-applicable) applied with `mode`; returns the apply's result."""
    patch = {"machine": {"nodeLabels": {"tier": label}}}
    run = render_and_apply(ansible, cluster, tmp_path, patch, f"labels-{label}", mode, check, try_timeout)
    return run.task("apply")["result"]


def test_staged_and_tried_configs_are_compared_with_what_the_next_boot_loads(ansible, sim_factory, tmp_path):
    """The `persistent` MachineConfig is what the next boot loads: ahead of the running one after a staged apply,
    behind it while a try runs (pkg/machinery/resources/config/machine_config.go at v1.13.9). A staged config is
    reported once, and a config being tried is never "already running" for a mode that should keep it."""
    sim = sim_factory(control_planes=1, workers=0)
    cluster = converge(ansible, sim, tmp_path, bootstrap=False)
    boot = sim.status()[0]["boot_id"]

    first = apply_labels(ansible, cluster, tmp_path, "staged", "staged")
    assert first["changed"] and first["resolved_mode"] == "staged"
    again = apply_labels(ansible, cluster, tmp_path, "staged", "staged")
    assert not again["changed"] and again["staged_pending"] is True, again
    assert "already has this config staged" in again["msg"]
    assert sim.status()[0]["boot_id"] == boot

    tried = apply_labels(ansible, cluster, tmp_path, "try", "tried", try_timeout=4)
    assert tried["changed"] and tried["resolved_mode"] == "try"
    retried = apply_labels(ansible, cluster, tmp_path, "try", "tried", try_timeout=4)
    assert not retried["changed"] and retried["try_pending"] is True, retried
    # Keeping it: auto applies it again, which makes it permanent and cancels the rollback.
    check = apply_labels(ansible, cluster, tmp_path, "auto", "tried", check=True)
    assert check["changed"], check
    kept = apply_labels(ansible, cluster, tmp_path, "auto", "tried")
    assert kept["changed"] and kept["resolved_mode"] == "no_reboot", kept
    time.sleep(5)
    settled = apply_labels(ansible, cluster, tmp_path, "auto", "tried")
    assert not settled["changed"] and settled["try_pending"] is False, settled
    assert "already runs this config" in settled["msg"]


def vlan_patch(vlan_id):
    return {"machine": {"network": {"interfaces": [
        {"interface": "eth1", "vlans": [{"vlanId": vlan_id, "addresses": ["10.20.0.2/24"]}],
         "routes": [{"network": "10.30.0.0/16", "gateway": "10.20.0.1"}]}]}}}


def without_zero_values(rendered, path):
    """The same settings the way another tool writes them: the vlan's `routes: []` left out, keys in another order."""
    docs = list(yaml.safe_load_all(rendered.read_text()))
    del docs[0]["machine"]["network"]["interfaces"][0]["vlans"][0]["routes"]
    docs[0]["machine"] = dict(reversed(list(docs[0]["machine"].items())))
    path.write_text(yaml.safe_dump_all(docs, sort_keys=True))
    assert "routes: []" not in path.read_text()
    return path


def test_a_live_config_with_or_without_talosctls_zero_values_reports_no_drift(ansible, sim_factory, tmp_path):
    """talosctl writes every field its Go structs have without omitempty, zero or not (pkg/machinery/config/encoder/
    encoder.go -> yaml.Marshal at v1.13.9: `routes: []` under a vlan); configs written by other tools leave them out.
    Both say the same thing, so neither is drift: changed=false and no diff lines, whichever of the two the node
    runs and whichever is desired."""
    sim = sim_factory(control_planes=1, workers=0)
    cluster = converge(ansible, sim, tmp_path, bootstrap=False)
    cp = cluster["cps"][0]

    def apply(config, check=False):
        task = {"name": "apply", "ferro.talos.talos_apply": {
            "node": cp, "config": str(config), "secrets_file": str(cluster["secrets"])}}
        run = ansible.run(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]),
                          check=check, diff=True)
        assert run.rc == 0, run.output
        return run.task("apply")["result"]

    def no_drift(config):
        boot = sim.status()[0]["boot_id"]
        for check in (True, False):
            result = apply(config, check=check)
            assert result["changed"] is False, (config.name, check, result)
            assert result["changed_paths"] == []
            assert not result.get("diff"), result.get("diff")
        assert sim.status()[0]["boot_id"] == boot, "nothing was applied"

    # The node runs talosctl's form (rendered by talos_config, zeros included); the sparse form is desired.
    assert render_and_apply(ansible, cluster, tmp_path, vlan_patch(20), "full20").task("apply")["result"]["changed"]
    full20 = tmp_path / "full20.yaml"
    assert "routes: []" in full20.read_text(), "the vlan's always-written routes, as talosctl writes them"
    no_drift(without_zero_values(full20, tmp_path / "sparse20.yaml"))

    # The node runs the sparse form; talosctl's form is desired.
    render_and_apply(ansible, cluster, tmp_path, vlan_patch(21), "full21", check=True)
    sparse21 = without_zero_values(tmp_path / "full21.yaml", tmp_path / "sparse21.yaml")
    assert apply(sparse21)["changed"] is True
    no_drift(tmp_path / "full21.yaml")
