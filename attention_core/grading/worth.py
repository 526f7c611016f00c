"""What each check and property of an assignment is worth, and who sees it: resolved here alone.

A check's points come from ``assignment.yaml``'s ``checks:`` (each key from the most specific entry that
sets it: see ``Settings.override``), else from its case file (the check, its case, the file's ``defaults``,
then ``points:`` of ``assignment.yaml``); its backward check's from ``checks:``, else the run's
``gradient_points``. A property's points are made in ``properties.probes`` from ``property_points`` and
``checks:`` (through :func:`property_points`); its visibility, like a check's, from ``checks:`` first.
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


def property_points(assignment, property_id, points):
    """The points of the property ``property_id``: ``checks:``'s, else ``points``; and whether ``checks:`` set
    them."""
    override = assignment.settings.override(property_id)
    return float(first_given(override.points, points)), override.points is not None


def of_property(assignment, probe):
    """The Worth of the property ``probe`` (its points made by ``properties.probes``)."""
    override = assignment.settings.override(probe.id)
    return Worth(probe.points, first_given(override.visibility, assignment.settings.visibility))


def visible(assignment, item):
    """Whether students see the check ``item`` (a students' kit holds only these)."""
    return of_check(assignment, item, 0.0).visibility == "visible"
