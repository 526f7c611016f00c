"""A teacher's own mistakes: ``mistakes/<slug>.py`` in an assignment's folder, each a copy of ``reference.py`` with
one change, its module docstring the sentence a student reads and, on a line of its own, ``Fix: ...``.

They are named as the shipped library's mistakes are (``mutants.py``): a failed check whose results agree with
one (and fail the check), or that raises as it raises, names it. ``adequacy`` says which of them the cases
catch, and what is wrong with a file that cannot be used. ``new --assignment DIR --mistake SLUG`` writes one to
edit (``authoring/mistakes.py``).
"""

from __future__ import annotations

import ast
import types
from pathlib import Path

from attention_core.authoring.mistakes import FOLDER, SLUG
from attention_core.grading.naming.mutants import Mutant
from attention_core.harness.reading import assignment as assignments
from attention_core.harness.text import escape, shorten

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def load(chosen):
    """(the teacher's mistakes of ``chosen`` as Mutants, the problems of the files that cannot be used: one line
    each, ``file:line: ...``)."""
    folder = Path(chosen.folder) / FOLDER if chosen.folder is not None else None
    if folder is None or not folder.is_dir() or chosen.reference is None:
        return [], []
    reference = _definitions(Path(chosen.reference.__file__).read_text(encoding="utf-8"))
    found, problems = [], []
    for path in sorted(folder.glob("*.py")):
        try:
            found += _mistake(path, chosen, reference)
        except MistakeError as err:
            problems.append(f"{escape(str(path))}:{err.line}: {err}")
    return found, problems


class MistakeError(ValueError):
    def __init__(self, message, line=1):
        super().__init__(message)
        self.line = line


def _mistake(path, chosen, reference):
    slug = path.stem
    if not SLUG.match(slug):
        raise MistakeError(f"{shorten(slug)!r}: a mistake's name is letters, digits, '_' and '-'")
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except SyntaxError as err:
        raise MistakeError(f"not Python: {err.msg}", err.lineno or 1) from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise MistakeError(f"cannot be read: {err}") from None
    mistake, fix = _words(ast.get_docstring(tree) or "")
    if mistake.startswith("<") or fix.startswith("<"):
        raise MistakeError("its docstring is still the template's: write the mistake and its fix")
    if not mistake or not fix:
        raise MistakeError("its module docstring must hold the mistake as a student reads it, then a line 'Fix: ...'")
    mine = _definitions(source)
    changed = [name for name in chosen.graded if name in reference and mine.get(name) != reference[name]]
    missing = [name for name in chosen.graded if name in reference and name not in mine]
    if missing:
        raise MistakeError(f"it leaves out {', '.join(missing)}: a mistake is a copy of reference.py with one change")
    if not changed:
        raise MistakeError("it changes none of the graded names: it is the reference itself")
    module = types.ModuleType(f"_own_mistake_{slug}")
    module.__dict__.update(
        {k: v for k, v in vars(chosen.reference).items() if k not in ("__name__", "__spec__", "__loader__")}
    )
    module.__file__ = str(path)
    tree.body = [node for node in tree.body if isinstance(node, DEFINITIONS)]
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)  # noqa: S102 (the teacher's own code)
    except Exception as err:  # noqa: BLE001
        raise MistakeError(f"its definitions do not run: {type(err).__name__}: {shorten(str(err), 200)}") from None
    functions = assignments.callables(module, chosen.graded)
    mine_only = {name: functions[name] for name in changed if name in functions}
    words = (mistake, fix)
    return [
        Mutant(
            f"{name}:own:{slug}",
            mine_only,
            mistake,
            fix,
            "values",
            parts={n: words for n in mine_only} if len(mine_only) > 1 else {},
        )
        for name in changed[:1]
    ]


def _words(doc):
    """(the mistake, the fix) of a docstring: its text before the line that starts ``Fix:``, and that line on."""
    lines = doc.strip().splitlines()
    at = next((i for i, line in enumerate(lines) if line.strip().lower().startswith("fix:")), None)
    if at is None:
        return " ".join(lines).strip().rstrip("."), ""
    mistake = " ".join(line.strip() for line in lines[:at]).strip().rstrip(".")
    fix = " ".join(line.strip() for line in lines[at:]).strip()[len("fix:") :].strip()
    return mistake, fix


def _definitions(source):
    """name -> the dump of each top-level function and class of ``source`` (its docstrings left out)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    return {node.name: ast.dump(node, include_attributes=False) for node in tree.body if isinstance(node, DEFINITIONS)}
