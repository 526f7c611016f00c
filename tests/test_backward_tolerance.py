"""The backward check's allowance: from the implementation's own rounding, so every correct style passes.

A gradient is held to the float64 route's within the dtype's default widened by GRADIENT_K times the
larger of the route's own rounding and its change under a relative ±eps move of the inputs
(``harness/checking/tolerance.py``). Correct styles whose rounding differs from the route's (softmax through
``logsumexp``, through ``log_softmax``, in float64 then cast back) keep every backward point; a
gradient-only mistake still loses them.
"""

from pathlib import Path

import pytest
import torch

from attention_core import reference
from attention_core.grading.judging.grader import Grader
from attention_core.harness.checking import tolerance

pytestmark = pytest.mark.grading

SOFTMAX = """    shift = x.amax(dim=dim, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(x - shift)
    return e / e.sum(dim=dim, keepdim=True)"""
STYLES = {
    "logsumexp": "    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))",
    "log_softmax": "    return torch.log_softmax(x, dim=dim).exp()",
    "float64_inside": "    return torch.softmax(x.double(), dim=dim).to(x.dtype)",
}


def _submission(folder, name, body):
    source = Path(reference.__file__).read_text(encoding="utf-8")
    assert SOFTMAX in source
    path = folder / f"{name}.py"
    path.write_text(source.replace(SOFTMAX, body), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("styles")
    paths = [_submission(folder, name, body) for name, body in STYLES.items()]
    detached = (
        Path(reference.__file__)
        .read_text(encoding="utf-8")
        .replace("weights = softmax(scores, dim=-1)", "weights = softmax(scores, dim=-1).detach()")
    )
    assert "detach()" in detached
    (folder / "detached.py").write_text(detached, encoding="utf-8")
    with Grader() as grader:
        return {g.name: g for g in grader.grade_each([*paths, folder / "detached.py"])}


@pytest.mark.parametrize("style", STYLES)
def test_a_correct_style_with_its_own_rounding_keeps_every_backward_point(graded, style):
    lost = [g.check_id for g in graded[style].grades if g.score < g.max_score]
    assert lost == [] and graded[style].score == graded[style].max_score


def test_a_gradient_only_mistake_still_loses_backward_points_and_no_value_point(graded):
    lost = [g.check_id for g in graded["detached"].grades if g.score < g.max_score]
    assert lost and all(check.endswith("/backward") for check in lost)


def test_the_allowance_grows_with_the_measured_noise_by_the_documented_factor():
    rtol, atol = tolerance.gradient_tolerance(tolerance.torch.float32, 1e-6)
    base_rtol, base_atol = tolerance.default_tolerance(tolerance.torch.float32)
    assert rtol == base_rtol and atol == pytest.approx(base_atol + tolerance.GRADIENT_K * 1e-6)


# ------------------------------------------------------------------ a table made from no data (RoPE's cos and sin)

ROPE_REFERENCE = '''"""RoPE by rotating halves: ``cos`` and ``sin`` hold each angle twice, once for each half."""

import torch


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
'''
ROPE_CASES = """\
document: {title: rotary tables}
cases:
  - id: tables
    seed: 3
    inputs:
      x: {randn: [2, 4, 8]}
      base: 10000.0
      angles: {expr: "arange(4)[:, None] * (1.0 / base ** (arange(0, 8, 2) / 8))[None, :]"}
      cos: {expr: "cos(cat((angles, angles), -1))"}
      sin: {expr: "sin(cat((angles, angles), -1))"}
    checks:
      - id: rotated
        call: apply_rope(x, cos, sin)
        expect:
          out: {oracle: "x * cos + cat((-x[..., 4:], x[..., :4]), -1) * sin"}
"""


def _pasted(values):
    """A table as a person pastes it from a notebook's print: its values written out (data, to the case)."""
    return "[" + ", ".join("[" + ", ".join(f"{v:.4f}" for v in row) + "]" for row in values.tolist()) + "]"


_ANGLES = torch.arange(4.0)[:, None] * (1.0 / 10000.0 ** (torch.arange(0, 8, 2) / 8))[None, :]
ROPE_CASES += f"""\
  - id: pasted
    seed: 4
    inputs:
      x: {{randn: [4, 8]}}
      cos: {_pasted(torch.cat((_ANGLES, _ANGLES), -1).cos())}
      sin: {_pasted(torch.cat((_ANGLES, _ANGLES), -1).sin())}
    checks:
      - id: rotated
        call: apply_rope(x, cos, sin)
        expect:
          out: {{oracle: "x * cos + cat((-x[..., 4:], x[..., :4]), -1) * sin"}}
"""
ROPE_STYLES = {
    # Correct by the tables' convention: each angle read once, from the first half, as a complex rotation.
    "complex_halves": """import torch


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    turn = torch.complex(cos[..., :half], sin[..., :half])
    pairs = torch.complex(x[..., :half], x[..., half:]) * turn
    return torch.cat((pairs.real, pairs.imag), dim=-1)
""",
    # Wrong: no gradient reaches the tables (what a table's gradients still catch).
    "tables_detached": ROPE_REFERENCE.replace("x * cos + rotated * sin", "x * cos.detach() + rotated * sin.detach()"),
}


@pytest.fixture(scope="module")
def rope(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rope")
    (folder / "assignment" / "cases").mkdir(parents=True)
    (folder / "assignment" / "reference.py").write_text(ROPE_REFERENCE, encoding="utf-8")
    (folder / "assignment" / "cases" / "rope.yaml").write_text(ROPE_CASES, encoding="utf-8")
    paths = []
    for name, source in {"reference": ROPE_REFERENCE, **ROPE_STYLES}.items():
        paths.append(folder / f"{name}.py")
        paths[-1].write_text(source, encoding="utf-8")
    with Grader(assignment=folder / "assignment") as grader:
        return {g.name: {grade.check_id: grade for grade in g.grades} for g in grader.grade_each(paths)}


def test_a_table_made_from_no_data_is_held_to_the_gradients_that_keep_its_equal_entries_equal(rope):
    """``cos`` and ``sin`` come from ``arange`` and a number alone, each angle twice: a style that reads each once
    keeps every point; one that cuts the tables off autograd still loses its backward point."""
    backward = "rope/tables/rotated/backward"
    for name in ("reference", "complex_halves"):
        assert rope[name]["rope/tables/rotated"].score == rope[name]["rope/tables/rotated"].max_score > 0, name
        assert rope[name][backward].score == rope[name][backward].max_score > 0, (name, rope[name][backward].result)
    detached = rope["tables_detached"]
    assert detached["rope/tables/rotated"].score > 0 and detached[backward].score == 0
    assert "d/d`cos`" in str(detached[backward].result.failures), detached[backward].result


def test_entries_merely_equal_are_no_table_and_their_gradients_are_checked_element_by_element(tmp_path):
    """An identity pasted as a weight (its 0s and 1s equal, never copies of a block): a weight used transposed,
    right values on it, still loses the backward point; and a LayerNorm's printed ones and zeros hold a scalar gain
    to its own gradients."""
    reference = "import torch\n\n\ndef project(x, w, g, b):\n    return x @ w * g + b\n"
    (tmp_path / "a" / "cases").mkdir(parents=True)
    (tmp_path / "a" / "reference.py").write_text(reference, encoding="utf-8")
    (tmp_path / "a" / "cases" / "p.yaml").write_text(
        "document: {title: t}\ncases:\n  - id: p\n    seed: 3\n    inputs:\n      x: {randn: [4, 3]}\n"
        "      w: [[1., 0., 0.], [0., 1., 0.], [0., 0., 1.]]\n      g: [1., 1., 1.]\n      b: [0., 0., 0.]\n"
        "    checks:\n      - id: out\n        call: project(x, w, g, b)\n        expect:\n"
        '          out: {oracle: "x @ w * g + b"}\n',
        encoding="utf-8",
    )
    wrong = {"transposed": "x @ w.T * g + b", "scalar_gain": "x @ w * g[0] + b[0]"}
    for name, body in wrong.items():
        (tmp_path / f"{name}.py").write_text(reference.replace("x @ w * g + b", body), encoding="utf-8")
    with Grader(assignment=tmp_path / "a") as grader:
        graded = dict(zip(wrong, grader.grade_each([tmp_path / f"{name}.py" for name in wrong])))
    for name, one in graded.items():
        grades = {g.check_id: g for g in one.grades}
        assert grades["p/p/out"].score == grades["p/p/out"].max_score > 0, name
        assert grades["p/p/out/backward"].score == 0, (name, grades["p/p/out/backward"].result)


def test_a_table_pasted_as_printed_is_read_where_its_repeats_can_be_told_apart(rope):
    """The same tables written out, as a teacher pastes a print: data to the case, each angle still twice. A style
    that reads each once keeps every point there too; the tables cut off autograd still lose theirs."""
    backward = "rope/pasted/rotated/backward"
    for name in ("reference", "complex_halves"):
        assert rope[name][backward].score == rope[name][backward].max_score > 0, (name, rope[name][backward].result)
    detached = rope["tables_detached"]
    assert detached["rope/pasted/rotated"].score > 0 and detached[backward].score == 0
    assert "d/d`cos`" in str(detached[backward].result.failures), detached[backward].result
