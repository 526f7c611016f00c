"""The class at a glance: one page for a batch, ``summary.html`` beside the gradebook.

A heatmap of the submissions (rows) against the checks and properties that any of them lost points on
(columns, most failed first), each cell shaded by the share of that check's points the submission
lost, then the named mistakes and the failed checks with how many students each, largest first.
Self-contained (inline CSS, no script). Reads only the scores of the batch (``batch.Scores``).
"""

import html

from attention_core.report.style import STYLE

MOST_COLUMNS = 60  # checks drawn in the heatmap; the table below lists them all
MOST_ROWS = 400  # submissions drawn in it

PAGE_STYLE = (
    STYLE
    + """
table.heat td{width:14px;height:14px;padding:0;border:1px solid #fff}
table.heat th.c{writing-mode:vertical-rl;transform:rotate(180deg);font:11px monospace;padding:2px;max-height:220px}
table.heat td.name{width:auto;font:12px monospace;padding:0 6px;white-space:nowrap}
"""
)


def class_page(scores, rows):
    """The page for ``scores`` (a batch's Scores) and ``rows`` (class_summary's: kind, what, students)."""
    lost = {}
    for one in scores:
        for grade in one.grades:
            if grade.score < grade.max_score:
                lost[grade.check_id] = lost.get(grade.check_id, 0) + 1
    columns = sorted(lost, key=lambda c: (-lost[c], c))[:MOST_COLUMNS]
    parts = [
        f"<!doctype html><meta charset=utf-8><title>The class at a glance</title><style>{PAGE_STYLE}</style>",
        f"<h1>The class at a glance</h1><p class=meta>{len(scores)} submissions; {len(lost)} checks and "
        f"properties lost points in at least one (the heatmap shows the first {len(columns)}, most failed "
        f"first; darker: more of the check's points lost)</p>",
    ]
    if columns:
        head = "".join(f'<th class=c title="{_e(c)}">{_e(_short(c))}</th>' for c in columns)
        body = []
        for one in scores[:MOST_ROWS]:
            mine = {g.check_id: g for g in one.grades}
            cells = "".join(_cell(mine.get(c), c) for c in columns)
            body.append(f"<tr><td class=name>{_e(one.name)}</td>{cells}</tr>")
        parts.append(f"<h2>Heatmap</h2><table class=heat><tr><th></th>{head}</tr>{''.join(body)}</table>")
    for kind, title in (("mistake", "Named mistakes"), ("property", "Properties"), ("check", "Checks")):
        listed = [(what, n) for k, what, n in rows if k == kind]
        if listed:
            lines = "".join(f"<tr><td class=n>{n} of {len(scores)}</td><td>{_e(what)}</td></tr>" for what, n in listed)
            parts.append(f"<h2>{title}, largest first</h2><table>{lines}</table>")
    return "".join(parts)


def _cell(grade, check_id):
    if grade is None or grade.max_score <= 0:
        return '<td style="background:#eee" title="not graded"></td>'
    share = max(0.0, min(1.0, 1 - grade.score / grade.max_score))
    red, green = int(198 * share + 232 * (1 - share)), int(40 * share + 245 * (1 - share))
    blue = int(40 * share + 233 * (1 - share))
    return f'<td style="background:rgb({red},{green},{blue})" title="{_e(check_id)}: lost {share:.0%}"></td>'


def _short(check_id):
    return check_id if len(check_id) <= 40 else "…" + check_id[-39:]


def _e(text):
    return html.escape(str(text))
