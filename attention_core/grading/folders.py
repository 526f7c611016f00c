"""What a folder given to grade is: one submission, a batch of submissions, or a question for the teacher.

Its files are read as text, never run: each top-level ``.py`` file's definitions and what it imports
from the files beside it (a notebook's code cells, likewise). The one rule, used wherever a folder is
graded (a batch's arguments, a submission's entry file, the Gradescope and platform bundles):

* a package (``__init__.py``), or a folder with one ``.py`` file or one notebook: one submission;
* files that import from one another: one submission (a student's project), whose entry is the file
  that defines or imports the most of the graded names (then the most it defines itself);
* otherwise, one file that defines graded names beside files that define none (notes, helpers it does
  not import): one submission, that file its entry;
* otherwise files that each define graded names: a batch, one submission each (as otter-grader reads
  a folder of students' files); a folder of folders (or zips) alone: a batch of them;
* anything else is ambiguous (a file that defines none of the graded names beside several files that
  do, two candidate entries, no file that defines any): refused before grading, with one line saying
  what to do (``--entry``).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

from attention_core.harness.text import escape

READ_LIMIT = 2 << 20  # bytes of a file read to find what it defines
NOTEBOOK = ".ipynb"


@dataclass(frozen=True)
class Reading:
    """What a folder is: ``kind`` "one" (``entry`` is the file to import), "batch" (``members``: each a
    submission) or "ambiguous" (``why``: one line)."""

    kind: str
    entry: Path | None = None
    members: tuple = ()
    why: str = ""


def read(folder, names, entry=None):
    """The Reading of ``folder`` for the graded ``names``; ``entry``: the file the teacher named (one
    submission, that file its entry)."""
    folder = Path(folder)
    if entry is not None:
        chosen = folder / entry
        if not chosen.is_file() or chosen.is_symlink():
            return Reading("ambiguous", why=f"{_shown(folder)}: --entry {escape(str(entry))}: no such file in it")
        return Reading("one", entry=chosen)
    if (folder / "__init__.py").is_file():
        return Reading("one", entry=folder / "__init__.py")
    listed = sorted(p for p in folder.iterdir() if not p.name.startswith((".", "__")))
    files = [p for p in listed if p.suffix in (".py", NOTEBOOK) and p.is_file() and not p.is_symlink()]
    others = [p for p in listed if p not in files and (p.suffix == ".zip" or p.is_dir()) and not p.is_symlink()]
    if not files:
        if not others:
            return Reading("ambiguous", why=f"{_shown(folder)}: no .py file, notebook, zip or folder to grade in it")
        return Reading("batch", members=tuple(others))
    if len(files) == 1:
        return Reading("one", entry=files[0])
    found = {p: _definitions(p, names) for p in files}
    modules = {p.stem: p for p in files if p.suffix == ".py"}
    linked = any(set(imports) & set(modules) for _, imports in found.values())
    if linked:
        return _project(folder, found, modules, names)
    empty = [p for p, (defined, _) in found.items() if not defined]
    if len(empty) == len(files):
        return Reading("ambiguous", why=_none_defined(folder, len(files), names))
    if len(empty) == len(files) - 1:  # one file holds the answers, the others none: a student's file and notes
        return Reading("one", entry=next(p for p in files if p not in empty))
    if empty:
        return Reading("ambiguous", why=(
            f"{_shown(folder)}: {_shown(empty[0])} defines none of the graded names while other files do, and no "
            f"file imports another: grade the students' files by name (one submission each), or the folder as one "
            f"submission with --entry FILE"))
    return Reading("batch", members=tuple(files + others))


def several(folder, reading):
    """Why a folder that holds several submissions is not one."""
    names = ", ".join(p.name for p in reading.members[:4]) + (", …" if len(reading.members) > 4 else "")
    return (f"{_shown(folder)} holds several submissions ({escape(names)}: each defines the graded names, and none "
            f"imports another): grade each one, or name the folder's entry file")


def _project(folder, found, modules, names):
    """One submission of files that import one another: its entry, the file covering the most graded names."""
    covered = {}
    for path, (defined, imports) in found.items():
        names_in = set(defined)
        for module, imported in imports.items():
            if module in modules and modules[module] != path:
                names_in |= set(found[modules[module]][0]) if imported is None else set(imported) & set(names)
        covered[path] = (len(names_in), len(defined))
    best = max(covered.values())
    if best[0] == 0:
        return Reading("ambiguous", why=_none_defined(folder, len(found), names))
    winners = [p for p, c in covered.items() if c == best]
    if len(winners) > 1:
        return Reading("ambiguous", why=(
            f"{_shown(folder)}: its files import one another (one submission), and {_shown(winners[0])} and "
            f"{_shown(winners[1])} both hold {best[0]} of the graded names: say which is the submission's "
            f"entry (--entry FILE)"))
    return Reading("one", entry=winners[0])


def _none_defined(folder, count, names):
    return (f"{_shown(folder)}: none of its {count} files defines a graded name ({_names(names)}); say which file "
            f"holds the answers (--entry FILE)")


def _definitions(path, names):
    """(the graded ``names`` the file defines at its top level, {sibling module: the names imported from it, or
    None for all}); a file that cannot be parsed is read line by line."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(READ_LIMIT)
    except OSError:
        return (), {}
    text = data.decode("utf-8", "replace")
    if path.suffix == NOTEBOOK:
        text = _notebook_code(text)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        defined = set(re.findall(r"^(?:def|class)\s+([A-Za-z_]\w*)", text, re.M))
        return tuple(sorted(defined & set(names))), {}
    defined, imports = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level in (0, 1):  # a sibling's, maybe
            star = any(a.name == "*" for a in node.names)
            imports[node.module.split(".")[0]] = None if star else tuple(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imports.setdefault(alias.name.split(".")[0], ())
    return tuple(sorted(defined & set(names))), imports


def _notebook_code(text):
    """A notebook's code cells as one text, its lines of shell and magic commands left out."""
    try:
        cells = json.loads(text).get("cells", [])
        sources = ["".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", ""))
                   for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"]
    except (ValueError, AttributeError, TypeError):
        return ""
    lines = [line for s in sources for line in s.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def _shown(path):
    return escape(str(path))


def _names(names):
    names = list(names)
    return ", ".join(names[:6]) + (", …" if len(names) > 6 else "")
