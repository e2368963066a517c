"""Brings a talos-sim cluster to a known state through the collection's own modules."""

import yaml

from conftest import ANSIBLE_BIN, ROOT


def role_variables(tmp_path, cluster_name, sim, **extra):
    """The cluster role's variables for a simulated cluster: files under tmp_path/cluster, a bundle generated on
    the first run, the first control plane as the Kubernetes endpoint, short health gates; `extra` on top."""
    cluster = tmp_path / "cluster"
    return {
        "talos_cluster_name": cluster_name,
        "talos_cluster_endpoint": sim.nodes[0]["address"],
        "talos_cluster_secrets_file": str(cluster / "secrets.yaml"),
        "talos_cluster_talosconfig": str(cluster / "talosconfig"),
        "talos_cluster_kubeconfig": str(cluster / "kubeconfig"),
        "talos_cluster_generate_secrets": True,
        "talos_cluster_health_timeout": 60,
        **extra,
    }


def site_inventory(sim, path, variables):
    """Writes the inventory a user writes for examples/site.yml: control planes cp1.., workers w1..
    with their node addresses as ansible_host, modules run on the controller; returns its path."""
    cps = [n for n in sim.nodes if n["role"] == "controlplane"]
    workers = [n for n in sim.nodes if n["role"] == "worker"]
    data = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": str(ANSIBLE_BIN / "python"),
                **variables,
            },
            "hosts": {"localhost": None},
            "children": {
                "controlplane": {"hosts": {f"cp{i + 1}": {"ansible_host": n["address"]} for i, n in enumerate(cps)}},
                "worker": {"hosts": {f"w{i + 1}": {"ansible_host": n["address"]} for i, n in enumerate(workers)}},
            },
        }
    }
    path.write_text(yaml.safe_dump(data))
    return path


def converge(ansible, sim, tmp_path, bootstrap=True, cluster_name="gate"):
    """Secrets, per-node configs, apply (and bootstrap etcd): returns what the tests need.

    Done with ferro.talos.talos_config, talos_apply and talos_bootstrap, like a user would."""
    cps = [n["address"] for n in sim.nodes if n["role"] == "controlplane"]
    workers = [n["address"] for n in sim.nodes if n["role"] == "worker"]
    cluster = tmp_path / "cluster"
    secrets = cluster / "secrets.yaml"
    talosconfig = cluster / "talosconfig"
    nodes = [{"address": a, "type": "controlplane"} for a in cps] + [{"address": a, "type": "worker"} for a in workers]
    tasks = [
        {
            "name": "secrets and talosconfig",
            "ferro.talos.talos_config": {
                "secrets_file": str(secrets),
                "generate_secrets": True,
                "cluster_name": cluster_name,
                "talosconfig": str(talosconfig),
                "endpoints": cps,
            },
        },
        {
            "name": "render",
            "ferro.talos.talos_config": {
                "secrets_file": str(secrets),
                "machine_type": "{{ item.type }}",
                "cluster_name": cluster_name,
                "cluster_endpoint": f"https://{cps[0]}:6443",
                "dest": str(cluster) + "/{{ item.address }}.yaml",
            },
            "loop": nodes,
        },
        {
            "name": "apply",
            "ferro.talos.talos_apply": {
                "node": "{{ item.address }}",
                "config": str(cluster) + "/{{ item.address }}.yaml",
                "secrets_file": str(secrets),
            },
            "loop": nodes,
        },
    ]
    if bootstrap:
        tasks.append(
            {
                "name": "bootstrap",
                "ferro.talos.talos_bootstrap": {
                    "node": cps[0],
                    "control_plane_nodes": cps,
                    "secrets_file": str(secrets),
                },
            }
        )
    playbook = yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}])
    run = ansible.run(playbook)
    assert run.rc == 0, "cluster setup failed:\n" + run.output
    return {"secrets": secrets, "talosconfig": talosconfig, "cps": cps, "workers": workers}
