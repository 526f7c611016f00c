"""The Gradescope bundle: its files, and ``run_autograder`` run against a fake ``/autograder`` tree."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from attention_core import reference
from attention_core.grading.platforms.template import FILE_NAME
from tests.outputs import command as in_process

pytestmark = pytest.mark.grading

VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundle")
    made = in_process("gradescope-bundle", folder / "autograder.zip")  # (writing a zip: the process is not tested)
    assert made.returncode == 0, made.stderr
    with zipfile.ZipFile(folder / "autograder.zip") as z:
        z.extractall(folder / "source")
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    return folder / "source", modes


def start_autograder(bundle, folder, source, **env):
    """``run_autograder`` started against a fake ``/autograder`` tree in ``folder`` holding ``source``: the process and
    the tree's root (see :func:`results_of`)."""
    root = folder / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "submission" / FILE_NAME).write_text(source)
    script = bundle[0] / "run_autograder"
    os.chmod(script, 0o755)
    process = subprocess.Popen(
        [str(script)],
        env=dict(os.environ, AUTOGRADER_ROOT=str(root), ATTENTION_PYTHON=sys.executable, ATTENTION_LIB="", **env),
    )
    return process, root


def results_of(started):
    """The results.json of a ``run_autograder`` started by :func:`start_autograder`, once it has exited 0."""
    process, root = started
    assert process.wait(timeout=300) == 0
    return json.loads((root / "results" / "results.json").read_text())


SLOW = (
    "\n\nimport time\n_attention = attention\n\ndef attention(*args, **kwargs):\n    time.sleep(1)\n"
    "    return _attention(*args, **kwargs)\n"
)  # within the call's limit, but 40 calls take 40 s


@pytest.fixture(scope="module")
def graded(bundle, tmp_path_factory):
    """The results of a correct file and of a slow one, their two ``run_autograder`` processes run at once (the
    slow one mostly sleeps)."""
    reference_source = Path(reference.__file__).read_text()
    started = {
        # 8 s: about twice what a whole grading of a correct file takes here (start-up included)
        "slow": start_autograder(
            bundle, tmp_path_factory.mktemp("slow"), reference_source + SLOW, AUTOGRADER_TIME_LIMIT="8"
        ),
        "correct": start_autograder(bundle, tmp_path_factory.mktemp("correct"), reference_source),
    }
    try:
        return {name: results_of(run) for name, run in started.items()}
    finally:
        for process, _ in started.values():
            process.kill()
            process.wait()


def valid(results):
    """Gradescope's documented fields, with their types and allowed values."""
    assert isinstance(results["score"], (int, float)) and isinstance(results["execution_time"], (int, float))
    assert isinstance(results["output"], str) and results["tests"]
    for test in results["tests"]:
        assert isinstance(test["name"], str) and test["status"] in ("passed", "failed")
        assert isinstance(test["score"], (int, float)) and isinstance(test["max_score"], (int, float))
        assert isinstance(test["output"], str) and test["visibility"] in VISIBILITY
    return True


def test_the_bundle_holds_setup_run_autograder_and_the_harness(bundle):
    source, modes = bundle
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    setup = (source / "setup.sh").read_text()
    assert "download.pytorch.org/whl/cpu" in setup and "install -d -m 700 /opt/attention-core" in setup
    assert (source / "attention-core" / "cases" / "001_self_attention.yaml").exists()
    assert (source / "attention-core" / "attention_core" / "grading" / "server" / "worker.py").exists()


def test_run_autograder_grades_the_submission_into_results_json(graded):
    results = graded["correct"]
    assert valid(results)
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0


def test_run_autograder_writes_a_partial_result_with_the_reason_when_time_runs_out(graded):
    results = graded["slow"]
    assert valid(results)
    assert results["output"].startswith("grading stopped after 8 s")
    assert 0 < len(results["tests"]) and results["score"] > 0
