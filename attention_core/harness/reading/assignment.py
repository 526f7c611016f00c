"""An assignment: a reference whose public functions and ``nn.Module`` classes are the spec, its cases
and its settings.

A teacher's assignment is a folder::

    reference.py      the solution: its public functions and nn.Module classes are what is graded
    cases/            case files whose ``call:`` names what reference.py defines
    assignment.yaml   optional: points, gradient points, visibility, time limits, graded names

The project's own spec (``reference.py`` of the package, ``cases/`` of the checkout) is the
built-in default assignment, read through the same code. A students' kit is the same kind of
folder without ``reference.py``: its cases carry every expectation recorded.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import sys
import textwrap
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

from attention_core import instances, spec
from attention_core.harness.reading import yaml_lines
from attention_core.harness.reading.settings import Settings, SettingsError, read_settings

REFERENCE_FILE, CASES_FOLDER, SETTINGS_FILE = "reference.py", "cases", "assignment.yaml"


class AssignmentError(ValueError):
    """An assignment folder that cannot be used: the message names the file and the problem."""


@dataclass(frozen=True)
class Graded:
    """One graded name: a function, or an ``nn.Module`` class (made, then called)."""

    name: str
    kind: str  # "function" or "class"
    params: tuple[spec.Param, ...]  # a function's; a class's __init__ (without self)
    call_params: tuple[spec.Param, ...]  # what a call passes: a function's params; a class's forward
    returns: tuple[str, ...]  # what a check calls the results when it does not say
    doc: str = ""
    summary: str = ""

    @property
    def is_class(self):
        return self.kind == "class"

    def signature(self):
        own = ", ".join(p.signature() for p in self.params)
        if self.is_class:
            return f"{self.name}({own})({', '.join(p.signature() for p in self.call_params)})"
        return f"{self.name}({own})"


@dataclass
class Assignment:
    """What is graded (``graded``, read from the reference), the reference itself, the cases and the settings."""

    name: str
    cases: Path
    graded: dict[str, Graded]
    reference: types.ModuleType | None = None  # None in a students' kit
    settings: Settings = field(default_factory=lambda: Settings())
    folder: Path | None = None  # None for the built-in default
    builtin: bool = False

    @property
    def names(self):
        return tuple(self.graded)

    @functools.cached_property
    def functions(self):
        """name -> the reference's callable: a function itself; for a class, ``call(record, *args)`` that
        makes its instance from the record (see :mod:`instances`) and calls it."""
        if self.reference is None:
            return {}
        return callables(self.reference, self.graded)

    def settings_problems(self, items):
        """``file:line:col: ...`` for each setting that names no check of ``items`` (the assignment's loaded
        checks, load errors included)."""
        if self.folder is None or not self.settings.checks:
            return []
        from attention_core.harness.reading.settings import PROPERTY_KINDS, unknown_checks  # noqa: PLC0415

        known = [i.id for i in items] + [f"properties/{name}/{kind}" for name in self.graded for kind in PROPERTY_KINDS]
        return unknown_checks(Path(self.folder) / SETTINGS_FILE, self.settings, known)

    def settings_warnings(self, items):
        """``file:line:col: ...`` for each setting that is allowed but likely not meant: points of ``checks:``
        over the points a case file gives (see settings.shadowed_points)."""
        if self.folder is None or not self.settings.checks:
            return []
        from attention_core.harness.reading.settings import shadowed_points  # noqa: PLC0415

        return shadowed_points(Path(self.folder) / SETTINGS_FILE, self.settings, items)

    def returns(self, name):
        return self.graded[name].returns


def callables(module, graded):
    """name -> callable for the graded names of ``module`` (a reference, or an implementation): a class
    becomes a function whose first argument is the instance record."""
    found = {}
    for name in graded:
        value = getattr(module, name, None)
        if isinstance(value, type):
            found[name] = _class_call(value)
        elif callable(value):
            found[name] = value
    return found


def _class_call(cls):
    def call(record, *args, **kwargs):
        if not instances.is_record(record):
            raise TypeError(f"{cls.__name__}: the harness passes an instance record first")
        state = record[instances.INSTANCE]["state"].values()
        device = next((t.device for t in state if isinstance(t, torch.Tensor)), torch.device("cpu"))
        with torch.no_grad():  # values only: the backward check makes its own instance
            return instances.call(instances.implementation_instance(cls, record, device), record, args, kwargs)

    call.cls = cls
    call.__name__ = cls.__name__
    return call


# ------------------------------------------------------------------------------------------- loading


def load(folder: str | Path, *, need_reference: bool = True) -> Assignment:
    """The assignment of ``folder``; raises :class:`AssignmentError` naming what is wrong."""
    folder = Path(folder)
    if not folder.is_dir():
        raise AssignmentError(
            f"{folder}: no such folder (an assignment is a folder with {REFERENCE_FILE} and {CASES_FOLDER}/)"
        )
    settings = read_settings(folder / SETTINGS_FILE)
    cases = folder / CASES_FOLDER
    if not cases.is_dir():
        raise AssignmentError(f"{cases}: no such folder: an assignment's case files live in {CASES_FOLDER}/")
    reference_file = folder / REFERENCE_FILE
    if reference_file.is_file():
        module = import_reference(reference_file)
        graded = read_spec(module, settings)
        if settings.graded:
            unknown = [n for n in settings.graded if n not in graded]
            if unknown:
                raise AssignmentError(
                    f"{folder / SETTINGS_FILE}: 'graded' names {', '.join(map(repr, unknown))}, "
                    f"which {reference_file} does not define as a public function or "
                    f"nn.Module class (it defines: {', '.join(graded) or 'nothing'})"
                )
            graded = {n: graded[n] for n in settings.graded}
        if not graded:
            raise AssignmentError(
                f"{reference_file}: defines no public function or nn.Module class to grade "
                f"(a name that starts with '_' is private, and an imported one is not its own)"
            )
    elif need_reference:
        raise AssignmentError(
            f"{reference_file}: no such file: an assignment's reference solution is "
            f"{REFERENCE_FILE} (a students' kit has none; give the kit's folder to "
            f"pytest --assignment, not to the teacher's commands)"
        )
    else:
        module, graded = None, kit_spec(folder, settings)
    return Assignment(settings.title or folder.resolve().name, cases, graded, module, settings, folder)


def import_reference(path):
    """The module of the teacher's ``reference.py`` (imported once per path and process)."""
    path = Path(path).resolve()
    try:
        text = path.read_bytes()
    except OSError as err:
        raise AssignmentError(f"{path}: the reference could not be read: {err}") from None
    name = f"_assignment_reference_{hashlib.sha256(bytes(path) + text).hexdigest()[:20]}"  # a changed file: anew
    if name in sys.modules:
        return sys.modules[name]
    spec_ = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec_)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))  # its own helper modules import from beside it
    try:
        spec_.loader.exec_module(module)
    except (Exception, SystemExit) as err:  # exit() at the end of a script too: the teacher is told, not left
        del sys.modules[name]
        raise AssignmentError(f"{path}: the reference could not be imported: {type(err).__name__}: {err}") from None
    finally:
        sys.path.remove(str(path.parent))
    return module


def resolve(assignment: Assignment | str | Path | None = None, cases: str | Path | None = None) -> Assignment:
    """The Assignment a command was given: an Assignment, an assignment's folder, or None (the built-in one);
    ``cases``, a folder that replaces its case folder (``--cases``). Raises AssignmentError or SettingsError."""
    if assignment is None:
        chosen = default()
    elif isinstance(assignment, Assignment):
        chosen = assignment
    else:
        chosen = load(assignment)
    return dataclasses.replace(chosen, cases=Path(cases)) if cases is not None else chosen


@functools.cache
def default() -> Assignment:
    """The built-in assignment: the package's reference core, its eight functions, the project's cases."""
    from attention_core import reference  # noqa: PLC0415

    graded = read_spec(reference, Settings())
    for function in spec.SPEC:  # the contract adds result names, summaries and parameter notes
        own = graded[function.name]
        graded[function.name] = Graded(
            function.name,
            "function",
            function.params,
            function.params,
            function.returns,
            function.purpose or own.doc,
            function.summary,
        )
    graded = {f.name: graded[f.name] for f in spec.SPEC if f.graded}
    return Assignment("attention-core", default_cases_folder(), graded, reference, Settings(), builtin=True)


def default_cases_folder():
    """``cases/`` beside the package (a source checkout), else the copy installed with it."""
    here = Path(__file__).resolve().parents[2]  # the package, attention_core/
    for candidate in (here.parent / CASES_FOLDER, here / CASES_FOLDER):
        if candidate.is_dir():
            return candidate
    return here.parent / CASES_FOLDER


# ------------------------------------------------------------------------------------------- the spec


def read_spec(module, settings):
    """name -> Graded for the public functions and nn.Module classes ``module`` defines, in source order."""
    found = []
    for name, value in vars(module).items():
        if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(value):
            params = _params(value)
            found.append(
                (
                    _line(value),
                    Graded(
                        name,
                        "function",
                        params,
                        params,
                        _returns(value, settings, name),
                        own_doc(value),
                        _summary(value),
                    ),
                )
            )
        elif isinstance(value, type) and issubclass(value, torch.nn.Module):
            forward = value.forward
            found.append(
                (
                    _line(value),
                    Graded(
                        name,
                        "class",
                        _params(value.__init__, skip_self=True),
                        _params(forward, skip_self=True),
                        _returns(forward, settings, name),
                        own_doc(value),
                        _summary(value),
                    ),
                )
            )
    return {g.name: g for _, g in sorted(found, key=lambda pair: pair[0])}


KIT_FILE = "kit.yaml"  # a students' kit's record of the graded names (the kit has no reference.py)


def kit_spec(folder, settings):
    """The graded names of a kit (``KIT_FILE``); raises SettingsError where it is missing or malformed."""
    path = Path(folder) / KIT_FILE
    if not path.is_file():
        raise SettingsError(
            f"{Path(folder) / 'reference.py'}: no such file, and no {KIT_FILE} either: an "
            f"assignment's folder holds its reference.py; a students' kit, its {KIT_FILE}"
        )
    try:
        tree = yaml_lines.parse(path.read_text(encoding="utf-8"))
        graded = {}
        for name, entry in tree["graded"].items():
            params = tuple(spec.Param(str(p)) for p in entry["params"])
            call_params = tuple(spec.Param(str(p)) for p in entry["call_params"])
            graded[str(name)] = Graded(
                str(name), str(entry["kind"]), params, call_params, tuple(map(str, entry["returns"]))
            )
    except Exception as err:  # noqa: BLE001 (any malformed kit file is one error)
        raise SettingsError(f"{path}: not a kit file: {type(err).__name__}: {err}") from None
    return graded


def _line(value):
    try:
        return inspect.getsourcelines(value)[1]
    except (OSError, TypeError):
        return 0


def _params(function, *, skip_self=False):
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return ()
    params = list(signature.parameters.values())
    if skip_self and params and params[0].name == "self":
        params = params[1:]
    written = _written_defaults(function)
    return tuple(
        spec.Param(
            p.name,
            spec.REQUIRED if p.default is inspect.Parameter.empty else p.default,
            shown=None if p.default is inspect.Parameter.empty else written.get(p.name) or _shown(p.default),
        )
        for p in params
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    )


def _shown(default):
    return repr(default) if not isinstance(default, float) else f"{default:g}"


def _written_defaults(function):
    """name -> a parameter's default as the source writes it (``10000.0``, ``1e-5``); {} where unreadable."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
        node = ast.parse(source).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return {}
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {}
    arguments = node.args
    positional = [*arguments.posonlyargs, *arguments.args]
    pairs = list(zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults))
    pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None]
    return {a.arg: ast.get_source_segment(source, d) for a, d in pairs if ast.get_source_segment(source, d)}


def own_doc(value):
    """The docstring ``value`` itself has, cleaned ("" for a class without one of its own: not nn.Module's)."""
    doc = vars(value).get("__doc__") if isinstance(value, type) else getattr(value, "__doc__", None)
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def _summary(value):
    doc = own_doc(value)
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def _returns(function, settings, name):
    """The results' names: as ``assignment.yaml`` says, else read from the function's ``return``
    statements (``return output, weights`` names two), else ``out``."""
    if name in settings.returns:
        return tuple(settings.returns[name])
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return ("out",)
    returned = [node.value for node in _own_returns(tree.body[0]) if node.value is not None]
    if not returned or not all(isinstance(v, ast.Tuple) for v in returned):
        return ("out",)
    lengths = {len(v.elts) for v in returned}
    if len(lengths) != 1 or lengths == {1}:
        return ("out",)
    (length,) = lengths
    # The names of the returns that name every result (an early `return None, None` names nothing), where
    # they agree; else out0, out1, ...
    named = {tuple(e.id for e in v.elts) for v in returned if all(isinstance(e, ast.Name) for e in v.elts)}
    if len(named) == 1:
        (names,) = named
        if len(set(names)) == length:
            return names
    if not named:
        first = returned[0].elts
        names = tuple(e.id if isinstance(e, ast.Name) else f"out{i}" for i, e in enumerate(first))
        if len(set(names)) == length:
            return names
    return tuple(f"out{i}" for i in range(length))


def _own_returns(function):
    """The return statements of ``function`` itself, not of functions or classes nested in it."""
    todo = list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return):
            yield node
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo += list(ast.iter_child_nodes(node))
