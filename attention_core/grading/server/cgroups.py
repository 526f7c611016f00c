"""One memory and one pids cgroup (v1) for all of a submission's processes together.

Loaded by path by ``worker.py`` (the standard library only). Where a v1 hierarchy is writable (a root
grader on most Linux machines) the guard puts itself, and so every process the submission starts,
into cgroups of its own, with one memory limit and one process count for them all: a fork does not
multiply the per-process limits. Elsewhere nothing is made, and the per-process limits stand alone.
"""

import os
import time


def write_file(path, text):
    with open(path, "w") as f:
        f.write(text)


def parents():
    """This process's own memory and pids cgroup (v1) folders: {controller: path}.

    Only where a v1 hierarchy is mounted at /sys/fs/cgroup/<controller>; a v2 hierarchy needs a
    delegated subtree, which a grader rarely has."""
    found = {}
    try:
        with open("/proc/self/cgroup") as f:
            rows = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return found
    for _, controllers, path in rows:
        for controller in controllers.split(","):
            if controller in ("memory", "pids") and os.path.isdir(f"/sys/fs/cgroup/{controller}"):
                found[controller] = f"/sys/fs/cgroup/{controller}{path.rstrip('/')}"
    return found


def dirs(name):
    """The memory and pids cgroup folders named ``name`` under this process's own: {controller: path}."""
    return {controller: f"{parent}/{name}" for controller, parent in parents().items()}


def enter(name, memory, processes, protections):
    """Put this process (and so everything it starts) into new memory and pids cgroups, with limits for
    all of them together. Where none can be made (no v1 hierarchy, not root), the per-process limits
    stand alone: nothing is recorded as missing."""
    folders = dirs(name)
    if set(folders) != {"memory", "pids"}:
        return
    try:
        for path in folders.values():
            os.mkdir(path, 0o700)
        write_file(folders["memory"] + "/memory.limit_in_bytes", str(memory))
        write_file(folders["pids"] + "/pids.max", str(processes))
        for path in folders.values():
            write_file(path + "/cgroup.procs", str(os.getpid()))
        protections.hold("cgroup")
    except OSError:
        remove(name)


def remove(name, tries=1):
    """Remove the cgroups ``name`` (their processes gone); whether none is left."""
    left = [p for p in dirs(name).values() if os.path.isdir(p)]
    for attempt in range(tries):
        if attempt:
            time.sleep(0.01)  # its last processes may still be ending
        for path in list(left):
            try:
                os.rmdir(path)
                left.remove(path)
            except FileNotFoundError:
                left.remove(path)
            except OSError:
                pass
        if not left:
            break
    return not left


def remove_stale(prefix="attention-sandbox-"):
    """Remove the empty cgroups an earlier server left (one that died cannot remove its submissions');
    a cgroup still in use is not empty, and rmdir refuses it."""
    for parent in parents().values():
        for name in os.listdir(parent):
            if name.startswith(prefix):
                try:
                    os.rmdir(os.path.join(parent, name))
                except OSError:
                    pass
