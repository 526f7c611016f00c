"""What the HTML report adds to grading: CPU milliseconds per submission, for the shipped mutants.

Usage: python benchmarks/report.py [--rounds N]
Grades every shipped mutant once (in one batch, gradient checks on), then times writing each
submission's feedback both ways: results.json as text, and results.json with heatmaps plus
report.html (what ``grade`` writes), in this process's CPU time (steadier than the wall on a
shared machine). Prints the medians over the rounds of the difference per submission, and the
worst submission's. The first round is a warm-up (imports, first calls).
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from attention_core.grading.judging.grader import Grader
from attention_core.grading.naming import mutants
from attention_core.grading.outputs import gradescope
from attention_core.report.figures import Drawings
from attention_core.report.html import submission_page


def text_only(one):
    json.dumps(gradescope.results_json(one), indent=1)


def with_report(one):
    drawings = Drawings()
    json.dumps(gradescope.results_json(one, drawings), indent=1)
    submission_page(one, drawings=drawings)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        paths = []
        for mutant in mutants.MUTANTS:
            path = Path(scratch) / f"mutant_{mutant.name}.py"
            path.write_text(mutants.submission_source(mutant), encoding="utf-8")
            paths.append(path)
        with Grader() as grader:  # one torch thread inside, as ``grade`` writes its files
            graded = [grader.grade(p) for p in paths]
            added = {one.name: [] for one in graded}
            for round_ in range(args.rounds + 1):
                for one in graded:
                    seconds = []
                    for write in (text_only, with_report):
                        start = time.process_time()
                        write(one)
                        seconds.append(time.process_time() - start)
                    if round_:
                        added[one.name].append(1000 * (seconds[1] - seconds[0]))
    per = {name: statistics.median(ms) for name, ms in added.items()}
    worst = max(per, key=per.get)
    print(f"{len(graded)} mutants, {args.rounds} rounds (medians)")
    print(f"report added per submission: {statistics.mean(per.values()):.1f} ms on average")
    print(f"worst submission           : {per[worst]:.1f} ms ({worst})")


if __name__ == "__main__":
    main()
