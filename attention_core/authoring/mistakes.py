"""A teacher's own mistake to write: ``mistakes/<slug>.py``, a copy of the reference to change in one place, under
a docstring for the sentence a student reads and its fix (``new --assignment DIR --mistake SLUG``). Grading reads
them (``grading/naming/own_mistakes.py``)."""

import ast
import re
from pathlib import Path

from attention_core.harness.text import shorten

FOLDER = "mistakes"
SLUG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")

TEMPLATE = '''"""{what}

Fix: {fix}
"""
'''


def scaffold(chosen, slug):
    """Write ``mistakes/<slug>.py`` of the Assignment ``chosen``: its reference's text under a docstring to fill;
    its path. Raises ValueError where the name is not one or the file exists."""
    if not SLUG.match(slug):
        raise ValueError(f"{shorten(slug)!r}: a mistake's name is letters, digits, '_' and '-'")
    folder = Path(chosen.folder) / FOLDER
    path = folder / f"{slug}.py"
    if path.exists():
        raise ValueError(f"{path} exists: choose another name, or edit that file")
    folder.mkdir(exist_ok=True)
    source = Path(chosen.reference.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        source = "".join(source.splitlines(keepends=True)[first.end_lineno :]).lstrip("\n")  # the mistake's instead
    path.write_text(
        TEMPLATE.format(
            what="<the mistake, as a student reads it: what the code does wrong>",
            fix="<how to put it right, one sentence>",
        )
        + "\n"
        + source,
        encoding="utf-8",
    )
    return path
