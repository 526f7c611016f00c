"""docs/platforms.md runs as written: each platform's commands, from an assignment folder to the files the page
names, in a folder holding the assignment (examples/head), students' files and a Moodle grading worksheet. Beside
it, statements of other pages that a run can hold cheaply: what results.json holds (docs/grading.md) and the first
lines of an imported draft (docs/case-format.md)."""

import csv
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.outputs import command

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "platforms.md"
HEAD = ROOT / "examples" / "head"
SHELL = {"mkdir", "cp"}  # the only other commands the page may use: a job's folder made by hand


def commands():
    """The lines of each ``sh`` block the page marks ``<!-- platforms: run -->``, in order."""
    blocks = re.findall(r"<!-- platforms: run -->\n```sh\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def _subcommand(line):
    argv = shlex.split(line)
    return argv[3] if argv[:3] == ["python", "-m", "attention_core"] else None


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    where = tmp_path_factory.mktemp("platforms")
    shutil.copytree(HEAD, where / "assignment", ignore=shutil.ignore_patterns("submissions"))
    (where / "subs").mkdir()
    (where / "moodle").mkdir()
    for name in ("correct", "unscaled"):
        shutil.copy(HEAD / "submissions" / f"{name}.py", where / "subs" / f"{name}.py")
    moodle = where / "moodle"
    shutil.copy(HEAD / "submissions" / "correct.py", moodle / "Jane Smith_301_assignsubmission_file_attention.py")
    shutil.copy(HEAD / "submissions" / "unscaled.py", moodle / "John Doe_302_assignsubmission_file_attention.py")
    shutil.copy(ROOT / "tests" / "lms" / "moodle_worksheet.csv", where / "worksheet.csv")
    said = {}
    for line in commands():
        argv = shlex.split(line)
        if _subcommand(line) is None:
            assert argv[0] in SHELL, line
            subprocess.run(argv, cwd=where, check=True)
            continue
        if argv[3] == "prairielearn-grade":  # a grading job's command: it leaves its process at once when done
            run = subprocess.run([sys.executable, *argv[1:]], cwd=where, capture_output=True, text=True, timeout=600)
        else:  # python -m attention_core, run in this process
            run = command(*argv[3:], cwd=where)
        assert run.returncode == 0, f"{line}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
        said[argv[3]] = said.get(argv[3], "") + run.stdout
    return where, said


def test_the_page_runs_a_command_for_every_platform():
    used = {_subcommand(line) for line in commands()}
    assert {"points", "grade", "gradescope-bundle", "prairielearn", "prairielearn-grade", "student-kit"} <= used
    kit = next(line for line in commands() if _subcommand(line) == "student-kit")
    assert "--github-classroom" in kit
    assert any("--roster" in line and "moodle" in line for line in commands())


@pytest.mark.grading
def test_every_platform_s_command_writes_what_the_page_says(ran):
    where, said = ran
    assert "total" in said["points"].lower()
    with (where / "grades" / "gradebook.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[1][0] == "Points Possible" and {r[0] for r in rows[2:]} == {"subs/correct", "subs/unscaled"}
    for page in ("submissions/subs/correct/results.json", "reports/subs/correct/report.html", "summary.html"):
        assert (where / "grades" / page).is_file(), page
    assert (where / "autograder.zip").is_file()
    info = json.loads((where / "question" / "info.json").read_text(encoding="utf-8"))
    assert info["externalGradingOptions"]["enabled"] is True
    assert (where / "question" / "Dockerfile").is_file() and (where / "question" / "tests" / "run.sh").is_file()
    graded = json.loads((where / "grade" / "results" / "results.json").read_text(encoding="utf-8"))
    assert (graded["gradable"], graded["score"]) == (True, 1.0)
    assert {"points", "max_points", "message", "output"} <= set(graded["tests"][0])
    workflow = yaml.safe_load((where / "kit" / ".github" / "workflows" / "classroom.yml").read_text(encoding="utf-8"))
    assert workflow["jobs"]
    assert (where / "kit" / "attention_student.py").is_file()
    with (where / "moodle-grades" / "roster.csv").open(newline="", encoding="utf-8") as handle:
        status = {row["student_id"]: row["status"] for row in csv.DictReader(handle)}
    assert status == {"301": "graded", "302": "graded", "303": "not submitted"}
    assert (where / "moodle-grades" / "moodle-grades.csv").is_file()
    with (where / "moodle-grades" / "gradebook.csv").open(newline="", encoding="utf-8") as handle:
        keys = {row[0] for row in list(csv.reader(handle))[2:]}
    assert keys == {"301", "302"}  # with --roster, the platform's student id is the row's key


@pytest.mark.grading
def test_results_json_holds_the_fields_docs_grading_md_names(ran):
    where, _ = ran
    grading = (ROOT / "docs" / "grading.md").read_text(encoding="utf-8")
    paragraph = grading[grading.index("**`results.json`** holds") :].split("\n\n", 1)[0]
    named = set(re.findall(r"`([^`]+)`", paragraph))
    for name in ("correct", "unscaled"):
        results = json.loads((where / "grades" / "submissions" / "subs" / name / "results.json").read_text())
        tests = results["tests"]
        assert set(results) <= named, set(results) - named
        assert set().union(*tests) <= named, set().union(*tests) - named
        assert set().union(*(t["extra_data"] for t in tests)) <= named
        assert {t["output_format"] for t in tests} | {t["status"] for t in tests} <= named
    html = next(t for t in tests if t["output_format"] == "html")  # unscaled's failed check, drawn
    assert html["output"].startswith("<pre") and html["status"] == "failed" and "diagnosis" in html["extra_data"]


def test_an_imported_draft_starts_as_docs_case_format_md_says(tmp_path):
    from attention_core import cli  # noqa: PLC0415

    said = " ".join((ROOT / "docs" / "case-format.md").read_text(encoding="utf-8").split())
    (quoted,) = re.findall(r"\(`(# A draft: imported from d\.txt\.)`\)", said)
    (tmp_path / "d.txt").write_text("In [1]:\nprint(t)\n\ntensor([1., 2.])\n", encoding="utf-8")
    (tmp_path / "drafts").mkdir()
    draft = tmp_path / "drafts" / "d.yaml"
    assert cli.main(["import", str(tmp_path / "d.txt"), "--out", str(draft)]) == 0
    first, second = draft.read_text(encoding="utf-8").splitlines()[:2]
    schema = first.removeprefix("# yaml-language-server: $schema=")
    assert schema != first and not Path(schema).is_absolute()  # the schema by its path from the draft's folder
    from attention_core.harness.reading.assignment import default_cases_folder  # noqa: PLC0415
    from attention_core.harness.reading.cases import SCHEMA_FILE  # noqa: PLC0415

    assert (draft.parent / schema).resolve() == (default_cases_folder() / SCHEMA_FILE).resolve()
    assert second == quoted
