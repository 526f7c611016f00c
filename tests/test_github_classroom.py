"""GitHub Classroom's files in a students' kit, and the self-check's points line, run as a student's repository
runs them.

One kit of the Llama-style assignment (five case files) is written once; each workflow step's command runs in it for
a correct file and a partial one (RMSNorm and grouped-query attention only): one step as GitHub's command grader runs
it (a shell, a new process), the others as the same pytest arguments in the test's own process. Expected points come
from the grader's own table of what each check is worth.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attention_core.grading.judging.grader import Grader
from attention_core.harness.reading import assignment as assignments
from attention_core.kit import write_kit
from tests.outputs import command as in_process
from tests.outputs import pytest_here

LLAMA = Path(__file__).resolve().parent / "assignments" / "llama"
CORRECT = LLAMA / "submissions" / "correct_einsum.py"
PARTIAL = LLAMA / "submissions" / "partial_norm_attention.py"  # RMSNorm and GroupedQueryAttention, right; no more
GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("classroom") / "kit"
    made = in_process("student-kit", "--github-classroom", "--assignment", LLAMA, folder)
    assert made.returncode == 0, made.stderr
    return folder


@pytest.fixture(scope="module")
def visible():
    """check id -> its points, as the grader gives them for the values of each visible check."""
    rows = Grader(assignment=LLAMA).points_table()
    return {check: points for check, kind, points, visibility in rows if kind == "value" and visibility == "visible"}


def _steps(kit):
    tree = yaml.safe_load((kit / ".github" / "workflows" / "classroom.yml").read_text(encoding="utf-8"))
    return tree, tree["jobs"]["run-autograding-tests"]["steps"]


def _run(command, cwd):
    """A shell command as the command grader runs it: ``python`` is this environment's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _here(command, cwd):
    """A step's ``python -m pytest ARGS`` command run in this process: the same arguments, the same folder."""
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "pytest"], command
    return pytest_here(*words[3:], cwd=cwd)


def test_the_workflow_grades_each_case_file_for_its_visible_points(kit, visible):
    tree, steps = _steps(kit)
    assert set(tree["on"]) >= {"push", "repository_dispatch"} and tree["permissions"]["checks"] == "write"
    graders = [s for s in steps if s.get("uses") == GRADER]
    per_file = {}
    for check, points in visible.items():
        per_file[check.split("/")[0]] = per_file.get(check.split("/")[0], 0) + points
    assert {s["with"]["test-name"]: s["with"]["max-score"] for s in graders} == {
        f"cases/{name}.yaml": points for name, points in per_file.items()
    }
    assert sum(s["with"]["max-score"] for s in graders) == sum(visible.values()) == 26  # 6 + 8 + 5 + 4 + 3
    assert all(isinstance(s["with"]["max-score"], int) for s in graders)  # the grader reads it with parseInt
    install = next(i for i, s in enumerate(steps) if "pip install -r requirements.txt" in s.get("run", ""))
    assert install < steps.index(graders[0])
    reporter = steps[-1]
    ids = [s["id"] for s in graders]
    assert reporter["uses"] == REPORTER and reporter["with"]["runners"] == ",".join(ids)
    assert reporter["env"] == {f"{i.upper()}_RESULTS": f"${{{{steps.{i}.outputs.result}}}}" for i in ids}
    requirements = (kit / "requirements.txt").read_text(encoding="utf-8").splitlines()
    assert any(line.startswith("torch==") for line in requirements)
    assert any(line.startswith("attention-core") for line in requirements)
    assert (kit / "attention_student.py").read_text() == (kit / "template.py").read_text()
    assert "| `cases/gqa.yaml` | 8 |" in (kit / "README.md").read_text(encoding="utf-8")


@pytest.mark.grading
def test_each_step_passes_for_a_correct_file_and_fails_where_a_partial_one_does(kit, tmp_path):
    _, steps = _steps(kit)
    graders = {s["with"]["test-name"]: s for s in steps if s.get("uses") == GRADER}
    outcomes = {}
    for student in (CORRECT, PARTIAL):
        repository = tmp_path / student.stem  # a student's repository: the kit's files and theirs
        shutil.copytree(kit, repository)
        shutil.copy(student, repository / "attention_student.py")
        outcomes[student] = {
            name: (_run if (student, i) == (CORRECT, 0) else _here)(step["with"]["command"], repository).returncode
            for i, (name, step) in enumerate(graders.items())
        }
    assert outcomes[CORRECT] == dict.fromkeys(graders, 0), outcomes[CORRECT]
    assert outcomes[PARTIAL] == {
        "cases/block.yaml": 1,
        "cases/gqa.yaml": 0,
        "cases/masks.yaml": 1,
        "cases/rmsnorm.yaml": 0,
        "cases/rope.yaml": 1,
    }
    earned = sum(graders[name]["with"]["max-score"] for name, code in outcomes[PARTIAL].items() if code == 0)
    assert earned == 12  # gqa's 8 and rmsnorm's 4: what the self-check below gives this file too


@pytest.mark.grading
def test_the_self_check_ends_with_the_points_the_grader_gives_each_visible_check(kit, visible, tmp_path):
    written = tmp_path / "points.json"
    run = _here(f"python -m pytest -p no:cacheprovider --assignment . --impl {PARTIAL} --points-json {written}", kit)
    assert run.returncode == 1, run.stdout[-2000:]
    lines = run.stdout.strip().splitlines()
    passed = {c: p for c, p in visible.items() if c.startswith(("rmsnorm/", "gqa/"))}
    assert lines[-2] == f"points: {sum(passed.values()):g} / {sum(visible.values()):g}" == "points: 12 / 26"
    report = json.loads(written.read_text(encoding="utf-8"))
    assert (report["points"], report["max_points"]) == (12, 26)
    assert {c["check"]: (c["passed"], c["points"], c["max_points"]) for c in report["checks"]} == {
        check: (check in passed, points if check in passed else 0, points) for check, points in visible.items()
    }


def test_a_case_file_worth_a_fraction_of_a_point_is_refused_with_what_to_change(tmp_path, capsys):
    folder = tmp_path / "llama"
    shutil.copytree(LLAMA, folder, ignore=shutil.ignore_patterns("submissions"))
    rope = folder / "cases" / "rope.yaml"
    rope.write_text(rope.read_text(encoding="utf-8").replace("points: 2", "points: 1.5", 1), encoding="utf-8")
    assert write_kit(assignments.load(folder), tmp_path / "kit", github_classroom=True) == 2
    assert not (tmp_path / "kit").exists()
    assert "cases/rope.yaml: its visible checks are worth 2.5 points" in capsys.readouterr().err
