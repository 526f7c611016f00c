"""A folder is what the teacher means: one submission, a batch of students' files, or a question asked before
anything is graded (folders.py, the one rule)."""

import io
import json

import pytest

from attention_core.grading.intake import folders
from attention_core.grading.outputs.batch import grade_command
from tests.outputs import last_part

NAMES = ("softmax", "attention", "layer_norm")
FULL = "def softmax(x):\n    pass\n\ndef attention(q):\n    pass\n\ndef layer_norm(x):\n    pass\n"


def _folder(tmp_path, files):
    folder = tmp_path / "f"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_files_that_each_define_the_graded_names_are_a_batch_one_submission_each(tmp_path):
    folder = _folder(
        tmp_path,
        {
            "alice.py": FULL,
            "bob.py": "def softmax(x):\n    pass\n",
            "carol.ipynb": json.dumps(
                {"cells": [{"cell_type": "code", "source": ["!pip install x\n", "def attention(q):\n", "    pass\n"]}]}
            ),
        },
    )
    reading = folders.read(folder, NAMES)
    assert reading.kind == "batch" and [p.name for p in reading.members] == ["alice.py", "bob.py", "carol.ipynb"]


def test_files_that_import_one_another_are_one_submission_entered_by_the_file_holding_the_most_names(tmp_path):
    folder = _folder(
        tmp_path,
        {
            "helpers.py": "def softmax(x):\n    pass\n",
            "main.py": "from helpers import *\n\ndef attention(q):\n    pass\n",
            "test_mine.py": "from main import attention\n",
        },
    )
    reading = folders.read(folder, NAMES)
    assert reading.kind == "one" and reading.entry.name == "main.py"


def test_a_package_one_file_or_one_notebook_is_one_submission(tmp_path):
    assert folders.read(_folder(tmp_path / "a", {"__init__.py": "", "x.py": FULL}), NAMES).entry.name == "__init__.py"
    assert folders.read(_folder(tmp_path / "b", {"anything.py": "import torch\n"}), NAMES).entry.name == "anything.py"
    assert folders.read(_folder(tmp_path / "c", {"n.ipynb": "{}", "data.txt": "1"}), NAMES).entry.name == "n.ipynb"


@pytest.mark.parametrize(
    "files, said",
    [
        ({"a.py": "x = 1\n", "b.py": "y = 2\n"}, "none of its 2 files defines a graded name"),
        ({"a.py": "from b import *\n", "b.py": "from a import *\n"}, "none of its 2 files defines a graded name"),
        (
            {"a.py": "from b import *\n" + FULL, "b.py": "from a import *\n" + FULL},
            "say which is the submission's entry",
        ),
    ],
)
def test_a_folder_that_cannot_be_told_is_a_question_naming_what_to_do(tmp_path, files, said):
    reading = folders.read(_folder(tmp_path, files), NAMES)
    assert reading.kind == "ambiguous" and said in reading.why and "\n" not in reading.why


def test_one_file_of_answers_beside_notes_is_one_submission_and_the_teacher_is_told_what_it_leaves_aside(tmp_path):
    folder = _folder(tmp_path, {"alice.py": FULL, "notes.py": "x = 1\n"})
    reading = folders.read(folder, NAMES)
    assert reading.entry.name == "alice.py" and "notes.py defines none of the graded names" in reading.note


def test_students_files_beside_zips_or_folders_of_code_are_a_batch_and_a_file_defining_nothing_gets_its_row(tmp_path):
    folder = _folder(tmp_path, {"carol.py": FULL, "alice.zip": "", "bob.zip": ""})
    (folder / "dave").mkdir()
    (folder / "dave" / "hw.py").write_text(FULL)
    (folder / "data").mkdir()  # no code: left aside
    (folder / "data" / "x.txt").write_text("1")
    reading = folders.read(folder, NAMES)
    assert reading.kind == "batch" and [p.name for p in reading.members] == ["carol.py", "alice.zip", "bob.zip", "dave"]
    folder = _folder(tmp_path / "b", {"alice.py": FULL, "bob.py": FULL, "empty.py": ""})
    assert [p.name for p in folders.read(folder, NAMES).members] == ["alice.py", "bob.py", "empty.py"]


def test_one_students_folder_is_never_a_batch(tmp_path):
    folder = _folder(tmp_path, {"solution.py": FULL, "scratch.py": "def softmax(x):\n    pass\n"})
    assert folders.read(folder, NAMES, one=True).entry.name == "solution.py"
    folder = _folder(
        tmp_path / "b", {"hw.ipynb": json.dumps({"cells": [{"cell_type": "code", "source": FULL}]}), "hw.py": FULL}
    )
    assert folders.read(folder, NAMES, one=True).entry.name == "hw.py"  # a notebook and its exported script
    folder = _folder(tmp_path / "c", {})
    (folder / "hw3-main").mkdir()
    (folder / "hw3-main" / "attention.py").write_text(FULL)
    assert folders.read(folder, NAMES, one=True).entry.name == "attention.py"
    folder = _folder(tmp_path / "d", {"a.py": FULL, "b.py": FULL})
    assert "keep one, or name it attention_student.py" in folders.read(folder, NAMES, one=True).why


def test_the_teacher_may_name_the_entry(tmp_path):
    folder = _folder(tmp_path / "b", {"alice.py": FULL, "bob.py": FULL, "notes.py": "x = 1\n"})
    assert folders.read(folder, NAMES, entry="alice.py").entry.name == "alice.py"
    assert "no such file" in folders.read(folder, NAMES, entry="nothing.py").why


def test_an_ambiguous_folder_is_refused_before_anything_is_graded(tmp_path):
    folder = _folder(tmp_path, {"a.py": "x = 1\n", "b.py": "y = 2\n"})
    stream = io.StringIO()
    assert grade_command([folder], tmp_path / "out", stream=stream, report=io.StringIO()) == 2
    assert stream.getvalue().count("\n") == 1 and "--entry FILE" in stream.getvalue()
    assert not (tmp_path / "out" / "gradebook.csv").exists()


@pytest.mark.grading
def test_a_tools_own_folders_among_the_given_paths_are_left_aside_and_the_students_are_graded(tmp_path):
    """``grade submissions/*`` after something imported a student's file there, in a download unzipped on a Mac:
    the shell's ``*`` names ``__pycache__`` and ``__MACOSX`` too, which are no one's submission (the first alone
    refused the whole batch; the second was a student of its own, 0 points in the gradebook)."""
    folder = _folder(tmp_path, {"alice.py": "def softmax(x, dim=-1):\n    return x\n", "bob.py": FULL})
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "alice.cpython-311.pyc").write_bytes(b"\x00" * 16)
    (folder / "__MACOSX" / "carol").mkdir(parents=True)  # a resource fork of a folder of code, as a Mac zips it
    (folder / "__MACOSX" / "carol" / "._attention.py").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X")
    (folder / "__MACOSX" / "._bob.py").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X")
    stream, report = io.StringIO(), io.StringIO()
    given = sorted(folder.iterdir())
    assert grade_command(given, tmp_path / "out", stream=stream, report=report) == 0, stream.getvalue()[-600:]
    assert "__pycache__ is left aside: Python's bytecode cache" in stream.getvalue()
    assert "__MACOSX is left aside: the files' metadata a Mac adds" in stream.getvalue()
    graded = [line.split()[0] for line in report.getvalue().splitlines() if " / " in line]
    assert sorted(last_part(g) for g in graded) == ["alice", "bob"]
    # A folder given by a name that only starts like a hidden one is graded: `grade ..` from inside it.
    stream, report = io.StringIO(), io.StringIO()
    assert grade_command([folder / "__MACOSX" / ".."], tmp_path / "up", stream=stream, report=report) == 0
    graded = [line.split()[0] for line in report.getvalue().splitlines() if " / " in line]
    assert sorted(last_part(g) for g in graded) == ["alice", "bob"], stream.getvalue()[-600:]


def test_a_folder_of_students_files_is_graded_one_row_each(tmp_path):
    from attention_core import reference  # noqa: PLC0415

    with open(reference.__file__, encoding="utf-8") as handle:
        source = handle.read()
    folder = _folder(tmp_path, {"alice.py": source, "bob.py": source.replace("math.sqrt(", "(")})
    report = io.StringIO()
    assert grade_command([folder], tmp_path / "out", stream=io.StringIO(), report=report) == 0
    scores = {
        last_part(line.split()[0]): line.split()[1:4]
        for line in report.getvalue().splitlines()
        if " / " in line and line.startswith(str(folder))
    }
    assert set(scores) == {"alice", "bob"} and scores["alice"][0] == scores["alice"][2] != scores["bob"][0]
