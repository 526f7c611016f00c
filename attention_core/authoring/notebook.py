"""Reading a notebook's printed tensors: a Jupyter ``.ipynb`` or a notebook exported as text.

Nothing is executed. A cell is its label (``In [n]``), its source and its printed output; a
print is every ``tensor(...)`` and ``torch.Size(...)`` of the output, with the label a
``print("label", t)`` put before it, several per cell, elided ones (``...``) as they are, and
one that the export cut off marked ``partial``. In the text export (the form of the project's
documents) a cell starts at a line ``In [n]:``; its source runs to the blank line before its
first print, and what follows up to the next cell is its output.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

CELL = re.compile(r"^In \[([^\]\n]*)\]:[ \t]*$", re.MULTILINE)
_START = re.compile(r"(?<![\w.`])(?:tensor\(|torch\.Size\()")
_PARAMETER = "Parameter containing:"
_OUT = re.compile(r"\n?\s*Out\[\s*\d*\s*\]:\s*$")


@dataclass(frozen=True)
class Print:
    """One printed tensor or size: its text as shown, the label before it, and whether it was cut off."""

    text: str
    label: str = ""
    partial: bool = False


@dataclass
class Cell:
    """A code cell that printed: ``In [n]``, its source, and its prints in order."""

    label: str
    source: str
    prints: list = field(default_factory=list)


def read(path):
    """The cells of the notebook at ``path`` that printed a tensor or a size."""
    path = Path(path)
    if path.suffix == ".ipynb":
        return read_ipynb(path)
    return read_text_export(path.read_text(encoding="utf-8"))


def read_ipynb(path):
    """A Jupyter notebook's code cells, through nbformat; the outputs' text is searched for prints."""
    import nbformat  # noqa: PLC0415 (only an .ipynb needs it)

    notebook = nbformat.read(str(path), as_version=4)
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        text = "".join(_output_text(output) for output in cell.get("outputs", []))
        prints = find_prints(text)
        if prints:
            count = cell.get("execution_count")
            cells.append(Cell(f"In [{count if count is not None else ' '}]", cell.source, prints))
    return cells


def _output_text(output):
    if output.get("output_type") == "stream":
        return output.get("text", "")
    text = output.get("data", {}).get("text/plain", "")
    return (text if isinstance(text, str) else "".join(text)) + "\n"


def read_text_export(text):
    """The cells of a notebook exported as text: ``In [n]:`` lines, each cell's source, then its output."""
    starts = list(CELL.finditer(text))
    cells = []
    for i, start in enumerate(starts):
        body = text[start.end() + 1 : starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        first = _START.search(body)
        if first is None:
            continue
        line_start = body.rfind("\n", 0, first.start()) + 1
        previous_start = body.rfind("\n", 0, max(line_start - 1, 0)) + 1
        # print("label\n", t): the label has a line of its own; so has a Parameter's heading
        if line_start and (
            body[line_start : first.start()] == " " or body[previous_start:line_start].strip() == _PARAMETER
        ):
            line_start = previous_start
        prints = find_prints(body[line_start:])
        if prints:
            source = _OUT.sub("", body[:line_start].rstrip())  # a displayed value's "Out[n]:" is output
            cells.append(Cell(f"In [{start.group(1)}]", source.strip("\n"), prints))
    return cells


def find_prints(output):
    """Every printed tensor and size of ``output``, in order, with its label."""
    prints, end = [], 0
    for match in _START.finditer(output):
        if match.start() < end:
            continue  # inside the previous print
        line_start = max(output.rfind("\n", 0, match.start()) + 1, end)
        label = output[line_start : match.start()]
        text_end, complete = _extent(output, match.start())
        text = output[match.start() : text_end]
        if label == " " or not label:  # a label on the line before, or "Parameter containing:"
            previous_start = output.rfind("\n", 0, max(line_start - 1, 0)) + 1
            previous = output[previous_start:line_start].strip() if previous_start >= end and line_start else ""
            if previous == _PARAMETER:
                text = f"{_PARAMETER}\n{text}"
            label = previous if label == " " else ""
        end = text_end
        prints.append(Print(_dedent(text), label.strip(" \t(,").rstrip(":").strip(), not complete))
    return prints


def _extent(text, start):
    """(end, complete) of the print starting at ``start``: its brackets balanced, or where the export cut it.

    torch indents every continuation line of a print and separates blocks with blank lines, each
    followed by an indented ``[``: a line that starts otherwise is past a cut.
    """
    depth, i = 0, start
    while i < len(text):
        char = text[i]
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
            if depth == 0:
                return i + 1, True
        elif char == "\n":
            rest = text[i + 1 :]
            after = rest.lstrip(" \t\n") if not rest[:1].strip() else rest
            indented = bool(re.match(r"[ \t]+\S", rest)) and not rest.split("\n", 1)[0].strip() == ""
            if not (indented or (after.startswith("[") and rest[:1] in "\n \t" and rest.strip())):
                return i, False
        i += 1
    return len(text.rstrip("\n")), False


def _dedent(text):
    """The continuation lines of a print as ``print(t)`` lays them out (a tuple's print indents them by one)."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[0].startswith("tensor("):
        widths = [len(line) - len(line.lstrip(" ")) for line in lines[1:] if line.strip()]
        extra = min(widths, default=8) - 8  # torch indents continuation lines by len("tensor([")
        if extra > 0:
            lines = [lines[0]] + [line[extra:] for line in lines[1:]]
    return "\n".join(line.rstrip() if n < len(lines) - 1 else line for n, line in enumerate(lines))
