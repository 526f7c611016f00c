"""Graded checks in float16 and bfloat16, against a float64 golden from torch's own functions.

The allowed error is set the way FlashAttention's tests set it: K times the error of plain
torch in the same dtype against the same golden, plus an absolute floor of one unit in the
last place at the golden's largest magnitude (their issue #1231: where plain torch happens to
be exact, a bound of K * 0 would fail a correct result one rounding away).
"""

from types import SimpleNamespace

import pytest
import torch

from attention_core.harness.checking import calls, runner, tolerance, torch_route


def _call(item, scope, functions, device, dtype):
    outputs = calls.call(
        item.check, item.check.expr, scope, functions, device, item.case, reference=runner.REFERENCE, dtype=dtype
    )
    return {name: value for name, value in outputs.items() if isinstance(value, torch.Tensor)}


def _max_error(value, golden):
    diff = (value.detach().to("cpu", torch.float64) - golden).abs()
    both_inf = torch.isinf(golden) & (value.detach().cpu().to(torch.float64) == golden)
    return float(torch.where(both_inf | (golden.isnan() & diff.isnan()), torch.zeros_like(diff), diff).max())


def _widened(value):
    """``value`` on the CPU with every floating tensor in float64, those inside a record too.

    A record is an input with named tensors, such as a ``linear`` draw (``.weight``, ``.bias``).
    """
    if isinstance(value, torch.Tensor):
        return value.to("cpu", torch.float64) if value.is_floating_point() else value.cpu()
    if isinstance(value, SimpleNamespace):
        return SimpleNamespace(**{name: _widened(v) for name, v in vars(value).items()})
    return value


def test_low_precision_matches_float64_golden(graded_check, low_dtype, device):
    """Each output of a graded check in ``low_dtype`` is as close to the float64 golden as plain torch's.

    ``graded_check`` (a graded ``call`` check), ``low_dtype`` (float16 or bfloat16) and ``device``
    are parametrised by the plugin from the case folder (``--cases``, ``--device``).
    """
    scope = runner.materialise(graded_check.case, device=device, dtype=low_dtype)
    wide = {name: _widened(value) for name, value in scope.items()}
    golden = _call(graded_check, wide, torch_route.FUNCTIONS, "cpu", torch.float64)
    plain = _call(graded_check, scope, torch_route.FUNCTIONS, device, low_dtype)
    ours = _call(graded_check, scope, runner.REFERENCE, device, low_dtype)
    assert ours.keys() == golden.keys()
    if not any(v.dtype == low_dtype for v in ours.values()):
        pytest.skip(
            f"no output in {low_dtype} (`{graded_check.check.expr.source}` returns "
            f"{', '.join(sorted({str(v.dtype) for v in ours.values()}))})"
        )
    for name, expected in golden.items():
        if not expected.is_floating_point():
            assert torch.equal(ours[name].cpu(), expected), name
            continue
        assert ours[name].dtype == low_dtype, f"{name}: computed in {ours[name].dtype}"
        plain_error = _max_error(plain[name], expected)
        allowed = tolerance.low_precision_allowance(plain_error, expected, low_dtype)
        error = _max_error(ours[name], expected)
        assert error <= allowed, (
            f"{graded_check.id} {name} in {low_dtype}: error {error:.3g} against the float64 "
            f"golden exceeds {allowed:.3g} ({tolerance.LOW_PRECISION_K} x plain torch's "
            f"{plain_error:.3g} + one ulp)"
        )


def test_the_bound_catches_a_real_mistake_in_low_precision():
    item = next(
        i for i in runner.collect(runner.default_cases_folder()) if i.id == "001_self_attention/four_by_four/softmax"
    )
    scope = runner.materialise(item.case, dtype=torch.bfloat16)
    golden = _call(item, {k: v.double() for k, v in scope.items()}, torch_route.FUNCTIONS, "cpu", torch.float64)["out"]
    plain = _call(item, scope, torch_route.FUNCTIONS, "cpu", torch.bfloat16)["out"]
    wrong = _call(
        item, scope, {**runner.REFERENCE, "softmax": lambda x, dim=-1: torch.softmax(x, dim=0)}, "cpu", torch.bfloat16
    )["out"]
    assert _max_error(wrong, golden) > tolerance.low_precision_allowance(
        _max_error(plain, golden), golden, torch.bfloat16
    )
