//! The `talos_health` Ansible module: see `plugins/modules/talos_health.yml`.

use ferro_talos_tasks::talos_health;

fn main() {
    ferro_ansible_protocol::run_module("talos_health", talos_health::spec(), talos_health::run)
}
