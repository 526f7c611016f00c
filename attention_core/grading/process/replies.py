"""What a submission's process may send back, checked field by field before the grader uses it.

The statuses of a call, the outcome the grader reads (:class:`CallOutcome`), the checks of the
child's import report and call replies (every field's type, a size cap on every text), and its
printed output, of which only the first bytes are kept (:class:`Output`).
"""

import os
import re
from dataclasses import dataclass, field

import torch

from attention_core.grading.server import wire

OK = "ok"
RAISED = "raised"
NOT_IMPLEMENTED = "not implemented"
TIMEOUT = "timeout"
CRASHED = "crashed"
TOO_LARGE = "too large"  # results over the bytes the call can need: not sent (the process goes on)
IMPORT_ERROR = "import error"

CHILD_STATUSES = (OK, RAISED, NOT_IMPLEMENTED, CRASHED, TOO_LARGE)


@dataclass
class CallOutcome:
    """What one call of a submission's function did.

    ``status``: ok, raised, not implemented (NotImplementedError or no such function), timeout,
    crashed (the process died or raised SystemExit/KeyboardInterrupt; it has been replaced) or too large (the
    results were over the bytes the call can need: the process did not send them).
    ``traceback`` holds the lines inside the submission only. ``mutated`` and the keys of ``grads``
    label tensor arguments as they were passed: an int for a position, a str for a keyword.
    """

    status: str
    value: object = None
    message: str = ""
    traceback: tuple[str, ...] = ()
    output: str = ""
    mutated: tuple = ()
    seconds: float = 0.0
    grads: dict | None = None  # call_grad only: label -> gradient, or None where none flowed
    after: dict | None = None  # call_grad only: label -> the tensor argument as the call left it
    grad_error: str | None = None
    reply: bytes | None = None  # a small reply's bytes: the same bytes, the same outcome (see Worker.outcome_of)


def check_hello(reply, names):
    if not isinstance(reply, dict) or reply.get("status") not in (OK, IMPORT_ERROR):
        raise ValueError("not an import report")
    text(reply["message"])
    lines(reply["traceback"])
    if not all(n in names for n in reply["names"]):
        raise ValueError("a name outside the spec")


def checked_outcome(reply):
    """A CallOutcome from a child's reply, every field's type checked."""
    if not isinstance(reply, dict) or reply.get("status") not in CHILD_STATUSES:
        raise ValueError("no known status")
    mutated = reply.get("mutated", [])
    if not (isinstance(mutated, list) and all(type(m) in (int, str) for m in mutated)):
        raise ValueError("mutated is not a list of labels")
    outcome = CallOutcome(
        reply["status"],
        value=reply.get("value"),
        message=text(reply.get("message", "")),
        traceback=lines(reply.get("traceback", [])),
        mutated=tuple(mutated),
    )
    if "grads" in reply:
        grads = {}
        for pair in reply["grads"]:
            label, g = pair
            if type(label) not in (int, str) or not (g is None or isinstance(g, torch.Tensor)):
                raise ValueError("grads is not a list of (label, tensor or None)")
            grads[label] = g
        outcome.grads = grads
        outcome.grad_error = None if reply.get("grad_error") is None else text(reply["grad_error"])
        after = {}
        for pair in reply.get("after", []):
            label, t = pair
            if type(label) not in (int, str) or not isinstance(t, torch.Tensor):
                raise ValueError("after is not a list of (label, tensor)")
            after[label] = t
        outcome.after = after
    return outcome


ECHOED = 200  # the most characters of a submission's own text (a message, a line) that feedback repeats
TRACEBACK_LINES = 60  # a traceback's last lines that feedback shows (the innermost frames, where it failed)
OUTPUT_BYTES = 4096  # of what a submission prints, the first bytes kept
PRINTED_LINES = 20  # of those, the first lines feedback shows, each cut at ECHOED characters


def printed(output):
    """What a submission printed, as feedback shows it: its first :data:`PRINTED_LINES` lines, each cut at
    :data:`ECHOED` characters, and how much more there was."""
    lines = output.rstrip("\n").splitlines()
    dropped = lines.pop() if lines and _NOT_SHOWN.fullmatch(lines[-1]) else None  # the bytes not kept, told last
    shown = [line if len(line) <= ECHOED else line[: ECHOED - 1] + "…" for line in lines[:PRINTED_LINES]]
    if len(lines) > PRINTED_LINES:
        shown.append(f"… and {len(lines) - PRINTED_LINES} more lines")
    if dropped is not None:
        shown.append(dropped)
    return "\n".join(shown)


_NOT_SHOWN = re.compile(r"\[\.\.\. \d+ more bytes of output not shown\]")


def text(value):
    if not isinstance(value, str):
        raise TypeError("a message is not a str")
    if len(value) <= ECHOED:
        return value
    cut = value[: ECHOED - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > ECHOED // 2 else cut) + "…"  # at a word's end, not inside a name


def lines(value):
    if not (isinstance(value, list) and all(isinstance(line, str) for line in value)):
        raise TypeError("a traceback is not a list of str")
    kept = [line if len(line) <= ECHOED else line[: ECHOED - 1] + "…" for line in value[-TRACEBACK_LINES:]]
    if len(value) > TRACEBACK_LINES:
        kept.insert(0, f"… ({len(value) - TRACEBACK_LINES} lines of the traceback above not shown)")
    return tuple(kept)


@dataclass
class Output:
    """A stream's first ``limit`` bytes and how many there were."""

    limit: int
    head: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, data):
        room = self.limit - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.total += len(data)

    def text(self):
        text = self.head.decode("utf-8", "replace")
        if self.total > len(self.head):
            text += f"\n[... {self.total - len(self.head)} more bytes of output not shown]"
        return text


def decoded(raw):
    """A message's bytes (header included) -> its value."""
    n_text = wire.HEADER.unpack_from(raw)[0]
    body = raw[wire.HEADER.size :]
    return wire.decode(bytes(body[:n_text]), body[n_text:])


def drain(fd, output, chunks=16):
    """Read what the pipe holds (up to ``chunks`` MiB: a writer that never stops must not hold us) into
    ``output``; False once every writer has closed it."""
    for _ in range(chunks):
        try:
            data = os.read(fd, 1 << 20)
        except BlockingIOError:
            return True
        if not data:
            return False
        output.add(data)
    return True
