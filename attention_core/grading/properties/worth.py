"""What each property of an assignment is worth, and who sees it (a check's: ``harness/reading/points.py``, the
one rule the grader, the kit and the students' self-check read). A property's
points are made in ``properties.probes`` from ``property_points`` and ``checks:`` (through
:func:`property_points`); its visibility, like a check's, from ``checks:`` first.
"""

from attention_core.harness.reading.points import Worth
from attention_core.harness.text import first_given


def property_points(assignment, property_id, points):
    """The points of the property ``property_id``: ``checks:``'s, else ``points``; and whether ``checks:`` set
    them."""
    override = assignment.settings.override(property_id)
    return float(first_given(override.points, points)), override.points is not None


def of_property(assignment, probe):
    """The Worth of the property ``probe`` (its points made by ``properties.probes``)."""
    override = assignment.settings.override(probe.id)
    return Worth(probe.points, first_given(override.visibility, assignment.settings.visibility))
