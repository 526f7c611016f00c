"""Round-trip time of a call into a submission's process, and submissions opened and closed per second.

Usage: python benchmarks/worker_calls.py [--calls N] [--opens N] [--submissions N] [--threads N]
Prints the median round trip of a small ``softmax`` call and of its gradient call, opens+closes per
second, and a simulated grading run: ``--submissions`` submissions of 150 calls each, spread over
``--threads`` threads sharing one Worker.
"""

import argparse
import statistics
import tempfile
import threading
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

import torch  # noqa: E402

from attention_core.grading.process.client import Worker  # noqa: E402

SUBMISSION = """
import torch

def softmax(x, dim=-1):
    e = (x - x.max(dim, keepdim=True).values).exp()
    return e / e.sum(dim, keepdim=True)
"""
CALLS_PER_SUBMISSION = 150


def round_trips(submission, n, grad):
    x = torch.randn(4, 8, 8)
    call = submission.call_grad if grad else submission.call
    times = []
    for _ in range(n):
        start = time.perf_counter()
        outcome = call("softmax", (x,))
        times.append(time.perf_counter() - start)
        assert outcome.status == "ok", outcome
    return statistics.median(times)


def grade(worker, path, count):
    x = torch.randn(4, 8, 8)
    for _ in range(count):
        with worker.open(path) as submission:
            for i in range(CALLS_PER_SUBMISSION):
                outcome = submission.call("softmax", (x,)) if i % 5 else submission.call_grad("softmax", (x,))
                assert outcome.status == "ok", outcome


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--opens", type=int, default=50)
    parser.add_argument("--submissions", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, Worker() as worker:
        path = Path(folder) / "submission.py"
        path.write_text(SUBMISSION)
        with worker.open(path) as submission:  # the first open waits for the server's import of torch
            round_trips(submission, 100, False)
            call = round_trips(submission, args.calls, False)
            grad = round_trips(submission, args.calls // 4, True)
        start = time.perf_counter()
        for _ in range(args.opens):
            worker.open(path).close()
        opens = args.opens / (time.perf_counter() - start)
        shares = [args.submissions // args.threads + (i < args.submissions % args.threads) for i in range(args.threads)]
        threads = [threading.Thread(target=grade, args=(worker, path, n)) for n in shares]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        graded = args.submissions / (time.perf_counter() - start)
    print(f"call round trip      : {call * 1e6:.0f} us (median of {args.calls}, softmax of a (4, 8, 8) tensor)")
    print(f"call_grad round trip : {grad * 1e6:.0f} us (median of {args.calls // 4})")
    print(f"open + close         : {opens:.0f} submissions/s ({args.opens} in a row)")
    print(
        f"grading              : {graded:.1f} submissions/s ({args.submissions} x {CALLS_PER_SUBMISSION} calls, "
        f"{args.threads} threads, one Worker)"
    )


if __name__ == "__main__":
    main()
