"""What a folder given to grade is: one submission, a batch of submissions, or a question for the teacher.

Its files are read as text, never run: each top-level ``.py`` file's definitions and what it imports
from the files beside it (a notebook's code cells, likewise). The one rule, used wherever a folder is
graded. A folder a teacher gives ``grade`` may hold several students' work:

* a package (``__init__.py``), or a folder with one ``.py`` file or one notebook (and no zip or folder
  of code beside it): one submission;
* files that import from one another: one submission (a student's project), whose entry is the file
  that defines or imports the most of the graded names (then the most it defines itself);
* one file that defines graded names beside files that define none (notes, a helper it does not
  import): one submission, that file its entry (the teacher is told which files it leaves aside);
* files that each define graded names, none importing another, or files beside zips or folders of code:
  a batch, one submission each (as otter-grader reads a folder of students' files); a file among them
  that defines none is graded too (its row says so); folders that hold no code are left aside;
* anything else is ambiguous (no file that defines a graded name; two candidate entries of a project):
  refused before grading, with one line saying what to do (``--entry``).

A folder known to be one student's (a member of a batch, a Gradescope upload, an unpacked zip) is never
a batch: its entry is the file of the rule above, else the one that defines the most graded names (a
``.py`` before a notebook of the same names, then the hand-out's file name); a folder that holds only
one folder is that folder.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

from attention_core.grading.intake import regular
from attention_core.harness.text import escape

READ_LIMIT = 2 << 20  # bytes of a file read to find what it defines
NOTEBOOK = ".ipynb"
CODE = (".py", NOTEBOOK)
HANDOUT = "attention_student.py"  # the built-in hand-out's file name (a tie of one student's files goes to it)


# A tool's own folders, which a shell's ``submissions/*`` names beside the students' work: what each is (no one's
# submission, left aside where given on the command line)
TOOLS_OWN = {
    "__pycache__": "Python's bytecode cache",
    "__MACOSX": "the files' metadata a Mac adds to a zip it makes",
}


def aside(name):
    """Whether a folder's listing leaves ``name`` aside: a hidden name (``.git``, ``.DS_Store``) or a tool's own
    (``__pycache__``, ``__MACOSX``)."""
    return name.startswith((".", "__"))


@dataclass(frozen=True)
class Reading:
    """What a folder is: ``kind`` "one" (``entry`` is the file to import), "batch" (``members``: each a
    submission) or "ambiguous" (``why``: one line); ``note``: what the teacher is told of a "one" that leaves
    files aside."""

    kind: str
    entry: Path | None = None
    members: tuple = ()
    why: str = ""
    note: str = ""


def read(folder, names, entry=None, *, one=False):
    """The Reading of ``folder`` for the graded ``names``; ``entry``: the file the teacher named (one
    submission, that file its entry); ``one``: the folder is known to be one student's (never a batch)."""
    folder = Path(folder)
    if entry is not None:
        chosen = folder / entry
        if not chosen.is_file() or chosen.is_symlink():
            return Reading("ambiguous", why=f"{_shown(folder)}: --entry {escape(str(entry))}: no such file in it")
        return Reading("one", entry=chosen)
    if (folder / "__init__.py").is_file():
        return Reading("one", entry=folder / "__init__.py")
    listed = sorted(p for p in folder.iterdir() if not aside(p.name) and not p.is_symlink())
    files = [p for p in listed if p.suffix in CODE and p.is_file()]
    others = [p for p in listed if (p.suffix == ".zip" and p.is_file()) or (p.is_dir() and _holds_code(p))]
    if one:
        return _one(folder, files, others, names)
    if not files:
        if not others:
            return Reading("ambiguous", why=f"{_shown(folder)}: no .py file, notebook, zip or folder to grade in it")
        return Reading("batch", members=tuple(others))
    if len(files) == 1 and not others:
        return Reading("one", entry=files[0])
    found = {p: _definitions(p, names) for p in files}
    modules = {p.stem: p for p in files if p.suffix == ".py"}
    linked = any(set(imports) & set(modules) for _, imports in found.values())
    if others:  # students' files beside students' zips or folders
        if linked:
            return Reading(
                "ambiguous",
                why=(
                    f"{_shown(folder)}: files that import one another beside zips or folders of code: grade the "
                    f"submissions by name, or the folder as one submission with --entry FILE"
                ),
            )
        return Reading("batch", members=tuple(files + others))
    if linked:
        return _project(folder, found, modules, names)
    empty = [p for p, (defined, _) in found.items() if not defined]
    if len(empty) == len(files):
        return Reading("ambiguous", why=_none_defined(folder, len(files), names))
    if len(empty) == len(files) - 1:  # one file holds the answers, the others none: a student's file and notes
        chosen = next(p for p in files if p not in empty)
        return Reading(
            "one",
            entry=chosen,
            note=(
                f"{_shown(folder)} is graded as one submission, {escape(chosen.name)}: "
                f"{escape(', '.join(p.name for p in empty))} define{'s' * (len(empty) == 1)} none of the graded names "
                f"and {'is' if len(empty) == 1 else 'are'} not imported (grade the files by name if each is a "
                f"student's)"
            ),
        )
    return Reading("batch", members=tuple(files))


def _one(folder, files, others, names):
    """The entry of a folder known to be one submission."""
    if not files:
        inner = [p for p in others if p.is_dir()]
        if len(inner) == 1 and len(others) == 1:  # a folder that holds its code in one folder (hw3-main/)
            return read(inner[0], names, one=True)
        return Reading(
            "ambiguous",
            why="the submission holds no .py file or notebook beside each other: put the "
            "file that defines the graded names at its top",
        )
    if len(files) == 1:
        return Reading("one", entry=files[0])
    found = {p: _definitions(p, names) for p in files}
    modules = {p.stem: p for p in files if p.suffix == ".py"}
    if any(set(imports) & set(modules) for _, imports in found.values()):
        return _project(folder, found, modules, names)
    counts = {p: len(defined) for p, (defined, _) in found.items()}
    best = max(counts.values())
    winners = [p for p, n in counts.items() if n == best and n > 0]
    if len(winners) > 1:  # a notebook and its exported script; a script and its copy: the .py, the hand-out's
        scripts = [p for p in winners if p.suffix == ".py"]
        handout = [p for p in scripts if p.name == HANDOUT]
        winners = handout or (scripts if len(scripts) == 1 else winners)
    if len(winners) == 1:
        return Reading("one", entry=winners[0])
    if not winners:
        return Reading("ambiguous", why=_none_defined(folder, len(files), names))
    return Reading(
        "ambiguous",
        why=(
            f"the submission holds several files that define as many of the graded names ("
            f"{escape(', '.join(p.name for p in winners[:4]))}): keep one, or name it {HANDOUT}"
        ),
    )


def _holds_code(folder, depth=3):
    """Whether a folder holds a .py file, a notebook or a zip, at most ``depth`` folders down."""
    try:
        for entry in folder.iterdir():
            if entry.is_symlink():
                continue
            if entry.is_file() and entry.suffix in (*CODE, ".zip"):
                return True
            if entry.is_dir() and depth > 1 and _holds_code(entry, depth - 1):
                return True
    except OSError:
        return False
    return False


def several(folder, reading):
    """Why a folder that holds several submissions is not one."""
    names = ", ".join(p.name for p in reading.members[:4]) + (", …" if len(reading.members) > 4 else "")
    return (
        f"{_shown(folder)} holds several submissions ({escape(names)}: each defines the graded names, and none "
        f"imports another): grade each one, or name the folder's entry file"
    )


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
        return Reading(
            "ambiguous",
            why=(
                f"{_shown(folder)}: its files import one another (one submission), and {_shown(winners[0])} and "
                f"{_shown(winners[1])} both hold {best[0]} of the graded names: say which is the submission's "
                f"entry (--entry FILE)"
            ),
        )
    return Reading("one", entry=winners[0])


def _none_defined(folder, count, names):
    return (
        f"{_shown(folder)}: none of its {count} files defines a graded name ({_names(names)}); say which file "
        f"holds the answers (--entry FILE)"
    )


def _definitions(path, names):
    """(the graded ``names`` the file defines at its top level, {sibling module: the names imported from it, or
    None for all}); a file that cannot be parsed is read line by line."""
    try:
        with regular.open_regular(path) as handle:
            data = handle.read(READ_LIMIT)
    except (OSError, regular.NotRegular):
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
        sources = [
            "".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", ""))
            for c in cells
            if isinstance(c, dict) and c.get("cell_type") == "code"
        ]
    except (ValueError, AttributeError, TypeError):
        return ""
    lines = [line for s in sources for line in s.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def _shown(path):
    return escape(str(path))


def _names(names):
    names = list(names)
    return ", ".join(names[:6]) + (", …" if len(names) > 6 else "")
