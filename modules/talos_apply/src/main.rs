//! The `talos_apply` Ansible module: see `plugins/modules/talos_apply.yml`.

use ferro_talos_tasks::talos_apply;

fn main() {
    ferro_ansible_protocol::run_module("talos_apply", talos_apply::spec(), talos_apply::run)
}
