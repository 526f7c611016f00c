"""Grading as a teacher runs it: one batch of submission files through ``python -m attention_core grade``.

The batch holds the untouched template, the reference core, correct implementations in other
styles, every shipped mutant, and submissions that hang, exit, raise SystemExit or
KeyboardInterrupt, fail at import, or return a rigged tensor subclass. Each must be graded for
what it is while the others keep their marks.
"""

import csv
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attention_core import reference, spec
from attention_core.cli import main
from attention_core.grading.judging.grader import Grader
from attention_core.grading.naming import mutants
from attention_core.grading.platforms.template import template
from attention_core.harness.checking import runner
from tests.outputs import HEAD, folder, grade_head, last_part, pytest_here, report

pytestmark = pytest.mark.grading

TESTS = Path(__file__).resolve().parent
STYLES = ("LOOPS", "FLOAT64", "EINSUM", "TORCH")
REFERENCE = inspect.getsource(reference)


def _style(name):
    """A standalone module defining the functions of one style of tests/implementations.py."""
    source = (TESTS / "implementations.py").read_text(encoding="utf-8")
    source = source.replace(
        "from attention_core import reference\n",
        f"import types as _types\nreference = _types.ModuleType('reference')\n"
        f"exec({REFERENCE!r}, reference.__dict__)\n",
    )
    return source + f"\nglobals().update({name})\n"


HOSTILE = {
    "hangs": REFERENCE + "\n\ndef softmax(x, dim=-1):\n    while True:\n        pass\n",
    "exits": REFERENCE + "\n\nimport os\n\ndef layer_norm(x, eps=1e-5):\n    os._exit(0)\n",
    "system_exit": REFERENCE + "\n\nimport sys\n\ndef causal_mask(T, device=None):\n    sys.exit(3)\n",
    "interrupts": REFERENCE + "\n\ndef merge_heads(x):\n    raise KeyboardInterrupt\n",
    "import_error": "import torch\nraise RuntimeError('broken at import')\n",
    "rigged": REFERENCE
    + """

class _Rigged(torch.Tensor):
    def __eq__(self, other):
        return True

    def __reduce_ex__(self, protocol):
        return (open, ("/tmp/attention_core_rigged_marker", "w"))


_attention = attention


def attention(q, k, v, mask=None, scale=None):
    output, weights = _attention(q, k, v, mask, scale)
    return torch.zeros_like(output).as_subclass(_Rigged), weights
""",
}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Every submission graded in one run; returns (results by name, gradebook rows, exit code)."""
    subs = tmp_path_factory.mktemp("submissions")
    files = {"template": template(), "reference": REFERENCE, **HOSTILE}
    files.update({style.lower(): _style(style) for style in STYLES})
    files.update(numpy_scale="import numpy as np\n" + REFERENCE.replace("math.sqrt(", "np.sqrt("))
    files.update({f"mutant_{m.name}": mutants.submission_source(m) for m in mutants.MUTANTS})
    paths = []
    for name, text in files.items():
        (subs / f"{name}.py").write_text(text, encoding="utf-8")
        paths.append(str(subs / f"{name}.py"))
    out = tmp_path_factory.mktemp("out")
    # Two CPU seconds a call (the default is 5): twice what the loop style's slowest call takes, and what a
    # hanging function is waited for.
    code = main(["grade", *paths, "--out", str(out), "--jobs", "2", "--timeout", "2"])
    results = {name: json.loads((folder(out, name) / "results.json").read_text(encoding="utf-8")) for name in files}
    with (out / "gradebook.csv").open(encoding="utf-8") as handle:
        possible, *rows = list(csv.DictReader(handle))
    assert possible["submission"] == "Points Possible"
    return results, rows, code


def _failed(result):
    return [t for t in result["tests"] if t["status"] == "failed"]


def test_grading_completes_with_exit_0_and_gradescope_fields(batch):
    results, rows, code = batch
    assert code == 0
    for name, result in results.items():
        assert {"score", "execution_time", "output", "tests"} <= set(result), name
        for test in result["tests"]:
            assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(test)
            assert test["status"] in ("passed", "failed")
            assert test["extra_data"]["status"] in (
                "passed",
                "failed",
                "case error",
                "not implemented",
                "implementation error",
                "timeout",
                "harness error",
            )
    assert list(rows[0])[:3] == ["submission", "score", "max_score"]
    assert {last_part(row["submission"]) for row in rows} == set(results)


def test_the_reference_and_every_correct_style_get_full_marks(batch):
    results, _, _ = batch
    for name in ("reference", "numpy_scale", *(s.lower() for s in STYLES)):
        result = results[name]
        assert result["score"] == result["max_score"] > 0, (name, [t["name"] for t in _failed(result)][:5])


def test_the_untouched_template_scores_0_and_every_check_is_not_implemented(batch):
    result = batch[0]["template"]
    assert result["score"] == 0
    assert {t["extra_data"]["status"] for t in result["tests"]} == {"not implemented"}


def test_each_mutant_loses_points_and_is_named_in_the_feedback(batch):
    results, _, _ = batch
    for mutant in mutants.MUTANTS:
        result = results[f"mutant_{mutant.name}"]
        failed = _failed(result)
        assert result["score"] < result["max_score"], mutant.name
        worded = [mistake for mistake, _ in mutant.parts.values()] or [mutant.mistake]  # each function's own part
        assert any(w in t["output"] for t in failed for w in worded), (mutant.name, failed[0]["output"][:400])
        if mutant.breaks != "values":  # right values: only the backward checks are lost, for its reason alone
            assert all(t["name"].endswith("/backward") for t in failed), mutant.name
            others = [m.mistake for m in mutants.MUTANTS if m.breaks != "values" and m is not mutant]
            assert not any(other in t["output"] for t in failed for other in others), mutant.name


def test_a_backward_check_lost_to_a_values_mistake_named_elsewhere_is_charged_to_it(batch):
    """Without the scale, one case's values come out right (a row of equal scores) and only its gradients are wrong:
    the mistake named on attention's other checks is named there too, rather than a bare gradient mismatch."""
    results, _, _ = batch
    (head,) = [t for t in results["mutant_no_scale"]["tests"] if t["name"].endswith("head_stand_in/head/backward")]
    assert head["status"] == "failed"
    assert "Likely cause: the mistake named on `attention`'s other checks" in head["output"]
    assert next(m.mistake for m in mutants.MUTANTS if m.name == "no_scale") in head["output"]
    for name in ("reference", "template"):  # nothing of the kind where no values mistake is named
        assert not any("Likely cause: the mistake named on" in t["output"] for t in results[name]["tests"])


def test_a_mistake_that_keeps_the_values_right_is_named_only_where_the_values_are_right(batch):
    # Wrong values lose gradients for reasons of their own: the rigged submission's zeros, a
    # mutant's wrong arithmetic. Their backward checks must not say "the values are right".
    results, _, _ = batch
    for name, result in results.items():
        passed = {t["name"] for t in result["tests"] if t["status"] == "passed"}
        for test in _failed(result):
            if test["name"].endswith("/backward") and test["name"].removesuffix("/backward") not in passed:
                assert "the values are right" not in test["extra_data"].get("diagnosis", ""), (name, test["name"])


def test_a_submission_that_does_not_import_gets_no_mistake_named(batch):
    results, _, _ = batch
    for name in ("import_error", "template"):
        assert not [t["name"] for t in results[name]["tests"] if "diagnosis" in t["extra_data"]], name


def test_a_check_of_shapes_holds_its_backward_to_the_gradients_shapes(batch):
    # A wrong value is charged by the checks that read values, not again by a check of shapes.
    results, _, _ = batch
    shapes_only = {
        item.id
        for item in runner.collect(runner.default_cases_folder())
        if item.error is None and item.check.kind == "call" and all(e.kind == "shape" for e in item.check.expectations)
    }
    assert shapes_only
    for mutant in (m for m in mutants.MUTANTS if m.breaks == "values"):
        tests = {t["name"]: t for t in results[f"mutant_{mutant.name}"]["tests"]}
        for check in shapes_only:
            if tests[check]["status"] == "passed" and f"{check}/backward" in tests:
                assert tests[f"{check}/backward"]["status"] == "passed", (mutant.name, check)


def test_a_hanging_function_costs_one_time_limit_and_the_rest_is_graded(batch):
    result = batch[0]["hangs"]
    failed = _failed(result)
    assert {t["extra_data"]["status"] for t in failed} == {"timeout"}
    # softmax hangs, and so do attention and multi_head_attention, whose reference code calls it:
    # each is waited for once, then not called again.
    waited = [t for t in failed if "not called again" not in t["output"]]
    assert 1 <= len(waited) <= 3 < len(failed), [(t["name"], t["output"][-300:]) for t in waited]
    assert result["execution_time"] < 30
    assert result["score"] > 0  # layer_norm, causal_average, the masks and heads keep their points


@pytest.mark.parametrize(
    ("name", "function", "reason"),
    [
        ("exits", "layer_norm", r"crashed: .*exit code 0"),
        ("system_exit", "causal_mask", r"crashed: .*SystemExit"),
        ("interrupts", "merge_heads", r"crashed: .*KeyboardInterrupt"),
    ],
)
def test_a_process_that_dies_fails_that_functions_checks_with_the_reason(batch, name, function, reason):
    result = batch[0][name]
    failed = _failed(result)
    assert failed and all(re.search(reason, t["output"]) for t in failed if t["extra_data"]["status"] != "failed")
    assert {t["extra_data"]["status"] for t in failed} == {"implementation error"}
    assert result["score"] > 0  # the other functions keep their points


def test_an_import_error_fails_every_check_with_the_reason(batch):
    result = batch[0]["import_error"]
    assert result["score"] == 0 and "broken at import" in result["output"]
    assert {t["extra_data"]["status"] for t in result["tests"]} == {"implementation error"}
    assert not [t["name"] for t in result["tests"] if "wrong values" in t["output"]]  # it gave none to judge


def test_each_check_of_a_file_that_does_not_parse_says_its_syntax_error(tmp_path):
    (tmp_path / "broken.py").write_text(REFERENCE.replace("def layer_norm(", "def layer_norm((", 1))
    with Grader() as grader:
        graded = grader.grade(tmp_path / "broken.py")
    said = {g.result.message for g in graded.grades}
    assert len(said) == 1 and "line " in next(iter(said)) and "SyntaxError: " in next(iter(said)), said


@pytest.mark.grading
def test_a_package_missing_where_submissions_are_graded_costs_only_what_uses_it(tmp_path):
    """A file that imports a package only to plot or show (as a notebook's failing cell costs nothing else): the
    import runs again with a stand-in for it, told to the student; a graded name that computes with it fails as
    itself, and a module of the submission's own package that is not there is still an import error."""
    correct = (HEAD / "submissions" / "correct.py").read_text(encoding="utf-8")
    plots = "import plotting_not_installed.pyplot as plt\nfrom display_not_installed import show\n"
    shown = "\nfig, ax = plt.subplots()\nax.plot(ax.x * 2)\nshow(f'{plt.gca():.3f}')\n"
    (tmp_path / "plots.py").write_text(plots + correct + shown, encoding="utf-8")
    (tmp_path / "three.py").write_text(plots + correct + "\na, b, c = plt.subplots()\n", encoding="utf-8")
    uses = correct.replace("return self.dropout(weights) @ v", "return missing_helper.mix(weights, v)")
    (tmp_path / "uses.py").write_text("import missing_helper\n" + uses, encoding="utf-8")
    (tmp_path / "package").mkdir()
    (tmp_path / "package" / "__init__.py").write_text("from .head import Head\n", encoding="utf-8")
    subs = [tmp_path / name for name in ("plots.py", "three.py", "uses.py", "package")]
    run = grade_head(*subs, "--out", tmp_path / "out")
    assert run.returncode == 0, run.stdout[-800:]
    plots, three, uses, package = (
        json.loads((folder(tmp_path / "out", name) / "results.json").read_text(encoding="utf-8"))
        for name in ("plots", "three", "uses", "package")
    )
    assert plots["score"] == plots["max_score"] > 0, plots["output"][:800]
    for name in ("plotting_not_installed", "display_not_installed"):
        assert f"`{name}` cannot be imported here: it is not installed where submissions are graded" in plots["output"]
        told = f"The file was imported again with a stand-in for `{name}` that does nothing: what uses it computes"
        assert told in plots["output"]  # whole: each line shown is cut at 200 characters
    # Where the stand-in does not get the file through, the import error says what was missing first
    said = "No module named `plotting_not_installed`, `display_not_installed` here; imported again with a stand-in for each"
    assert three["score"] == 0 and said in three["output"], three["output"][:600]
    assert uses["score"] == 0 and "expected a tensor, got NotInstalled" in json.dumps(uses["tests"])
    assert package["score"] == 0 and "No module named 'package.head'" in package["output"], package["output"][:600]


@pytest.mark.grading
def test_a_graded_class_given_another_name_is_told_by_the_name_it_is_graded_by(tmp_path):
    """``AttentionHead`` with Head's parameters, ``head`` for ``Head``: the student is told which name the assignment
    grades it by; a file with no such definition, or with two that could be it, is told nothing of the kind."""
    correct = (HEAD / "submissions" / "correct.py").read_text(encoding="utf-8")
    other = (
        "class Other(nn.Module):\n    def __init__(self, embed_dim, head_size, dropout):\n        super().__init__()\n"
    )
    other += "\n    def forward(self, query, key, value):\n        return query\n"
    files = {
        "renamed": correct.replace("class Head(", "class AttentionHead("),
        "lowercase": correct.replace("class Head(", "class head("),
        "two_alike": correct.replace("class Head(", "class AttentionHead(") + "\n\n" + other,
        "none": "import torch\n",
    }
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    run = grade_head(*(tmp_path / f"{name}.py" for name in files), "--out", tmp_path / "out")
    assert run.returncode == 0, run.stdout[-800:]
    said = {
        name: json.loads((folder(tmp_path / "out", name) / "results.json").read_text(encoding="utf-8"))["output"]
        for name in files
    }
    assert (
        "`Head` is not defined. Your file defines `AttentionHead`, a class with the same parameters (embed_dim, "
        "head_size, dropout) and a forward of (query, key, value): if it is your `Head`, give it that name"
    ) in said["renamed"]
    assert "Your file defines `head`, the same name written another way" in said["lowercase"]
    assert "is not defined. Your file defines" not in said["two_alike"] + said["none"]


def test_one_parameter_alone_tells_no_renamed_function():
    """``relu(x)`` is not taken for a missing ``gelu(x)``; ``Gelu`` is the same name written another way."""
    from attention_core.grading.naming.feedback import renamed  # noqa: PLC0415
    from attention_core.harness.reading.assignment import Graded  # noqa: PLC0415

    gelu = Graded("gelu", "function", (spec.Param("x"),), (spec.Param("x"),), ("out",))
    assert renamed([gelu], [("relu", "function", ("x",), ())]) == []
    (said,) = renamed([gelu], [("relu", "function", ("x",), ()), ("Gelu", "function", ("x",), ())])
    assert said.startswith("`gelu` is not defined. Your file defines `Gelu`, the same name written another way")


def test_a_rigged_tensor_subclass_is_compared_as_its_values(batch):
    result = batch[0]["rigged"]
    failed = {t["name"] for t in _failed(result)}
    assert any(name.endswith("/attention") for name in failed)
    assert not Path("/tmp/attention_core_rigged_marker").exists()


@pytest.mark.grading
def test_the_batch_command_grades_without_loading_torch_itself(tmp_path):
    """The command reads, schedules and summarises; its grader processes load torch and grade (a slot's memory)."""
    (tmp_path / "alice.py").write_text(REFERENCE, encoding="utf-8")
    script = "import sys\nfrom attention_core import cli\ncode = cli.main(sys.argv[1:])\nprint(code, 'torch' in sys.modules)\n"
    command = [sys.executable, "-c", script, "grade", str(tmp_path / "alice.py"), "--out", str(tmp_path / "out")]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.stdout.splitlines()[-1] == "0 False", run.stdout + run.stderr
    results = json.loads((folder(tmp_path / "out", "alice") / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == results["max_score"] > 0


def test_a_grader_process_gives_a_large_block_back_to_the_system_as_soon_as_it_is_freed():
    """A slot's memory is what its grader holds, not what it once computed: glibc would keep the next blocks of a
    size it freed once (a large check's 16 MB temporaries, run after run) in its heap, for the process's life.
    (Measured in a process of its own: a grader process's settings, not this one's.)"""
    script = (
        "import torch\n"
        "from attention_core.grading.outputs import graders\n"
        "graders._settled()\n"
        "def resident():\n"
        "    return int(open('/proc/self/statm').read().split()[1]) * 4096 >> 20\n"
        "before = resident()\n"
        "for _ in range(3):\n"
        "    block = torch.ones(4 << 20)\n"  # 16 MB, each page written
        "    del block\n"
        "print(resident() - before)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) < 8  # MB (16 where a freed block is kept)


@pytest.mark.grading
def test_a_reference_that_imports_a_package_installed_through_a_pth_hook_is_graded(tmp_path):
    """A teacher's reference may import their own package, installed in editable mode (setuptools installs a
    finder from a .pth file that the interpreter runs at its start): the grader processes, forked from a
    process that read no .pth file, read the command's site folders' as the command's interpreter did."""
    import shutil  # noqa: PLC0415

    site_packages = tmp_path / "lib" / "site-packages"
    site_packages.mkdir(parents=True)
    (site_packages / "coursehook.py").write_text(
        "import importlib.abc, importlib.util, sys\n"
        "class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        return importlib.util.spec_from_loader(name, self) if name == 'coursehelp' else None\n"
        "    def create_module(self, spec):\n"
        "        return None\n"
        "    def exec_module(self, module):\n"
        "        module.FOUND = True\n"
        "def install():\n"
        "    sys.meta_path.append(_Finder())\n"
    )
    (site_packages / "coursehook.pth").write_text("import coursehook; coursehook.install()\n")
    assignment = tmp_path / "assignment"
    shutil.copytree(HEAD, assignment, ignore=shutil.ignore_patterns("__pycache__", "submissions"))
    text = (assignment / "reference.py").read_text()
    (assignment / "reference.py").write_text(text.replace("import torch\n", "import coursehelp\nimport torch\n", 1))
    script = (
        "import site, sys\n"
        f"site.addsitedir({str(site_packages)!r})\n"
        "from attention_core import cli\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    submission = HEAD / "submissions" / "correct.py"
    command = [sys.executable, "-c", script, "grade", "--assignment", str(assignment), "--property-points", "0"]
    run = subprocess.run(
        [*command, str(submission), "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((folder(tmp_path / "out", "correct") / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == results["max_score"] > 0


@pytest.mark.grading
def test_a_batch_s_grader_processes_read_its_environment_as_it_is_when_it_starts(tmp_path, monkeypatch):
    """Grader processes are forked from a forking process that outlives a batch in a caller's session (started
    with the environment of its first batch, and keeping its own): a setting made since then still reaches the next
    batch's graders."""
    subs = [HEAD / "submissions" / "correct.py", HEAD / "submissions" / "unscaled.py"]
    before = grade_head(*subs, "--out", tmp_path / "before", "--jobs", "2")  # (two grader processes)
    monkeypatch.setenv("ATTENTION_CORE_CASE_SECONDS", "0.000001")  # no case's inputs can be made in that time
    after = grade_head(*subs, "--out", tmp_path / "after", "--jobs", "2")
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    unscaled = [
        json.loads((folder(tmp_path / out, "unscaled") / "results.json").read_text()) for out in ("before", "after")
    ]
    assert [t["extra_data"]["status"] for t in unscaled[0]["tests"]].count("case error") == 0
    assert [t["extra_data"]["status"] for t in unscaled[1]["tests"]].count("case error") == 2


def test_the_template_declares_every_graded_function():
    namespace = {}
    exec(template(), namespace)  # noqa: S102 (our own text)
    for function in spec.SPEC:

        def params(f):  # names, kinds and defaults (the reference's annotations are its own)
            return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]

        assert params(namespace[function.name]) == params(getattr(reference, function.name))
        assert namespace[function.name].__doc__
        for param in function.params:  # each parameter said something of, not a bare default
            assert re.search(rf"^\s+{param.name}: \S", namespace[function.name].__doc__, re.M), (
                function.name,
                param.name,
            )


def _pytest(*args, cwd):
    return pytest_here("-p", "no:cacheprovider", *args, cwd=cwd)


def test_pytest_impl_checks_a_submission_and_records_points(tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(REFERENCE + "\n\ndef layer_norm(x, eps=1e-5):\n    return x\n", encoding="utf-8")
    report = tmp_path / "junit.xml"
    done = _pytest("-m", "case", "-q", f"--impl={wrong}", f"--junitxml={report}", cwd=TESTS.parent)
    assert done.returncode == 1, done.stdout[-2000:]
    failed = re.findall(r"FAILED \S+\[(\S+)-cpu\]", done.stdout)
    assert failed and all("layer_norm" in check for check in failed), failed
    xml = report.read_text(encoding="utf-8")
    graded = [i for i in runner.collect(runner.default_cases_folder()) if i.error is None and i.check.kind == "call"]
    assert xml.count('name="max_points" value="1.0"') == len(graded)  # expr checks are worth 0
    assert 'name="points" value="0.0"' in xml and 'name="points" value="1.0"' in xml


def test_pytest_refuses_to_update_snapshots_from_a_submission(tmp_path):
    done = _pytest("-m", "case", f"--impl={tmp_path}", "--snapshot-update", cwd=TESTS.parent)
    assert done.returncode != 0 and "refusing to rewrite them" in done.stderr


def test_a_reply_already_judged_for_a_check_gets_the_same_result_and_a_different_reply_its_own(tmp_path):
    no_scale = next(m for m in mutants.MUTANTS if m.name == "no_scale")
    files = {"a": REFERENCE, "b": REFERENCE, "c": mutants.submission_source(no_scale)}
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    with Grader(property_points=0) as grader:  # (a property's calls are judged on their own: properties.py)
        a, b, c = (grader.grade(tmp_path / f"{name}.py") for name in files)
    assert a.score == b.score == a.max_score and c.score < c.max_score
    shared = [ga.check_id for ga, gb in zip(a.grades, b.grades) if gb.result is ga.result]
    assert len(shared) >= 0.9 * len(a.grades)  # the same bytes back: judged once
    wrong = [gc for gc in c.grades if not gc.result.passed]  # other bytes back: judged for what they are
    assert wrong and any(no_scale.mistake in gc.diagnosis for gc in wrong)


def test_grading_a_batch_one_ahead_gives_each_submission_what_grading_it_alone_gives(tmp_path):
    no_scale = next(m for m in mutants.MUTANTS if m.name == "no_scale")
    files = {
        "a.py": REFERENCE,
        "b.py": "raise ImportError('no')\n",
        "c.py": mutants.submission_source(no_scale),
        "two/x.py": REFERENCE,
        "two/y.py": REFERENCE,
    }  # a folder with no single entry: not opened
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    paths = [tmp_path / "a.py", tmp_path / "two", tmp_path / "b.py", tmp_path / "c.py"]
    with Grader() as grader:
        each = list(grader.grade_each(iter(paths)))
        alone = [grader.grade(p) for p in paths]
    assert [g.path for g in each] == paths
    assert [(g.score, g.note, [x.score for x in g.grades]) for g in each] == [
        (g.score, g.note, [x.score for x in g.grades]) for g in alone
    ]
    assert each[0].score == each[0].max_score and 0 < each[3].score < each[3].max_score
    assert "could not be opened" in each[1].note and "could not be imported" in each[2].note


def test_a_grading_server_that_dies_between_submissions_costs_none_of_them_a_point(tmp_path):
    paths = []
    for name in "abc":
        (tmp_path / f"{name}.py").write_text(REFERENCE, encoding="utf-8")
        paths.append(tmp_path / f"{name}.py")
    with Grader() as grader:
        graded = []
        for one in grader.grade_each(paths):
            graded.append(one)
            if len(graded) == 1:  # b is set up on this server by now: it dies with it
                os.kill(grader._worker.pid, signal.SIGKILL)
                while grader._worker.alive():  # (gone before the next submission is opened)
                    time.sleep(0.01)
    assert [(g.score, g.note) for g in graded] == [(graded[0].max_score, "")] * 3


def test_students_read_case_locations_from_the_case_folder_not_the_graders_paths(tmp_path, monkeypatch):
    course = tmp_path / "course-2026-private"
    (course / "cases").mkdir(parents=True)
    shipped = runner.default_cases_folder() / "001_self_attention.yaml"
    (course / "cases" / shipped.name).write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "student.py").write_text(template(), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # neither the project nor the course folder
    assert main(["grade", str(tmp_path / "student.py"), "--cases", str(course / "cases"), "--out", "out"]) == 0
    assert not (folder(elsewhere / "out", "student") / "report.html").exists()  # the student's folder: theirs
    for written in ("results.json", "report.html"):
        text = (
            folder(elsewhere / "out", "student") / written
            if written == "results.json"
            else report(elsewhere / "out", "student")
        ).read_text(encoding="utf-8")
        # The teacher's report names the case file from its folder; a student's feedback names none.
        assert (f"cases/{shipped.name}:" in text) == (written == "report.html"), written
        assert str(course) not in text and str(runner.default_cases_folder().parent) not in text, written


@pytest.mark.parametrize(
    ("case_file", "reason"),
    [
        ("_SHAPES_THAT_CANNOT_GO_THROUGH", "the reference core cannot run `attention` on these arguments either"),
        ("_RESULT_TOO_LARGE", "would return a result of"),
    ],
)
def test_a_check_no_implementation_could_pass_is_worth_nothing_and_charged_to_no_one(tmp_path, case_file, reason):
    from tests import test_runner  # noqa: PLC0415

    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "f.yaml").write_text(getattr(test_runner, case_file), encoding="utf-8")
    (tmp_path / "student.py").write_text(REFERENCE, encoding="utf-8")
    with Grader(cases) as grader:
        graded = grader.grade(tmp_path / "student.py")
    assert graded.grades and graded.max_score == 0.0  # not called: no backward check either
    for grade in graded.grades:
        assert (grade.result.status.value, grade.score, grade.max_score) == ("case error", 0.0, 0.0)
        assert reason in grade.result.message


def test_a_students_feedback_shows_the_call_and_names_no_case_file_line_or_variable(batch):
    results, _, _ = batch
    for name, result in results.items():
        for test in _failed(result):
            text = test["output"]
            assert ".yaml" not in text and not re.search(r"\(line \d+\)", text), (name, test["name"], text[:300])
    mutant = next(t for t in _failed(results["mutant_" + mutants.MUTANTS[0].name]) if "The call: " in t["output"])
    call = mutant["output"].split("The call: ", 1)[1].split("\n\n", 1)[0]
    function = mutant["name"].split("/")[-1].removesuffix("/backward")
    assert re.match(r"\w+\(", call) and ": float" in call, call  # the call, and each tensor's dtype and shape
    attention = next(
        t
        for t in _failed(results["mutant_" + next(m.name for m in mutants.MUTANTS if "attention" in m.functions)])
        if "`output`, what your `attention` returns (result 1 of 2)" in t["output"]
        or "`weights`, what your `attention` returns (result 2 of 2)" in t["output"]
    )
    assert "attention(q, k, v" in attention["output"], (function, attention["output"][:500])
