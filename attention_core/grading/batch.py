"""``python -m attention_core grade``: a batch of submissions graded, with a progress bar, written out."""

import sys

from tqdm import tqdm

from attention_core.grading import gradescope
from attention_core.grading.grader import Grader, sandbox_warning, submission_name
from attention_core.report.figures import Drawings
from attention_core.report.html import submission_page


def grade_command(paths, out, *, cases=None, jobs=1, call_timeout=5.0, budget=60.0, gradient_points=1.0, stream=None):
    """Grade ``paths`` into ``out``; print one line per submission. Exit 0 whenever grading completed."""
    stream = stream or sys.stderr
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"no such submission: {', '.join(map(str, missing))}", file=stream)
        return 2
    names = _unique_names(paths)
    with Grader(cases, call_timeout=call_timeout, budget=budget, gradient_points=gradient_points, jobs=jobs) as grader:
        with tqdm(total=len(paths), desc="grading", unit="submission", file=stream,
                  disable=len(paths) < 2) as bar:
            graded = grader.grade_all(paths, progress=lambda _: bar.update())
        for one, name in zip(graded, names):
            one.name = name
        # Written inside the grader's block: torch stays on one thread, the fastest for these small tensors.
        for one in graded:
            drawings = Drawings()  # each failed check drawn once, for results.json and report.html
            folder = gradescope.write_results(one, out, drawings=drawings)
            (folder / "report.html").write_text(submission_page(one, drawings=drawings), encoding="utf-8")
    gradescope.write_gradebook(graded, out / "gradebook.csv")
    width = max(len(n) for n in names)
    for one in graded:
        print(f"{one.name:<{width}}  {gradescope.number(one.score):>6} / {gradescope.number(one.max_score)}",
              file=stream)
    warnings = {sandbox_warning(one.protections) for one in graded} - {""}
    for warning in sorted(warnings):
        print(warning, file=stream)
    print(f"wrote {out / '<name>' / 'results.json'}, {out / '<name>' / 'report.html'} and {out / 'gradebook.csv'}",
          file=stream)
    return 0


def _unique_names(paths):
    """Each submission's name; a name that repeats gets ``-2``, ``-3``, … in order."""
    names, seen = [], {}
    for path in paths:
        name = submission_name(path)
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return names
