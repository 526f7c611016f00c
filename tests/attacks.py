"""Hostile submissions: each tries one way out of the sandbox, or one way to harm the grader.

``SOURCES`` maps a name to a submission's source. ``@MARK@`` stands for a string unique to the run
(an escape leaves a file or a process carrying it), ``@OUT@`` for the grader's output folder,
``@OTHER@`` for another submission's folder and ``@CHECKOUT@`` for this project's folder. A probe
does its work at import and its ``softmax`` raises ``RuntimeError("REPORT <json>")``, so that what it
found reaches the grader's results as the check's reason.
"""

import json
import os
import socket
import zipfile

PROBE = """
import json, os

def softmax(x, dim=-1):
    raise RuntimeError("REPORT " + json.dumps(REPORT))
"""

# What a walk looks for: the case files, snapshots, earlier results and this project's package.
WALK = """
import os, sys

WANTED = ("001_self_attention.yaml", "case-file.schema.json", "test_snapshots.ambr", "results.json",
          "gradebook.csv", "test_cases.ambr", "test_reference.py")

# Large trees no installation of this project writes into: left out, so that the walk ends in a few seconds
# on a loaded machine too (its import has a time limit of its own).
BULK = ("torch", "nvidia", "triton", "sympy", "share", "include", "locale", "man", "zoneinfo", "perl", "perl5")

def walk(top="/"):
    found = []
    for folder, dirs, files in os.walk(top, onerror=lambda e: None):
        dirs[:] = [d for d in dirs if not (folder == "/" and d in ("proc", "sys", "dev")) and d not in BULK]
        found += [os.path.join(folder, f) for f in files if f in WANTED or f.startswith("@MARK@-")]
        found += [os.path.join(folder, d) for d in dirs if d in ("attention_core", "cases", "__snapshots__")]
    for entry in sys.path:
        for name in ("attention_core", "cases"):
            if os.path.exists(os.path.join(entry, name)):
                found.append(os.path.join(entry, name))
    try:
        import attention_core  # noqa: F401
        found.append("import attention_core")
    except Exception:
        pass
    for path in ("@CHECKOUT@/cases", "@CHECKOUT@/tests/__snapshots__", "@OUT@"):
        if os.path.exists(path):
            found.append(path)
    return found[:20]
"""

SOURCES = {
    "hang": """
def softmax(x, dim=-1):
    while True:
        pass
""",
    "memory_bomb": """
import torch

def softmax(x, dim=-1):
    hoard = []
    while True:
        hoard.append(torch.empty(1 << 30, dtype=torch.uint8))
""",
    "exit": """
import os

def softmax(x, dim=-1):
    os._exit(0)
""",
    "system_exit": """
def softmax(x, dim=-1):
    raise SystemExit(3)

def causal_mask(T, device=None):
    raise KeyboardInterrupt
""",
    "import_crash": """
raise RuntimeError("this submission fails at import")
""",
    "rigged_subclass": """
import os, torch

class Rigged(torch.Tensor):
    def __eq__(self, other):
        return True

    def __reduce__(self):
        return (os.system, ("touch @OUT@/@MARK@-unpickled",))

def softmax(x, dim=-1):
    return torch.zeros_like(x).as_subclass(Rigged)
""",
    "huge_reply": """
import torch

def softmax(x, dim=-1):
    return torch.zeros(20_000_000)  # 80 MB back where a check's results take a few hundred bytes
""",
    "long_messages": """
import sys

sys.stdout.write("printed at import " * 5000)
WORDS = "a long message " * 20000

def _deep(n):
    return _deep(n - 1) if n else _fail()  # a long line, so that each frame of its traceback is long too: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx


def _fail():
    raise RuntimeError(WORDS)


def _raise(*args, **kwargs):
    return _deep(150)

softmax = causal_mask = causal_average = attention = split_heads = merge_heads = multi_head_attention = \\
    layer_norm = _raise
""",
    "output_flood": """
import sys

chunk = "x" * (1 << 20)
for _ in range(200):
    sys.stdout.write(chunk)
    sys.stderr.write(chunk)

def softmax(x, dim=-1):
    return x.softmax(dim)
""",
    "walk": WALK
    + """
REPORT = {"found": walk()}
"""
    + PROBE,
    "umount_then_walk": WALK
    + """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
undone = 0
for _ in range(3):
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in reversed(points):
        undone += libc.umount2(point.encode(), 2) == 0
REPORT = {"unmounted": undone, "found": walk()}
"""
    + PROBE,
    "proc_reads": """
import os
REPORT = {"read": [], "reached": []}
pids = [p for p in os.listdir("/proc") if p.isdigit()] if os.path.isdir("/proc") else []
for pid in sorted(set(pids) | {str(os.getppid()), "1"}):
    for what in ("environ", "cmdline", "mem"):
        try:
            with open(f"/proc/{pid}/{what}", "rb") as f:
                data = f.read(1 << 16)
            if b"@OUT@" in data or b"PYTEST" in data:
                REPORT["read"].append(f"{pid}/{what}")
        except OSError:
            pass
    for what in ("root@CHECKOUT@/cases", "root@OUT@", "root@CHECKOUT@/attention_core"):
        try:
            if os.listdir(f"/proc/{pid}/{what}"):
                REPORT["reached"].append(f"{pid}/{what}")
        except OSError:
            pass
"""
    + PROBE,
    "kill_everything": """
import os, signal
for pid in range(1, 1 << 15):
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass

def softmax(x, dim=-1):
    return x.softmax(dim)
""",
    "process_spree": """
import subprocess
started = 0
for _ in range(300):
    try:
        subprocess.Popen(["/bin/sh", "-c", "sleep 600", "@MARK@-spree"], start_new_session=True)
        started += 1
    except OSError:
        break

def softmax(x, dim=-1):
    return x.softmax(dim)
""",
    "network": """
import socket
REPORT = {"connected": []}
for address in (("1.1.1.1", 80), ("8.8.8.8", 53), ("10.0.0.1", 80)):
    try:
        socket.create_connection(address, timeout=2).close()
        REPORT["connected"].append(address[0])
    except OSError:
        pass
"""
    + PROBE,
    "writes": """
import os
REPORT = {"wrote": []}
for folder in ("@OUT@", "@OTHER@", "@CHECKOUT@", "/tmp", os.path.dirname(os.path.abspath(__file__))):
    try:
        with open(os.path.join(folder, "@MARK@-written"), "w") as f:
            f.write("escaped")
        REPORT["wrote"].append(folder)
    except OSError:
        pass
"""
    + PROBE,
    # The grader's session and user keyrings (where CI tokens live): read their ids, add a key to each.
    "keyring": """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
KEYCTL, ADD_KEY = {"x86_64": (250, 248), "aarch64": (219, 217)}[os.uname().machine]
REPORT = {"keyrings": []}
for ring in (-3, -4):  # KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING
    if libc.syscall(KEYCTL, 0, ring, 0) >= 0:  # KEYCTL_GET_KEYRING_ID
        REPORT["keyrings"].append(f"read {ring}")
    if libc.syscall(ADD_KEY, b"user", b"@MARK@-key", b"x", 1, ring) >= 0:
        REPORT["keyrings"].append(f"wrote {ring}")
"""
    + PROBE,
    "session_escape": """
import os
REPORT = {"escaped": []}
# A session (and so a CPU share) of its own, a process group of its own, memory no limit counts
for name, attempt in (("setsid", os.setsid), ("setpgid", lambda: os.setpgid(0, 0)),
                      ("memfd_create", lambda: os.memfd_create("@MARK@-hoard"))):
    try:
        attempt()
        REPORT["escaped"].append(name)
    except OSError:
        pass
"""
    + PROBE,
}

# What each probe's report must say: nothing found, reached, read, connected or written outside.
CLEAN = {
    "walk": {"found": []},
    "proc_reads": {"read": [], "reached": []},
    "network": {"connected": []},
    "keyring": {"keyrings": []},
    "session_escape": {"escaped": []},
}


def report(results):
    """The probe's report in a results.json dictionary, or None."""
    for test in results["tests"]:
        if "REPORT " in test["output"]:
            text = test["output"].split("REPORT ", 1)[1]
            return json.loads(text[: text.index("}") + 1])
    return None


# ---- attacks on intake: what a batch is given rather than what a submission runs --------------------------
# Each writes its submission (a path, named as its key but for the suffix; or its paths, the first the attack's)
# into a folder, given the source of a correct submission; INTAKE_EXPECTED says what its row must read: full marks (an honest file that
# only looks odd) or 0 with a reason its results.json gives.


def _fifo(folder, correct):
    path = folder / "fifo.zip"
    os.mkfifo(path)  # open()ed for reading, it waits for a writer: the batch must not
    return path


def _socket(folder, correct):
    path = folder / "sock.py"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the socket file stays
    return path


def corrupt_zip(path, method, text):
    """Write ``path``: a zip of ``attention.py`` (``text``) compressed with ``method``, its stream then corrupted."""
    with zipfile.ZipFile(path, "w", method) as z:
        z.writestr("attention.py", text)
    data = bytearray(path.read_bytes())
    start = data.index(b"attention.py") + len("attention.py")  # the local header's name, then the stream
    for i in range(start + 20, start + 60):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    return path


def _corrupt(method, suffix):
    return lambda folder, correct: corrupt_zip(folder / f"corrupt_{suffix}.zip", method, correct * 20)


def _writestr(folder, correct):
    path = folder / "writestr.zip"
    with zipfile.ZipFile(path, "w") as z:  # an honest zip: its modes carry no file type
        z.writestr("attention.py", correct)
    return path


def _outputs(folder, correct):
    """A notebook of the correct code and 40,000 stored outputs (120 KB), each invalid."""
    cell = {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": correct, "outputs": [{}] * 40_000}
    path = folder / "outputs.ipynb"
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def _formula(folder, correct):
    path = folder / "=cmd|calc.py"  # a gradebook cell that a spreadsheet would run
    path.write_text(correct)
    return path


def _look_alike(folder, correct):
    path = folder / "bob\u3164.py"  # "bob" and an invisible Hangul filler
    path.write_text(correct)
    (folder / "bob.py").write_text(correct)
    return path, folder / "bob.py"


INTAKE = {
    "fifo": _fifo,
    "sock": _socket,
    "corrupt_deflate": _corrupt(zipfile.ZIP_DEFLATED, "deflate"),
    "corrupt_lzma": _corrupt(zipfile.ZIP_LZMA, "lzma"),
    "writestr": _writestr,
    "outputs": _outputs,
    "=cmd|calc": _formula,
    "bob\u3164": _look_alike,
}

# Its row: "full" marks, or 0 with these words in its results.json's output.
INTAKE_EXPECTED = {
    "fifo": "a FIFO",
    "sock": "a socket",
    "corrupt_deflate": "the zip cannot be read",
    "corrupt_lzma": "the zip cannot be read",
    "writestr": "full",
    "outputs": "full",
    "=cmd|calc": "full",
    "bob\u3164": "full",
    "bob": "full",
}


def intake(folder, correct):
    """Write every intake attack into ``folder``; their paths."""
    paths = []
    for write in INTAKE.values():
        made = write(folder, correct)
        paths += list(made) if isinstance(made, tuple) else [made]
    return paths
