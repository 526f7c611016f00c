"""Where a batch's files for one submission are, as the tests name a submission: its file's name; the command line
run in the test's own process."""

import contextlib
import functools
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attention_core.cli import main

TESTS = Path(__file__).resolve().parent
HEAD = TESTS.parent / "examples" / "head"
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


def pytest_here(*args, cwd, env=None):
    """``python -m pytest ARGS`` run in ``cwd`` in this process (pytest's own ``main()``, the plugin found by its
    entry point as in a new process, without an interpreter and torch to start): a CompletedProcess with the exit
    code and what it printed; ``env``: variables set for it, beside none of this session's ``PYTEST_*``.

    pytest imports test modules and conftest files outside a package by their plain names: this session's own are
    set aside while the run goes, and those it imported from ``cwd`` are dropped after it (what else it imported
    stays imported: a package's modules, and torch's extensions, are imported once)."""
    path, here, environ = list(sys.path), os.getcwd(), dict(os.environ)
    aside = {name: sys.modules.pop(name) for name in [n for n, m in sys.modules.items() if _ours(n, m, TESTS)]}
    before = set(sys.modules)
    out, err, argv = io.StringIO(), io.StringIO(), [str(a) for a in args]
    try:
        for name in [n for n in os.environ if n.startswith("PYTEST_")]:  # (this session's: an xdist worker's id,
            del os.environ[name]  # which syrupy reads, its options, its current test)
        os.environ.update(env or {})
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = int(pytest.main(argv, plugins=[_NoCollectionAtTheEnd()]))
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(environ)  # (the run set and removed its own PYTEST_CURRENT_TEST)
        sys.path[:] = path
        ran_in = Path(cwd).resolve()
        for name in [n for n, m in sys.modules.items() if n not in before and _ours(n, m, ran_in)]:
            if "." not in name:  # (a plain name, as pytest imports a test module or conftest outside a package)
                del sys.modules[name]
        sys.modules.update(aside)
    return subprocess.CompletedProcess([sys.executable, "-m", "pytest", *argv], code, out.getvalue(), err.getvalue())


class _NoCollectionAtTheEnd:
    """A run's end without the full collections pytest makes to flush unraisable exceptions (as pytester's runs in
    a test's process do): each walks every object of this session, a quarter of a second apiece here."""

    @staticmethod
    def pytest_configure(config):
        try:
            from _pytest.unraisableexception import gc_collect_iterations_key  # noqa: PLC0415 (pytester's own way)
        except ImportError:  # (a pytest without it makes no such collections)
            return
        config.stash[gc_collect_iterations_key] = 0


def _ours(name, module, folder):
    """Whether a module is a conftest or one imported from ``folder``."""
    file = getattr(module, "__file__", None)
    return name == "conftest" or (isinstance(file, str) and _resolved(file).is_relative_to(folder))


@functools.cache
def _resolved(file):
    """A module's file, resolved once (every module's is asked at each run: torch's are thousands)."""
    return Path(file).resolve()
