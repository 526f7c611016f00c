"""The HTML report: one self-contained page (inline CSS and SVG; no script, no network, no font files).

A summary per document and per spec function, then each check that did not pass, with its
source (document, cell), its staged mismatch report, the diagnosis when grading, and the
heatmaps of its failed expectations; then the passing checks, listed in a collapsed block.
Checks are added one at a time and a failure is rendered as it comes, so the tensors of a run
are not kept.
"""

import html
from dataclasses import dataclass

from attention_core.harness.checking.results import Status, render
from attention_core.harness.text import points
from attention_core.report.figures import MAX_CHECKS, Drawings
from attention_core.report.style import STYLE


@dataclass
class Entry:
    """One check's result as the report lists it."""

    result: object  # harness.checking.results.Result
    document: str  # the case file's name
    title: str  # the document's title
    function: str  # the spec function a graded call calls, else what kind of check it is
    source: str = ""  # the document's cell (or step) the check comes from
    diagnosis: str = ""
    score: float | None = None  # when grading
    max_score: float | None = None


def entry(item, result, *, diagnosis="", score=None, max_score=None):
    """The :class:`Entry` of a runner's check item (a CheckItem or a LoadError) and its result."""
    document = item.file.document
    if item.error is not None:
        function, source = "(case file)", ""
    else:
        function = item.check.function or "(document arithmetic)"
        source = getattr(item.check.source, "cell", None) or getattr(item.check.source, "step", None) or ""
    return Entry(
        result, item.file.name, document.title if document else "", function, str(source), diagnosis, score, max_score
    )


class Page:
    """A report built one check at a time; :meth:`html` gives the page."""

    def __init__(self, title, *, subtitle="", notes=(), drawings=None):
        self.title, self.subtitle, self.notes = title, subtitle, list(notes)
        self.drawings = drawings or Drawings()
        self.documents, self.functions = {}, {}
        self.failed, self.passed = [], []
        self.graded = False

    def add(self, one):
        """Count ``one`` (an :class:`Entry`) in the summaries and render it."""
        passed = one.result.passed
        column = "passed" if passed else "pending" if one.result.status is Status.PENDING else "failed"
        self.graded |= one.max_score is not None
        for table, key, label in ((self.documents, one.document, one.title), (self.functions, one.function, "")):
            row = table.setdefault(
                key, {"label": label, "passed": 0, "failed": 0, "pending": 0, "score": 0.0, "max": 0.0}
            )
            row[column] += 1
            row["score"] += one.score or 0.0
            row["max"] += one.max_score or 0.0
        where = f" — {one.title}, {one.source}" if one.source else f" — {one.title}" if one.title else ""
        if passed:
            self.passed.append(f"<li>{_e(one.result.check_id)}{_e(where)}</li>")
        else:
            self.failed.append(self._failed(one))

    def _failed(self, one):
        result = one.result
        pictures = self.drawings.result(result) if result.failures else ""
        scored = f" · {points(one.score)} of {points(one.max_score)} points" if one.max_score is not None else ""
        source = ", ".join(p for p in (one.title, one.source) if p)
        return (
            f'<section class="check" id="{_e(_anchor(result.check_id))}" data-status="{_e(result.status)}">'
            f'<h3><span class="status">{_e(result.status)}</span>{_e(result.check_id)}</h3>'
            f'<p class="meta">{_e(source or one.document)} · <code>{_e(result.location)}</code>'
            f" · {_e(one.function)}{scored}</p>"
            + (f'<div class="diagnosis">{_e(one.diagnosis)}</div>' if one.diagnosis else "")
            + f"<pre>{_e(render(result))}</pre>{pictures}</section>"
        )

    def html(self):
        counts = {"passed": len(self.passed), "failed": len(self.failed)}
        parts = [
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<link rel="icon" href="data:,"><title>{_e(self.title)}</title><style>{STYLE}</style></head><body>',
            f"<h1>{_e(self.title)}</h1>",
            f'<p class="meta">{_e(self.subtitle)}</p>' if self.subtitle else "",
            f'<p class="meta">{_checks(counts["passed"])} passed, {counts["failed"]} did not'
            f"{_pending(self.documents)}.</p>",
        ]
        parts += [f'<p class="meta">{_e(note)}</p>' for note in self.notes]
        parts.append("<h2>By document</h2>" + self._table(self.documents, ("document", "title")))
        parts.append("<h2>By spec function</h2>" + self._table(self.functions, ("function",)))
        parts.append(f"<h2>Checks that did not pass ({counts['failed']})</h2>")
        if self.drawings.left_out:
            parts.append(
                f'<p class="meta">Heatmaps are drawn for the first {MAX_CHECKS} checks with wrong values; '
                f"{self.drawings.left_out} more are shown as text.</p>"
            )
        parts += self.failed or ["<p>None.</p>"]
        parts.append(
            f"<h2>Checks that passed ({counts['passed']})</h2>"
            f'<details class="passed"><summary>{_checks(counts["passed"])} passed</summary>'
            f'<ul class="passed">{"".join(self.passed)}</ul></details>'
        )
        parts.append("</body></html>\n")
        return "".join(parts)

    def _table(self, rows, heads):
        points_head = ['<th class="n">points</th>'] if self.graded else []
        columns = (
            ("passed", "failed", "pending") if any(row["pending"] for row in rows.values()) else ("passed", "failed")
        )
        head = "".join(f"<th>{h}</th>" for h in heads) + "".join(f'<th class="n">{c}</th>' for c in columns)
        body = []
        for key, row in rows.items():
            cells = [f"<td>{_e(key)}</td>"] + ([f"<td>{_e(row['label'])}</td>"] if len(heads) > 1 else [])
            cells += [f'<td class="n">{row[c]}</td>' for c in columns]
            if self.graded:
                cells.append(f'<td class="n">{points(row["score"])} / {points(row["max"])}</td>')
            body.append(f"<tr{' class=bad' if row['failed'] else ''}>{''.join(cells)}</tr>")
        return f"<table><tr>{head}{''.join(points_head)}</tr>{''.join(body)}</table>"


def _pending(rows):
    """`` (N of them pending: ...)``: drafts do not fail, they wait; nothing where no check is pending."""
    count = sum(row["pending"] for row in rows.values())
    return f" ({count} of them pending: drafts, not yet checked)" if count else ""


def submission_page(graded, *, drawings=None):
    """The report of one graded submission (a grader's SubmissionGrade)."""
    page = Page(
        f"Report: {graded.name}",
        subtitle=f"{points(graded.score)} of {points(graded.max_score)} points",
        notes=[graded.note] if graded.note else [],
        drawings=drawings,
    )
    for grade in graded.grades:
        page.add(
            entry(grade.item, grade.result, diagnosis=grade.diagnosis, score=grade.score, max_score=grade.max_score)
        )
    return page.html()


def _e(text):
    return html.escape(str(text))


def _checks(n):
    return f"{n} check" if n == 1 else f"{n} checks"


def _anchor(check_id):
    return "check-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in check_id)
