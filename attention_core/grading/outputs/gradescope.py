"""What grading writes for each submission: Gradescope's ``results.json`` (the gradebook: gradebook.py).

Gradescope's autograder format: top-level ``score``, ``execution_time``, ``output`` and
``tests``; each test has ``name``, ``score``, ``max_score``, ``status``, ``output`` and
``visibility``. Gradescope accepts only ``passed`` and ``failed`` as a test's status, so the
harness's own status (timeout, not implemented, …) is written in the test's ``output`` and in
``extra_data``. With drawings, a failed test's output is HTML (``output_format: "html"``): the
same text in a ``<pre>``, then the heatmaps of its failed expectations as inline SVG, within a
size cap (Gradescope does not document which HTML it keeps: the pictures are best effort).
"""

import html
import json
import math

from attention_core.grading.naming.feedback import student_report
from attention_core.harness.text import escape_lines, points

OUTPUT_LIMIT = 8000  # characters of one test's output
PICTURE_LIMIT = 40_000  # characters of inline SVG in one test's output
PICTURES_LIMIT = 400_000  # characters of inline SVG in one results.json
RESULTS_LIMIT = 1_000_000  # bytes of one results.json (its JSON escapes ASCII-only)


def results_json(graded, drawings=None):
    """Gradescope's results dictionary for one graded submission; ``drawings`` (report.figures) adds heatmaps.
    Its JSON stays under RESULTS_LIMIT bytes whatever the submission printed or replied: the pictures go
    first, then every output is cut to an equal share."""
    results = _results(graded, drawings)
    if drawings is not None and len(_dumps(results)) > RESULTS_LIMIT:
        results = _results(graded, None)
    share = OUTPUT_LIMIT
    while len(_dumps(results)) > RESULTS_LIMIT and share > 100:
        share //= 2
        results["output"] = _cut(results["output"], share)
        for test in results["tests"]:
            test["output"] = _cut(test["output"], share)
            test["extra_data"] = {
                k: _cut(v, share) if isinstance(v, str) else v for k, v in test.get("extra_data", {}).items()
            }
    return results


def _cut(text, most):
    return text if len(text) <= most else text[:most] + f"\n… ({len(text) - most} more characters)"


def _results(graded, drawings):
    budget = [PICTURES_LIMIT]  # what is left of it, spent test by test
    return {
        "score": points(graded.score),
        "max_score": points(graded.max_score),
        "execution_time": math.ceil(graded.seconds),
        "output": f"{points(graded.score)} of {points(graded.max_score)} points."
        + (f"\n\n{escape_lines(graded.note)}" if graded.note else ""),
        "output_format": "text",
        "tests": [_test(grade, drawings, budget) for grade in graded.grades],
    }


def _test(grade, drawings=None, budget=None):
    output, output_format = feedback(grade), "text"
    if drawings is not None and not grade.result.passed and budget[0] > 0:
        pictures = drawings.result(grade.result, limit=min(PICTURE_LIMIT, budget[0]), located=False)
        if pictures:
            budget[0] -= len(pictures)
            text = html.escape(output, quote=False)
            output, output_format = f'<pre style="white-space:pre-wrap">{text}</pre>{pictures}', "html"
    return {
        "name": grade.check_id,
        "score": points(grade.score),
        "max_score": points(grade.max_score),
        "status": "passed" if grade.result.passed else "failed",
        "output": output,
        "output_format": output_format,
        "visibility": grade.visibility,
        "extra_data": {
            "status": str(grade.result.status),
            "source": grade.source,
            **({"diagnosis": grade.diagnosis} if grade.diagnosis else {}),
        },
    }


def feedback(grade):
    """What a student reads for one check: status, source, diagnosis, then the staged report as a student
    reads it (the call as their function saw it; no case-file location: see ``feedback.py``)."""
    if grade.result.passed:
        return f"passed ({grade.source})" if grade.source else "passed"
    lines = [f"{grade.result.status}" + (f" — {grade.source}" if grade.source else "")]
    if grade.diagnosis:
        lines.append(grade.diagnosis)
    if getattr(grade, "charged", ""):
        lines.append(grade.charged)
    check = getattr(grade.item, "check", None)
    returns = tuple(getattr(check, "returns", ()) or ())
    lines.append(
        student_report(
            grade.result,
            getattr(grade, "call", ""),
            returns,
            getattr(check, "function", ""),
            unreadable=getattr(grade.item, "error", None) is not None,
        )
    )
    text = "\n\n".join(lines)
    if len(text) > OUTPUT_LIMIT:
        text = text[:OUTPUT_LIMIT] + f"\n… ({len(text) - OUTPUT_LIMIT} more characters)"
    return text


def write_results(graded, folder, *, drawings=None):
    """``folder/results.json`` for one submission (with heatmaps from ``drawings``); returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / "results.json.partial"  # moved into place whole: an interrupted batch leaves no half
    partial.write_text(_dumps(results_json(graded, drawings)), encoding="utf-8")
    partial.replace(folder / "results.json")
    return folder


def _dumps(results):
    """The results as JSON, one test per line (json's C encoder: it writes no indentation)."""
    head = json.dumps({k: v for k, v in results.items() if k != "tests"})
    tests = ",\n".join(json.dumps(test) for test in results["tests"])
    return f'{head[:-1]}, "tests": [\n{tests}\n]}}\n'
