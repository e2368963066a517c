"""talos_apply against nodes of different Talos versions, as upstream resolves the apply modes."""

import time

import yaml

from sim_cluster import converge


def render_and_apply(ansible, cluster, tmp_path, patch, name, mode="auto", check=False, try_timeout=60):
    """Renders the first control plane's config with `patch` (rendering always runs for real) and applies it
    with `mode`; returns the apply's result."""
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
