"""A submission's time: the CPU time its process spends, with a wall-clock ceiling.

A call's time limit and a submission's budget are counted in the CPU time of the submission's process
(its threads, and the children it waited for), read from ``/proc``: a neighbour graded at the same time
on a busy machine costs it nothing. A call that sleeps or waits spends no CPU time: it ends at a
wall-clock ceiling, :data:`CEILING` times its limit (a submission's budget: the budget itself). Where ``/proc`` cannot be read, the wall clock
counts alone (as before the CPU time could be read).
"""

import os

CEILING = 2.0  # a wall-clock ceiling: this many times a CPU-time limit
CHECK_EVERY = 0.1  # seconds between readings of the CPU time while a call runs
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """The CPU time of process ``pid`` (user and system, its threads and the children it waited for) in
    seconds, or None where it cannot be read (the process is gone, or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        fields = data[data.rindex(b")") + 2 :].split()
        return sum(int(x) for x in fields[11:15]) / _TICK  # utime, stime, cutime, cstime
    except (OSError, ValueError, IndexError):
        return None


class Meter:
    """The CPU time process ``pid`` spends from one reading to the next."""

    def __init__(self, pid):
        self.pid = pid
        self.mark = (cpu_seconds(pid) or 0.0) if pid else 0.0

    def since(self, *, take=False):
        """CPU seconds since the last take (None where it cannot be read); with ``take``, the next counts from now."""
        now = cpu_seconds(self.pid) if self.pid else None
        if now is None:
            return None
        used = max(0.0, now - self.mark)
        if take:
            self.mark = now
        return used

    def take(self):
        """CPU seconds since the last take; the next counts from now."""
        return self.since(take=True)
