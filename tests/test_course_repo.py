"""A course's own repository, with a folder named ``cases`` at its root, checked from the project: the
project's snapshots are the project's alone, told by the folder's identity, never by its name."""

import shutil
from pathlib import Path

import pytest

from tests.outputs import pytest_here

pytestmark = pytest.mark.slow  # pytest runs pytest: the quick loop leaves this module out

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "tests" / "__snapshots__"


def _snapshots():
    return {p: p.read_bytes() for p in SNAPSHOTS.rglob("*") if p.is_file()}


def test_a_course_folder_named_cases_is_checked_without_the_projects_snapshots_and_never_rewrites_them(tmp_path):
    course = tmp_path / "course"
    (course / "cases").mkdir(parents=True)
    (course / "pyproject.toml").write_text('[project]\nname = "course"\nversion = "0"\n')
    shutil.copy(ROOT / "cases" / "001_self_attention.yaml", course / "cases")
    before = _snapshots()
    for extra in ([], ["--snapshot-update"]):
        run = pytest_here("--cases", course / "cases", "-m", "case", "-q", *extra, cwd=ROOT)
        if extra:
            assert run.returncode != 0 and "refusing to rewrite them" in run.stdout + run.stderr
        else:
            assert run.returncode == 0 and "snapshot" not in run.stdout.lower(), run.stdout[-2000:]
    assert _snapshots() == before
    assert not (course / "cases" / ".pytest_cache").exists()


def test_checking_a_submission_with_junitxml_warns_of_nothing_and_advises_no_snapshot_update(tmp_path):
    report = tmp_path / "junit.xml"
    run = pytest_here(
        f"--impl={ROOT / 'attention_core' / 'reference.py'}", f"--junitxml={report}", "-m", "case", "-q", cwd=ROOT
    )
    assert run.returncode == 0, run.stdout[-2000:]
    assert "warning" not in run.stdout.lower() and "snapshot" not in run.stdout.lower(), run.stdout[-2000:]
    assert report.read_text().count('name="max_points"') > 0


def test_thousands_of_failing_cases_print_a_bounded_report(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    body = "".join(
        f"  - id: c{i}\n    inputs: {{x: [1.0, 2.0]}}\n    checks:\n      - {{id: k, call: softmax(x), "
        f"expect: {{out: [0.5, 0.5]}}}}\n"
        for i in range(400)
    )
    (cases / "f.yaml").write_text("document: {title: T}\ncases:\n" + body)
    run = pytest_here(
        f"--cases={cases}", "-m", "case", "-q", "-p", "no:randomly", "--device", "cpu", cwd=ROOT, env={"COLUMNS": "120"}
    )  # the summary's lines are as wide as the terminal
    assert "400 failed" in run.stdout
    reports = run.stdout.split("short test summary info")[0]  # (the summary's lines may quote a report's start)
    assert reports.count("Values are not close!") == 50  # full reports for the first 50 only
    assert reports.count("report left out: more than 50 case checks failed") == 150  # the first 200 listed
    assert "200 more failed not listed above" in run.stdout
    assert len(run.stdout) < 400_000, len(run.stdout)  # 400 full reports print over a megabyte
