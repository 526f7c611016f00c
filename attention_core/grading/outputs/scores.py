"""A graded submission as the batch command keeps it: one record type, written and read by itself.

The gradebook, ``summary.csv``, the class page, the platforms' files and ``record.json`` all read
:class:`Scores`; a grader process sends one back for each submission it grades. Imports no torch.
"""

from dataclasses import dataclass, field

KINDS = ("value", "backward", "property")  # what a grade checks: a call's values, its gradients, a property


@dataclass(frozen=True)
class Score:
    """One check's grade: its points, what it checks and the mistakes its feedback names (each in its own words)."""

    check_id: str
    score: float
    max_score: float = 0.0
    mistakes: tuple = ()
    kind: str = "value"
    worth: float | None = None  # the check's own points, where a charge moved points onto or off it (Grade's)
    passed: bool | None = None  # whether the check passed; None: not told (told by its points alone)

    @property
    def possible(self):
        """What a submission that passes this check earns on it: its column's points in a gradebook."""
        return self.max_score if self.worth is None else self.worth

    def to_record(self):
        record = {
            "check": self.check_id,
            "score": self.score,
            "max_score": self.max_score,
            "kind": self.kind,
            "mistakes": list(self.mistakes),
        }
        if self.worth is not None:
            record["worth"] = self.worth
        if self.passed is not None:
            record["passed"] = self.passed
        return record

    @property
    def failed(self):
        """Whether the check failed: it did not pass (a property worth no points too), or it lost points."""
        return self.passed is False or self.score < self.max_score

    @classmethod
    def from_record(cls, record):
        kind = str(record["kind"])
        if kind not in KINDS:
            raise ValueError(f"a grade of kind {kind[:40]!r}")
        return cls(
            str(record["check"]),
            float(record["score"]),
            float(record["max_score"]),
            tuple(map(str, record["mistakes"])),
            kind,
            None if record.get("worth") is None else float(record["worth"]),
            None if record.get("passed") is None else bool(record["passed"]),
        )


@dataclass
class Scores:
    """What the gradebook and the summary need of a graded submission."""

    name: str
    score: float
    max_score: float
    protections: dict = field(default_factory=dict)
    grades: list = field(default_factory=list)  # Score per check
    error: str = ""  # why the grader could not grade it: no record is kept, the next run grades it again

    def to_record(self):
        return {
            "name": self.name,
            "score": self.score,
            "max_score": self.max_score,
            "protections": self.protections,
            "grades": [g.to_record() for g in self.grades],
            "error": self.error,
        }

    @classmethod
    def from_record(cls, record):
        """The Scores a record holds; ValueError, KeyError or TypeError where it is not one."""
        return cls(
            str(record["name"]),
            float(record["score"]),
            float(record["max_score"]),
            dict(record.get("protections") or {}),
            [Score.from_record(g) for g in record["grades"]],
            str(record.get("error") or ""),
        )
