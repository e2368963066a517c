# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only callback: appends every task result as one JSON line to $FERRO_RECORD_FILE."""

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: record_results
type: aggregate
short_description: write task results as JSON lines for the integration tests
description: test-only
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The status of each loop item, by host and task, in loop order. ansible-core 2.21 no longer puts
        # `failed: true` into a failed item's entry of `results`; the item callbacks still say which failed.
        self._item_statuses = {}

    def _item(self, result, status):
        self._item_statuses.setdefault((result._host.get_name(), result._task._uuid), []).append(status)

    def v2_runner_item_on_ok(self, result):
        self._item(result, "ok")

    def v2_runner_item_on_failed(self, result):
        self._item(result, "failed")

    def v2_runner_item_on_skipped(self, result):
        self._item(result, "skipped")

    def _record(self, result, status):
        path = os.environ.get("FERRO_RECORD_FILE")
        if not path:
            return
        entry = {
            "task": result._task.get_name(),
            "host": result._host.get_name(),
            "status": status,
            "result": result._result,
        }
        items = self._item_statuses.pop((result._host.get_name(), result._task._uuid), None)
        if items is not None:
            entry["item_statuses"] = items
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")
