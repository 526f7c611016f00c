"""What a check is worth and who sees it: the one rule that grading, a students' kit and the self-check's points read.

A check's points come from ``assignment.yaml``'s ``checks:`` (each key from the most specific entry that
sets it: see ``Settings.override``), else from its case file (the check, its case, the file's ``defaults``,
then ``points:`` of ``assignment.yaml``); its backward check's from ``checks:``, else the run's
``gradient_points``. Only a ``call`` check is graded: an ``expr`` check is the document's own arithmetic.
"""

from dataclasses import dataclass

from attention_core.harness.text import first_given


@dataclass(frozen=True)
class Worth:
    """A check's points, its backward check's points (where it has one) and its visibility."""

    points: float
    visibility: str
    gradient_points: float = 0.0


def of_check(assignment, item, gradient_points):
    """The Worth of the check ``item`` (a loaded one), its backward check worth ``gradient_points`` unless
    ``checks:`` says otherwise."""
    override = assignment.settings.override(item.id)
    return Worth(
        float(first_given(override.points, item.check.points, assignment.settings.points)),
        first_given(override.visibility, item.check.visibility, assignment.settings.visibility),
        float(first_given(override.gradient_points, gradient_points)),
    )


def visible(assignment, item):
    """Whether students see the check ``item`` (a students' kit holds only these)."""
    return of_check(assignment, item, 0.0).visibility == "visible"


def graded_points(assignment, item):
    """The points grading gives the values of the loaded check ``item``: 0 for an ``expr`` check (never graded)."""
    return of_check(assignment, item, 0.0).points if item.check.kind == "call" else 0.0


def visible_points(assignment, item):
    """The points of ``item`` that students can count themselves: a loaded, graded (``call``) check's that they
    see, as grading gives them for its values; None for any other check (it counts toward no visible total)."""
    if item.error is not None or item.check.kind != "call" or not visible(assignment, item):
        return None
    return of_check(assignment, item, 0.0).points
