"""A submission's process from inside: its module imported, then each call made and reported as data.

Loaded by path by ``worker.py`` in the server (the standard library; torch, wire and instances are
given). A call's tensor arguments are compared with their values before the call (``mutated``); a
call with a gradient seed also sends the gradients of a fixed projection of its results and the
arguments as the call left them, which the grader compares with its own copies.
"""

import importlib.util
import inspect
import os
import random
import sys
import traceback
import types


def flush_streams():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


ECHOED = 200  # characters of a submission's own text (a message, a line of its code) a report repeats


def cut(text):
    """``text`` within :data:`ECHOED` characters, an ellipsis where it was cut."""
    return text if len(text) <= ECHOED else text[: ECHOED - 1] + "\u2026"


def exception_text(e):
    """The exception as one line, its message within :data:`ECHOED` characters (a SyntaxError: Python's lines
    with the code line and its caret, each within them)."""
    try:
        if isinstance(e, SyntaxError):
            lines = "".join(traceback.format_exception_only(type(e), e)).strip().split("\n")
            return "\n".join(cut(line) for line in lines[-4:])
        message = " ".join(str(e).split())
    except Exception:
        message = ""
    name = type(e).__name__
    return f"{name}: {cut(message)}" if message else name


class NotebookExport:
    """What IPython's ``get_ipython()`` gives, for a notebook exported as a ``.py`` file (Jupyter's "Download as
    Python" writes each magic and shell line as a call on it: ``get_ipython().run_line_magic('matplotlib',
    'inline')``): its lines are left out, as the grader leaves a notebook's own out (``notebooks.py``), and each
    is told on stderr; a cell magic whose body is Python runs that body where the call stands."""

    PYTHON_BODY = ("time", "capture")  # as notebooks._PYTHON_BODY

    def __init__(self):
        self.told = set()  # (a file imported again, a missing package given a stand-in, tells each line once)

    def _left_out(self, line):
        shown = cut(" ".join(str(line).split()))
        if shown not in self.told:
            self.told.add(shown)
            print(f"left out, as a notebook's own line: `{shown}`", file=sys.stderr)

    def run_line_magic(self, name, line="", *args, **kwargs):
        self._left_out(f"%{name} {line}")

    def magic(self, line="", *args, **kwargs):  # (older exports: get_ipython().magic('matplotlib inline'))
        self._left_out(f"%{line}")

    def system(self, command="", *args, **kwargs):
        self._left_out(f"!{command}")

    def getoutput(self, command="", *args, **kwargs):
        self._left_out(f"!{command}")
        return []

    def run_cell_magic(self, name, line="", cell="", *args, **kwargs):
        if name not in self.PYTHON_BODY:
            self._left_out(f"%%{name} {line}")
            return
        caller = sys._getframe(1).f_globals  # (IPython runs the body in the notebook's namespace: the module's)
        exec(compile(str(cell), f"<%%{name} cell>", "exec"), caller)


MAX_STAND_INS = 8  # packages a submission imports that this environment lacks, each given a stand-in


class NotInstalled:
    """What a package this environment lacks gives a submission in its place (``import matplotlib.pyplot as plt``
    at the top of a file that only plots with it): every attribute, call, item, sum, product and ``with`` of it is
    another, it is false, and it unpacks as two (``fig, ax = plt.subplots()``), so the lines that use it do
    nothing. A check given one as a result says it got a ``NotInstalled``."""

    def __init__(self, name):
        object.__setattr__(self, "_stand_in_for", name)

    def __getattr__(self, attribute):
        if attribute.startswith("__") and attribute.endswith("__"):
            raise AttributeError(attribute)
        return NotInstalled(f"{self._stand_in_for}.{attribute}")

    def __setattr__(self, attribute, value):
        pass

    def __call__(self, *args, **kwargs):
        return NotInstalled(f"{self._stand_in_for}(...)")

    def __getitem__(self, key):
        return self

    def __setitem__(self, key, value):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):  # two, as plotting's commonest line unpacks them: fig, ax = plt.subplots()
        return iter((NotInstalled(f"{self._stand_in_for}[0]"), NotInstalled(f"{self._stand_in_for}[1]")))

    def __len__(self):
        return 2

    def __bool__(self):
        return False

    def _itself(self, *other):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _itself
    __matmul__ = __rmatmul__ = __pow__ = __rpow__ = __neg__ = __pos__ = _itself

    def __format__(self, spec):
        return repr(self)

    def __repr__(self):
        return f"<a stand-in for {self._stand_in_for}, which is not installed where submissions are graded>"


class _StandInModule(types.ModuleType):
    """A missing package (or one of its modules) in ``sys.modules``: each name imported from it a NotInstalled."""

    def __getattr__(self, attribute):
        if attribute.startswith("__") and attribute.endswith("__"):
            raise AttributeError(attribute)
        return NotInstalled(f"{self.__name__}.{attribute}")


class _StandIns:
    """The finder, last on ``sys.meta_path``, that gives each missing package in ``names`` (and its modules) a
    _StandInModule."""

    def __init__(self):
        self.names = []

    def find_spec(self, fullname, path=None, target=None):
        if not any(fullname == name or fullname.startswith(name + ".") for name in self.names):
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


MAX_OTHERS = 40  # public definitions of a submission told to the grader besides its graded names


def _parameters(function):
    """The names of ``function``'s parameters a caller may name (not ``self``, ``*args`` or ``**kwargs``)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [p.name for p in inspect.signature(function).parameters.values() if p.kind in kinds]
    return [cut(n) for n in named if n != "self"][:20]


def _missing_package(e, own, given):
    """The module whose absence ``e`` (a ModuleNotFoundError raised while importing the submission ``own``) tells,
    to be given a stand-in; None where it is not one: a module of the submission's own package, one given a
    stand-in already, or past :data:`MAX_STAND_INS`."""
    name = getattr(e, "name", None)
    if not name or name == own or name.startswith(own + ".") or len(given) >= MAX_STAND_INS:
        return None
    return None if name in given else name


class Child:
    """A submission's module and the calls into it."""

    def __init__(self, request, wire, torch, shared, instances):
        self.wire, self.torch, self.instances = wire, torch, instances
        self.shared = shared  # name -> a tensor the server kept (inherited): calls get copies
        self.copies = {}  # id(copy) -> the wire.Shared it is a copy of, for the current call
        self.root = request["root"]
        self.module = None
        sys.path.insert(0, self.root)
        package = [self.root] if request["package"] else None
        name = request["module"]
        if name in sys.modules:  # a file called json.py must not replace the worker's json
            name = "_submission"
        spec = importlib.util.spec_from_file_location(name, request["entry"], submodule_search_locations=package)
        import builtins

        for word in ("exit", "quit"):  # what site adds, which -S leaves out: a file may end with exit()
            if not hasattr(builtins, word):
                setattr(builtins, word, sys.exit)
        if not hasattr(builtins, "get_ipython"):  # a notebook exported as a .py calls it for its magics
            export = NotebookExport()
            builtins.get_ipython = lambda: export
        stand_ins = _StandIns()
        sys.meta_path.append(stand_ins)
        while True:
            # What the file draws unseeded is the same at every grading (a demo's printed tensors too).
            torch.manual_seed(0)
            random.seed(0)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            try:
                spec.loader.exec_module(module)
            # exit() at the end of a script: what it defined so far is graded, as a run would leave it
            except SystemExit:
                flush_streams()
                print(
                    "the submission called exit() while it was imported: what it defined before that is graded",
                    file=sys.stderr,
                )
            except ModuleNotFoundError as e:
                missing = _missing_package(e, spec.name, stand_ins.names)
                if missing is None:
                    self.hello = self.import_error(e, stand_ins.names)
                    return
                # A package only plotted or shown with (a notebook's cell that fails costs nothing else): the
                # import runs again from the start, a stand-in in the package's place.
                flush_streams()
                print(  # (two lines: each line of what a file prints is shown up to 200 characters)
                    f"`{missing}` cannot be imported here: it is not installed where submissions are graded, nor a "
                    f"file beside yours.\nThe file was imported again with a stand-in for `{missing}` that does "
                    f"nothing: what uses it computes nothing.",
                    file=sys.stderr,
                )
                flush_streams()
                stand_ins.names.append(missing)
                continue
            except BaseException as e:
                self.hello = self.import_error(e, stand_ins.names)
                return
            break
        flush_streams()
        self.module = module
        names = [n for n in request["names"] if callable(self.lookup(n))]
        others = self.others(request["names"])
        self.hello = {"status": "ok", "message": "", "traceback": [], "names": names, "others": others}

    def others(self, graded):
        """[name, kind, parameters, forward's parameters] of the module's own public classes and functions that are
        not graded, at most MAX_OTHERS: what a graded name given another name may be (``MHSA``)."""
        found = []
        for name, value in list(vars(self.module).items()):
            if len(found) >= MAX_OTHERS:
                break
            if not isinstance(name, str) or name.startswith("_") or name in graded or len(name) > ECHOED:
                continue
            try:
                if getattr(value, "__module__", None) != self.module.__name__:
                    continue  # (imported, not the student's own)
                if isinstance(value, type):
                    forward = getattr(value, "forward", None)
                    found.append([name, "class", _parameters(value.__init__), _parameters(forward) if forward else []])
                elif inspect.isfunction(value):
                    found.append([name, "function", _parameters(value), []])
            except Exception:
                continue
        return found

    def import_error(self, e, stand_ins=()):
        """The hello of a submission whose import failed with ``e``; ``stand_ins``: the missing packages given a
        stand-in before it (their absence told first: the stand-in did not get the file through)."""
        flush_streams()
        message = exception_text(e)
        if stand_ins:
            missing = ", ".join(f"`{name}`" for name in stand_ins)
            message = f"No module named {missing} here; imported again with a stand-in for each: {message}"
        return {"status": "import error", "message": message, "traceback": self.frames(e), "names": []}

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
        kept = [
            traceback.FrameSummary(f.filename[len(prefix) :], f.lineno, f.name, line=f.line)
            for f in traceback.extract_tb(e.__traceback__)
            if f.filename.startswith(prefix)
        ]
        return [cut(line) for entry in traceback.format_list(kept) for line in entry.rstrip("\n").split("\n")]

    def handle(self, message):
        if message.get("op") == "calls":  # several calls in one round trip: their replies in a list
            replies = []
            for one in message["calls"]:
                reply = self.handle({**one, "grad_seed": None, "keep": None})
                if reply["status"] == "crashed":
                    return reply
                replies.append({**reply, "id": one.get("id")})  # matched to its call by id, never by position
            return {"status": "ok", "value": replies, "mutated": []}
        torch = self.torch
        name, args, kwargs, seed = message["name"], list(message["args"]), message["kwargs"], message["grad_seed"]
        fn = self.lookup(name)
        if not callable(fn):
            return {"status": "not implemented", "message": f"the submission defines no function {name}"}
        parameters, made = [], False
        if (
            isinstance(fn, type) and args and self.instances.is_record(args[0])
        ):  # a class: made, given the state, called
            record = args.pop(0)
            try:
                fn = self.instances.implementation_instance(fn, record)
            except self.instances.StateMismatch as e:
                return {"status": "raised", "message": f"StateMismatch: {e}", "traceback": []}
            except NotImplementedError as e:
                return {"status": "not implemented", "message": exception_text(e), "traceback": self.frames(e)}
            except Exception as e:
                return {
                    "status": "raised",
                    "message": f"{name}(...) could not be made: {exception_text(e)}",
                    "traceback": self.frames(e),
                }
            parameters, made = self.instances.parameters(fn) if seed is not None else [], True
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
        before = [
            (label, t, originals[label] if label in originals else t.detach().clone())
            for label, t in self.tensors(args, kwargs)
        ]
        leaves.update((f"self.{n}", p) for n, p in parameters)
        try:
            with torch.enable_grad():
                value = self.instances.call(fn, record, args[1:], kwargs) if made else fn(*args, **kwargs)
        except NotImplementedError as e:
            return {"status": "not implemented", "message": exception_text(e), "traceback": self.frames(e)}
        except Exception as e:
            return {
                "status": "raised",
                "message": exception_text(e),
                "traceback": self.frames(e),
                "mutated": self.mutated(before),
            }
        except BaseException as e:
            return {"status": "crashed", "message": f"the call raised {exception_text(e)}", "traceback": self.frames(e)}
        most = message.get("most")
        if most is not None and (size := self._size(value)) > most:  # not to be read: neither sent nor differentiated
            return {
                "status": "too large",
                "message": f"results of {size} bytes, over the {most} bytes this call can need: they were not sent",
                "mutated": self.mutated(before),
            }
        reply = {"status": "ok", "value": value, "mutated": self.mutated(before)}
        if seed is not None:
            reply.update(self.gradients(value, leaves, seed))
            # The arguments as the call left them: the grader compares them with its own copies (small ones).
            reply["after"] = [[label, self.wire.plain_tensor(t)] for label, t in self.tensors(args, kwargs)]
        keep = message.get("keep")
        if keep is not None and isinstance(value, (tuple, list)):  # results no expectation reads: shapes only
            # A plain tuple or list: the wire sends any tuple as a tuple (a namedtuple takes no iterable).
            reply["value"] = (tuple if isinstance(value, tuple) else list)(
                v if i in keep or not isinstance(v, torch.Tensor) else self.wire.ShapeOnly(v)
                for i, v in enumerate(value)
            )
        return reply

    def gradients(self, value, leaves, seed):
        torch = self.torch
        grads = {label: None for label in leaves}
        try:
            loss = self.wire.projection(self.wire.tensors_in(value), seed)
            if loss is None:
                return {
                    "grads": list(grads.items()),
                    "grad_error": "no floating output carries a gradient: the result is detached from the inputs",
                }
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

    def _size(self, value):
        """The bytes a reply would hold of ``value``'s results; 0 where they cannot be counted (the reply's
        encoding says what is wrong with them then)."""
        try:
            return self.wire.nbytes(value)
        except Exception:  # noqa: BLE001
            return 0

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
                same = (
                    new.shape == old.shape
                    and new.dtype == old.dtype
                    and (self.torch.equal(new, old) or bool(((new == old) | ((new != new) & (old != old))).all()))
                )  # NaN where NaN was
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
