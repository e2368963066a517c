# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark-only callback (tools/bench scale): the wall time of every task a playbook started.

Writes a JSON list of {name, action, seconds, ran} to $FERRO_TASK_TIMES when the playbook ends. A task
runs from its start to the next task's start, so the controller's work between tasks (templating,
setting up the next batch) counts towards the task before it. `ran` is false when every result was
`skipped`: then no module ran and the time is the controller's alone."""

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_times
type: aggregate
short_description: record the wall time of every task for tools/bench
description: benchmark-only
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._current = None
        self._records = []

    def _close(self):
        if self._current is not None:
            self._current["seconds"] = time.perf_counter() - self._current.pop("started")
            self._records.append(self._current)
            self._current = None

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._close()
        self._current = {"name": task.get_name(), "action": task.action, "ran": False, "started": time.perf_counter()}

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def _ran(self, result, *args, **kwargs):
        if self._current is not None:
            self._current["ran"] = True

    v2_runner_on_ok = _ran
    v2_runner_on_failed = _ran
    v2_runner_on_unreachable = _ran
    v2_runner_item_on_ok = _ran
    v2_runner_item_on_failed = _ran

    def v2_playbook_on_stats(self, stats):
        self._close()
        path = os.environ.get("FERRO_TASK_TIMES")
        if path:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(self._records, f)
