"""The attack corpus (tests/attacks.py), graded as one batch by the real grader, as root and as an
unprivileged user.

Each batch runs inside a throwaway mount and PID namespace of the test's own, under limits of
its own: if the sandbox had a bug, an unmount or a kill of every process would reach only that
namespace. Inside it, after grading, a helper lists the processes that carry the run's marker
(none may outlive grading). Where the throwaway namespace cannot be made, the test is skipped
and says why.
"""

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import attacks
import pytest

from attention_core import reference
from attention_core.grading.intake import ids

pytestmark = pytest.mark.grading

ROOT = Path(__file__).resolve().parent.parent

# Runs inside the throwaway namespaces: (as root) make the interpreter reachable for the
# unprivileged uid when asked, drop to it, grade, then list the marked processes still alive.
HELPER = r"""
import json, os, resource, subprocess, sys, tempfile

mode, result, mark, *command = sys.argv[1:]
resource.setrlimit(resource.RLIMIT_CPU, (900, 900))
if mode == "unprivileged":
    # Folders on the way to the interpreter, the site folders and the checkout that uid 65534 may
    # not pass: in this mount namespace only, a tmpfs over each with the needed paths bound back.
    needed = [os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *json.loads(os.environ["NEEDED"]))]
    for path in needed:
        parts = path.split("/")
        for i in range(2, len(parts)):
            folder = "/".join(parts[:i])
            if not os.stat(folder).st_mode & 0o001:
                keep = tempfile.mkdtemp()
                subprocess.run(["mount", "--bind", "/".join(parts[:i + 1]), keep], check=True)
                subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", folder], check=True)
                os.makedirs("/".join(parts[:i + 1]), exist_ok=True)
                subprocess.run(["mount", "--bind", keep, "/".join(parts[:i + 1])], check=True)
                break
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
sys.path.insert(0, os.environ["TESTS"])
import trusted_memory
with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
    batch = subprocess.Popen(command, stdout=out, stderr=err, text=True)
    peak = pss = 0
    while batch.poll() is None:
        peak = max(peak, trusted_memory.graders_rss_kib(batch.pid) * 1024)
        pss = max(pss, trusted_memory.trusted_pss_kib(batch.pid))
        try:
            batch.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
    err.seek(0)
    stderr = err.read()
    out.seek(0)
    stdout = out.read()
alive = []
for entry in os.listdir("/proc"):
    if not entry.isdigit() or int(entry) == os.getpid():
        continue
    try:
        with open(f"/proc/{entry}/cmdline", "rb") as f:
            if mark.encode() in f.read():
                alive.append(entry)
    except OSError:
        pass
with open(result, "w") as f:
    json.dump({"code": batch.returncode, "stderr": stderr[-4000:], "alive": alive, "uid": os.getuid(),
               "grader_rss": peak, "trusted_pss_kib": pss, "printed": stdout + stderr}, f)
"""


def _output(results):
    return json.loads(results.read_text())["output"] if results.is_file() else ""


def throwaway_available():
    if shutil.which("unshare") is None:
        return "the unshare command (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"a throwaway mount and PID namespace cannot be made here: {probe.stderr.strip()}"
    if os.geteuid() != 0:
        return "the batch runs as root and as uid 65534: the test needs root to set up both"
    return None


def run_batch(mode):
    why = throwaway_available()
    if why:
        pytest.skip(why)
    scratch = Path(tempfile.mkdtemp(prefix="attack-"))
    try:
        os.chmod(scratch, 0o755)
        mark = f"escape{os.getpid()}x{time.monotonic_ns()}"
        out, submissions, other = scratch / "out", scratch / "submissions", scratch / "submissions" / "other"
        other.mkdir(parents=True)
        out.mkdir()
        (other / "__init__.py").write_text(Path(reference.__file__).read_text())
        (submissions / "reference.py").write_text(Path(reference.__file__).read_text())
        paths = [submissions / "reference.py", other]
        (submissions / "intake").mkdir()
        paths += attacks.intake(submissions / "intake", Path(reference.__file__).read_text())
        for name, source in attacks.SOURCES.items():
            text = (
                source.replace("@MARK@", mark)
                .replace("@OUT@", str(out))
                .replace("@OTHER@", str(other))
                .replace("@CHECKOUT@", str(ROOT))
            )
            (submissions / f"{name}.py").write_text(textwrap.dedent(text))
            paths.append(submissions / f"{name}.py")
        if mode == "unprivileged":
            os.chown(out, 65534, 65534)
        result = scratch / "result.json"
        os.chmod(scratch, 0o777)
        helper = scratch / "helper.py"
        helper.write_text(HELPER)
        command = [
            sys.executable,
            "-m",
            "attention_core",
            "grade",
            *map(str, paths),
            "--out",
            str(out),
            "--jobs",
            "2",
            "--timeout",
            "1",
            "--budget",
            "30",
        ]
        env = dict(os.environ, NEEDED=json.dumps(sys.path[1:] + [str(ROOT)]), TESTS=str(ROOT / "tests"))
        start = time.monotonic()
        subprocess.run(
            [
                "unshare",
                "--mount",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                sys.executable,
                str(helper),
                mode,
                str(result),
                mark,
                *command,
            ],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=900,
        )
        seconds = time.monotonic() - start
        ran = json.loads(result.read_text())
        results = {p.parent.name: json.loads(p.read_text()) for p in out.rglob("results.json")}
        with (out / "gradebook.csv").open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))[2:]
        ran["intake"] = {  # each intake attack's row: its score and what its results.json says
            Path(row[0]).name: (float(row[1]), float(row[2]), _output(ids.folder_of(out, row[0]) / "results.json"))
            for row in rows
            if Path(row[0]).parent.name == "intake"
        }
        escaped = [
            str(p) for p in [*scratch.rglob(f"{mark}-*"), *ROOT.glob(f"{mark}-*"), *Path("/tmp").glob(f"{mark}-*")]
        ]
        return ran, results, escaped, seconds
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def batch(request):
    return request.param, run_batch(request.param)


def test_the_grader_survives_and_the_batch_finishes_in_bounded_time(batch):
    mode, (ran, results, _, seconds) = batch
    assert ran["code"] == 0, ran["stderr"]
    assert ran["uid"] == (0 if mode == "root" else 65534)
    assert len(results) == 2 + len(attacks.SOURCES) + len(attacks.INTAKE_EXPECTED)
    assert seconds < 600


def test_the_grader_stays_under_1_5_gb_and_prints_no_raw_control_byte(batch):
    _, (ran, _, _, _) = batch
    assert 0 < ran["grader_rss"] < 1.5 * 2**30, f"the grader's processes held {ran['grader_rss'] / 2**20:.0f} MiB"
    unprintable = {c for c in ran["printed"] if not c.isprintable() and c != "\n"}
    assert not unprintable, unprintable


def test_a_grading_slot_s_trusted_processes_hold_a_bounded_memory(batch):
    """The command, its forking process, grader processes, worker servers and the servers' guards together, under
    the attack corpus, --jobs 2: at most 400 MB PSS per slot (196 and 202 measured here as root and unprivileged;
    docs/performance.md has the figures and where they go)."""
    _, (ran, _, _, _) = batch
    per_slot = ran["trusted_pss_kib"] / 2 / 1024
    assert 0 < per_slot <= 400, f"{per_slot:.0f} MB PSS per slot"


@pytest.mark.parametrize("name", sorted(attacks.INTAKE_EXPECTED))
def test_each_intake_attack_is_its_own_row(batch, name):
    """A FIFO, a socket, a zip that fails to decompress: 0 and why; an honest zip, a notebook of 40,000 stored
    outputs, a name that is a spreadsheet formula or only looks like another's: full marks, as its code earns."""
    _, (ran, _, _, _) = batch
    score, max_score, output = ran["intake"][name]
    expected = attacks.INTAKE_EXPECTED[name]
    if expected == "full":
        assert score == max_score > 0, output[:400]
    else:
        assert score == 0 and expected in output, output[:400]


def test_well_behaved_submissions_of_the_same_batch_keep_full_marks(batch):
    _, (_, results, _, _) = batch
    for name in ("reference", "other"):
        assert results[name]["score"] == results[name]["max_score"] > 0, name


def test_no_marker_of_escape_appears_outside_and_no_process_outlives_grading(batch):
    _, (ran, _, escaped, _) = batch
    assert escaped == []
    assert ran["alive"] == []


def test_every_protection_is_in_force(batch):
    _, (ran, results, _, _) = batch
    assert "WARNING" not in ran["stderr"]
    assert "WARNING" not in results["reference"]["output"]


@pytest.mark.parametrize("name", sorted(attacks.CLEAN))
def test_a_probe_finds_nothing_outside_its_sandbox(batch, name):
    _, (_, results, _, _) = batch
    assert attacks.report(results[name]) == attacks.CLEAN[name]


def test_unmounting_everything_reveals_nothing(batch):
    _, (_, results, _, _) = batch
    assert attacks.report(results["umount_then_walk"])["found"] == []


@pytest.mark.parametrize(
    "name, reason",
    [
        ("hang", "timeout"),
        ("memory_bomb", "can't allocate memory"),
        ("exit", "crashed"),
        ("system_exit", "SystemExit"),
        ("import_crash", "this submission fails at import"),
        ("output_flood", "more bytes of output not shown"),
    ],
)
def test_a_harmful_submission_fails_its_checks_with_a_clear_reason(batch, name, reason):
    _, (_, results, _, _) = batch
    text = results[name]["output"] + "".join(t["output"] for t in results[name]["tests"])
    assert reason in text
    assert results[name]["score"] < results["reference"]["score"]


def test_a_reply_larger_than_its_call_can_need_fails_that_call_and_is_never_read(batch):
    _, (_, results, _, _) = batch
    softmax = [
        t
        for t in results["huge_reply"]["tests"]
        if "The call: softmax(" in t["output"] and not t["name"].startswith("properties/")
    ]
    assert softmax and all(t["status"] == "failed" for t in softmax)
    replied = [t for t in softmax if t["output"].startswith("implementation error")]
    assert all("bytes this call can need: they were not sent" in t["output"] for t in replied)
    # (on a loaded machine the 80 MB may not be made within --timeout 1: then the call times out instead)
    assert replied or all(t["output"].startswith("timeout") for t in softmax)


def test_a_results_json_stays_under_1_mb_whatever_the_submission_says(batch):
    _, (_, results, _, _) = batch
    size = len(json.dumps(results["long_messages"]))
    assert results["long_messages"]["score"] == 0 and size < 1_000_000
    assert all("a long message" in t["output"] for t in results["long_messages"]["tests"][:5])  # cut, not dropped


def test_a_rigged_tensor_subclass_is_judged_by_its_values_and_never_unpickled(batch):
    _, (_, results, escaped, _) = batch
    softmax = [
        t
        for t in results["rigged_subclass"]["tests"]
        if "softmax" in t["name"] and not t["name"].startswith("properties/")
    ]  # (a relation between its values may hold)
    assert softmax and all(t["status"] == "failed" for t in softmax if not t["name"].endswith("/backward"))
    assert escaped == []


def test_the_walk_probe_finds_the_case_files_where_nothing_hides_them():
    scope = {}
    exec(
        attacks.WALK.replace("@MARK@", "unused").replace("@CHECKOUT@", str(ROOT)).replace("@OUT@", "/nonexistent"),
        scope,
    )
    found = scope["walk"](str(ROOT))
    assert any(p.endswith("001_self_attention.yaml") for p in found) and f"{ROOT}/cases" in found
