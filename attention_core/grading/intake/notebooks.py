"""A student's Jupyter notebook as a Python module: the trusted side's converter, run before the sandbox.

``write_module`` turns an ``.ipynb`` into a ``.py`` file that the grader imports like any other
submission. The module runs the notebook's code cells in order in its own globals, as Jupyter's
"run all" with errors allowed: a cell that raises is reported on stderr and the next cell runs.

Cells are numbered among the CODE cells only, from 1 (markdown and raw cells are not counted), and
each cell is compiled with the file name ``"code cell N"``, so a traceback, then and when the grader
later calls a function the cell defined, names the cell and the line in it. Stored outputs are
never read. IPython magics and shell lines (``%matplotlib``, ``!pip``, ``x = !ls``) are not
Python: each becomes ``pass`` at its indentation, which keeps the cell's line numbers, and is
noted on stderr. Such a line inside a bracket or a multi-line string is left as it is, except after
a line the tokenizer cannot read (a cell that is not Python there), where every one counts.

Reading is bounded: a file is opened without following a symbolic link or blocking on a FIFO, and
its size is checked before anything is parsed. The cells' text reaches the generated module only
as ``repr`` literals.
"""

import io
import json
import keyword
import os
import re
import tokenize
import warnings
from pathlib import Path

from attention_core.grading.intake import regular

MAX_BYTES = 16 << 20  # a notebook file larger than this is refused
MAX_CELLS = 2000  # more code cells than this is refused
MAX_ALL_CELLS = 10 * MAX_CELLS  # more cells of any kind than this is refused (before any is parsed)
MAX_CELL_CHARS = 1 << 20  # one cell's source longer than this is refused

# A line magic, a shell line, or an assignment from one (``files = !ls``, ``t = %timeit f()``).
_MAGIC = re.compile(r"[ \t]*(?:[%!]|[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*[%!])")
# Cell magics whose body is Python that IPython runs in the notebook's globals: the body runs here too.
_PYTHON_BODY = {"time", "capture"}
_NOTE_CHARS = 60
_ENDS = (tokenize.NEWLINE, tokenize.NL)

# The generated module. Its one helper takes itself out of the globals before the first cell runs,
# and binds the builtins it uses before a cell can shadow them.
_RUNNER = '''\
"""A notebook's code cells, run in order: code cell N is the Nth code cell, compiled as the file "code cell N"."""


def _notebook_run(cells, notes, namespace):
    import __future__
    import builtins
    import sys

    namespace.pop("_notebook_run", None)
    futures = 0
    for feature in __future__.all_feature_names:
        futures |= getattr(__future__, feature).compiler_flag

    def report(number, line, error):
        try:
            message = " ".join(builtins.str(error).splitlines())
        except Exception:
            message = "(the message could not be printed)"
        if builtins.len(message) > 500:
            message = message[:497] + "..."
        kind = builtins.type(error).__name__
        builtins.print("notebook: code cell %d, line %s: %s" % (number, "?" if line is None else line,
                       kind + ": " + message if message else kind), file=sys.stderr)

    for note in notes:
        builtins.print("notebook: " + note, file=sys.stderr)
    flags = 0  # a cell's ``from __future__ import`` holds for the cells after it, as in IPython
    for number, source in builtins.enumerate(cells, 1):
        if source is None:
            continue
        filename = "code cell %d" % number
        try:
            code = builtins.compile(source, filename, "exec", flags, True)
        except (SyntaxError, ValueError) as error:  # ValueError: a null byte, a lone surrogate
            report(number, builtins.getattr(error, "lineno", None), error)
            continue
        flags |= code.co_flags & futures
        try:
            builtins.exec(code, namespace)
        except (Exception, SystemExit) as error:
            line, frame = None, error.__traceback__
            while frame is not None:
                if frame.tb_frame.f_code.co_filename == filename:
                    line = frame.tb_lineno
                frame = frame.tb_next
            report(number, line, error)
'''


class NotebookError(ValueError):
    """A notebook that cannot be read: its message names the file and the problem (one line)."""


def is_notebook(path):
    """Whether ``path`` names a Jupyter notebook: its suffix is ``.ipynb``, in any case."""
    return Path(path).suffix.lower() == ".ipynb"


def module_source(path):
    """The Python module text that runs the notebook's code cells in order, as "run all" with errors allowed.

    Raises:
        NotebookError: the file is not a regular file, too large, not UTF-8, not a notebook, or has
            more code cells or a longer cell than the limits allow.
    """
    shown = _shown(path)
    cells, notes = [], []
    for number, source in enumerate(_code_cells(_read_text(path, shown), shown), 1):
        run, cell_notes = strip_magics(source, number)
        cells.append(run)
        notes += cell_notes
    return (
        f"# Generated from the notebook {Path(path).name!a} by attention_core.grading.intake.notebooks.\n"
        f"{_RUNNER}\n\n"
        "_notebook_run(\n"
        "    [\n" + "".join(f"        {source!r},\n" for source in cells) + "    ],\n"
        "    [\n" + "".join(f"        {note!r},\n" for note in notes) + "    ],\n"
        "    globals(),\n"
        ")\n"
    )


def write_module(path, folder):
    """Write ``module_source(path)`` to ``folder/<stem>.py`` and return that path.

    The stem is the notebook's, made a Python identifier: each character that may not be in one
    becomes ``_``; ``notebook_`` goes before one that would start with a digit (or be empty), and
    ``_`` after a keyword.
    """
    stem = re.sub(r"\W", "_", Path(path).stem, flags=re.ASCII)
    if not stem or stem[0].isdigit():
        stem = "notebook_" + stem
    if keyword.iskeyword(stem):
        stem += "_"
    target = Path(folder) / f"{stem}.py"
    target.write_text(module_source(path), encoding="utf-8")
    return target


def strip_magics(source, number):
    """(the cell's source with its IPython magics and shell lines made ``pass``, the notes saying so);
    the source is None where the whole cell is a cell magic whose body is not Python (``%%bash``)."""
    lines = io.StringIO(source.replace("\r\n", "\n").replace("\r", "\n")).readlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        magic = lines[first].strip()
        if (magic[2:].split() or [""])[0] not in _PYTHON_BODY:
            note = (
                f"code cell {number}, line {first + 1}: skipped the whole cell, an IPython cell magic `{_short(magic)}`"
            )
            return None, [note]
    if not any(_MAGIC.match(line) for line in lines):  # most cells: no need to tokenize
        return "".join(lines), []
    magics = _magic_lines(lines)
    notes = [_note(number, i + 1, lines[i]) for i in sorted(magics) if not _continued_magic(i, lines, magics)]
    for i in magics:
        lines[i] = _as_pass(lines[i])
    return "".join(lines), notes


def _magic_lines(lines):
    """The indexes of the lines that are IPython magics or shell lines, with the lines a trailing
    backslash continues them onto. A line that looks like one is one only where a statement may start:
    not inside a bracket or a multi-line string, nor after a backslash. The tokenizer says which, as it
    reads the cell line by line, each magic already blanked; after a line it cannot read, each such
    line counts."""
    magics, depth, last, rows = set(), 0, None, iter(enumerate(lines))

    def readline():
        i, line = next(rows, (None, ""))
        if i is None:
            return ""
        # A statement may start on the first line, or right after a line that ended one at depth 0; a line
        # read with no token since the one before it ended is inside a multi-line string.
        starts = i == 0 if last is None else last.type in _ENDS and depth == 0 and last.end[0] == i
        if _continued_magic(i, lines, magics) or (starts and _MAGIC.match(line)):
            magics.add(i)
            return "\n"
        return line

    try:
        for last in tokenize.generate_tokens(readline):
            if last.type == tokenize.OP and last.string in "([{":
                depth += 1
            elif last.type == tokenize.OP and last.string in ")]}":
                depth = max(depth - 1, 0)
    except (tokenize.TokenError, SyntaxError):
        pass
    for i, line in rows:  # after the error: each looks-like-a-magic line is one
        if _MAGIC.match(line) or _continued_magic(i, lines, magics):
            magics.add(i)
    return magics


def _continued_magic(i, lines, magics):
    """Whether line ``i`` continues a magic line before it that ends with a backslash."""
    return i - 1 in magics and lines[i - 1].rstrip("\n").endswith("\\")


def _as_pass(line):
    """``pass`` at ``line``'s indentation, with its line ending: the cell keeps its line numbers."""
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    return indent + "pass" + ("\n" if line.endswith("\n") else "")


def _note(number, line, text):
    return f"code cell {number}, line {line}: skipped the IPython magic/shell line `{_short(text)}`"


def _short(text):
    text = " ".join(text.split())
    return text if len(text) <= _NOTE_CHARS else text[: _NOTE_CHARS - 3] + "..."


def _read_text(path, shown):
    """The file's text, read under the size bound without following a symbolic link or blocking."""
    try:
        with regular.open_regular(path, shown) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_BYTES:
                raise NotebookError(f"{shown}: is {size} bytes, over the limit of {MAX_BYTES}")
            data = handle.read(MAX_BYTES + 1)
    except regular.NotRegular as error:
        raise NotebookError(f"{shown}: {error.problem}") from None
    if len(data) > MAX_BYTES:  # it grew after the check
        raise NotebookError(f"{shown}: is over the limit of {MAX_BYTES} bytes")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark, as some editors write, is dropped
    except UnicodeDecodeError as error:
        raise NotebookError(f"{shown}: is not UTF-8 text (byte {error.start} is not)") from None


def _code_cells(text, shown):
    """The code cells' sources, in order, under the limits on their number and length. The raw JSON is read
    and its cells counted first; the stored outputs and attachments are dropped before nbformat reads (and
    validates) what is left: outputs are never run, and 40,000 of them cost the parser gigabytes."""
    import nbformat  # noqa: PLC0415 (only a notebook needs it)

    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise NotebookError(f"{shown}: {_parse_problem(error)}") from None
    stored = _raw_cells(raw)
    if len(stored) > MAX_ALL_CELLS:
        raise NotebookError(f"{shown}: has {len(stored)} cells, over the limit of {MAX_ALL_CELLS}")
    for cell in stored:
        if isinstance(cell, dict):
            cell.pop("attachments", None)
            if "outputs" in cell:
                cell["outputs"] = []
    try:
        # nbformat logs a schema violation and goes on; the structure read below is checked here. Its warnings
        # (cells without ids) are about the student's file, not for the teacher's terminal.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            notebook = nbformat.reads(json.dumps(raw), as_version=4, capture_validation_error={})
    except Exception as error:  # noqa: BLE001 (whatever the parser raises, the file is at fault)
        raise NotebookError(f"{shown}: {_parse_problem(error)}") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list) or not all(isinstance(cell, dict) for cell in cells):
        raise NotebookError(f"{shown}: is not a Jupyter notebook (no list of cells)")
    sources = [cell.get("source") for cell in cells if cell.get("cell_type") == "code"]
    if len(sources) > MAX_CELLS:
        raise NotebookError(f"{shown}: has {len(sources)} code cells, over the limit of {MAX_CELLS}")
    for number, source in enumerate(sources, 1):
        if not isinstance(source, str):
            raise NotebookError(f"{shown}: code cell {number} has no source text")
        if len(source) > MAX_CELL_CHARS:
            raise NotebookError(
                f"{shown}: code cell {number} is {len(source)} characters long, over the limit of {MAX_CELL_CHARS}"
            )
    return sources


def _raw_cells(raw):
    """Every cell dict of a notebook's raw JSON: format 4's ``cells``, or format 3's worksheets' cells."""
    if not isinstance(raw, dict):
        return []
    cells = raw.get("cells")
    if isinstance(cells, list):
        return cells
    sheets = raw.get("worksheets")
    if isinstance(sheets, list):
        return [c for s in sheets if isinstance(s, dict) and isinstance(s.get("cells"), list) for c in s["cells"]]
    return []


def _parse_problem(error):
    if isinstance(error, json.JSONDecodeError):
        return f"is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
    if isinstance(error, RecursionError):
        return "is not a Jupyter notebook (its JSON nests too deep)"
    cause = error.__cause__
    if isinstance(cause, json.JSONDecodeError):
        return f"is not valid JSON: {cause.msg} (line {cause.lineno}, column {cause.colno})"
    message = " ".join(str(error).split())
    if len(message) > 200:
        message = message[:197] + "..."
    return f"is not a Jupyter notebook ({type(error).__name__}: {message})"


def _shown(path):
    """``path`` as a message shows it: as written where printable, else escaped, so it stays one line."""
    text = os.fspath(path)
    return text if text.isprintable() else ascii(text)
