"""The memory a grading batch's trusted processes hold together, as PSS (shared pages, such as torch's
libraries, divided among the processes that map them, so counted once in all).

The trusted processes: the batch command, its forking process, the grader processes and the worker servers
forked from it, and the servers' guards (each submission's process before its sandbox); not the submissions'
processes (their own memory is limited inside the sandbox). Read from /proc; the batch's tree is found from the
command's pid.
"""

import json
import os
import subprocess
import sys


def _read(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _parent(pid):
    stat = _read(pid, "stat")
    try:
        return int(stat.rsplit(b")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return -1


def pss_kib(pid):
    for line in _read(pid, "smaps_rollup").splitlines():
        if line.startswith(b"Pss:"):
            return int(line.split()[1])
    return 0


def rss_kib(pid):
    for line in _read(pid, "status").splitlines():
        if line.startswith(b"VmRSS:"):
            return int(line.split()[1])
    return 0


def graders_rss_kib(root):
    """The resident memory of the batch's own processes together (the command and its grader processes; not the
    forking process, not the worker servers, not the submissions), in KiB."""
    return sum(rss_kib(pid) for pid in trusted(root, servers=False))


def trusted(root, servers=True):
    """The pids of the trusted processes of the batch whose command is ``root``: the command and every process
    under it but a submission's. A submission's processes are those under a guard, and a guard is a child of a
    worker server (``ac-server``): the names the grading processes give themselves, read from their parents, never
    from a submission's own. ``servers`` False: the command and its grader processes (``ac-grader``) alone."""
    pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    parents = {pid: _parent(pid) for pid in pids}
    names = {pid: _read(pid, "comm").strip() for pid in pids}
    tree, grown = {root}, True
    while grown:
        grown = False
        for pid in pids:
            if pid not in tree and parents[pid] in tree:
                tree.add(pid)
                grown = True
    guards = {pid for pid in tree if names.get(parents[pid]) == b"ac-server"}

    def submission(pid):
        while pid != root and pid in tree:
            pid = parents[pid]
            if pid in guards:
                return True
        return False

    if not servers:
        return sorted(pid for pid in tree if pid == root or names[pid] == b"ac-grader")
    return sorted(pid for pid in tree if not submission(pid))


def trusted_pss_kib(root):
    """The PSS of the batch's trusted processes together, in KiB."""
    return sum(pss_kib(pid) for pid in trusted(root))


def peak(command, **popen):
    """Run ``command`` (a batch), sampling its trusted processes' PSS every 0.2 s; (its exit code, the peak in KiB)."""
    batch = subprocess.Popen(command, **popen)
    most = 0
    while batch.poll() is None:
        most = max(most, trusted_pss_kib(batch.pid))
        try:
            batch.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
    return batch.returncode, most


if __name__ == "__main__":  # python trusted_memory.py COMMAND...: prints {"code": …, "peak_kib": …}
    code, most = peak(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(json.dumps({"code": code, "peak_kib": most}))
