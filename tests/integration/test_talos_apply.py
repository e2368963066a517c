"""talos_apply against nodes of different Talos versions, as upstream resolves the apply modes."""

import yaml

from sim_cluster import converge


def apply_env_change(ansible, cluster, tmp_path, check=False):
    """Renders the node's config with a machine.env change (not live-applicable under Talos 1.13's rules)
    and applies it with mode auto."""
    cp = cluster["cps"][0]
    dest = tmp_path / "env.yaml"
    render = [
        {
            "name": "render",
            "ferro.talos.talos_config": {
                "secrets_file": str(cluster["secrets"]),
                "machine_type": "controlplane",
                "cluster_name": "gate",
                "cluster_endpoint": f"https://{cp}:6443",
                "patches": [{"machine": {"env": {"HTTPS_PROXY": "http://proxy.example:3128"}}}],
                "dest": str(dest),
            },
        }
    ]
    assert ansible.run(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": render}])).rc == 0
    apply = [
        {
            "name": "apply",
            "ferro.talos.talos_apply": {"node": cp, "config": str(dest), "secrets_file": str(cluster["secrets"])},
        }
    ]
    return ansible.run(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": apply}]), check=check)


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
