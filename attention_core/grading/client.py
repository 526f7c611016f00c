"""The grader's side of the worker: start the server, open submissions, call their functions.

A ``Worker`` starts ``worker.py`` in a fresh interpreter (``-I -S``, with only the folders torch
is installed in added to its path) and keeps one control socket to it. ``Worker.open`` passes the
server one end of a new socket pair and the write end of a new output pipe; the server forks a
child, which builds its sandbox, imports the submission once the grader says so (``wire.GO``)
and then talks to the grader directly on that socket. Every
reply is checked against the wire format and a size cap; nothing is unpickled. The child's
stdout and stderr come through the pipe, which the grader drains while it waits, keeping only the
first ``output_limit`` bytes.

Several threads may share one ``Worker`` (each submission used by one thread at a time).
Imports attention_core.spec and nothing else of the package but this room's wire format.
"""

import dataclasses
import fcntl
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import sys
import threading
import time
from pathlib import Path

import torch

from attention_core import spec
from attention_core.grading import plan, timing, wire
from attention_core.grading.replies import (
    CRASHED, IMPORT_ERROR, NOT_IMPLEMENTED, OK, TIMEOUT, CallOutcome, Output, check_hello, checked_outcome, decoded,
    drain)

WORKER = Path(__file__).with_name("worker.py")
KEPT_ENVIRONMENT = {"LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "GLIBC_TUNABLES"}
# A fixed PATH, not the grader's (whose folders would tell a submission about the grader's machine).
CHILD_PATH = os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"])
ANSWERS_KEPT = 1 << 16  # bytes of a request up to which a submission's answer is kept for the same request
REPLIES_KEPT = 1 << 16  # bytes of a reply up to which identical replies are decoded once per worker
WAITED = "waited"  # a call's wall-clock ceiling reached (TIMEOUT: its CPU time)
FIRST_READ = 1 << 16  # bytes a reply is first read into, before its header gives its size
REPLIES_BUDGET = 64 << 20  # bytes of such replies one worker keeps



class WorkerError(RuntimeError):
    """The server failed: a fault of the grading machinery, never of a submission."""


def site_dirs():
    """The folders the server needs on its path: where torch is installed, then the other site folders."""
    dirs = [str(Path(torch.__file__).resolve().parent.parent)]
    dirs += [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and p not in dirs]
    return dirs


class Worker:
    """One grading server. A context manager; ``close()`` kills the server and every child."""

    def __init__(self, *, memory_limit=4 << 30, budget=60.0, import_timeout=10.0, output_limit=10_000,
                 reply_limit=256 << 20, sandbox=True, namespaces=True, names=spec.NAMES):
        self.names = tuple(names)  # what a submission may be asked for: the assignment's graded names
        self.memory_limit, self.budget, self.import_timeout = memory_limit, budget, import_timeout
        self.output_limit, self.reply_limit = output_limit, reply_limit
        self._scratch = tempfile.mkdtemp(prefix="attention-sandbox-")
        os.chmod(self._scratch, 0o711)  # an unprivileged child may pass through to its own folder
        os.mkdir(os.path.join(self._scratch, "root"), 0o755)
        self._plan = plan.plan(site_dirs(), root=os.path.join(self._scratch, "root"), budget=budget,
                               namespaces=namespaces) if sandbox else None
        ours, theirs = socket.socketpair()
        # The server's environment is every child's (and readable in its /proc): only what torch needs.
        env = {k: v for k, v in os.environ.items() if k in KEPT_ENVIRONMENT or k.startswith("LC_")}
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PATH=CHILD_PATH)
        # Large blocks on transparent huge pages where the system offers them: a child touches a
        # hundred megabytes afresh (its arguments, its results), in 2 MiB faults instead of 4 KiB ones.
        env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), "glibc.malloc.hugetlb=1"]))
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(WORKER), str(theirs.fileno()), *site_dirs()],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env)
        theirs.close()
        ours.settimeout(120)  # the first request waits for the server's import of torch
        self._ctl, self._lock, self._open = ours, threading.Lock(), set()
        self._shared, self._kept = {}, []  # id(tensor) -> its name in the server; the tensors themselves
        self._requests = {}  # (the caller's name for a call's arguments, …) -> the request's bytes
        self._replies, self._replies_size = {}, 0  # a small reply's bytes -> its outcome; their total size

    @property
    def pid(self):
        return self._process.pid

    def alive(self):
        """Whether the server is still running."""
        return self._process.poll() is None

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
        every submission and every call.
        """
        new = {f"t{len(self._shared) + i}": t for i, t in enumerate(
            {id(t): t for t in tensors if id(t) not in self._shared}.values())}
        if not new:
            return
        self._request({"op": "share", "tensors": {k: t.detach() for k, t in new.items()}})
        with self._lock:
            self._kept += new.values()  # alive as long as the worker: their ids stay theirs
            self._shared.update({id(t): k for k, t in new.items()})

    def server_modules(self):
        """The names in the server's ``sys.modules`` (to check what it imported)."""
        return tuple(self._request({"op": "modules"})["modules"])

    def close(self):
        with self._lock:
            submissions, self._open = list(self._open), set()
        for submission in submissions:
            submission.close()
        self._ctl.close()  # the server kills whatever is left and exits at end of file
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def _request(self, message, fds=()):
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
            raise WorkerError(f"the grading server exited (status {self._process.poll()})")
        if "error" in reply:
            raise WorkerError(reply["error"])
        return reply

    def _outcome_of(self, raw):
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

    def _encoded(self, request, shared, reuse):
        """A call request's bytes; with ``reuse`` (the caller's name for these exact arguments), made once."""
        if reuse is None:
            return wire.encode(request, shared)
        key = (reuse, request["name"], request["grad_seed"], str(request["keep"]), len(shared))
        data = self._requests.get(key)
        if data is None:
            data = self._requests[key] = wire.encode(request, shared)
        return data

    def _forget(self, submission):
        with self._lock:
            self._open.discard(submission)


class Submission:
    """A submission's process: import status, the spec functions it defines, and calls into them."""

    def __init__(self, worker, path, entry, budget):
        self.path, self._worker, self.budget = path, worker, budget
        self._spent = self._waited = 0.0  # CPU seconds, wall-clock seconds (see timing)
        self._meter = timing.Meter(None)
        self._entry, self._root, self._module, self._package = plan.resolve(path, entry, worker.names)
        self._sock = self._out = self._pid = None
        self._closed = False
        self._answered = {}  # a small request's bytes -> the outcome of the call that returned for it
        self._next = None  # the request said to come next (ahead()), not sent yet
        self._limits = {}  # a request's bytes -> the most bytes its reply may have (None: the worker's limit)
        self._ahead = None  # (request, when it was sent, its bytes not yet sent): its reply not yet read
        self._early = {}  # a request sent ahead -> its outcome, read before the call was made (another came first)
        self.status, self.message, self.traceback, self.names, self.output = None, "", (), (), ""  # until started
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
        if self.status != OK:
            self._end()
        return self

    @property
    def pid(self):
        """The process id (and process group id) of the current child, or None."""
        return self._pid

    @property
    def budget_left(self):
        """CPU seconds left of the budget (and no more than the wall-clock ceiling leaves, over its factor)."""
        return max(0.0, min(self.budget - self._spent, (timing.CEILING * self.budget - self._waited) / timing.CEILING))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, name, args=(), kwargs=None, *, timeout=5.0, keep=None, reuse=None, limit=None):
        """Call the submission's ``name(*args, **kwargs)`` in its process.

        ``keep``: for a tuple result, the positions to send back in full; the others come back
        as their dtype and shape alone (tensors on the ``meta`` device). ``reuse``: a name the
        caller gives these exact arguments, which it never changes (the request is then encoded
        once per worker, for every submission). ``limit``: the most bytes the reply may have (what the
        call can need); a longer reply is not read, and the call fails with the reason (default: the
        worker's ``reply_limit``).
        """
        return self._call(name, args, kwargs or {}, timeout, None, keep, reuse, limit)

    def call_grad(self, name, args=(), kwargs=None, *, projection_seed=0, timeout=5.0, keep=None, reuse=None,
                  limit=None):
        """Call ``name`` with every floating tensor argument requiring grad; backpropagate a projection.

        The scalar is ``wire.projection(outputs, projection_seed)``; ``grads`` maps each floating
        tensor argument to its gradient, or None where none flowed to it.
        """
        return self._call(name, args, kwargs or {}, timeout, int(projection_seed), keep, reuse, limit)

    def call_all(self, calls, *, timeout=5.0, reuse=None, limit=None):
        """Make ``calls`` ((name, args, kwargs) each) one after another in one round trip: their CallOutcomes in
        order. ``timeout`` holds for them all; where the process timed out or died, every call not answered
        has that outcome. ``reuse``: as for :meth:`call` (the request is encoded once per worker)."""
        calls = [(n, a, k) for n, a, k in calls if n in self._worker.names]
        if not calls:
            return []
        if self._closed:
            raise ValueError(f"the submission {self.path} is closed")
        if self.start().status != OK:
            return [CallOutcome(NOT_IMPLEMENTED, message=f"the submission did not import: {self.message}")] * len(calls)
        request = {"op": "calls", "name": "", "grad_seed": None, "keep": None,
                   "calls": [{"name": n, "args": list(a), "kwargs": dict(k)} for n, a, k in calls]}
        data = self._worker._encoded(request, self._shared, reuse)
        if self._ahead is not None:  # a call sent ahead: its reply first, kept for when it is made
            sent, start, pending = self._ahead
            self._ahead = None
            self._early[sent] = self._finish(sent, start, pending, timeout, ahead=False)
        if self.budget_left <= 0:
            return [self._spent_outcome()] * len(calls)
        if self._pid is None:
            self._spawn()
        if not self._ready:
            hello, _, problem = self._hello(min(self._worker.import_timeout, self.budget_left))
            if hello is None or hello["status"] != OK:
                self._end()
                return [CallOutcome(CRASHED, message=f"the submission did not import again: {problem or ''}")] * \
                    len(calls)
        self._limits[data] = limit
        outcome = self._finish(data, time.monotonic(), memoryview(data), timeout, ahead=False)
        if outcome.status != OK:
            return [dataclasses.replace(outcome, output="")] * len(calls)
        found = []
        for reply in outcome.value if isinstance(outcome.value, list) else ():
            try:
                found.append(checked_outcome(reply))
            except (KeyError, TypeError, ValueError) as e:
                found.append(CallOutcome(CRASHED, message=f"the submission's process sent a malformed reply: {e}"))
        missing = CallOutcome(CRASHED, message="the submission's process sent no reply for this call")
        found += [missing] * (len(calls) - len(found))
        if found and outcome.output:
            found[0].output = outcome.output
        return found[:len(calls)]

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
            self._next = self._request_bytes(name, args, kwargs or {}, seed, keep, reuse)
            self._limits[self._next] = limit

    def close(self):
        """Kill the child's process group and collect it. Calls after this raise ValueError."""
        self._closed = True
        self._end()
        self._worker._forget(self)

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
        data = self._request_bytes(name, args, kwargs, seed, keep, reuse)
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
            start = time.monotonic()
            hello, _, problem = self._hello(min(self._worker.import_timeout, self.budget_left))
            if hello is None or hello["status"] != OK:
                self._end()
                why = problem if hello is None else hello["message"]
                return self._spend(start, CallOutcome(CRASHED, message=f"the submission did not import again: {why}"))
            self._charge(start)
            if self.budget_left <= 0:
                return self._spent_outcome()
        return self._finish(data, time.monotonic(), memoryview(data), timeout)

    def _request_bytes(self, name, args, kwargs, seed, keep, reuse):
        request = {"op": "call", "name": name, "args": list(args), "kwargs": dict(kwargs), "grad_seed": seed,
                   "keep": None if keep is None else [int(i) for i in keep]}
        return self._worker._encoded(request, self._shared, reuse)

    def _finish(self, data, start, pending, timeout, ahead=True):
        """The call whose request ``data`` was (or starts being) sent at ``start``, ``pending`` its bytes not
        sent yet: its reply read within its limit, its outcome. Then (``ahead``) the request said to come
        next is sent, unless it is this one again (answered from this outcome, where it returned)."""
        limit = min(timeout, self.budget_left)  # CPU seconds; the wall clock's ceiling counts from the sending
        raw, output, problem = self._exchange(pending, limit, self._limits.pop(data, None) or self._worker.reply_limit,
                                              wall=timing.CEILING * limit - (time.monotonic() - start))
        cpu = self._meter.take()  # before a replacement: the process that spent it
        if problem is None and ahead and self._next != data:
            self._send_ahead()
        outcome = self._outcome(raw, problem, limit)
        outcome.output = output.text()
        if outcome.status in (TIMEOUT, CRASHED):
            self._replace(outcome)
        elif outcome.status == OK and len(data) <= ANSWERS_KEPT:
            self._answered[data] = outcome
        return self._spend(start, outcome, cpu)

    def _send_ahead(self):
        data, self._next = self._next, None
        if data is None or data in self._early or (len(data) <= ANSWERS_KEPT and data in self._answered) \
                or self.budget_left <= 0:
            return
        self._ahead = (data, time.monotonic(), self._send(memoryview(data)))

    def _spent_outcome(self):
        return CallOutcome(TIMEOUT, message=f"the submission's time budget of {self.budget:g} s is spent")

    def _spend(self, start, outcome, cpu=None):
        outcome.seconds = time.monotonic() - start
        self._charge(start, cpu)
        return outcome

    def _charge(self, start, cpu=None):
        """Charge the budget with the CPU time spent since the last charge (``cpu`` where read already; the
        wall-clock time since ``start`` where it cannot be read), and its wall clock with the time since ``start``."""
        waited = time.monotonic() - start
        cpu = self._meter.take() if cpu is None else cpu
        self._spent += waited if cpu is None else cpu
        self._waited += waited

    def _outcome(self, raw, problem, limit):
        if problem == TIMEOUT:
            return CallOutcome(TIMEOUT, message=f"the call did not return within {limit:.3g} s of CPU time")
        if problem == WAITED:
            return CallOutcome(TIMEOUT, message=f"the call did not return within {timing.CEILING * limit:.3g} s "
                                                f"({timing.CEILING:g} times its limit of {limit:.3g} s of CPU time: "
                                                f"it waited rather than computed)")
        if problem is not None:
            return CallOutcome(CRASHED, message=problem)
        return self._worker._outcome_of(raw)

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
        scratch = tempfile.mkdtemp(dir=w._scratch)
        sandbox = None if w._plan is None else plan.with_submission(w._plan, self.path, scratch)
        request = {"op": "open", "entry": str(self._entry), "root": str(self._root), "module": self._module,
                   "package": self._package, "names": list(w.names), "memory": w.memory_limit,
                   "reply_limit": w.reply_limit, "sandbox": sandbox}
        with w._lock:
            shared = dict(w._shared)  # what this child will inherit
        try:
            reply = w._request(request, fds=(theirs.fileno(), out_w))
        finally:
            theirs.close()
            os.close(out_w)
        self._sock, self._out, self._pid, self._ready = ours, out_r, reply["pid"], False
        self._meter = timing.Meter(reply.get("inner"))
        self._shared, self._scratch = shared, scratch
        self.protections = reply["protections"]

    def _hello(self, timeout):
        """Let the child import, and wait for its report: (hello or None, Output, problem)."""
        raw, output, problem = self._exchange(wire.GO, timeout)
        reply = None
        if problem == TIMEOUT:
            problem = f"the import did not finish within {timeout:.3g} s of CPU time"
        elif problem == WAITED:
            problem = (f"the import did not finish within {timing.CEILING * timeout:.3g} s ({timing.CEILING:g} times "
                       f"its limit of {timeout:.3g} s of CPU time: it waited rather than computed)")
        elif problem is None:
            try:
                reply = decoded(raw)
                check_hello(reply, self._worker.names)
            except (KeyError, TypeError, ValueError) as e:  # a wire.WireError is a ValueError
                reply, problem = None, f"the submission's process sent a malformed reply: {e}"
        self._ready = problem is None
        return (reply if problem is None else None), output, problem

    def _exchange(self, data, timeout, most=None, wall=None):
        """Send ``data`` and wait for one reply, draining output: (the reply's bytes, Output, problem or None).
        The process may spend ``timeout`` seconds of CPU time from the last charge (problem TIMEOUT), within
        ``wall`` seconds of wall-clock time (by default the ceiling for ``timeout``; problem WAITED)."""
        output = Output(self._worker.output_limit)
        now = started = time.monotonic()
        deadline = now + (timing.CEILING * timeout if wall is None else wall)
        check = now + min(timeout, timing.CHECK_EVERY)
        pending, buf, got, need = memoryview(data), bytearray(FIRST_READ), 0, None
        if pending:  # a small request fits the socket's buffer: send it before the first poll (one sent ahead is)
            pending = self._send(pending)
        poller = select.poll()
        poller.register(self._out, select.POLLIN)
        poller.register(self._sock, select.POLLIN | (select.POLLOUT if pending else 0))
        out_open, problem = True, None
        while True:
            now = time.monotonic()
            if now >= deadline:
                problem = WAITED
                break
            if now >= check:
                spent = self._meter.since()
                if spent is None:  # no reading: the wall clock counts alone
                    spent = now - started
                if spent >= timeout:
                    problem = TIMEOUT
                    break
                check = now + timing.CHECK_EVERY
            events = dict(poller.poll(max(0.0, min(deadline, check) - now) * 1000))
            if out_open and self._out in events:
                out_open = drain(self._out, output)
                if not out_open:
                    poller.unregister(self._out)
            sock_events = events.get(self._sock.fileno(), 0)
            if pending and sock_events & select.POLLOUT:
                pending = self._send(pending)
                if not pending:
                    poller.modify(self._sock, select.POLLIN)
            if sock_events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                read = self._sock.recv_into(memoryview(buf)[got:]) if sock_events & select.POLLIN else 0
                if not read:
                    problem = "the submission's process died"
                    break
                got += read
                if need is None and got >= wire.HEADER.size:
                    n_text, n_blob = wire.HEADER.unpack_from(buf)
                    need = wire.HEADER.size + n_text + n_blob
                    most = most or self._worker.reply_limit
                    if need > most:
                        problem = (f"the reply is {need} bytes, over the {most} bytes this call can need (its "
                                   f"results, gradients and messages): it was not read")
                        break
                    if need > len(buf):  # a large reply: the rest is read straight into a buffer of its size
                        larger = bytearray(need)
                        larger[:got] = buf[:got]
                        buf = larger
                if need is not None and got >= need:
                    break
        if out_open:
            drain(self._out, output)
        if problem is not None:
            return None, output, problem
        return memoryview(buf)[:need], output, None

    def _send(self, pending):
        """Send what the socket takes now; the rest. A dead peer takes nothing and shows as end of file."""
        try:
            return pending[self._sock.send(pending):]
        except BlockingIOError:
            return pending
        except (BrokenPipeError, ConnectionResetError):
            return pending[:0]

    def _end(self):
        """Kill and collect the current child, close its descriptors; its exit status, or None."""
        status = None
        if self._pid is not None:
            try:
                status = self._worker._request({"op": "reap", "pid": self._pid})
            except WorkerError:  # the server is gone: kill what we can from here
                for send in (os.killpg, os.kill):
                    try:
                        send(self._pid, signal.SIGKILL)
                    except OSError:
                        pass
            self._sock.close()
            os.close(self._out)
            self._sock = self._out = self._pid = self._ahead = self._next = None  # sent ahead: lost with it
            shutil.rmtree(self._scratch, ignore_errors=True)
        return status
