"""A course's batch stopped halfway: what finished is kept, nothing is left running, the same command goes on;
two batches into one --out at once: the second is refused."""

import csv
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.outputs import last_part

ROOT = Path(__file__).resolve().parent.parent
HEAD = ROOT / "examples" / "head"
SLOW = "import time\ntime.sleep(0.7)  # a slow import: the batch takes a while\n"


def _processes_in_session(sid, wait=10.0):
    """The processes of session ``sid`` still there after up to ``wait`` seconds (an ended one may take a
    moment to be collected)."""
    deadline = time.monotonic() + wait
    while True:
        found = _session(sid)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _session(sid):
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _rows(path):
    with path.open(newline="") as handle:
        return [row[0] for row in csv.reader(handle)][1:]


@pytest.mark.grading
def test_a_batch_stopped_with_sigint_keeps_what_it_finished_leaves_nothing_running_and_the_same_command_goes_on(
    tmp_path,
):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    correct = (HEAD / "submissions" / "correct.py").read_text()
    for i in range(6):
        (subs / f"s{i}.py").write_text(SLOW + correct)
    command = [
        sys.executable,
        "-m",
        "attention_core",
        "grade",
        "--assignment",
        str(HEAD),
        "--property-points",
        "0",
        *map(str, sorted(subs.iterdir())),
        "--out",
        str(out),
    ]
    batch = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )  # its own process group: ^C reaches all of it
    deadline = time.monotonic() + 120
    while len(list(out.rglob("record.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(batch.pid, signal.SIGINT)
    stdout, stderr = batch.communicate(timeout=60)
    assert batch.returncode == 130, stderr
    finished = sorted(p.parent.name for p in out.rglob("record.json"))
    assert 2 <= len(finished) < 6, finished
    assert "interrupted: graded" in stderr and "the same command grades the rest" in stderr
    assert sorted(map(last_part, _rows(out / "gradebook.csv"))) == finished  # a gradebook of what it finished
    assert _processes_in_session(batch.pid) == []  # no grader, server or sandbox left behind
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"graded {6 - len(finished)}, skipped {len(finished)} as unchanged" in again.stderr
    assert sorted(map(last_part, _rows(out / "gradebook.csv"))) == [f"s{i}" for i in range(6)]


@pytest.mark.grading
def test_a_batch_stopped_with_sigterm_with_two_grader_processes_stops_too(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    correct = (HEAD / "submissions" / "correct.py").read_text()
    for i in range(8):
        (subs / f"s{i}.py").write_text(SLOW + correct)
    command = [
        sys.executable,
        "-m",
        "attention_core",
        "grade",
        "--assignment",
        str(HEAD),
        "--property-points",
        "0",
        *map(str, sorted(subs.iterdir())),
        "--out",
        str(out),
        "--jobs",
        "2",
    ]
    batch = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while len(list(out.rglob("record.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    batch.send_signal(signal.SIGTERM)  # to the batch's own process alone
    _, stderr = batch.communicate(timeout=60)
    assert batch.returncode == 130 and "terminated: graded" in stderr, stderr
    assert _processes_in_session(batch.pid) == []
    assert sorted(map(last_part, _rows(out / "gradebook.csv"))) == sorted(
        p.parent.name for p in out.rglob("record.json")
    )


def test_a_second_batch_into_the_same_out_is_refused_while_the_first_runs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "s.py").write_text((HEAD / "submissions" / "correct.py").read_text())
    with open(out / ".grading.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 4242")
        held.flush()
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "attention_core",
                "grade",
                "--assignment",
                str(HEAD),
                str(tmp_path / "s.py"),
                "--out",
                str(out),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 2
    assert "is being written by another grading batch (pid 4242)" in run.stderr
    assert not (out / "s").exists()  # nothing graded, nothing written
