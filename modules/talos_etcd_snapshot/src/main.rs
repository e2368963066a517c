//! The `talos_etcd_snapshot` Ansible module: see `plugins/modules/talos_etcd_snapshot.yml`.

use ferro_talos_tasks::talos_etcd_snapshot;

fn main() {
    ferro_ansible_protocol::run_module(
        "talos_etcd_snapshot",
        talos_etcd_snapshot::spec(),
        talos_etcd_snapshot::run,
    )
}
