//! The `talos_kubeconfig` Ansible module: see `plugins/modules/talos_kubeconfig.yml`.

use ferro_talos_tasks::talos_kubeconfig;

fn main() {
    ferro_ansible_protocol::run_module(
        "talos_kubeconfig",
        talos_kubeconfig::spec(),
        talos_kubeconfig::run,
    )
}
