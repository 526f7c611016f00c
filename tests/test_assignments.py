"""A teacher's own assignment: its reference's functions and nn.Module classes, its cases, its settings.

Two assignments: ``examples/head`` (document 000's ``Head``, expectations by oracles on the instance's
weights) and ``tests/assignments/book`` (five classes of a course book's attention chapter, each case the
book's printed output after its ``torch.manual_seed``), graded from the command line like a teacher would.
"""

import json
import re
import zipfile
from pathlib import Path

import pytest
import torch

from attention_core import instances
from attention_core.harness.checking import runner
from attention_core.harness.reading import assignment as assignments
from attention_core.harness.reading.settings import SettingsError, read_settings
from tests.outputs import command, folder, last_part, pytest_here

pytestmark = pytest.mark.slow  # end to end: the quick loop leaves this module out

ROOT = Path(__file__).resolve().parent.parent
HEAD = ROOT / "examples" / "head"
BOOK = Path(__file__).resolve().parent / "assignments" / "book"


def cli(*args, cwd=None):
    return command(*args, cwd=cwd)


def _scores(run):
    """submission -> its score, from grade's table."""
    return {last_part(line.split()[0]): line.split()[1] for line in run.stdout.splitlines() if " / " in line}


def pytest_run(*args, cwd):
    return pytest_here("-q", "-p", "no:cacheprovider", *args, cwd=cwd)


# ---------------------------------------------------------------- the spec read from the reference


def test_the_spec_is_the_references_public_functions_and_module_classes_in_source_order(tmp_path):
    (tmp_path / "reference.py").write_text(
        "import torch\nfrom torch import nn\nfrom math import sqrt\n\n"
        "def _helper(x):\n    return x\n\n"
        "def attend(q, k, v, scale=None):\n    w = q @ k.T\n    return w @ v, w\n\n"
        "class Block(nn.Module):\n    '''A block.'''\n    def __init__(self, d, heads=2):\n        super().__init__()\n"
        "    def forward(self, x, mask=None):\n        return x\n\n"
        "class NotAModule:\n    pass\n",
        encoding="utf-8",
    )
    (tmp_path / "cases").mkdir()
    chosen = assignments.load(tmp_path)
    assert list(chosen.graded) == ["attend", "Block"]  # not the private helper, the import or a plain class
    attend, block = chosen.graded["attend"], chosen.graded["Block"]
    assert (attend.kind, attend.signature()) == ("function", "attend(q, k, v, scale=None)")
    assert attend.returns == ("out0", "w")  # `return w @ v, w`: an expression, then a name
    assert (block.kind, block.signature(), block.summary) == ("class", "Block(d, heads=2)(x, mask=None)", "A block.")


def test_result_names_come_from_the_return_statement_or_from_assignment_yaml(tmp_path):
    (tmp_path / "reference.py").write_text(
        "def two(x):\n    if x is None:\n        return None, None\n    output, weights = x, x\n"
        "    return output, weights\n\ndef one(x):\n    return x * 2\n",
        encoding="utf-8",
    )
    (tmp_path / "cases").mkdir()
    assert assignments.load(tmp_path).graded["two"].returns == ("output", "weights")  # the return that names them
    assert assignments.load(tmp_path).graded["one"].returns == ("out",)
    (tmp_path / "reference.py").write_text("def two(x):\n    if x:\n        return a, b\n    return c, d\n")
    assert assignments.load(tmp_path).graded["two"].returns == ("out0", "out1")  # two names that disagree
    (tmp_path / "assignment.yaml").write_text("returns: {two: [output, weights]}\n", encoding="utf-8")
    assert assignments.load(tmp_path).graded["two"].returns == ("output", "weights")


def test_the_built_in_assignment_is_the_spec_read_through_the_same_loader():
    chosen = assignments.default()
    assert chosen.builtin and chosen.names == (
        "softmax",
        "causal_mask",
        "causal_average",
        "attention",
        "split_heads",
        "merge_heads",
        "multi_head_attention",
        "layer_norm",
    )
    assert chosen.graded["attention"].returns == ("output", "weights")
    items = runner.collect(chosen.cases, chosen)
    assert items and all(i.file.assignment is chosen for i in items)


# ---------------------------------------------------------------- assignment.yaml


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("points: -1\n", ":1:9", "points: Input should be greater than or equal to 0"),
        ("budget: .inf\n", ":1:9", "budget: Input should be"),
        ("mode: training\n", ":1:7", "mode: Input should be 'eval' or 'train'"),
        ("title: x\npoints: 1\ngradient_pionts: 2\n", ":3:1", "unknown key 'gradient_pionts'"),
        ("checks:\n  head/a: {points: 2, hidden: true}\n", ":2:23", "unknown key 'hidden'"),
        ("graded: [Head, 3x]\n", ":1:16", "graded.1: String should match pattern"),
    ],
)
def test_a_settings_mistake_is_named_at_its_line_and_column(tmp_path, text, where, words):
    path = tmp_path / "assignment.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SettingsError) as err:
        read_settings(path)
    message = str(err.value)
    assert message.startswith(f"{path}{where}: ") and words in message, message


def test_settings_default_when_the_file_is_absent_and_the_most_specific_override_wins(tmp_path):
    defaults = read_settings(tmp_path / "assignment.yaml")
    assert (
        defaults.points,
        defaults.gradient_points,
        defaults.visibility,
        defaults.call_timeout,
        defaults.budget,
        defaults.mode,
    ) == (1.0, 1.0, "visible", 5.0, 60.0, "eval")
    (tmp_path / "assignment.yaml").write_text(
        "checks:\n  f: {points: 2}\n  f/c: {points: 3, visibility: hidden}\n  f/c/k: {gradient_points: 0}\n"
    )
    settings = read_settings(tmp_path / "assignment.yaml")
    # Key by key: each from the most specific entry that sets it (an entry for gradient points leaves the points)
    assert settings.override("f/c/k").gradient_points == 0 and settings.override("f/c/k").points == 3
    assert settings.override("f/c/k").visibility == "hidden"
    assert settings.override("f/c/other").points == 3 and settings.override("f/d/k").points == 2
    assert settings.override("f/d/k").visibility is None and settings.override("g/c/k").points is None


def test_a_folder_without_reference_or_cases_or_with_a_reference_that_defines_nothing_is_refused(tmp_path):
    with pytest.raises(assignments.AssignmentError, match="no such folder"):
        assignments.load(tmp_path / "nowhere")
    with pytest.raises(assignments.AssignmentError, match=r"cases: no such folder"):
        assignments.load(tmp_path)
    (tmp_path / "cases").mkdir()
    with pytest.raises(assignments.AssignmentError, match=r"reference.py: no such file"):
        assignments.load(tmp_path)
    (tmp_path / "reference.py").write_text("import torch\nfrom torch.nn import Linear\n_private = 1\n")
    with pytest.raises(assignments.AssignmentError, match="defines no public function or nn.Module class"):
        assignments.load(tmp_path)
    (tmp_path / "reference.py").write_text("raise RuntimeError('broken')\n")
    with pytest.raises(assignments.AssignmentError, match="could not be imported: RuntimeError: broken"):
        assignments.load(tmp_path)
    (tmp_path / "reference.py").write_text("def f(x):\n    return x\n\nexit()\n")
    with pytest.raises(assignments.AssignmentError, match="could not be imported: SystemExit"):
        assignments.load(tmp_path)


# ---------------------------------------------------------------- classes in cases


def test_a_class_call_makes_the_instance_from_the_cases_stream_after_its_inputs():
    chosen = assignments.load(BOOK)
    item = next(i for i in runner.collect(chosen.cases, chosen) if i.id == "chapter3/causal_attention/context")
    _, args, _ = runner.Preparation().arguments(item, "cpu")
    state = args[0][instances.INSTANCE]["state"]
    torch.manual_seed(123)  # as the book does, right before CausalAttention(...): its inputs draw nothing
    made = chosen.reference.CausalAttention(3, 2, 6, 0.0)
    assert state.keys() == made.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in made.state_dict().items())
    assert args[0][instances.INSTANCE]["buffers"] == ["mask"]


@pytest.mark.parametrize(
    ("call", "words"),
    [
        ("CausalAttention(3, 2, 6, 0.0)", "CausalAttention is a class: make an instance and call it"),  # not called
        ("CausalAtention(3, 2, 6, 0.0)(batch)", "unknown function 'CausalAtention'; did you mean 'CausalAttention'?"),
        (
            "CausalAttention(batch)",
            "CausalAttention is a class: make an instance and call it, "
            "`CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)(...)`",
        ),
        ("tril(batch)", "'tril' is a builtin: use 'expr'"),
    ],
)
def test_a_call_the_assignment_cannot_make_is_named_at_its_line(tmp_path, call, words):
    case = (
        f"document: {{title: T}}\ncases:\n  - id: c\n    seed: 1\n    inputs: {{batch: {{randn: [1, 6, 3]}}}}\n"
        f'    checks:\n      - id: k\n        call: "{call}"\n        expect: {{out: "torch.Size([1, 6, 2])"}}\n'
    )
    (tmp_path / "c.yaml").write_text(case, encoding="utf-8")
    chosen = assignments.load(BOOK)
    (item,) = runner.collect(tmp_path, chosen)
    result = runner.run(item)
    assert result.status.value == "case error" and words in result.message, result.message
    assert re.search(r"c\.yaml:8:\d+$", item.location), item.location


def test_a_class_call_without_a_seed_is_a_case_error_that_says_so(tmp_path):
    case = (
        "document: {title: T}\ncases:\n  - id: c\n    inputs: {x: [[[1.0, 2.0, 3.0]]]}\n"
        "    checks:\n      - id: k\n        call: CausalAttention(3, 2, 6, 0.0)(x)\n"
        '        expect: {out: "torch.Size([1, 1, 2])"}\n'
    )
    (tmp_path / "c.yaml").write_text(case, encoding="utf-8")
    (item,) = runner.collect(tmp_path, assignments.load(BOOK))
    assert "give the case a 'seed'" in runner.run(item).message


def test_parameters_are_matched_by_name_and_a_missing_one_is_named_with_the_references():
    chosen = assignments.load(BOOK)

    class CausalAttention(torch.nn.Module):  # noqa: N801
        def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
            super().__init__()
            self.Wq = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_key = torch.nn.Linear(d_in, d_out, bias=False)
            self.W_value = torch.nn.Linear(d_in, d_out, bias=False)

    item = next(i for i in runner.collect(chosen.cases, chosen) if i.id == "chapter3/causal_attention/context")
    result = runner.run(
        item, functions=assignments.callables(type("M", (), {"CausalAttention": CausalAttention}), chosen.graded)
    )
    assert result.status.value == "implementation error"
    assert (
        "your CausalAttention has no `W_query.weight`; it has `Wq.weight` (2, 3) instead (parameters are matched by "
        "name)"
    ) in result.message, result.message


def test_a_class_made_of_other_parameters_is_told_so_within_what_a_student_reads():
    """nn.MultiheadAttention's packed weights where the teacher's four projections belong: what is missing and what
    is there instead, whole, in the 200 characters a student's feedback shows of a message."""
    from attention_core import instances  # noqa: PLC0415
    from attention_core.grading.process import replies  # noqa: PLC0415

    class CrossAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = torch.nn.MultiheadAttention(8, 2)

    state = {
        f"{p}.{w}": torch.zeros(8, 8) if w == "weight" else torch.zeros(8) for p in "qkvo" for w in ("weight", "bias")
    }
    with pytest.raises(instances.StateMismatch) as raised:
        instances.load_state(CrossAttention(), state, "CrossAttention")
    shown = replies.text(f"StateMismatch: {raised.value}")
    assert "has no `q.weight`, `q.bias` and 6 more" in shown and "`mha.in_proj_weight` (24, 8)" in shown
    assert not shown.endswith("…"), shown


# ---------------------------------------------------------------- the commands a teacher runs


def test_the_spec_check_of_an_assignment_prints_the_table_all_passed():
    run = cli("--assignment", BOOK)
    assert run.returncode == 0, run.stdout + run.stderr
    total = next(line for line in run.stdout.splitlines() if line.startswith("total")).split()
    assert total[1:] == ["6", "0", total[3], "0", "0"]  # passed, failed, (skipped: CUDA), errors, pending
    run = cli("check", "--assignment", HEAD)
    assert run.returncode == 0 and run.stdout.splitlines()[-2].split()[1:3] == ["3", "0"], run.stdout


@pytest.mark.grading
def test_a_batch_of_book_submissions_is_graded_with_the_credit_of_each_class(tmp_path):
    out = tmp_path / "out"
    run = cli(
        "grade",
        "--property-points",
        "0",
        "--assignment",
        BOOK,
        *sorted((BOOK / "submissions").iterdir()),
        "--out",
        out,
        "--jobs",
        "2",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    scores = {last_part(line.split()[0]): line.split()[1:4] for line in run.stdout.splitlines() if " / " in line}
    assert scores == {
        "mask_after_softmax": ["8", "/", "12"],
        "notebook": ["12", "/", "12"],
        "renamed_projection": ["8", "/", "12"],
        "reordered": ["12", "/", "12"],
        "v1_unscaled": ["10", "/", "12"],
    }
    results = {n: json.loads((folder(out, n) / "results.json").read_text()) for n in scores}
    lost = {
        n: sorted({t["name"].split("/")[1] for t in r["tests"] if t["score"] < t["max_score"]})
        for n, r in results.items()
    }
    assert lost == {
        "mask_after_softmax": ["causal_attention", "wrapper"],
        "notebook": [],
        "renamed_projection": ["multi_head"],
        "reordered": [],
        "v1_unscaled": ["self_attention_v1"],
    }
    renamed = next(t for t in results["renamed_projection"]["tests"] if t["name"] == "chapter3/multi_head/context")
    assert "your MultiHeadAttention has no `out_proj.weight`, `out_proj.bias`" in renamed["output"]
    notebook = results["notebook"]["output"]
    assert (
        "notebook: code cell 1, line 2: ModuleNotFoundError: No module named 'matplotlib_is_not_installed_here'"
        in notebook
        and "skipped the IPython magic/shell line `!pip install nothing`" in notebook
    )
    hidden = next(t for t in results["reordered"]["tests"] if t["name"] == "chapter3/multi_head_hidden/shape")
    assert hidden["visibility"] == "hidden"
    wrapper = next(t for t in results["mask_after_softmax"]["tests"] if t["name"] == "chapter3/wrapper/context")
    assert (
        "Likely cause: `CausalAttention`, which the reference `MultiHeadAttentionWrapper` calls, fails its own "
        "checks" in wrapper["output"]
    )


@pytest.mark.grading
def test_grading_with_nothing_to_grade_is_an_error_never_zero_of_zero(tmp_path):
    folder = tmp_path / "a"
    (folder / "cases").mkdir(parents=True)
    (folder / "reference.py").write_text("def f(x):\n    return x\n")
    (folder / "cases" / "c.yaml").write_text(
        "document: {title: T}\ncases:\n  - id: c\n    inputs: {x: [1.0]}\n"
        "    checks:\n      - {id: k, call: g(x), expect: {out: [1.0]}}\n"
    )
    submission = tmp_path / "s.py"
    submission.write_text("def f(x):\n    return x\n")
    run = cli("grade", "--property-points", "0", submission, "--assignment", folder, "--out", tmp_path / "out")
    assert run.returncode == 2 and "no graded check loads (1 case error; the first:" in run.stderr, run.stderr
    assert "unknown function 'g'" in run.stderr and " / " not in run.stdout
    (folder / "reference.py").write_text("import torch\n")
    run = cli("grade", "--property-points", "0", submission, "--assignment", folder, "--out", tmp_path / "out")
    assert run.returncode == 2 and "defines no public function or nn.Module class" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_the_template_stubs_each_class_and_function_and_grades_as_not_implemented(tmp_path):
    run = cli("template", "--assignment", BOOK)
    assert run.returncode == 0
    stub = tmp_path / "stub.py"
    stub.write_text(run.stdout)
    namespace = {}
    exec(compile(run.stdout, str(stub), "exec"), namespace)  # noqa: S102 (our own template)
    assert {
        "SelfAttention_v1",
        "SelfAttention_v2",
        "CausalAttention",
        "MultiHeadAttentionWrapper",
        "MultiHeadAttention",
    } <= set(namespace)
    assert "def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):" in run.stdout
    assert "masked_fill" not in run.stdout  # signatures and docstrings only, never the solution
    chosen = assignments.load(BOOK)
    module = type("M", (), namespace)
    results = [
        runner.run(i, functions=assignments.callables(module, chosen.graded))
        for i in runner.collect(chosen.cases, chosen)
    ]
    assert {r.status.value for r in results} == {"not implemented"}
    notebook = json.loads(cli("template", "--assignment", BOOK, "--format", "ipynb").stdout)
    assert "".join(notebook["cells"][1]["source"]).startswith("class SelfAttention_v1(nn.Module):")


@pytest.mark.grading
def test_pytest_checks_a_students_file_against_the_visible_cases(tmp_path):
    passed = pytest_run("--assignment", BOOK, "--impl", BOOK / "submissions" / "reordered.py", cwd=tmp_path)
    assert passed.returncode == 0 and "6 passed" in passed.stdout, passed.stdout[-2000:]
    failed = pytest_run("--assignment", BOOK, "--impl", BOOK / "submissions" / "v1_unscaled.py", cwd=tmp_path)
    assert failed.returncode == 1 and "1 failed, 5 passed" in failed.stdout, failed.stdout[-2000:]
    notebook = pytest_run("--assignment", BOOK, "--impl", BOOK / "submissions" / "notebook.ipynb", cwd=tmp_path)
    assert notebook.returncode == 0 and "6 passed" in notebook.stdout, notebook.stdout[-2000:]


@pytest.mark.grading
def test_a_students_kit_holds_no_solution_and_checks_a_file_as_the_teachers_folder_does(tmp_path):
    kit = tmp_path / "kit"
    made = cli("student-kit", "--assignment", BOOK, kit)
    assert made.returncode == 0, made.stderr
    assert "5 visible checks, 1 left out" in made.stdout
    files = {p.relative_to(kit).as_posix() for p in kit.rglob("*") if p.is_file()}
    assert files == {"kit.yaml", "cases/chapter3.yaml", "template.py", "template.ipynb", "README.md"}
    text = "\n".join((kit / f).read_text() for f in files)
    assert "masked_fill" not in text and "softmax" not in text  # no line of the solution
    assert "multi_head_hidden" not in text  # no hidden case
    assert "W_query.weight:" in (kit / "cases" / "chapter3.yaml").read_text()  # initial parameters recorded
    passed = pytest_run("--assignment", kit, "--impl", BOOK / "submissions" / "reordered.py", cwd=tmp_path)
    assert passed.returncode == 0 and "5 passed" in passed.stdout, passed.stdout[-2000:]
    failed = pytest_run("--assignment", kit, "--impl", BOOK / "submissions" / "mask_after_softmax.py", cwd=tmp_path)
    assert failed.returncode == 1 and "2 failed, 3 passed" in failed.stdout, failed.stdout[-2000:]
    head_kit = tmp_path / "head_kit"
    assert cli("student-kit", "--assignment", HEAD, head_kit).returncode == 0
    assert "oracle:" not in (head_kit / "cases" / "head.yaml").read_text()  # an oracle on `self`: recorded values
    passed = pytest_run("--assignment", head_kit, "--impl", HEAD / "submissions" / "correct.py", cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout[-2000:]
    failed = pytest_run("--assignment", head_kit, "--impl", HEAD / "submissions" / "unscaled.py", cwd=tmp_path)
    assert failed.returncode == 1 and "2 failed, 1 passed" in failed.stdout, failed.stdout[-2000:]


def test_the_gradescope_bundle_carries_the_assignment(tmp_path):
    run = cli("gradescope-bundle", "--assignment", BOOK, tmp_path / "a.zip")
    assert run.returncode == 0, run.stderr
    with zipfile.ZipFile(tmp_path / "a.zip") as z:
        names = set(z.namelist())
        setup = z.read("setup.sh").decode()
    assert {"assignment/reference.py", "assignment/cases/chapter3.yaml"} <= names
    assert not any(n.startswith("assignment/submissions") for n in names)
    assert "cp -r ./assignment /opt/attention-core/assignment" in setup


@pytest.mark.grading
def test_the_head_example_grades_its_correct_and_its_wrong_submission(tmp_path):
    run = cli(
        "grade",
        "--property-points",
        "0",
        "--assignment",
        HEAD,
        HEAD / "submissions" / "correct.py",
        HEAD / "submissions" / "unscaled.py",
        "--out",
        tmp_path / "out",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    scores = {last_part(line.split()[0]): line.split()[1] for line in run.stdout.splitlines() if " / " in line}
    assert scores == {"correct": "6", "unscaled": "0"}  # its shape check is earned only with right values


@pytest.mark.grading
def test_a_module_in_train_mode_draws_its_dropout_as_the_notebook_did(tmp_path):
    folder = tmp_path / "train"
    (folder / "cases").mkdir(parents=True)
    (folder / "reference.py").write_text((HEAD / "reference.py").read_text())
    torch.manual_seed(3)  # the notebook: seed, its input, the module (train mode, as made), the call
    x = torch.randn(1, 5, 8)
    head = assignments.import_reference(folder / "reference.py").Head(8, 4, 0.5)
    expected = head(x, x, x).detach().double().tolist()
    (folder / "cases" / "dropout.yaml").write_text(
        "document: {title: T}\ncases:\n  - id: c\n    seed: 3\n    inputs: {x: {randn: [1, 5, 8]}}\n"
        "    checks:\n      - id: k\n        mode: train\n        call: Head(8, 4, 0.5)(x, x, x)\n"
        f"        expect: {{out: {{values: {json.dumps(expected)}, rtol: 1.0e-6, atol: 1.0e-6}}}}\n"
    )
    assert cli("--assignment", folder).returncode == 0
    run = cli(
        "grade",
        "--property-points",
        "0",
        "--assignment",
        folder,
        HEAD / "submissions" / "correct.py",
        "--out",
        tmp_path / "out",
    )
    scores = {last_part(line.split()[0]): line.split()[1:4] for line in run.stdout.splitlines() if " / " in line}
    assert run.returncode == 0 and scores == {"correct": ["2", "/", "2"]}, run.stdout + run.stderr[-2000:]


def test_the_bundle_of_the_built_in_spec_with_other_cases_carries_those_cases(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "mine.yaml").write_text(
        "document: {title: T}\ncases:\n  - id: c\n    inputs: {x: [1.0, 2.0]}\n"
        "    checks:\n      - {id: k, call: softmax(x), expect: {out: [0.2689, 0.7311]}}\n"
    )
    run = cli("gradescope-bundle", "--cases", cases, tmp_path / "a.zip")
    assert run.returncode == 0, run.stderr
    with zipfile.ZipFile(tmp_path / "a.zip") as z:
        names = set(z.namelist())
    assert "assignment/cases/mine.yaml" in names and "assignment/reference.py" not in names
    from attention_core.grading.platforms.autograder import _bundled  # noqa: PLC0415

    assert _bundled(tmp_path) == {"cases": cases} and _bundled(None) == {} and _bundled(BOOK) == {"assignment": BOOK}


MASKED = '''import torch
from torch import nn


class Masked(nn.Module):
    """Causal attention with one projection and a mask buffer (True: may attend)."""

    def __init__(self, d, block):
        super().__init__()
        self.proj = nn.Linear(d, d, bias=False)
        self.register_buffer("mask", torch.tril(torch.ones(block, block, dtype=torch.bool)))

    def forward(self, x):
        T = x.shape[-2]
        q = self.proj(x)
        scores = (q @ q.transpose(-2, -1)).masked_fill(~self.mask[:T, :T], float("-inf"))
        return torch.softmax(scores, dim=-1) @ x
'''


def _masked_assignment(folder, oracle="x"):
    (folder / "cases").mkdir(parents=True)
    (folder / "reference.py").write_text(MASKED, encoding="utf-8")
    (folder / "cases" / "m.yaml").write_text(
        "document: {title: T}\ncases:\n  - id: c\n    seed: 0\n    inputs: {x: {randn: [2, 4, 3]}}\n"
        '    checks:\n      - {id: k, call: "Masked(3, 6)(x)", expect: {out: "torch.Size([2, 4, 3])"}}\n'
        "      - id: v\n        call: Masked(3, 6)(x)\n        expect:\n          out:\n            oracle: >-\n"
        "              softmax((x @ self.proj.weight.T) @ (x @ self.proj.weight.T).transpose(-2, -1)\n"
        f"              + triu(full((4, 4), -inf), 1), dim=-1) @ {oracle}\n",
        encoding="utf-8",
    )
    return folder


@pytest.mark.grading
def test_buffers_are_the_students_own_so_a_wrong_mask_shows_and_another_convention_passes(tmp_path):
    folder = _masked_assignment(tmp_path / "a")
    assert cli("--assignment", folder).returncode == 0
    blocked = MASKED.replace(
        "torch.tril(torch.ones(block, block, dtype=torch.bool))",
        "torch.triu(torch.ones(block, block, dtype=torch.bool), diagonal=1)",
    ).replace("masked_fill(~self.mask[:T, :T]", "masked_fill(self.mask[:T, :T]")
    wrong = MASKED.replace(
        "torch.tril(torch.ones(block, block, dtype=torch.bool))", "torch.ones(block, block, dtype=torch.bool)"
    )
    (tmp_path / "blocked.py").write_text(blocked)
    (tmp_path / "wrong.py").write_text(wrong)
    run = cli(
        "grade",
        "--property-points",
        "0",
        "--assignment",
        folder,
        tmp_path / "blocked.py",
        tmp_path / "wrong.py",
        "--out",
        tmp_path / "o",
    )
    scores = {last_part(line.split()[0]): line.split()[1] for line in run.stdout.splitlines() if " / " in line}
    # (the wrong mask's shape check is earned only with right values: charged with the value check, once)
    assert scores == {"blocked": "4", "wrong": "0"}, run.stdout + run.stderr[-1500:]


@pytest.mark.grading
def test_a_check_the_case_cannot_compute_is_worth_nothing_to_anyone_and_charged_to_no_one(tmp_path):
    course = _masked_assignment(tmp_path / "a", oracle="self.nothing.weight")
    (tmp_path / "s.py").write_text(MASKED)
    run = cli("grade", "--property-points", "0", "--assignment", course, tmp_path / "s.py", "--out", tmp_path / "o")
    assert run.returncode == 0 and _scores(run) == {"s": "2"}, run.stdout + run.stderr[-1500:]
    results = json.loads((folder(tmp_path / "o", "s") / "results.json").read_text())
    broken = next(t for t in results["tests"] if t["name"] == "m/c/v")
    assert (broken["score"], broken["max_score"]) == (0, 0) and "not graded" in broken["output"]
    assert "m.yaml" not in broken["output"]


def test_a_setting_that_names_no_check_is_an_error_at_its_line(tmp_path):
    folder = _masked_assignment(tmp_path / "a")
    (folder / "assignment.yaml").write_text("points: 2\nchecks:\n  m/c/kk: {points: 5}\n  m/c: {visibility: hidden}\n")
    lint = cli("lint", "--assignment", folder)
    assert (
        lint.returncode == 1
        and f"{folder / 'assignment.yaml'}:3:3: error: checks: 'm/c/kk' names no file, case "
        "or check of the assignment's cases; did you mean 'm/c/k'?"
        in lint.stdout
    ), lint.stdout
    (tmp_path / "s.py").write_text(MASKED)
    grade = cli("grade", "--property-points", "0", "--assignment", folder, tmp_path / "s.py", "--out", tmp_path / "o")
    assert grade.returncode == 2 and "'m/c/kk' names no file, case or check" in grade.stderr
    assert cli("--assignment", folder).returncode == 1


def test_an_oracle_reads_a_module_lists_members_by_position():
    chosen = assignments.load(BOOK)
    item = next(i for i in runner.collect(chosen.cases, chosen) if i.id == "chapter3/wrapper/context")
    _, args, _ = runner.Preparation().arguments(item, "cpu")
    record = instances.state_record(args[0][instances.INSTANCE]["state"])
    assert torch.equal(record.heads[1].W_key.weight, args[0][instances.INSTANCE]["state"]["heads.1.W_key.weight"])


@pytest.mark.grading
def test_a_folder_of_several_files_is_graded_by_the_one_that_defines_the_graded_names(tmp_path):
    submission = tmp_path / "alice"
    submission.mkdir()
    (submission / "helpers.py").write_text("def scale(x):\n    return x\n")
    (submission / "solution.py").write_text((HEAD / "submissions" / "correct.py").read_text())
    run = cli("grade", "--property-points", "0", "--assignment", HEAD, submission, "--out", tmp_path / "o")
    assert _scores(run) == {"alice": "6"}, run.stdout + run.stderr[-1500:]


def test_a_kit_of_cases_that_do_not_load_is_refused_and_leaves_no_folder(tmp_path):
    folder = _masked_assignment(tmp_path / "a")
    (folder / "cases" / "m.yaml").write_text((folder / "cases" / "m.yaml").read_text().replace("    seed: 0\n", ""))
    run = cli("student-kit", "--assignment", folder, tmp_path / "kit")
    assert run.returncode == 2 and "has no 'seed'" in run.stderr and "Traceback" not in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


@pytest.mark.grading
def test_a_script_that_ends_in_exit_is_graded_and_one_that_does_not_import_is_told_so(tmp_path):
    correct = (HEAD / "submissions" / "correct.py").read_text()
    (tmp_path / "exits.py").write_text(correct + "\nexit()\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('not done yet')\n" + correct)
    run = cli(
        "grade",
        "--property-points",
        "0",
        "--assignment",
        HEAD,
        tmp_path / "exits.py",
        tmp_path / "raises.py",
        "--out",
        tmp_path / "o",
    )
    assert _scores(run) == {"exits": "6", "raises": "0"}, run.stdout + run.stderr[-1500:]
    results = json.loads((folder(tmp_path / "o", "raises") / "results.json").read_text())
    assert results["output"].startswith("0 of 6 points.") and "RuntimeError: not done yet" in results["output"]
    for test in results["tests"]:
        assert "could not be read" not in test["output"] and "the values are wrong" not in test["output"]
        assert "Its gradients were not checked: the call returned no values" in test["output"]


def test_the_kit_and_the_bundle_refuse_a_setting_that_names_no_check(tmp_path):
    folder = _masked_assignment(tmp_path / "a")
    (folder / "assignment.yaml").write_text("checks:\n  m/c/kk: {visibility: hidden}\n")
    for argv in (
        ("student-kit", "--assignment", folder, tmp_path / "kit"),
        ("gradescope-bundle", "--assignment", folder, tmp_path / "a.zip"),
    ):
        run = cli(*argv)
        assert run.returncode == 2 and "'m/c/kk' names no file, case or check" in run.stderr, argv
    assert not (tmp_path / "kit").exists() and not (tmp_path / "a.zip").exists()


@pytest.mark.grading
def test_a_frozen_parameter_or_a_reference_without_float64_never_ends_the_batch(tmp_path):
    folder = tmp_path / "a"
    (folder / "cases").mkdir(parents=True)
    (folder / "reference.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass Scaled(nn.Module):\n    def __init__(self, d):\n"
        "        super().__init__()\n        self.w = nn.Parameter(torch.ones(d))\n"
        "        self.table = nn.Parameter(torch.arange(d) * 1.0, requires_grad=False)\n\n"
        "    def forward(self, x):\n        return x * self.w + self.table\n\n\n"
        "def mix(x):\n    return x @ (torch.eye(x.shape[-1]) * 2)  # float32 whatever x is\n"
    )
    (folder / "cases" / "c.yaml").write_text(
        "document: {title: T}\ncases:\n  - id: c\n    seed: 0\n    inputs: {x: {randn: [2, 3]}}\n    checks:\n"
        '      - {id: s, call: "Scaled(3)(x)", expect: {out: "torch.Size([2, 3])"}}\n'
        '      - {id: m, call: mix(x), expect: {out: "torch.Size([2, 3])"}}\n'
    )
    (tmp_path / "s.py").write_text((folder / "reference.py").read_text())
    run = cli("grade", "--property-points", "0", "--assignment", folder, tmp_path / "s.py", "--out", tmp_path / "o")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert _scores(run)["s"] == "3", run.stdout  # Scaled: values and gradients (not the frozen table); mix: values
