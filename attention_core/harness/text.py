"""Quoting file content in a message: short, and with control characters made visible.

A case file is untrusted text. A value quoted in full can be megabytes (a YAML alias nest),
and a raw escape sequence can clear a terminal or fake a table; every message that quotes a
file's content passes it through :func:`shorten` (values) or :func:`escape` (text).
"""

import decimal
import math
import reprlib
import sys

_REPR = reprlib.Repr()  # bounded: never walks more of a nested value than it shows
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 6, 6, 6
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 200, 200, 60


def is_terminal(stream):
    """Whether ``stream`` is a terminal: output that is not one gets no carriage return, no escape code."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def escape(text):
    """``text`` with every non-printable character (ESC, newline, tab, bidi marks...) shown as an escape."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(char):
    code = ord(char)
    if char in "\n\t\r":
        return repr(char)[1:-1]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shorten(value, limit=80):
    """A value to quote in a message: ``repr`` for non-text, escaped, cut to ``limit`` characters."""
    shown = value if isinstance(value, str) else _REPR.repr(value)
    shown = escape(shown)
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return shown


def quote(value, limit=80):
    """:func:`shorten`, in quotes: ``'text'``; non-text as its (short) repr."""
    return f"'{shorten(value, limit)}'" if isinstance(value, str) else shorten(value, limit)


def escape_lines(text):
    """:func:`escape` line by line: a multi-line report keeps its newlines, nothing else unprintable."""
    return "\n".join(escape(line) for line in str(text).split("\n"))


def first_given(*values):
    """The first of ``values`` that is not None (a setting's most specific source), else None."""
    return next((v for v in values if v is not None), None)


def points(x):
    """A score as results.json, the gradebook and a report show it: an int when whole, else 6 decimals."""
    return int(x) if float(x).is_integer() else round(float(x), 6)


def read_float(text, value=None, infinity="inf"):
    """(value, why) of the number written ``text`` (None where unknown: ``value``'s own form), ``value``
    being how it was read where it was. Float64's largest magnitude rounded to the digits written
    (torch prints ``finfo(float64).min``, a common mask fill, as ``-1.7977e+308``) reads as that
    magnitude, not as an infinity; ``why`` says what else does not read as written: beyond float64's
    range (an infinity, written ``infinity`` where meant) or below its smallest magnitude (0). It is
    None where the number fits."""
    value = float(text) if value is None else value
    text = repr(value) if text is None else text
    if math.isinf(value) and "inf" not in text.lower():
        written = decimal.Decimal(text)
        if abs(written) - _LARGEST <= decimal.Decimal(1).scaleb(written.as_tuple().exponent) / 2:
            return math.copysign(sys.float_info.max, value), None
        return value, (
            f"the number {text} is beyond float64's range (its largest is 1.7976931348623157e+308); "
            f"an infinity is written {infinity}"
        )
    if value == 0 and any(c in "123456789" for c in text.lower().split("e")[0]):
        return value, f"the number {text} is below float64's smallest magnitude (about 4.9e-324): it would read as 0"
    return value, None


_LARGEST = decimal.Decimal(sys.float_info.max)  # exactly
