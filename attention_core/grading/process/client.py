"""The grader's side of the worker: start the server, open submissions, call their functions.

A ``Worker`` has a server forked for it (``forks.py``: by ``worker.py``, started once in a fresh
interpreter, ``-I -S``, with only the folders torch is installed in added to its path) and keeps one
control socket to it. ``Worker.open`` passes the server one end of a new socket pair and the write
end of a new output pipe; the server forks a child, which builds its sandbox, imports the submission
once the grader says so (``wire.GO``) and then talks to the grader directly on that socket. Every
reply is checked against the wire format and a size cap; nothing is unpickled. The child's
stdout and stderr come through the pipe, which the grader drains while it waits, keeping only the
first ``output_limit`` bytes.

Several threads may share one ``Worker`` (each submission used by one thread at a time).
Imports attention_core.spec and nothing else of the package but this room's wire format.
"""

import dataclasses
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

from attention_core import spec
from attention_core.grading.process import forks, plan
from attention_core.grading.process.forks import WorkerError
from attention_core.grading.process.replies import (
    CRASHED,
    OK,
    OUTPUT_BYTES,
    CallOutcome,
    checked_outcome,
    decoded,
)
from attention_core.grading.process.submission import Submission
from attention_core.grading.server import wire
from attention_core.harness.checking import unwritten
from attention_core.harness.reading.settings import BUDGET

__all__ = ["Submission", "Worker", "WorkerError"]

REPLIES_KEPT = 1 << 16  # bytes of a reply up to which identical replies are decoded once per worker
REPLIES_BUDGET = 64 << 20  # bytes of such replies one worker keeps


class Worker:
    """One grading server. A context manager; ``close()`` kills the server and every child."""

    def __init__(
        self,
        *,
        memory_limit=4 << 30,
        budget=BUDGET,
        import_timeout=10.0,
        output_limit=OUTPUT_BYTES,  # bytes of what a submission prints that are kept
        reply_limit=256 << 20,
        sandbox=True,
        namespaces=True,
        names=spec.NAMES,
    ):
        self.names = tuple(names)  # what a submission may be asked for: the assignment's graded names
        self.memory_limit, self.budget, self.import_timeout = memory_limit, budget, import_timeout
        self.output_limit, self.reply_limit = output_limit, reply_limit
        self.scratch = tempfile.mkdtemp(prefix="attention-sandbox-")
        os.chmod(self.scratch, 0o711)  # an unprivileged child may pass through to its own folder
        os.mkdir(os.path.join(self.scratch, "root"), 0o755)
        self.sandbox_plan = (
            plan.plan(forks.site_dirs(), root=os.path.join(self.scratch, "root"), budget=budget, namespaces=namespaces)
            if sandbox
            else None
        )
        self._server = forks.server()
        self._ctl, self._lock, self._open = self._server.ctl, threading.Lock(), set()
        self._shared, self._kept = {}, []  # id(tensor) -> its name in the server; the tensors themselves
        self._requests = {}  # (the caller's name for a call's arguments, …) -> the request's bytes
        self._replies, self._replies_size = {}, 0  # a small reply's bytes -> its outcome; their total size

    @property
    def pid(self):
        return self._server.pid

    def alive(self):
        """Whether the server is still running."""
        return self._server.alive()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def open(self, path, *, entry=None, budget=None, start=True):
        """Fork a child for the submission at ``path`` (a .py file, or a folder with ``entry`` in it).

        ``start=False``: the child's sandbox is built, but nothing of the submission runs until
        :meth:`Submission.start` (or its first call); a grader sets the next submission up so.
        """
        submission = Submission(self, Path(path), entry, self.budget if budget is None else budget)
        with self._lock:
            self._open.add(submission)
        return submission.start() if start else submission

    def share(self, tensors):
        """Keep ``tensors`` in the server: children forked after this receive them as names, not bytes.

        A call whose argument *is* one of these tensors (the same object) sends its name; the
        child gets the server's bytes as they were stored (``wire.Shared``: a private mapping,
        copied only where the child writes). Sharing large arguments once saves copying them for
        every submission and every call. A large prepared input that the grader keeps in a sealed memory file
        (``unwritten.py``) is sent as that file: the server maps the grader's pages rather than holding a copy.
        """
        new = {
            f"t{len(self._shared) + i}": t
            for i, t in enumerate({id(t): t for t in tensors if id(t) not in self._shared}.values())
        }
        if not new:
            return
        files = {k: unwritten.file_of(t) for k, t in new.items()}  # (a large prepared input's: its pages are sent)
        rest = {k: t.detach() for k, t in new.items() if files[k] is None}
        if rest:
            self.request({"op": "share", "tensors": rest})
        for k, fd in files.items():
            if fd is not None:
                t = new[k]
                self.request({"op": "share file", "key": k, "dtype": t.dtype, "shape": list(t.shape)}, fds=[fd])
        with self._lock:
            self._kept += new.values()  # alive as long as the worker: their ids stay theirs
            self._shared.update({id(t): k for k, t in new.items()})

    def server_modules(self):
        """The names in the server's ``sys.modules`` (to check what it imported)."""
        return tuple(self.request({"op": "modules"})["modules"])

    def close(self):
        with self._lock:
            submissions, self._open = list(self._open), set()
        for submission in submissions:
            submission.close()
        self._ctl.close()  # the server kills whatever is left and exits at end of file
        self._server.wait(timeout=10)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def request(self, message, fds=()):
        """Send the server ``message`` (with file descriptors ``fds``); its reply. Raises WorkerError."""
        data = wire.encode(message)
        with self._lock:
            if self._ctl.fileno() < 0:
                raise WorkerError("the worker is closed")
            try:
                if fds:
                    socket.send_fds(self._ctl, [data], list(fds))
                else:
                    self._ctl.sendall(data)
                reply = wire.receive(self._ctl)
            except OSError as e:
                raise WorkerError(f"the grading server stopped answering: {e}") from None
        if reply is None:
            raise WorkerError("the grading server exited")
        if "error" in reply:
            raise WorkerError(reply["error"])
        return reply

    def outcome_of(self, raw):
        """A call's reply (its bytes) -> its checked CallOutcome.

        Many submissions send back the same bytes for a check (the same arithmetic in the same
        order): a small reply that returned is decoded once per worker, and each call gets a copy of
        that outcome, sharing its tensors (the grader only reads them). ``outcome.reply`` is then
        those bytes, for the grader's own reuse of what it concluded from them.
        """
        key = bytes(raw) if len(raw) <= REPLIES_KEPT else None
        known = self._replies.get(key) if key is not None else None
        if known is not None:
            return dataclasses.replace(known)
        try:
            outcome = checked_outcome(decoded(raw))
        except (KeyError, TypeError, ValueError) as e:  # a wire.WireError is a ValueError
            return CallOutcome(CRASHED, message=f"the submission's process sent a malformed reply: {e}")
        if key is not None and outcome.status == OK and self._replies_size + len(key) <= REPLIES_BUDGET:
            with self._lock:
                self._replies[key] = outcome
                self._replies_size += len(key)
            outcome.reply = key
            return dataclasses.replace(outcome)
        return outcome

    def encoded(self, request, shared, reuse):
        """A call request's bytes; with ``reuse`` (the caller's name for these exact arguments), made once."""
        if reuse is None:
            return wire.encode(request, shared)
        key = (reuse, request["name"], request["grad_seed"], str(request["keep"]), request.get("most"), len(shared))
        data = self._requests.get(key)
        if data is None:
            data = self._requests[key] = wire.encode(request, shared)
        return data

    def forget(self, submission):
        """``submission`` is closed: :meth:`close` leaves it alone."""
        with self._lock:
            self._open.discard(submission)

    def shared_now(self):
        """The tensors shared so far (``id(tensor)`` -> its name in the server): what a child forked now inherits."""
        with self._lock:
            return dict(self._shared)
