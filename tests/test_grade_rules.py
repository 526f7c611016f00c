"""What a teacher must be able to defend to a student: a grade is the teacher's points alone, a property or a
check of shapes is earned only with right values, nothing a submission returns ends the batch, an unused
parameter is named as such, and the hand-outs keep the teacher's signatures."""

import inspect
import io
import os
import shutil
import stat

import pytest

from attention_core import reference
from attention_core.grading import properties
from attention_core.grading.judging import grader as grader_module
from attention_core.grading.judging.grader import Grader, points_command
from attention_core.grading.judging.options import GradingOptions
from attention_core.grading.outputs.batch import grade_command
from attention_core.grading.platforms.template import assignment_template
from attention_core.harness.checking import runner
from attention_core.harness.reading import assignment as assignments
from attention_core.kit import write_kit
from tests.outputs import folder

TESTS = os.path.dirname(os.path.abspath(__file__))
LLAMA = os.path.join(TESTS, "assignments", "llama")
REFERENCE = inspect.getsource(reference)


def test_an_assignments_maximum_is_what_its_case_files_and_settings_give():
    out = io.StringIO()
    points_command(assignments.load(LLAMA), GradingOptions(), out)
    text = out.getvalue()
    assert "total: 44 points (41 visible, 3 hidden); 16 properties are feedback, worth 0" in text
    assert "rope/longer/rotated  " in text and text.split("rope/longer/rotated  ")[1].split()[:3] == [
        "value",
        "2",
        "hidden",
    ]


def test_a_visibility_entry_changes_no_points_and_a_points_entry_over_a_case_files_is_warned_of(tmp_path):
    folder_ = tmp_path / "llama"
    shutil.copytree(LLAMA, folder_)
    (folder_ / "assignment.yaml").write_text(
        "checks:\n  block: {points: 4}\n  block/small_block: {visibility: hidden}\n"
    )
    chosen = assignments.load(folder_)
    rows = {r[0]: r for r in Grader(assignment=chosen).points_table()}
    assert rows["block/small_block/output"][2:] == (4.0, "hidden")  # points from `block`, visibility from its case
    assert rows["block/multi_query_block/output"][2:] == (4.0, "visible")
    (warning,) = chosen.settings_warnings(runner.collect(chosen.cases, chosen))
    assert "assignment.yaml:2:3: checks: 'block' gives 4 points to block/small_block/output" in warning
    assert "over the 3 its case file gives" in warning


def test_a_property_reads_the_shapes_first_and_a_judge_that_cannot_read_the_results_fails_that_property():
    chosen = assignments.default()
    items = [i for i in runner.collect(chosen.cases, chosen) if i.error is None]
    found = [p for p in properties.probes(chosen, items) if p.name == "layer_norm"]
    flattened = {
        **chosen.functions,
        "layer_norm": lambda x, eps=1e-5: reference.layer_norm(x, eps).reshape(-1, x.shape[-1]),
    }
    verdicts = properties.evaluate(found, flattened)  # (it raised inside a judge before: the batch ended)
    assert {pid: message is not None for pid, (_, message) in verdicts.items()} == {p.id: True for p in found}
    assert "`out` is of shape [10, 6] where shape [2, 5, 6] is expected" in verdicts["properties/layer_norm/moments"][1]
    empty = {**chosen.functions, "layer_norm": lambda x, eps=1e-5: x[..., :0]}
    assert all(message for _, message in properties.evaluate(found, empty).values())


def test_a_batch_is_made_along_the_axis_the_inputs_have_never_a_new_one():
    chosen = assignments.load(LLAMA)
    items = [i for i in runner.collect(chosen.cases, chosen) if i.error is None]
    (rope,) = [p for p in properties.probes(chosen, items) if p.id == "properties/apply_rope/batched"]
    ranks = {c.args[0].ndim for c in rope.calls}
    assert ranks == {4}, ranks  # apply_rope takes (B, H, T, D): asked of (B, H, T, D) only


@pytest.mark.grading
def test_whatever_raises_while_grading_one_submission_is_its_row_and_its_neighbours_are_graded(tmp_path, monkeypatch):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.py").write_text(REFERENCE)
    original = grader_module.Grader._property_grades

    def faulty(self, submission, functions, problem):
        if submission is not None and submission.path.name == "b.py":
            raise RuntimeError("The size of tensor a (10) must match the size of tensor b (2)")
        return original(self, submission, functions, problem)

    monkeypatch.setattr(grader_module.Grader, "_property_grades", faulty)
    stream, report = io.StringIO(), io.StringIO()
    out = tmp_path / "out"
    assert grade_command([tmp_path / f"{n}.py" for n in "abc"], out, stream=stream, report=report) == 0
    rows = {
        line.split()[0].rsplit("/", 1)[-1]: line.split()[1:4]
        for line in report.getvalue().splitlines()
        if " / " in line and line.startswith(str(tmp_path))
    }
    assert rows["a"] == rows["c"] == ["152", "/", "152"] and rows["b"] == ["0", "/", "152"]
    assert "the grader failed on 1 submission (a fault of the grader, not theirs" in stream.getvalue()
    results = (folder(out, "b") / "results.json").read_text()
    assert "a fault of the grader, not of the submission" in results and "must match the size" in results
    monkeypatch.setattr(grader_module.Grader, "_property_grades", original)
    report = io.StringIO()
    assert grade_command([tmp_path / f"{n}.py" for n in "abc"], out, stream=io.StringIO(), report=report) == 0
    assert [line.split()[1] for line in report.getvalue().splitlines() if line.startswith(str(tmp_path))] == [
        "152"
    ] * 3  # its row was not kept: graded again, the others skipped as unchanged


@pytest.mark.grading
def test_an_unused_parameter_is_named_as_such_not_as_a_detach():
    with Grader(assignment=LLAMA) as grader:
        graded = grader.grade(os.path.join(LLAMA, "submissions", "mistake_rmsnorm_no_weight.py"))
    told = [f.mismatch.message for g in graded.grades if g.check_id.startswith("rmsnorm/") for f in g.result.failures]
    assert told and all("your `RMSNorm` never uses its parameter `weight`: its gradient is None" in m for m in told)
    assert not any("leaves autograd" in m for m in told)


def test_the_hand_outs_keep_the_teachers_signatures_as_written(tmp_path):
    chosen = assignments.load(LLAMA)
    stub = assignment_template(chosen)
    assert "def apply_rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:" in stub
    assert "def sliding_window_mask(T: int, window: int) -> torch.Tensor:" in stub
    assert "Base class for all neural network modules" not in stub  # a class without a docstring has none
    notebook = assignment_template(chosen, fmt="ipynb")
    assert "base: float = 10000.0) -> torch.Tensor:" in notebook
    assert "apply_rope(x, base=10000.0)" in chosen.graded["apply_rope"].signature()


def test_a_kit_holds_nothing_of_the_hidden_checks_and_others_can_read_it(tmp_path):
    folder_ = tmp_path / "llama"
    shutil.copytree(LLAMA, folder_, ignore=shutil.ignore_patterns("submissions"))
    (folder_ / "assignment.yaml").write_text(
        "title: T\nchecks:\n  rope/longer: {visibility: hidden, points: 7}\n  rope/one_head: {points: 5}\n"
    )
    kit = tmp_path / "kit"
    assert write_kit(assignments.load(folder_), kit, out=io.StringIO()) == 0
    text = "\n".join(p.read_text() for p in kit.rglob("*") if p.is_file())
    assert "longer" not in text and "7" not in (kit / "assignment.yaml").read_text()
    assert "checks:" not in (kit / "assignment.yaml").read_text()
    assert "points: 5" in (kit / "cases" / "rope.yaml").read_text()  # a visible check keeps its resolved points
    for path in [kit, *kit.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))


@pytest.mark.grading
def test_constant_answers_earn_nothing_and_a_missing_class_costs_only_its_own_checks():
    with Grader(assignment=LLAMA) as grader:
        constant, partial = grader.grade_each(
            [
                os.path.join(LLAMA, "submissions", "constant_zeros.py"),
                os.path.join(LLAMA, "submissions", "partial_no_block.py"),
            ]
        )
    assert constant.score == 0 and constant.max_score == partial.max_score == 44
    lost = {g.check_id.split("/")[0] for g in partial.grades if g.score < g.max_score}
    assert lost == {"block"}, lost


TWO_RESULTS = '''import torch


def attend(q, k, v):
    """Scaled dot-product attention: (out, weights)."""
    w = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    return w @ v, w
'''


@pytest.mark.grading
def test_a_result_read_for_its_shape_alone_earns_no_share_and_a_wrong_one_costs_its_share(tmp_path):
    folder_ = tmp_path / "two"
    (folder_ / "cases").mkdir(parents=True)
    (folder_ / "reference.py").write_text(TWO_RESULTS)
    (folder_ / "cases" / "attend.yaml").write_text(
        "document: {title: T}\ncases:\n  - id: c\n    seed: 0\n    inputs:\n      q: {randn: [2, 3, 4]}\n"
        "      k: {randn: [2, 3, 4]}\n      v: {randn: [2, 3, 5]}\n    checks:\n      - id: both\n"
        "        points: 2\n        call: attend(q, k, v)\n        expect:\n          out: torch.Size([2, 3, 5])\n"
        "          weights: {oracle: 'softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)'}\n"
    )
    (folder_ / "assignment.yaml").write_text("gradient_points: 0\nreturns:\n  attend: [out, weights]\n")
    wrong_shape = tmp_path / "wrong_shape.py"
    wrong_shape.write_text(TWO_RESULTS.replace("return w @ v, w", "return (w @ v).transpose(-2, -1), w"))
    wrong_weights = tmp_path / "wrong_weights.py"
    wrong_weights.write_text(TWO_RESULTS.replace("return w @ v, w", "return w @ v, w * 0"))
    with Grader(assignment=folder_) as grader:
        shape, weights = grader.grade_each([wrong_shape, wrong_weights])
    (check,) = [g for g in shape.grades if g.check_id == "attend/c/both"]
    assert (check.score, check.max_score) == (1.0, 2.0)  # the weights' share only: the wrong shape costs its own
    (check,) = [g for g in weights.grades if g.check_id == "attend/c/both"]
    assert check.score == 0.0  # the right shape alone earns nothing


def test_property_points_0_keeps_a_property_its_own_checks_entry_gives_points():
    folder_ = assignments.load(LLAMA)
    from attention_core.harness.reading.settings import Override  # noqa: PLC0415

    settings = folder_.settings.model_copy(
        update={
            "property_points": 0.0,
            "checks": {**folder_.settings.checks, "properties/RMSNorm/batched": Override(points=2)},
        }
    )
    chosen = assignments.Assignment(
        folder_.name, folder_.cases, folder_.graded, folder_.reference, settings, folder_.folder
    )
    items = [i for i in runner.collect(chosen.cases, chosen) if i.error is None]
    assert {p.id: p.points for p in properties.probes(chosen, items)} == {"properties/RMSNorm/batched": 2.0}


@pytest.mark.grading
def test_a_property_resting_on_another_names_values_is_charged_with_that_names_check_once(tmp_path):
    source = REFERENCE.replace("    x = x.transpose(-3, -2)  # (..., T, nh, hs)\n", "")
    assert source != REFERENCE
    (tmp_path / "merge_wrong.py").write_text(source)
    with Grader() as grader:
        graded = grader.grade(tmp_path / "merge_wrong.py")
    grades = {g.check_id: g for g in graded.grades}
    split_merge = grades["properties/split_heads/split_merge"]
    assert split_merge.max_score == 0 and "`merge_heads` gives wrong values" in split_merge.charged
    assert all(g.score == g.max_score for g in graded.grades if g.item.check.function == "split_heads")
    carrier = [g for g in graded.grades if "resting on `merge_heads`" in g.charged]
    assert len(carrier) == 1 and carrier[0].item.check.function == "merge_heads"
