"""Gradescope: the bundle a course uploads (``gradescope-bundle``), and what ``run_autograder`` runs.

Gradescope builds one container per assignment from the bundle's ``setup.sh`` and runs
``run_autograder`` once per submission, with the student's files in ``/autograder/submission``;
it reads ``/autograder/results/results.json``. Here ``setup.sh`` installs a CPU torch (the release
``--torch`` names, by default the one this runs with) into a world-readable virtual environment
and this harness (with its case files and reference) into a root-only (0700) folder;
``run_autograder`` grades the submission with the strongest sandbox the container allows (where
Docker's seccomp profile refuses namespaces, the submission's process runs as an unprivileged user
who cannot read that folder) and always writes ``results.json``: also when grading fails or runs
out of time, then with the reason and what was graded so far.
"""

import json
import os
import re
import sys
import threading
import time
import tomllib
import traceback
import zipfile
from pathlib import Path

from attention_core.grading.judging.grader import Grader, SubmissionGrade
from attention_core.grading.outputs import gradescope
from attention_core.grading.platforms.template import FILE_NAME
from attention_core.grading.process import scratch

ROOT = Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
TIME_LIMIT = 600.0  # seconds grading may take before a partial result is written
# A release as pip reads it after ``torch==``: 2.13.0, 2.6.0rc1 (no local tag: the CPU index adds +cpu itself).
RELEASE = re.compile(r"\d+(\.\d+){0,3}((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?")

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the assignment's image.
set -euo pipefail
cd "$(dirname "$0")"
apt-get update -q && apt-get install -y -q python3 python3-venv python3-pip
# torch and the other dependencies: world-readable, so that a submission's process can import them.
python3 -m venv /opt/attention-venv
/opt/attention-venv/bin/pip install -q --index-url https://download.pytorch.org/whl/cpu "torch=={torch}"
/opt/attention-venv/bin/pip install -q {dependencies}
# This harness with its case files and reference (and the teacher's assignment): readable by root only.
install -d -m 700 /opt/attention-core
/opt/attention-venv/bin/pip install -q --no-deps --target /opt/attention-core/lib ./attention-core
if [ -d ./assignment ]; then cp -r ./assignment /opt/attention-core/assignment; fi
chmod -R go-rwx /opt/attention-core
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission; it always writes /autograder/results/results.json
# (AUTOGRADER_ROOT, ATTENTION_PYTHON and ATTENTION_LIB move what it uses, for a trial run).
export PYTHONPATH="${ATTENTION_LIB-/opt/attention-core/lib}"
export ATTENTION_ASSIGNMENT="${ATTENTION_ASSIGNMENT-/opt/attention-core/assignment}"
exec "${ATTENTION_PYTHON:-/opt/attention-venv/bin/python}" -m attention_core.grading.platforms.autograder "$@"
"""


def bundle(out, project, assignment=None, *, torch=None):
    """Write the zip Gradescope takes: setup.sh, run_autograder, this harness's source and, for a teacher's
    ``assignment`` (not the built-in one), its folder as ``assignment/``: reference.py, cases/ and
    assignment.yaml, which the autograder reads. ``setup.sh`` installs ``torch==`` the release ``torch``
    (default: the one this process runs with, see :func:`torch_release`)."""
    setup = SETUP.format(torch=torch_release(torch), dependencies=dependencies(project))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        _add(z, "setup.sh", setup, executable=True)
        _add(z, "run_autograder", RUN, executable=True)
        for path in sorted(source_files(project)):
            _add(z, f"attention-core/{path.relative_to(project)}", path.read_bytes())
        if assignment is not None and not shipped(assignment):
            for path, name in assignment_files(assignment):
                _add(z, f"assignment/{name}", path.read_bytes())
    return out


def torch_release(given=None):
    """The torch release an image installs: ``given`` (``--torch``), else the one this process runs with,
    without its local tag (2.13.0 of 2.13.0+cpu: the expectations were recorded with it). Raises ValueError
    for a ``given`` that is not a release (it is written into a shell command)."""
    if given is None:
        import torch  # noqa: PLC0415

        return torch.__version__.split("+")[0]
    if not RELEASE.fullmatch(given):
        raise ValueError(f"--torch {given!r}: not a release of torch (say one as pip does, 2.13.0)")
    return given


def dependencies(project):
    """This harness's dependencies but torch (pyproject.toml's), each quoted for a shell command."""
    needs = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    return " ".join(f"'{d}'" for d in needs if not re.match(r"torch\b", d))


def shipped(assignment):
    """Whether ``assignment`` is the built-in one with its own cases: the harness's source carries it all."""
    from attention_core.harness.reading.assignment import default_cases_folder  # noqa: PLC0415

    return assignment.builtin and Path(assignment.cases).resolve() == default_cases_folder().resolve()


def assignment_files(assignment):
    """(path, name in the bundle) of what grading a teacher's assignment reads: its reference, settings and cases
    (the built-in assignment with other cases, ``--cases DIR``: those cases alone)."""
    folder = None if assignment.builtin else Path(assignment.folder)
    for name in ("reference.py", "assignment.yaml"):
        if folder is not None and (folder / name).is_file():
            yield folder / name, name
    cases = Path(assignment.cases)
    for path in sorted(cases.iterdir()):
        if path.is_file() and path.suffix in (".yaml", ".yml", ".json") and not path.name.startswith("."):
            yield path, f"cases/{path.name}"


def source_files(project):
    """This harness's source as its bundles carry it: pyproject.toml, README.md, the package and cases/."""
    yield from (project / name for name in ("pyproject.toml", "README.md") if (project / name).exists())
    for folder in ("attention_core", "cases"):
        for path in (project / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path


def _add(z, name, data, executable=False):
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = (0o755 if executable else 0o644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)


def run(root=ROOT, time_limit=TIME_LIMIT):
    """Grade ``root/submission`` into ``root/results/results.json``; always writes it. Returns 0."""
    submission, results = root / "submission", root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    graded = SubmissionGrade(FILE_NAME.removesuffix(".py"), submission)
    why = grade_within(submission, graded, time_limit, **_bundled(os.environ.get("ATTENTION_ASSIGNMENT")))
    result = gradescope.results_json(graded)
    if why:
        result["output"] = f"{why}; the checks graded before that are below.\n\n{result['output']}"
    results.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


def grade_within(submission, graded, time_limit, **grader):
    """Grade the folder ``submission`` into ``graded`` with ``Grader(**grader)``, giving it ``time_limit`` seconds;
    "" where it finished, else why not (one line). It grades in a thread of its own, left behind where it does
    not finish: the caller writes what was graded so far, then leaves the process."""
    done, problem = threading.Event(), []

    def grade():
        try:
            with Grader(**grader, entry=entry_file(submission)) as grading:
                grading.grade(submission, into=graded)
        except BaseException:  # a fault of the grading machinery: reported, never a crash without results
            problem.append(traceback.format_exc(limit=3))
            print(problem[0], file=sys.stderr)  # for the teacher: the platform keeps the job's log
        finally:
            done.set()

    start = time.monotonic()
    threading.Thread(target=grade, daemon=True).start()
    finished = done.wait(time_limit)
    graded.seconds = time.monotonic() - start
    if not finished:
        return f"grading stopped after {time_limit:g} s"
    return f"grading failed: {problem[0].strip().splitlines()[-1]}" if problem else ""


def _bundled(folder):
    """The Grader's arguments for the assignment the bundle carries in ``folder``: a teacher's (its reference,
    cases and settings), the built-in one with other cases (cases alone), or none (the built-in one)."""
    folder = Path(folder) if folder else None
    if folder is None or not folder.is_dir():
        return {}
    if (folder / "reference.py").is_file():
        return {"assignment": folder}
    return {"cases": folder / "cases"} if (folder / "cases").is_dir() else {}


def entry_file(submission):
    """The submission folder's entry file: the hand-out's file name where it is there (the folder's other files
    beside it, for it to import), else None: the grader finds it by the one rule of folders (``folders.read``),
    or says why it cannot."""
    own = submission / FILE_NAME
    return FILE_NAME if own.is_file() and not own.is_symlink() else None


if __name__ == "__main__":
    with scratch.used():  # (a grading thread the time limit stopped leaves its temporary folders there)
        run(ROOT, float(os.environ.get("AUTOGRADER_TIME_LIMIT", TIME_LIMIT)))
    # Leave without waiting for the grading thread (it may hang in a dead worker) or running torch's
    # finalisation beside it: the results are written.
    os._exit(0)
