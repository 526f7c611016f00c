"""The tutorial "Add a worked case" (docs/authoring.md), run as written: its files, its commands, its outputs.

Blocks of the section are marked with HTML comments: ``file PATH`` (write the block),
``edit PATH`` (the author's edit: the whole file), ``run`` (each line a command), ``output`` (the
previous command's output, exactly), ``excerpt PATH`` (lines the file must hold) and ``review
PATH`` (the review the text asks for: each ``recorded:`` line deleted). They run in a scratch
project: ``cases/`` and the one-line ``tests/test_cases.py`` that compares snapshots.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.outputs import command, pytest_here

pytestmark = pytest.mark.slow  # pytest and the command line run here: the quick loop leaves this module out

ROOT = Path(__file__).resolve().parent.parent
RUNS = {"attention_core": command, "pytest": pytest_here}  # python -m NAME ARGS, run in this process
STEP = re.compile(r"<!-- tutorial: (\w+)(?: (\S+))? -->\n(?:```\w*\n(.*?)^```\n)?", re.MULTILINE | re.DOTALL)


def section(text, title):
    """The text of a page's section ``## title``, up to the next heading outside a code block."""
    lines, inside, fenced = [], False, False
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            if inside:
                break
            inside = line.strip() == f"## {title}"
        elif inside:
            lines.append(line)
    return "".join(lines)


def steps():
    """(kind, path, block) for each marked step of the tutorial (docs/authoring.md), in order."""
    tutorial = section((ROOT / "docs" / "authoring.md").read_text(encoding="utf-8"), "Add a worked case")
    assert tutorial, "docs/authoring.md has no section 'Add a worked case'"
    return [(m.group(1), m.group(2), m.group(3)) for m in STEP.finditer(tutorial)]


def test_the_tutorial_has_every_step():
    kinds = [kind for kind, _, _ in steps()]
    assert kinds.count("run") >= 4 and {"file", "edit", "output", "excerpt", "review"} <= set(kinds)


def test_the_tutorial_runs_as_written(tmp_path):
    (tmp_path / "cases").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_cases.py").write_text(
        (ROOT / "tests" / "test_cases.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    said = ""
    for kind, path, block in steps():
        if kind in ("file", "edit"):
            (tmp_path / path).write_text(block, encoding="utf-8")
        elif kind == "excerpt":
            assert block in (tmp_path / path).read_text(encoding="utf-8")
        elif kind == "review":
            text = (tmp_path / path).read_text(encoding="utf-8")
            (tmp_path / path).write_text(re.sub(r"^ *recorded: .*\n", "", text, flags=re.MULTILINE), encoding="utf-8")
        elif kind == "output":
            assert said == block
        else:
            for line in filter(None, block.splitlines()):
                argv = shlex.split(line)
                assert argv[:2] == ["python", "-m"] and argv[2] in RUNS, line
                run = RUNS[argv[2]](*argv[3:], cwd=tmp_path)  # (the module's main() in this process)
                assert run.returncode == 0, f"{line}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
                said = run.stdout
    # The end of the tutorial: a clean lint and a passing check, its snapshot written.
    assert (tmp_path / "tests" / "__snapshots__" / "test_cases" / "softmax_demo.in_3.weights.txt").exists()
    lint = subprocess.run(  # (one command in a process of its own, as an author runs it)
        [sys.executable, "-m", "attention_core", "lint", "cases"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert (lint.returncode, lint.stdout) == (0, "0 errors, 0 warnings\n")
