# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action plugin of every ferro.talos module (meta/runtime.yml routes each module here).

The modules are programs that talk to Talos over its API; they run wherever Ansible sends them, like any
module. Talos nodes have no SSH and no shell, so a task that forgets `delegate_to: localhost` (or a play
without `connection: local`) reaches a node on port 22 and fails with an SSH error that does not say what
to change. This plugin runs the module the normal way and, when the connection fails, adds what to write.
"""

from __future__ import annotations

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action.normal import ActionModule as NormalAction

HINT = (
    "ferro.talos modules run on the controller and reach Talos nodes over the Talos API; Talos nodes have "
    "no SSH. If {host} is a Talos node, run the task on the controller: add `delegate_to: localhost` to the "
    "task, or `connection: local` to the play (ansible_connection: local in the inventory), and name the "
    "node in the module's `node` option (for example node: \"{{{{ ansible_host }}}}\")"
)


class ActionModule(NormalAction):
    def run(self, tmp=None, task_vars=None):
        try:
            return super().run(tmp, task_vars)
        except AnsibleConnectionFailure as failure:
            if self._connection.transport in ("local", "ansible.builtin.local"):
                raise
            host = self._play_context.remote_addr or "the host"
            raise AnsibleConnectionFailure(f"{failure.message}. {HINT.format(host=host)}") from failure
