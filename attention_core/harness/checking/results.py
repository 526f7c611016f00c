"""A check's result as data: a status and structured failures. Each front end renders it.

The statuses, in the words every report uses:

* ``passed``: every expectation met.
* ``failed``: the computation ran and an expectation was not met (a mismatch).
* ``case error``: the case itself could not be read or evaluated (a file:line to fix).
* ``not implemented``: the implementation has no such function, or it raised NotImplementedError.
* ``implementation error``: the implementation raised; its exception and the traceback lines
  inside the implementation are kept.
* ``timeout``: grading only: the implementation did not return within its time limit (and the
  function is not called again for that submission).
* ``harness error``: a bug of the harness itself, never a failed check.
* ``pending``: the check is a draft: its computation or an expectation is still to be written
  (or recorded); never counted as passed.
"""

import enum
from dataclasses import dataclass, field

import torch

from attention_core.harness.text import escape_lines

MAX_FAILURES = 10  # expectations a report shows in full


class Status(enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    CASE_ERROR = "case error"
    NOT_IMPLEMENTED = "not implemented"
    IMPLEMENTATION_ERROR = "implementation error"
    TIMEOUT = "timeout"
    HARNESS_ERROR = "harness error"
    PENDING = "pending"

    def __str__(self):
        return self.value


class CallFailed(Exception):
    """Raised by an implementation's stand-in (an out-of-process call) that did not return a value."""

    def __init__(self, status, message, details=""):
        super().__init__(message)
        self.status, self.message, self.details = status, message, details


@dataclass(frozen=True)
class Failure:
    """One expectation not met: which target, where in the case file, and the staged mismatch."""

    target: str
    line: int
    mismatch: object  # compare.Mismatch: stage, message, and for "values" the compared elements
    shape: tuple | None = None  # the computed value's shape, where it is a tensor

    def dense(self):
        """(expected, actual, allowed, shown) at the computed value's shape, for drawing.

        ``shown`` is True where the expectation gives a value (an elided print shows only its
        corners); elsewhere expected and allowed are NaN. None unless the mismatch is in values.
        """
        m = self.mismatch
        if m.stage != "values" or self.shape is None:
            return None
        if m.positions is None:  # every element was compared, in row-major order
            return (
                *(v.reshape(self.shape) for v in (m.expected, m.actual.double(), m.allowance)),
                torch.ones(self.shape, dtype=torch.bool),
            )
        index = tuple(m.positions.T) if len(self.shape) else ()
        tensors = []
        for values in (m.expected, m.actual.double(), m.allowance):
            dense = torch.full(self.shape, float("nan"), dtype=torch.float64)
            dense[index] = values.reshape(-1) if len(self.shape) else values.reshape(())
            tensors.append(dense)
        shown = torch.zeros(self.shape, dtype=torch.bool)
        shown[index] = True
        return (*tensors, shown)

    def render(self):
        return f"{self.target} (line {self.line}): {self.mismatch.message}"


@dataclass(frozen=True)
class Result:
    """What running one check found."""

    status: Status
    check_id: str
    location: str  # path:line of the check (or of the case error)
    header: str = ""  # what ran: the check's kind and source, device and dtype
    failures: tuple[Failure, ...] = ()
    message: str = ""  # for the error statuses: what went wrong, in one paragraph
    details: str = ""  # traceback lines: the implementation's own, or the harness's whole one
    outputs: dict = field(default_factory=dict, compare=False)  # each result name and target, as computed

    @property
    def passed(self):
        return self.status is Status.PASSED

    @property
    def report(self):
        """The full report as text (see :func:`render`)."""
        return render(self)


def render(result, *, traceback=False):
    """The full report. A harness error's Python traceback is shown only with ``traceback=True``."""
    if result.passed:
        return f"{result.location}: {result.check_id}: passed"
    if not result.header:  # a case that did not load: file:line: what to fix
        return escape_lines(f"{result.location}: {result.message}")
    body = [failure.render() for failure in result.failures[:MAX_FAILURES]]
    if len(result.failures) > MAX_FAILURES:
        body.append(f"… and {len(result.failures) - MAX_FAILURES} more expectations not met")
    if result.message:
        body.insert(0, f"{result.status}: {result.message}")
    if result.details and (traceback or result.status is not Status.HARNESS_ERROR):
        body.append(result.details.rstrip("\n"))
    elif result.details:
        body.append("(a bug of the harness: -v shows its traceback)")
    return escape_lines(_join(_head(result), body))


def one_line(result):
    """The first line of a result's report, with its status: the CLI's summary of a failure."""
    return escape_lines(f"{_head(result)} [{result.status}]")


def _head(result):
    head = f"{result.location}: {result.check_id}"
    return f"{head} — {result.header}" if result.header else head


def _join(head, body):
    return head + "\n" + "\n\n".join(body) if body else head
