# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action plugin of every ferro.talos module (meta/runtime.yml routes each module here).

Every module is one program, `ferro-talos`, shipped per platform as `bin/ferro-talos-<os>-<arch>` in the
collection; the program runs the module its arguments file names. This plugin runs it:

- On the controller (`connection: local`, `delegate_to: localhost`, no become), in place: the controller's
  own binary runs once with the arguments on a pipe (`/dev/stdin` as its arguments file), and its JSON is
  the result. No file, no copy, no chmod, no temporary directory.
- Anywhere else (a task delegated to a bastion host, or `become`), the way Ansible runs any binary
  module: a temporary directory on that host, the binary for that host's platform (`uname -sm`, asked
  once per host) and the arguments file transferred, run, cleaned up.

The arguments are the ones Ansible gives any module (`_update_module_args`: check mode, diff, no_log,
verbosity, the module's name), and the result goes through Ansible's own parsing, so check mode, diff
mode, no_log, warnings, deprecations, the task's environment and return values are the same either way.
`FERRO_TALOS_IN_PLACE=0` in ansible-playbook's environment turns the in-place path off.

It also adds what only the controller can do:

- A `secrets_file` encrypted with Ansible Vault is decrypted here, in memory, with the vault secrets given
  to ansible-playbook, and handed to the module beside the path in the internal option
  `secrets_file_decrypted` (a module never sees the vault password). Only when the module runs on the
  controller, where that file is.
- Talos nodes have no SSH and no shell, so a task that forgets `delegate_to: localhost` (or a play without
  `connection: local`) reaches a node on port 22 and fails with an SSH error that does not say what to change.
  When the connection fails, this plugin adds what to write.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess

import yaml
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.json import Direction, get_module_encoder
from ansible.parsing.vault import is_encrypted_file
from ansible.plugins.action.normal import ActionModule as NormalAction

try:  # ansible-core 2.19 and 2.20: the parsed result is a dict, cleaned by this function
    from ansible.vars.clean import remove_internal_keys
except ImportError:  # ansible-core 2.21: the parsed result is a UnifiedTaskResult that cleans itself
    remove_internal_keys = None

LOCAL_CONNECTIONS = ("local", "ansible.builtin.local", "ansible.legacy.local")

SSH_HINT = (
    "ferro.talos modules run on the controller and reach Talos nodes over the Talos API; Talos nodes have "
    "no SSH. If {host} is a Talos node, run the task on the controller: add `delegate_to: localhost` to the "
    "task, or `connection: local` to the play (ansible_connection: local in the inventory), and name the "
    "node in the module's `node` option (for example node: \"{{{{ ansible_host }}}}\")"
)

# The collection's root: plugins/action/ is two levels below it.
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN_DIR = os.path.join(COLLECTION_ROOT, "bin")

# Binary modules get their arguments in the serialization profile Ansible uses for them.
PROFILE = "legacy"

MACHINES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def platform_name(system, machine):
    """`linux-x86_64`, `linux-aarch64`, `darwin-aarch64`: the suffix of the binary for a platform."""
    machine = machine.strip().lower()
    return f"{system.strip().lower()}-{MACHINES.get(machine, machine)}"


def binary_for(platform_id):
    return os.path.join(BIN_DIR, f"ferro-talos-{platform_id}")


def no_binary(platform_id, where):
    shipped = sorted(n[len("ferro-talos-"):] for n in os.listdir(BIN_DIR)) if os.path.isdir(BIN_DIR) else []
    return {
        "failed": True,
        "changed": False,
        "msg": (
            f"ferro.talos has no module program for {where} ({platform_id}); this installation has "
            f"{', '.join(shipped) or 'none'}. Run the task on a controller of one of those platforms, or build "
            "the collection on this platform from a clone of the repository (make build) and install that tarball"
        ),
    }


class ActionModule(NormalAction):
    # What each host the modules were sent to runs on, learnt once per ansible-playbook run.
    _remote_platforms: dict[str, str] = {}

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

    # -- running the module ----------------------------------------------------------------------

    def _execute_module(self, module_name=None, module_args=None, tmp=None, task_vars=None, persist_files=False,
                        delete_remote_tmp=None, wrap_async=False, **kwargs):
        module_name = module_name or self._task.action
        if wrap_async or self._task.async_val:
            return {"failed": True, "changed": False,
                    "msg": f"{module_name} does not run with async: remove async and poll from the task"}
        args = dict(self._task.args if module_args is None else module_args)
        self._update_module_args(module_name, args, task_vars or {})
        if self._runs_in_place():
            return self._run_in_place(args)
        return self._run_transferred(args)

    def _runs_in_place(self):
        return (
            self._connection.transport in LOCAL_CONNECTIONS
            and not self._play_context.become
            and os.environ.get("FERRO_TALOS_IN_PLACE", "1") != "0"
        )

    def _args_json(self, args):
        return json.dumps(args, cls=get_module_encoder(PROFILE, Direction.CONTROLLER_TO_MODULE))

    def _result(self, res):
        """The module's JSON as Ansible reads any module's output, internal keys removed."""
        parsed = self._parse_returned_data(res, PROFILE)
        if remove_internal_keys is None:
            # As ActionBase._execute_module does in ansible-core 2.21.
            parsed.remove_internal_keys()
            return parsed.as_result_dict(for_round_trip=True)
        remove_internal_keys(parsed)
        return parsed

    def _run_in_place(self, args):
        binary = binary_for(platform_name(platform.system(), platform.machine()))
        if not os.access(binary, os.X_OK):
            return no_binary(platform_name(platform.system(), platform.machine()), "this controller")
        environment = {}
        self._compute_environment_string(environment)
        env = {**os.environ, **{str(k): str(v) for k, v in environment.items()}}
        # The arguments go down a pipe, named to the program as its arguments file: nothing is
        # written to disk (they may hold the decrypted bundle) and nothing is left to clean up.
        proc = subprocess.run([binary, "/dev/stdin"], input=self._args_json(args).encode("utf-8"),
                              capture_output=True, env=env, check=False)
        return self._result({
            "rc": proc.returncode,
            "stdout": proc.stdout.decode("utf-8", "replace"),
            "stderr": proc.stderr.decode("utf-8", "replace"),
        })

    def _remote_platform(self):
        host = self._task.delegate_to or self._play_context.remote_addr or "localhost"
        if host not in self._remote_platforms:
            res = self._low_level_execute_command("uname -sm", sudoable=False)
            parts = res.get("stdout", "").split()
            if res.get("rc") != 0 or len(parts) != 2:
                raise AnsibleError(f"cannot tell the platform of {host} (uname -sm answered {res.get('stdout', '')!r})")
            self._remote_platforms[host] = platform_name(parts[0], parts[1])
        return self._remote_platforms[host]

    def _run_transferred(self, args):
        """As Ansible runs a binary module: a temporary directory, the binary and its arguments file there."""
        try:
            platform_id = self._remote_platform()
        except AnsibleConnectionFailure:
            raise  # unreachable, and run() says why when it is a Talos node
        except AnsibleError as failure:
            return {"failed": True, "changed": False, "msg": failure.message}
        binary = binary_for(platform_id)
        if not os.access(binary, os.X_OK):
            return no_binary(platform_id, "the host the task runs on")
        tmpdir = self._connection._shell.tmpdir
        if tmpdir is None:
            self._make_tmp_path()
            tmpdir = self._connection._shell.tmpdir
        shell = self._connection._shell
        remote_binary = shell.join_path(tmpdir, "ferro-talos")
        remote_args = shell.join_path(tmpdir, "args")
        self._transfer_file(binary, remote_binary)
        self._transfer_data(remote_args, self._args_json(args))
        self._fixup_perms2([tmpdir, remote_binary, remote_args], self._get_remote_user())
        cmd = shell.build_module_command(self._compute_environment_string(), None, remote_binary,
                                         arg_path=remote_args).strip()
        return self._result(self._low_level_execute_command(cmd, sudoable=True))

    # -- secrets ---------------------------------------------------------------------------------

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
            text = str(self._loader.get_text_file_contents(full))
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
