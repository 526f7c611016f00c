"""Gradescope: the bundle a course uploads (``gradescope-bundle``), and what ``run_autograder`` runs.

Gradescope builds one container per assignment from the bundle's ``setup.sh`` and runs
``run_autograder`` once per submission, with the student's files in ``/autograder/submission``;
it reads ``/autograder/results/results.json``. Here ``setup.sh`` installs a CPU torch into a
world-readable virtual environment and this harness (with its case files and reference) into a
root-only (0700) folder; ``run_autograder`` grades the submission with the strongest sandbox the
container allows (where Docker's seccomp profile refuses namespaces, the submission's process
runs as an unprivileged user who cannot read that folder) and always writes ``results.json``:
also when grading fails or runs out of time, then with the reason and what was graded so far.
"""

import json
import os
import threading
import time
import tomllib
import traceback
import zipfile
from pathlib import Path

from attention_core.grading import gradescope
from attention_core.grading.grader import Grader, SubmissionGrade
from attention_core.grading.template import FILE_NAME

ROOT = Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
TIME_LIMIT = 600.0  # seconds grading may take before a partial result is written

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the assignment's image.
set -euo pipefail
cd "$(dirname "$0")"
apt-get update -q && apt-get install -y -q python3 python3-venv python3-pip
# torch and the other dependencies: world-readable, so that a submission's process can import them.
python3 -m venv /opt/attention-venv
/opt/attention-venv/bin/pip install -q --index-url https://download.pytorch.org/whl/cpu "torch{torch}"
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
exec "${ATTENTION_PYTHON:-/opt/attention-venv/bin/python}" -m attention_core.grading.autograder "$@"
"""


def bundle(out, project, assignment=None):
    """Write the zip Gradescope takes: setup.sh, run_autograder, this harness's source and, for a teacher's
    ``assignment`` (not the built-in one), its folder as ``assignment/``: reference.py, cases/ and
    assignment.yaml, which the autograder reads."""
    needs = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    torch_pin = next((d[len("torch") :] for d in needs if d.startswith("torch")), "")
    others = " ".join(f"'{d}'" for d in needs if not d.startswith("torch"))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        _add(z, "setup.sh", SETUP.format(torch=torch_pin, dependencies=others), executable=True)
        _add(z, "run_autograder", RUN, executable=True)
        for path in sorted(_source_files(project)):
            _add(z, f"attention-core/{path.relative_to(project)}", path.read_bytes())
        if assignment is not None and not _shipped(assignment):
            for path, name in _assignment_files(assignment):
                _add(z, f"assignment/{name}", path.read_bytes())
    return out


def _shipped(assignment):
    """Whether ``assignment`` is the built-in one with its own cases: the harness's source carries it all."""
    from attention_core.harness.reading.assignment import default_cases_folder  # noqa: PLC0415

    return assignment.builtin and Path(assignment.cases).resolve() == default_cases_folder().resolve()


def _assignment_files(assignment):
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


def _source_files(project):
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
    done, problem = threading.Event(), []

    def grade():
        try:
            with Grader(**_bundled(os.environ.get("ATTENTION_ASSIGNMENT")), entry=_entry(submission)) as grader:
                grader.grade(submission, into=graded)
        except BaseException:  # a fault of the grading machinery: reported, never a crash without results
            problem.append(traceback.format_exc(limit=3))
        finally:
            done.set()

    start = time.monotonic()
    threading.Thread(target=grade, daemon=True).start()
    finished = done.wait(time_limit)
    graded.seconds = time.monotonic() - start
    result = gradescope.results_json(graded)
    if not finished or problem:
        why = (
            f"grading stopped after {time_limit:g} s"
            if not finished
            else f"grading failed: {problem[0].strip().splitlines()[-1]}"
        )
        result["output"] = f"{why}; the checks graded before that are below.\n\n{result['output']}"
    results.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


def _bundled(folder):
    """The Grader's arguments for the assignment the bundle carries in ``folder``: a teacher's (its reference,
    cases and settings), the built-in one with other cases (cases alone), or none (the built-in one)."""
    folder = Path(folder) if folder else None
    if folder is None or not folder.is_dir():
        return {}
    if (folder / "reference.py").is_file():
        return {"assignment": folder}
    return {"cases": folder / "cases"} if (folder / "cases").is_dir() else {}


def _entry(submission):
    """The submission folder's entry file: the hand-out's file name where it is there (the folder's other files
    beside it, for it to import), else None: the grader finds it by the one rule of folders (``folders.read``),
    or says why it cannot."""
    own = submission / FILE_NAME
    return FILE_NAME if own.is_file() and not own.is_symlink() else None


if __name__ == "__main__":
    run(ROOT, float(os.environ.get("AUTOGRADER_TIME_LIMIT", TIME_LIMIT)))
    # Leave without waiting for the grading thread (it may hang in a dead worker) or running torch's
    # finalisation beside it: the results are written.
    os._exit(0)
