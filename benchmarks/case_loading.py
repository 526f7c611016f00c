"""Load + validate time of many case files, in-process (interpreter and torch start-up excluded).

Usage: python benchmarks/case_loading.py [--copies N] [--file cases/001_self_attention.yaml] [--runs R]

Writes N copies of one case file to a temporary folder and times ``load_folder`` over them
(reading, YAML, the model's validation, printed text and expressions; nothing runs), for N/4,
N/2 and N copies, so the time's growth shows whether it is linear. Two kinds of copies: the
file as it is (a print that repeats across files is parsed once), and copies whose every
number is changed (no two files print the same text), the worst case. Prints the median of R runs,
wall time and this process's CPU time (the steadier figure on a machine that others share).
Goal: under 1.5 s for 1,000 copies of document 001's file.
"""

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attention_core.harness.reading.cases import clear_caches, load_folder  # noqa: E402

_DIGIT = re.compile(r"(?<=\d\.\d\d)\d(?=\d*[,\]\s])")  # a printed number's third decimal


def write_copies(folder, text, count, *, vary):
    for i in range(count):
        copy = _DIGIT.sub(lambda m, i=i: str((int(m.group()) + i) % 10), text) if vary else text
        (folder / f"copy_{i:05d}.yaml").write_text(copy, encoding="utf-8")


def time_loading(folder):
    """(wall, CPU) seconds of one load of ``folder``; the CPU time is this process's alone."""
    clear_caches()  # each run starts cold
    start, cpu = time.perf_counter(), time.process_time()
    loaded = load_folder(folder)
    elapsed = time.perf_counter() - start, time.process_time() - cpu
    errors = [e for f in loaded for e in f.errors]
    if errors:
        raise SystemExit(f"a copy did not load: {errors[0]}")
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=1000)
    parser.add_argument("--file", type=Path, default=ROOT / "cases" / "001_self_attention.yaml")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    text = args.file.read_text(encoding="utf-8")
    print(f"{args.file.name}: {len(text)} characters; median of {args.runs} runs")
    for vary in (False, True):
        for count in (args.copies // 4, args.copies // 2, args.copies):
            with tempfile.TemporaryDirectory() as folder:
                write_copies(Path(folder), text, count, vary=vary)
                load_folder(folder)  # warm the file cache and the imports
                times = [time_loading(folder) for _ in range(args.runs)]
            wall, cpu = (statistics.median(t[i] for t in times) for i in (0, 1))
            kind = "every number changed" if vary else "identical copies"
            print(
                f"{count:6d} copies, {kind:21s}: {wall:.3f} s wall, {cpu:.3f} s CPU ({cpu / count * 1e3:.2f} ms a file)"
            )


if __name__ == "__main__":
    main()
