"""The grading worker: a server that imports torch once and forks one child per submission.

Run by path (``python -I -S worker.py FORK_FD [SITE_DIR ...]``), never as part of the package:
it imports only the standard library, torch and ``wire.py`` beside it (loaded by path), so the
reference solution, the case files and their expected values are never in its memory (nor in any
server's: a server is forked from it, never from a grader process).

That process serves no submission itself: it imports torch once and forks a fresh server for each
control socket it is sent on ``FORK_FD`` or on a grader process's channel (replying with the server's pid as
8 bytes), so that a grader starts a server in milliseconds rather than an import of torch, and servers
forked from one process share torch's pages. It forks a batch's grader processes too (``forked_grader``):
each then imports the grader's side itself, the reference with it. When its last channel ends it exits; its
servers run on until their own control sockets end.

The server reads requests from the grader on the control socket: ``share`` keeps tensors (large
arguments) that the children it forks later inherit, so a call can name them instead of
carrying their bytes (``share file``: one the grader keeps in a sealed memory file, sent as its descriptor, whose
pages the server maps rather than copies); ``open`` (with the child's
socket and the write end of its output pipe passed as file descriptors) forks a child;
``reap`` kills a child's process group and collects its exit status; ``modules`` lists the
server's ``sys.modules``. At the control socket's end of file it kills every child and exits.

A child starts its own session (so its whole process group can be killed), sends fds 1 and 2
to the output pipe, caps its address space, imports the submission and then answers calls on
its socket until end of file. Nothing it sends is ever unpickled by the grader.
"""

import fcntl
import gc
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import sys
import time
import warnings


def load(name, folder=None):
    """``name``.py from beside this file (or from ``folder``), under a name no submission would use."""
    path = os.path.join(folder or os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_grading_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ---- the server -----------------------------------------------------------------------------

INSTANCES = None  # the package's instances.py (loaded by path): a graded class's instance made from its record
CGROUPS = None  # cgroups.py (loaded by path)
CHILD = None  # child.py (loaded by path): a submission's process from inside
SERVER = os.urandom(6).hex()  # in cgroup names: pids repeat across PID namespaces and servers
LEFT: set = set()  # cgroups of reaped submissions not yet removed (their last processes still ending)


def serve(ctl, wire, sandbox):
    # guard pid -> (inner pid, status pipe, the inner's end if already read); name -> tensor
    children, shared = {}, {}
    while True:
        try:
            request, fds = receive_request(ctl, wire)
        except OSError:  # its grader has gone (killed): as at the end of its socket
            request, fds = None, []
        if request is None:
            break
        op = request["op"]
        if op == "open":
            reply = open_child(request, fds, ctl, wire, sandbox, shared, children)
        elif op == "reap":
            pid = request["pid"]
            reply = reap(sandbox, pid, *children.pop(pid)) if pid in children else {"error": f"no child {pid}"}
        elif op == "share":
            shared.update({key: wire.Shared(t, key) for key, t in request["tensors"].items() if t.numel()})
            reply = {"shared": len(shared)}
        elif op == "share file":  # the grader's own sealed memory file: its pages, not a copy
            try:
                shared[request["key"]] = wire.Shared.from_file(fds[0], request["dtype"], request["shape"])
                reply = {"shared": len(shared)}
            except (IndexError, KeyError, OSError, TypeError, ValueError) as err:
                reply = {"error": f"a shared tensor could not be mapped: {err}"}
            finally:
                for fd in fds:
                    os.close(fd)
        elif op == "modules":
            reply = {"modules": sorted(sys.modules)}
        else:
            reply = {"error": f"unknown request {op!r}"}
        try:
            ctl.sendall(wire.encode(reply))
        except OSError:  # its grader has gone while it worked
            break
    for pid, child in children.items():
        reap(sandbox, pid, *child)
    for name in LEFT:  # a submission's last processes may have taken a while to be gone
        CGROUPS.remove(name, tries=200)


def receive_request(ctl, wire):
    """One request and the file descriptors that came with it; (None, []) at end of file."""
    data, fds, _, _ = socket.recv_fds(ctl, wire.HEADER.size, 4)
    if not data:
        return None, []
    rest = wire.read_exact(ctl, wire.HEADER.size - len(data)) if len(data) < wire.HEADER.size else b""
    n_text, n_blob = wire.HEADER.unpack(bytes(data) + bytes(rest))
    body = wire.read_exact(ctl, n_text + n_blob)
    return wire.decode(bytes(body[:n_text]), memoryview(body)[n_text:]), fds


def open_child(request, fds, ctl, wire, sandbox, shared, children):
    """Fork a submission's guard, which makes its inner process; their pids and the protections in force."""
    status_r, status_w = os.pipe()
    server = os.getpid()
    try:
        pid = os.fork()
    except OSError as e:
        for fd in (*fds, status_r, status_w):
            os.close(fd)
        return {"error": f"cannot fork: {e}"}
    if pid == 0:
        try:
            os.close(status_r)
            guard_main(request, fds, ctl, wire, sandbox, shared, status_w, server)
        finally:
            os._exit(70)
    for fd in (*fds, status_w):
        os.close(fd)
    read = read_lines(status_r, 2, timeout=30.0)
    lines = dict(line.partition(" ")[::2] for line in read)
    ended = [line for line in read if line.split(" ")[0] in ("exited", "killed", "dumped")]  # a quick end
    try:  # the guard's line and the inner process's, in either order
        inner, protections = int(lines["inner"]), json.loads(lines["protections"])
    except (KeyError, ValueError):
        inner, protections = int(lines.get("inner", 0)) or None, None
    children[pid] = (inner, status_r, ended)
    if protections is None:
        reap(sandbox, pid, inner, status_r, ended)
        del children[pid]
        return {"error": "a submission's process could not be set up"}
    return {"pid": pid, "inner": inner, "protections": protections}  # inner: its CPU time is read (timing)


def read_lines(fd, count, timeout):
    """Up to ``count`` lines from the pipe ``fd`` (fewer at end of file or after ``timeout`` seconds)."""
    data, deadline = b"", time.monotonic() + timeout
    while data.count(b"\n") < count:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace").splitlines()


def reap(sandbox, pid, inner, status_fd, ended=()):
    """Kill a submission's inner process (its PID namespace with it) and its guard; how the inner ended."""
    ended = list(ended)
    if inner is not None:
        kill(inner)  # never collected by its guard: the pid is still the inner process's own
        if not ended:
            ended = read_lines(status_fd, 1, timeout=2.0)
    kill(pid)
    os.waitpid(pid, 0)
    os.close(status_fd)
    LEFT.add(cgroup_name(pid))
    for name in list(LEFT):  # the processes of its PID namespace may take a moment to be gone
        if CGROUPS.remove(name, tries=20 if name == cgroup_name(pid) else 1):
            LEFT.discard(name)
    how, _, number = (ended[0] if ended else "killed 9").partition(" ")
    if how == "exited":
        return {"code": int(number)}
    try:
        name = signal.Signals(int(number)).name
    except ValueError:
        name = "unknown signal"
    return {"signal": int(number), "name": name}


def cgroup_name(guard):
    """The name of the cgroups a submission's guard (pid ``guard``) makes."""
    return f"attention-sandbox-{SERVER}-{guard}"


def kill(pid):
    """SIGKILL the child ``pid`` and its process group.

    Both: a child just forked may not have called setsid() yet, and then no group ``pid`` exists (but
    neither has it run submission code that could have started anything).
    """
    for send in (os.killpg, os.kill):
        try:
            send(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# ---- a child: one submission ----------------------------------------------------------------


def guard_main(request, fds, ctl, wire, sandbox, shared, status_w, server):
    """The guard: enter the namespaces, fork the inner process, report its pid, wait."""
    name("ac-guard")
    os.setsid()
    ctl.close()
    close_other_fds({0, 1, 2, *fds, status_w})  # e.g. another submission's status pipe, open in the server
    protections = sandbox.Protections()
    plan = request["sandbox"]
    if plan:
        CGROUPS.enter(cgroup_name(os.getpid()), request["memory"], plan["processes"], protections)
    privileged = sandbox.enter_namespaces(plan, protections) if plan else False
    inner = os.fork()
    if inner == 0:
        try:
            name("submission")
            os.setsid()  # the submission's own session (its CPU share), before the sandbox refuses another
            refused = None
            if plan:
                try:
                    copy = sandbox.build(plan, protections, privileged)
                except Exception as e:  # noqa: BLE001 (fail closed: the submission does not run)
                    refused, copy = str(e) if isinstance(e, sandbox.Refused) else f"its sandbox failed: {e!r}", None
                if copy is not None:  # the submission is imported from its copy
                    request = dict(
                        request,
                        entry=sandbox.moved(request["entry"], plan, copy),
                        root=sandbox.moved(request["root"], plan, copy),
                    )
            else:
                protections.miss("namespaces", "the sandbox is off")
            os.write(status_w, f"protections {json.dumps(protections.as_dict())}\n".encode())
            os.close(status_w)
            child_main(request, fds, wire, shared, refused)
        finally:
            os._exit(70)
    os.write(status_w, f"inner {inner}\n".encode())
    for fd in fds:
        os.close(fd)
    sandbox.guard(inner, status_w, server)


def close_other_fds(keep):
    """Close every file descriptor but those in ``keep``."""
    start = 0
    for fd in sorted(keep):
        if start < fd:  # closerange(n, n) would close everything from n (an empty range reaches close_range as n..-1)
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, max(start + 1, os.sysconf("SC_OPEN_MAX")))


def child_main(request, fds, wire, shared, refused=None):
    sock_fd, out_fd = fds
    if os.read(sock_fd, len(wire.GO)) != wire.GO:  # set up ahead: wait for the grader's word (or its end)
        return
    if refused:  # nothing of the submission runs
        socket.socket(fileno=sock_fd).sendall(
            wire.encode(
                {
                    "status": "import error",
                    "message": f"the submission was not run: {refused}",
                    "traceback": [],
                    "names": [],
                }
            )
        )
        return
    if os.getsid(0) != os.getpid():  # (the guard made it a session leader already, where there is one)
        os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(devnull)
    os.close(out_fd)
    sys.stdout.reconfigure(line_buffering=True)  # what was printed before a hang reaches the grader
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfault must not write the server's image to disk
    if request["memory"]:
        resource.setrlimit(resource.RLIMIT_AS, (request["memory"], request["memory"]))
    import torch

    torch.set_num_threads(1)  # the server forked us after importing torch; stay off its thread pool
    sock = socket.socket(fileno=sock_fd)
    child = CHILD.Child(request, wire, torch, shared, INSTANCES)
    sock.sendall(wire.encode(child.hello))
    if child.module is None:
        return
    while True:
        child.copies.clear()
        message = wire.receive(sock, child.copy_shared)
        if message is None:
            return
        reply = child.handle(message)
        CHILD.flush_streams()
        try:
            parts = wire.encode_parts(reply)
        except Exception as e:  # e.g. a list that contains itself
            parts = wire.encode_parts(
                {"status": "raised", "message": f"the result could not be sent: {CHILD.exception_text(e)}"}
            )
        size = sum(len(p) for p in parts)
        if size > request["reply_limit"]:
            parts = wire.encode_parts(
                {
                    "status": "raised",
                    "message": (f"the result is {size} bytes, over the limit of {request['reply_limit']}"),
                }
            )
        wire.send_parts(sock, parts)
        del parts
        if reply["status"] == "crashed":
            return


def warm_up(torch):
    """Run the common kernels and lazy imports once on one thread, so that each child does not pay their
    first-call set-up.

    Backward only where no accelerator is present: there autograd starts no device threads, which a
    fork could not copy (a child would refuse to run backward).
    """
    torch.set_num_threads(1)  # no thread pool exists when we fork
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    accelerator = getattr(torch, "accelerator", None)
    x.requires_grad_(accelerator is not None and accelerator.device_count() == 0)
    for t in (x, x.float()):
        w = (t @ t.transpose(-2, -1) / 2.0).masked_fill(~torch.ones(3, 3, dtype=torch.bool).tril(), float("-inf"))
        w = (w - w.max(-1, keepdim=True).values).exp().softmax(-1)
        y = (w.sum(-1, keepdim=True) + t.mean(-1).var(-1).sqrt().sum()).cumsum(-2)
        y.equal(w)
        if x.requires_grad:
            torch.autograd.grad((y * y).sum(), [x])
        torch.frombuffer(bytearray(8), dtype=torch.float32).reshape(2).clone()
    # Loads torch's symbolic-shape machinery (about 0.3 s of imports): once here, not in every child.
    torch.broadcast_shapes((2, 1), (3,))


def fork_servers(forks, wire, sandbox):
    """Serve ``forks`` and the channels made here: ``s`` with a control socket forks a server for it; ``g`` with a
    socket to a batch's command and the command's stdout and stderr forks a grader process, given a channel of its
    own here (the reply to each: the pid, 8 bytes). Ends when the last channel ends."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the servers that end are reaped by the kernel
    channels = [forks]
    while channels:
        for channel in select.select(channels, [], [])[0]:
            try:
                data, fds, _, _ = socket.recv_fds(channel, 1, 3)
            except OSError:
                data, fds = b"", []
            if (data, len(fds)) in ((b"s", 1), (b"g", 3)):
                own = socket.socketpair() if data == b"g" else ()  # a grader's channel here, for its servers
                pid = os.fork()
                if pid == 0:
                    for each in (*channels, *own[:1]):  # a server (and its children) holds no way to ask for more
                        each.close()
                    if data == b"s":
                        forked_server(fds[0], wire, sandbox)
                    forked_grader(fds, own[1], wire)
                for fd in fds:
                    os.close(fd)
                if own:
                    own[1].close()
                    channels.append(own[0])
                try:
                    channel.sendall(pid.to_bytes(8, "big"))
                except OSError:
                    channels.remove(channel)
                    channel.close()
            else:  # its end (or what no grader sends)
                for fd in fds:
                    os.close(fd)
                channels.remove(channel)
                channel.close()


def forked_server(fd, wire, sandbox):
    """A server just forked: serve the control socket ``fd``, then exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    name("ac-server")
    global SERVER
    SERVER = os.urandom(6).hex()  # its own, not the forking process's
    CGROUPS.remove_stale()
    ctl = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)  # the low numbers left for what a child receives
    os.close(fd)
    serve(socket.socket(fileno=ctl), wire, sandbox)
    os._exit(0)


def forked_grader(fds, forks, wire):
    """A batch's grader process just forked, torch imported and warm: ``fds`` its socket to the batch's command,
    the command's stdout and stderr; ``forks`` its own channel here, for its servers. The command sends where its
    modules are and which function to run (JSON); that function is given the two sockets; then it exits."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # (SIGINT stays ignored: the command handles ^C)
    sock_fd, out_fd, err_fd = fds
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)
    name("ac-grader")
    code = 70
    try:
        sock = socket.socket(fileno=sock_fd)
        size = wire.read_exact(sock, 8)
        start = json.loads(wire.read_exact(sock, int.from_bytes(size, "big")) if size else b"null")
        if start is None:  # the command ended before it said what to run
            return
        os.chdir(start["cwd"])
        sys.path[:] = start["path"] + [p for p in sys.path if p not in start["path"]]
        import site  # noqa: PLC0415 (this interpreter started without it: the servers' must stay clean)

        for folder in start["sites"]:  # their .pth files, as the command's interpreter ran them (import hooks:
            site.addsitedir(folder)  # editable installs, namespace packages)
        module = importlib.import_module(start["module"])
        getattr(module, start["function"])(sock, forks)
        code = 0
    except SystemExit as end:
        if isinstance(end.code, str):
            print(end.code, file=sys.stderr)
        code = end.code if isinstance(end.code, int) else 0 if end.code is None else 1
    except BaseException:  # noqa: BLE001 (told on the command's stderr)
        import traceback  # noqa: PLC0415

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110
                pass
        os._exit(code)


def name(text):
    """Name this process (its ``comm``, as ps and /proc show it): the batch's processes told apart."""
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(text)
    except OSError:
        pass


def main(argv):
    forks_fd, site_dirs = int(argv[1]), argv[2:]
    sys.path.extend(d for d in site_dirs if d not in sys.path)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the grader handles ^C and closes us
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    name("ac-forks")
    global INSTANCES, CGROUPS, CHILD
    wire = load("wire")  # imports torch
    sandbox, CGROUPS, CHILD = load("sandbox"), load("cgroups"), load("child")
    INSTANCES = load("instances", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    warm_up(sys.modules["torch"])
    gc.freeze()  # the children's collections leave the server's objects alone (and their pages shared)
    fork_servers(socket.socket(fileno=forks_fd), wire, sandbox)
    os._exit(0)  # skip the interpreter's and torch's finalisation: nothing is left to flush


if __name__ == "__main__":
    main(sys.argv)
