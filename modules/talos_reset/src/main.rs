//! The `talos_reset` Ansible module: see `plugins/modules/talos_reset.yml`.

use ferro_talos_tasks::talos_reset;

fn main() {
    ferro_ansible_protocol::run_module("talos_reset", talos_reset::spec(), talos_reset::run)
}
