"""Where grader processes and worker servers come from: one process that imported torch once and forks them.

``worker.py`` is started once by exec in a fresh interpreter (``-I -S``, with only the folders torch is installed
in added to its path, and an environment of its own): it serves no submission itself. It forks a server for each
control socket it is sent, and a batch's grader processes: each then costs a fork rather than an import of torch,
and all of them share torch's pages. A grader process forked there is given a channel of its own to it, for its
servers (:func:`adopt`); a process without one (a caller's own session) starts its own at its first server. It ends
when the last channel to it closes.

Imports the standard library alone: the batch command, which loads no torch, starts it.
"""

import atexit
import importlib.util
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


class WorkerError(RuntimeError):
    """The grading server failed: a fault of the grading machinery, never of a submission."""


WORKER = Path(__file__).parent.parent / "server" / "worker.py"
KEPT_ENVIRONMENT = {"LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "GLIBC_TUNABLES"}
# A fixed PATH, not the grader's (whose folders would tell a submission about the grader's machine).
CHILD_PATH = os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"])


def site_dirs():
    """The folders the server needs on its path: where torch is installed, then the other site folders."""
    spec = importlib.util.find_spec("torch")  # (found, not imported)
    dirs = [str(Path(spec.origin).resolve().parent.parent)] if spec and spec.origin else []
    return dirs + [p for p in site_folders() if p not in dirs]


def site_folders():
    """The site folders on this process's module path (its environment's and the user's)."""
    return [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]


def environment():
    """The servers' environment, every submission's (and readable in its /proc): only what torch needs."""
    env = {k: v for k, v in os.environ.items() if k in KEPT_ENVIRONMENT or k.startswith("LC_")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PATH=CHILD_PATH)
    # Large blocks on transparent huge pages where the system offers them: a child touches a
    # hundred megabytes afresh (its arguments, its results), in 2 MiB faults instead of 4 KiB ones.
    env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), "glibc.malloc.hugetlb=1"]))
    return env


class Server:
    """A server forked for one Worker: its pid, its control socket, and a pid file descriptor to watch it by (where
    the system has none, its pid: the forking process collects its servers at once, so a pid that answers is it)."""

    def __init__(self, pid, ctl):
        self.pid, self.ctl, self._pidfd, self._ended = pid, ctl, None, False
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # it has ended already
            self._ended = True
        except (AttributeError, OSError):  # no pid file descriptors here
            pass

    def send(self, signum):
        """Send it ``signum`` (nothing where it has ended)."""
        if self._ended:
            return
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signum)
            else:
                os.kill(self.pid, signum)
        except ProcessLookupError:
            pass

    def alive(self):
        if self._ended:
            return False
        if self._pidfd is not None:
            return not select.select([self._pidfd], [], [], 0)[0]
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def wait(self, timeout):
        """Wait up to ``timeout`` seconds for the server to end (it ends at its control socket's end); then kill it."""
        if self._pidfd is not None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                select.select([self._pidfd], [], [], timeout)
            os.close(self._pidfd)
            self._pidfd = None
        else:
            deadline = time.monotonic() + timeout
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            if self.alive():
                os.kill(self.pid, signal.SIGKILL)
        self._ended = True


class _Forks:
    """This process's way to the forking process: one it started, or a channel to another's."""

    def __init__(self):
        self._lock = threading.Lock()
        self._process = self._sock = self._key = None
        self._owner = 0  # the pid whose socket this is (a forked copy of this process starts its own)
        self._forked = False  # whether the process it started has forked a server or a grader

    def _ready(self):
        """Start a forking process where this one has none running (none yet, a forked copy's, one ended, or one
        started with another environment); a channel adopted from another process is kept."""
        key = (tuple(sorted(environment().items())), tuple(site_dirs()))
        running = self._process is None or self._process.poll() is None  # (None: an adopted channel's)
        if self._owner != os.getpid() or not running or (self._process is not None and self._key != key):
            self._close()
            self._start(key)

    def server(self):
        """A new server: a Server."""
        return self._fork(b"s")

    def grader(self, stdout, stderr):
        """A new grader process, forked with torch imported and warm: a Server, whose socket is the grader's way to
        its command (see ``graders.forked``). ``stdout`` and ``stderr``: the file descriptors it writes to."""
        return self._fork(b"g", stdout, stderr)

    def _fork(self, op, *fds):
        """Ask the forking process for a process of kind ``op``, its end of a new socket pair sent with ``fds``."""
        with self._lock:
            for attempt in range(2):
                self._ready()
                ours, theirs = socket.socketpair()
                try:
                    socket.send_fds(self._sock, [op], [theirs.fileno(), *fds])
                    pid = int.from_bytes(_received(self._sock, 8), "big")
                    self._forked = True
                except OSError as err:
                    ours.close()
                    self._close()  # (a channel whose process has gone: this process starts its own)
                    if attempt:
                        raise WorkerError(f"no grading process could be started: {err}") from None
                    continue
                except BaseException:  # stopped (^C) while it waited: its reply would be read as the next one's
                    ours.close()
                    self._close()
                    raise
                finally:
                    theirs.close()
                ours.settimeout(120)
                return Server(pid, ours)
        raise AssertionError  # (unreachable)

    def adopt(self, sock):
        """Use ``sock`` (a channel to another process's forking process) for this process's servers."""
        with self._lock:
            self._close()
            sock.settimeout(120)  # the first server waits for the import of torch
            self._sock, self._owner = sock, os.getpid()

    def _start(self, key):
        ours, theirs = socket.socketpair()
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(WORKER), str(theirs.fileno()), *key[1]],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=dict(key[0]),
        )
        theirs.close()
        ours.settimeout(120)  # the first server waits for the import of torch
        self._sock, self._key, self._owner = ours, key, os.getpid()

    def _close(self):
        if self._sock is not None:
            self._sock.close()  # the forking process ends when its last channel ends
        if self._process is not None and self._owner == os.getpid():
            if not self._forked:  # it forked no server for this process, whose channels' holders have ended (a
                self._process.kill()  # batch's grader processes): nothing of it is needed; it may be importing torch
            try:
                self._process.wait(timeout=10)  # (other processes' channels closed first: see the batch)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = self._sock = self._key = None
        self._owner, self._forked = 0, False

    def close(self):
        with self._lock:
            self._close()


def _received(sock, size):
    data = b""
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            raise OSError("the process that forks grading servers exited")
        data += more
    return data


_FORKS = _Forks()
atexit.register(_FORKS.close)
server, grader, adopt, close = _FORKS.server, _FORKS.grader, _FORKS.adopt, _FORKS.close
