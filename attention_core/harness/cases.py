"""The case model and the YAML loader: case files in, validated records with line numbers out.

A case file is data: loading one parses YAML with a safe loader, torch's printed text with
the tensor-text parser and expressions with the expression parser, and runs nothing.
Everything that can be wrong with a file is found here, with its line: a malformed case
becomes a :class:`CaseError` of its own and the other cases of the file still load.
"""

import ast
import math
import re
import reprlib
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from attention_core import spec
from attention_core.harness import draws, expr
from attention_core.harness.tensor_text import TensorTextError, looks_like_size, parse_size, parse_tensor

SPEC_FUNCTIONS = spec.GRADED
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float64": torch.float64, "int64": torch.int64, "bool": torch.bool}
MAX_LITERAL = 2**20
_SHORT = reprlib.Repr()  # a value quoted in a message: a YAML alias nest must not print in full
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxstring, _SHORT.maxother = 2, 4, 60, 60
_short = _SHORT.repr
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # no ".": it joins ids in snapshot names
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CaseError(Exception):
    """A problem in a case file, at a line."""

    def __init__(self, path, line, message, case_id=None):
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message
        self.case_id = case_id  # the case it belongs to, when the case has a usable id


@dataclass(frozen=True)
class Source:
    """Where a worked example comes from."""

    title: str
    origin: str | None = None
    cell: str | None = None
    step: str | None = None


@dataclass(frozen=True)
class Input:
    """A named tensor the case makes before its checks run."""

    name: str
    kind: str  # "literal", "printed", "draw", "expr" or "token_ids"
    value: object  # a tensor or number (literal), a PrintedTensor, (draw kind, spec), an Expr or a token spec
    line: int
    dtype: torch.dtype | None = None  # an explicit dtype for a literal or draw


@dataclass(frozen=True)
class Expectation:
    """What one output (or an expression over outputs) must be."""

    target: str
    expr: expr.Expr
    kind: str  # "printed", "values", "shape" or "oracle"
    printed: object = None  # PrintedTensor
    oracle: expr.Expr | None = None  # torch's own computation over the inputs, run in float64
    values: torch.Tensor | None = None
    shape: tuple | None = None
    rtol: float | None = None
    atol: float | None = None
    line: int = 0


@dataclass(frozen=True)
class Erratum:
    """A printed value that a correct implementation does not reproduce, and why."""

    note: str
    differs: expr.Expr | None  # the correct computation, which must miss the printed value
    line: int


@dataclass(frozen=True)
class Check:
    """One computation and the expectations on its results."""

    id: str
    kind: str  # "call" (graded: a spec function) or "expr" (the document's own arithmetic)
    expr: expr.Expr
    returns: tuple[str, ...]
    expectations: tuple[Expectation, ...]
    erratum: Erratum | None
    source: Source
    line: int

    @property
    def function(self):
        """The spec function a "call" check grades, else None."""
        return self.expr.tree.body.func.id if self.kind == "call" else None


@dataclass(frozen=True)
class Case:
    """A worked example: inputs made in order, then checks."""

    id: str
    source: Source
    dtype: torch.dtype
    seed: int | None
    inputs: tuple[Input, ...]
    checks: tuple[Check, ...]
    line: int


@dataclass(frozen=True)
class CaseFile:
    """A loaded case file: its cases, and the errors of those that did not load."""

    path: Path
    name: str  # the file's stem: the first part of every check id
    document: Source | None
    cases: tuple[Case, ...] = ()
    errors: tuple[CaseError, ...] = field(default=())


# ---------------------------------------------------------------- YAML with line numbers


class _Map(dict):
    """A mapping that remembers where each key and value starts (1-based lines)."""

    line = 0

    def __init__(self):
        super().__init__()
        self.key_lines, self.value_lines = {}, {}


class _Seq(list):
    line = 0

    def __init__(self):
        super().__init__()
        self.item_lines = []


def _value_line(node):
    # A block scalar's text starts on the line after its "|" or ">".
    extra = 1 if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">") else 0
    return node.start_mark.line + 1 + extra


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    pass


def _construct_map(loader, node):
    loader.flatten_mapping(node)
    result = _Map()
    result.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise CaseError(None, key_node.start_mark.line + 1, "a mapping key must be a plain word")
        if key in result:
            raise CaseError(None, key_node.start_mark.line + 1, f"duplicate key {key!r}")
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
        result.value_lines[key] = _value_line(value_node)
    return result


def _construct_seq(loader, node):
    result = _Seq()
    result.line = node.start_mark.line + 1
    for item in node.value:
        result.append(loader.construct_object(item, deep=True))
        result.item_lines.append(_value_line(item))
    return result


# YAML 1.1 reads 1e-7 (no dot) as text; a case file means a number.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)


def _read_yaml(path, text):
    try:
        return yaml.load(text, Loader=_Loader)
    except CaseError as err:
        raise CaseError(path, err.line, err.message) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else 1
        problem = " ".join(p for p in (err.context, err.problem) if p)
        raise CaseError(path, line, f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as err:
        raise CaseError(path, 1, f"YAML error: {err}") from None


# ---------------------------------------------------------------- loading


def find_case_files(folder):
    """The case files of ``folder``, sorted by name."""
    return sorted(p for p in Path(folder).glob("*.yaml") if p.is_file())


def load_folder(folder):
    """Load every case file of ``folder``."""
    return [load_file(path) for path in find_case_files(folder)]


def load_file(path):
    """Load one case file; never raises for a problem in the file (see ``CaseFile.errors``)."""
    path = Path(path)
    shown = _shown_path(path)
    try:
        data = _read_yaml(shown, path.read_text(encoding="utf-8"))
        _expect_keys(shown, data, {"document", "cases"}, {"document", "cases", "defaults"}, "the file")
        document = _source(shown, data, "document", None)
        defaults = data.get("defaults") or _Map()
        _expect_keys(shown, defaults, set(), {"dtype"}, "defaults")
        default_dtype = _dtype(shown, defaults, "dtype", torch.float32) if defaults else torch.float32
        raw_cases = data["cases"]
        if not isinstance(raw_cases, list) or not raw_cases:
            raise CaseError(shown, data.key_lines["cases"], "'cases' must be a non-empty list")
    except CaseError as err:
        return CaseFile(path, path.stem, None, errors=(err,))
    except (OSError, UnicodeDecodeError, RecursionError) as err:
        problem = "nested too deeply" if isinstance(err, RecursionError) else f"{type(err).__name__}: {err}"
        return CaseFile(path, path.stem, None, errors=(CaseError(shown, 1, f"the file could not be read: {problem}"),))
    cases, errors, seen = [], [], set()
    for raw, line in zip(raw_cases, raw_cases.item_lines):
        try:
            case = _case(shown, raw, line, document, default_dtype)
            if case.id in seen:
                raise CaseError(shown, case.line, f"case id {case.id!r} is used twice in this file")
            seen.add(case.id)
            cases.append(case)
        except Exception as err:  # a CaseError, or something the checks above did not foresee
            if not isinstance(err, CaseError):
                err = CaseError(shown, line, f"the case could not be loaded: {type(err).__name__}: {err}")
            case_id = raw.get("id") if isinstance(raw, dict) else None
            usable = isinstance(case_id, str) and _ID.match(case_id) and case_id not in seen
            errors.append(CaseError(err.path, err.line, err.message, case_id if usable else None))
    return CaseFile(path, path.stem, document, tuple(cases), tuple(errors))


def _shown_path(path):
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def _case(path, raw, line, document, default_dtype):
    if not isinstance(raw, _Map):
        raise CaseError(path, line, "each case must be a mapping with id, inputs and checks")
    _expect_keys(path, raw, {"id", "checks"}, {"id", "source", "dtype", "seed", "inputs", "checks", "note"}, "a case")
    case_id = _id(path, raw, "id")
    source = _source(path, raw, "source", document)
    dtype = _dtype(path, raw, "dtype", default_dtype)
    if not dtype.is_floating_point:
        raise CaseError(path, raw.value_lines.get("dtype", raw.line), f"a case computes in a floating dtype, not {dtype}")
    seed = raw.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**64):
        raise CaseError(path, raw.value_lines["seed"], f"seed must be a whole number from 0 to 2**64 - 1, got {seed!r}")
    inputs = _inputs(path, raw.get("inputs") or _Map(), raw, seed)
    known = {i.name for i in inputs}
    checks, seen = [], set()
    raw_checks = raw["checks"]
    if not isinstance(raw_checks, list) or not raw_checks:
        raise CaseError(path, raw.value_lines["checks"], "'checks' must be a non-empty list")
    for item, item_line in zip(raw_checks, raw_checks.item_lines):
        check = _check(path, item, item_line, source, known)
        if check.id in seen:
            raise CaseError(path, check.line, f"check id {check.id!r} is used twice in case {case_id!r}")
        seen.add(check.id)
        checks.append(check)
    return Case(case_id, source, dtype, seed, inputs, tuple(checks), raw.line)


def _inputs(path, raw, case, seed):
    if not isinstance(raw, _Map):
        raise CaseError(path, case.value_lines["inputs"], "'inputs' must be a mapping of name: value")
    inputs, known = [], set()
    for name, value in raw.items():
        line = raw.key_lines[name]
        if not isinstance(name, str) or not _NAME.match(name) or name in expr.CONSTANTS:
            raise CaseError(path, line, f"input name {name!r} must be a plain identifier, not a constant's name")
        made = _input(path, name, value, raw.value_lines[name], known, seed)
        inputs.append(made)
        known.add(name)
    return tuple(inputs)


def _input(path, name, value, line, known, seed):
    if isinstance(value, str):
        return Input(name, "printed", _printed(path, value, line, partial=False, complete=True), line)
    if isinstance(value, list):
        return Input(name, "literal", _literal(path, value, line), line)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Input(name, "literal", value, line)  # a plain number stays a Python number
    if not isinstance(value, _Map):
        raise CaseError(path, line, f"input {name!r}: expected a list, printed text or a mapping, got {_short(value)}")
    forms = (*draws.KINDS, "expr", "tensor", "printed", "token_ids")
    kinds = [k for k in value if k in forms]
    if len(kinds) != 1:
        raise CaseError(path, line, f"input {name!r} needs exactly one of: {', '.join(forms)}")
    kind = kinds[0]
    _expect_keys(path, value, {kind}, {kind, "dtype"}, f"input {name!r}")
    dtype = _dtype(path, value, "dtype", None)
    inner = value.value_lines[kind]
    if kind == "expr":
        return Input(name, "expr", _expr(path, value[kind], inner, known, "input expression"), line)
    if kind == "tensor":
        return Input(name, "literal", _literal(path, value[kind], inner), line, dtype)
    if kind == "printed":
        return Input(name, "printed", _printed(path, value[kind], inner, partial=False, complete=True), line)
    if kind == "token_ids":
        return Input(name, "token_ids", _token_spec(path, value[kind], inner, name), line)
    if seed is None:
        raise CaseError(path, line, f"input {name!r} is a seeded draw ({kind}) but the case has no 'seed'")
    try:
        spec = draws.check_spec(kind, value[kind])
    except ValueError as err:
        raise CaseError(path, inner, f"input {name!r}: {err}") from None
    if kind in draws.FLOATING and dtype is not None and not dtype.is_floating_point:
        raise CaseError(path, value.value_lines["dtype"], f"input {name!r}: {kind} draws a floating dtype, not {dtype}")
    return Input(name, "draw", (kind, spec), line, dtype)


def _token_spec(path, spec, line, name):
    """``{text: "...", lower: true, remove: ",;."}``: a sentence to number by its sorted vocabulary."""
    if not isinstance(spec, _Map):
        raise CaseError(path, line, f"input {name!r}: token_ids takes a mapping with text, lower and remove")
    _expect_keys(path, spec, {"text"}, {"text", "lower", "remove"}, f"input {name!r} token_ids")
    if not isinstance(spec["text"], str) or not isinstance(spec.get("remove", ""), str):
        raise CaseError(path, line, f"input {name!r}: token_ids text and remove must be text")
    if not isinstance(spec.get("lower", False), bool):
        raise CaseError(path, spec.value_lines["lower"], f"input {name!r}: lower must be true or false")
    return {"text": spec["text"], "lower": spec.get("lower", False), "remove": spec.get("remove", "")}


def _check(path, raw, line, case_source, known):
    if not isinstance(raw, _Map):
        raise CaseError(path, line, "each check must be a mapping with id, call or expr, and expect")
    _expect_keys(path, raw, {"id", "expect"},
                 {"id", "source", "call", "expr", "returns", "expect", "erratum", "note"}, "a check")
    check_id = _id(path, raw, "id")
    kinds = [k for k in ("call", "expr") if k in raw]
    if len(kinds) != 1:
        raise CaseError(path, raw.line, f"check {check_id!r} needs exactly one of 'call' (a spec function) or 'expr'")
    kind = kinds[0]
    spec_line = raw.value_lines[kind]
    parsed = _expr(path, raw[kind], spec_line, known, kind, spec=kind == "call")
    if kind == "call":
        body = parsed.tree.body
        if not (isinstance(body, ast.Call) and isinstance(body.func, ast.Name) and body.func.id in SPEC_FUNCTIONS):
            raise CaseError(path, spec_line, f"'call' must call one spec function ({', '.join(SPEC_FUNCTIONS)}); "
                                             f"use 'expr' for the document's own arithmetic")
        returns = spec.FUNCTIONS[body.func.id].returns
    else:
        returns = ("out",)
    if "returns" in raw:
        returns = _returns(path, raw, known)
    erratum = _erratum(path, raw, known, kind) if "erratum" in raw else None
    expectations = _expectations(path, raw, known | set(returns), known)
    return Check(check_id, kind, parsed, returns, expectations, erratum,
                 _source(path, raw, "source", case_source), raw.line)


def _returns(path, raw, known):
    value = raw["returns"]
    names = [value] if isinstance(value, str) else value
    line = raw.value_lines["returns"]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and _NAME.match(n) for n in names):
        raise CaseError(path, line, "'returns' must be a name or a list of names")
    clash = [n for n in names if n in known]
    if clash:
        raise CaseError(path, line, f"'returns' name {clash[0]!r} is already an input's name")
    return tuple(names)


def _erratum(path, raw, known, kind):
    value, line = raw["erratum"], raw.value_lines["erratum"]
    if isinstance(value, str):
        return Erratum(value.strip(), None, line)
    if not isinstance(value, _Map) or "note" not in value:
        raise CaseError(path, line, "'erratum' must be a note, or a mapping with 'note' and 'differs'")
    _expect_keys(path, value, {"note"}, {"note", "differs"}, "an erratum")
    differs = None
    if "differs" in value:
        differs = _expr(path, value["differs"], value.value_lines["differs"], known, "erratum 'differs'",
                        spec=kind == "call")
    if not isinstance(value["note"], str):
        raise CaseError(path, value.value_lines["note"], "an erratum's note must be text")
    return Erratum(value["note"].strip(), differs, line)


def _expectations(path, raw, scope, inputs):
    value = raw["expect"]
    if not isinstance(value, _Map) or not value:
        raise CaseError(path, raw.value_lines["expect"],
                        "'expect' must map each output (or an expression over outputs) to what it must be")
    result = []
    for target, spec in value.items():
        key_line, line = value.key_lines[target], value.value_lines[target]
        target_expr = _expr(path, str(target), key_line, scope, "expectation target")
        result.append(_expectation(path, str(target), target_expr, spec, line, inputs))
    return tuple(result)


def _expectation(path, target, target_expr, spec, line, inputs):
    if isinstance(spec, str):
        if looks_like_size(spec):
            return Expectation(target, target_expr, "shape", shape=_size(path, spec, line), line=line)
        return Expectation(target, target_expr, "printed", printed=_printed(path, spec, line), line=line)
    if isinstance(spec, (list, int, float)) and not isinstance(spec, bool):
        return Expectation(target, target_expr, "values", values=_literal(path, spec, line), line=line)
    if isinstance(spec, bool):
        return Expectation(target, target_expr, "values", values=torch.tensor(spec), line=line)
    if not isinstance(spec, _Map):
        raise CaseError(path, line, f"expectation for {target!r}: expected printed text, values or a mapping")
    forms = [k for k in ("printed", "values", "shape", "oracle") if k in spec]
    if len(forms) != 1:
        raise CaseError(path, line, f"expectation for {target!r} needs exactly one of printed, values, shape, oracle")
    form = forms[0]
    _expect_keys(path, spec, {form}, {form, "partial", "rtol", "atol", "note"}, f"expectation for {target!r}")
    if ("rtol" in spec) != ("atol" in spec):
        raise CaseError(path, spec.line, "give rtol and atol together: either alone can pass through the other")
    rtol, atol = spec.get("rtol"), spec.get("atol")
    for name, number in (("rtol", rtol), ("atol", atol)):
        if name in spec and (not isinstance(number, (int, float)) or isinstance(number, bool)
                             or not 0 <= number < math.inf):
            raise CaseError(path, spec.value_lines[name], f"{name} must be a finite number ≥ 0, got {number!r}")
    rtol, atol = (float(rtol), float(atol)) if rtol is not None else (None, None)
    inner = spec.value_lines[form]
    if form == "shape":
        shape = spec[form]
        shape = _size(path, shape, inner) if isinstance(shape, str) else shape
        if not isinstance(shape, list | tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise CaseError(path, inner, "shape must be a list of whole numbers or torch.Size([...]) text")
        return Expectation(target, target_expr, "shape", shape=tuple(shape), line=line)
    if form == "oracle":
        oracle = _expr(path, spec[form], inner, inputs, "oracle")
        return Expectation(target, target_expr, "oracle", oracle=oracle, rtol=rtol, atol=atol, line=line)
    if form == "printed":
        partial = bool(spec.get("partial", False))
        printed = _printed(path, spec[form], inner, partial=partial)
        return Expectation(target, target_expr, "printed", printed=printed, rtol=rtol, atol=atol, line=line)
    if "partial" in spec:
        raise CaseError(path, spec.key_lines["partial"], "'partial' applies to printed text only")
    values = spec[form]
    tensor = torch.tensor(values) if isinstance(values, bool) else _literal(path, values, inner)
    return Expectation(target, target_expr, "values", values=tensor, rtol=rtol, atol=atol, line=line)


# ---------------------------------------------------------------- small parsers


def _printed(path, text, line, *, partial=False, complete=False):
    if not isinstance(text, str):
        raise CaseError(path, line, "expected torch's printed text")
    try:
        printed = parse_tensor(text, partial=partial)
    except TensorTextError as err:
        offset = len(text) - len(text.lstrip("\n"))
        raise CaseError(path, line + err.line - 1 - offset if err.line > offset else line, err.message) from None
    if complete and (printed.elided or printed.partial):
        raise CaseError(path, line, "an input must be printed in full: this text is elided or cut off")
    return printed


def _size(path, text, line):
    try:
        return parse_size(text)
    except TensorTextError as err:
        raise CaseError(path, line + err.line - 1, err.message) from None


def _literal(path, value, line):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value), dtype=torch.float64)
    if not isinstance(value, list):
        raise CaseError(path, line, f"expected a (nested) list of numbers, got {_short(value)}")
    shape = _leading_shape(value)
    count = math.prod(shape)
    if count > MAX_LITERAL:
        # Checked before walking the list: YAML aliases can nest one list into billions of elements.
        raise CaseError(path, line, f"a literal of {count} elements; the limit is {MAX_LITERAL} "
                                    f"(draw large tensors from a seed instead)")
    problem = _ragged(value, shape, ())
    if problem:
        raise CaseError(path, line, problem)
    flat = _flatten(value)
    if all(isinstance(v, bool) for v in flat):
        return torch.tensor(value, dtype=torch.bool)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat):
        bad = next(v for v in flat if not isinstance(v, (int, float)) or isinstance(v, bool))
        raise CaseError(path, line, f"expected numbers, found {bad!r}")
    try:
        if all(isinstance(v, int) for v in flat) and flat:
            return torch.tensor(value, dtype=torch.int64)
        return torch.tensor(value, dtype=torch.float64)
    except (OverflowError, RuntimeError, ValueError) as err:
        raise CaseError(path, line, f"a number does not fit: {err}") from None


def _leading_shape(value):
    """The shape of a nested list as its first elements give it."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def _ragged(value, shape, at):
    """Say where a nested list departs from ``shape`` (its first elements' shape), or return None.

    Every list is held to the leading shape, so the walk never visits more than it allows.
    """
    if not shape:
        return f"ragged list: {list(at)} is a list where a number belongs" if isinstance(value, list) else None
    if not isinstance(value, list):
        return f"ragged list: {list(at)} is a number where a list of {shape[0]} belongs"
    if len(value) != shape[0]:
        return f"ragged list: row {list(at)} has {len(value)} elements, row {[0] * len(at)} has {shape[0]}"
    for i, item in enumerate(value):
        problem = _ragged(item, shape[1:], (*at, i))
        if problem:
            return problem
    return None


def _flatten(value):
    return [x for v in value for x in _flatten(v)] if isinstance(value, list) else [value]


def _expr(path, source, line, known, what, *, spec=False):
    """Parse an expression over ``known`` names; spec functions only where ``spec`` (a graded call)."""
    if not isinstance(source, str):
        raise CaseError(path, line, f"{what}: expected an expression as text, got {_short(source)}")
    try:
        parsed = expr.parse(source, extra_functions=SPEC_FUNCTIONS if spec else ())
    except expr.ExprError as err:
        called = re.search(r"unknown function '(\w+)'", err.message)
        hint = ""
        if called and called.group(1) in SPEC_FUNCTIONS:
            hint = "; spec functions are graded, and are called only in a check's 'call'"
        raise CaseError(path, line, f"{what} `{source}`: {err}{hint}") from None
    unknown = sorted(parsed.names - set(known) - set(expr.CONSTANTS))
    if unknown:
        raise CaseError(path, line, f"{what} `{source}` uses {', '.join(map(repr, unknown))}, "
                                    f"which is not defined before it (known: {', '.join(sorted(known)) or 'nothing'})")
    return parsed


def _source(path, raw, key, parent):
    value = raw.get(key)
    if value is None:
        if parent is None:
            raise CaseError(path, raw.line, f"'{key}' is missing: say which document this comes from (title)")
        return parent
    if isinstance(value, str):
        return Source(parent.title, parent.origin, cell=value) if parent else Source(value)
    if not isinstance(value, _Map):
        raise CaseError(path, raw.value_lines[key], f"'{key}' must be a mapping (title, origin, cell, step)")
    _expect_keys(path, value, set() if parent else {"title"}, {"title", "origin", "cell", "step"}, f"'{key}'")
    base = parent or Source("")
    bad = [k for k, v in value.items() if v is not None and not isinstance(v, (str, int, float))]
    if bad:
        raise CaseError(path, value.key_lines[bad[0]], f"'{key}' {bad[0]} must be text")
    text = {k: (str(v) if v is not None else None) for k, v in value.items()}
    return Source(text.get("title", base.title), text.get("origin", base.origin),
                  text.get("cell", base.cell), text.get("step", base.step))


def _dtype(path, raw, key, default):
    if key not in raw:
        return default
    name = raw[key]
    if not isinstance(name, str) or name not in DTYPES:
        raise CaseError(path, raw.value_lines[key], f"unknown dtype {name!r}; one of {', '.join(DTYPES)}")
    return DTYPES[name]


def _id(path, raw, key):
    value = raw[key]
    if not isinstance(value, str) or not _ID.match(value):
        raise CaseError(path, raw.value_lines[key],
                        f"{key} must be letters, digits, '_' or '-', got {_short(value)}")
    return value


def _expect_keys(path, raw, required, allowed, what):
    if not isinstance(raw, _Map):
        raise CaseError(path, getattr(raw, "line", 1), f"{what} must be a mapping")
    missing = sorted(required - set(raw))
    if missing:
        raise CaseError(path, raw.line, f"{what} is missing {', '.join(map(repr, missing))}")
    unknown = [k for k in raw if k not in allowed]
    if unknown:
        hint = ""
        if any(c in str(k) for k in unknown for c in "()[]"):
            hint = " (an expression with commas inside {...} must be quoted: {expr: \"f(a, b)\"})"
        raise CaseError(path, raw.key_lines[unknown[0]],
                        f"unknown key {unknown[0]!r} in {what}; expected one of {', '.join(sorted(allowed))}{hint}")
