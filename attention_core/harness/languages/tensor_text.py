"""Parse torch's printed tensor form, as ``print(t)`` or a notebook cell shows it.

The parser keeps what the print says and nothing more: every shown element with its position, its
value, and one unit in its last printed digit, so a check can allow half a unit of rounding. Elided
prints (torch's ``...``) keep only the shown corners; positions after a ``...`` count from the end.
A print that a notebook export cut off can be read with ``partial=True``.

It reads torch's own layout: ``tensor(`` then nested brackets, one element or row per
comma, then suffixes such as ``dtype=torch.float64`` or ``grad_fn=<SumBackward0>``.
Line breaks, indentation and blank lines do not matter.
"""

import re
from dataclasses import dataclass
from functools import cache

import torch

from attention_core.harness.text import read_float

__all__ = ["TensorTextError", "PrintedTensor", "parse_tensor", "parse_size", "looks_like_size"]

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>-?(?:\d+(?:\.\d*)?(?:e[+-]?\d+)?|(?:nan|inf)\b))
    | (?P<bool>(?:True|False)\b)
    | (?P<word>[A-Za-z_][\w.]*)
    | (?P<ellipsis>\.\.\.)
    | (?P<angle><[^<>\n]*>)
    | (?P<quoted>'[^'\n]*')
    | (?P<punct>[\[\](),=:])
    | (?P<bad>\S)
    )""",
    re.VERBOSE,
)

# Characters that end a token: whatever else ends the text may be a token cut in two.
_DELIMITERS = frozenset(" \t\r\n,[]()")

_FLOAT_DTYPES = {"float16", "float32", "float64", "bfloat16", "half", "float", "double"}
_INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "short", "int", "long"}

_SUFFIX_KINDS = {"grad_fn": "angle", "requires_grad": "bool", "dtype": "word", "device": "quoted", "size": "("}


class TensorTextError(ValueError):
    """A problem in printed text; .line and .column are 1-based positions inside the text given."""

    def __init__(self, message: str, line: int, column: int):
        super().__init__(f"line {line}, column {column}: {message}")
        self.message = message
        self.line = line
        self.column = column


@dataclass(frozen=True, eq=False)
class PrintedTensor:
    """One printed tensor: the shown elements, their positions and printed precision.

    ``index`` (int64, N x ndim) holds each shown element's position, counted from the end
    (negative) after a ``...``; ``values`` (float64) the printed values in print order, bools
    as 0/1; ``unit`` (float64) one unit in each value's last printed digit, 0 where the print
    is exact. ``notation`` is "fixed", "sci", "integer" (floats printed like ``2.``), "int" or
    "bool". ``shape`` is None when the print is elided or partial. ``dtype``, ``device``,
    ``requires_grad`` and ``grad_fn`` come from the suffixes (and a ``Parameter containing:``
    line); ``dtype`` is None when torch left it out.
    """

    kind: str
    ndim: int
    shape: tuple[int, ...] | None
    index: torch.Tensor
    values: torch.Tensor
    unit: torch.Tensor
    notation: str
    elided: bool
    partial: bool
    dtype: str | None
    device: str | None
    requires_grad: bool
    grad_fn: str | None

    def dense(self) -> torch.Tensor:
        """The values as a float64 tensor of `shape`; raises ValueError when elided or partial."""
        if self.shape is None:
            reason = "was cut off (partial)" if self.partial else "is elided with '...'"
            raise ValueError(f"the printed tensor {reason}; only the shown elements are known")
        return self.values.reshape(self.shape).clone()


def parse_tensor(text: str, *, partial: bool = False) -> PrintedTensor:
    """Parse torch's printed form of one tensor, e.g. ``tensor([[1., 2.]], dtype=torch.float64)``.

    With ``partial=True`` the text may stop anywhere inside the tensor; the elements shown
    before the cut are kept. Raises TensorTextError with the line and column of a problem.
    """
    return _Parser(text, partial).parse()


def parse_size(text: str) -> tuple[int, ...]:
    """Parse a printed ``torch.Size([4, 8, 2])`` into ``(4, 8, 2)``; raises TensorTextError."""
    reader = _Reader(text, partial=False, unclosed="the text ends before torch.Size(...) closes")
    reader.expect("word", "torch.Size", "expected torch's printed form `torch.Size([...])`")
    reader.expect("(", "(", "expected '(' after torch.Size")
    reader.expect("[", "[", "expected '[' after torch.Size(")
    sizes = reader.int_sequence("]")
    reader.expect(")", ")", "expected ')' to close torch.Size(")
    reader.expect_end()
    return sizes


def looks_like_size(text: str) -> bool:
    """True when the text is a printed ``torch.Size(...)`` rather than a tensor."""
    return text.strip().startswith("torch.Size(")


class _Cut(Exception):
    """The text of a partial print ended; the parse so far stands."""


class _Row:
    """One bracketed list: its items (token texts or child rows) and where a '...' stood."""

    __slots__ = ("items", "ellipsis", "closed", "offset")

    def __init__(self, offset):
        self.items = []
        self.ellipsis = None
        self.closed = False
        self.offset = offset


class _Reader:
    """Tokens of a text with a cursor; errors carry 1-based line and column."""

    def __init__(self, text, partial, unclosed):
        self.text = text
        self.partial = partial
        self.unclosed = unclosed
        end = _without_cut_token(text) if partial else len(text)
        self.tokens = self._tokenize(end)
        self.pos = 0

    def _tokenize(self, end):
        tokens = []
        for match in _TOKEN.finditer(self.text, 0, end):
            kind = match.lastgroup
            value = match.group(kind)
            offset = match.start(kind)
            if kind == "bad":
                raise self.error(f"unexpected character {value!r}", offset)
            tokens.append((value if kind == "punct" else kind, value, offset))
        tokens.append(("eof", "", len(self.text[:end].rstrip())))
        return tokens

    def position(self, offset):
        """(line, column), both 1-based, of a character offset."""
        return self.text.count("\n", 0, offset) + 1, offset - self.text.rfind("\n", 0, offset)

    def error(self, message, offset):
        return TensorTextError(message, *self.position(offset))

    def peek(self):
        return self.tokens[self.pos]

    def next(self):
        """The current token, moving past it; at the end of the text a partial parse stops."""
        token = self.tokens[self.pos]
        if token[0] == "eof":
            if self.partial:
                raise _Cut
            raise self.error(self.unclosed, token[2])
        self.pos += 1
        return token

    def expect(self, kind, value, message):
        token = self.peek()
        if token[0] != kind or token[1] != value:
            found = "the end of the text" if token[0] == "eof" else repr(token[1])
            raise self.error(f"{message}, found {found}", token[2])
        return self.next()

    def expect_end(self):
        kind, value, offset = self.peek()
        if kind != "eof":
            raise self.error(f"unexpected text {value!r} after the closing ')'", offset)

    def int_sequence(self, closer):
        """Non-negative integers separated by commas up to `closer`, as in a size."""
        numbers = []
        while True:
            kind, value, offset = self.next()
            if kind == closer:
                return tuple(numbers)
            if kind != "num" or not value.isdigit():
                raise self.error(f"expected a non-negative integer size, found {value!r}", offset)
            numbers.append(int(value))
            kind, value, offset = self.next()
            if kind == closer:
                return tuple(numbers)
            if kind != ",":
                raise self.error(f"expected ',' or {closer!r} in a size, found {value!r}", offset)


class _Parser(_Reader):
    """Recursive descent over ``tensor(<data>, <suffix>=<value>, ...)``."""

    def __init__(self, text, partial):
        if not text.strip():
            raise TensorTextError("the text is empty; expected torch's printed form `tensor(...)`", 1, 1)
        super().__init__(
            text,
            partial,
            unclosed="the text ends before the tensor closes; "
            "if a notebook export cut it off, parse it with partial=True",
        )
        self.ndim = 0
        self.root = None
        self.scalar = None
        self.leaf_kind = None
        self.elided = False
        self.layouts = {}
        self.suffixes = {}
        self.parameter = False

    def parse(self):
        """The PrintedTensor of the whole text."""
        self._header()
        cut = False
        try:
            self._data()
            self._suffixes()
        except _Cut:
            cut = True
        if not cut:
            self.expect_end()
        return self._result(cut)

    def _header(self):
        """Reads the optional ``Parameter containing:`` line and ``tensor(``."""
        if self.peek()[1] == "Parameter":
            self.next()
            self.expect("word", "containing", "expected 'Parameter containing:'")
            self.expect(":", ":", "expected 'Parameter containing:'")
            self.parameter = True
        self.expect("word", "tensor", "expected torch's printed form `tensor(...)`")
        self.expect("(", "(", "expected torch's printed form `tensor(...)`")

    def _data(self):
        """Reads a 0-D value or the outermost '[...]', whose leading '[' count is ndim."""
        kind, value, offset = self.peek()
        if kind in ("num", "bool"):
            self._check_value(kind, value, offset)
            self.next()
            # a partial print's last value may have been cut short
            if not (self.partial and self.peek()[0] == "eof"):
                self.scalar = value
            return
        if kind != "[":
            self.next()
            raise self.error(f"expected '[' or a value after 'tensor(', found {value!r}", offset)
        while self.tokens[self.pos + self.ndim][0] == "[":
            self.ndim += 1
        self.next()
        self.root = _Row(offset)
        self._fill(self.root, 0)

    def _fill(self, row, depth):
        """Parses the rest of a '[...]' into `row`, a list at dimension `depth`."""
        if self.peek()[0] == "]":
            self.next()
            row.closed = True
            return
        leaf = depth == self.ndim - 1
        while True:
            kind, value, offset = self.next()
            if kind == "ellipsis":
                if row.ellipsis is not None:
                    raise self.error("a second '...' in one row", offset)
                row.ellipsis = len(row.items)
                self.elided = True
            elif leaf:
                self._check_value(kind, value, offset)
                # a partial print's last value may have been cut short
                if not (self.partial and self.peek()[0] == "eof"):
                    row.items.append(value)
            elif kind == "[":
                child = _Row(offset)
                row.items.append(child)
                self._fill(child, depth + 1)
            else:
                raise self.error(f"expected '[' or '...' (rows nest {self.ndim} deep), found {value!r}", offset)
            kind, value, offset = self.next()
            if kind == "]":
                row.closed = True
                return
            if kind != ",":
                # Where the '[' stands, told from here: the text's own lines are not the file's.
                above = self.position(offset)[0] - self.position(row.offset)[0]
                where = "on this line" if not above else f"{above} line{'s' * (above > 1)} above"
                opened = " ".join(self.text[row.offset : row.offset + 16].split())
                raise self.error(
                    f"unbalanced brackets: expected ',' or ']' to go on with the '[' {where} ({opened!r}…), "
                    f"found {value!r}",
                    offset,
                )

    def _check_value(self, kind, value, offset):
        """Accepts a number or a bool token, but not both kinds in one tensor."""
        if kind not in ("num", "bool"):
            raise self.error(
                f"expected a number, True/False or '...' (rows nest {self.ndim} deep), found {value!r}", offset
            )
        if kind == "num" and (why := read_float(value)[1]):  # torch prints none such
            raise self.error(why, offset)
        if self.leaf_kind is None:
            self.leaf_kind = kind
        elif kind != self.leaf_kind:
            raise self.error(f"a mix of booleans and numbers: {value!r}", offset)

    def _suffixes(self):
        """Reads ``, name=value`` pairs up to the closing ')'."""
        while True:
            kind, value, offset = self.next()
            if kind == ")":
                return
            if kind == "]":
                raise self.error("unbalanced brackets: ']' without a matching '['", offset)
            if kind != ",":
                raise self.error(f"expected ',' or ')' after the data, found {value!r}", offset)
            kind, name, offset = self.next()
            if name not in _SUFFIX_KINDS:
                raise self.error(f"unknown suffix {name!r}; expected one of {', '.join(_SUFFIX_KINDS)}", offset)
            if name in self.suffixes:
                raise self.error(f"suffix {name!r} given twice", offset)
            self.expect("=", "=", f"expected '=' after {name!r}")
            self.suffixes[name] = (self._suffix_value(name), offset)

    def _suffix_value(self, name):
        kind, value, offset = self.next()
        if kind != _SUFFIX_KINDS[name] or (name == "dtype" and not value.startswith("torch.")):
            raise self.error(f"unexpected value {value!r} for {name!r}", offset)
        if name == "size":
            return self.int_sequence(")")
        if name == "requires_grad":
            return value == "True"
        if name == "dtype":
            return value[len("torch.") :]
        return value[1:-1]

    def _result(self, cut):
        tokens, index = self._collect()
        joined = " ".join(tokens)
        kind = self._kind(joined)
        ndim, shape = self._shape(tokens, cut)
        notation = _notation(kind, joined)
        if kind == "bool":
            values = [1.0 if token == "True" else 0.0 for token in tokens]
        else:
            values = [read_float(token)[0] for token in tokens]
        if notation in ("fixed", "sci"):
            units = [_unit(token) for token in tokens]
        else:
            units = [0.0] * len(tokens)
        return PrintedTensor(
            kind=kind,
            ndim=ndim,
            shape=shape,
            index=torch.tensor(index, dtype=torch.int64).reshape(len(tokens), ndim),
            values=torch.tensor(values, dtype=torch.float64),
            unit=torch.tensor(units, dtype=torch.float64),
            notation=notation,
            elided=self.elided,
            partial=cut,
            dtype=self._suffix("dtype"),
            device=self._suffix("device"),
            requires_grad=self.parameter or bool(self._suffix("requires_grad")),
            grad_fn=self._suffix("grad_fn"),
        )

    def _suffix(self, name):
        return self.suffixes.get(name, (None, None))[0]

    def _collect(self):
        """The shown element tokens in print order, and their positions as one flat list."""
        tokens, index = [], []
        if self.scalar is not None:
            tokens.append(self.scalar)
        if self.root is not None:
            self._walk(self.root, 0, (), tokens, index)
        return tokens, index

    def _walk(self, row, depth, prefix, tokens, index):
        """Appends the elements under `row`, checking that rows at one depth agree."""
        count = len(row.items)
        head = count if row.ellipsis is None else row.ellipsis
        tail = count - head
        layout = (head, None if row.ellipsis is None else tail)
        if row.closed:
            expected = self.layouts.setdefault(depth, (layout, prefix))
            if layout != expected[0]:
                raise self._ragged(row, prefix, layout, *expected)
        elif row.ellipsis is not None:
            # a row cut after its '...' ends like the rows before it, else as it began
            known = self.layouts.get(depth, ((head, head), prefix))
            tail = head if known[0][1] is None else known[0][1]
            if count - head > tail:
                raise self._ragged(row, prefix, layout, known[0], known[1])
        positions = list(range(head)) + list(range(-tail, -tail + count - head))
        if depth == self.ndim - 1:
            tokens.extend(row.items)
            for position in positions:
                index.extend(prefix)
                index.append(position)
            return
        for child, position in zip(row.items, positions):
            self._walk(child, depth + 1, prefix + (position,), tokens, index)

    def _ragged(self, row, prefix, layout, expected, expected_prefix):
        def describe(layout):
            head, tail = layout
            if tail is not None:
                return f"{head} + '...' + {tail} entries"
            return "1 entry" if head == 1 else f"{head} entries"

        return self.error(
            f"ragged rows: row {list(prefix)} has {describe(layout)}, "
            f"expected {describe(expected)} like row {list(expected_prefix)}",
            row.offset,
        )

    def _kind(self, joined):
        """'float', 'int' or 'bool': from the tokens, overruled by a dtype suffix."""
        if self.leaf_kind == "bool":
            printed = "bool"
        elif re.search(r"[.en]", joined):
            printed = "float"
        else:
            printed = "int" if joined else None
        if "dtype" not in self.suffixes:
            return printed or "float"
        dtype, offset = self.suffixes["dtype"]
        declared = _dtype_kind(dtype)
        if declared is None:
            raise self.error(f"unsupported dtype torch.{dtype}", offset)
        if printed not in (None, declared) and (printed, declared) != ("int", "float"):
            raise self.error(f"dtype=torch.{dtype} does not fit the printed {printed} values", offset)
        return declared

    def _shape(self, tokens, cut):
        """(ndim, shape); shape is None for elided or cut prints."""
        ndim = self.ndim
        if "size" in self.suffixes:
            size, offset = self.suffixes["size"]
            if tokens or self.ndim != 1 or 0 not in size:
                raise self.error("size=(...) is printed only for an empty tensor `tensor([], ...)`", offset)
            ndim = len(size)
            if not cut:
                return ndim, size
        if cut or self.elided:
            return ndim, None
        return ndim, tuple(self.layouts[depth][0][0] if depth in self.layouts else 0 for depth in range(ndim))


def _without_cut_token(text):
    """The length of `text` less a final token that the cut may have split (a lone '...' stays)."""
    end = len(text)
    while end and text[end - 1] not in _DELIMITERS:
        end -= 1
    return len(text) if text[end:] == "..." else end


def _dtype_kind(dtype):
    if dtype in _FLOAT_DTYPES or dtype.startswith("float8"):
        return "float"
    if dtype in _INT_DTYPES:
        return "int"
    return "bool" if dtype == "bool" else None


def _notation(kind, joined):
    """How torch printed the numbers: 'fixed', 'sci', 'integer', 'int' or 'bool'."""
    if kind != "float":
        return kind
    if re.search(r"e[+-]?\d", joined):
        return "sci"
    if re.search(r"\.\d", joined):
        return "fixed"
    return "integer"


def _unit(token):
    """One unit in the last printed digit: 10**(exponent - digits after the point), or 0."""
    mantissa, _, exponent = token.partition("e")
    digits = len(mantissa.partition(".")[2])
    if not exponent and not digits:
        return 0.0
    return _power_of_ten(int(exponent or 0) - digits)


@cache
def _power_of_ten(exponent):
    return float(f"1e{exponent}")
