"""Wall time of ``pytest -m case`` over that of ``python -c "import torch"``, the floor any run pays.

Usage: python benchmarks/case_suite.py [--runs N] [extra pytest arguments]
Prints each command's median wall time and the ratio (goal: at most 2.5 on a 2-core machine).
Runs alternate between the two commands so that machine noise hits both alike.
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def wall(command):
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args, pytest_args = parser.parse_known_args()
    torch_cmd = [sys.executable, "-c", "import torch"]
    case_cmd = [sys.executable, "-m", "pytest", "-m", "case", "-q", "-p", "no:cacheprovider", *pytest_args]
    wall(torch_cmd), wall(case_cmd)  # warm the file cache
    torch_times, case_times = [], []
    for _ in range(args.runs):
        torch_times.append(wall(torch_cmd))
        case_times.append(wall(case_cmd))
    t, c = statistics.median(torch_times), statistics.median(case_times)
    print(f"import torch   : {t:.3f} s (median of {args.runs})")
    print(f"pytest -m case : {c:.3f} s (median of {args.runs})")
    print(f"ratio          : {c / t:.2f}x (goal <= 2.5x)")


if __name__ == "__main__":
    main()
