"""Documented behaviours that once had no test: each of these fails when its behaviour is removed."""

import csv
import io
import re
import shutil
from pathlib import Path

import pytest
import torch

from attention_core.checks import Shown, check_command
from attention_core.grading.intake import ids
from attention_core.grading.judging.grader import Grader
from attention_core.grading.outputs import gradebook, gradescope
from attention_core.grading.outputs.scores import Score, Scores
from attention_core.harness.checking import tolerance
from attention_core.harness.checking.devices import covered
from attention_core.harness.languages.tensor_text import parse_tensor
from attention_core.harness.plugin import snapshot
from tests.outputs import command, folder, grade_head

ROOT = Path(__file__).resolve().parent.parent
HEAD = ROOT / "examples" / "head"
CORRECT = HEAD / "submissions" / "correct.py"


@pytest.mark.grading
def test_a_check_s_visibility_from_assignment_yaml_reaches_results_json(tmp_path):
    folder = tmp_path / "head"
    shutil.copytree(HEAD, folder)
    (folder / "assignment.yaml").write_text("checks:\n  head/self_attention: {visibility: hidden}\n")
    with Grader(assignment=folder, property_points=0) as grader:
        tests = gradescope.results_json(grader.grade(CORRECT))["tests"]
    seen = {t["name"]: t["visibility"] for t in tests}
    assert seen["head/self_attention/output"] == seen["head/self_attention/output/backward"] == "hidden"
    assert {v for name, v in seen.items() if not name.startswith("head/self_attention/")} == {"visible"}


def test_a_submission_s_id_is_its_path_from_the_working_folder_and_no_two_ids_share_a_folder(tmp_path):
    paths = [
        Path(p)
        for p in (
            "subs/dirA/alice.py",
            "subs/dirB/alice.py",
            "subs/alice-2.py",
            "subs/gradebook.csv.py",
            "subs/...py",
            "subs/x.ipynb",
            "subs/./dirA/../b.zip",
            "subs/s.py",
            "subs/s.ipynb",
        )
    ]
    assert ids.submission_ids(paths, cwd=tmp_path) == [
        "subs/dirA/alice",
        "subs/dirB/alice",
        "subs/alice-2",
        "subs/gradebook.csv",
        "subs/...py",
        "subs/x",
        "subs/b",
        "subs/s.py",
        "subs/s.ipynb",
    ]
    assert ids.submission_ids([tmp_path.parent / "elsewhere.py"], cwd=tmp_path) == [str(tmp_path.parent / "elsewhere")]
    assert ids.submission_ids([Path("ev\x1bil.py")], cwd=tmp_path) == ["ev\\x1bil"]  # printable
    assert ids.submission_ids([Path("//x/a.py"), Path("s.PY")], cwd=tmp_path) == ["/x/a", "s"]
    assert ids.same_file_key("//x/a.py") == ids.same_file_key("/x/./a.py")  # one file, graded once
    taken = ["a", "a/results.json", "%a", "results.json", "/a", "%root/a", "x" * 300, "b/" + "y" * 300]
    folders = [ids.folder_of(tmp_path, t) for t in taken]
    assert len(set(folders)) == len(folders)
    assert all(f.is_relative_to(tmp_path / "submissions") and ".." not in f.parts for f in folders)
    assert not any(f / own in folders for f in folders for own in ids.OWN_FILES)  # no id's folder is another's file


@pytest.mark.grading
def test_gradient_points_0_grades_no_backward_check():
    with Grader(assignment=HEAD, property_points=0) as with_them:
        graded = with_them.grade(CORRECT)
    with Grader(assignment=HEAD, property_points=0, gradient_points=0) as without:
        plain = without.grade(CORRECT)
    assert any(g.check_id.endswith("/backward") for g in graded.grades)
    assert not any(g.check_id.endswith("/backward") for g in plain.grades)
    assert plain.max_score == graded.max_score - sum(
        g.max_score for g in graded.grades if g.check_id.endswith("/backward")
    )


@pytest.mark.grading
def test_the_budget_option_reaches_the_submission_s_process(tmp_path):
    slow = CORRECT.read_text().replace(
        "    def forward(self, query, key, value):\n",
        "    def forward(self, query, key, value):\n        import time\n"
        "        t = time.process_time()\n"
        "        while time.process_time() - t < 0.6:  # 0.6 s of CPU time\n"
        "            pass\n",
    )
    (tmp_path / "slow.py").write_text(slow)
    run = command(
        "grade",
        "--assignment",
        str(HEAD),
        "--budget",
        "1",
        "--property-points",
        "0",
        str(tmp_path / "slow.py"),
        "--out",
        str(tmp_path / "out"),
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    text = (folder(tmp_path / "out", "slow") / "results.json").read_text()
    # (the calls' own limit is 5 s: a limit under 1 s, or the budget spent, is the budget's doing)
    assert re.search(r"did not return within 0\.\d+ s|the submission's time budget of 1 s is spent", text), text


def test_the_bfloat16_row_of_the_tolerance_table_is_the_rule():
    page = (ROOT / "docs" / "tolerance.md").read_text()
    found = re.search(r"bfloat16:\s*([0-9.e-]+), ([0-9.e-]+)\)", page)
    assert found, "docs/tolerance.md gives no bfloat16 row"
    assert tolerance.default_tolerance(torch.bfloat16) == (float(found[1]), float(found[2]))


def test_a_snapshot_of_a_large_tensor_checks_its_sampled_elements_beyond_its_sums():
    value = torch.linspace(-3, 3, 8192, dtype=torch.float64).float().reshape(64, 128)  # one slice, over FULL_LIMIT
    lines = snapshot._serialize_value(value)
    sampled = [int(i) for line in lines if line.startswith("[") for i in [_flat(line, value.shape)]]
    i = sampled[0]
    j = next(k for k in range(value.numel()) if k not in set(sampled) and value.reshape(-1)[k] != value.reshape(-1)[i])
    swapped = value.clone().reshape(-1)
    swapped[i], swapped[j] = value.reshape(-1)[j], value.reshape(-1)[i]  # the same sums, the same largest
    stored = "== out\n" + "\n".join(lines)
    computed = "== out\n" + "\n".join(snapshot._serialize_value(swapped.reshape(value.shape)))
    assert snapshot._problems(stored, stored) == []
    assert snapshot._problems(computed, stored)  # only a sampled element tells them apart


def _flat(line, shape):
    index = [int(n) for n in line[1 : line.index("]")].split(",")]
    flat = 0
    for size, n in zip(shape, index):
        flat = flat * size + n
    return flat


def test_an_e_notation_zero_allows_the_smallest_normal_float32_and_no_more():
    printed = parse_tensor("tensor([0.0000e+00])")
    allowed = tolerance.printed_allowance(printed, torch.float32)
    tiny = torch.finfo(torch.float32).tiny
    assert allowed[0] >= tiny  # a computed 1e-39 prints as 0.0000e+00: it passes
    assert allowed[0] < 2 * tiny + 1e-44  # and the floor is that, not more


def test_the_command_line_prints_the_first_20_problems_in_full_then_one_line_each(tmp_path):
    checks = "".join(
        f'      - id: c{i}\n        expr: "1 + {i}"\n        expect:\n          out: -1\n' for i in range(25)
    )
    (tmp_path / "f.yaml").write_text("document: {title: t}\ncases:\n  - id: many\n    checks:\n" + checks)
    out = io.StringIO()
    code = check_command(tmp_path, covered(["cpu"]), False, out=out)
    text = out.getvalue()
    assert code == 1 and Shown.MAX_REPORTS == 20
    assert text.count("\nFAILED ") == 20 and "(5 more problems, one line each below)" in text
    verbose = io.StringIO()
    assert check_command(tmp_path, covered(["cpu"]), True, out=verbose) == 1  # -v: every failure in full
    assert verbose.getvalue().count("\nFAILED ") == 25 and "more problems" not in verbose.getvalue()


def test_the_gradebook_has_a_column_per_check_holding_that_check_s_score(tmp_path):
    scores = [
        Scores("alice", 1.5, 3, grades=[Score("f/c/a", 1.0, 1), Score("f/c/b", 0.5, 2)]),
        Scores("bob", 2, 3, grades=[Score("f/c/a", 0.0, 1), Score("f/c/b", 2.0, 2)]),
    ]
    gradebook.write_gradebook(scores, tmp_path / "gradebook.csv")
    rows = list(csv.reader((tmp_path / "gradebook.csv").open()))
    assert rows == [
        ["submission", "score", "max_score", "f/c/a", "f/c/b"],
        ["Points Possible", "3", "3", "1", "2"],
        ["alice", "1.5", "3", "1", "0.5"],
        ["bob", "2", "3", "0", "2"],
    ]


@pytest.mark.grading
def test_output_that_is_not_a_terminal_carries_no_carriage_return_nor_escape_code(tmp_path):
    for name in ("a", "b", "c"):
        shutil.copy(CORRECT, tmp_path / f"{name}.py")
    run = grade_head(
        *sorted(map(str, tmp_path.glob("*.py"))),
        "--out",
        str(tmp_path / "out"),
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    for text in (run.stdout, run.stderr):
        assert "\r" not in text and "\x1b" not in text, repr(text[:400])
    assert "graded 3" in run.stderr
