//! The `talos_bootstrap` Ansible module: see `plugins/modules/talos_bootstrap.yml`.

use ferro_talos_tasks::talos_bootstrap;

fn main() {
    ferro_ansible_protocol::run_module(
        "talos_bootstrap",
        talos_bootstrap::spec(),
        talos_bootstrap::run,
    )
}
