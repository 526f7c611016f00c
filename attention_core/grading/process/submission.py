"""A submission's process, as the grader sees it: its import, the calls made into it, its time budget.

``Worker.open`` makes one. Its child imports the submission once the grader says so (``wire.GO``),
then answers one call at a time on its :class:`~attention_core.grading.process.channel.Channel`. A call that
times out or crashes ends that child; the next call forks a fresh one, which imports again. A call
said to come next (:meth:`Submission.ahead`) is sent while the grader judges the current reply.
"""

import dataclasses
import fcntl
import os
import shutil
import signal
import socket
import tempfile
import threading
import time

from attention_core.grading.process import plan, timing
from attention_core.grading.process.channel import WAITED, Channel
from attention_core.grading.process.forks import WorkerError
from attention_core.grading.process.replies import (
    CRASHED,
    IMPORT_ERROR,
    NOT_IMPLEMENTED,
    OK,
    TIMEOUT,
    CallOutcome,
    check_hello,
    checked_outcome,
    decoded,
)
from attention_core.grading.server import wire
from attention_core.harness.reading.settings import CALL_TIMEOUT

ANSWERS_KEPT = 1 << 16  # bytes of a request up to which a submission's answer is kept for the same request


class Submission:
    """A submission's process: import status, the spec functions it defines, and calls into them."""

    def __init__(self, worker, path, entry, budget):
        self.path, self._worker, self.budget = path, worker, budget
        self._spent = self._waited = 0.0  # CPU seconds, wall-clock seconds (see timing)
        self._entry, self._root, self._module, self._package = plan.resolve(path, entry, worker.names)
        self._channel = self._pid = None  # the current child's Channel, its guard's pid
        self._closed = False
        self._ending = threading.Lock()  # (a batch stopped at once: the server's chores and its close may both end it)
        self._answered = {}  # a small request's bytes -> the outcome of the call that returned for it
        self._next = None  # the request said to come next (ahead()), not sent yet
        self._limits = {}  # a request's bytes -> the most bytes its reply may have (None: the worker's limit)
        self._ahead = None  # (request, when it was sent, its bytes not yet sent): its reply not yet read
        self._early = {}  # a request sent ahead -> its outcome, read before the call was made (another came first)
        self.status, self.message, self.traceback, self.names, self.output = None, "", (), (), ""  # until started
        self.others = ()
        self._spawn()

    def start(self):
        """Let the child import the submission, and wait for its report (once); the submission."""
        if self.status is not None:
            return self
        start = time.monotonic()
        hello, output, problem = self._hello(self._worker.import_timeout)
        self._charge(start)
        self.output = output.text()
        self.status = hello["status"] if hello else IMPORT_ERROR
        self.message = hello["message"] if hello else problem
        self.traceback = tuple(hello["traceback"]) if hello else ()
        self.names = tuple(hello["names"]) if hello else ()
        self.others = _others(hello.get("others")) if hello else ()  # its other public definitions
        if self.status != OK:
            self._end()
        return self

    @property
    def pid(self):
        """The process id (and process group id) of the current child, or None."""
        return self._pid

    @property
    def budget_left(self):
        """CPU seconds left of the budget; 0 where its wall-clock time is spent too (a submission that only
        sleeps ends within its budget of wall-clock time)."""
        return 0.0 if self._waited >= self.budget else max(0.0, self.budget - self._spent)

    def _ceiling(self, limit):
        """The wall-clock seconds a call (or import) of ``limit`` CPU seconds may wait: CEILING times its limit,
        within what is left of the budget's wall-clock time."""
        return min(timing.CEILING * limit, max(0.0, self.budget - self._waited))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, name, args=(), kwargs=None, *, timeout=CALL_TIMEOUT, keep=None, reuse=None, limit=None):
        """Call the submission's ``name(*args, **kwargs)`` in its process.

        ``keep``: for a tuple result, the positions to send back in full; the others come back
        as their dtype and shape alone (tensors on the ``meta`` device). ``reuse``: a name the
        caller gives these exact arguments, which it never changes (the request is then encoded
        once per worker, for every submission). ``limit``: the most bytes the reply may have (what the
        call can need); a longer reply is not read, and the call fails with the reason (default: the
        worker's ``reply_limit``).
        """
        return self._call(name, args, kwargs or {}, timeout, None, keep, reuse, limit)

    def call_grad(
        self, name, args=(), kwargs=None, *, projection_seed=0, timeout=CALL_TIMEOUT, keep=None, reuse=None, limit=None
    ):
        """Call ``name`` with every floating tensor argument requiring grad; backpropagate a projection.

        The scalar is ``wire.projection(outputs, projection_seed)``; ``grads`` maps each floating
        tensor argument to its gradient, or None where none flowed to it.
        """
        return self._call(name, args, kwargs or {}, timeout, int(projection_seed), keep, reuse, limit)

    def call_all(self, calls, *, timeout=CALL_TIMEOUT, reuse=None, limit=None):
        """Make ``calls`` ((name, args, kwargs) each) one after another in one round trip: their CallOutcomes in
        order. ``timeout`` holds for them all; where the process timed out or died, every call not answered
        has that outcome. ``reuse``: as for :meth:`call` (the request is encoded once per worker)."""
        if not calls:
            return []
        if self._closed:
            raise ValueError(f"the submission {self.path} is closed")
        if self.start().status != OK:
            return [CallOutcome(NOT_IMPLEMENTED, message=f"the submission did not import: {self.message}")] * len(calls)
        found = {
            i: CallOutcome(NOT_IMPLEMENTED, message=f"{n!r} is not graded: {', '.join(self._worker.names)}")
            for i, (n, _, _) in enumerate(calls)
            if n not in self._worker.names
        }
        asked = [(i, call) for i, call in enumerate(calls) if i not in found]
        if not asked:
            return [found[i] for i in range(len(calls))]
        request = {
            "op": "calls",
            "name": "",
            "grad_seed": None,
            "keep": None,
            "calls": [{"id": i, "name": n, "args": list(a), "kwargs": dict(k)} for i, (n, a, k) in asked],
        }
        data = self._worker.encoded(request, self._shared, reuse)
        if self._ahead is not None:  # a call sent ahead: its reply first, kept for when it is made
            sent, start, pending = self._ahead
            self._ahead = None
            self._early[sent] = self._finish(sent, start, pending, timeout, ahead=False)
        if self.budget_left <= 0:
            return [self._spent_outcome()] * len(calls)
        if self._pid is None:
            self._spawn()
        if not self._ready:
            failed = self._import_again()
            if failed is not None:
                return [failed] * len(calls)
        self._limits[data] = limit
        outcome = self._finish(data, time.monotonic(), memoryview(data), timeout, ahead=False)
        if outcome.status != OK:
            return [found.get(i) or dataclasses.replace(outcome, output="") for i in range(len(calls))]
        wanted = {i for i, _ in asked}
        for reply in outcome.value if isinstance(outcome.value, list) else ():
            key = reply.get("id") if isinstance(reply, dict) else None
            if type(key) is not int or key not in wanted or key in found:  # a reply matched to no call: not read
                continue
            try:
                found[key] = checked_outcome(reply)
            except (KeyError, TypeError, ValueError) as e:
                found[key] = CallOutcome(CRASHED, message=f"the submission's process sent a malformed reply: {e}")
        missing = CallOutcome(CRASHED, message="the submission's process sent no reply for this call")
        ordered = [found.get(i) or dataclasses.replace(missing) for i in range(len(calls))]
        if outcome.output:
            ordered[asked[0][0]].output = outcome.output
        return ordered

    def ahead(self, name, args=(), kwargs=None, *, projection_seed=None, keep=None, reuse=None, limit=None):
        """Say which call comes next (as :meth:`call`, or :meth:`call_grad` with a ``projection_seed``).

        Its request is sent the moment the current call's reply has been read, so the process
        computes it while the caller judges that reply; the call itself, when made, reads its reply
        (its time limit counts from the sending). A different call made first waits for that reply
        and keeps it for when the call said is made. Nothing is sent for a submission that did not
        import, a function it lacks, or a call answered before.
        """
        self._next = None
        if self.status == OK and name in self.names and not self._closed:
            seed = None if projection_seed is None else int(projection_seed)
            self._next = self._request_bytes(name, args, kwargs or {}, seed, keep, reuse, limit)
            self._limits[self._next] = limit

    def close(self):
        """Kill the child's process group and collect it. Calls after this raise ValueError."""
        self._closed = True
        self._end()
        self._worker.forget(self)

    # ---- internals ----

    def _call(self, name, args, kwargs, timeout, seed, keep=None, reuse=None, limit=None):
        if name not in self._worker.names:
            raise ValueError(f"{name!r} is not graded: {', '.join(self._worker.names)}")
        if self._closed:
            raise ValueError(f"the submission {self.path} is closed")
        if self.start().status != OK:
            return CallOutcome(NOT_IMPLEMENTED, message=f"the submission did not import: {self.message}")
        if name not in self.names:
            return CallOutcome(NOT_IMPLEMENTED, message=f"the submission defines no function {name}")
        data = self._request_bytes(name, args, kwargs, seed, keep, reuse, limit)
        self._limits[data] = limit
        if data in self._early:  # sent ahead, and read while another call was made: its time is spent already
            return self._early.pop(data)
        if len(data) <= ANSWERS_KEPT and data in self._answered:  # the same call again: made once, for both checks
            return self._answered[data]
        if self._ahead is not None:
            sent, start, pending = self._ahead
            self._ahead = None
            if sent == data:  # this call, sent ahead
                return self._finish(data, start, pending, timeout)
            self._early[sent] = self._finish(sent, start, pending, timeout, ahead=False)  # its reply first
        if self.budget_left <= 0:
            return self._spent_outcome()
        if self._pid is None:
            self._spawn()
        if not self._ready:  # a replacement still importing: its own time limit, not the call's
            failed = self._import_again()
            if failed is not None:
                return failed
        return self._finish(data, time.monotonic(), memoryview(data), timeout)

    def _import_again(self):
        """A replacement child imports the submission, within the import's own limit, charged to the budget:
        None where it did, else the outcome of every call that waited for it."""
        start = time.monotonic()
        hello, _, problem = self._hello(min(self._worker.import_timeout, self.budget_left))
        cpu = self._channel.meter.take()  # before the child ends: the process that spent it
        if hello is None or hello["status"] != OK:
            why = problem if hello is None else hello["message"]
            self._end()
            return self._spend(start, CallOutcome(CRASHED, message=f"the submission did not import again: {why}"), cpu)
        self._charge(start, cpu)
        return self._spent_outcome() if self.budget_left <= 0 else None

    def _request_bytes(self, name, args, kwargs, seed, keep, reuse, limit=None):
        request = {
            "op": "call",
            "name": name,
            "args": list(args),
            "kwargs": dict(kwargs),
            "grad_seed": seed,
            "keep": None if keep is None else [int(i) for i in keep],
            "most": None if limit is None else int(limit),  # results beyond it are not sent (nor read, were they)
        }
        return self._worker.encoded(request, self._shared, reuse)

    def _finish(self, data, start, pending, timeout, ahead=True):
        """The call whose request ``data`` was (or starts being) sent at ``start``, ``pending`` its bytes not
        sent yet: its reply read within its limit, its outcome. Then (``ahead``) the request said to come
        next is sent, unless it is this one again (answered from this outcome, where it returned)."""
        limit = min(timeout, self.budget_left)  # CPU seconds; the wall clock's ceiling counts from the waiting
        waiting = time.monotonic()  # (a call sent ahead computed meanwhile: only its CPU time counts for it)
        wall = self._ceiling(limit)
        raw, output, problem = self._channel.exchange(
            pending, limit, wall, self._limits.pop(data, None) or self._worker.reply_limit
        )
        cpu = self._channel.meter.take()  # before a replacement: the process that spent it
        if problem is None and cpu is not None and cpu > limit:  # answered, sent ahead, after its CPU time ran out
            raw, problem = None, TIMEOUT
        if problem is None and ahead and self._next != data:
            self._send_ahead()
        outcome = self._outcome(raw, problem, limit, wall)
        outcome.output = output.text()
        if outcome.status in (TIMEOUT, CRASHED):
            self._replace(outcome)
        elif outcome.status == OK and len(data) <= ANSWERS_KEPT:
            self._answered[data] = outcome
        return self._spend(start, outcome, cpu, waiting)

    def _send_ahead(self):
        data, self._next = self._next, None
        if (
            data is None
            or data in self._early
            or (len(data) <= ANSWERS_KEPT and data in self._answered)
            or self.budget_left <= 0
        ):
            return
        self._ahead = (data, time.monotonic(), self._channel.send(memoryview(data)))

    def _spent_outcome(self):
        return CallOutcome(TIMEOUT, message=f"the submission's time budget of {self.budget:g} s is spent")

    def _spend(self, start, outcome, cpu=None, waiting=None):
        """``outcome`` with its seconds since ``start``; the budget charged (see :meth:`_charge`) from ``waiting``
        (when the grader began to wait for it: default ``start``)."""
        outcome.seconds = time.monotonic() - start
        self._charge(start if waiting is None else waiting, cpu)
        return outcome

    def _charge(self, start, cpu=None):
        """Charge the budget with the CPU time spent since the last charge (``cpu`` where read already; the
        wall-clock time since ``start`` where it cannot be read), and its wall clock with the time since ``start``."""
        waited = time.monotonic() - start
        if cpu is None and self._channel is not None:
            cpu = self._channel.meter.take()
        self._spent += waited if cpu is None else cpu
        self._waited += waited

    def _outcome(self, raw, problem, limit, wall):
        if problem == TIMEOUT:
            return CallOutcome(TIMEOUT, message=f"the call did not return within {limit:.3g} s of CPU time")
        if problem == WAITED and wall < timing.CEILING * limit:
            return CallOutcome(
                TIMEOUT,
                message=f"the submission's time budget of {self.budget:g} s is spent (in "
                f"wall-clock time: it waited rather than computed)",
            )
        if problem == WAITED:
            return CallOutcome(
                TIMEOUT,
                message=f"the call did not return within {timing.CEILING * limit:.3g} s "
                f"({timing.CEILING:g} times its limit of {limit:.3g} s of CPU time: "
                f"it waited rather than computed)",
            )
        if problem is not None:
            return CallOutcome(CRASHED, message=problem)
        return self._worker.outcome_of(raw)

    def _replace(self, outcome):
        """After a timeout or crash: collect the old child (its exit status joins the message), fork anew."""
        status = self._end()
        if outcome.status == CRASHED and status and not outcome.message.startswith("the call raised"):
            if "signal" in status:
                outcome.message += f" (killed by signal {status['signal']}, {status['name']})"
            else:
                outcome.message += f" (exit code {status['code']})"
        self._spawn()

    def _spawn(self):
        ours, theirs = socket.socketpair()
        out_r, out_w = os.pipe()
        try:
            fcntl.fcntl(out_r, fcntl.F_SETPIPE_SZ, 1 << 20)  # fewer wake-ups when a submission floods
        except OSError:
            pass
        os.set_blocking(out_r, False)
        ours.setblocking(False)
        w = self._worker
        scratch = tempfile.mkdtemp(dir=w.scratch)
        sandbox = None if w.sandbox_plan is None else plan.with_submission(w.sandbox_plan, self.path, scratch)
        request = {
            "op": "open",
            "entry": str(self._entry),
            "root": str(self._root),
            "module": self._module,
            "package": self._package,
            "names": list(w.names),
            "memory": w.memory_limit,
            "reply_limit": w.reply_limit,
            "sandbox": sandbox,
        }
        shared = w.shared_now()  # what this child will inherit
        try:
            reply = w.request(request, fds=(theirs.fileno(), out_w))
        finally:
            theirs.close()
            os.close(out_w)
        self._channel = Channel(
            ours,
            out_r,
            reply["pid"],
            timing.Meter(reply.get("inner")),
            output_limit=w.output_limit,
            reply_limit=w.reply_limit,
        )
        self._pid, self._ready = reply["pid"], False
        self._shared, self._scratch = shared, scratch
        self.protections = reply["protections"]

    def _hello(self, timeout):
        """Let the child import, and wait for its report: (hello or None, Output, problem)."""
        wall = self._ceiling(timeout)
        raw, output, problem = self._channel.exchange(wire.GO, timeout, wall)
        reply = None
        if problem == TIMEOUT:
            problem = f"the import did not finish within {timeout:.3g} s of CPU time"
        elif problem == WAITED and wall < timing.CEILING * timeout:
            problem = f"the submission's time budget of {self.budget:g} s is spent (in wall-clock time, importing)"
        elif problem == WAITED:
            problem = (
                f"the import did not finish within {timing.CEILING * timeout:.3g} s ({timing.CEILING:g} times "
                f"its limit of {timeout:.3g} s of CPU time: it waited rather than computed)"
            )
        elif problem is None:
            try:
                reply = decoded(raw)
                check_hello(reply, self._worker.names)
            except (KeyError, TypeError, ValueError) as e:  # a wire.WireError is a ValueError
                reply, problem = None, f"the submission's process sent a malformed reply: {e}"
        self._ready = problem is None
        return (reply if problem is None else None), output, problem

    def _end(self):
        """Kill and collect the current child, close its descriptors; its exit status, or None."""
        with self._ending:
            status = None
            if self._pid is not None:
                try:
                    status = self._worker.request({"op": "reap", "pid": self._pid})
                except WorkerError:  # the server is gone: kill what we can from here
                    for send in (os.killpg, os.kill):
                        try:
                            send(self._pid, signal.SIGKILL)
                        except OSError:
                            pass
                self._channel.close()
                self._channel = self._pid = self._ahead = self._next = None  # sent ahead: lost with it
                shutil.rmtree(self._scratch, ignore_errors=True)
        return status


def _others(given):
    """The other public definitions a submission's process reports, as (name, kind, parameters, forward's
    parameters): well-formed entries only, at most 40 (the process is the student's: it may send anything)."""
    if not isinstance(given, list):
        return ()

    def names(value):
        return isinstance(value, list) and len(value) <= 20 and all(isinstance(n, str) and len(n) <= 200 for n in value)

    return tuple(
        (o[0], o[1], tuple(o[2]), tuple(o[3]))
        for o in given[:40]
        if isinstance(o, list)
        and len(o) == 4
        and isinstance(o[0], str)
        and len(o[0]) <= 200
        and o[1] in ("class", "function")
        and names(o[2])
        and names(o[3])
    )
