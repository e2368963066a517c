//! The `talos_info` Ansible module: see `plugins/modules/talos_info.yml`.

use ferro_talos_tasks::talos_info;

fn main() {
    ferro_ansible_protocol::run_module("talos_info", talos_info::spec(), talos_info::run)
}
