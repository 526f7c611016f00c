"""An expression's tree: where a node stands in its source (1-based columns, in characters, though ast counts
UTF-8 bytes, and a node's own text, for messages that point at the place), and what the whole expression
calls."""

import ast
import re
from typing import Any


def line_starts(text: str) -> list[int]:
    # Character offsets where each line begins (ast counts \n, \r\n and \r as line ends).
    return [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]


def column(source: str, lineno: int, char_offset: int) -> int:
    """1-based column in ``source`` of a 0-based character offset on a line of its parsed text."""
    body = source.lstrip()
    starts = line_starts(body)
    return len(source) - len(body) + starts[min(lineno, len(starts)) - 1] + char_offset + 1


def node_column(source: str, node: Any) -> int:  # any node with a position
    # ast gives col_offset in UTF-8 bytes; convert to characters on that line.
    body = source.lstrip()
    line = body[line_starts(body)[node.lineno - 1] :].encode("utf-8")
    return column(source, node.lineno, len(line[: node.col_offset].decode("utf-8", errors="replace")))


def attr_column(source: str, node: ast.Attribute) -> int:
    # The column of the attribute name itself (``x.__class__`` -> the ``_``), when locatable.
    segment = ast.get_source_segment(source.lstrip(), node) or ""
    if node.end_lineno == node.lineno and segment.endswith(node.attr):
        return node_column(source, node) + len(segment) - len(node.attr)
    return node_column(source, node)


def segment(source: str, node: ast.AST) -> str:
    # The node's source text on one line.
    text = ast.get_source_segment(source.lstrip(), node) or ast.unparse(node)
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


def makes_instance(tree: ast.Expression) -> bool:
    """Whether the expression makes a class's instance and calls it, ``C(a)(x)``."""
    return isinstance(tree.body, ast.Call) and isinstance(tree.body.func, ast.Call)


def called_name(tree: ast.Expression) -> str | None:
    """The name an expression calls as a whole: ``f`` of ``f(x)`` and ``C`` of ``C(a)(x)``; else None."""
    node = tree.body
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Call):
        node = node.func
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id
    return None
