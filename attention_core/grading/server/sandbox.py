"""The sandbox a submission's process runs in: namespaces, a fresh root built from an allow-list, limits.

Loaded by path by ``worker.py`` (the standard library only). A submission's process is made in
two steps. The *guard*, forked by the worker server, enters new user (unless it is root), PID,
mount and network namespaces and forks the *inner* process, PID 1 of the new PID namespace,
which builds a fresh root and runs the submission; the guard only waits. Killing the inner
process ends its PID namespace, and with it every process the submission started.

The fresh root is a small tmpfs holding read-only binds of what the plan lists (the Python
installation, the site folders torch needs with this project's files masked, ``/usr``,
``/lib*``, the submission itself), a minimal ``/etc``, a few device nodes, a new ``/proc`` and
size-limited tmpfs for ``/tmp``, ``/dev/shm`` and ``$HOME``; the old root is detached. Then the
process drops to an unprivileged uid (when it was root), enters one more user and mount
namespace, which locks every mount (a process that is root in its own user namespace could
otherwise unmount them and look underneath), drops its capabilities and sets its limits.

Where a step is refused (no user namespaces, a seccomp filter, macOS) the process goes on with
what it has; ``Protections`` lists what is in force and what is not, and every report says so.
"""

import ctypes
import errno
import fcntl
import os
import platform
import resource
import shutil
import signal
import socket
import struct

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWUTS = 0x08000000, 0x04000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    16384,
    1 << 18,
)
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE, PR_SET_PDEATHSIG = 38, 4, 1
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41}.get(platform.machine())
NOBODY = 65534
HOME = "/home/sandbox"
SUBMISSION = "/submission"  # where the copy of the submission lies in the fresh root

# What each protection is called in reports, in the order they are set up.
NAMES = {
    "namespaces": "own user, PID, mount, network, IPC and UTS namespaces",
    "fresh_root": "a fresh root holding only the allow-list (the checkout, the case files and other "
    "submissions are not there)",
    "proc": "its own /proc (only its own processes)",
    "network": "no network (loopback only)",
    "unprivileged": "an unprivileged uid",
    "locked": "mounts locked by a nested user namespace",
    "no_capabilities": "no capabilities, no new privileges",
    "no_user_namespaces": "no new user namespaces (where it would have every capability again)",
    "limits": "limits on CPU time, memory, file size, processes and open files",
    "seccomp": "the kernel's keyrings, ptrace, other processes' memory and files, bpf, perf events, userfaultfd "
    "and module loading refused (seccomp)",
    "cgroup": "one memory and process-count limit for all of its processes together",
    "private_tmp": "a private temporary folder and home",
}


def warning(protections):
    """A loud paragraph naming each protection of the sandbox that was not in force; "" when all were."""
    missing = (protections or {}).get("missing") or {}
    if not missing:
        return ""
    lines = [
        f"WARNING: this submission ran without {len(missing)} of the sandbox's protections (see docs/isolation.md):"
    ]
    lines += [f"  - {NAMES.get(name, name)}: not in force ({why})" for name, why in missing.items()]
    return "\n".join(lines)


class Refused(Exception):
    """The sandbox could not be built for this submission: it must not run."""


class Protections:
    """What is in force for one submission's process (names from NAMES) and why the rest is not."""

    def __init__(self):
        self.held, self.missing = [], {}

    def hold(self, name):
        self.held.append(name)

    def miss(self, name, why):
        self.missing[name] = str(why)[:300]

    def attempt(self, name, action):
        """Run ``action``: ``name`` is held if it returns, missing (with the error) if the system refuses."""
        try:
            action()
            self.hold(name)
        except (OSError, ValueError) as e:
            self.miss(name, e)

    def as_dict(self):
        return {"held": self.held, "missing": self.missing}


_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _call(result, what):
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _b(text):
    return None if text is None else os.fsencode(text)


def unshare(flags):
    _call(libc().unshare(ctypes.c_int(flags)), "unshare")


def mount(source, target, fstype, flags, data=None):
    _call(libc().mount(_b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data)), f"mount {target}")


def umount(target, flags=0):
    _call(libc().umount2(_b(target), ctypes.c_int(flags)), f"umount {target}")


def write_file(path, text):
    with open(path, "w") as f:
        f.write(text)


def uid_is_mapped(uid):
    """Whether ``uid`` exists in this process's user namespace (so that it can become it)."""
    try:
        with open("/proc/self/uid_map") as f:
            rows = [tuple(map(int, line.split())) for line in f if line.strip()]
    except OSError:
        return True  # no user namespaces here: every uid exists
    return any(inside <= uid < inside + count for inside, _, count in rows)


def map_ids(inside_uid, inside_gid, outside_uid, outside_gid):
    """Write this process's own (new) user namespace's maps: one uid and one gid."""
    try:
        write_file("/proc/self/setgroups", "deny")
    except FileNotFoundError:
        pass
    write_file("/proc/self/uid_map", f"{inside_uid} {outside_uid} 1\n")
    write_file("/proc/self/gid_map", f"{inside_gid} {outside_gid} 1\n")


# ---- the guard: outside, in the worker server's child -------------------------------------------


def enter_namespaces(plan, protections):
    """In the guard, before it forks the inner process. Returns whether this process is root with
    a real unprivileged uid to drop to (then no user namespace is made here)."""
    privileged = os.geteuid() == 0 and uid_is_mapped(NOBODY)
    if not plan["namespaces"]:
        protections.miss("namespaces", "turned off (namespaces=False)")
        return privileged
    flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    uid, gid = os.geteuid(), os.getegid()
    try:
        unshare(flags if privileged else flags | CLONE_NEWUSER)
        if not privileged:
            map_ids(0, 0, uid, gid)
        protections.hold("namespaces")
    except (OSError, AttributeError) as e:
        protections.miss("namespaces", e)
    return privileged


# ---- the inner process: PID 1 of the new namespace ------------------------------------------------


def build(plan, protections, privileged):
    """Build the fresh root, drop privileges, lock the mounts, set the limits. What fails is recorded in
    ``protections``; where the namespaces were made but the fresh root cannot be (a FIFO or an oversized
    file in the submission, …), raises Refused: the submission does not run rather than run with the
    whole file system in view. Returns the folder that holds the submission's copy (None: it could
    not be copied, and is imported where it lies)."""
    namespaces = "namespaces" in protections.held
    if namespaces:
        try:
            _fresh_root(plan, protections)
        except Exception as e:  # noqa: BLE001 (RecursionError from a deep folder, too)
            protections.miss("fresh_root", e)
            raise Refused(f"its sandbox could not be built: {str(e)[:300]}") from None
        for name in ("fresh_root", "network", "private_tmp"):
            protections.hold(name)
        try:
            _loopback_up()
        except OSError:
            pass  # loopback stays down: still no way out
        os.environ.update(HOME=HOME, TMPDIR="/tmp")
        copy = SUBMISSION
    else:
        for name in ("fresh_root", "proc", "network"):
            protections.miss(name, "no namespaces")
        os.environ.update(HOME=plan["scratch"], TMPDIR=plan["scratch"])
        copy = _private_scratch(plan, protections, privileged)
    if privileged:
        protections.attempt("unprivileged", _drop_to_nobody)
    elif os.geteuid() == 0 and not namespaces:
        protections.miss("unprivileged", "root, and no unprivileged uid to drop to")
    else:
        protections.hold("unprivileged")  # not root outside: the grader's own unprivileged uid
    if namespaces:
        protections.attempt("locked", _lock_mounts)
        # No user namespace of its own, in which it would have every capability again.
        protections.attempt("no_user_namespaces", lambda: write_file("/proc/sys/user/max_user_namespaces", "0"))
    protections.attempt("no_capabilities", _drop_capabilities)
    protections.attempt("seccomp", _refuse_dangerous_calls)
    protections.attempt("limits", lambda: set_limits(plan["limits"]))
    return copy


# The system calls no submission needs and a hostile one would use: the keyrings (where CI tokens live),
# other processes' memory, the kernel's own programs and modules; a session or process group of its own (the
# kernel shares CPU time between sessions: each submission runs in one, and its processes stay in it) and
# memory that no limit counts (memfd). Numbers by machine.
REFUSED_CALLS = {
    "x86_64": (
        0xC000003E,
        {
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "ptrace": 101,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "init_module": 175,
            "finit_module": 313,
            "kexec_load": 246,
            "pidfd_getfd": 438,
            "process_madvise": 440,
            "setsid": 112,
            "setpgid": 109,
            "memfd_create": 319,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "ptrace": 117,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "init_module": 105,
            "finit_module": 273,
            "kexec_load": 104,
            "pidfd_getfd": 438,
            "process_madvise": 440,
            "setsid": 157,
            "setpgid": 154,
            "memfd_create": 279,
        },
    ),
}
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program(arch, numbers):
    """A classic BPF program: EPERM for each system call of ``numbers``, every other allowed; a call made
    under another architecture's numbering (the x32 or i386 entry points) is refused whole."""
    load, jump_eq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    allow, eperm = 0x7FFF0000, 0x00050000 | errno.EPERM
    program = [(load, 0, 0, 4), (jump_eq, 1, 0, arch), (ret, 0, 0, eperm), (load, 0, 0, 0)]
    if arch == 0xC000003E:  # x32 system calls carry bit 30 on x86_64's numbering: refused
        program += [(0x35, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # BPF_JMP|BPF_JGE|BPF_K
    for i, number in enumerate(numbers):
        program.append((jump_eq, len(numbers) - i, 0, number))  # to the EPERM after the allow
    program += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    return program


def _refuse_dangerous_calls():
    machine = os.uname().machine
    if machine not in REFUSED_CALLS:
        raise OSError(f"no system call numbers known for {machine}")
    arch, numbers = REFUSED_CALLS[machine]
    program = seccomp_program(arch, sorted(numbers.values()))
    filters = (_SockFilter * len(program))(*[_SockFilter(*instruction) for instruction in program])
    fprog = _SockFprog(len(program), filters)
    _call(libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "prctl(SECCOMP)")


def _drop_to_nobody():
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    _call(libc().prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(DUMPABLE)")  # its own /proc files again


def _lock_mounts():
    """One more user and mount namespace: the mounts made before are locked in it."""
    uid, gid = os.geteuid(), os.getegid()
    unshare(CLONE_NEWUSER | CLONE_NEWNS)
    map_ids(NOBODY, NOBODY, uid, gid)


def _fresh_root(plan, protections):
    root = plan["root"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=755")
    for path, size, mode in (
        ("/tmp", plan["tmp_size"], "1777"),
        ("/dev/shm", plan["tmp_size"], "1777"),
        (HOME, plan["tmp_size"], "777"),
    ):  # first: a bind may lie under /tmp
        os.makedirs(root + path, exist_ok=True)
        mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={mode}")
    for link, target in plan["links"]:
        _parents(root + link)
        os.symlink(target, root + link)
    for source in sorted(plan["binds"], key=len):
        _bind(source, root + source)
    os.makedirs(root + SUBMISSION)
    mount("tmpfs", root + SUBMISSION, "tmpfs", MS_NOSUID | MS_NODEV, f"size={plan['tmp_size']},mode=755")
    _copy_submission(plan["submission"], root + SUBMISSION)
    _read_only(root + SUBMISSION)
    for path in plan["masks"]:
        target = root + path
        if os.path.isdir(target):
            mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=555")
        elif os.path.lexists(target):
            mount("/dev/null", target, None, MS_BIND)
    for name in ("null", "zero", "full", "random", "urandom"):
        _bind(f"/dev/{name}", f"{root}/dev/{name}", read_only=False)  # writable, as devices are
    os.makedirs(root + "/etc", exist_ok=True)
    write_file(root + "/etc/passwd", f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{NOBODY}:{NOBODY}::{HOME}:/bin/sh\n")
    write_file(root + "/etc/group", f"root:x:0:\nsandbox:x:{NOBODY}:\n")
    write_file(root + "/etc/hosts", "127.0.0.1 localhost\n::1 localhost\n")
    if os.path.exists("/etc/ld.so.cache"):
        _bind("/etc/ld.so.cache", root + "/etc/ld.so.cache")
    os.makedirs(root + "/proc", exist_ok=True)
    protections.attempt("proc", lambda: mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC))
    _read_only(root)
    os.chdir(root)
    if SYS_PIVOT_ROOT is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown on {platform.machine()}")
    _call(libc().syscall(ctypes.c_long(SYS_PIVOT_ROOT), b".", b"."), "pivot_root")
    umount(".", MNT_DETACH)  # the old root, stacked on top by pivot_root(".", "."): gone
    os.chdir("/")


def _copy_submission(source, target):
    """The submission's file or folder, copied (links as links) into ``target``, readable by all: read
    here, while this process may still read what the teacher's files allow."""
    destination = os.path.join(target, os.path.basename(source))
    if os.path.isdir(source):
        shutil.copytree(source, destination, symlinks=True, copy_function=shutil.copyfile)
    else:
        shutil.copyfile(source, destination)
    for folder, dirs, files in os.walk(target):  # links stay links: never followed, never changed
        for name in dirs + files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if name in dirs else 0o644)


def moved(path, plan, copy):
    """Where ``path`` (the submission, or a path inside it) lies in its copy, made in the folder ``copy``."""
    parent = os.path.dirname(plan["submission"])
    return copy + os.path.realpath(path)[len(parent) :]


def _parents(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)


def _bind(source, target, read_only=True):
    """Bind ``source`` at ``target`` (made as an empty folder or file), then make it read-only."""
    _parents(target)
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    elif not os.path.lexists(target):
        open(target, "w").close()
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _read_only(target)


def _read_only(path):
    """Remount the mount at ``path`` read-only and nosuid, keeping the flags a mount made in a user
    namespace may not drop (nodev, noexec)."""
    have = os.statvfs(path).f_flag
    kept = sum(flag for st, flag in ((os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC)) if have & st)
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept)


def _loopback_up():
    """Bring ``lo`` up in the new network namespace (SIOCSIFFLAGS, IFF_UP | IFF_RUNNING)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0x1 | 0x40)
        fcntl.ioctl(s.fileno(), 0x8914, request)


def _private_scratch(plan, protections, privileged):
    """Without a fresh root: the scratch folder the client made, private to this submission, with
    the submission's copy in it. Returns the copy's folder, or None."""
    scratch, copy = plan["scratch"], None
    try:
        copy = os.path.join(scratch, "submission")
        os.mkdir(copy, 0o755)
        _copy_submission(plan["submission"], copy)
    except Exception:  # noqa: BLE001 (imported where it lies, then)
        copy = None

    def private():
        if privileged:
            os.chown(scratch, NOBODY, NOBODY)
        os.chmod(scratch, 0o700)
        os.chdir(scratch)

    protections.attempt("private_tmp", private)
    return copy


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities():
    _call(libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    data = (_CapData * 2)()
    _call(libc().capset(ctypes.byref(header), data), "capset")


def set_limits(limits):
    for name, value in limits.items():
        kind = getattr(resource, name)
        soft, hard = (value, value) if not isinstance(value, (list, tuple)) else value
        resource.setrlimit(kind, (soft, hard))


# ---- the guard's wait -------------------------------------------------------------------------------


def guard(inner, status_fd, server):
    """Wait for the inner process without collecting it (its pid stays its own until the server has
    killed it), report how it ended on ``status_fd``, then wait to be killed. Should the server die
    first, kill the inner process (and so its PID namespace) and leave."""

    def orphaned(*_):
        try:
            os.kill(inner, signal.SIGKILL)
        finally:
            os._exit(0)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, orphaned)
    try:
        _call(libc().prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0), "prctl(PDEATHSIG)")
    except (OSError, AttributeError):
        pass
    if os.getppid() != server:  # the server died before the signal was asked for
        orphaned()
    try:
        info = os.waitid(os.P_PID, inner, os.WEXITED | os.WNOWAIT)
        ended = {1: "exited", 2: "killed", 3: "dumped"}.get(info.si_code, "exited")
        os.write(status_fd, f"{ended} {info.si_status}\n".encode())
    except OSError:
        pass
    while True:
        signal.pause()
