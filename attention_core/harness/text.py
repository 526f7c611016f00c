"""Text that quotes a case file or an implementation, made safe to print: short and without control characters."""

import reprlib

_SHORT = reprlib.Repr()  # a YAML alias nest must not print in full
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother = 2, 4, 4, 60, 60
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7f) if chr(c) not in "\n\t"}
_CONTROL.update({c: f"\\x{c:02x}" for c in range(0x80, 0xa0)})


def escape(text):
    """``text`` with control characters (ANSI escapes among them) shown as ``\\xNN``; newlines and tabs kept."""
    return str(text).translate(_CONTROL)


def shorten(value, limit=80):
    """A value as quoted in a message: its repr, cut to about ``limit`` characters, escaped."""
    shown = _SHORT.repr(value)
    if len(shown) > limit:
        shown = shown[: limit - 3] + "..."
    return escape(shown)
