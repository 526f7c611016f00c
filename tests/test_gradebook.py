"""The gradebook of an output folder grows: grading into it again replaces the rows graded now and keeps
every other (a late student drops nobody)."""

import csv
from types import SimpleNamespace

import pytest

from attention_core.grading.intake import ids
from attention_core.grading.outputs.gradebook import write_gradebook
from attention_core.grading.outputs.scores import Score, Scores
from tests.outputs import HEAD, grade_head


def _graded(name, **scores):
    grades = [Score(check, score, 2.0) for check, score in scores.items()]
    return SimpleNamespace(name=name, score=sum(scores.values()), max_score=2.0 * len(scores), grades=grades)


def _rows(path):
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def test_a_second_batch_replaces_its_own_rows_and_keeps_the_others(tmp_path):
    book = tmp_path / "gradebook.csv"
    write_gradebook([_graded("alice", a=1.0, b=2.0), _graded("bob", a=0.0, b=2.0)], book)
    write_gradebook([_graded("carol", a=2.0, c=1.0), _graded("alice", a=2.0, b=2.0)], book)
    assert _rows(book) == [
        ["submission", "score", "max_score", "a", "b", "c"],
        ["Points Possible", "4", "4", "2", "2", "2"],  # as Canvas's and Gradescope's exports have it
        ["alice", "4", "4", "2", "2", ""],
        ["bob", "2", "4", "0", "2", ""],
        ["carol", "3", "4", "2", "", "1"],
    ]
    assert not (tmp_path / "gradebook.csv.partial").exists()


def test_points_possible_are_each_check_s_own_whatever_a_failed_check_stands_for(tmp_path):
    """A failed check stands for the checks that rest on its values (its backward check, a property): their points
    move onto it in that submission's grades, so that one mistake is charged once. A column's points possible are
    the check's own all the same: what a passing submission earns there, and the row adds up to the maximum."""
    passing = Scores("alice", 4, 4, grades=[Score("f/c/a", 1, 1), Score("f/c/p", 3, 3, kind="property")])
    failing = Scores(  # a's 1 point and the property's 3, charged once with a
        "bob", 0, 4, grades=[Score("f/c/a", 0, 4, worth=1), Score("f/c/p", 0, 0, kind="property", worth=3)]
    )
    book = tmp_path / "gradebook.csv"
    write_gradebook([failing, passing], book)
    possible = _rows(book)[1]
    assert possible == ["Points Possible", "4", "4", "1", "3"]
    assert sum(float(p) for p in possible[3:]) == float(possible[1])
    recorded = Scores.from_record(failing.to_record())  # a kept record says the same
    assert [g.possible for g in recorded.grades] == [1, 3] and recorded.grades[0].max_score == 4


@pytest.mark.grading
def test_a_submission_graded_alone_has_the_columns_a_batch_gives_it_and_they_add_up_to_its_maximum(tmp_path):
    """A backward check not run (the values are wrong: the value check stands for it) keeps its column, 0 of its
    own points, whether or not another submission of the run passed it."""
    wrong = str(HEAD / "submissions" / "unscaled.py")
    books = {}
    for name, files in (("alone", [wrong]), ("batch", [str(HEAD / "submissions" / "correct.py"), wrong])):
        assert grade_head(*files, "--out", str(tmp_path / name)).returncode == 0
        books[name] = _rows(tmp_path / name / "gradebook.csv")
    header, possible, *rows = books["alone"]
    assert header == books["batch"][0] and possible == books["batch"][1]
    assert any(c.endswith("/backward") for c in header)
    assert sum(float(p) for p in possible[3:]) == float(possible[1])
    (row,) = rows
    assert sum(float(c) for c in row[3:]) == float(row[1]) and "" not in row[3:]
    assert row == next(r for r in books["batch"][2:] if r[0] == row[0])


def test_a_file_that_is_no_gradebook_is_replaced_not_merged(tmp_path):
    book = tmp_path / "gradebook.csv"
    book.write_text("name,grade\nzed,3\n", encoding="utf-8")
    write_gradebook([_graded("alice", a=1.0)], book)
    assert _rows(book) == [
        ["submission", "score", "max_score", "a"],
        ["Points Possible", "2", "2", "2"],
        ["alice", "1", "2", "1"],
    ]


@pytest.mark.grading
def test_a_late_student_graded_into_the_same_folder_leaves_the_other_rows(tmp_path):
    out = tmp_path / "out"
    for submission in ("correct.py", "unscaled.py"):
        run = grade_head(
            str(HEAD / "submissions" / submission),
            "--out",
            str(out),
            cwd=tmp_path,
        )  # HEAD lies outside
        assert run.returncode == 0, run.stderr[-2000:]
    rows = {row[0]: row[1:3] for row in _rows(out / "gradebook.csv")[2:]}
    assert rows == {
        str(HEAD / "submissions" / "correct"): ["6", "6"],
        str(HEAD / "submissions" / "unscaled"): ["0", "6"],
    }


def test_rows_of_different_maximums_are_reported(tmp_path):
    book = tmp_path / "gradebook.csv"
    assert write_gradebook([_graded("alice", a=1.0)], book) == {"2"}
    assert write_gradebook([_graded("bob", a=1.0, b=1.0)], book) == {"2", "4"}


def test_the_class_at_a_glance_counts_failed_checks_and_named_mistakes_largest_first(tmp_path):
    from attention_core.grading.outputs.batch import class_summary  # noqa: PLC0415
    from attention_core.grading.outputs.scores import Score, Scores  # noqa: PLC0415

    masked_after = "the mask is applied after the softmax"
    scores = [
        Scores(
            "a",
            1,
            3,
            grades=[Score("f/c/k", 0, 1, (masked_after,)), Score("f/c/j", 1, 1), Score("f/c/i", 0, 1, (masked_after,))],
        ),
        Scores("b", 2, 3, grades=[Score("f/c/k", 0, 1, (masked_after,)), Score("f/c/j", 1, 1), Score("f/c/i", 1, 1)]),
        Scores("c", 3, 3, grades=[Score("f/c/k", 1, 1), Score("f/c/j", 1, 1), Score("f/c/i", 1, 1)]),
    ]
    rows = class_summary(scores, tmp_path / "summary.csv")
    assert rows == [("mistake", masked_after, 2), ("check", "f/c/k", 2), ("check", "f/c/i", 1)]
    assert _rows(tmp_path / "summary.csv")[:2] == [
        ["kind", "what", "students", "of"],
        ["mistake", masked_after, "2", "3"],
    ]


def test_the_class_page_draws_a_heatmap_of_what_each_student_lost_and_lists_mistakes_and_properties(tmp_path):
    from attention_core.grading.outputs.batch import class_summary  # noqa: PLC0415
    from attention_core.grading.outputs.scores import Score, Scores  # noqa: PLC0415
    from attention_core.report.class_page import class_page  # noqa: PLC0415

    scores = [
        Scores(
            "a<b>",
            1,
            4,
            grades=[
                Score("f/c/k", 0, 1, ("the softmax is left out",)),
                Score("f/c/j", 1, 1),
                Score("properties/f/causal", 0, 1, kind="property"),
                Score("f/c/half", 0.5, 1),
            ],
        ),
        Scores(
            "z",
            4,
            4,
            grades=[
                Score("f/c/k", 1, 1),
                Score("f/c/j", 1, 1),
                Score("properties/f/causal", 1, 1, kind="property"),
                Score("f/c/half", 1, 1),
            ],
        ),
    ]
    rows = class_summary(scores, tmp_path / "summary.csv")
    assert ("property", "properties/f/causal", 1) in rows
    page = class_page(scores, rows)
    heat = page.split("<table class=heat>")[1].split("</table>")[0]
    assert heat.count("<tr>") == 3 and "a&lt;b&gt;" in heat  # a header, then one row a student, escaped
    assert heat.count("<th class=c") == 3  # the checks someone lost points on: not f/c/j
    assert "rgb(198,40,40)" in heat and "rgb(215,142,136)" in heat and "rgb(232,245,233)" in heat  # all, half, none
    assert page.index("Named mistakes") < page.index("Properties") < page.index("Checks")
    assert "1 of 2</td><td>the softmax is left out" in page


@pytest.mark.grading
def test_grading_again_skips_unchanged_submissions_and_grades_a_changed_one(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    for name in ("correct.py", "unscaled.py"):
        (subs / name).write_bytes((HEAD / "submissions" / name).read_bytes())

    def grade(*extra):
        run = grade_head(
            str(subs / "correct.py"),
            str(subs / "unscaled.py"),
            "--out",
            str(out),
            *extra,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        return run.stderr

    assert "graded 2" in grade()
    written = {p: p.stat().st_mtime_ns for p in out.rglob("results.json")}
    assert "graded 0, skipped 2 as unchanged" in grade()
    assert {p: p.stat().st_mtime_ns for p in out.rglob("results.json")} == written  # left untouched
    (subs / "unscaled.py").write_text((HEAD / "submissions" / "correct.py").read_text() + "\n# fixed\n")
    assert "graded 1, skipped 1 as unchanged" in grade()
    rows = {row[0]: row[1:3] for row in _rows(out / "gradebook.csv")[2:]}
    assert rows == {str(subs / "correct"): ["6", "6"], str(subs / "unscaled"): ["6", "6"]}
    assert "graded 2" in grade("--regrade")


@pytest.mark.grading
def test_a_late_student_whose_file_has_another_students_name_gets_a_row_of_their_own(tmp_path):
    out = tmp_path / "out"
    for student in ("alice", "carol"):
        (tmp_path / student).mkdir()
        (tmp_path / student / "attention.py").write_bytes((HEAD / "submissions" / "correct.py").read_bytes())
    for student in ("alice", "carol", "alice"):
        run = grade_head(
            f"{student}/attention.py",
            "--out",
            "out",
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr[-2000:]
    rows = {row[0] for row in _rows(out / "gradebook.csv")[2:]}
    assert rows == {"alice/attention", "carol/attention"}  # alice's, then carol's; alice again: her own, skipped
    assert "skipped 1 as unchanged" in run.stderr


def test_the_class_at_a_glance_counts_a_failed_property_worth_no_points_and_no_case_file_s_fault(tmp_path):
    """A property that failed where its points were charged to a value check (worth 0 of 0) is counted, and a
    record read back keeps whether it passed; a check that could not be run for a fault of the case file's (0 of 0,
    no one's to pay) is no student's failure."""
    import types  # noqa: PLC0415

    from attention_core.grading.outputs.batch import class_summary  # noqa: PLC0415
    from attention_core.grading.outputs.graders import _scores  # noqa: PLC0415
    from attention_core.grading.outputs.scores import Score, Scores  # noqa: PLC0415
    from attention_core.harness.checking.results import Status  # noqa: PLC0415

    charged = Score("properties/f/causal", 0, 0, kind="property", passed=False)
    assert Score.from_record(charged.to_record()) == charged
    again = class_summary([Scores("a", 0, 1, grades=[Score("f/c/k", 0, 1), charged])], tmp_path / "again.csv")
    assert again == [("check", "f/c/k", 1), ("property", "properties/f/causal", 1)]

    def grade(status, passed):
        result = types.SimpleNamespace(status=status, passed=passed)
        return types.SimpleNamespace(
            check_id="f/c/broken", score=0.0, max_score=0.0, mistakes=(), worth=None, result=result, stands_for=()
        )

    (case_error,) = _scores(grade(Status.CASE_ERROR, False))
    (failed,) = _scores(grade(Status.FAILED, False))
    assert case_error.passed is None and not case_error.failed and failed.failed


def test_no_cell_of_a_csv_the_batch_writes_starts_a_formula_and_reading_it_back_gives_the_text(tmp_path):
    from attention_core.grading.outputs import cells, gradebook  # noqa: PLC0415
    from attention_core.grading.outputs.batch import class_summary  # noqa: PLC0415
    from attention_core.grading.outputs.gradebook import _existing_rows  # noqa: PLC0415
    from attention_core.grading.outputs.scores import Score, Scores  # noqa: PLC0415

    names = ["=cmd|calc", "+1+1", "-x", "@SUM(A1)", "\tx", "'=quoted", "''", "'plain", "plain", "-1.5"]
    scores = [Scores(name, 1.0, 2, grades=[Score("f/c/k", 1.0, 2, ('=HYPERLINK("x")',))]) for name in names]
    gradebook.write_gradebook(scores, tmp_path / "gradebook.csv")
    class_summary(scores, tmp_path / "summary.csv")
    for written in ("gradebook.csv", "summary.csv"):
        with (tmp_path / written).open(newline="", encoding="utf-8") as handle:
            raw = [cell for row in csv.reader(handle) for cell in row]
        assert not any(cell.startswith(cells.FORMULA) for cell in raw if not cells._number(cell)), (written, raw)
    rows, _, _ = _existing_rows(tmp_path / "gradebook.csv")
    assert list(rows) == names  # a regrade reads every name back as it was


def test_ids_that_only_look_alike_are_told_in_the_gradebook_s_notes_and_a_row_key_can_be_the_platform_s(tmp_path):
    book = tmp_path / "gradebook.csv"
    names = ["bob", "bob\u3164", "b\u043eb", "alice"]  # a Hangul filler after it; a Cyrillic o in it
    alike = ids.look_alikes(names)
    assert set(alike) == {"bob", "bob\u3164", "b\u043eb"} and alike["bob"] == ["bob\u3164", "b\u043eb"]
    notes = {name: f"looks like {', '.join(others)}" for name, others in alike.items()}
    write_gradebook([_graded(n, a=1.0) for n in names], book, keys={"alice": "12345"}, notes=notes)
    rows = _rows(book)
    assert rows[0] == ["submission", "score", "max_score", "a", "notes"]
    assert rows[1] == ["Points Possible", "2", "2", "2", ""]
    by_key = {row[0]: row for row in rows[2:]}
    assert by_key["12345"][-1] == "" and "alice" not in by_key
    assert by_key["b\u043eb"][-1] == "looks like bob, bob\u3164"
    write_gradebook([_graded("carol", a=2.0)], book)  # read back: the notes and the points possible stay
    again = {row[0]: row for row in _rows(book)[2:]}
    assert again["b\u043eb"][-1] == "looks like bob, bob\u3164" and again["carol"][-1] == ""
