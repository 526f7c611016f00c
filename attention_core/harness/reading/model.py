"""The declared model of a case file: one class per kind of input, check and expectation.

The same classes validate a file (pydantic), give its JSON Schema (``python -m
attention_core.harness.reading.model > cases/case-file.schema.json``) and are what the runtime reads:
an input is a :class:`LiteralInput`, :class:`NumberInput`, :class:`PrintedInput`, a
:class:`DrawInput` (one class per draw), an :class:`ExprInput` or a :class:`TokenIdsInput`;
an expectation a :class:`PrintedExpectation`, :class:`ValuesExpectation`,
:class:`ShapeExpectation` or :class:`OracleExpectation`; a check a :class:`CallCheck` (graded)
or an :class:`ExprCheck`. The short forms a file writes (``a: [1, 2]``, ``out: tensor(...)``)
become these classes before validation. What depends on more than one field (names defined
before use, the seed a draw needs, points, defaults) is settled by :mod:`scope` once a case
has validated.
"""

import json
import sys
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, ConfigDict, Field, field_validator, model_validator

from attention_core.harness.languages import draws
from attention_core.harness.languages.tensor_text import looks_like_size
from attention_core.harness.reading.fields import (
    NUMBERS_SCHEMA,
    VISIBILITIES,
    CompletePrinted,
    Draw,
    DType,
    Expression,
    FieldError,
    Flag,
    FloatDType,
    GradedExpression,
    Id,
    Name,
    NonNegative,
    Number,
    Numbers,
    Points,
    Seed,
    Shape,
    Text,
    parse_printed,
    spec_function,
)
from attention_core.harness.reading.node import Node, ShortForms, union
from attention_core.harness.text import shorten

Visibility = Literal[VISIBILITIES]


# ---------------------------------------------------------------- sources


class Source(Node):
    """Where a worked example comes from; a case's and a check's fill in from the level above."""

    what: ClassVar[str] = "'source'"
    title: Text | None = None
    origin: Text | None = None
    cell: Text | None = None
    step: Text | None = None

    def under(self, parent):
        """This source with what it leaves out taken from ``parent``."""
        if parent is None:
            return self
        return parent.updated({k: v for k, v in self.__dict__.items() if v is not None})


class Document(Source):
    """The document a case file encodes: its title, and where it is published."""

    what: ClassVar[str] = "'document'"
    title: Text


def _cell(value):
    return {"cell": value} if isinstance(value, (str, int, float)) and not isinstance(value, bool) else value


SourceField = Annotated[Source, BeforeValidator(_cell), ShortForms({"type": "string", "description": "a cell"})]


class Defaults(Node):
    """A file's defaults for its cases."""

    what: ClassVar[str] = "defaults"
    dtype: FloatDType | None = None
    points: Points | None = None
    visibility: Visibility | None = None


# ---------------------------------------------------------------- inputs


class LiteralInput(Node):
    """``a: [[1, 0], [0, 2]]`` or ``{tensor: ..., dtype: int64}``: numbers written out."""

    kind: ClassVar[str] = "literal"
    what: ClassVar[str] = "a literal input"
    tensor: Numbers
    dtype: DType | None = None


class NumberInput(Node):
    """``a: 3``: a plain number, kept a Python number."""

    kind: ClassVar[str] = "literal"
    what: ClassVar[str] = "a number input"
    number: Number


class PrintedInput(Node):
    """torch's printed text of a tensor, in full; its rounding is propagated."""

    kind: ClassVar[str] = "printed"
    what: ClassVar[str] = "a printed input"
    printed: CompletePrinted


class ExprInput(Node):
    """``{expr: "tril(ones(8, 8))"}``: an expression over earlier inputs."""

    kind: ClassVar[str] = "expr"
    what: ClassVar[str] = "an expression input"
    expr: Expression


class TokenIds(Node):
    """A sentence to number by its sorted vocabulary."""

    what: ClassVar[str] = "token_ids"
    text: str
    lower: Flag = False
    remove: str = ""


class TokenIdsInput(Node):
    """``{token_ids: {text: ..., lower: true, remove: ",;."}}``."""

    kind: ClassVar[str] = "token_ids"
    what: ClassVar[str] = "a token_ids input"
    token_ids: TokenIds


class DrawInput(Node):
    """A seeded draw from the case's generator; ``draw`` names it, ``spec`` holds its arguments; ``seed``, where
    given, seeds the generator again just before it (a notebook's ``torch.manual_seed`` there): this draw and the
    later ones come from that stream."""

    kind: ClassVar[str] = "draw"
    draw: ClassVar[str]
    what: ClassVar[str] = "a draw input"
    dtype: DType | None = None
    seed: Seed | None = None

    @property
    def spec(self):
        return getattr(self, self.draw)

    @model_validator(mode="after")
    def _floating(self):
        if self.draw in draws.FLOATING and self.dtype is not None and not self.dtype.is_floating_point:
            raise FieldError(f"{self.draw} draws a floating dtype, not {self.dtype}")
        return self


class RandnInput(DrawInput):
    draw: ClassVar[str] = "randn"
    randn: Draw("randn")


class RandInput(DrawInput):
    draw: ClassVar[str] = "rand"
    rand: Draw("rand")


class RandintInput(DrawInput):
    draw: ClassVar[str] = "randint"
    randint: Draw("randint")


class EmbeddingInput(DrawInput):
    draw: ClassVar[str] = "embedding"
    embedding: Draw("embedding")


class LinearInput(DrawInput):
    draw: ClassVar[str] = "linear"
    linear: Draw("linear")


class DropoutInput(DrawInput):
    draw: ClassVar[str] = "dropout"
    dropout: Draw("dropout")


DRAWS = (RandnInput, RandInput, RandintInput, EmbeddingInput, LinearInput, DropoutInput)


def _input_short(value):
    if isinstance(value, str):
        return {"printed": value}
    if isinstance(value, list):
        return {"tensor": value}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"number": value}
    return value


_INPUT_FORMS = ("tensor", "number", "printed", "expr", "token_ids", *(c.draw for c in DRAWS))
Input = union(
    (LiteralInput, NumberInput, PrintedInput, ExprInput, TokenIdsInput, *DRAWS),
    _INPUT_FORMS,
    "an input",
    _input_short,
    {"type": "string", "description": "torch's printed text, in full"},
    {"type": "array", "items": NUMBERS_SCHEMA, "description": "literal numbers"},
    {"type": "number"},
)


# ---------------------------------------------------------------- expectations


class _Expectation(Node):
    """What one output, input or expression over them must be; its ``target`` is set by the check."""

    note: str | None = None
    pending: Flag = False  # pasted from a notebook; the check is not yet known to compute it
    recorded: Text | None = None  # how ``record`` computed it: unreviewed until the mark is removed
    __slots__ = ("_target", "_expr")  # set by the check (see Node's slots)

    def place(self, target, parsed):
        """Say what this expects something of: ``target`` as written, and parsed (set once, by the check)."""
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_expr", parsed)

    @property
    def target(self):
        """The output, input or expression (as written) this expects something of."""
        return getattr(self, "_target", "")

    @property
    def expr(self):
        """The target, parsed."""
        return getattr(self, "_expr", None)


class _Tolerances(_Expectation):
    rtol: NonNegative | None = None
    atol: NonNegative | None = None

    @model_validator(mode="after")
    def _together(self):
        for name in ("rtol", "atol"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise FieldError(f"{name} must be a finite number ≥ 0, got null")
        if (self.rtol is None) != (self.atol is None):
            raise FieldError("give rtol and atol together: either alone can pass through the other")
        return self


class PrintedExpectation(_Tolerances):
    """torch's printed text, compared by the printed-digit rule; ``partial`` for a cut-off export."""

    kind: ClassVar[str] = "printed"
    what: ClassVar[str] = "a printed expectation"
    partial: Flag = False  # before printed: the text is read with it
    printed: Annotated[object, Field(json_schema_extra={"type": "string"})]

    @field_validator("printed", mode="before")
    @classmethod
    def _parse(cls, text, info):
        return parse_printed(text, partial=info.data.get("partial", False))


class ValuesExpectation(_Tolerances):
    """Numbers at full precision; one number applies to every element."""

    kind: ClassVar[str] = "values"
    what: ClassVar[str] = "a values expectation"
    values: Numbers


class ShapeExpectation(_Expectation):
    """The shape only."""

    kind: ClassVar[str] = "shape"
    what: ClassVar[str] = "a shape expectation"
    shape: Shape


class OracleExpectation(_Tolerances):
    """torch's own functions over the inputs, run in float64: an independent route."""

    kind: ClassVar[str] = "oracle"
    what: ClassVar[str] = "an oracle expectation"
    oracle: Expression


class MissingExpectation(_Expectation):
    """``out:`` with no value: nothing expected yet (``record`` fills it in)."""

    kind: ClassVar[str] = "missing"
    what: ClassVar[str] = "a missing expectation"
    missing: Literal[True] = True


def _expectation_short(value):
    if value is None:
        return {"missing": True}
    if isinstance(value, str):
        return {"shape": value} if looks_like_size(value) else {"printed": value}
    if isinstance(value, (list, int, float)):  # a bool too
        return {"values": value}
    return value


Expectation = union(
    (PrintedExpectation, ValuesExpectation, ShapeExpectation, OracleExpectation, MissingExpectation),
    ("printed", "values", "shape", "oracle", "missing"),
    "an expectation",
    _expectation_short,
    {"type": "string", "description": "torch's printed text, or torch.Size([...])"},
    {"type": "null", "description": "nothing expected yet: record fills it in"},
    NUMBERS_SCHEMA,
)


def _expect(value):
    if not isinstance(value, dict) or not value:
        raise FieldError("'expect' must map each output (or an expression over outputs) to what it must be")
    return value


# ---------------------------------------------------------------- checks


class Erratum(Node):
    """A printed value that a correct implementation does not reproduce, and the correct computation."""

    what: ClassVar[str] = "an erratum"
    note: str
    differs: GradedExpression | None = None

    @field_validator("note")
    @classmethod
    def _strip(cls, note):
        return note.strip()


def _note(value):
    return {"note": value} if isinstance(value, str) else value


def _names(value):
    return [value] if isinstance(value, str) else value


def _target_text(key):
    """An expectation's target is text: an output's name or an expression (a YAML number or null is not)."""
    if not isinstance(key, str):
        raise FieldError(
            f"an expectation target must be an output's name or an expression, as text; "
            f"got {shorten(key)} (quote it if it is an expression)"
        )
    return key


class _Check(Node):
    """One computation and the expectations on its results."""

    what: ClassVar[str] = "a check"
    id: Id
    source: SourceField | None = None
    returns: (
        Annotated[tuple[Name, ...], BeforeValidator(_names), Field(min_length=1), ShortForms({"type": "string"})] | None
    ) = None
    expect: Annotated[dict[Annotated[str, BeforeValidator(_target_text)], Expectation], BeforeValidator(_expect)]
    erratum: Annotated[Erratum, BeforeValidator(_note), ShortForms({"type": "string"})] | None = None
    note: str | None = None
    points: Points | None = None
    visibility: Visibility | None = None

    @property
    def expectations(self):
        """The expectations, in the order written."""
        return tuple(self.expect.values())

    def read_names(self):
        """The names its expectations read: their targets and the names in their expressions."""
        read = set()
        for expectation in self.expectations:
            read |= {expectation.target} | set(expectation.expr.names)
        return read

    def read_results(self):
        """The positions in ``returns`` of the results its expectations read (by name or in an expression)."""
        read = self.read_names()
        return [i for i, name in enumerate(self.returns or ()) if name in read]


class CallCheck(_Check):
    """``call: attention(q, k, v)``: one spec function, graded."""

    kind: ClassVar[str] = "call"
    call: GradedExpression

    @property
    def expr(self):
        return self.call

    @property
    def function(self):
        """The spec function this check grades."""
        return spec_function(self.call)

    mode: Literal["eval", "train"] | None = None  # a module's mode (a class call); default: the assignment's
    # A class call's instance as a students' kit records it: state_dict name -> its initial values (the
    # reference that would draw them is not in the kit).
    state: dict[Annotated[str, Field(max_length=400)], Numbers] | None = None

    @field_validator("call")
    @classmethod
    def _one_spec_call(cls, parsed):
        if spec_function(parsed) is None:
            raise FieldError(
                "'call' must be one call of a graded function, `f(x)`, or a graded class made and "
                "called, `C(a)(x)`; use 'expr' for the document's own arithmetic"
            )
        return parsed


class ExprCheck(_Check):
    """``expr: input @ w_query``: the document's own arithmetic, verified, never graded."""

    kind: ClassVar[str] = "expr"
    function: ClassVar[None] = None
    expr: Expression


class PendingCheck(_Check):
    """``pending: what is left to write``: a draft whose computation (``call`` or ``expr``) is not written yet."""

    kind: ClassVar[str] = "pending"
    function: ClassVar[None] = None
    expr: ClassVar[None] = None
    pending: Text


Check = union((CallCheck, ExprCheck, PendingCheck), ("call", "expr", "pending"), "a check", lambda value: value)


def waiting(check):
    """(line, what is left) for each part of ``check`` that is still a draft; empty for a finished check."""
    left = [(check.line, f"check {check.id!r} is pending: {check.pending}")] if check.kind == "pending" else []
    for e in check.expectations:
        if e.kind == "missing":
            left.append((e.line, f"no expectation for {e.target!r} yet (record fills it in)"))
        elif e.pending:
            left.append(
                (
                    e.line,
                    f"the expectation for {e.target!r} is pending: write the check's computation, "
                    f"then remove 'pending'",
                )
            )
    return left


# ---------------------------------------------------------------- cases and files


def _none_is_empty(value):
    return {} if value is None else value


class Case(Node):
    """A worked example: inputs made in order, then checks."""

    what: ClassVar[str] = "a case"
    id: Id
    source: SourceField | None = None
    note: str | None = None
    dtype: FloatDType | None = None
    seed: Seed | None = None
    points: Points | None = None
    visibility: Visibility | None = None
    inputs: Annotated[dict[Name, Input], BeforeValidator(_none_is_empty)] = {}
    checks: Annotated[tuple[Check, ...], Field(min_length=1)]

    @classmethod
    def _settle(cls, made, context):
        """The loader's ``settle`` (:func:`scope.settle`, given in the validation's context), where it gives one."""
        settle = context.get("settle")
        return made if settle is None else settle(made, context)


class CaseFileModel(Node):
    """A case file: the document it encodes, optional defaults, and its cases."""

    model_config = ConfigDict(title="attention-core case file")
    what: ClassVar[str] = "the file"
    document: Document
    defaults: Defaults | None = None
    cases: Annotated[list[Case], Field(min_length=1)]


class Envelope(CaseFileModel):
    """A case file with its cases left unread: each is validated alone, so a bad one fails alone."""

    cases: Annotated[list[Any], Field(min_length=1)]


def json_schema():
    """The JSON Schema of a case file as a person writes it, short forms included."""
    schema = _numbers_ref(CaseFileModel.model_json_schema())
    schema["$defs"]["Numbers"] = _numbers_ref(NUMBERS_SCHEMA)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "case-file.schema.json",
        "description": "A case file of attention-core: worked examples of one document as checked cases "
        "(see docs/case-format.md).",
        **schema,
    }


def _numbers_ref(schema):
    if isinstance(schema, dict):
        if schema.get("x-numbers"):
            return {"$ref": "#/$defs/Numbers"}
        return {k: _numbers_ref(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_numbers_ref(v) for v in schema]
    return schema


if __name__ == "__main__":
    json.dump(json_schema(), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
