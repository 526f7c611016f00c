"""One submission process's connection: a request sent, its reply read within its limits, its output drained.

The grader talks to a submission's child on a socket and reads its stdout and stderr from a pipe. A
reply is read only up to the bytes its call can need (its header gives its size first); the child may
spend a call's CPU time (see :mod:`timing`) within the wall-clock ceiling.
"""

import os
import select
import time

from attention_core.grading.process import timing
from attention_core.grading.process.replies import TIMEOUT, Output, drain
from attention_core.grading.server import wire

WAITED = "waited"  # a call's wall-clock ceiling reached (TIMEOUT: its CPU time)
FIRST_READ = 1 << 16  # bytes a reply is first read into, before its header gives its size


class Channel:
    """The socket ``sock`` and output pipe ``out`` of one child (``pid``: its guard), whose CPU time ``meter`` reads."""

    def __init__(self, sock, out, pid, meter, *, output_limit, reply_limit):
        self.sock, self.out, self.pid, self.meter = sock, out, pid, meter
        self.output_limit, self.reply_limit = output_limit, reply_limit

    def exchange(self, data, timeout, wall, most=None):
        """Send ``data`` and wait for one reply, draining output: (the reply's bytes, Output, problem or None).
        The process may spend ``timeout`` seconds of CPU time from the meter's last reading (problem TIMEOUT), within
        ``wall`` seconds of wall-clock time (problem WAITED)."""
        output = Output(self.output_limit)
        now = started = time.monotonic()
        deadline = now + wall
        check = now + min(timeout, timing.CHECK_EVERY)
        pending, buf, got, need = memoryview(data), bytearray(FIRST_READ), 0, None
        if pending:  # a small request fits the socket's buffer: send it before the first poll (one sent ahead is)
            pending = self.send(pending)
        poller = select.poll()
        poller.register(self.out, select.POLLIN)
        poller.register(self.sock, select.POLLIN | (select.POLLOUT if pending else 0))
        out_open, problem = True, None
        while True:
            now = time.monotonic()
            if now >= deadline:
                problem = WAITED
                break
            if now >= check:
                spent = self.meter.since()
                if spent is None:  # no reading: the wall clock counts alone
                    spent = now - started
                if spent >= timeout:
                    problem = TIMEOUT
                    break
                check = now + timing.CHECK_EVERY
            events = dict(poller.poll(max(0.0, min(deadline, check) - now) * 1000))
            if out_open and self.out in events:
                out_open = drain(self.out, output)
                if not out_open:
                    poller.unregister(self.out)
            sock_events = events.get(self.sock.fileno(), 0)
            if pending and sock_events & select.POLLOUT:
                pending = self.send(pending)
                if not pending:
                    poller.modify(self.sock, select.POLLIN)
            if sock_events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                read = self.sock.recv_into(memoryview(buf)[got:]) if sock_events & select.POLLIN else 0
                if not read:
                    problem = "the submission's process died"
                    break
                got += read
                if need is None and got >= wire.HEADER.size:
                    n_text, n_blob = wire.HEADER.unpack_from(buf)
                    need = wire.HEADER.size + n_text + n_blob
                    most = most or self.reply_limit
                    if need > most:
                        problem = (
                            f"the reply is {need} bytes, over the {most} bytes this call can need (its "
                            f"results, gradients and messages): it was not read"
                        )
                        break
                    if need > len(buf):  # a large reply: the rest is read straight into a buffer of its size
                        larger = bytearray(need)
                        larger[:got] = buf[:got]
                        buf = larger
                if need is not None and got >= need:
                    break
        if out_open:
            drain(self.out, output)
        if problem is not None:
            return None, output, problem
        return memoryview(buf)[:need], output, None

    def send(self, pending):
        """Send what the socket takes now; the rest. A dead peer takes nothing and shows as end of file."""
        try:
            return pending[self.sock.send(pending) :]
        except BlockingIOError:
            return pending
        except (BrokenPipeError, ConnectionResetError):
            return pending[:0]

    def close(self):
        self.sock.close()
        os.close(self.out)
