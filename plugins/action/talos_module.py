# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action plugin of every ferro.talos module (meta/runtime.yml routes each module here).

The modules are programs that talk to Talos over its API; they run wherever Ansible sends them, like any
module. This plugin adds two things only the controller can do, then runs the module the normal way:

- A `secrets_file` encrypted with Ansible Vault is decrypted here, in memory, with the vault secrets given
  to ansible-playbook, and handed to the module beside the path in the internal option
  `secrets_file_decrypted` (a module never sees the vault password). Only when the module runs on the
  controller, where that file is.
- Talos nodes have no SSH and no shell, so a task that forgets `delegate_to: localhost` (or a play without
  `connection: local`) reaches a node on port 22 and fails with an SSH error that does not say what to change.
  When the connection fails, this plugin adds what to write.
"""

from __future__ import annotations

import os

import yaml
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.parsing.vault import is_encrypted_file
from ansible.plugins.action.normal import ActionModule as NormalAction

LOCAL_CONNECTIONS = ("local", "ansible.builtin.local", "ansible.legacy.local")

SSH_HINT = (
    "ferro.talos modules run on the controller and reach Talos nodes over the Talos API; Talos nodes have "
    "no SSH. If {host} is a Talos node, run the task on the controller: add `delegate_to: localhost` to the "
    "task, or `connection: local` to the play (ansible_connection: local in the inventory), and name the "
    "node in the module's `node` option (for example node: \"{{{{ ansible_host }}}}\")"
)


class ActionModule(NormalAction):
    def run(self, tmp=None, task_vars=None):
        try:
            self._pass_vaulted_secrets_decrypted()
        except AnsibleError as failure:
            return {"failed": True, "changed": False, "msg": failure.message}
        try:
            return super().run(tmp, task_vars)
        except AnsibleConnectionFailure as failure:
            if self._connection.transport in LOCAL_CONNECTIONS:
                raise
            host = self._play_context.remote_addr or "the host"
            raise AnsibleConnectionFailure(f"{failure.message}. {SSH_HINT.format(host=host)}") from failure

    def _pass_vaulted_secrets_decrypted(self):
        """Hands the module the decrypted bundle of a vault-encrypted `secrets_file`."""
        path = self._task.args.get("secrets_file")
        if not path or self._task.args.get("secrets") or self._connection.transport not in LOCAL_CONNECTIONS:
            return
        # Resolved as the module resolves it: a local module runs in ansible-playbook's working directory.
        full = os.path.abspath(os.path.expanduser(str(path)))
        if not os.path.isfile(full):
            return
        with open(full, "rb") as f:
            if not is_encrypted_file(f):
                return
        try:
            text = self._decrypted_text(full)
        except AnsibleError as failure:
            raise AnsibleError(
                f"secrets_file {path} is encrypted with Ansible Vault and could not be decrypted ({failure.message}); "
                "give ansible-playbook the vault password with --ask-vault-pass or --vault-password-file"
            ) from None
        try:
            bundle = yaml.safe_load(text)
        except yaml.YAMLError:
            bundle = None
        if not isinstance(bundle, dict):
            # The error names the file, never its content.
            raise AnsibleError(f"secrets_file {path}: the decrypted file is not a YAML mapping (a secrets bundle)")
        self._task.args = {**self._task.args, "secrets_file_decrypted": bundle}

    def _decrypted_text(self, path):
        """The file's plain text, decrypted in memory with the play's vault secrets (never written out)."""
        loader = self._loader
        if hasattr(loader, "get_text_file_contents"):  # ansible-core 2.19 and later
            return str(loader.get_text_file_contents(path))
        data, _show_content = loader._get_file_contents(path)  # earlier ansible-core
        return data.decode("utf-8")
