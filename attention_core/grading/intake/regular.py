"""Files read on a submission's behalf: regular files only, opened without blocking or following a link.

A path a student hands in may name a FIFO (an ``open`` waits for a writer for good), a socket, a
device or a symbolic link. Every file the trusted side reads of a submission (the file itself, a
folder's entries, a zip, a notebook, a platform's download) is opened here: ``O_NONBLOCK`` and
``O_NOFOLLOW``, then ``fstat`` says it is a regular file before a byte is read. Anything else is
:class:`NotRegular`, whose message says what the path is instead.
"""

import errno
import os
import stat

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (a named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symbolic link"),
)


class NotRegular(ValueError):
    """A path that is not a regular file (or cannot be opened): the message is one line, the path then
    ``problem`` ("is a FIFO (a named pipe), not a regular file")."""

    def __init__(self, shown, problem):
        super().__init__(f"{shown} {problem}")
        self.problem = problem


def kind(mode):
    """What a file of ``mode`` (an ``st_mode``) is, in words: "a FIFO (a named pipe)", "a socket", ..."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path, shown=None):
    """``path`` opened for reading in binary, checked to be a regular file; raises :class:`NotRegular`
    (``shown``: how the message names the path, default the path itself)."""
    shown = os.fspath(path) if shown is None else shown
    try:
        fd = os.open(path, _FLAGS)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise NotRegular(shown, "is a symbolic link, which is not followed") from None
        if error.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket, or a FIFO's other end
            raise NotRegular(shown, f"is {kind(os.lstat(path).st_mode)}, not a regular file") from None
        raise NotRegular(shown, f"cannot be opened: {error.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(shown, f"is {kind(mode)}, not a regular file")
        os.set_blocking(fd, True)  # (a regular file never blocks; the flag only kept the open from waiting)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def special(path):
    """(the first path at or under ``path`` that is neither a regular file nor a folder, what it is) or None;
    folders are walked without following a link. A submission is regular files in folders."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return path, kind(mode)
    if stat.S_ISDIR(mode):
        for root, folders, files in os.walk(path, followlinks=False):
            folders.sort()
            for name in sorted(folders + files):
                found = os.path.join(root, name)
                try:
                    mode = os.lstat(found).st_mode
                except OSError:
                    continue
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    return found, kind(mode)
    return None
