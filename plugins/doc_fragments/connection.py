# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options shared by every ferro.talos module that talks to a Talos node."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  node:
    description:
      - Address (IP or name) of the Talos node the task acts on.
    type: str
    required: true
  endpoint:
    description:
      - The Talos API endpoint to connect to, when it is not the node itself (a control plane or a virtual IP).
        Calls are then routed to O(node) with C(node) metadata, like C(talosctl -e ENDPOINT -n NODE).
      - Defaults to O(node). The port defaults to 50000.
    type: str
  talosconfig:
    description:
      - Path of the talosconfig with the client certificate. Defaults to C($TALOSCONFIG), then C(~/.talos/config).
      - Used when O(secrets_file) and O(secrets) are not given, or a node must be reached before the bundle is at hand.
    type: path
  context:
    description: talosconfig context to use; defaults to the file's current context.
    type: str
  secrets_file:
    description:
      - The cluster's secrets bundle. When given, an admin client certificate is derived from it in memory
        (never written to disk), so the module works before any talosconfig exists, for example under C(--check)
        before the first apply.
      - A file encrypted with Ansible Vault is decrypted on the controller, in memory, with the vault password given
        to ansible-playbook, when the module runs on the controller. Elsewhere pass O(secrets) from the
        C(ansible.builtin.unvault) lookup.
    type: path
  secrets:
    description: The secrets bundle as a dict (for example from Ansible Vault); see O(secrets_file).
    type: dict
  connect_timeout:
    description: Seconds to wait for the TCP connection and TLS handshake.
    type: int
    default: 10
notes:
  - "Run the module on the controller (C(delegate_to: localhost) or C(connection: local)); it reaches nodes over
    the Talos API on port 50000 with mutual TLS."
"""
