"""Learning platforms: their bulk downloads read as they come, their gradebooks as the roster, grades back in
their own import format (sample files in tests/lms, written from the platforms' documentation)."""

import csv
from pathlib import Path

import pytest

from attention_core.grading.outputs import lms
from tests.outputs import command

ROOT = Path(__file__).resolve().parent.parent
HEAD = ROOT / "examples" / "head"
SAMPLES = Path(__file__).resolve().parent / "lms"
CORRECT = (HEAD / "submissions" / "correct.py").read_text()
UNSCALED = (HEAD / "submissions" / "unscaled.py").read_text()


def _rows(path):
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def test_a_canvas_gradebook_export_is_read_as_the_roster_without_its_points_row_or_test_student():
    roster = lms.read_roster(SAMPLES / "canvas_gradebook.csv")
    assert roster.platform == lms.CANVAS
    assert roster.ids == ["12345", "12346", "12347"] and roster.names == ["Smith, Jane", "Doe, John", "Lee, Ann"]
    assert [row[0].strip() for row in roster.preamble] == ["Points Possible"]


def test_a_moodle_grading_worksheet_is_read_as_the_roster():
    roster = lms.read_roster(SAMPLES / "moodle_worksheet.csv")
    assert roster.platform == lms.MOODLE
    assert roster.ids == ["301", "302", "303"] and roster.names == ["Jane Smith", "John Doe", "Ann Lee"]


@pytest.mark.parametrize(
    ("name", "owner"),
    [
        ("smithjane_12345_777_attention.py", lms.Owner(lms.CANVAS, "12345", "smithjane", False, "attention.py")),
        ("doejohn_late_12346_778_attention.py", lms.Owner(lms.CANVAS, "12346", "doejohn", True, "attention.py")),
        (
            "Jane Smith_301_assignsubmission_file_attention.py",
            lms.Owner(lms.MOODLE, "301", "Jane Smith", False, "attention.py"),
        ),
        ("Jane Smith_301_assignsubmission_file_", lms.Owner(lms.MOODLE, "301", "Jane Smith", False, "")),
        ("attention.py", None),
        ("alice_2024.py", None),
    ],
)
def test_a_bulk_download_s_file_name_says_whose_it_is(name, owner):
    assert lms.owner_of(name) == owner


def test_a_moodle_full_name_that_holds_another_participant_s_pattern_never_takes_that_participant_s_grade(tmp_path):
    sheet = tmp_path / "worksheet.csv"
    rows = _rows(SAMPLES / "moodle_worksheet.csv")
    rows.append(["Participant 405", "Mallory_302_assignsubmission_file_x", "m@example.edu", "", "", "10.00"])
    with sheet.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    roster = lms.read_roster(sheet)
    mallory = "Mallory_302_assignsubmission_file_x_405_assignsubmission_file_attention.py"
    assert lms.owner_of(mallory, roster) == lms.Owner(
        lms.MOODLE, "405", "Mallory_302_assignsubmission_file_x", False, "attention.py"
    )
    assert lms.owner_of("John Doe_302_assignsubmission_file_attention.py", roster).student == "302"
    assert lms.owner_of(mallory) is None  # without a roster: two places it could split, neither taken
    # A file name that claims a participant whose roster name is not the one it starts with is no one's.
    assert lms.owner_of("Mallory_302_assignsubmission_file_attention.py", roster) is None
    # Moodle's cleaned file names: case, spaces and punctuation aside, the roster's name.
    assert lms.owner_of("jane-smith_301_assignsubmission_file_a.py", roster).student == "301"


def test_a_file_that_is_no_roster_is_refused_with_one_line_before_anything_is_graded(tmp_path):
    (tmp_path / "roster.csv").write_text("name,score\nalice,3\n")
    (tmp_path / "s.py").write_text(CORRECT)
    run = command(
        "grade",
        "--assignment",
        str(HEAD),
        str(tmp_path / "s.py"),
        "--out",
        str(tmp_path / "out"),
        "--roster",
        str(tmp_path / "roster.csv"),
        cwd=ROOT,
    )
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert "neither a Canvas gradebook export" in run.stderr and "roster.csv" in run.stderr
    assert not (tmp_path / "out" / "s").exists()


def _graded_with_roster(tmp_path, roster):
    """``grade`` of every file of ``tmp_path/subs`` (named from ``tmp_path``) into ``tmp_path/out`` with ``roster``."""
    subs = sorted((tmp_path / "subs").iterdir())
    return command(
        "grade",
        "--assignment",
        HEAD,
        *(f"subs/{p.name}" for p in subs),
        "--out",
        tmp_path / "out",
        "--roster",
        roster,
        cwd=tmp_path,
    )


@pytest.mark.grading
def test_a_canvas_batch_gets_a_roster_with_who_did_not_submit_and_the_grades_in_canvas_s_import_format(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "smithjane_12345_777_attention.py").write_text(CORRECT)
    (subs / "doejohn_late_12346_778_attention.py").write_text(UNSCALED)
    (subs / "stranger.py").write_text(CORRECT)
    out = tmp_path / "out"
    run = _graded_with_roster(tmp_path, SAMPLES / "canvas_gradebook.csv")
    assert run.returncode == 0, run.stderr
    table = _rows(out / "roster.csv")
    assert table[0] == ["student_id", "name", "submission", "score", "max_score", "status"]
    jane, john, ann, stranger = table[1:]
    assert (
        jane[:3] == ["12345", "Smith, Jane", "subs/smithjane_12345_777_attention"]
        and jane[3] == jane[4]
        and jane[5] == "graded"
    )
    assert john[5] == "graded, late" and float(john[3]) < float(john[4])
    assert ann == ["12347", "Lee, Ann", "", "", "", "not submitted"]
    assert stranger[2] == "subs/stranger" and stranger[5] == "matches no student"
    assert "not submitted: Lee, Ann" in run.stdout and "1 submission match no student: subs/stranger" in run.stdout
    imported = _rows(out / "canvas-import.csv")
    header = imported[0]
    assert header[:6] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Attention heads (5521)"]
    column = header.index("head")  # the assignment's title: a new column, which Canvas's import adds
    points_row = imported[1]
    assert points_row[0].strip() == "Points Possible" and points_row[column] == jane[4]
    by_id = {row[1]: row for row in imported[2:]}
    assert by_id["12345"][column] == jane[3] and by_id["12346"][column] == john[3] and by_id["12347"][column] == ""
    assert "99999" not in by_id  # Canvas's test student is no student


@pytest.mark.grading
def test_a_moodle_batch_gathers_a_student_s_files_and_fills_the_grading_worksheet_with_grade_and_feedback(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    helper, head = CORRECT.split("class Head", 1)
    (subs / "Jane Smith_301_assignsubmission_file_helpers.py").write_text(
        "import torch\n\ndef scale(k):\n    return k.shape[-1] ** 0.5\n"
    )
    (subs / "Jane Smith_301_assignsubmission_file_attention.py").write_text(
        helper + "from helpers import scale\n\n\nclass Head" + head.replace("/ k.shape[-1] ** 0.5", "/ scale(k)")
    )
    (subs / "John Doe_302_assignsubmission_file_attention.py").write_text(UNSCALED)
    out = tmp_path / "out"
    run = _graded_with_roster(tmp_path, SAMPLES / "moodle_worksheet.csv")
    assert run.returncode == 0, run.stderr
    table = {row[0]: row for row in _rows(out / "roster.csv")[1:]}
    assert table["301"][5] == "graded" and table["301"][3] == table["301"][4]  # two files, one submission, full
    assert table["301"][2] == "subs/moodle-301"  # named as if it lay beside the student's files
    assert table["302"][5] == "graded" and table["303"][5] == "not submitted"
    sheet = _rows(out / "moodle-grades.csv")
    header = sheet[0]
    assert header == _rows(SAMPLES / "moodle_worksheet.csv")[0]  # the worksheet's own columns, for its upload
    rows = {row[0]: row for row in sheet[1:]}
    grade, feedback = header.index("Grade"), header.index("Feedback comments")
    assert rows["Participant 301"][grade] == table["301"][3]
    assert rows["Participant 302"][grade] == table["302"][3] and "points" in rows["Participant 302"][feedback]
    assert (
        "Named mistakes: the scores are not scaled by the square root of the dimension"
        in rows["Participant 302"][feedback]
    )
    assert rows["Participant 303"][grade] == "" and rows["Participant 303"][feedback] == ""
