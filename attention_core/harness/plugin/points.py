"""The self-check's points: each case check carries what it is worth, and a run with ``--impl`` ends with one
line of the points of the visible graded checks, ``points: 37 / 52`` (``--points-json PATH`` writes them check
by check).

A check is worth what grading gives for its values (``harness/reading/points.py``, the one rule): a passed
check earns it all, a failed one 0 (grading may give a share of a check some of whose results are right; the
self-check does not, and it checks no gradients). A check counts once whatever number of devices ran it, and
earns its points where it passed on each one that ran it. The figures travel as junit properties, set when the
items are collected (``check``, ``max_points``, and ``visible_points`` for a check the students count), then
``points`` once it ran: a check whose set-up fails (a submission that does not import) still counts, with 0,
and the workers of ``-n`` send them to the process that prints the line.
"""

import json
import os
from pathlib import Path

import pytest

from attention_core.harness.reading.points import graded_points, visible_points
from attention_core.harness.text import points as points_text


class Tally:
    """A pytest plugin (one per run) that sets each case check's points and adds up those of the visible ones.

    ``assignment``: a function giving the run's Assignment (made on first need)."""

    def __init__(self, config, assignment):
        self.config, self.assignment = config, assignment
        self.checks = {}  # check id -> {"max_points", "ran", "failed"}, in the order the reports came

    def pytest_collection_modifyitems(self, items):
        for item in items:
            check = item.callspec.params.get("case_check") if hasattr(item, "callspec") else None
            if check is None or check.error is not None:
                continue
            item.user_properties += [("check", check.id), ("max_points", graded_points(self.assignment(), check))]
            counted = visible_points(self.assignment(), check)
            if counted is not None:
                item.user_properties.append(("visible_points", counted))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        found = dict(item.user_properties)
        if call.when == "call" and "max_points" in found:  # as record_property does: junit reads it at teardown
            item.user_properties.append(("points", found["max_points"] if report.passed else 0.0))
        return report

    def pytest_runtest_logreport(self, report):
        found = dict(report.user_properties)
        if "visible_points" not in found:
            return
        entry = self.checks.setdefault(
            found["check"], {"max_points": found["visible_points"], "ran": False, "failed": False}
        )
        entry["failed"] |= report.failed  # in its set-up, call or teardown
        entry["ran"] |= report.failed or (report.when == "call" and report.passed)  # not a device it skipped

    def rows(self):
        """One dict per visible graded check that ran: its id, whether it passed, its points and its maximum."""
        return [
            {
                "check": check,
                "passed": not entry["failed"],
                "points": points_text(0.0 if entry["failed"] else entry["max_points"]),
                "max_points": points_text(entry["max_points"]),
            }
            for check, entry in self.checks.items()
            if entry["ran"]
        ]

    def totals(self):
        rows = self.rows()
        return points_text(sum(r["points"] for r in rows)), points_text(sum(r["max_points"] for r in rows))

    def write_line(self, terminalreporter):
        """The run's last line before pytest's counts: ``points: X / Y`` (with ``--impl``, where a check ran)."""
        if self.config.getoption("--impl") is not None and self.rows():
            earned, total = self.totals()
            terminalreporter.write_line(f"points: {earned} / {total}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        path = self.config.getoption("--points-json")
        if path is None or hasattr(self.config, "workerinput"):  # a worker of -n: the controller writes it
            return
        earned, total = self.totals()
        text = json.dumps({"points": earned, "max_points": total, "checks": self.rows()}, indent=2) + "\n"
        partial = Path(f"{path}.{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)  # never half a file where a workflow reads it
