"""PrairieLearn: the question folder a course adds (``prairielearn``), and what its grading job runs
(``prairielearn-grade``).

PrairieLearn grades an externally graded question in a fresh container of the question's image, one per
submission: the question's ``tests/`` folder is copied to ``/grade/tests`` and the student's files to
``/grade/student``, and the command ``info.json`` names (``externalGradingOptions.entrypoint``) must leave
``/grade/results/results.json`` (PrairieLearn's docs, "External grading"): a 0-1 ``score``; ``gradable:
false`` where the submission could not be graded (no points given or taken, no attempt charged), with
``format_errors`` where its file is at fault; ``message``, ``output`` and ``tests``, each with ``name``,
``description``, ``points``, ``max_points``, ``message`` and ``output``, as ``<pl-external-grader-results>``
shows them; at most 1 MB.

Here ``tests/`` holds this harness's source and the teacher's assignment, as the Gradescope bundle does (a
question's files stay on the server; the image must be public, so it holds nothing of the assignment): the image
is PrairieLearn's ``prairielearn/grader-python`` with a CPU torch added (the question's ``Dockerfile``);
``tests/run.sh`` makes ``tests/`` root-only and runs ``prairielearn-grade``, which grades with the same
Grader, sandbox and limits as Gradescope's ``run_autograder`` (``autograder.grade_within``) and always writes
``results.json``. A check students do not see (visibility other than ``visible``) counts in the score and is
left out of ``tests``.
"""

import html
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import traceback
import uuid
import warnings
from pathlib import Path

from attention_core.grading.intake import folders
from attention_core.grading.judging.grades import SubmissionGrade
from attention_core.grading.outputs import gradescope
from attention_core.grading.platforms import autograder
from attention_core.grading.platforms.template import FILE_NAME, assignment_template
from attention_core.grading.process import scratch
from attention_core.harness.reading import assignment as assignments
from attention_core.harness.text import escape, escape_lines, points, shorten

ROOT = Path("/grade")
BASE_IMAGE = "prairielearn/grader-python"  # PrairieLearn's Python grader: Python in /venv, installed with uv
DEFAULT_IMAGE = "attention-core-grader:torch-"  # and the release: a local name, for a trial (--image: yours)
ENTRYPOINT = "/grade/tests/run.sh"  # PrairieLearn makes an entrypoint under /grade executable itself
MAX_TIMEOUT = 600  # seconds: the most PrairieLearn gives one grading job
START = 30  # seconds of a job that are not grading: Python and torch starting, results.json written
TIME_LIMIT = MAX_TIMEOUT - START  # seconds grading may take where no --time-limit is given
RESULTS_LIMIT = 1_000_000  # bytes of one results.json (PrairieLearn's 1 MB)
NOT_STARTED = (  # what run.sh writes where the grader wrote nothing
    "The grader could not start: this submission was not graded and costs no attempt. Course staff find why in the "
    "grading job's log."
)

DOCKERFILE = """\
# The image of this question's grading jobs: PrairieLearn's Python grader with a CPU build of torch
# (the release the expectations were checked with) and this harness's other dependencies; nothing of the
# assignment (PrairieLearn pulls public images: the reference and the cases travel in tests/). Build it, push
# it under the name info.json gives, and sync it on the course's Sync page (docs/prairielearn.md):
#   docker build --platform linux/amd64 -t {image} . && docker push {image}
FROM {base}
RUN uv pip install --python /venv/bin/python --index-url https://download.pytorch.org/whl/cpu "torch=={torch}" \\
 && uv pip install --python /venv/bin/python {dependencies}
"""

RUN = """\
#!/usr/bin/env bash
# PrairieLearn runs this (info.json's entrypoint) as root in the question's image, once per submission, with
# the question's tests/ in /grade/tests and the student's files in /grade/student; it always leaves
# /grade/results/results.json. Its folder's parent is the job's root (ATTENTION_PYTHON: the Python to run).
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TESTS="$ROOT/tests"
# The reference and the cases: readable by root only (a submission's process never runs as root).
chmod -R go-rwx "$TESTS" || echo "warning: $TESTS could not be made readable by root only" >&2
mkdir -p "$ROOT/results" && chmod 755 "$ROOT/results"
PYTHONPATH="$TESTS/attention-core" "${{ATTENTION_PYTHON:-python3}}" -m attention_core prairielearn-grade \\
  {assignment}--root "$ROOT" --time-limit {time_limit:g}
if [ ! -s "$ROOT/results/results.json" ]; then  # the grader could not start (an image without torch?)
  echo {not_started} > "$ROOT/results/results.json"
fi
"""

QUESTION = """\
<pl-question-panel>
  <p>{title}: implement each function and class of the hand-out, then upload it here as <code>{file}</code>.</p>
  <p><pl-file-download file-name="{file}" directory="clientFilesQuestion" label="Download the hand-out ({file})">
  </pl-file-download></p>
  <p>Your file is graded against worked examples: each check says what it called and, where it fails, what
  differs and the likely mistake. A file Python cannot read costs no attempt.</p>
  <pl-file-upload file-names="{file}"></pl-file-upload>
</pl-question-panel>

<pl-submission-panel>
  <pl-external-grader-results></pl-external-grader-results>
  <pl-file-preview></pl-file-preview>
</pl-submission-panel>
"""


def question_command(out, project, assignment, *, torch=None, image=None, timeout=None, stream=None):
    """Write the question (see :func:`question`) and say what to do next; 0, or 2 with the reason."""
    stream = stream or sys.stderr
    try:
        written = question(out, project, assignment, torch=torch, image=image, timeout=timeout)
    except ValueError as err:  # a folder that is not a question of this kind; a --torch or --job-timeout
        print(f"error: {err}", file=stream)
        return 2
    print(
        f"wrote {out}: add it to the course's questions/; build its image (docker build --platform linux/amd64 "
        f"-t {written} {out}), push it and sync it on the course's Sync page (docs/prairielearn.md)",
        file=stream,
    )
    return 0


def question(out, project, assignment, *, torch=None, image=None, timeout=None):
    """Write the PrairieLearn question folder ``out`` for ``assignment``: info.json, question.html, the hand-out
    students download, the image's Dockerfile (``torch==`` the release ``torch``, see
    ``autograder.torch_release``) and tests/ (run.sh, this harness's source from ``project``, the assignment).
    A folder this wrote before is brought up to date: its info.json keeps its uuid and what the teacher set in
    it (the image and timeout too, where ``image`` and ``timeout`` are not given), its question.html stays.
    ``timeout``: the job's seconds (default: see :func:`job_timeout`). Returns the image info.json names. Raises ValueError for a folder that is not such a question, or an option that
    cannot be used."""
    out = Path(out)
    info = _existing_info(out)
    kept = info.get("externalGradingOptions", {})
    release = autograder.torch_release(torch)
    timeout = job_timeout(assignment, timeout if timeout is not None else kept.get("timeout"))
    if not image:  # the teacher's own name stays; the default one follows the release
        image = kept.get("image", DEFAULT_IMAGE)
        image = f"{DEFAULT_IMAGE}{release}" if image.startswith(DEFAULT_IMAGE) else image
    out.mkdir(parents=True, exist_ok=True)
    _write_tests(out, project, assignment, time_limit=max(timeout - START, timeout / 2))
    dockerfile = DOCKERFILE.format(
        image=image, base=BASE_IMAGE, torch=release, dependencies=autograder.dependencies(project)
    )
    (out / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    (out / "clientFilesQuestion").mkdir(exist_ok=True)
    (out / "clientFilesQuestion" / FILE_NAME).write_text(assignment_template(assignment), encoding="utf-8")
    if not (out / "question.html").exists():
        title = html.escape(assignment.settings.title or assignment.name).replace("{", "&#123;")  # (mustache)
        (out / "question.html").write_text(QUESTION.format(title=title, file=FILE_NAME), encoding="utf-8")
    info = _info(info, assignment, image=image, timeout=timeout, release=release)
    (out / "info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return image


def job_timeout(assignment, given=None):
    """The seconds PrairieLearn gives one grading job: ``given`` (whole, 1 to 600), else the assignment's budget
    for the submission, as long again for the grader's own work, and START; at most 600."""
    if given is None:
        return min(MAX_TIMEOUT, math.ceil(2 * assignment.settings.budget) + START)
    if not isinstance(given, (int, float)) or not 1 <= given <= MAX_TIMEOUT or int(given) != given:
        raise ValueError(
            f"a job timeout of {given!r} s (--job-timeout, or info.json's timeout): PrairieLearn takes whole seconds "
            f"from 1 to {MAX_TIMEOUT}"
        )
    return int(given)


def _existing_info(out):
    """The info.json of a question folder this command wrote at ``out`` ({} where there is none yet)."""
    if not out.exists():
        return {}
    if not out.is_dir():
        raise ValueError(f"{out}: not a folder")
    if not (out / "info.json").is_file():
        if any(out.iterdir()):
            raise ValueError(f"{out} holds files but no info.json: give a new folder, or a question this wrote")
        return {}
    if "prairielearn-grade" not in _text(out / "tests" / "run.sh"):
        raise ValueError(f"{out}: a question this command did not write (no tests/run.sh of it): give a new folder")
    try:
        info = json.loads((out / "info.json").read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:
        raise ValueError(f"{out / 'info.json'}: not JSON ({err}): correct it, or remove it to start anew") from err
    if not isinstance(info, dict):
        raise ValueError(f"{out / 'info.json'}: not a JSON object: correct it, or remove it to start anew")
    return info


def _text(path):
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _info(existing, assignment, *, image, timeout, release):
    """info.json: what ``existing`` holds (the uuid, the teacher's title, topic, tags, ...), with external grading
    by this question's image and tests/run.sh."""
    info = {
        "uuid": str(uuid.uuid4()),
        "title": assignment.settings.title or assignment.name,
        "topic": "Autograder",
        "type": "v3",
        "singleVariant": True,
        **existing,
        "gradingMethod": "External",
    }
    info["externalGradingOptions"] = {
        **existing.get("externalGradingOptions", {}),
        "comment": (
            f"tests/ holds the harness (attention-core) and the assignment; the image is built from this "
            f"question's Dockerfile ({BASE_IMAGE} with torch=={release}); the timeout is the job's, the grader "
            f"stops {START} s before it (tests/run.sh --time-limit)"
        ),
        "enabled": True,
        "image": image,
        "entrypoint": ENTRYPOINT,
        "timeout": timeout,
        "enableNetworking": False,
    }
    return info


def _write_tests(out, project, assignment, *, time_limit):
    """``out/tests``, written whole beside the old one and then moved into its place."""
    building = Path(tempfile.mkdtemp(prefix=".tests-", dir=out))
    try:
        for path in autograder.source_files(project):
            _copy(path, building / "attention-core" / path.relative_to(project))
        given = ""
        if not autograder.shipped(assignment):
            for path, name in autograder.assignment_files(assignment):
                _copy(path, building / "assignment" / name)
            given = '--cases "$TESTS/assignment/cases" ' if assignment.builtin else '--assignment "$TESTS/assignment" '
        not_started = shlex.quote(json.dumps(not_gradable(NOT_STARTED)))
        script = building / "run.sh"
        script.write_text(RUN.format(assignment=given, time_limit=time_limit, not_started=not_started))
        script.chmod(0o755)
        building.chmod(0o755)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    if (out / "tests").exists():
        shutil.rmtree(out / "tests")
    building.rename(out / "tests")


def _copy(path, target):
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)


def main(root=ROOT, *, assignment=None, cases=None, time_limit=None):
    """The grading job's command: :func:`run` (``time_limit`` None: TIME_LIMIT), then leave the process at once,
    without waiting for a grading thread the time limit stopped (it may hang in a dead worker) or running torch's
    finalisation beside it."""
    with scratch.used():  # (a grading thread the time limit stopped leaves its temporary folders there)
        run(root, assignment=assignment, cases=cases, time_limit=TIME_LIMIT if time_limit is None else time_limit)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(root=ROOT, *, assignment=None, cases=None, time_limit=TIME_LIMIT):
    """Grade the files in ``root/student`` into ``root/results/results.json``, PrairieLearn's format; always
    writes it. ``assignment`` and ``cases``: as ``--assignment`` and ``--cases`` (default: the built-in one).
    Returns 0."""
    root = Path(root)
    try:
        result = _graded(root / "student", assignment, cases, time_limit)
    except Exception as err:  # noqa: BLE001 (a fault of the grader's, outside the Grader: the student is not charged)
        traceback.print_exc()
        result = not_gradable(
            f"This submission could not be graded: the grader failed ({type(err).__name__}). It costs no attempt; "
            f"course staff find why in the grading job's log."
        )
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    partial = results.with_name("results.json.partial")  # moved into place whole
    partial.write_text(json.dumps(result, indent=1), encoding="utf-8")
    partial.replace(results)
    return 0


def _graded(student, assignment, cases, time_limit):
    """PrairieLearn's results for the files in ``student``."""
    try:
        chosen = assignments.resolve(assignment, cases)
    except ValueError as err:  # the teacher's assignment (AssignmentError, SettingsError): never the student's
        print(f"error: {err}", file=sys.stderr)
        return not_gradable(
            "This question's assignment could not be loaded, so nothing was graded; it costs no attempt. Course "
            "staff find why in the grading job's log."
        )
    refused = refusal(student, chosen.names)
    if refused:
        return not_gradable(refused, format_errors=[refused])
    graded = SubmissionGrade(FILE_NAME.removesuffix(".py"), student)
    stopped = autograder.grade_within(student, graded, time_limit, assignment=chosen)
    if graded.error:
        print(graded.error, file=sys.stderr)  # for course staff: PrairieLearn keeps the job's log
    return results_json(graded, stopped=stopped)


def refusal(student, names):
    """Why the files in ``student`` cannot be graded, read as text before any of them runs: none was submitted,
    none to import can be told (folders.py's rule), or Python cannot read the one to import; "" where they
    can be. (A file that raises when run is graded: that is the student's code at work.)"""
    if not student.is_dir() or not any(not p.name.startswith(".") for p in student.iterdir()):
        return f"No file was submitted: upload {FILE_NAME}."
    reading = folders.read(student, names, autograder.entry_file(student), one=True)
    if reading.kind != "one":
        return reading.why or folders.several(student, reading)
    return _syntax_error(reading.entry) if reading.entry.suffix == ".py" else ""


def _syntax_error(path):
    """The syntax error that stops Python reading the file at ``path``, in one line; "" where there is none (or
    where the file is too large or too deep to read here: the grader's import says what it finds)."""
    try:
        if path.stat().st_size > folders.READ_LIMIT:
            return ""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a SyntaxWarning is the student's to see at import, not here)
            compile(path.read_bytes(), path.name, "exec", dont_inherit=True)
    except SyntaxError as err:
        where = f"{path.name}, line {err.lineno}" if err.lineno else path.name
        text = (err.text or "").strip()
        shown = f"{escape(where)}: {escape(err.msg)}" + (f" ({shorten(text, 100)})" if text else "")
        return f"{shown}. Python cannot read the file, so nothing was graded and it costs no attempt: correct it."
    except (ValueError, RecursionError, MemoryError, OSError):
        return ""
    return ""


def not_gradable(message, *, format_errors=None, output="", tests=()):
    """Results that give and take no points and cost no attempt (``gradable: false``), saying why."""
    result = {"gradable": False, "score": 0.0, "message": message, "output": output, "tests": list(tests)}
    if format_errors:
        result["format_errors"] = list(format_errors)
    return result


def results_json(graded, *, stopped=""):
    """PrairieLearn's results for one graded submission. Not gradable where the grader did not finish grading it
    (``stopped``: why, one line) or failed on it (``graded.error``): then the checks graded so far are shown, for
    information. A check students do not see is left out of ``tests`` and counted in ``score``."""
    shown = [g for g in graded.grades if g.visibility == "visible"]
    not_shown = graded.max_score - sum(g.max_score for g in shown)
    note = graded.note.removeprefix(graded.error).strip() if graded.error else graded.note  # (its words: a batch's)
    output, tests = escape_lines(note) if note else "", [_test(g) for g in shown]
    why = _not_graded(graded, stopped)
    if why:
        message = (
            f"This submission was not graded: {why}. It costs no attempt: submit again, and where this repeats, tell "
            f"course staff (the grading job's log says more)."
        )
        return _bounded(not_gradable(message, output=output, tests=tests))
    message = f"{points(graded.score)} of {points(graded.max_score)} points." + (
        f" Checks not shown here are worth {points(not_shown)} of them." if not_shown else ""
    )
    score = min(1.0, max(0.0, graded.score / graded.max_score))
    return _bounded({"gradable": True, "score": score, "message": message, "output": output, "tests": tests})


def _not_graded(graded, stopped):
    """Why ``graded`` is no grade (one line), or "" where it is one."""
    if stopped:
        return stopped
    if graded.error:
        return "the grader failed on it (a fault of the grader, not of your file)"
    return "this question has no checks worth points" if graded.max_score <= 0 else ""


def _test(grade):
    """One check as ``<pl-external-grader-results>`` shows it: its status, and where it failed, why (the feedback
    the Gradescope results give: the call, what differs, the likely mistake)."""
    return {
        "name": grade.check_id,
        "description": grade.source,
        "points": points(grade.score),
        "max_points": points(grade.max_score),
        "message": str(grade.result.status),
        "output": "" if grade.result.passed else gradescope.feedback(grade),
    }


def _bounded(results):
    """``results``, each output cut to an equal share until its JSON fits RESULTS_LIMIT (ASCII: one byte a
    character)."""
    share = gradescope.OUTPUT_LIMIT
    while len(json.dumps(results)) > RESULTS_LIMIT and share > 100:
        share //= 2
        for part in [results, *results["tests"]]:
            text = part["output"]
            part["output"] = text if len(text) <= share else f"{text[:share]}\n… ({len(text) - share} more characters)"
    return results
