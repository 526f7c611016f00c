"""GitHub Classroom: what turns a students' kit into an assignment's template repository.

``python -m attention_core student-kit --github-classroom --assignment DIR KIT`` adds to the kit::

    KIT/.github/workflows/classroom.yml   GitHub Classroom's autograding workflow: one step per case file
                                          (classroom-resources/autograding-command-grader), running the kit's
                                          own self-check on that file's checks, worth their visible points;
                                          then the reporter step that sends the points to the classroom
    KIT/requirements.txt                  what the workflow installs: PyTorch's CPU build and this harness
    KIT/attention_student.py              the hand-out, saved as the file the workflow grades

A step passes (and earns its max-score) when every check of its case file passes: the steps' scores add up to
the kit's visible total, the "points: X / Y" of ``pytest --assignment . --impl attention_student.py``. The
command grader reads ``max-score`` as a whole number (``parseInt``), so a case file whose checks add up to a
fraction is refused rather than rounded.
"""

import json
import re
import sys
from importlib import metadata
from pathlib import Path

import torch
import yaml

from attention_core.grading.platforms.template import FILE_NAME
from attention_core.harness.checking import runner
from attention_core.harness.reading import assignment as assignments
from attention_core.harness.reading.points import visible_points
from attention_core.harness.text import points as points_text

WORKFLOW = Path(".github") / "workflows" / "classroom.yml"  # where GitHub Classroom's own workflow lives
REQUIREMENTS = "requirements.txt"
GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # no GPU is used: the CPU build is a tenth of the size
STEP_MINUTES = 10  # each step's time limit (the command grader's default)
SELECTABLE = re.compile(r"[\w.+-]+")  # a name pytest's -k can select by, unquoted (see _selection)


class ClassroomError(ValueError):
    """A kit GitHub Classroom cannot grade as written: the message says which case file and what to change."""


def write(kit):
    """Write the workflow, requirements.txt and the graded file into ``kit`` (a written kit's folder); the
    (case file name, points) of each step. Raises ClassroomError."""
    kit = Path(kit)
    steps = file_points(kit)
    (kit / WORKFLOW).parent.mkdir(parents=True)
    (kit / WORKFLOW).write_text(workflow(steps), encoding="utf-8")
    (kit / REQUIREMENTS).write_text(requirements(), encoding="utf-8")
    (kit / FILE_NAME).write_text((kit / "template.py").read_text(encoding="utf-8"), encoding="utf-8")
    return steps


def file_points(kit):
    """(case file name, the visible points of its checks) for each case file of the kit, in the kit's order,
    counted as the self-check counts them."""
    chosen = assignments.load(kit, need_reference=False)
    totals = {}
    for item in runner.collect(chosen.cases, chosen):
        totals.setdefault(item.file.name, 0.0)
        totals[item.file.name] += visible_points(chosen, item) or 0.0
    folded = {}
    for name, total in totals.items():
        if not SELECTABLE.fullmatch(name):
            raise ClassroomError(
                f"cases/{name}.yaml: a step selects its checks with pytest -k '[{name}/', which cannot name it: "
                f"rename the case file with letters, digits, '_', '-', '.' or '+' only"
            )
        if name.lower() in folded:  # -k matches without regard to case
            raise ClassroomError(f"cases/{name}.yaml and cases/{folded[name.lower()]}.yaml differ only in case")
        folded[name.lower()] = name
        if not float(total).is_integer():
            raise ClassroomError(
                f"cases/{name}.yaml: its visible checks are worth {points_text(total)} points, and GitHub "
                f"Classroom's command grader takes a whole max-score: give its checks points that add up to a "
                f"whole number"
            )
    return [(name, int(total)) for name, total in totals.items()]


def command(name):
    """The self-check of one case file's checks, as a step runs it in the student's repository."""
    return f"python -m pytest --assignment . --impl {FILE_NAME} -k {_selection(name)}"


def _selection(name):
    """``'[NAME/'``: each check's test is ``test_case[NAME/case/check-cpu]``, so this prefix matches the case file
    ``NAME``'s checks and no other's (a case or check id holds no '[')."""
    return f"'[{name}/'"


def workflow(steps):
    """The text of ``classroom.yml`` for the steps ``[(case file name, points), ...]``."""
    ids = _step_ids([name for name, _ in steps])
    graders = [
        {
            "name": f"cases/{name}.yaml",
            "id": ids[name],
            "uses": GRADER,
            "with": {
                "test-name": f"cases/{name}.yaml",
                "setup-command": "",
                "command": command(name),
                "timeout": STEP_MINUTES,
                "max-score": worth,
            },
        }
        for name, worth in steps
    ]
    reporter = {
        "name": "Autograding Reporter",
        "uses": REPORTER,
        "env": {f"{ids[name].upper()}_RESULTS": f"${{{{steps.{ids[name]}.outputs.result}}}}" for name, _ in steps},
        "with": {"runners": ",".join(ids[name] for name, _ in steps)},
    }
    job = {
        "runs-on": "ubuntu-latest",
        "if": "github.actor != 'github-classroom[bot]'",  # not the bot's first commit of the template
        "steps": [
            {"name": "Checkout code", "uses": "actions/checkout@v4"},
            {
                "name": "Set up Python",
                "uses": "actions/setup-python@v5",
                "with": {"python-version": f"{sys.version_info.major}.{sys.version_info.minor}"},
            },
            {"name": "Install the kit's requirements", "run": f"python -m pip install -r {REQUIREMENTS}"},
            *graders,
            reporter,
        ],
    }
    tree = {
        "name": "Autograding Tests",
        "on": ["push", "workflow_dispatch", "repository_dispatch"],
        "permissions": {"checks": "write", "actions": "read", "contents": "read"},
        "jobs": {"run-autograding-tests": job},
    }
    total = sum(worth for _, worth in steps)
    header = (
        f"# GitHub Classroom's autograding: one step per case file, worth the points of its visible checks\n"
        f"# ({points_text(total)} in all, as `pytest --assignment . --impl {FILE_NAME}` counts them); a step earns\n"
        f"# them where every check of its file passes. Written from the case files' points by\n"
        f"# `python -m attention_core student-kit --github-classroom`.\n"
    )
    return header + yaml.safe_dump(tree, sort_keys=False, width=200)


def _step_ids(names):
    """name -> its step's id: letters, digits, '-' and '_', starting with a letter (GitHub's rule for ids)."""
    ids = {}
    for name in names:
        step = re.sub(r"[^a-z0-9_-]", "-", name.lower())
        ids[name] = step if step[0].isalpha() else f"cases-{step}"
    return ids


def requirements():
    """The kit's requirements.txt: the torch release the kit was written with, from PyTorch's CPU index, and
    this harness as it was installed."""
    return (
        "# What the self-check (pytest --assignment . --impl FILE) needs; GitHub Classroom's workflow installs it.\n"
        "# PyTorch's CPU build (no GPU is used) from PyTorch's own index; the harness, whose pytest plugin runs\n"
        "# the checks: where your course installs it from elsewhere (a wheel, a git URL), write that instead.\n"
        f"--extra-index-url {TORCH_CPU_INDEX}\n"
        f"torch=={torch.__version__.split('+')[0]}\n"
        f"{harness_requirement()}\n"
    )


def harness_requirement():
    """This harness as pip installs it elsewhere: from the repository and commit, or the archive's address, it
    was installed from (pip's ``direct_url.json``), else its release by version."""
    try:
        found = metadata.distribution("attention-core")
    except metadata.PackageNotFoundError:  # run from a source folder, never installed
        return "attention-core"
    origin = json.loads(found.read_text("direct_url.json") or "{}")
    url, vcs = origin.get("url", ""), origin.get("vcs_info")
    if vcs and url:
        return f"attention-core @ {vcs['vcs']}+{url}@{vcs['commit_id']}"
    if "archive_info" in origin and url.startswith("https://"):
        return f"attention-core @ {url}"
    return f"attention-core=={found.version}"
