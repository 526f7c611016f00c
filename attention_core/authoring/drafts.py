"""Draft case files: a notebook's prints as pending cases (``import``), and a new file's skeleton (``new``).

A draft is a case file that loads: one case per cell that printed, the cell's source kept as
a comment above it, one pending check per print whose expectation is the print, pasted and
marked ``pending``. Inputs and each check's computation are left for the author; ``check``
reports the drafts as pending (and exits 1) until they are written. Drafts name the committed
JSON Schema on their first line, so an editor validates them as they are typed.
"""

import json
import os
import re
from pathlib import Path

from attention_core.authoring import notebook

PENDING_CHECK = "write the computation that printed this: `call:` (a spec function) or `expr:`"

_HOW = """\
# A draft: {what}.
# For each case: write the inputs the cell computes from; replace each check's 'pending' with
# `call: f(...)` (a spec function, graded) or `expr: ...` (the document's own arithmetic); then
# remove 'pending: true' from each expectation once the check computes it.
# `python -m attention_core lint {name}` lists what is left; `python -m attention_core` runs it.
"""


def schema_line(out, schema):
    """The first line of a case file at ``out``: the schema at ``schema``, relative to the file's folder."""
    relative = Path(os.path.relpath(Path(schema).resolve(), Path(out).resolve().parent)).as_posix()
    return f"# yaml-language-server: $schema={relative if relative.startswith('.') else './' + relative}\n"


def import_notebook(path, out, *, schema):
    """Write the draft of the notebook at ``path`` to ``out``; return (cases, prints) written."""
    cells = notebook.read(path)
    text = schema_line(out, schema) + draft(
        cells, title=_title(path), what=f"imported from {Path(path).name}", name=str(out)
    )
    Path(out).write_text(text, encoding="utf-8")
    return len(cells), sum(len(c.prints) for c in cells)


def draft(cells, *, title, what, name):
    """The draft case file's text (without its schema line) for ``cells``."""
    parts = [
        _HOW.format(what=what, name=name),
        "document:\n",
        f"  title: {_quoted(title)}\n",
        "  # origin: where the notebook is published\n\ncases:\n",
    ]
    if not cells:
        parts.append("  []  # the notebook printed no tensor\n")
    used = set()
    for cell in cells:
        parts.append(_case(cell, _unique(_slug(cell.label) or "cell", used)))
    return "".join(parts)


def _case(cell, case_id):
    lines = [f"  # {cell.label}:\n"] + [f"  #     {line}".rstrip() + "\n" for line in cell.source.split("\n")]
    lines += [f"  - id: {case_id}\n", f"    source: {{cell: {_quoted(cell.label)}}}\n"]
    named = {m for p in cell.prints for m in _FLOATING_DTYPE.findall(p.text)}
    if len(named) == 1:  # torch names a floating dtype only where it is not the default float32
        lines.append(f"    dtype: {named.pop()}  # the dtype the cell's prints name\n")
    lines += ["    inputs: {}  # what the cell computes from\n", "    checks:\n"]
    names, used = _check_names(cell), set()
    for print_, name in zip(cell.prints, names):
        lines += [
            f"      - id: {_unique(name, used)}\n",
            f"        pending: {_quoted(PENDING_CHECK)}\n",
            "        expect:\n",
            "          out:\n",
            "            pending: true\n",
        ]
        if print_.text.startswith("torch.Size"):
            lines.append(f"            shape: {_quoted(print_.text)}\n")
            continue
        if print_.partial:
            lines.append("            partial: true  # the export cut this print off\n")
        lines.append("            printed: |\n")
        lines += [f"              {line}".rstrip() + "\n" for line in print_.text.rstrip("\n").split("\n")]
    return "".join(lines) + "\n"


_FLOATING_DTYPE = re.compile(r"dtype=torch\.(float64|float16|bfloat16)\b")


def _check_names(cell):
    """A name per print: its label, or the expression the cell ends with (``queries``), or ``print_N``."""
    last = cell.source.strip().split("\n")[-1].split("#")[0].strip() if cell.source.strip() else ""
    parts = [p.strip() for p in last.split(",")] if last and "=" not in last and "(" not in last else []
    names = []
    for i, print_ in enumerate(cell.prints):
        guess = parts[i] if len(parts) == len(cell.prints) else (last if len(cell.prints) == 1 else "")
        names.append(_slug(print_.label) or _slug(guess) or f"print_{i + 1}")
    return names


def _slug(text):
    slug = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()[:40].strip("_")
    return slug if slug and slug[0].isalnum() else ""


def _unique(name, used):
    candidate, n = name, 1
    while candidate in used:
        n += 1
        candidate = f"{name}-{n}"
    used.add(candidate)
    return candidate


def _quoted(text):
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def _title(path):
    """The notebook's first heading, else its file name."""
    path = Path(path)
    if path.suffix == ".ipynb":
        import nbformat  # noqa: PLC0415

        sources = [c.source for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "markdown"]
    else:
        sources = [path.read_text(encoding="utf-8").split("\nIn [", 1)[0]]
    for line in "\n".join(sources).split("\n"):
        if line.startswith("#") and line.lstrip("#").strip():
            return line.lstrip("#").strip()
    return path.stem


SKELETON = """\
# {name}: worked examples of one document, as checked cases (see docs/case-format.md).
document:
  title: "The document's title"
  # origin: where the document is published

# defaults: {{dtype: float32}}   # for every case that does not say

cases:
  - id: first_example
    source: {{step: "the section's heading", cell: "In [1]"}}
    dtype: float32  # the dtype the document computed in
    # seed: 42      # for seeded draws: {{randn: [4, 8, 2]}}, {{rand: ...}}, {{linear: [2, 3]}}, ...
    inputs:
      x: [[1.0, 0.0], [0.0, 1.0]]  # literal numbers; or torch's printed text after `|`
    checks:
      - id: {check}
        source: {{cell: "In [2]"}}
        # `call:` one function or class of the assignment (graded), or `expr:` the document's own arithmetic
        pending: "write `call: {call}` and paste what the document printed below"
        expect:
          out:   # paste torch's print here after `|`, or leave empty for `record` to fill in
"""


def skeleton(path, *, schema, assignment=None):
    """A new case file's commented skeleton, for ``path``; its example call is of ``assignment``'s first
    graded name (the built-in spec's ``softmax(x)`` by default)."""
    check, call = "softmax_rows", "softmax(x)"
    if assignment is not None and not assignment.builtin and assignment.graded:
        first = next(iter(assignment.graded.values()))
        required = [p.name for p in first.call_params if p.required]
        call = f"{first.name}({', '.join(p.name for p in first.params if p.required)})" if first.is_class else ""
        call += f"{'' if first.is_class else first.name}({', '.join(required)})"
        check = "first_check"
    return schema_line(path, schema) + SKELETON.format(name=Path(path).stem, check=check, call=call)
