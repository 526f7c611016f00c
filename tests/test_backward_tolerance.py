"""The backward check's allowance: from the implementation's own rounding, so every correct style passes.

A gradient is held to the float64 route's within the dtype's default widened by GRADIENT_K times the
larger of the route's own rounding and its change under a relative ±eps move of the inputs
(``harness/checking/tolerance.py``). Correct styles whose rounding differs from the route's (softmax through
``logsumexp``, through ``log_softmax``, in float64 then cast back) keep every backward point; a
gradient-only mistake still loses them.
"""

from pathlib import Path

import pytest

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
