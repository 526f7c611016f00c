"""docs/platforms.md runs as written: each platform's commands, from an assignment folder to the files the page
names, in a folder holding the assignment (examples/head), students' files and a Moodle grading worksheet."""

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

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "platforms.md"
HEAD = ROOT / "examples" / "head"


def commands():
    """The lines of each ``sh`` block the page marks ``<!-- platforms: run -->``, in order."""
    blocks = re.findall(r"<!-- platforms: run -->\n```sh\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    where = tmp_path_factory.mktemp("platforms")
    shutil.copytree(HEAD, where / "assignment", ignore=shutil.ignore_patterns("submissions"))
    (where / "subs").mkdir()
    (where / "moodle").mkdir()
    for name in ("correct", "unscaled"):
        shutil.copy(HEAD / "submissions" / f"{name}.py", where / "subs" / f"{name}.py")
    shutil.copy(HEAD / "submissions" / "correct.py", where / "moodle" / "Jane Smith_301_assignsubmission_file_a.py")
    shutil.copy(HEAD / "submissions" / "unscaled.py", where / "moodle" / "John Doe_302_assignsubmission_file_a.py")
    shutil.copy(ROOT / "tests" / "lms" / "moodle_worksheet.csv", where / "worksheet.csv")
    said = {}
    for line in commands():
        argv = shlex.split(line)
        assert argv[:3] == ["python", "-m", "attention_core"], line
        run = subprocess.run([sys.executable, *argv[1:]], cwd=where, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"{line}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
        said[argv[3]] = said.get(argv[3], "") + run.stdout
    return where, said


def test_the_page_runs_a_command_for_every_platform():
    used = {shlex.split(line)[3] for line in commands()}
    assert {"points", "grade", "gradescope-bundle", "prairielearn", "student-kit"} <= used


@pytest.mark.grading
def test_every_platform_s_command_writes_what_the_page_says(ran):
    where, said = ran
    assert "total" in said["points"].lower()
    with (where / "grades" / "gradebook.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[1][0] == "Points Possible" and {r[0] for r in rows[2:]} == {"subs/correct", "subs/unscaled"}
    assert (where / "autograder.zip").is_file()
    info = json.loads((where / "question" / "info.json").read_text(encoding="utf-8"))
    assert info["externalGradingOptions"]["enabled"] is True
    workflow = yaml.safe_load((where / "kit" / ".github" / "workflows" / "classroom.yml").read_text(encoding="utf-8"))
    assert workflow["jobs"]
    with (where / "moodle-grades" / "roster.csv").open(newline="", encoding="utf-8") as handle:
        status = {row["student_id"]: row["status"] for row in csv.DictReader(handle)}
    assert status == {"301": "graded", "302": "graded", "303": "not submitted"}
    assert (where / "moodle-grades" / "moodle-grades.csv").is_file()
    with (where / "moodle-grades" / "gradebook.csv").open(newline="", encoding="utf-8") as handle:
        keys = {row[0] for row in list(csv.reader(handle))[2:]}
    assert keys == {"301", "302"}  # with --roster, the platform's student id is the row's key
