"""PrairieLearn: the question ``prairielearn`` writes, and ``prairielearn-grade`` run on a PrairieLearn-shaped
``/grade`` folder (``student``, ``tests``, ``results``) for a correct, a wrong and a hostile submission; the
results checked against a JSON schema written from PrairieLearn's documentation ("External grading", and the
question schema ``infoQuestion.json``)."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest
import torch

from attention_core.grading.judging.grader import Grader
from attention_core.grading.platforms import autograder, prairielearn
from attention_core.grading.platforms.template import FILE_NAME
from attention_core.harness.reading import assignment as assignments
from tests.outputs import command as in_process

pytestmark = pytest.mark.grading

ROOT = Path(__file__).resolve().parent.parent
BUILTIN = ROOT / "tests" / "submissions" / "builtin"
LLAMA = ROOT / "tests" / "assignments" / "llama"  # a teacher's assignment with hidden checks

# results.json as PrairieLearn's docs describe it: ``score`` (0 to 1) is required of a gradable result;
# ``gradable: false`` gives and takes no points; ``format_errors`` a string or strings; each test as
# <pl-external-grader-results> shows it. No keys but those: what this writes is what the docs name.
TEST = {
    "type": "object",
    "required": ["name", "description", "points", "max_points", "message", "output"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "points": {"type": "number", "minimum": 0},
        "max_points": {"type": "number", "minimum": 0},
        "message": {"type": "string"},
        "output": {"type": "string"},
    },
}
RESULTS = {
    "type": "object",
    "required": ["gradable", "score", "message", "output", "tests"],
    "additionalProperties": False,
    "properties": {
        "gradable": {"type": "boolean"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "message": {"type": "string"},
        "output": {"type": "string"},
        "format_errors": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "tests": {"type": "array", "items": TEST},
    },
}
# info.json: the parts of PrairieLearn's infoQuestion.json schema a question of this kind uses.
INFO = {
    "type": "object",
    "required": ["uuid", "type", "title", "topic"],
    "properties": {
        "uuid": {
            "type": "string",
            "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
        },
        "type": {"enum": ["Calculation", "MultipleChoice", "Checkbox", "File", "MultipleTrueFalse", "v3"]},
        "title": {"type": "string"},
        "topic": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "singleVariant": {"type": "boolean"},
        "gradingMethod": {"enum": ["Internal", "External", "Manual"]},
        "externalGradingOptions": {
            "type": "object",
            "additionalProperties": False,
            "required": ["image", "entrypoint"],
            "properties": {
                "comment": {"anyOf": [{"type": "string"}, {"type": "array"}, {"type": "object"}]},
                "enabled": {"type": "boolean"},
                "image": {"type": "string"},
                "entrypoint": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                "serverFilesCourse": {"type": "array", "items": {"type": "string"}},
                "timeout": {"type": "integer", "minimum": 1, "maximum": 600},
                "enableNetworking": {"type": "boolean"},
                "environment": {"type": "object"},
            },
        },
    },
}


def command(*args):
    return [sys.executable, "-m", "attention_core", *map(str, args)]


def finished(processes):
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err


@pytest.fixture(scope="module")
def questions(tmp_path_factory):
    """The built-in assignment's question, the llama one's (``--torch`` and ``--job-timeout`` given) and a Gradescope
    zip with ``--torch``: written at once."""
    folder = tmp_path_factory.mktemp("questions")
    for made in (
        ("prairielearn", folder / "builtin"),
        ("prairielearn", "--assignment", LLAMA, folder / "llama", "--torch", "2.5.1", "--job-timeout", 100),
        ("gradescope-bundle", "--torch", "2.5.1", folder / "autograder.zip"),
    ):
        run = in_process(*made)  # (writing files: the command's process is not what is tested here)
        assert run.returncode == 0, run.stderr
    return folder


def _builtin_one_second():
    builtin = assignments.default()
    return dataclasses.replace(builtin, settings=builtin.settings.model_copy(update={"call_timeout": 1.0}))


def grade_folder(tmp, question, submission):
    """A job's /grade as PrairieLearn makes it: the question's tests/, the student's file, no results/ yet."""
    root = tmp / submission.stem
    shutil.copytree(question / "tests", root / "tests")
    (root / "student").mkdir()
    shutil.copyfile(submission, root / "student" / FILE_NAME)
    return root


@pytest.fixture(scope="module")
def graded(questions, tmp_path_factory):
    """name -> results.json of the grading jobs: the correct one through the question's own run.sh (the harness it
    carries) and the stopped one through the entry point, each a process of its own as PrairieLearn runs it; the
    wrong and the hostile one through the job's grading itself (``prairielearn.run``) in this process meanwhile
    (what they test is what the job writes, not its process). The hostile one is graded with a call limit of 1 s,
    not the default 5 s: what is tested is the row its spinning call gets, not how long it spins."""
    tmp = tmp_path_factory.mktemp("grade")
    jobs = {
        "correct": (questions / "builtin", BUILTIN / "correct_functional.py", None, ()),
        "stopped": (questions / "builtin", BUILTIN / "correct_matmul.py", None, ("--time-limit", 0.5)),
        "wrong": (questions / "llama", LLAMA / "submissions" / "mistake_no_scale.py", "assignment", None),
        "hostile": (questions / "builtin", BUILTIN / "hostile_spin.py", _builtin_one_second(), None),
    }
    roots, running = {}, []
    for name, (question, submission, _, more) in jobs.items():
        roots[name] = root = grade_folder(tmp, question, submission)
        if more is None:
            continue
        run = (
            ["bash", root / "tests" / "run.sh"]
            if name == "correct"
            else command("prairielearn-grade", "--root", root, *more)
        )
        environment = dict(os.environ, ATTENTION_PYTHON=sys.executable)
        running.append(
            subprocess.Popen(list(map(str, run)), env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        )
    try:
        for name, (_, _, assignment, more) in jobs.items():
            if more is None:
                root = roots[name]
                if isinstance(assignment, str):  # the question's own assignment folder
                    assignment = root / "tests" / assignment
                assert prairielearn.run(root, assignment=assignment) == 0
    except BaseException:  # (the jobs' processes are not left running)
        for process in running:
            process.kill()
            process.communicate()
        raise
    finished(running)
    return {name: (root, json.loads((root / "results" / "results.json").read_text())) for name, root in roots.items()}


def valid(results):
    """PrairieLearn's documented fields, and what a schema cannot say: a test's points within its maximum, 1 MB."""
    jsonschema.validate(results, RESULTS)
    assert all(test["points"] <= test["max_points"] for test in results["tests"])
    assert len(json.dumps(results).encode()) <= 1_000_000
    return True


def test_the_question_holds_what_prairielearn_reads(questions):
    llama = questions / "llama"
    info = json.loads((llama / "info.json").read_text())
    jsonschema.validate(info, INFO)
    options = info["externalGradingOptions"]
    assert info["gradingMethod"] == "External" and options["enabled"] and options["timeout"] == 100
    assert options["entrypoint"] == "/grade/tests/run.sh" and (llama / "tests" / "run.sh").stat().st_mode & 0o111
    assert options["image"] == "attention-core-grader:torch-2.5.1"
    assert "--time-limit 70" in (llama / "tests" / "run.sh").read_text()  # 30 s before PrairieLearn stops the job
    assert (llama / "tests" / "attention-core" / "attention_core" / "grading" / "server" / "worker.py").is_file()
    assert (llama / "tests" / "assignment" / "reference.py").is_file()
    assert (llama / "tests" / "assignment" / "cases" / "rope.yaml").is_file()
    assert not (questions / "builtin" / "tests" / "assignment").exists()  # the harness's source carries it
    page = (llama / "question.html").read_text()
    assert f'<pl-file-upload file-names="{FILE_NAME}">' in page and "<pl-external-grader-results>" in page
    assert "class DecoderBlock" in (llama / "clientFilesQuestion" / FILE_NAME).read_text()
    dockerfile = (llama / "Dockerfile").read_text()
    assert "FROM prairielearn/grader-python" in dockerfile and '"torch==2.5.1"' in dockerfile


def test_a_question_written_again_keeps_its_uuid_and_the_teacher_s_title(questions, tmp_path):
    out = tmp_path / "again"
    shutil.copytree(questions / "llama", out)
    info = json.loads((out / "info.json").read_text())
    (out / "info.json").write_text(json.dumps(dict(info, title="Week 7")))
    prairielearn.question(out, ROOT, assignments.resolve(LLAMA), torch="2.6.0")
    again = json.loads((out / "info.json").read_text())
    assert (again["uuid"], again["title"], again["externalGradingOptions"]["timeout"]) == (info["uuid"], "Week 7", 100)
    assert again["externalGradingOptions"]["image"] == "attention-core-grader:torch-2.6.0"  # the default name follows
    assert '"torch==2.6.0"' in (out / "Dockerfile").read_text()


def test_torch_pins_what_setup_sh_installs(questions, tmp_path):
    with zipfile.ZipFile(questions / "autograder.zip") as z:
        assert '"torch==2.5.1"' in z.read("setup.sh").decode()
    autograder.bundle(tmp_path / "default.zip", ROOT)
    with zipfile.ZipFile(tmp_path / "default.zip") as z:  # by default: the release the expectations ran with
        assert f'"torch=={torch.__version__.split("+")[0]}"' in z.read("setup.sh").decode()
    with pytest.raises(ValueError, match="not a release"):
        autograder.torch_release('2.5.1" && curl example.com')


def test_a_correct_submission_scores_1(graded):
    root, results = graded["correct"]
    assert valid(results) and results["gradable"] and results["score"] == 1.0
    assert results["tests"] and all(t["points"] == t["max_points"] for t in results["tests"])
    assert sorted(p.name for p in root.iterdir()) == ["results", "student", "tests"]


def test_a_wrong_submission_scores_below_1_with_its_hidden_checks_counted_and_not_shown(graded):
    _, results = graded["wrong"]
    assert valid(results) and results["gradable"]
    rows = Grader(assignment=LLAMA).points_table()
    hidden = {check_id: worth for check_id, _, worth, visibility in rows if visibility != "visible"}
    shown = {t["name"] for t in results["tests"]}
    assert hidden and not shown & set(hidden)
    earned, total = sum(t["points"] for t in results["tests"]), sum(r[2] for r in rows)
    # The hidden checks are RoPE's, which this mistake (attention unscaled) leaves right: they count in full.
    assert results["score"] == pytest.approx((earned + sum(hidden.values())) / total) and results["score"] < 1
    assert any(t["points"] < t["max_points"] and t["output"] for t in results["tests"])


def test_a_hostile_submission_gets_its_row_and_breaks_nothing(graded):
    root, results = graded["hostile"]  # ignores SIGTERM; its multi_head_attention spins forever
    assert valid(results) and results["gradable"] and 0 < results["score"] < 1
    missed = [t for t in results["tests"] if t["message"] != "passed"]  # its calls to it: timed out, 0 points
    assert missed and all(t["message"] == "timeout" and t["points"] == 0 for t in missed)
    assert all(t["points"] == t["max_points"] for t in results["tests"] if t["message"] == "passed")
    assert sorted(p.name for p in root.iterdir()) == ["results", "student", "tests"]
    assert [p.name for p in (root / "results").iterdir()] == ["results.json"]


def test_grading_past_its_time_limit_is_not_gradable(graded):
    _, results = graded["stopped"]
    assert valid(results) and results["gradable"] is False


def test_no_file_or_one_python_cannot_read_is_not_gradable_and_says_why(tmp_path):
    (tmp_path / "student").mkdir()
    prairielearn.run(tmp_path)
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert valid(results) and results["gradable"] is False and FILE_NAME in results["format_errors"][0]
    (tmp_path / "student" / FILE_NAME).write_text("def softmax(x, dim=-1:\n    return x\n")
    prairielearn.run(tmp_path)
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert valid(results) and results["gradable"] is False and f"{FILE_NAME}, line 1" in results["format_errors"][0]
