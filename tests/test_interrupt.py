"""A course's batch stopped halfway: what finished is kept, nothing is left running, the same command goes on;
two batches into one --out at once: the second is refused."""

import contextlib
import csv
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.outputs import HEAD_GRADE, command, last_part

ROOT = Path(__file__).resolve().parent.parent
HEAD = ROOT / "examples" / "head"
SLOW = "import time\ntime.sleep(0.4)  # a slow import: the batch takes a while\n"


def _processes_in_session(sid, wait=10.0):
    """The processes of session ``sid`` still running after up to ``wait`` seconds (one that has ended but is not
    collected yet, a zombie whose parent ended before it, is not running: init collects it)."""
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
                if (
                    os.getsid(int(entry.name)) == sid
                    and (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
                ):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _proc(pid, name):
    """/proc/PID/NAME's bytes (empty where the process has ended)."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def _as_from_a_terminal():
    """^C as a terminal's command gets it: a process started with SIGINT ignored (as a test runner's worker may
    be) ignores it for good, as Unix has a background job do."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _rows(path):
    with path.open(newline="") as handle:
        return [row[0] for row in csv.reader(handle)][2:]  # (the header, then Points Possible)


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
        *HEAD_GRADE,
        *map(str, sorted(subs.iterdir())),
        "--out",
        str(out),
    ]
    batch = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: ^C reaches all of it
        preexec_fn=_as_from_a_terminal,
    )
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
        *HEAD_GRADE,
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
    _, stderr = batch.communicate(timeout=30)
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
        run = command("grade", "--assignment", HEAD, tmp_path / "s.py", "--out", out)  # (flock: another handle's)
    assert run.returncode == 2
    assert "is being written by another grading batch (pid 4242)" in run.stderr
    assert not (out / "s").exists()  # nothing graded, nothing written


def _made(tmp_path, correct, fifos):
    """(a folder of submissions: ``correct`` files holding the correct answer, ``fifos`` named pipes; --out)."""
    subs = tmp_path / "subs"
    for name in correct:
        (subs / name).parent.mkdir(parents=True, exist_ok=True)
        (subs / name).write_text((HEAD / "submissions" / "correct.py").read_text())
    for name in fifos:
        os.mkfifo(subs / name)
    return subs, tmp_path / "out"


# The batch with the guard of regular.py taken away: a grader's set-up thread opens a FIFO as a zip and waits there
# for good. The grader processes (forked with torch alone) are told to run this file's ``forked`` rather than the
# package's, so they lose the guard too.
_UNGUARDED = (
    "import os, sys\n"
    "from attention_core.grading.intake import regular\n"
    "regular.special = lambda path: None\n"
    "regular.open_regular = lambda path, shown=None: open(path, 'rb')\n"
    "def forked(sock, channel):\n"
    "    from attention_core.grading.outputs import graders\n"
    "    graders.forked(sock, channel)\n"
    "if __name__ == '__main__':\n"
    "    from attention_core import cli\n"
    "    from attention_core.grading.outputs import batch\n"
    "    begin, here = batch.begin, os.path.dirname(os.path.abspath(__file__))\n"
    "    batch.begin = lambda sock, module, function, path: begin(sock, 'unguarded', function, [here, *path])\n"
    "    sys.exit(cli.main(sys.argv[1:]))\n"
)


@pytest.mark.grading
def test_sigterm_ends_a_batch_within_two_seconds_while_a_thread_is_blocked_on_a_fifo(tmp_path):
    subs, out = _made(tmp_path, correct=("a_correct.py", "c_correct.py"), fifos=("b_mallory.zip",))
    (tmp_path / "unguarded.py").write_text(_UNGUARDED)
    command = [sys.executable, str(tmp_path / "unguarded.py"), *HEAD_GRADE, *map(str, sorted(subs.iterdir()))]
    command += ["--out", str(out)]
    batch = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not list(out.rglob("record.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the FIFO's set-up is under way: a thread waits in open() for a writer that never comes
    assert batch.poll() is None, batch.communicate()
    batch.send_signal(signal.SIGTERM)
    _, stderr = batch.communicate(timeout=30)  # (it waited for good before; it ends within 2 s here, unloaded)
    assert batch.returncode == 130 and "terminated: graded" in stderr, stderr
    assert _processes_in_session(batch.pid) == []
    assert "a_correct" in map(last_part, _rows(out / "gradebook.csv"))
    with open(out / ".grading.lock", "a+") as lock:  # released: another batch may write there now
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


@pytest.mark.grading
def test_a_fifo_a_socket_and_a_folder_holding_a_fifo_are_each_their_own_zero_row(tmp_path):
    import socket  # noqa: PLC0415

    subs, out = _made(tmp_path, correct=("alice.py", "dirsub/a.py"), fifos=("mallory.zip", "eve.py", "dirsub/b.py"))
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(subs / "sock.py"))
    try:
        run = subprocess.run(
            [sys.executable, "-m", "attention_core", *HEAD_GRADE]
            + [str(subs / n) for n in ("alice.py", "mallory.zip", "eve.py", "dirsub", "sock.py")]
            + ["--out", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        server.close()
    assert run.returncode == 0, run.stderr
    with (out / "gradebook.csv").open(newline="") as handle:
        rows = {last_part(row[0]): row[1:3] for row in list(csv.reader(handle))[1:]}
    assert rows["alice"][0] == rows["alice"][1]
    for name, what in (("mallory", "a FIFO"), ("eve", "a FIFO"), ("dirsub", "a FIFO"), ("sock", "a socket")):
        assert float(rows[name][0]) == 0, name
        said = next(out.rglob(f"submissions/**/{name}/results.json")).read_text()
        assert f"is {what}" in said, said


@pytest.mark.grading
def test_a_grader_process_killed_halfway_ends_the_batch_with_its_reason_and_leaves_nothing_running(tmp_path):
    """A grader process that dies (the machine's out-of-memory killer, an operator's kill) holds submissions that
    would never be graded: the batch says so and ends, rather than waiting for them. (The grader processes are
    forked from the batch's forking process, which imported torch for them and the worker servers.) Nor is any
    temporary folder left: the killed process's (its notebooks', its submissions' sandboxes') are the batch's."""
    subs, out, temporary = tmp_path / "subs", tmp_path / "out", tmp_path / "tmp"
    subs.mkdir()
    temporary.mkdir()
    correct = (HEAD / "submissions" / "correct.py").read_text()
    for i in range(6):
        (subs / f"s{i}.py").write_text(SLOW + correct)
    command = [sys.executable, "-m", "attention_core", *HEAD_GRADE, *map(str, sorted(subs.iterdir()))]
    command += ["--out", str(out), "--jobs", "2"]
    batch = subprocess.Popen(
        command,
        cwd=ROOT,
        env=dict(os.environ, TMPDIR=str(temporary)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list(out.rglob("record.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    session = {pid: _proc(pid, "comm").strip().decode() for pid in _session(batch.pid)}
    graders = [pid for pid, comm in session.items() if comm == "ac-grader"]
    assert graders, "no grader process found"
    # (torch imported once a batch: the grader processes are forked from the forking process, none spawned)
    parents = {int(_proc(pid, "stat").rsplit(b")", 1)[1].split()[1]) for pid in graders}
    assert {session.get(parent) for parent in parents} == {"ac-forks"}
    assert not any(b"multiprocessing" in _proc(pid, "cmdline") for pid in session)
    os.kill(graders[0], signal.SIGKILL)
    _, stderr = batch.communicate(timeout=60)
    assert batch.returncode == 1
    assert "error: a grader process ended before the batch did" in stderr and "Traceback" not in stderr, stderr
    assert _processes_in_session(batch.pid) == []
    assert list(temporary.iterdir()) == []
    graded = sorted(map(last_part, _rows(out / "gradebook.csv")))  # what finished, kept; the rest graded next time
    assert graded == sorted(p.parent.name for p in out.rglob("record.json")) and len(graded) < 6


def test_a_grader_lost_before_its_last_result_is_told_at_once_not_when_the_others_finish():
    """A grader process asks for its next submission before it sends the one it holds (it works one ahead): one
    told there is no more and then killed still owed a result. The batch says so at once, rather than waiting for
    the other processes to finish and then finding no one left. (Two stand-in graders on sockets: one dies owing
    its last result, the other holds its last until the test ends.)"""
    import socket  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from attention_core.grading.outputs import batch  # noqa: PLC0415
    from attention_core.grading.process.link import Link  # noqa: PLC0415

    class Held:  # a stand-in process: nothing to signal or wait for
        def send(self, signum):
            pass

        def wait(self, timeout):
            pass

    release = threading.Event()

    def grader(sock, dies):
        link, held = Link(sock), None
        with contextlib.suppress(OSError, EOFError):
            while True:
                link.put(("next", None, None))
                task = link.get()
                if task is None and dies:
                    return  # killed before it sent its last result
                if held is not None:
                    if not dies:
                        release.wait(60)
                    link.put((held[0], f"scores of {held[2]}", None))
                if task is None:
                    return
                held = task
        sock.close()

    graders = batch._Graders(None, None, None, None, None, 2)
    graders.here = False  # (this test's process has torch: it would grade here)
    for dies in (True, False):
        ours, theirs = socket.socketpair()
        graders.processes.append((Held(), Link(ours)))
        threading.Thread(target=grader, args=(theirs, dies), daemon=True).start()
    outcome = []

    def run():
        try:
            graders.grade([("p0", "s0"), ("p1", "s1"), ("p2", "s2")], lambda scores: None, lambda: None)
            outcome.append("finished")
        except batch.GraderLost as lost:
            outcome.append(str(lost))

    batch_thread = threading.Thread(target=run, daemon=True)
    batch_thread.start()
    batch_thread.join(30)
    release.set()
    assert outcome and "a grader process ended before the batch did" in outcome[0], outcome
