"""The gradebook: ``gradebook.csv``, one row per submission and one column per check, grown run by run.

Imports no torch: the batch command writes it from the graded submissions' Scores.
"""

import csv
import math

from attention_core.grading.outputs import cells
from attention_core.harness.text import points

POSSIBLE = "Points Possible"  # the row under the header, as Canvas's and Gradescope's exports have it
NOTES = "notes"  # the last column, where a row has one (ids that only look like another's)


def write_gradebook(graded_list, path, keys=None, notes=None):
    """Columns ``submission,score,max_score`` then one per check (that check's score), and ``notes`` where a row
    has one; the first row under the header is ``Points Possible``: each check's own points (where a failed check
    stands for others, its row's cells move none of them: what a passing submission earns, column by column).

    A row's key is the submission's id, or ``keys[id]`` (a platform's student id, with ``--roster``). A
    gradebook already at ``path`` grows: a submission graded now replaces its own row, and every other
    row stays as it was (a late student graded into the same folder drops nobody). Written to a new file
    beside it, then moved into place, so an interrupted write leaves the old gradebook whole. Returns the
    maximums its rows hold (more than one: the assignment changed between gradings)."""
    keys, notes = keys or {}, notes or {}
    rows, checks, possible = _existing_rows(path)
    own: dict = {}  # check -> its own points, as the submissions graded now give them
    for graded in graded_list:
        checks += [g.check_id for g in graded.grades if g.check_id not in checks]
        for g in graded.grades:
            own[g.check_id] = max(own.get(g.check_id, 0.0), g.possible)
        scores = {g.check_id: points(g.score) for g in graded.grades}
        row = {"score": points(graded.score), "max_score": points(graded.max_score), **scores}
        rows[keys.get(graded.name, graded.name)] = {**row, NOTES: notes.get(graded.name, "")}
    possible.update(own)  # (a charge moves points between one submission's checks: a column's are the check's own)
    maximums = {str(row.get("max_score", "")) for row in rows.values()}
    most = max((float(m) for m in maximums if m), default=0.0)
    noted = any(row.get(NOTES) for row in rows.values())
    table = [
        ["submission", "score", "max_score", *checks, *[NOTES] * noted],
        [
            POSSIBLE,
            points(most),
            points(most),
            *(points(possible[c]) if c in possible else "" for c in checks),
            *[""] * noted,
        ],
    ]
    table += [
        [
            name,
            row.get("score", ""),
            row.get("max_score", ""),
            *(row.get(c, "") for c in checks),
            *[row.get(NOTES, "")] * noted,
        ]
        for name, row in rows.items()
    ]
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", newline="", encoding="utf-8") as handle:  # (cells.py: no cell starts a formula)
        cells.write_rows(handle, table)
    partial.replace(path)
    return maximums


def _existing_rows(path):
    """(submission -> its row by column, the check columns in order, check -> its points possible) of the
    gradebook at ``path``; empty when there is none, or when it is not a gradebook of this format (then it is
    replaced)."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            table = cells.read_rows(handle)
    except (OSError, UnicodeDecodeError, csv.Error):
        return {}, [], {}
    if not table or table[0][:3] != ["submission", "score", "max_score"]:
        return {}, [], {}
    header = table[0]
    checks = [c for c in header[3:] if c != NOTES]
    rows = {row[0]: dict(zip(header[1:], row[1:])) for row in table[1:] if row and row[0] != POSSIBLE}
    possible = next((dict(zip(header[1:], row[1:])) for row in table[1:] if row and row[0] == POSSIBLE), {})
    return rows, checks, {c: float(possible[c]) for c in checks if _number(possible.get(c))}


def _number(text):
    try:
        return math.isfinite(float(text))
    except (TypeError, ValueError):
        return False
