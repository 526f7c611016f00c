"""What the batch command needs to know of an assignment before it schedules anything, read by a grader.

The command imports no torch: a grader (a process of its own, or this one where torch is loaded already)
reads the assignment and sends a :class:`Plan` back. Imports nothing but the standard library.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """The graded names, why nothing could be graded ("" where something can), the case errors
    (``location: message``), the hash of everything a grade depends on besides the submission
    (records.batch_key) and the assignment's name."""

    names: tuple = ()
    problem: str = ""
    broken: tuple = ()
    key: str = ""
    assignment: str = ""
