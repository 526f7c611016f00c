"""The case model's field types: each reads what a case file writes and says what is wrong with it.

Ids, dtypes, seeds, tolerances, literal numbers, torch's printed text and expressions are
parsed here, once, into the objects the runtime uses (``torch.dtype``, tensors,
:class:`PrintedTensor`, :class:`Expr`). A problem is a :class:`FieldError`, with its position
inside the field's text where one is known; the loader turns it into the file's line and column.
"""

import difflib
import functools
import math
import re
from typing import Annotated

import torch
from pydantic import BeforeValidator, StrictBool, WithJsonSchema

from attention_core import spec
from attention_core.harness.languages import draws, expr
from attention_core.harness.languages.tensor_text import TensorTextError, parse_size, parse_tensor
from attention_core.harness.text import quote, shorten

SPEC_FUNCTIONS = spec.GRADED
DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int64": torch.int64,
    "bool": torch.bool,
}
MAX_LITERAL = 2**20  # elements of one literal
MAX_CASE_ELEMENTS = 2**25  # elements of all of a case's inputs together (float64: 256 MiB)
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # no ".": it joins ids in snapshot names
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class FieldError(ValueError):
    """A field's problem; ``line`` and ``column`` are 1-based positions inside the field's text."""

    def __init__(self, message, *, line=None, column=None):
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


MAX_ID = 100  # characters of an id: it names a test in every report and gradebook column
MAX_POINTS = 1e6  # points of one check: finite, and a gradebook's sum stays exact


def _id(value):
    if not isinstance(value, str) or not ID.match(value):
        raise FieldError(f"id must be letters, digits, '_' or '-', got {quote(value)}")
    if len(value) > MAX_ID:
        raise FieldError(f"an id of {len(value)} characters; the limit is {MAX_ID}")
    return value


def _points(value, info):
    number = _non_negative(value, info)
    if number > MAX_POINTS:
        raise FieldError(f"{info.field_name} must be at most {MAX_POINTS:g}, got {quote(value)}")
    return number


def _name(value):
    if not isinstance(value, str) or not NAME.match(value) or value in expr.CONSTANTS:
        raise FieldError(f"name {quote(value)} must be a plain identifier, not a constant's name")
    return value


def _dtype(value):
    if isinstance(value, torch.dtype):
        return value
    if not isinstance(value, str) or value not in DTYPES:
        raise FieldError(f"unknown dtype {quote(value)}; one of {', '.join(DTYPES)}")
    return DTYPES[value]


def _floating_dtype(value):
    dtype = _dtype(value)
    if not dtype.is_floating_point:
        raise FieldError(f"a case computes in a floating dtype, not {dtype}")
    return dtype


def _seed(value):
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**64:
        raise FieldError(f"seed must be a whole number from 0 to 2**64 - 1, got {quote(value)}")
    return value


def _non_negative(value, info):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < math.inf:
        raise FieldError(f"{info.field_name} must be a finite number ≥ 0, got {quote(value)}")
    return float(value)


def _number(value):
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise FieldError(f"expected a number, got {quote(value)}")
    return value


def _text(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise FieldError(f"expected text, got {quote(value)}")
    return value


def _expression(graded):
    def parse(source):
        return parse_expression(source, graded=graded)

    return parse


def parse_expression(source, *, graded=False):
    """Parse an expression; an assignment's names may be called only where ``graded`` (a check's call),
    where any name parses and the case's settling checks it against the assignment."""
    if isinstance(source, expr.Expr):
        return source
    if not isinstance(source, str):
        raise FieldError(f"expected an expression as text, got {quote(source)}")
    try:
        return _parsed_expression(source, graded)
    except expr.ExprError as err:
        called = re.search(r"unknown function '(\w+)'", err.message)
        hint = ""
        if called and called.group(1) in SPEC_FUNCTIONS:
            hint = "; spec functions are graded, and are called only in a check's 'call'"
        elif called:
            known = [*SPEC_FUNCTIONS] if graded else list(expr.BUILTINS)
            close = difflib.get_close_matches(called.group(1), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
        if re.search(r"\.\d", source) and err.message.startswith("syntax error"):
            hint = "; a module list's members are read by position: self.heads[0], not self.heads.0"
        raise FieldError(
            f"`{quote(source, 60)[1:-1]}`: {quote(err.message, 200)[1:-1]}{hint}",
            line=1 if err.column else None,
            column=err.column,
        ) from None


@functools.lru_cache(maxsize=4096)
def _parsed_expression(source, graded):
    """One parse per text: an Expr is immutable, and case files repeat their expressions and targets."""
    return expr.parse(source, any_function=graded)


def spec_function(parsed):
    """The name an expression is one call of (``attention(q, k, v)``, or ``Head(8, 4)(x)`` for a class made
    and called), else None. Whether the assignment defines it is settled with the case."""
    return expr.called_name(parsed.tree)


def parse_printed(text, *, partial=False, complete=False):
    """torch's printed text of one tensor; ``complete``: neither elided nor cut off (an input)."""
    if hasattr(text, "values") and hasattr(text, "unit"):
        return text  # already parsed
    if not isinstance(text, str):
        raise FieldError(f"expected torch's printed text, got {quote(text)}")
    try:
        printed = _parsed(text, partial)
    except TensorTextError as err:
        lead = len(text) - len(text.lstrip("\n"))  # blank lines before the text
        raise FieldError(quote(err.message, 200)[1:-1], line=max(err.line - lead, 1), column=err.column) from None
    if complete and (printed.elided or printed.partial):
        raise FieldError("an input must be printed in full: this text is elided or cut off")
    if (printed.elided or printed.partial) and printed.values.numel() == 0:
        raise FieldError(
            "this print shows no element (only '...' or a cut-off start): it would check nothing; "
            "paste a print that shows values, or expect the shape alone ({shape: [...]})"
        )
    return printed


@functools.lru_cache(maxsize=256)
def _parsed(text, partial):
    """One parse per text: a YAML alias repeats a print without its text being read again."""
    return parse_tensor(text, partial=partial)


def _shape(value):
    if isinstance(value, str):
        try:
            return parse_size(value)
        except TensorTextError as err:
            raise FieldError(quote(err.message, 200)[1:-1], line=err.line, column=err.column) from None
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value
    ):
        raise FieldError("shape must be a list of whole numbers or torch.Size([...]) text")
    return tuple(value)


def literal(value):
    """A (nested) list of numbers, or a number, as a tensor: int64, bool or float64 as written."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, (int, float)):
        return torch.tensor(float(value), dtype=torch.float64)
    if not isinstance(value, list):
        raise FieldError(f"expected a (nested) list of numbers, got {quote(value)}")
    shape = _leading_shape(value)
    count = math.prod(shape)
    if count > MAX_LITERAL:
        raise FieldError(
            f"a literal of {count} elements; the limit is {MAX_LITERAL} (draw large tensors from a seed instead)"
        )
    flat = _flat(value, shape)
    kinds = set(map(type, flat or ()))
    if flat is None or any(issubclass(k, list) for k in kinds):
        raise FieldError(_ragged(value, shape, ()))
    if kinds == {bool}:
        return torch.tensor(value, dtype=torch.bool)
    if kinds <= {int, float}:
        integral = float not in kinds
    else:
        bad = [v for v in flat if not isinstance(v, (int, float)) or isinstance(v, bool)]
        if bad:  # (a null among them is one too: no sentinel can be mistaken for it)
            raise FieldError(f"expected numbers, found {'null' if bad[0] is None else quote(bad[0])}")
        integral = all(isinstance(v, int) for v in flat)
    try:
        if flat and integral:
            return torch.tensor(value, dtype=torch.int64)
        return torch.tensor(value, dtype=torch.float64)
    except (OverflowError, RuntimeError, ValueError) as err:
        big = next((v for v in flat if isinstance(v, int) and not -(2**63) <= v < 2**63), None)
        if big is not None:
            try:
                floats = "; with a decimal point it would be a float" if float(big) else ""
            except OverflowError:
                floats = ", nor a float64"
            raise FieldError(
                f"the whole number {shorten(str(big), 30)} ({len(str(abs(big)))} digits) does not fit "
                f"int64 (at most about 9.2e18){floats}"
            ) from None
        raise FieldError(f"a number does not fit: {quote(str(err))[1:-1]}") from None


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


def _flat(value, shape):
    """The items of a nested list of ``shape`` (its first elements' shape) at its last level, in order; None
    where a level departs from the shape (an item that is itself a list departs at the last level)."""
    for length in shape[1:]:
        if not all(isinstance(row, list) and len(row) == length for row in value):
            return None
        value = [x for row in value for x in row]
    return value


def _draw(kind):
    def check(args):
        try:
            return draws.check_spec(kind, args, limit=MAX_CASE_ELEMENTS)
        except ValueError as err:
            raise FieldError(quote(str(err), 200)[1:-1]) from None

    return check


_NUMBERS = {"x-numbers": True}  # becomes {"$ref": "#/$defs/Numbers"} (model.json_schema): pydantic resolves refs
NUMBERS_SCHEMA = {"anyOf": [{"type": "number"}, {"type": "boolean"}, {"type": "array", "items": _NUMBERS}]}
_SIZE = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}}
_DRAW_SCHEMAS = {
    "randn": {
        "anyOf": [
            _SIZE,
            {"type": "object", "properties": {"size": _SIZE}, "required": ["size"], "additionalProperties": False},
        ]
    },
    "randint": {
        "anyOf": [
            {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "integer"}, _SIZE],
                "minItems": 3,
                "maxItems": 3,
            },
            {
                "type": "object",
                "properties": {"low": {"type": "integer"}, "high": {"type": "integer"}, "size": _SIZE},
                "required": ["low", "high", "size"],
                "additionalProperties": False,
            },
        ]
    },
    "embedding": {
        "anyOf": [
            {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2},
            {
                "type": "object",
                "properties": {
                    "num_embeddings": {"type": "integer", "minimum": 0},
                    "embedding_dim": {"type": "integer", "minimum": 0},
                },
                "required": ["num_embeddings", "embedding_dim"],
                "additionalProperties": False,
            },
        ]
    },
    "linear": {
        "anyOf": [
            {
                "type": "array",
                "prefixItems": [
                    {"type": "integer", "minimum": 0},
                    {"type": "integer", "minimum": 0},
                    {"type": "boolean"},
                ],
                "minItems": 2,
                "maxItems": 3,
            },
            {
                "type": "object",
                "properties": {
                    "in_features": {"type": "integer", "minimum": 0},
                    "out_features": {"type": "integer", "minimum": 0},
                    "bias": {"type": "boolean"},
                },
                "required": ["in_features", "out_features"],
                "additionalProperties": False,
            },
        ]
    },
}
_DRAW_SCHEMAS["rand"] = _DRAW_SCHEMAS["randn"]
_DRAW_SCHEMAS["dropout"] = {
    "type": "object",
    "properties": {"p": {"type": "number", "minimum": 0, "exclusiveMaximum": 1}, "shape": _SIZE},
    "required": ["p", "shape"],
    "additionalProperties": False,
}


def Draw(kind):  # noqa: N802 (a type, spelled as one)
    """The arguments of a seeded draw of ``kind``, normalised by :func:`draws.check_spec`."""
    return Annotated[dict, BeforeValidator(_draw(kind)), WithJsonSchema(_DRAW_SCHEMAS[kind])]


Id = Annotated[str, BeforeValidator(_id), WithJsonSchema({"type": "string", "pattern": ID.pattern})]
Name = Annotated[str, BeforeValidator(_name), WithJsonSchema({"type": "string", "pattern": NAME.pattern})]
DType = Annotated[torch.dtype, BeforeValidator(_dtype), WithJsonSchema({"enum": list(DTYPES)})]
FloatDType = Annotated[
    torch.dtype,
    BeforeValidator(_floating_dtype),
    WithJsonSchema({"enum": [n for n, d in DTYPES.items() if d.is_floating_point]}),
]
Seed = Annotated[int, BeforeValidator(_seed), WithJsonSchema({"type": "integer", "minimum": 0, "maximum": 2**64 - 1})]
NonNegative = Annotated[float, BeforeValidator(_non_negative), WithJsonSchema({"type": "number", "minimum": 0})]
Points = Annotated[
    float, BeforeValidator(_points), WithJsonSchema({"type": "number", "minimum": 0, "maximum": MAX_POINTS})
]
Number = Annotated[float | int, BeforeValidator(_number), WithJsonSchema({"type": "number"})]
Text = Annotated[str, BeforeValidator(_text), WithJsonSchema({"type": ["string", "number"]})]
Flag = StrictBool
Expression = Annotated[
    expr.Expr,
    BeforeValidator(_expression(False)),
    WithJsonSchema({"type": "string", "description": "an expression of the safe language"}),
]
GradedExpression = Annotated[
    expr.Expr,
    BeforeValidator(_expression(True)),
    WithJsonSchema({"type": "string", "description": "a call of one spec function"}),
]
Numbers = Annotated[torch.Tensor, BeforeValidator(literal), WithJsonSchema(_NUMBERS)]
Shape = Annotated[
    tuple,
    BeforeValidator(_shape),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "integer", "minimum": 0}},
                {"type": "string", "pattern": r"^\s*torch\.Size\("},
            ]
        }
    ),
]
CompletePrinted = Annotated[
    object,
    BeforeValidator(lambda text: parse_printed(text, complete=True)),
    WithJsonSchema({"type": "string", "description": "torch's printed text, in full"}),
]
