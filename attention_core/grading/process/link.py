"""A batch's command and one of its grader processes talking over a socket: each message pickled, after its length
(8 bytes). Both ends are the teacher's own processes; nothing a submission sent is ever unpickled here.

The first message, from the command, is JSON (:func:`begin`): what the grader process (forked with torch alone
imported, ``worker.py``) needs to import the grader's side: the command's folder, module path, module and function.

Imports the standard library alone: the batch command, which loads no torch, uses it.
"""

import contextlib
import json
import os
import pickle
import socket
import sys

from attention_core.grading.process import forks


class Link:
    """One end of a command's conversation with a grader process."""

    def __init__(self, sock: socket.socket):
        sock.settimeout(None)
        self.sock = sock

    def put(self, message: object) -> None:
        _send(self.sock, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def get(self) -> object:
        """The next message; EOFError where the other end has ended (or ended its side)."""
        size = int.from_bytes(self._exact(8), "big")
        return pickle.loads(self._exact(size))  # noqa: S301 (the other end is the teacher's own process)

    def _exact(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise EOFError("the other end of the link ended")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def fileno(self) -> int:
        return self.sock.fileno()

    def end(self) -> None:
        """Say that nothing more comes from this end (the other end's :meth:`get` then raises EOFError)."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:  # (the other end has gone)
            pass

    def close(self) -> None:
        self.sock.close()


def begin(sock: socket.socket, module: str, function: str, path: list[str]) -> None:
    """Tell a grader process just forked where to run ``module.function``: this process's folder, ``path`` and
    the site folders whose .pth files it is to read as this interpreter did (its import hooks)."""
    start = {"cwd": os.getcwd(), "path": path, "sites": forks.site_folders(), "module": module, "function": function}
    _send(sock, json.dumps(start).encode())


def _send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(len(data).to_bytes(8, "big") + data)


@contextlib.contextmanager
def streams():
    """(this process's stdout, its stderr) as file descriptors for another process to write to, for the block
    (/dev/null for one that is closed)."""
    fds, opened = [], []
    try:
        for fd in (1, 2):
            try:
                os.fstat(fd)
            except OSError:
                fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
                opened.append(fd)
            fds.append(fd)
        yield fds[0], fds[1]
    finally:
        for fd in opened:
            os.close(fd)


def module_path() -> list[str]:
    """The module path a grader process imports the package from: this package's folder first, then this
    process's path (without the empty string: the folder a command runs in)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return [here, *(p for p in sys.path if p and p != here)]
