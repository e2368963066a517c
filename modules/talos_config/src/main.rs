//! The `talos_config` Ansible module: see `plugins/modules/talos_config.yml`.

use ferro_talos_tasks::talos_config;

fn main() {
    ferro_ansible_protocol::run_module("talos_config", talos_config::spec(), talos_config::run)
}
