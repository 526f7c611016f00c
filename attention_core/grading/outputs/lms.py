"""Learning platforms: their bulk downloads read as they come, their gradebooks as the roster, grades back out.

**Canvas** (Instructure's "Download Submissions" and gradebook CSV, as documented for Canvas LMS in 2024):

* a bulk download names each file ``<name>_<user id>_<submission id>_<file name>``, with ``late_`` before
  the user id for a late one (``smithjane_late_12345_67890_attention.py``); ``<name>`` is the
  student's sortable name in lower case, without spaces or punctuation;
* the gradebook export (and import) is a CSV whose columns start ``Student, ID, SIS User ID, SIS Login
  ID, Section`` (the ID is Canvas's user id), then one column per assignment named ``<title> (<assignment
  id>)``; its second row may be ``Points Possible``. An import updates the columns it names, matched by
  ``ID``.

**Moodle** (the assignment activity's "Download all submissions" and its offline grading worksheet, as in
Moodle 4.x, ``mod/assign``):

* a bulk download names each file ``<full name>_<participant id>_assignsubmission_file_<file name>`` (or
  a folder ``<full name>_<participant id>_assignsubmission_file_`` holding the files);
* the grading worksheet is a CSV with the columns ``Identifier`` (``Participant <id>``), ``Full name``,
  ``Email address``, ``Status``, ``Grade``, ``Maximum Grade``, ``Grade can be changed``, ``Last modified
  (submission)``, ``Last modified (grade)`` and, where feedback comments are on, ``Feedback comments``.
  Its upload reads ``Identifier``, ``Grade``, ``Last modified (grade)`` and the feedback columns.

A submission whose name follows neither stays a submission of its own (its id is its name).
"""

from __future__ import annotations

import collections
import csv
import io
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from attention_core.grading.outputs import cells
from attention_core.harness.text import escape as _escape
from attention_core.harness.text import points as _points

CANVAS, MOODLE = "canvas", "moodle"
CANVAS_FILE = re.compile(r"^(?P<name>[a-z0-9]+)_(?P<late>late_)?(?P<id>\d+)_(?P<submission>\d+)_(?P<file>.+)$")
MOODLE_SPLIT = re.compile(r"_(?P<id>\d+)_assignsubmission_[a-z]+_")  # between the full name and the file name
CANVAS_HEADER = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_ID, MOODLE_NAME, MOODLE_GRADE = "Identifier", "Full name", "Grade"
MOODLE_FEEDBACK, MOODLE_MODIFIED, MOODLE_MAXIMUM = "Feedback comments", "Last modified (grade)", "Maximum Grade"
MOST_ROSTER_BYTES = 16 << 20


class RosterError(ValueError):
    """A roster file that cannot be read: the message names the file and the problem."""


@dataclass(frozen=True)
class Owner:
    """Whose a submission is, as its platform's file name says."""

    platform: str
    student: str  # the platform's id of the student (Canvas's user id, Moodle's participant id)
    name: str  # as the file name writes it
    late: bool = False
    file: str = ""  # the file's own name, as the student uploaded it


def owner_of(path, roster=None):
    """The Owner a bulk download's file (or folder) name gives, or None.

    A Moodle name holds the student's full name, which may itself hold ``_<digits>_assignsubmission_``, as
    may the uploaded file's name: each place the pattern is found is a candidate (full name, participant id).
    With the ``roster``, the one candidate whose id is the roster's and whose name is that participant's
    (compared without case, spaces or punctuation, as Moodle cleans file names) is the owner; without one,
    a name with one candidate alone has an owner. A name that cannot be told is no one's: a submission
    of its own, that matches no student."""
    name = Path(path).name
    candidates = [
        Owner(MOODLE, found["id"], name[: found.start()], file=name[found.end() :])
        for found in MOODLE_SPLIT.finditer(name)
        if found.start() > 0
    ]
    if candidates:
        if roster is not None and roster.platform == MOODLE:
            names = dict(zip(roster.ids, roster.names))
            candidates = [c for c in candidates if c.student in names and _plain(c.name) == _plain(names[c.student])]
        return candidates[0] if len(candidates) == 1 else None
    found = CANVAS_FILE.match(name)
    if found:
        return Owner(CANVAS, found["id"], found["name"], late=bool(found["late"]), file=found["file"])
    return None


def _plain(name):
    """A name without case, spaces or punctuation: a roster's full name and a file name's compared."""
    return re.sub(r"[\W_]+", "", name).casefold()


@dataclass
class Roster:
    """The students of a platform's gradebook file, in its order, and the file's rows to write grades back into."""

    platform: str
    path: Path
    header: list
    rows: list  # the student rows, each a list of cells as read
    ids: list  # each row's student id (as the bulk download names it)
    names: list  # each row's name
    preamble: list = field(default_factory=list)  # rows between the header and the students (Points Possible)

    def by_id(self):
        return {student: i for i, student in enumerate(self.ids)}


def read_roster(path):
    """The Roster of a Canvas gradebook export or a Moodle grading worksheet; RosterError naming the problem."""
    path = Path(path)
    try:
        if path.is_symlink() or not path.is_file():
            raise RosterError(f"{path}: no such file (a roster is a platform's gradebook CSV)")
        data = path.read_bytes()
    except OSError as err:
        raise RosterError(f"{path}: cannot be read: {err.strerror or err}") from None
    if len(data) > MOST_ROSTER_BYTES:
        raise RosterError(f"{path}: {len(data)} bytes, over the {MOST_ROSTER_BYTES} a roster may have")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise RosterError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    table = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    if not table:
        raise RosterError(f"{path}: empty: a roster is a platform's gradebook CSV")
    header = [cell.strip() for cell in table[0]]
    if tuple(header[:2]) == CANVAS_HEADER[:2]:
        preamble = [row for row in table[1:] if row and row[0].strip() in ("Points Possible", "")]
        students = [
            row
            for row in table[1:]
            if row
            and row[0].strip() not in ("Points Possible", "")
            and row[0].strip() not in ("Test Student", "Student, Test")
        ]  # Canvas's own test student
        ids = [row[1].strip() if len(row) > 1 else "" for row in students]
        names = [row[0].strip() for row in students]
        return Roster(CANVAS, path, header, students, ids, names, preamble)
    if MOODLE_ID in header and MOODLE_NAME in header:
        at, name_at = header.index(MOODLE_ID), header.index(MOODLE_NAME)
        students = table[1:]
        ids = [re.sub(r"\D", "", row[at]) if len(row) > at else "" for row in students]
        names = [row[name_at].strip() if len(row) > name_at else "" for row in students]
        return Roster(MOODLE, path, header, students, ids, names)
    raise RosterError(
        f"{path}: neither a Canvas gradebook export (its columns start Student, ID, ...) nor a "
        f"Moodle grading worksheet (it has Identifier and Full name): its columns are "
        f"{', '.join(header[:6])}"
    )


def canvas_column(roster, title):
    """The roster's column for the assignment ``title``: the one whose name starts with it (Canvas writes
    ``<title> (<id>)``), else a new column named ``title``."""
    for i, column in enumerate(roster.header):
        if i >= len(CANVAS_HEADER) and (column == title or column.startswith(f"{title} (")):
            return i
    return None


def write_canvas(roster, grades, title, maximum, path):
    """``path``: the roster's rows with the assignment's column set from ``grades`` (student id -> points), in
    Canvas's gradebook import format; a student without a grade keeps the cell as it was."""
    header = list(roster.header)
    at = canvas_column(roster, title)
    if at is None:
        header.append(title)
        at = len(header) - 1
    rows = [header]
    for row in roster.preamble:
        row = list(row) + [""] * (len(header) - len(row))
        if row[0].strip() == "Points Possible":
            row[at] = _number(maximum)
        rows.append(row)
    if not roster.preamble:
        rows.append(["Points Possible"] + [""] * (len(header) - 1))
        rows[-1][at] = _number(maximum)
    for student, row in zip(roster.ids, roster.rows):
        row = list(row) + [""] * (len(header) - len(row))
        if student in grades:
            row[at] = _number(grades[student])
        rows.append(row)
    _write(path, rows)


def write_moodle(roster, grades, feedback, path):
    """``path``: the grading worksheet with ``Grade`` (and ``Feedback comments``, added where it is missing) set
    from ``grades`` and ``feedback`` (participant id -> points, text), for Moodle's upload."""
    header = list(roster.header)
    if MOODLE_FEEDBACK not in header:
        header.append(MOODLE_FEEDBACK)
    grade_at, feedback_at = (
        header.index(MOODLE_GRADE) if MOODLE_GRADE in header else None,
        header.index(MOODLE_FEEDBACK),
    )
    if grade_at is None:
        header.append(MOODLE_GRADE)
        grade_at = len(header) - 1
    rows = [header]
    for student, row in zip(roster.ids, roster.rows):
        row = list(row) + [""] * (len(header) - len(row))
        if student in grades:
            row[grade_at] = _number(grades[student])
            row[feedback_at] = feedback.get(student, "")
        rows.append(row)
    _write(path, rows)


def _number(value):
    return f"{value:g}" if isinstance(value, float) else str(value)


def _write(path, rows):
    partial = Path(path).with_name(Path(path).name + ".partial")
    with partial.open("w", newline="", encoding="utf-8") as handle:  # (cells.py: no cell starts a formula)
        cells.write_rows(handle, rows)
    partial.replace(path)


# ---------------------------------------------------------------- a batch's files


GATHERED = ".gathered"  # in --out: a platform student's files, gathered into one folder (the same each run)


def gathered(paths, scratch, roster=None):
    """(``paths`` with each platform student's several files (a Canvas or Moodle bulk download writes a
    submission of two files as two files) gathered into one folder in ``scratch``, under their own file
    names, every other path as it is; path -> its lms.Owner, where its name gives one; a gathered folder ->
    the path to name it by: ``<platform>-<student>`` beside the student's first file)."""
    owned = {path: owner_of(path, roster) for path in paths}
    groups = collections.defaultdict(list)
    for path in paths:
        owner = owned[path]
        if owner is not None and Path(path).is_file() and not Path(path).is_symlink():
            groups[(owner.platform, owner.student)].append(Path(path))
    gathered, shown = {}, {}
    for (platform, student), files in groups.items():
        if len(files) < 2:
            continue
        owner = owned[files[0]]
        folder = scratch / f"{platform}-{student}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        owned[folder] = owner
        shown[folder] = files[0].parent / folder.name
        for file in files:
            inner = owned[file]
            target = folder / (Path(inner.file).name if inner.file else file.name)
            if target.exists() or not target.name.strip("."):
                target = folder / file.name
            shutil.copyfile(file, target)
        for file in files:
            gathered[file] = folder
    result, seen = [], set()
    for path in paths:
        path = gathered.get(Path(path), path)
        if path not in seen:
            seen.add(path)
            result.append(path)
    return result, owned, shown


def write_roster_files(students, scores, owners, title, out, report):
    """The roster's view of the batch (``roster.csv``: each student, their submission and score, or "not
    submitted"; then the submissions that match no student) and the grades in the platform's own import
    format (``canvas-import.csv`` or ``moodle-grades.csv``)."""
    by_student = {}
    unmatched = []
    for one in scores:
        owner = owners.get(one.name)
        if owner is None or owner.student not in students.by_id():
            unmatched.append(one)
        else:
            by_student[owner.student] = (one, owner)
    rows = [["student_id", "name", "submission", "score", "max_score", "status"]]
    for student, name in zip(students.ids, students.names):
        found = by_student.get(student)
        if found is None:
            rows.append([student, name, "", "", "", "not submitted"])
        else:
            one, owner = found
            rows.append(
                [
                    student,
                    name,
                    one.name,
                    _points(one.score),
                    _points(one.max_score),
                    "graded, late" if owner.late else "graded",
                ]
            )
    rows += [["", "", one.name, _points(one.score), _points(one.max_score), "matches no student"] for one in unmatched]
    _write(out / "roster.csv", rows)
    grades = {student: one.score for student, (one, _) in by_student.items()}
    maximum = max((one.max_score for one in scores), default=0.0)
    if students.platform == CANVAS:
        target = out / "canvas-import.csv"
        write_canvas(students, grades, title, maximum, target)
    else:
        target = out / "moodle-grades.csv"
        feedback = {student: _feedback_line(one) for student, (one, _) in by_student.items()}
        write_moodle(students, grades, feedback, target)
    missing = [name for student, name in zip(students.ids, students.names) if student not in by_student]
    print(
        f"\nroster: {len(by_student)} of {len(students.ids)} students submitted; not submitted: "
        f"{', '.join(map(_escape, missing)) or 'none'}",
        file=report,
    )
    if unmatched:
        print(
            f"roster: {len(unmatched)} submission{'s' * (len(unmatched) != 1)} match no student: "
            f"{', '.join(_escape(one.name) for one in unmatched)}",
            file=report,
        )
    print(f"wrote {out / 'roster.csv'} and {target} ({students.platform}'s import format)", file=report)


def _feedback_line(one):
    mistakes = sorted({m for g in one.grades for m in g.mistakes})
    lost = sum(1 for g in one.grades if g.score < g.max_score)
    text = f"{_points(one.score)} of {_points(one.max_score)} points; {lost} check{'s' * (lost != 1)} lost points."
    if mistakes:
        text += " Named mistakes: " + "; ".join(mistakes) + "."
    return text + " The full feedback is in your results."
