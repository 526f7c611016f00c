"""Grading throughput: a batch of 25 submissions against a batch of 2, and against one process per submission.

Usage: python benchmarks/grading.py [--jobs N] [--runs N] [--no-loop] [--scale N] [--memory]
Prints the marginal rate (23 submissions over the difference of the two batches' walls, so the
start-up both pay is excluded; goal: at least 8 submissions/s), with property checks on and off,
measured side by side (their ratio: goal at least 0.9), the 25-batch's whole wall, and the ratio of
a fresh-interpreter-per-submission loop's wall to the 25-batch's. The submissions are the library's
first 18 mutants, the reference, the correct styles of tests/implementations.py, the untouched
template and one that fails at import. Gradient checks are on.

``--scale N`` grades N submissions (the 25, copied round) as one course batch instead, once, and prints its
wall (goal for 300 on 2 cores: under 60 s), the size of --out, the largest resident memory of any one
process of the batch (the grader processes, their worker servers and submissions), and the peak of the
grader processes' memory together (flat in N: run it with two N to compare).

``--memory`` grades the 25, the attack corpus (tests/attacks.py: hostile submissions and intake attacks) as one
batch with ``--jobs 1``, ``2`` and ``4``, each inside a throwaway mount and PID namespace (``unshare``), and prints
the peak PSS of the batch's trusted processes together (the command, its grader processes and their worker
servers; shared pages such as torch's counted once) per grading slot (goal: at most 400 MB).
"""

import argparse
import inspect
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attention_core import reference
from attention_core.grading.naming import mutants
from attention_core.grading.platforms.template import template

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import trusted_memory  # noqa: E402 (tests/trusted_memory.py)


def submissions(folder):
    """25 submission files in ``folder``."""
    source = inspect.getsource(reference)
    # The library's first 18 mutants: the batch stays the same 25 as the library grows.
    files = {f"mutant_{m.name}": mutants.submission_source(m) for m in mutants.MUTANTS[:18]}
    files.update(reference=source, template=template(), import_error="raise ImportError('no')\n")
    styles = (
        (ROOT / "tests" / "implementations.py")
        .read_text(encoding="utf-8")
        .replace(
            "from attention_core import reference\n",
            f"import types as _types\nreference = _types.ModuleType('reference')\nexec({source!r}, reference.__dict__)\n",
        )
    )
    for style in ("LOOPS", "FLOAT64", "EINSUM", "TORCH"):
        files[style.lower()] = styles + f"\nglobals().update({style})\n"
    paths = []
    for name, text in files.items():
        path = folder / f"{name}.py"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return paths


def wall(paths, out, jobs, extra=(), memory=None):
    """The batch's wall; with ``memory`` (a list), the peak of its grader processes' resident memory together
    (sampled every 0.2 s; not their worker servers', not the submissions') is appended to it."""
    start = time.perf_counter()
    # --regrade: every run grades every submission (an unchanged one would otherwise be skipped by its record)
    batch = subprocess.Popen(
        _grade(paths, out, jobs, "--regrade", *extra),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    peak = 0
    while batch.poll() is None:
        if memory is not None:
            peak = max(peak, trusted_memory.graders_rss_kib(batch.pid) * 1024)
        time.sleep(0.2)
    if batch.returncode:
        raise subprocess.CalledProcessError(batch.returncode, batch.args)
    if memory is not None:
        memory.append(peak)
    return time.perf_counter() - start


def _grade(paths, out, jobs, *extra):
    """The grade command for ``paths`` into ``out`` with ``jobs`` grader processes."""
    return [sys.executable, "-m", "attention_core", "grade", *paths, "--out", str(out), "--jobs", str(jobs), *extra]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-loop", action="store_true", help="skip the one-process-per-submission loop")
    parser.add_argument("--scale", type=int, default=0, metavar="N", help="grade N submissions as one batch, once")
    parser.add_argument("--memory", action="store_true", help="the trusted memory per slot under the attack corpus")
    args = parser.parse_args()
    if args.memory:
        return memory_per_slot(args.runs)
    if args.scale:
        return scale(args.scale, args.jobs)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        paths = submissions(scratch)
        assert len(paths) == 25, len(paths)
        walls = {"on": ([], []), "off": ([], [])}
        off = ("--property-points", "0")
        for _ in range(args.runs):  # alternate, so that machine noise hits all alike
            for mode, extra in (("on", ()), ("off", off)):
                walls[mode][0].append(wall(paths, scratch / f"out25{mode}", args.jobs, extra))
                walls[mode][1].append(wall(paths[:2], scratch / f"out2{mode}", args.jobs, extra))
        loop = None if args.no_loop else sum(wall([p], scratch / "one", 1) for p in paths)
    rates = {}
    for mode, (walls25, walls2) in walls.items():
        w25, w2 = statistics.median(walls25), statistics.median(walls2)
        rates[mode] = [23 / (a - b) for a, b in zip(walls25, walls2)]
        print(
            f"properties {mode:3s}: 25 submissions {w25:.2f} s, 2 submissions {w2:.2f} s (medians of {args.runs}, "
            f"--jobs {args.jobs})"
        )
        print(
            f"  marginal rate  : {23 / (w25 - w2):.1f} submissions/s (goal >= 8); per run: "
            f"{', '.join(f'{r:.1f}' for r in rates[mode])}"
        )
    ratios = [a / b for a, b in zip(rates["on"], rates["off"])]
    print(
        f"rate with properties / without: {statistics.median(ratios):.2f} (median of the runs' ratios; goal >= 0.9;"
        f" per run: {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    w25 = statistics.median(walls["on"][0])
    if loop is not None:
        print(f"one process per submission: {loop:.2f} s for 25, {loop / w25:.1f}x the batch's wall")


def scale(count, jobs):
    import resource  # noqa: PLC0415
    import shutil  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        (scratch / "base").mkdir()
        base = submissions(scratch / "base")
        (scratch / "course").mkdir()
        paths = []
        for i in range(count):
            path = scratch / "course" / f"s{i:04d}.py"
            shutil.copyfile(base[i % len(base)], path)
            paths.append(str(path))
        memory: list = []
        seconds = wall(paths, scratch / "out", jobs, memory=memory)
        size = sum(f.stat().st_size for f in (scratch / "out").rglob("*") if f.is_file())
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"{count} submissions: {seconds:.1f} s with --jobs {jobs} ({count / seconds:.1f} submissions/s, start-up "
        f"included); --out {size / 2**20:.1f} MiB; the largest process of the batch {peak:.0f} MiB resident; the "
        f"grader processes together at most {memory[0] / 2**20:.0f} MiB"
    )


def memory_per_slot(runs):
    import json  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import textwrap  # noqa: PLC0415

    import attacks  # noqa: PLC0415 (tests/attacks.py)

    if shutil.which("unshare") is None:
        print("skipped: the attack corpus is graded inside a throwaway namespace, and unshare is not installed")
        return
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        (scratch / "subs" / "intake").mkdir(parents=True)
        paths = submissions(scratch / "subs")
        for name, source in attacks.SOURCES.items():
            path = scratch / "subs" / f"attack_{name}.py"
            text = source.replace("@MARK@", "benchmark").replace("@CHECKOUT@", str(ROOT)).replace("@OUT@", "/nowhere")
            path.write_text(textwrap.dedent(text.replace("@OTHER@", "/nowhere")), encoding="utf-8")
            paths.append(str(path))
        paths += map(str, attacks.intake(scratch / "subs" / "intake", inspect.getsource(reference)))
        print(
            f"{len(paths)} submissions: the 25, {len(attacks.SOURCES)} hostile ones, {len(attacks.INTAKE)} intake attacks"
        )
        for jobs in (1, 2, 4):
            peaks = []
            for run in range(runs):
                out = scratch / f"out{jobs}-{run}"
                grade = _grade(paths, out, jobs, "--timeout", "2", "--budget", "30")
                sampler = [sys.executable, str(ROOT / "tests" / "trusted_memory.py"), *grade]
                throwaway = ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", *sampler]
                ran = json.loads(subprocess.run(throwaway, cwd=ROOT, capture_output=True, text=True, check=True).stdout)
                if ran["code"]:
                    raise SystemExit(f"the batch failed (exit {ran['code']})")
                peaks.append(ran["peak_kib"] / 1024 / jobs)
            print(
                f"--jobs {jobs}: {statistics.median(peaks):.0f} MB PSS per slot (the trusted processes' peak over "
                f"{jobs}; median of {runs}: {', '.join(f'{p:.0f}' for p in peaks)}; goal <= 400)"
            )


if __name__ == "__main__":
    main()
