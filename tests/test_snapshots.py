"""The tensor snapshot extension: exact files, tolerant comparison, names shared across devices."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attention_core.harness.checking import tolerance
from attention_core.harness.plugin.snapshot import FULL_LIMIT, TensorSnapshotExtension, parse, summary_guarantee
from tests.outputs import pytest_here

pytestmark = pytest.mark.slow  # pytest runs pytest: the quick loop leaves this module out

ROOT = Path(__file__).resolve().parent.parent
EXT = TensorSnapshotExtension()


def _text(**tensors):
    return EXT.serialize(tensors)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_files_round_trip_exactly_in_every_float_dtype(dtype):
    g = torch.Generator().manual_seed(0)
    value = torch.randn(7, 5, generator=g, dtype=torch.float64) * 10 ** torch.randint(-6, 6, (7, 5), generator=g)
    value = torch.cat([value.reshape(-1), torch.tensor([0.0, -0.0, float("inf"), float("nan")])]).to(dtype)
    entry = parse(_text(x=value))["x"]
    assert entry["dtype"] == str(dtype).removeprefix("torch.") and entry["shape"] == f"[{value.numel()}]"
    back = torch.tensor([float(v) for v in entry["elements"].values()], dtype=torch.float64).to(dtype)
    assert torch.equal(back.isnan(), value.isnan())
    finite = ~value.isnan()
    assert torch.equal(back[finite], value[finite])
    assert torch.equal(back[finite].signbit(), value[finite].signbit())


def test_layout_is_one_value_per_line_with_its_index_in_row_major_order():
    lines = _text(w=torch.tensor([[0.1, 2.0], [3.0, -4.5]])).splitlines()
    assert lines[1:] == ["== w", "dtype: float32", "shape: [2, 2]", "[0, 0] 0.1", "[0, 1] 2", "[1, 0] 3", "[1, 1] -4.5"]


def test_one_element_beyond_tolerance_fails_naming_that_element():
    value = torch.rand(4, 6, generator=torch.Generator().manual_seed(1))
    moved = value.clone()
    moved[2, 3] += 1e-3
    assert not EXT.matches(serialized_data=_text(out=moved), snapshot_data=_text(out=value))
    report = "\n".join(EXT.diff_lines(_text(out=moved), _text(out=value)))
    assert "Mismatched elements: 1 / 24" in report and "at index (2, 3)" in report


def test_a_difference_within_tolerance_matches():
    value = torch.rand(4, 6, generator=torch.Generator().manual_seed(1))
    rtol, atol = tolerance.default_tolerance(torch.float32)
    assert EXT.matches(serialized_data=_text(out=value + atol / 2), snapshot_data=_text(out=value))


def test_shape_then_dtype_are_compared_before_values():
    base = _text(out=torch.zeros(2, 3))
    assert "shape does not match: [3, 2] != [2, 3]" in "\n".join(EXT.diff_lines(_text(out=torch.zeros(3, 2)), base))
    assert "dtype does not match: float64 != float32" in "\n".join(
        EXT.diff_lines(_text(out=torch.zeros(2, 3, dtype=torch.float64)), base)
    )
    assert "weights: not in the snapshot" in "\n".join(
        EXT.diff_lines(_text(out=torch.zeros(2, 3), weights=torch.zeros(1)), base)
    )


def test_large_tensors_are_summarised_and_a_change_above_the_stated_bound_is_detected():
    value = torch.rand(32, 8, 128, 64, generator=torch.Generator().manual_seed(2))
    text = _text(out=value)
    assert len(text.splitlines()) < 600 and value.numel() > FULL_LIMIT
    bound = summary_guarantee(value)
    assert 0.05 < bound < 0.2  # 8192 * 1e-5 + 1.3e-6 * sum|x| for a slice of uniform(0, 1) values
    unsampled = (17, 3, 100, 5)
    assert f"[{', '.join(map(str, unsampled))}]" not in text
    moved = value.clone()
    moved[unsampled] += bound * 1.01
    report = "\n".join(EXT.diff_lines(_text(out=moved), text))
    assert "slice [17, 3]" in report
    within = value.clone()
    within[unsampled] += 1e-6
    assert EXT.matches(serialized_data=_text(out=within), snapshot_data=text)


# ---------------------------------------------------------------- the lifecycle, end to end

CASE = """\
document: {title: Snapshot lifecycle}
cases:
  - id: demo
    inputs:
      x: [[1.0, 2.0], [3.0, 4.5]]
    checks:
      - id: softmax
        call: softmax(x, dim=-1)
        expect: {out: "torch.Size([2, 2])"}
      - id: double
        expr: x * 2
        expect: {out: "tensor([[2., 4.], [6., 9.]])"}
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A project with one case file whose snapshots pytest has written (once for the module)."""
    root = tmp_path_factory.mktemp("made")
    (root / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "test_cases.py", root / "tests" / "test_cases.py")
    shutil.copy(ROOT / "conftest.py", root / "conftest.py")
    (root / "cases").mkdir()
    (root / "cases" / "demo.yaml").write_text(CASE, encoding="utf-8")
    code, out = _pytest(root, "--snapshot-update", new_process=True)
    assert code == 0 and "2 snapshots generated" in out, out
    return root


@pytest.fixture
def project(made, tmp_path):
    """A copy of that project of the test's own."""
    shutil.copytree(made, tmp_path / "project", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "project"


def _pytest(root, *args, new_process=False):
    """pytest run on the project as its maintainer runs it; in this process unless ``new_process`` (the same
    arguments and folder: tests/outputs.pytest_here)."""
    argv = ["tests", "-q", "-p", "no:cacheprovider", "--cases", "cases", *args]
    if not new_process:
        run = pytest_here(*argv, cwd=root)
        return run.returncode, run.stdout + run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *argv],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    return run.returncode, run.stdout + run.stderr


def _snapshots(root):
    folder = root / "tests" / "__snapshots__" / "test_cases"
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir())}


def test_update_on_a_clean_tree_changes_nothing_and_names_ignore_the_device(project):
    before = _snapshots(project)
    assert sorted(before) == ["demo.demo.double.txt", "demo.demo.softmax.txt"]
    code, out = _pytest(project, "--snapshot-update")
    assert code == 0 and "2 snapshots passed" in out and "2 skipped" in out, out
    assert _snapshots(project) == before


def test_a_change_within_tolerance_passes_and_is_not_rewritten(project):
    path = project / "tests" / "__snapshots__" / "test_cases" / "demo.demo.double.txt"
    edited = path.read_text(encoding="utf-8").replace("[1, 1] 9", "[1, 1] 9.000001")
    path.write_text(edited, encoding="utf-8")
    code, out = _pytest(project, "--snapshot-update")
    assert code == 0 and "2 snapshots passed" in out, out
    assert path.read_text(encoding="utf-8") == edited


def test_a_change_beyond_tolerance_fails_with_the_element(project):
    path = project / "tests" / "__snapshots__" / "test_cases" / "demo.demo.double.txt"
    path.write_text(path.read_text(encoding="utf-8").replace("[1, 1] 9", "[1, 1] 9.01"), encoding="utf-8")
    code, out = _pytest(project)
    assert code == 1 and "at index (1, 1)" in out and "1 snapshot failed" in out, out


def test_a_deleted_snapshot_is_reported_missing(project):
    (project / "tests" / "__snapshots__" / "test_cases" / "demo.demo.softmax.txt").unlink()
    code, out = _pytest(project)
    assert code == 1 and "Snapshot 'demo.demo.softmax' does not exist!" in out, out


def test_a_renamed_case_leaves_an_orphan_that_pytest_reports_and_update_removes(project):
    case = project / "cases" / "demo.yaml"
    case.write_text(CASE.replace("id: demo", "id: renamed"), encoding="utf-8")
    code, out = _pytest(project)
    assert code == 1 and "2 snapshots unused" in out and "2 skipped" in out, out
    code, out = _pytest(project, "--snapshot-update")
    assert code == 0 and "2 unused snapshots deleted" in out, out
    assert sorted(_snapshots(project)) == ["demo.renamed.double.txt", "demo.renamed.softmax.txt"]


def test_bool_and_int_tensors_compare_exactly():
    mask = torch.ones(3, 3, dtype=torch.bool).tril()
    assert EXT.matches(serialized_data=_text(m=mask, i=torch.arange(4)), snapshot_data=_text(m=mask, i=torch.arange(4)))
    report = "\n".join(EXT.diff_lines(_text(m=~mask), _text(m=mask)))
    assert "Mismatched elements: 9 / 9" in report
    report = "\n".join(EXT.diff_lines(_text(i=torch.tensor([0, 1, 2, 4])), _text(i=torch.arange(4))))
    assert "Mismatched elements: 1 / 4" in report and "at index (3,)" in report


def test_an_element_turning_nan_in_a_summarised_tensor_is_detected():
    value = torch.rand(32, 8, 128, 64, generator=torch.Generator().manual_seed(2))
    text = _text(out=value)
    moved = value.clone()
    moved[17, 3, 100, 5] = float("nan")
    report = "\n".join(EXT.diff_lines(_text(out=moved), text))
    assert "slice [17, 3]: 1 non-finite elements != 0" in report


def test_float16_extremes_and_plain_values_serialise_and_compare():
    extremes = torch.tensor([65504.0, -65504.0, 6.1e-5, 0.0], dtype=torch.float16)
    entry = parse(_text(x=extremes))["x"]
    assert list(entry["elements"].values()) == ["6.55e+04", "-6.55e+04", "6.1e-05", "0"]
    back = torch.tensor([float(v) for v in entry["elements"].values()]).to(torch.float16)
    assert torch.equal(back, extremes)
    plain = _text(size=torch.Size([4, 8]), mean=0.25)
    assert EXT.matches(serialized_data=_text(size=torch.Size([4, 8]), mean=0.25 + 1e-9), snapshot_data=plain)
    assert "number does not match: 0.5 != 0.25" in "\n".join(
        EXT.diff_lines(_text(size=torch.Size([4, 8]), mean=0.5), plain)
    )
    assert "size does not match: [4, 9] != [4, 8]" in "\n".join(
        EXT.diff_lines(_text(size=torch.Size([4, 9]), mean=0.25), plain)
    )


def test_an_unreadable_snapshot_is_one_clear_problem_and_never_a_match():
    assert not EXT.matches(serialized_data=_text(out=torch.zeros(2)), snapshot_data="== out\ndtype: float32\n")
    report = list(EXT.diff_lines(_text(out=torch.zeros(2)), "== out\ndtype: float32\n"))
    assert report[0].startswith("the snapshot file could not be read (KeyError")


def test_another_cases_folder_neither_uses_nor_touches_the_projects_snapshots(project, tmp_path_factory):
    other = tmp_path_factory.mktemp("other")
    (other / "other.yaml").write_text(CASE.replace("id: demo", "id: elsewhere"), encoding="utf-8")
    before = _snapshots(project)
    code, out = _pytest(project, "--cases", str(other))
    # Checked against the documents only: no snapshot is compared, and none is reported unused.
    assert code == 0 and "2 passed" in out and "snapshots passed" not in out and "snapshots unused" not in out, out
    code, out = _pytest(project, "--cases", str(other), "--snapshot-update")
    assert code != 0 and "refusing to rewrite them" in out, out
    code, out = _pytest(project, "--cases", str(other / "missing"))
    assert code != 0 and "no such folder" in out, out
    assert _snapshots(project) == before


def test_a_size_stored_as_a_number_is_a_kind_mismatch_and_nan_numbers_match():
    assert "kind does not match: size != number" in "\n".join(
        EXT.diff_lines(_text(out=torch.Size([4, 8])), _text(out=12345.5))
    )
    assert EXT.matches(serialized_data=_text(x=float("nan"), y=1.0), snapshot_data=_text(x=float("nan"), y=1.0 + 1e-9))


def test_a_snapshot_that_is_not_utf8_is_unreadable_and_regenerates(project):
    path = project / "tests" / "__snapshots__" / "test_cases" / "demo.demo.double.txt"
    path.write_bytes(b"\xff\xfe garbage")
    code, out = _pytest(project)
    assert code == 1 and "the snapshot file could not be read" in out and "not UTF-8 text" in out, out
    code, out = _pytest(project, "--snapshot-update")
    assert code == 0 and path.read_text(encoding="utf-8").startswith("# attention-core snapshot"), out
