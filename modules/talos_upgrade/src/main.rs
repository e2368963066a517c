//! The `talos_upgrade` Ansible module: see `plugins/modules/talos_upgrade.yml`.

use ferro_talos_tasks::talos_upgrade;

fn main() {
    ferro_ansible_protocol::run_module("talos_upgrade", talos_upgrade::spec(), talos_upgrade::run)
}
