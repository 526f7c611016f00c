"""The corpus inventory: one row per tensor or number a document printed, and what became of it.

``cases/inventory/<case file>.csv`` has the columns ``cell, variable, status, checks, reason``.
``status`` is one of:

* ``encoded``: ``checks`` lists ``case/check:target`` references, separated by ``;``;
* ``input``: the printed value is a case's input (it cannot be reproduced, so what the document
  shows is what the case computes from); ``checks`` names it as ``case:input``;
* ``not encodable``: ``reason`` says why.

The inventory and the case files must agree: every reference names an expectation (or a
printed input) that exists, and every expectation of a document's case file is named by some row.
"""

import csv
from dataclasses import dataclass
from pathlib import Path

from attention_core.harness.reading.model import PrintedInput

STATUSES = ("encoded", "input", "not encodable")
COLUMNS = ["cell", "variable", "status", "checks", "reason"]


@dataclass(frozen=True)
class Row:
    """One printed tensor or number of a document."""

    document: str  # the case file's stem
    line: int
    cell: str
    variable: str
    status: str
    refs: tuple[str, ...]
    reason: str


def inventory_folder(cases_folder):
    return Path(cases_folder) / "inventory"


def load(cases_folder):
    """Every inventory row, by document, in file order; a malformed file raises ValueError with its line."""
    rows = {}
    for path in sorted(inventory_folder(cases_folder).glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames != COLUMNS:
                raise ValueError(f"{path}:1: the columns must be {', '.join(COLUMNS)}")
            rows[path.stem] = [
                Row(
                    path.stem,
                    reader.line_num,
                    r["cell"].strip(),
                    r["variable"].strip(),
                    r["status"].strip(),
                    tuple(ref.strip() for ref in (r["checks"] or "").split(";") if ref.strip()),
                    (r["reason"] or "").strip(),
                )
                for r in reader
            ]
    return rows


def problems(rows, case_files):
    """Disagreements between the inventory and the case files, each as ``file:line: message``."""
    files = {f.name: f for f in case_files}
    found = []
    for document, document_rows in rows.items():
        where = f"inventory/{document}.csv"
        case_file = files.get(document)
        if case_file is None:
            found.append(f"{where}:1: no case file {document}.yaml for this inventory")
            continue
        targets = {
            f"{case.id}/{check.id}:{e.target}"
            for case in case_file.cases
            for check in case.checks
            for e in check.expectations
        }
        inputs = {
            f"{case.id}:{name}"
            for case in case_file.cases
            for name, item in case.inputs.items()
            if isinstance(item, PrintedInput)
        }
        cited = set()
        for row in document_rows:
            found += [f"{where}:{row.line}: {m}" for m in _row_problems(row, targets, inputs)]
            cited.update(row.refs)
        found += [f"cases/{document}.yaml: expectation {t} is in no inventory row" for t in sorted(targets - cited)]
    return found


def _row_problems(row, targets, inputs):
    if row.status not in STATUSES:
        return [f"status {row.status!r} must be one of {', '.join(STATUSES)}"]
    if not row.cell or not row.variable:
        return ["cell and variable are required"]
    if row.status == "not encodable":
        return [] if row.reason and not row.refs else ["a row that is not encodable gives a reason and no checks"]
    if not row.refs:
        return [f"{row.variable}: marked {row.status} but names no {'check' if row.status == 'encoded' else 'input'}"]
    if row.status == "input":
        return [f"{row.variable}: {ref} names no printed input (case:input)" for ref in row.refs if ref not in inputs]
    return [
        f"{row.variable}: {ref} names no check expectation (case/check:target)"
        for ref in row.refs
        if ref not in targets
    ]


def corpus_table(rows, case_files):
    """The README's corpus table, in Markdown."""
    titles = {f.name: f.document.title if f.document else "" for f in case_files}
    lines = ["| document | printed values | encoded | inputs | not encodable |", "|---|---:|---:|---:|---:|"]
    reasons = []
    for document, document_rows in rows.items():
        count = {status: sum(r.status == status for r in document_rows) for status in STATUSES}
        lines.append(
            f"| {document} ({titles.get(document, '')}) | {len(document_rows)} | {count['encoded']} "
            f"| {count['input']} | {count['not encodable']} |"
        )
        reasons += [
            f"- {document} {r.cell} `{r.variable}`: {r.reason}" for r in document_rows if r.status == "not encodable"
        ]
    if reasons:
        lines += ["", "Not encodable, and why:", "", *reasons]
    return "\n".join(lines)
