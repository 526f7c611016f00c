"""Where a batch's files for one submission are, as the tests name a submission: its file's name; the command line
run in the test's own process."""

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

from attention_core.cli import main

HEAD = Path(__file__).resolve().parent.parent / "examples" / "head"
# A batch against the head example with its properties worth nothing: its scores are its checks' alone.
HEAD_GRADE = ("grade", "--assignment", str(HEAD), "--property-points", "0")


def folder(out, name):
    """The one folder of ``out/submissions`` for the submission whose id ends in ``name``."""
    found = [p.parent for p in Path(out, "submissions").rglob("record.json") if p.parent.name == name]
    assert len(found) == 1, f"{len(found)} submissions named {name!r} in {out}"
    return found[0]


def last_part(submission_id):
    """A submission id's last part (``subs/dirA/alice`` -> ``alice``)."""
    return submission_id.rsplit("/", 1)[-1]


def report(out, name):
    """The teacher's report of the submission whose id ends in ``name`` (apart from the student's files)."""
    found = [p for p in Path(out, "reports").rglob("report.html") if p.parent.name == name]
    assert len(found) == 1, f"{len(found)} reports named {name!r} in {out}"
    return found[0]


def command(*args, cwd=None):
    """``python -m attention_core ARGS`` run in this process (the same code, without an interpreter and torch to
    start; ``grade`` grades here, its submissions still in their sandboxes): a CompletedProcess with the exit code
    and what it printed. ``cwd``: the folder it runs in."""
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    argv = [str(a) for a in args]
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as stop:  # argparse's errors and --help
                code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
                if isinstance(stop.code, str):
                    print(stop.code, file=sys.stderr)
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "attention_core", *argv], code, out.getvalue(), err.getvalue()
    )


def grade_head(*args, cwd=None):
    """``python -m attention_core grade`` against the head example, properties worth 0, run in this process."""
    return command(*HEAD_GRADE, *args, cwd=cwd)
