"""What a case means beyond each field, settled once its fields have validated.

Names are defined before they are used; a draw needs the case's seed; an erratum's correct
computation calls the same spec function as its check; an ``expr`` check has no points; the
inputs a file writes out fit the case's element budget; sources, dtype, points and visibility
take their defaults from the level above. A problem is a :class:`Misplaced` error at its path
in the case, which the loader turns into a line.
"""

import difflib
import math

import torch

from attention_core.harness.languages import expr
from attention_core.harness.languages.expr_builtins import MODULE_NAMES
from attention_core.harness.reading.fields import MAX_CASE_ELEMENTS, FieldError, parse_expression, spec_function
from attention_core.harness.reading.model import (
    CallCheck,
    DrawInput,
    ExprCheck,
    ExprInput,
    LiteralInput,
    OracleExpectation,
    PrintedInput,
)
from attention_core.harness.text import first_given, quote, shorten


class Misplaced(Exception):
    """A problem at ``loc`` (a path in the case, as a validation error gives it)."""

    def __init__(self, loc, message, *, key=False, line=None, column=None):
        super().__init__(message)
        self.loc, self.message, self.key, self.line, self.column = tuple(loc), message, key, line, column


def settle(case, context):
    """``case`` with defaults applied and every cross-field rule checked; raises :class:`Misplaced`."""
    document, defaults = context.get("document"), context.get("defaults")
    source = case.source.under(document) if case.source is not None else document
    dtype = case.dtype or (defaults.dtype if defaults is not None else None) or torch.float32
    points = first_given(case.points, defaults.points if defaults is not None else None)
    visibility = first_given(case.visibility, defaults.visibility if defaults is not None else None)
    assignment = context.get("assignment") or _default_assignment()
    points = first_given(points, assignment.settings.points)
    visibility = first_given(visibility, assignment.settings.visibility)
    known = _inputs(case)
    checks, seen = [], set()
    for i, check in enumerate(case.checks):
        if check.id in seen:
            raise Misplaced(("checks", i, "id"), f"check id {quote(check.id)} is used twice in case {quote(case.id)}")
        seen.add(check.id)
        checks.append(_check(check, ("checks", i), known, source, points, visibility, assignment, _seeded(case)))
    return case.updated({"source": source, "dtype": dtype, "checks": tuple(checks)})


def _seeded(case):
    """Whether the case draws from a seeded stream: its own seed, or a draw's."""
    return case.seed is not None or any(isinstance(i, DrawInput) and i.seed is not None for i in case.inputs.values())


def _default_assignment():
    from attention_core.harness.reading.assignment import default  # noqa: PLC0415 (the assignment reads the harness's fields)

    return default()


def _graded(check, at, assignment):
    """The assignment's entry for the name ``check`` calls; raises Misplaced where it grades no such name,
    or where a class is called as a function (or a function made as a class)."""
    name, graded = check.function, assignment.graded
    entry = graded.get(name)
    if entry is None and name in expr.BUILTINS:
        raise Misplaced(
            (*at, "call"),
            f"'call' must call one graded function or class of the assignment "
            f"({', '.join(graded) or 'none'}); {quote(name)} is a builtin: use 'expr' for "
            f"the document's own arithmetic",
        )
    if entry is None:
        close = difflib.get_close_matches(name, list(graded), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise Misplaced(
            (*at, "call"),
            f"unknown function {quote(name)}{hint} (the assignment grades {', '.join(graded) or 'nothing'})",
        )
    made = expr.makes_instance(check.call.tree)
    if entry.is_class and not made:
        raise Misplaced(
            (*at, "call"),
            f"{name} is a class: make an instance and call it, "
            f"`{name}({', '.join(p.name for p in entry.params)})(...)`",
        )
    if made and not entry.is_class:
        raise Misplaced((*at, "call"), f"{name} is a function, not a class: call it once, `{name}(...)`")
    if check.state is not None and not entry.is_class:
        raise Misplaced((*at, "state"), f"'state' records a module's parameters; {name} is a function")
    if check.mode is not None and not entry.is_class:
        raise Misplaced((*at, "mode"), f"'mode' sets a module's mode; {name} is a function")
    helpers = {n for n, g in graded.items() if not g.is_class}
    unknown = sorted(check.call.calls - {name} - set(expr.BUILTINS) - helpers)
    if unknown:
        raise Misplaced(
            (*at, "call"),
            f"the arguments of `{shorten(check.call.source, 60)}` call {quote(unknown[0])}, "
            f"which is neither a builtin nor a function of the assignment",
        )
    return entry


def _inputs(case):
    known, total, seeded = set(), 0, case.seed is not None
    for name, item in case.inputs.items():
        at = ("inputs", name)
        if name in MODULE_NAMES:
            raise Misplaced(
                at,
                f"an input may not be named {quote(name)}: expressions read `{name}.` in front of a function or a "
                f"constant as pasted code's module (give the input another name)",
            )
        if isinstance(item, ExprInput):
            _defined(item.expr, known, (*at, "expr"), "input expression")
        seeded = seeded or (isinstance(item, DrawInput) and item.seed is not None)  # (seeded again before it)
        if isinstance(item, DrawInput) and not seeded:
            raise Misplaced(
                at,
                f"input {quote(name)} is a seeded draw ({item.draw}) but the case has no 'seed' (give the case "
                f"one, or this draw its own: {{{item.draw}: ..., seed: 42}})",
            )
        total += elements(item)
        if total > MAX_CASE_ELEMENTS:
            raise Misplaced(
                at,
                f"input {quote(name)} takes the case's inputs to {total} elements; the budget "
                f"is {MAX_CASE_ELEMENTS} elements for all of a case's inputs together",
            )
        known.add(name)
    return known


def elements(item):
    """How many elements an input written in the file makes (0 where only making it tells)."""
    if isinstance(item, LiteralInput):
        return item.tensor.numel()
    if isinstance(item, PrintedInput):
        return math.prod(item.printed.shape) if item.printed.shape is not None else item.printed.values.numel()
    if isinstance(item, DrawInput):
        args = item.spec
        if "size" in args:
            return math.prod(args["size"])
        if item.draw == "embedding":
            return args["num_embeddings"] * args["embedding_dim"]
        return args["in_features"] * args["out_features"] + (args["out_features"] if args["bias"] else 0)
    return 0


def _check(check, at, inputs, case_source, case_points, case_visibility, assignment, seeded):
    graded = isinstance(check, CallCheck)
    entry = _graded(check, at, assignment) if graded else None
    if entry is not None and entry.is_class and not seeded and check.state is None:
        raise Misplaced(
            (*at, "call"),
            f"`{shorten(check.call.source, 60)}` makes a {check.function} from the case's "
            f"seeded stream, as a notebook's torch.manual_seed then {check.function}(...) "
            f"does: give the case a 'seed'",
        )
    returns = check.returns or (entry.returns if graded else ("out",))
    if len(set(returns)) != len(returns):
        raise Misplaced((*at, "returns"), f"'returns' names a result twice: {', '.join(returns)}")
    if graded and assignment.builtin and len(returns) != len(entry.returns):
        wanted = entry.returns
        raise Misplaced(
            (*at, "returns"),
            f"{check.function} returns {len(wanted)} "
            f"value{'s' if len(wanted) > 1 else ''} ({', '.join(wanted)}): "
            f"'returns' must name {len(wanted)}, not {len(returns)}",
        )
    clash = [n for n in returns if n in inputs]
    if clash:
        raise Misplaced((*at, "returns"), f"'returns' name {quote(clash[0])} is already an input's name")
    if check.expr is not None:  # a pending check's computation is not written yet
        _defined(check.expr, inputs, (*at, check.kind), check.kind)
    scope = inputs | set(returns)
    for target, expectation in check.expect.items():
        where = (*at, "expect", target)
        try:
            parsed = parse_expression(target)
        except FieldError as err:
            raise Misplaced(
                where, f"expectation target {err.message}", key=True, line=err.line, column=err.column
            ) from None
        _defined(parsed, scope, where, "expectation target", key=True)
        if isinstance(expectation, OracleExpectation):  # a class call's oracle reads its instance as `self`
            made = {"self"} if entry is not None and entry.is_class else set()
            _defined(expectation.oracle, inputs | made, (*where, "oracle"), "oracle")
        expectation.place(target, parsed)
    if check.erratum is not None and check.erratum.differs is not None:
        _differs(check, check.erratum.differs, (*at, "erratum", "differs"), inputs, returns, assignment.graded)
    if isinstance(check, ExprCheck) and check.points:
        raise Misplaced(
            (*at, "points"),
            "an 'expr' check is never graded, so it has no points (give points to a graded 'call' check)",
        )
    points = first_given(check.points, case_points, 1.0) if graded else 0.0
    source = check.source.under(case_source) if check.source is not None else case_source
    changes = {"mode": check.mode or assignment.settings.mode} if entry is not None and entry.is_class else {}
    return check.updated(
        {
            **changes,
            "returns": tuple(returns),
            "points": points,
            "source": source,
            "visibility": first_given(check.visibility, case_visibility, "visible"),
        }
    )


def _differs(check, differs, where, inputs, returns, graded):
    """The correct computation of an erratum: a call of the check's own spec function, or spec-free arithmetic."""
    if isinstance(check, CallCheck) and spec_function(differs) != check.function:
        raise Misplaced(
            where,
            f"erratum 'differs' must be a call of the same spec function as the check, "
            f"{check.function}(...), so that it returns the call's results "
            f"({', '.join(returns)}); got `{shorten(differs.source, 60)}`",
        )
    called = sorted(differs.calls & set(graded))
    if isinstance(check, ExprCheck) and called:
        raise Misplaced(
            where,
            f"erratum 'differs' of an 'expr' check is the document's own arithmetic and may not "
            f"call the spec function {called[0]}; spec functions are graded, and are called "
            f"only in a check's 'call'",
        )
    _defined(differs, inputs, where, "erratum 'differs'")


def _defined(parsed, known, where, what, *, key=False):
    unknown = parsed.names.difference(known, expr.CONSTANTS)
    if unknown:
        unknown = sorted(unknown)
        names = shorten(", ".join(sorted(known)) or "nothing", 200)
        raise Misplaced(
            where,
            f"{what} `{shorten(parsed.source, 60)}` uses {', '.join(map(quote, unknown))}, "
            f"which is not defined before it (known: {names})",
            key=key,
        )
