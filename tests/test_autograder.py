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


def run_autograder(bundle, tmp_path, source, **env):
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "submission" / FILE_NAME).write_text(source)
    script = bundle[0] / "run_autograder"
    os.chmod(script, 0o755)
    subprocess.run(
        [str(script)],
        env=dict(os.environ, AUTOGRADER_ROOT=str(root), ATTENTION_PYTHON=sys.executable, ATTENTION_LIB="", **env),
        check=True,
        timeout=300,
    )
    return json.loads((root / "results" / "results.json").read_text())


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


def test_run_autograder_grades_the_submission_into_results_json(bundle, tmp_path):
    results = run_autograder(bundle, tmp_path, Path(reference.__file__).read_text())
    assert valid(results)
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0


def test_run_autograder_writes_a_partial_result_with_the_reason_when_time_runs_out(bundle, tmp_path):
    slow = (
        "\n\nimport time\n_attention = attention\n\ndef attention(*args, **kwargs):\n    time.sleep(1)\n"
        "    return _attention(*args, **kwargs)\n"
    )  # within the call's limit, but 40 calls take 40 s
    # 8 s: about twice what a whole grading of a correct file takes here (start-up included)
    results = run_autograder(bundle, tmp_path, Path(reference.__file__).read_text() + slow, AUTOGRADER_TIME_LIMIT="8")
    assert valid(results)
    assert results["output"].startswith("grading stopped after 8 s")
    assert 0 < len(results["tests"]) and results["score"] > 0
