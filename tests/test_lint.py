"""``lint``: every finding at ``file:line:col``, each kind of mistake in a corpus of malformed files.

Each file of ``tests/lint_corpus/`` holds one mistake beside a valid case (``fine``), and says on
its first line where lint must find it: ``# lint: LINE:COL: SEVERITY: words of the message``.
"""

import io
import os
from pathlib import Path

import pytest

from attention_core import checks, cli
from attention_core.harness.checking import runner
from attention_core.harness.checking.results import Status

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "lint_corpus"
FILES = sorted(CORPUS.glob("*.yaml"))


def _expected(path):
    head = path.read_text(encoding="utf-8").split("\n", 1)[0].removeprefix("# lint: ")
    line, column, severity, words = head.split(":", 3)
    return f"tests/lint_corpus/{path.name}:{line}:{column}: {severity.strip()}: ", words.strip()


def _lint(*argv):
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        patch.setattr("sys.stdout", out)
        status = cli.main(["lint", *map(str, argv)])
    return status, out.getvalue().splitlines()


@pytest.fixture(scope="module")
def corpus_lint():
    return _lint(CORPUS)


def test_the_corpus_holds_at_least_fifteen_kinds_of_error():
    kinds = [p.stem for p in FILES if _expected(p)[0].endswith(" error: ")]
    assert len(kinds) >= 15, kinds


def test_lint_exits_1_and_counts_the_corpus_findings(corpus_lint):
    status, lines = corpus_lint
    errors = sum(_expected(p)[0].endswith(" error: ") for p in FILES)
    assert status == 1
    assert lines[-1] == f"{errors} errors, {len(FILES) - errors} warnings"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_each_mistake_is_found_at_its_line_and_column_and_said_plainly(corpus_lint, path):
    _, lines = corpus_lint
    where, words = _expected(path)
    own = [line for line in lines if line.startswith(f"tests/lint_corpus/{path.name}:")]
    assert len(own) == 1, own  # one mistake, one finding: nothing else in the file is flagged
    assert own[0].startswith(where) and words in own[0], own[0]


def test_the_other_cases_of_the_same_run_still_execute_and_pass():
    results = {item.id: runner.run(item) for item in runner.collect(CORPUS)}
    fine = {i: r.status for i, r in results.items() if i.split("/")[1] == "fine"}
    # Every file but the one YAML cannot read keeps its valid case, and it passes.
    assert fine == {f"{p.stem}/fine/doubled": Status.PASSED for p in FILES if p.stem != "yaml_syntax"}
    others = {i: str(r.status) for i, r in results.items() if i.split("/")[1] != "fine"}
    assert others.pop("recorded/unreviewed/c") == "passed"  # only lint reports what is unreviewed
    assert others.pop("pending/draft/c") == "pending"
    for found_later in (
        "printed_shape/wrong_rows/c",
        "printed_dtype/computed_in_float64/c",
        "printed_dimensions/elided_flat/c",
    ):
        assert others.pop(found_later) == "failed", found_later  # the check run finds it too, later
    # shapes that cannot go through the called function: the reference core raises too, so the
    # case's mistake (shape_through_call), never the implementation's
    assert set(others.values()) == {"case error"}, others


def test_the_shipped_case_files_lint_clean():
    assert _lint(ROOT / "cases") == (0, ["0 errors, 0 warnings"])


def test_warnings_alone_exit_0():
    status, lines = _lint(CORPUS / "pending.yaml", CORPUS / "recorded.yaml")
    assert status == 0 and lines[-1] == "0 errors, 2 warnings"


def test_a_path_that_does_not_exist_is_an_error_at_line_1(tmp_path):
    status, lines = _lint(tmp_path / "nope.yaml")
    assert status == 1 and lines[0] == f"{tmp_path / 'nope.yaml'}:1:1: error: no such file"


def test_check_exits_1_while_an_expectation_is_pending_and_counts_it(tmp_path):
    (tmp_path / "draft.yaml").write_text((CORPUS / "pending.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    out = io.StringIO()
    status = checks.check_command(tmp_path, ["cpu"], out=out)
    table = out.getvalue().splitlines()
    assert status == 1
    assert table[0].split() == ["document", "passed", "failed", "skipped", "errors", "pending"]
    assert table[1].split()[-5:] == ["1", "0", "0", "0", "1"]
    assert "draft/draft/c [pending]" in out.getvalue()
    (tmp_path / "draft.yaml").write_text(
        (CORPUS / "pending.yaml").read_text(encoding="utf-8").replace("            pending: true\n", ""),
        encoding="utf-8",
    )
    assert checks.check_command(tmp_path, ["cpu"], out=io.StringIO()) == 0  # the mark removed: a passing check


def test_every_yaml_entry_of_a_folder_is_loaded_or_fails_with_its_reason_never_skipped(tmp_path):
    (tmp_path / "fine.yml").write_text((CORPUS / "ragged_rows.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    (tmp_path / "folder.yaml").mkdir()
    (tmp_path / "device.yaml").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.yaml")  # read, it would block: refused unopened
    (tmp_path / ".hidden.yaml").symlink_to(tmp_path / "nowhere.yaml")  # an editor's lock: left alone
    reasons = {
        "dangling": "a link that leads nowhere",
        "loop": "a link loop",
        "folder": "it is a folder",
        "device": "it is a device",
        "fifo": "it is a FIFO",
    }
    status, lines = _lint(tmp_path)
    assert status == 1 and lines[-1] == f"{len(reasons) + 1} errors, 0 warnings"
    for name, reason in reasons.items():
        assert any(line.startswith(f"{tmp_path}/{name}.yaml:1:1: error: ") and reason in line for line in lines), name
    assert any(line.startswith(f"{tmp_path}/fine.yml:12:10: error: input 'a': ragged list") for line in lines)
    items = runner.collect(tmp_path)
    assert {i.file.name for i in items if i.error is not None} == {*reasons, "fine"}
    assert [i.id for i in items if i.error is None] == ["fine/fine/doubled"]
