"""The plugin as a course's repository and this project meet it: loaded through its entry point.

Each test builds a scratch project with ``pytester`` (no conftest of ours) and runs pytest there in this
process (``tests/outputs.pytest_here``: pytest's own ``main()``, the plugin found by the installed package's
``pytest11`` entry point, as a new process finds it), but one: the run that says which modules ``-m case``
imports is a new interpreter's, where nothing but that run has imported anything.
"""

import io
import shutil
from pathlib import Path

import pytest
import torch

from attention_core import checks
from attention_core.harness.checking.devices import NO_CUDA, covered
from tests.outputs import pytest_here

pytestmark = pytest.mark.slow  # end to end: the quick loop leaves this module out

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
CUDA = torch.cuda.is_available()

# A linear input's weight used in a call: the case that once broke the low-precision golden.
REPRO = """\
document: {title: repro, origin: repro}
cases:
  - id: lin
    source: x
    seed: 0
    inputs:
      x: {rand: [4, 3]}
      lin: {linear: {in_features: 3, out_features: 2, bias: false}}
    checks:
      - id: attn
        call: attention(x @ lin.weight.T, x @ lin.weight.T, x @ lin.weight.T)
        expect:
          output: torch.Size([4, 2])
"""

DEMO = """\
document: {title: demo, origin: demo}
cases:
  - id: demo
    inputs:
      x: [[1.0, 2.0], [3.0, 4.5]]
    checks:
      - id: double
        expr: x * 2
        expect: {out: "tensor([[2., 4.], [6., 9.]])"}
"""

SNAPSHOT = """\
# attention-core snapshot (a regression guard of the reference core, not a golden value)
== out
dtype: float32
shape: [2, 2]
[0, 0] 2
[0, 1] 4
[1, 0] 6
[1, 1] 9
"""


@pytest.fixture
def course(pytester, monkeypatch):
    """A course's repository: its own case folder ``checks/`` and a test of its own; no conftest."""
    # Run as a plain pytest, not as an xdist worker (syrupy prints no summary in a worker).
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)
    (pytester.path / "checks").mkdir()
    (pytester.path / "checks" / "repro.yaml").write_text(REPRO, encoding="utf-8")
    pytester.makepyfile(test_course="def test_the_course_own_test():\n    pass\n")
    return pytester


@pytest.fixture
def project(course):
    """Laid out as this project: ``cases/`` at the root, the case test in ``tests/test_cases.py``
    with a snapshot beside it, the low-precision test, and a test module that notes its import."""
    tests = course.path / "tests"
    (tests / "__snapshots__" / "test_cases").mkdir(parents=True)
    (course.path / "cases").mkdir()
    (course.path / "cases" / "demo.yaml").write_text(DEMO, encoding="utf-8")
    shutil.copy(ROOT / "tests" / "test_cases.py", tests / "test_cases.py")
    shutil.copy(ROOT / "tests" / "test_low_precision.py", tests / "test_low_precision.py")
    (tests / "test_other.py").write_text(
        "from pathlib import Path\n\nPath(__file__).with_name('imported').touch()\n\n\ndef test_other():\n    pass\n",
        encoding="utf-8",
    )
    return course


def _run(course, *args, cwd=None):
    """pytest with ``args`` in the course's folder (or ``cwd``), run in this process: a RunResult."""
    done = pytest_here("-p", "no:cacheprovider", *args, cwd=cwd or course.path)
    return pytest.RunResult(done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), 0.0)


def _outcomes(passed_on_cpu, per_device):
    """The outcome counts when each device-parametrised item comes ``per_device`` times."""
    if CUDA:
        return {"passed": passed_on_cpu + per_device, "skipped": 0}
    return {"passed": passed_on_cpu, "skipped": per_device}


def test_a_course_runs_its_case_checks_with_either_spelling_from_any_folder(course):
    result = _run(course, "--cases", "checks", "-v", "-rs")
    result.assert_outcomes(**_outcomes(2, 1))
    result.stdout.fnmatch_lines(
        [
            "*test_course.py::test_the_course_own_test PASSED*",
            "*attention_core/harness/plugin/case_checks.py::test_case[[]repro/lin/attn-cpu] PASSED*",
        ]
    )
    if not CUDA:
        result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] *: {NO_CUDA}"])
    # No snapshot is compared, and syrupy has nothing to say (no "unused detection is disabled").
    assert "snapshot report summary" not in result.stdout.str()

    (course.path / "sub").mkdir()
    result = _run(course, "--cases=../checks", "-v", cwd=course.path / "sub")
    result.assert_outcomes(**_outcomes(1, 1))
    result.stdout.fnmatch_lines(["*test_case[[]repro/lin/attn-cpu] PASSED*"])


def test_another_project_where_the_package_is_installed_runs_its_own_tests_alone_unless_it_asks(tmp_path):
    (tmp_path / "test_mine.py").write_text("def test_mine():\n    pass\n", encoding="utf-8")
    run = pytest_here("-q", "-p", "no:cacheprovider", cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.splitlines()[-1].startswith("1 passed"), run.stdout[-500:]
    options = ("-q", "-p", "no:cacheprovider", "-m", "case", "--device", "cpu")
    listed = [line for line in pytest_here(*options, "--co", cwd=tmp_path).stdout.splitlines() if "::" in line]
    assert listed and all(i.startswith("attention_core/harness/plugin/case_checks.py::test_case[") for i in listed)
    assert {i.split("[", 1)[1].split("/", 1)[0] for i in listed} == {p.stem for p in (ROOT / "cases").glob("*.yaml")}
    asked = pytest_here(*options, cwd=tmp_path)  # (asked for: the package's case checks, each of its case files')
    assert asked.returncode == 0 and "test_mine" not in asked.stdout, asked.stdout[-500:]
    assert asked.stdout.splitlines()[-1].startswith(f"{len(listed)} passed"), asked.stdout[-300:]


def test_snapshot_update_is_refused_for_another_folder(course):
    result = _run(course, "--cases", "checks", "--snapshot-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--snapshot-update with --cases *checks: snapshots are written only for a "
            "project's own cases/*refusing to rewrite them"
        ]
    )


def test_case_marker_imports_only_the_case_module_and_a_missing_snapshot_says_how_to_write_it(project):
    (project.path / "tests" / "__snapshots__" / "test_cases").rmdir()
    result = project.runpytest_subprocess("--cases", "cases", "-m", "case", "-v")
    result.assert_outcomes(failed=2 if CUDA else 1, skipped=0 if CUDA else 1)
    result.stdout.fnmatch_lines(
        [
            "*tests/test_cases.py::test_case[[]demo/demo/double-cpu] FAILED*",
            "*Snapshot 'demo.demo.double' does not exist!",
            "*write it with `python -m pytest -m case --snapshot-update`*",
        ]
    )
    assert "case_checks.py::" not in result.stdout.str()  # collected once, from tests/test_cases.py
    assert not (project.path / "tests" / "imported").exists()


def test_another_folder_runs_the_whole_suite_and_leaves_the_projects_snapshots_alone(project, tmp_path_factory):
    (project.path / "tests" / "__snapshots__" / "test_cases" / "demo.demo.double.txt").write_text(
        SNAPSHOT, encoding="utf-8"
    )
    # Outside the project, and as two words: pytest takes its rootdir from that folder.
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    shutil.copytree(project.path / "checks", elsewhere / "checks")
    result = _run(project, "--cases", elsewhere / "checks", "-v")
    # The repro case: its check and its two low-precision items; then the low-precision bound
    # test and the other two modules' tests.
    result.assert_outcomes(**_outcomes(6, 3))
    result.stdout.fnmatch_lines(["*test_low_precision_matches_float64_golden[[]repro/lin/attn-float16-cpu] PASSED*"])
    output = result.stdout.str()
    assert "Unused snapshot detection is disabled" not in output
    assert "unused" not in output and "demo" not in output


def test_the_command_line_covers_the_same_devices_and_gives_the_same_skip_reason(tmp_path):
    (tmp_path / "repro.yaml").write_text(REPRO, encoding="utf-8")
    out = io.StringIO()
    assert checks.check_command(tmp_path, covered(), out=out) == 0
    skipped = [line for line in out.getvalue().splitlines() if line.startswith("skipped:")]
    assert skipped == ([] if CUDA else [f"skipped: {NO_CUDA}"])
