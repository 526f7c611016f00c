"""A graded submission as data: each check's :class:`Grade`, and the :class:`SubmissionGrade` holding them;
what a grade is earned with (:func:`charge_unearned`)."""

import re
from dataclasses import dataclass, field
from pathlib import Path

from attention_core.grading.properties.model import is_property
from attention_core.harness.checking.results import Result, Status
from attention_core.harness.reading.model import ShapeExpectation
from attention_core.harness.text import points as points_text

NEUTRAL = (Status.CASE_ERROR, Status.HARNESS_ERROR, Status.PENDING)  # no one's to pay, no one's to earn


@dataclass
class Grade:
    """One check of one submission: its result, points and what the feedback says."""

    check_id: str
    item: object  # the check's CheckItem (or the load error's item)
    result: Result
    score: float
    max_score: float
    visibility: str = "visible"
    source: str = ""  # the document and cell the check comes from
    diagnosis: str = ""
    call: str = ""  # the call as the student's function sees it (feedback.call_text)
    charged: str = ""  # what else this check's score stands for (its gradients, not checked: one charge)
    mistakes: tuple = ()  # the mistakes its feedback names as likely, each in its own words (summary.csv's rows)
    worth: float | None = None  # the check's own points where a charge moved points onto or off it (else max_score)
    stands_for: tuple = ()  # (check id, its own points) of each check not run whose points this one carries

    @property
    def possible(self):
        """The check's own points, whatever a charge moved: what a submission that passes it earns (a gradebook's
        column)."""
        return self.max_score if self.worth is None else self.worth


@dataclass
class SubmissionGrade:
    """A submission graded: its name, each check's grade, and what happened at import."""

    name: str
    path: Path
    grades: list = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""  # import problems and other messages for the whole submission
    error: str = ""  # why the grader could not grade it (its own fault): the row is 0 until graded again
    protections: dict = field(default_factory=dict)  # the sandbox's: "held" and "missing" (name -> why)

    @property
    def score(self):
        return sum(g.score for g in self.grades)

    @property
    def max_score(self):
        return sum(g.max_score for g in self.grades)


def charge_unearned(grades):
    """A property, and a check of shapes alone, is a charge, never a credit for nothing: it is earned only where
    every value check of its graded name passes. Where one fails, that check stands for them: their points are
    moved onto it (the first failed one), so one mistake is charged once and an answer that computes nothing
    earns nothing. What they found stays their feedback."""
    value_checks, riders = {}, []
    for grade in grades:
        name = _name_of(grade)
        if name is None:
            continue
        if is_property(grade.check_id) or _shapes_only(grade):
            probe = getattr(grade.item, "probe", None)  # a property rides on every name its relation calls
            others = sorted(probe.names - {name}) if probe is not None else []
            riders.append((grade, [name, *others]))
        elif not grade.check_id.endswith("/backward") and grade.result.status not in NEUTRAL:
            value_checks.setdefault(name, []).append(grade)
    charged = {}  # the failed check -> the grades it stands for, and its name
    for grade, names in riders:
        for name in names:  # its own name first: where several fail, the charge is its own name's
            failed = next((g for g in value_checks.get(name, ()) if not g.result.passed), None)
            if failed is not None and grade.max_score > 0:
                charged.setdefault(id(failed), (failed, name, []))[2].append(grade)
                break
    for failed, name, moved in charged.values():
        total, kinds = sum(g.max_score for g in moved), _counted(moved)
        for grade in moved:
            grade.worth = grade.possible
            grade.score, grade.max_score = 0.0, 0.0
            grade.charged = " ".join(
                filter(
                    None,
                    [
                        (
                            f"Not credited on its own: `{name}` {_gives(failed)}, and this is earned only with right "
                            f"values; its points are charged once, with {failed.check_id}."
                        ),
                        grade.charged,
                    ],
                )
            )
        failed.worth = failed.possible
        failed.max_score += total
        failed.charged = " ".join(
            filter(
                None,
                [
                    failed.charged,
                    (
                        f"It also stands for {kinds} resting on `{name}` ({points_text(total)} point{'s' * (total != 1)}): "
                        f"those are earned only with its right values, so one mistake is charged once."
                    ),
                ],
            )
        )


def _name_of(grade):
    if grade.item is None or getattr(grade.item, "error", None) is not None:
        return None
    return getattr(getattr(grade.item, "check", None), "function", None)


def _shapes_only(grade):
    """Whether a grade is a check (or its backward check) whose expectations read shapes alone."""
    expectations = getattr(grade.item.check, "expectations", ())
    return bool(expectations) and all(isinstance(e, ShapeExpectation) for e in expectations)


def _counted(moved):
    """ "2 properties and 1 check of shapes (with its backward check)": what ``moved`` holds, in words."""
    properties = sum(is_property(g.check_id) for g in moved)
    shapes = {g.check_id.removesuffix("/backward") for g in moved if not is_property(g.check_id)}
    backward = any(g.check_id.endswith("/backward") or "backward check" in g.charged for g in moved)
    both = "its backward check" if len(shapes) == 1 else "their backward checks"
    parts = [
        f"{properties} propert{'ies' if properties != 1 else 'y'}" if properties else "",
        f"{len(shapes)} check{'s' * (len(shapes) != 1)} of shapes" + (f" with {both}" if backward else "")
        if shapes
        else "",
    ]
    return " and ".join(filter(None, parts))


def _gives(failed):
    """What a failed value check says of its name: wrong values, or none to judge (it raised, hung, was missing,
    or the file did not import)."""
    if failed.result.status is Status.FAILED:
        return "gives wrong values"
    return f"gives no values to judge (its check: {failed.result.status})"


def headline(problem):
    """A submission's import problem in one line, for each check it fails: its first line, and its exception's
    where that is further down (a syntax error's report starts with its file and line)."""
    lines = [line.strip() for line in problem.split("\n") if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    if len(lines) > 1 and re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", last):
        return f"{lines[0]}: {last}"
    return lines[0]
