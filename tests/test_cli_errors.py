"""A command-line mistake is one line that says what to do, said before any work starts."""

import torch

from attention_core.harness.languages import expr
from attention_core.harness.reading import yaml_lines
from attention_core.harness.reading.cases import CaseError
from tests.outputs import command


def cli(*args, cwd=None):
    """The command line's exit code and what it printed (run in this process: the same code as
    ``python -m attention_core``)."""
    return command(*args, cwd=cwd)


def _one_line(run):
    lines = run.stderr.strip().splitlines()
    return len(lines) == 1 and "Traceback" not in run.stderr and lines[0].startswith(("error:", "python -m"))


def test_an_html_report_into_a_missing_folder_is_refused_before_any_check_runs(tmp_path):
    run = cli("--html", tmp_path / "nowhere" / "r.html")
    assert run.returncode == 2 and _one_line(run) and "is not a folder this user can write to" in run.stderr
    assert "passed" not in run.stdout  # (no check ran)


def test_grading_into_a_place_that_cannot_be_written_is_refused_at_once(tmp_path):
    (tmp_path / "s.py").write_text("def softmax(x, dim=-1):\n    return x\n")
    run = cli("grade", tmp_path / "s.py", "--out", "/proc/nope")
    assert run.returncode == 2 and _one_line(run) and "--out /proc/nope: cannot write there" in run.stderr
    assert run.stdout == ""  # (no submission was graded: no score line)


def test_a_misspelt_option_gets_the_nearest_one(tmp_path):
    run = cli("grade", "x.py", "--out", tmp_path, "--jobz", "2")
    assert run.returncode == 2 and _one_line(run) and "did you mean --jobs?" in run.stderr


def test_an_abbreviated_option_is_refused_not_taken_for_the_one_it_begins(tmp_path):
    run = cli("check", "--verbos")
    assert run.returncode == 2 and _one_line(run) and "did you mean --verbose?" in run.stderr
    run = cli("grade", "x.py", "--out", tmp_path, "--regrad")
    assert run.returncode == 2 and _one_line(run) and "did you mean --regrade?" in run.stderr


def test_new_on_an_existing_file_suggests_nothing_the_command_lacks(tmp_path):
    (tmp_path / "x.yaml").write_text("")
    run = cli("new", "--cases", tmp_path, "x")
    assert run.returncode == 2 and "--force" not in run.stderr and "choose another name" in run.stderr


def test_sin_and_cos_make_positional_encodings():
    pe = expr.parse("sin(arange(4) * 1.0)").evaluate({}, dtype=torch.float64)
    assert torch.equal(pe, torch.sin(torch.arange(4) * 1.0))
    assert expr.parse("cos(0.0)").evaluate({}) == 1.0


def test_a_tab_in_a_case_file_is_named_in_the_message():
    try:
        yaml_lines.parse("cases:\n\t- id: x\n")
    except CaseError as err:
        assert "found character '\\t' (a tab: YAML indents with spaces)" in err.message and err.line == 2
    else:
        raise AssertionError("a tab must not load")


def test_a_seeded_case_the_reference_fails_says_what_its_seed_draws_first(tmp_path):
    from attention_core.harness.checking import runner  # noqa: PLC0415

    (tmp_path / "s.yaml").write_text(
        "document: {title: T}\ncases:\n  - id: c\n    seed: 41\n    inputs: {x: {randn: [4, 8, 2]}}\n"
        '    checks:\n      - id: k\n        expr: x[0, 0]\n        expect: {out: "tensor([1.9269, 1.4873])"}\n'
    )
    (item,) = runner.collect(tmp_path)
    result = runner.run(item)
    assert result.status.value == "failed"
    first = torch.Generator().manual_seed(41)
    begins = ", ".join(f"{v:.4f}" for v in torch.randn(4, 8, 2, generator=first).reshape(-1)[:3].tolist())
    assert f"the case draws from seed 41: its first draw, x, begins [{begins}, ...]" in result.message
    (tmp_path / "s.yaml").write_text((tmp_path / "s.yaml").read_text().replace("seed: 41", "seed: 42"))
    (item,) = runner.collect(tmp_path)
    assert runner.run(item).passed  # the document's own seed: the README's seed-42 value
    for expect in ("tensor([1.9269, 1.4874])", "tensor([1.9269, 1.4873, 0.9007])"):  # a digit off; a shape
        text = (tmp_path / "s.yaml").read_text()
        (tmp_path / "s.yaml").write_text(text.split("expect: {out: ")[0] + f'expect: {{out: "{expect}"}}\n')
        (item,) = runner.collect(tmp_path)
        result = runner.run(item)
        assert result.status.value == "failed" and "draws from seed" not in result.message, (expect, result.message)
