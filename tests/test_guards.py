"""Guards a user relies on without seeing them: each test fails when its guard is switched off."""

import textwrap

import torch

from attention_core import cli
from attention_core.harness.checking import runner
from attention_core.harness.plugin.snapshot import FULL_LIMIT, TensorSnapshotExtension, summary_guarantee

EXT = TensorSnapshotExtension()


def _cases(folder, body, name="guard.yaml"):
    """Write one case file of ``body`` (the cases list) and return its checks by id."""
    text = "document: {title: Guards}\ncases:\n" + textwrap.indent(textwrap.dedent(body), "  ")
    (folder / name).write_text(text, encoding="utf-8")
    return {item.id.rsplit("/", 1)[1]: item for item in runner.collect(folder)}


def _failure(folder, body, *, passing, failing):
    """Write the cases of ``body``: check ``passing`` must pass; the report of ``failing``, which must fail."""
    checks = _cases(folder, body)
    passed = runner.run(checks[passing])
    assert passed.passed, passed.report
    result = runner.run(checks[failing])
    assert not result.passed
    return result.report


# softmax([1, 2]) = [0.2689, 0.7311]; over the columns of [[1, 2], [3, 4]] it is [[0.1192, 0.1192], [0.8808, 0.8808]].
ERRATA = """\
- id: errata
  inputs:
    x: [[1.0, 2.0], [3.0, 4.0]]
  checks:
    - id: live
      call: softmax(x, dim=0)
      erratum:
        note: the document took the softmax over the columns
        differs: softmax(x, dim=-1)
      expect:
        out: tensor([[0.1192, 0.1192], [0.8808, 0.8808]])
    - id: stale
      call: softmax(x, dim=0)
      erratum:
        note: said to be a slip, but the correct computation gives the same
        differs: softmax(x, dim=0)
      expect:
        out: tensor([[0.1192, 0.1192], [0.8808, 0.8808]])
"""


def test_an_erratum_whose_correct_computation_reproduces_the_print_is_stale(tmp_path):
    report = _failure(tmp_path, ERRATA, passing="live", failing="stale")
    assert "erratum is stale: the correct computation `softmax(x, dim=0)` reproduces the printed values" in report


CLI_CASE = """\
- id: cli
  inputs:
    x: [1.0, 2.0, 3.0]
  checks:
    - id: softmax
      call: softmax(x, dim=0)
      expect:
        out: tensor([0.0900, 0.2447, 0.6652])
"""


def test_the_command_line_exits_1_when_a_check_fails_and_0_when_all_pass(tmp_path, capsys):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    _cases(good, CLI_CASE)
    _cases(bad, CLI_CASE.replace("0.6652", "0.6653"))
    assert cli.main(["--cases", str(good), "--device", "cpu"]) == 0
    capsys.readouterr()
    assert cli.main(["--cases", str(bad), "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "FAILED " in out and "guard.yaml:7: guard/cli/softmax" in out


ELIDED = """\
- id: elided
  checks:
    - id: long_enough
      expr: ones(1000)
      expect:
        out: tensor([1., 1., 1., ..., 1., 1., 1.])
    - id: too_short
      expr: ones(5)
      expect:
        out: tensor([1., 1., 1., ..., 1., 1., 1.])
"""


def test_an_elided_print_needs_every_position_it_shows(tmp_path):
    # ones(5) holds every value shown, at 0..2 and -3..-1: only counting the positions tells
    # that a print with '...' between three and three elements came from at least six.
    report = _failure(tmp_path, ELIDED, passing="long_enough", failing="too_short")
    assert "out (line 12): shape (5,) is too small for the printed tensor: dimension 0 shows 6 positions" in report


WIDENED = """\
- id: widened
  inputs:
    x: [0.5, 0.25]
  checks:
    - id: printed_only
      expr: x + 0.0004
      expect:
        out: tensor([0.5000, 0.2500])
    - id: printed_with_tolerance
      expr: x + 0.0004
      expect:
        out: {printed: "tensor([0.5000, 0.2500])", rtol: 0, atol: 1.0e-3}
    - id: printed_with_too_little
      expr: x + 0.0004
      expect:
        out: {printed: "tensor([0.5000, 0.2500])", rtol: 1.0e-3, atol: 0}
"""


def test_rtol_and_atol_widen_a_printed_expectation(tmp_path):
    report = _failure(tmp_path, WIDENED, passing="printed_with_tolerance", failing="printed_only")
    assert "Mismatched elements: 2 / 2" in report
    # rtol 1e-3 adds 5e-4 at 0.5 and 2.5e-4 at 0.25 to half a unit (5e-5): the widening is per element.
    report = runner.run(_cases(tmp_path, WIDENED)["printed_with_too_little"]).report
    assert "Mismatched elements: 1 / 2" in report and "at index (1,)" in report


def test_a_summarised_slice_catches_a_change_of_its_largest_magnitude():
    value = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(3)) * 0.5
    peak = (1, 2, 40, 7)
    value[peak] = 0.9  # the one largest |x| of slice [1, 2]
    text = EXT.serialize({"out": value})
    assert value.numel() > FULL_LIMIT and "summary:" in text
    assert f"[{', '.join(map(str, peak))}]" not in text  # not a sampled element
    moved = value.clone()
    moved[peak] = 0.91
    # The sums move by 0.01, well inside their tolerance: only the max |x| of the slice can tell.
    assert 0.01 < summary_guarantee(value) / 2
    assert not EXT.matches(serialized_data=EXT.serialize({"out": moved}), snapshot_data=text)
    report = "\n".join(EXT.diff_lines(EXT.serialize({"out": moved}), text))
    assert "slice [1, 2]: max|x| 0.91" in report
