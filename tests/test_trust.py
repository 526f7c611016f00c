"""Submissions read as data, answers held to the spec's kind, case files bounded: the attacks of a hostile
student and a hostile case author, each a test."""

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attention_core import reference
from attention_core.harness.checking import runner
from tests.outputs import HEAD, HEAD_GRADE, command, folder, last_part

REFERENCE = Path(reference.__file__).read_text(encoding="utf-8")


def _grade(*args):
    return command("grade", *map(str, args))


@pytest.mark.grading
def test_a_linked_submission_is_never_followed_and_gets_its_own_row(tmp_path):
    (tmp_path / "honest.py").write_text(REFERENCE)
    os.symlink(reference.__file__, tmp_path / "linked.py")  # the reference itself, through a link
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "solution.py").write_text("from helpers import *\n")
    os.symlink(reference.__file__, tmp_path / "folder" / "helpers.py")
    run = _grade(tmp_path / "honest.py", tmp_path / "linked.py", tmp_path / "folder", "--out", tmp_path / "out")
    assert run.returncode == 0, run.stderr[-2000:]
    scores = {last_part(line.split()[0]): line.split()[1:4] for line in run.stdout.splitlines() if " / " in line}
    assert scores["honest"][0] == scores["honest"][2] != "0"
    assert scores["linked"][0] == "0" and scores["folder"][0] == "0"
    for name in ("linked", "folder"):
        output = json.loads((folder(tmp_path / "out", name) / "results.json").read_text())["output"]
        assert (
            "is a symbolic link; a submission is read as data, regular files in folders, and its links are never followed"
            in output
        )


@pytest.mark.grading
def test_a_complex_answer_whose_real_part_is_right_fails_by_name(tmp_path):
    complex_softmax = (
        REFERENCE + "\n_s = softmax\n\ndef softmax(x, dim=-1):\n    return _s(x, dim).to(torch.complex64)\n"
    )
    (tmp_path / "c.py").write_text(complex_softmax)
    run = _grade(tmp_path / "c.py", "--out", tmp_path / "out")
    results = json.loads((folder(tmp_path / "out", "c") / "results.json").read_text())
    softmax = [t for t in results["tests"] if "The call: softmax(" in t["output"]]
    assert run.returncode == 0 and softmax and all(t["score"] == 0 and "is complex" in t["output"] for t in softmax)


def _load_error(tmp_path, text, name="x.yaml"):
    (tmp_path / name).write_text(text, encoding="utf-8")
    return [i for i in runner.collect(tmp_path) if i.error is not None]


GOOD = (
    "document: {title: T}\ncases:\n  - id: c\n    inputs: {x: [1.0]}\n"
    "    checks:\n      - {id: k, call: softmax(x), expect: {out: [1.0]}}\n"
)


def test_points_are_finite_and_bounded(tmp_path):
    (error,) = _load_error(tmp_path, GOOD.replace("{id: k,", "{id: k, points: 1.0e+308,"))
    assert "points must be at most 1e+06" in error.error.message


def test_an_id_is_bounded_in_length(tmp_path):
    (error,) = _load_error(tmp_path, GOOD.replace("id: c", "id: " + "c" * 200))
    assert "an id of 200 characters; the limit is 100" in error.error.message


def test_two_files_whose_ids_would_be_one_are_refused(tmp_path):
    (tmp_path / "dup.yaml").write_text(GOOD, encoding="utf-8")
    (error,) = _load_error(tmp_path, GOOD, "dup.yml")
    assert "its ids would begin with 'dup', as those of 'dup.yaml' do" in error.error.message
    assert [i.id for i in runner.collect(tmp_path) if i.error is None] == ["dup/c/k"]


@pytest.mark.grading
def test_submission_ids_are_their_paths_never_reach_outside_out_nor_the_batchs_own_files_nor_each_other(tmp_path):
    subs = tmp_path / "subs"
    for folder_name in ("dirA", "dirB"):
        (subs / folder_name).mkdir(parents=True)
    (subs / "dirA" / "alice.py").write_text(REFERENCE)
    (subs / "dirB" / "alice.py").write_text("raise SystemError('wrong')\n")
    (subs / "alice-2.py").write_text(REFERENCE)
    (subs / "...py").write_text(REFERENCE)
    (subs / "gradebook.csv.py").write_text(REFERENCE)
    (subs / "ev\x1b[31mil.py").write_text(REFERENCE)
    given = [
        "subs/dirA/alice.py",
        "subs/dirB/alice.py",
        "subs/alice-2.py",
        "subs/...py",
        "subs/gradebook.csv.py",
        "subs/ev\x1b[31mil.py",
    ]
    run = command("grade", *given, "--out", "out", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "\x1b" not in run.stdout and "ev\\x1b[31mil" in run.stdout
    scores = {line.split()[0]: line.split()[1] for line in run.stdout.splitlines() if " / " in line}
    full = scores["subs/dirA/alice"]
    assert scores == {
        "subs/dirA/alice": full,
        "subs/dirB/alice": "0",
        "subs/alice-2": full,
        "subs/...py": full,
        "subs/gradebook.csv": full,
        "subs/ev\\x1b[31mil": full,
    }
    with open(tmp_path / "out" / "gradebook.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[0]["submission"] == "Points Possible"
    assert sorted(row["submission"] for row in rows[1:]) == sorted(scores)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "subs"]  # nothing written beside --out
    out = tmp_path / "out"
    assert (out / "submissions" / "subs" / "...py" / "results.json").is_file()
    assert (out / "submissions" / "subs" / "gradebook.csv" / "results.json").is_file()


@pytest.mark.grading
def test_an_input_changed_in_place_is_told_by_the_grader_whatever_the_submission_patches(tmp_path):
    hiding = (
        REFERENCE
        + """
_a = attention
torch.equal = lambda a, b: True  # what the submission's own process would compare with
torch.Tensor.__eq__ = lambda a, b: torch.ones_like(a, dtype=torch.bool)


def attention(q, k, v, mask=None, scale=None):
    q.mul_(2.0)  # changes the caller's tensor, then undoes its effect on the result
    return _a(q / 2.0, k, v, mask, scale)
"""
    )
    (tmp_path / "hiding.py").write_text(hiding)
    run = _grade(tmp_path / "hiding.py", "--out", tmp_path / "out")
    results = json.loads((folder(tmp_path / "out", "hiding") / "results.json").read_text())
    backward = [t for t in results["tests"] if t["name"].endswith("/backward") and "attention(" in t["output"]]
    assert backward and any("changed its input `q` in place" in t["output"] and t["score"] == 0 for t in backward), (
        run.stderr[-1000:]
    )


def test_a_results_json_is_cut_to_under_1_mb_however_many_long_outputs_it_holds():
    from attention_core.grading.judging.grader import Grade, SubmissionGrade  # noqa: PLC0415
    from attention_core.grading.outputs import gradescope  # noqa: PLC0415
    from attention_core.harness.checking.results import Result, Status  # noqa: PLC0415

    graded = SubmissionGrade("s", Path("s.py"), note="printed " * 2000)
    for i in range(400):
        result = Result(Status.IMPLEMENTATION_ERROR, f"f/c/{i}", "f.yaml:1", message="\u00e9 raised " + "x" * 9000)
        graded.grades.append(Grade(f"f/c/{i}", None, result, 0.0, 1.0, diagnosis="Likely mistake: " + "y" * 9000))
    text = gradescope._dumps(gradescope.results_json(graded))
    assert len(text.encode()) < gradescope.RESULTS_LIMIT
    results = json.loads(text)
    assert len(results["tests"]) == 400 and all("more characters)" in t["output"] for t in results["tests"])
    assert all(t["output"].count("y") > 100 for t in results["tests"])  # each keeps its share


SLOW = """document: {title: slow}
cases:
  - id: chain
    inputs:
      b: {expr: "ones(1200, 1200) / 1200"}
    checks:
""" + "".join(
    f"""      - id: c{i}
        expr: "(b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b @ b).sum()"
        expect:
          out: 16.0
"""
    for i in range(40)
)


def test_a_file_cheap_to_write_and_slow_to_run_runs_out_of_its_time_budget_while_its_neighbours_run(tmp_path):
    import shutil  # noqa: PLC0415

    (tmp_path / "slow.yaml").write_text(SLOW, encoding="utf-8")
    shutil.copy(runner.default_cases_folder() / "001_self_attention.yaml", tmp_path)
    env = dict(os.environ, ATTENTION_CORE_CASE_SECONDS="0.25", ATTENTION_CORE_FILE_SECONDS="1")
    run = subprocess.run(
        [sys.executable, "-m", "attention_core", "check", "--cases", str(tmp_path), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert re.search(r"001_self_attention .* 13 +0 +0 +0", out), out  # the neighbour ran, every check passed
    assert "ran out of its time budget of 0.25 s" in out  # one check: its own budget
    assert "not run: the case file ran out of its time budget of 1 s" in out  # the rest of the file: not run
    assert re.search(r"slow\.yaml:\d+: slow/chain/c39", out)  # named at its file and line


@pytest.mark.grading
@pytest.mark.parametrize("jobs", [1, 2])  # the planner alone; the planner and a second grader process
def test_a_submission_named_like_a_module_in_the_folder_grade_runs_in_is_only_ever_graded(tmp_path, jobs):
    """``python -m`` and ``python -c`` put the folder they run in first on the module path: files there named like
    the standard library's and torch's modules are the students', graded in their sandboxes and never imported by the
    command or its grader processes (each would end the process that imported it)."""
    names = ("torch", "yaml", "dataclasses", "json", "tqdm", "pickle", "socket")
    for name in names:
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('{name}.py imported')\n")
    (tmp_path / "alice.py").write_text((HEAD / "submissions" / "correct.py").read_text())
    run = subprocess.run(  # (the head example's assignment: its reference imports torch too)
        [sys.executable, "-m", "attention_core", *HEAD_GRADE, *(f"{n}.py" for n in (*names, "alice")), "--out", "out"]
        + ["--jobs", str(jobs)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    with (tmp_path / "out" / "gradebook.csv").open(newline="") as handle:
        scores = {last_part(row["submission"]): row for row in csv.DictReader(handle)}
    assert scores["alice"]["score"] == scores["alice"]["max_score"]
    assert all(float(scores[name]["score"]) == 0 for name in names)
