"""Loading case files: YAML with line numbers in, validated cases (the declared model) out.

A case file is data: loading one parses YAML with a safe, bounded reader, torch's printed
text and expressions, and runs nothing. Every problem is a :class:`CaseError` at the file's
line (and column, where known): the file's own when the file cannot be read, a case's own
otherwise, so the other cases of the file still load.
"""

import contextlib
import gc
from dataclasses import dataclass, field
from pathlib import Path

import pydantic

from attention_core.harness.reading import fields, yaml_lines
from attention_core.harness.reading.fields import ID, FieldError
from attention_core.harness.reading.model import Case, Document, Envelope
from attention_core.harness.reading.scope import Misplaced, settle
from attention_core.harness.reading.yaml_lines import CaseError  # noqa: F401 (re-exported)
from attention_core.harness.text import quote, shorten

SCHEMA_FILE = "case-file.schema.json"  # beside the case files
SCHEMA_LINE = f"# yaml-language-server: $schema=./{SCHEMA_FILE}"


@dataclass(frozen=True)
class CaseFile:
    """A loaded case file: its cases, and the errors of those that did not load."""

    path: Path
    name: str  # the file's stem: the first part of every check id
    document: Document | None
    cases: tuple[Case, ...] = ()
    errors: tuple[CaseError, ...] = field(default=())
    assignment: object = None  # the Assignment whose names the calls were settled against (None: the default)


def find_case_files(folder):
    """The case files of ``folder`` (``*.yaml`` and ``*.yml``, hidden ones left out), sorted by name.

    Every entry so named is one: a folder, a FIFO or a broken link among them fails to load with
    its reason, rather than being passed over in silence."""
    return sorted(p for p in Path(folder).iterdir() if p.suffix in (".yaml", ".yml") and not p.name.startswith("."))


def clear_caches():
    """Forget what loading keeps between files (parsed printed text, expressions, plain scalars)."""
    fields._parsed.cache_clear()
    fields._parsed_expression.cache_clear()
    yaml_lines._PLAIN.clear()


def load_folder(folder, assignment=None):
    """Load every case file of ``folder``, their calls settled against ``assignment`` (default: the built-in one)."""
    shown = shown_path(Path(folder))  # once for the folder: a file's own is the folder's and its name
    loaded, stems = [], {}
    with _collection_paused():
        for path in find_case_files(folder):
            if path.stem in stems:  # x.yaml and x.yml: their ids would be one file's
                error = CaseError(
                    shown / path.name,
                    1,
                    f"its ids would begin with {quote(path.stem)}, as those of "
                    f"{quote(stems[path.stem])} do: rename one of the two files",
                )
                loaded.append(CaseFile(path, path.name.replace(".", "_"), None, errors=(error,), assignment=assignment))
                continue
            stems[path.stem] = path.name
            loaded.append(load_file(path, shown / path.name, assignment))
    return loaded


@contextlib.contextmanager
def _collection_paused():
    """Python's cyclic garbage collection off while loading: loading makes many objects that stay (the
    models) and few cycles, and each collection would walk every object made so far (a sixth of the
    time of loading a thousand files); what cycles loading leaves are collected once it is done."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def load_file(path, shown=None, assignment=None):
    """Load one case file; never raises for a problem in the file (see ``CaseFile.errors``).

    Messages name the file as ``shown`` (default: its path as :func:`shown_path` gives it). Its calls
    are settled against ``assignment`` (default: the built-in one).
    """
    if assignment is None:
        from attention_core.harness.reading.assignment import default  # noqa: PLC0415 (the assignment reads the harness)

        assignment = default()
    path = Path(path)
    shown = shown_path(path) if shown is None else shown
    try:
        tree = yaml_lines.read(path, shown)
        _numbers_in_range({k: v for k, v in tree.items() if k != "cases"} if isinstance(tree, dict) else tree)
        envelope = Envelope.model_validate(tree if tree is not None else yaml_lines.Map())
    except CaseError as err:
        return CaseFile(path, path.stem, None, errors=(err,), assignment=assignment)
    except Misplaced as err:
        return CaseFile(path, path.stem, None, errors=(_case_error(shown, tree, (), err, None),), assignment=assignment)
    except pydantic.ValidationError as err:
        return CaseFile(path, path.stem, None, errors=(_from_validation(shown, tree, (), err),), assignment=assignment)
    except Exception as err:  # noqa: BLE001 (anything else about reading the file is still the file's error)
        problem = CaseError(shown, 1, f"the file could not be read: {type(err).__name__}: {shorten(str(err))}")
        return CaseFile(path, path.stem, None, errors=(problem,), assignment=assignment)
    context = {"document": envelope.document, "defaults": envelope.defaults, "assignment": assignment, "settle": settle}
    cases, errors, seen = [], [], set()
    for i, raw in enumerate(envelope.cases):
        at = ("cases", i)
        try:
            _numbers_in_range(raw)
            case = Case.model_validate(raw, context=context)
            if case.id in seen:
                raise Misplaced(("id",), f"case id {quote(case.id)} is used twice in this file")
            seen.add(case.id)
            cases.append(case)
        except Exception as err:  # noqa: BLE001 (a case that does not load fails alone)
            case_id = raw.get("id") if isinstance(raw, dict) else None
            usable = (
                isinstance(case_id, str) and len(case_id) <= fields.MAX_ID and ID.match(case_id) and case_id not in seen
            )
            errors.append(_case_error(shown, tree, at, err, case_id if usable else None))
    return CaseFile(path, path.stem, envelope.document, tuple(cases), tuple(errors), assignment)


def _numbers_in_range(tree):
    """Raises Misplaced at the first number of ``tree`` beyond float64's range (or below it)."""
    found = yaml_lines.out_of_range_in(tree)
    if found is not None:
        raise Misplaced(found[0], found[1].why)


def shown_path(path):
    """``path`` relative to the working folder where it lies inside it, as file:line messages show it."""
    try:  # the folder resolved, not the file: a link is shown by its own name (and may lead nowhere)
        return (path.absolute().parent.resolve() / path.name).relative_to(Path.cwd())
    except (ValueError, OSError, RuntimeError):
        return path


def _case_error(shown, tree, at, err, case_id):
    if isinstance(err, pydantic.ValidationError):
        return _from_validation(shown, tree, at, err, case_id)
    if isinstance(err, Misplaced):
        line, column = _position(tree, (*at, *err.loc), key=err.key, inner=(err.line, err.column))
        return CaseError(shown, line, err.message, case_id, column)
    if isinstance(err, RecursionError):
        return CaseError(shown, yaml_lines.locate(tree, at)[0], "the case is nested too deeply", case_id)
    line, _ = yaml_lines.locate(tree, at)
    return CaseError(shown, line, f"the case could not be loaded: {type(err).__name__}: {shorten(str(err))}", case_id)


def _from_validation(shown, tree, at, err, case_id=None):
    """The first problem a validation found, as a CaseError at its line."""
    problem = err.errors(include_url=False)[0]
    loc, ctx = (*at, *problem["loc"]), problem.get("ctx") or {}
    cause = ctx.get("error")
    if "key" in ctx:
        line, column = _position(tree, (*loc, ctx["key"]), key=True)
    elif isinstance(cause, FieldError):
        line, column = _position(tree, loc, inner=(cause.line, cause.column))
    else:
        line, column = _position(tree, loc)
    return CaseError(shown, line, _message(problem, loc, cause), case_id, column)


def _position(tree, loc, *, key=False, inner=(None, None)):
    """The file's (line, column) of ``loc``; ``inner`` is a 1-based position inside that value's text."""
    line, column = yaml_lines.locate(tree, loc, key=key)
    inner_line, inner_column = inner
    if inner_line is None:
        return line, column
    # A block scalar keeps its lines (each indented alike); a flow scalar folds them, so only its first is known.
    text = _value_at(tree, loc)
    if inner_line > 1 and not (isinstance(text, str) and "\n" in text.rstrip("\n")):
        return line, None
    return line + inner_line - 1, (column + inner_column - 1 if column and inner_column else None)


def _value_at(tree, loc):
    node = tree
    for part in loc:
        if isinstance(node, dict) and not isinstance(part, bool) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
    return node


_TYPE_WORDS = {
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "int_type": "must be a whole number",
    "float_type": "must be a number",
}


def _message(problem, loc, cause):
    kind, ctx = problem["type"], problem.get("ctx") or {}
    if "message" in ctx:
        message = ctx["message"]
    elif isinstance(cause, FieldError):
        names = [p for p in loc if isinstance(p, str)]
        message = f"{names[-1]} {cause.message}" if cause.message.startswith("`") and names else cause.message
    elif kind == "too_short":
        return f"{_field(loc)} must be a non-empty list"
    elif kind == "literal_error":
        return f"{_field(loc)} must be one of {ctx.get('expected')}, got {quote(problem.get('input'))}"
    elif kind in _TYPE_WORDS:
        return f"{_field(loc)} {_TYPE_WORDS[kind]}, got {quote(problem.get('input'))}"
    elif cause is not None:
        message = shorten(str(cause), 200)
    else:
        return f"{_field(loc)}: {shorten(problem['msg'], 200)}, got {quote(problem.get('input'))}"
    return f"{_subject(loc)}{message}"


def _field(loc):
    names = [p for p in loc if isinstance(p, str)]
    return quote(names[-1]) if names else "the value"


def _subject(loc):
    """``input 'x': `` or ``expectation for 'out': `` where the path names one; else nothing."""
    for outer, what in (("inputs", "input"), ("expect", "expectation for")):
        if outer in loc:
            i = loc.index(outer)
            if i + 1 < len(loc):
                return f"{what} {quote(loc[i + 1])}: "
    return ""
