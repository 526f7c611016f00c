"""The grading worker: a server that imports torch once and forks one child per submission.

Run by path (``python -I -S worker.py CONTROL_FD [SITE_DIR ...]``), never as part of the package:
it imports only the standard library, torch and ``wire.py`` beside it (loaded by path), so the
reference solution, the case files and their expected values are never in its memory.

The server reads requests from the grader on the control socket: ``share`` keeps tensors (large
arguments) that the children it forks later inherit, so a call can name them instead of
carrying their bytes; ``open`` (with the child's
socket and the write end of its output pipe passed as file descriptors) forks a child;
``reap`` kills a child's process group and collects its exit status; ``modules`` lists the
server's ``sys.modules``. At the control socket's end of file it kills every child and exits.

A child starts its own session (so its whole process group can be killed), sends fds 1 and 2
to the output pipe, caps its address space, imports the submission and then answers calls on
its socket until end of file. Nothing it sends is ever unpickled by the grader.
"""

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
import traceback
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
SERVER = os.urandom(6).hex()  # in cgroup names: pids repeat across PID namespaces and servers
LEFT: set = set()  # cgroups of reaped submissions not yet removed (their last processes still ending)


def serve(ctl, wire, sandbox):
    # guard pid -> (inner pid, status pipe, the inner's end if already read); name -> tensor
    children, shared = {}, {}
    while True:
        request, fds = receive_request(ctl, wire)
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
        elif op == "modules":
            reply = {"modules": sorted(sys.modules)}
        else:
            reply = {"error": f"unknown request {op!r}"}
        ctl.sendall(wire.encode(reply))
    for pid, child in children.items():
        reap(sandbox, pid, *child)
    for name in LEFT:  # a submission's last processes may have taken a while to be gone
        sandbox.remove_cgroups(name, tries=200)


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
        if sandbox.remove_cgroups(name, tries=20 if name == cgroup_name(pid) else 1):
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
    os.setsid()
    ctl.close()
    close_other_fds({0, 1, 2, *fds, status_w})  # e.g. another submission's status pipe, open in the server
    protections = sandbox.Protections()
    plan = request["sandbox"]
    if plan:
        sandbox.enter_cgroups(cgroup_name(os.getpid()), request["memory"], plan["processes"], protections)
    privileged = sandbox.enter_namespaces(plan, protections) if plan else False
    inner = os.fork()
    if inner == 0:
        try:
            os.setsid()  # the submission's own session (its CPU share), before the sandbox refuses another
            refused = None
            if plan:
                try:
                    copy = sandbox.build(plan, protections, privileged)
                except Exception as e:  # noqa: BLE001 (fail closed: the submission does not run)
                    refused, copy = str(e) if isinstance(e, sandbox.Refused) else f"its sandbox failed: {e!r}", None
                if copy is not None:  # the submission is imported from its copy
                    request = dict(request, entry=sandbox.moved(request["entry"], plan, copy),
                                   root=sandbox.moved(request["root"], plan, copy))
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
        socket.socket(fileno=sock_fd).sendall(wire.encode(
            {"status": "import error", "message": f"the submission was not run: {refused}", "traceback": [],
             "names": []}))
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
    child = Child(request, wire, torch, shared)
    sock.sendall(wire.encode(child.hello))
    if child.module is None:
        return
    while True:
        child.copies.clear()
        message = wire.receive(sock, child.copy_shared)
        if message is None:
            return
        reply = child.handle(message)
        flush_streams()
        try:
            parts = wire.encode_parts(reply)
        except Exception as e:  # e.g. a list that contains itself
            parts = wire.encode_parts({"status": "raised",
                                       "message": f"the result could not be sent: {exception_text(e)}"})
        size = sum(len(p) for p in parts)
        if size > request["reply_limit"]:
            parts = wire.encode_parts({"status": "raised", "message": (
                f"the result is {size} bytes, over the limit of {request['reply_limit']}")})
        wire.send_parts(sock, parts)
        del parts
        if reply["status"] == "crashed":
            return


def flush_streams():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def exception_text(e):
    try:
        return "".join(traceback.format_exception_only(type(e), e)).strip()[:4000]
    except Exception:
        return type(e).__name__


class Child:
    """A submission's module and the calls into it."""

    def __init__(self, request, wire, torch, shared):
        self.wire, self.torch = wire, torch
        self.shared = shared  # name -> a tensor the server kept (inherited): calls get copies
        self.copies = {}  # id(copy) -> the wire.Shared it is a copy of, for the current call
        self.root = request["root"]
        self.module = None
        sys.path.insert(0, self.root)
        package = [self.root] if request["package"] else None
        name = request["module"]
        if name in sys.modules:  # a file called json.py must not replace the worker's json
            name = "_submission"
        spec = importlib.util.spec_from_file_location(name, request["entry"],
                                                      submodule_search_locations=package)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        import builtins
        for word in ("exit", "quit"):  # what site adds, which -S leaves out: a file may end with exit()
            if not hasattr(builtins, word):
                setattr(builtins, word, sys.exit)
        try:
            spec.loader.exec_module(module)
        except SystemExit:  # exit() at the end of a script: what it defined so far is graded, as a run would leave it
            flush_streams()
            print("the submission called exit() while it was imported: what it defined before that is graded",
                  file=sys.stderr)
            flush_streams()
        except BaseException as e:
            flush_streams()
            self.hello = {"status": "import error", "message": exception_text(e), "traceback": self.frames(e),
                          "names": []}
            return
        flush_streams()
        self.module = module
        names = [n for n in request["names"] if callable(self.lookup(n))]
        self.hello = {"status": "ok", "message": "", "traceback": [], "names": names}

    def copy_shared(self, key):
        kept = self.shared.get(key)
        if kept is None:
            return None
        # The same tensor twice in one call (attention(x, x, x)) arrives as separate tensors, as inline ones do.
        again = any(known is kept for known in self.copies.values())
        copy = kept.original.clone() if again else kept.fresh()
        self.copies[id(copy)] = kept
        return copy

    def lookup(self, name):
        try:
            return getattr(self.module, name, None)
        except Exception:
            return None

    def frames(self, e):
        """The traceback lines of ``e`` inside the submission's folder, its paths relative to it."""
        prefix = self.root.rstrip(os.sep) + os.sep
        kept = [traceback.FrameSummary(f.filename[len(prefix):], f.lineno, f.name, line=f.line)
                for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(prefix)]
        return [line for entry in traceback.format_list(kept) for line in entry.rstrip("\n").split("\n")]

    def handle(self, message):
        if message.get("op") == "calls":  # several calls in one round trip: their replies in a list
            replies = []
            for one in message["calls"]:
                replies.append(self.handle({**one, "grad_seed": None, "keep": None}))
                if replies[-1]["status"] == "crashed":
                    return replies[-1]
            return {"status": "ok", "value": replies, "mutated": []}
        torch = self.torch
        name, args, kwargs, seed = message["name"], list(message["args"]), message["kwargs"], message["grad_seed"]
        fn = self.lookup(name)
        if not callable(fn):
            return {"status": "not implemented", "message": f"the submission defines no function {name}"}
        parameters, made = [], False
        if isinstance(fn, type) and args and INSTANCES.is_record(args[0]):  # a class: made, given the state, called
            record = args.pop(0)
            try:
                fn = INSTANCES.implementation_instance(fn, record)
            except INSTANCES.StateMismatch as e:
                return {"status": "raised", "message": f"StateMismatch: {e}", "traceback": []}
            except NotImplementedError as e:
                return {"status": "not implemented", "message": exception_text(e), "traceback": self.frames(e)}
            except Exception as e:
                return {"status": "raised", "message": f"{name}(...) could not be made: {exception_text(e)}",
                        "traceback": self.frames(e)}
            parameters, made = INSTANCES.parameters(fn) if seed is not None else [], True
            args.insert(0, None)  # positions keep counting from the record's: the grader's labels
        # The mutation check's old values: a shared argument's untouched original (the wire.Shared), a
        # gradient's leaf (the call gets a copy of it), else a copy: each made once, before the call.
        originals = {label: self.copies[id(t)] for label, t in self.tensors(args, kwargs) if id(t) in self.copies}
        leaves = {}
        if seed is not None:
            for label, t in self.floating(args, kwargs):
                leaves[label] = t.detach().clone().requires_grad_(True)
                # A non-leaf view of the leaf, so that an in-place change inside the call is recorded
                # by autograd (and reported in ``mutated``) rather than refused.
                set_arg(args, kwargs, label, leaves[label].clone())
                originals.setdefault(label, leaves[label].detach())
        before = [(label, t, originals[label] if label in originals else t.detach().clone())
                  for label, t in self.tensors(args, kwargs)]
        leaves.update((f"self.{n}", p) for n, p in parameters)
        try:
            with torch.enable_grad():
                value = INSTANCES.call(fn, record, args[1:], kwargs) if made else fn(*args, **kwargs)
        except NotImplementedError as e:
            return {"status": "not implemented", "message": exception_text(e), "traceback": self.frames(e)}
        except Exception as e:
            return {"status": "raised", "message": exception_text(e), "traceback": self.frames(e),
                    "mutated": self.mutated(before)}
        except BaseException as e:
            return {"status": "crashed", "message": f"the call raised {exception_text(e)}",
                    "traceback": self.frames(e)}
        reply = {"status": "ok", "value": value, "mutated": self.mutated(before)}
        if seed is not None:
            reply.update(self.gradients(value, leaves, seed))
            # The arguments as the call left them: the grader compares them with its own copies (small ones).
            reply["after"] = [[label, self.wire.plain_tensor(t)] for label, t in self.tensors(args, kwargs)]
        keep = message.get("keep")
        if keep is not None and isinstance(value, (tuple, list)):  # results no expectation reads: shapes only
            # A plain tuple or list: the wire sends any tuple as a tuple (a namedtuple takes no iterable).
            reply["value"] = (tuple if isinstance(value, tuple) else list)(
                v if i in keep or not isinstance(v, torch.Tensor) else self.wire.ShapeOnly(v) for i, v in enumerate(value))
        return reply

    def gradients(self, value, leaves, seed):
        torch = self.torch
        grads = {label: None for label in leaves}
        try:
            loss = self.wire.projection(self.wire.tensors_in(value), seed)
            if loss is None:
                return {"grads": list(grads.items()),
                        "grad_error": "no floating output carries a gradient: the result is detached from the inputs"}
            found = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
        except Exception as e:
            frames = self.frames(e)
            return {"grads": list(grads.items()), "grad_error": "\n".join([exception_text(e), *frames])}
        return {"grads": [[label, g] for label, g in zip(leaves, found)], "grad_error": None}

    def tensors(self, args, kwargs):
        """(label, tensor) for the tensor arguments: an int for a position, a str for a keyword."""
        pairs = list(enumerate(args)) + list(kwargs.items())
        return [(label, v) for label, v in pairs if isinstance(v, self.torch.Tensor)]

    def floating(self, args, kwargs):
        return [(label, t) for label, t in self.tensors(args, kwargs) if t.is_floating_point()]

    def mutated(self, before):
        """The labels of the tensor arguments whose shape, dtype or values the call changed."""
        changed = []
        for label, t, old in before:
            if isinstance(old, self.wire.Shared):
                if old.unwritten(t):
                    continue  # no page of its bytes written: no need to read them all
                old = old.original
            try:
                new = self.wire.plain_tensor(t)
                same = new.shape == old.shape and new.dtype == old.dtype and (self.torch.equal(new, old) or bool(
                    ((new == old) | ((new != new) & (old != old))).all()))  # NaN where NaN was
            except Exception:
                same = False
            if not same:
                changed.append(label)
        return changed


def set_arg(args, kwargs, label, value):
    if isinstance(label, int):
        args[label] = value
    else:
        kwargs[label] = value


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


def main(argv):
    ctl_fd, site_dirs = int(argv[1]), argv[2:]
    sys.path.extend(d for d in site_dirs if d not in sys.path)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the grader handles ^C and closes us
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    global INSTANCES
    wire = load("wire")  # imports torch
    sandbox = load("sandbox")
    INSTANCES = load("instances", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sandbox.remove_stale_cgroups()
    warm_up(sys.modules["torch"])
    gc.freeze()  # the children's collections leave the server's objects alone (and their pages shared)
    serve(socket.socket(fileno=ctl_fd), wire, sandbox)
    os._exit(0)  # skip the interpreter's and torch's finalisation: nothing is left to flush


if __name__ == "__main__":
    main(sys.argv)
