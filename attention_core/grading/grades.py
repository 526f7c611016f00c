"""A graded submission as data: each check's :class:`Grade`, and the :class:`SubmissionGrade` holding them."""

from dataclasses import dataclass, field
from pathlib import Path

from attention_core.harness.checking.results import Result


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


@dataclass
class SubmissionGrade:
    """A submission graded: its name, each check's grade, and what happened at import."""

    name: str
    path: Path
    grades: list = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""  # import problems and other messages for the whole submission
    protections: dict = field(default_factory=dict)  # the sandbox's: "held" and "missing" (name -> why)

    @property
    def score(self):
        return sum(g.score for g in self.grades)

    @property
    def max_score(self):
        return sum(g.max_score for g in self.grades)
