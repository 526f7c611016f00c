"""The tolerance rule: what a printed or full-precision expectation allows, and what it catches."""

import math

import pytest
import torch
from implementations import attention_wrong_axis, inverted_mask, no_scale, softmax_wrong_axis

from attention_core import reference
from attention_core.harness.checking import compare, runner, tolerance
from attention_core.harness.languages.tensor_text import parse_tensor

CASES = runner.default_cases_folder()
F32_EPS = torch.finfo(torch.float32).eps


def _printed(actual, text, **kw):
    return compare.compare_printed(torch.as_tensor(actual), parse_tensor(text), **kw)


def test_fixed_print_allows_half_a_unit_of_its_last_digit_plus_noise():
    allowed = 0.5e-4 + tolerance.NOISE_K * F32_EPS * 0.09
    assert _printed(torch.tensor([0.09], dtype=torch.float64) + allowed * 0.99, "tensor([0.0900])") is None
    miss = _printed(torch.tensor([0.09], dtype=torch.float64) + allowed * 1.01, "tensor([0.0900])")
    assert miss is not None and miss.stage == "values"


def test_noise_floor_scales_with_the_largest_expected_value_and_the_dtype():
    values = torch.tensor([12.9777, 0.0])
    assert tolerance.noise_floor(torch.float32, values) == pytest.approx(tolerance.NOISE_K * F32_EPS * 12.9777)
    assert tolerance.noise_floor(torch.float64, values) == pytest.approx(
        tolerance.NOISE_K * torch.finfo(torch.float64).eps * 12.9777
    )
    assert tolerance.noise_floor(torch.float32, torch.tensor([-math.inf, 2.0])) == pytest.approx(
        tolerance.NOISE_K * F32_EPS * 2.0
    )


def test_integer_mode_print_is_checked_against_the_noise_floor_not_half_a_unit():
    text = "tensor([2., 7.])"
    assert _printed(torch.tensor([2.0, 7.0 + 1e-6]), text) is None
    miss = _printed(torch.tensor([2.4, 7.0]), text)
    assert miss is not None and miss.index == (0,)
    assert _printed(torch.tensor(1e-9), "tensor(0.)") is not None  # an exact 0 in that run


def test_e_notation_allows_half_a_unit_of_the_mantissas_last_digit():
    assert _printed(torch.tensor([1.22984e-4], dtype=torch.float64), "tensor([1.2298e-04])") is None
    assert _printed(torch.tensor([1.22990e-4], dtype=torch.float64), "tensor([1.2298e-04])") is not None


def test_float32_subnormal_passes_in_float64_and_flushed_to_zero():
    text = "tensor([0.0000e+00, 3.7835e-44, 1.0000e+00])"
    as_float32 = reference.softmax(torch.tensor([100.0, 200.0, 300.0]), dim=0)
    as_float64 = reference.softmax(torch.tensor([100.0, 200.0, 300.0], dtype=torch.float64), dim=0)
    assert as_float64[1].item() == pytest.approx(3.72e-44, rel=1e-2)
    for actual in (as_float32, as_float64, torch.tensor([0.0, 0.0, 1.0])):
        assert _printed(actual, text) is None
    assert _printed(torch.tensor([0.0, 3.7835e-44, 0.9998]), text) is not None


def test_full_precision_uses_torch_testing_defaults_per_dtype():
    expected = torch.tensor([1.0, 100.0], dtype=torch.float64)
    rtol, atol = tolerance.default_tolerance(torch.float32)
    assert (rtol, atol) == (1.3e-6, 1e-5)
    near = (expected + atol * 0.9).float()
    assert compare.compare_full(near, expected) is None
    far = (expected + torch.tensor([0.0, 100 * rtol + atol * 2])).float()
    assert compare.compare_full(far, expected).index == (1,)
    assert compare.compare_full(far, expected, rtol=1e-3, atol=0.0) is None


def test_a_single_expected_number_applies_to_every_element():
    assert compare.compare_full(torch.ones(3, 4), torch.tensor(1.0, dtype=torch.float64)) is None
    assert compare.compare_full(
        torch.ones(3, 4).index_fill(1, torch.tensor([2]), 0.5), torch.tensor(1.0, dtype=torch.float64)
    ).index == (0, 2)


def test_comparison_stops_at_the_first_failing_stage():
    printed = "tensor([[1., 2.], [3., 4.]])"
    assert _printed([1.0, 2.0, 3.0, 4.0], printed).stage == "shape"
    shape = _printed(torch.zeros(2, 3), printed)
    assert shape.message == "shape does not match: (2, 3) != (2, 2) (actual != expected)"
    assert _printed(torch.tensor([[1, 2], [3, 4]]), printed).stage == "dtype"
    assert _printed(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), printed, device="cuda").stage == "device"
    assert compare.compare_printed((1, 2), parse_tensor(printed)).stage == "type"


def test_values_report_names_count_worst_index_and_allowance():
    miss = _printed(torch.tensor([[0.1, 0.2], [0.3, 0.9]]), "tensor([[0.1000, 0.2000], [0.3000, 0.4000]])")
    lines = miss.message.splitlines()
    assert lines[0] == "Values are not close!"
    assert lines[1] == "Mismatched elements: 1 / 4 (25.0%)"
    assert lines[2].startswith("Greatest absolute difference: 0.5 at index (1, 1) (up to 5.")
    assert "(1, 1)" in lines[-1] and "0.4" in lines[-1]


def test_nan_and_infinities_match_only_themselves():
    text = "tensor([nan, inf, -inf, 1.])"
    assert _printed(torch.tensor([math.nan, math.inf, -math.inf, 1.0]), text) is None
    assert _printed(torch.tensor([0.0, math.inf, -math.inf, 1.0]), text).index == (0,)
    assert _printed(torch.tensor([math.nan, -math.inf, -math.inf, 1.0]), text).index == (1,)


def _item(check_id):
    return next(i for i in runner.collect(CASES) if i.id == check_id)


def test_rounding_of_printed_inputs_is_propagated(monkeypatch):
    # Document 000 prints matmul_qk[0] to 4 decimals; scaled by 3^-0.5 and masked it misses the
    # printed scores by 7.4e-5 at (7, 7), more than half a unit: only the propagated input rounding
    # lets the right computation pass.
    item = _item("000_attention_explained/version3_p_attn/scores_masked")
    spread = runner.numerics(item)[1]["out"]
    assert 1e-5 < float(spread[7, 7]) < 1e-4
    assert runner.run(item).passed
    monkeypatch.setattr(tolerance, "PERTURBATIONS", 0)
    tolerance.NUMERICS.clear()
    try:
        result = runner.run(item)
        assert not result.passed and "at index (7, 7)" in result.report
    finally:
        tolerance.NUMERICS.clear()


@pytest.mark.parametrize(
    ("mistake", "functions", "caught_by"),
    [
        ("no 1/sqrt(d_k)", {"attention": no_scale}, "002_attention_mechanism/attention_value_T/attention_xxx"),
        ("softmax over the wrong axis", {"softmax": softmax_wrong_axis}, "001_self_attention/four_by_four/softmax"),
        (
            "attention softmax over the wrong axis",
            {"attention": attention_wrong_axis},
            "000_attention_explained/version3_p_attn/p_attn",
        ),
        ("inverted mask", {"attention": inverted_mask}, "000_attention_explained/version3_p_attn/p_attn"),
    ],
)
def test_tolerance_never_swallows_a_real_mistake(mistake, functions, caught_by):
    item = _item(caught_by)
    assert runner.run(item).passed, "the reference passes the check"
    result = runner.run(item, functions={**runner.REFERENCE, **functions})
    assert not result.passed, f"{mistake} passed {caught_by}"
    assert "Values are not close!" in result.report


def test_a_shape_expectation_accepts_a_tensor_or_its_size():
    assert compare.check_shape(torch.zeros(4, 8, 3), (4, 8, 3)) is None
    assert compare.check_shape(torch.zeros(4, 8, 3).shape, (4, 8, 3)) is None
    assert (
        compare.check_shape(torch.zeros(4, 8).shape, (4, 8, 3)).message
        == "shape does not match: (4, 8) != (4, 8, 3) (actual != expected)"
    )
    assert compare.check_shape([4, 8, 3], (4, 8, 3)).stage == "type"


def test_an_infinite_or_nan_expectation_is_met_only_by_itself():
    expected = torch.tensor([math.inf, -math.inf, math.nan], dtype=torch.float64)
    assert compare.compare_full(torch.tensor([math.inf, -math.inf, math.nan]), expected) is None
    for wrong in ([5.0, -math.inf, math.nan], [math.inf, math.nan, math.nan], [math.inf, -math.inf, 0.0]):
        assert compare.compare_full(torch.tensor(wrong), expected) is not None, wrong
    printed = parse_tensor("tensor([0., -inf])")
    assert compare.compare_printed(torch.tensor([0.0, 0.0]), printed, extra=torch.tensor([0.0, math.inf])) is not None


def test_the_noise_floor_is_measured_so_a_masking_constant_widens_nothing():
    # Document 002's additive mask holds -1e10 beside exact zeros: a floor scaled by the
    # tensor's largest value would let ±19073 through at every zero.
    item = _item("002_attention_mechanism/masked_attention/additive_mask")
    noise, _ = runner.numerics(item)
    assert noise["out"] == 0.0  # float32 and float64 agree exactly on this mask
    assert runner.run(item).passed
    mask = torch.triu(torch.ones(10, 10) * -1e10, diagonal=1)
    mask[3, 0] = -15000.0
    miss = compare.compare_printed(mask, item.check.expectations[0].printed, noise=noise["out"])
    assert miss is not None and miss.index == (3, 0)


def test_the_measured_floor_keeps_small_e_notation_values_tight():
    item = _item("001_self_attention/four_by_four/softmax")
    noise, _ = runner.numerics(item)
    allowed = tolerance.printed_allowance(item.check.expectations[0].printed, torch.float32, noise=noise["out"])
    assert 5e-9 < float(allowed[0]) < 5e-7  # 1.2298e-04: half a unit is 5e-9, the floor adds about 4e-7
    assert float(allowed[0]) < tolerance.noise_floor(torch.float32, torch.tensor([1.0])) / 4


def test_an_element_the_reference_got_exact_still_allows_one_rounding_at_the_tensors_scale():
    printed = parse_tensor("tensor([0.0000e+00, 1.0000e+00])")
    allowed = tolerance.printed_allowance(printed, torch.float32, noise=0.0)
    assert float(allowed[0]) >= F32_EPS * 1.0  # a cancellation to 0 may come out as ±1 ulp of 1.0 elsewhere
    assert float(allowed[0]) < 2 * F32_EPS


def test_the_relative_difference_is_reported_against_non_zero_expected_values_only():
    expected = torch.tensor([0.0, 1.0], dtype=torch.float64)
    only_zero = compare.compare_full(torch.tensor([0.5, 1.0]), expected).message
    assert "Greatest relative difference: none (every mismatched element expects 0" in only_zero
    both = compare.compare_full(torch.tensor([0.5, 2.0]), expected).message
    assert "Greatest relative difference: 1 at index (1,)" in both


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("tolerances", [{}, {"rtol": 0.0, "atol": 1e-12}], ids=["default", "under-spacing"])
def test_a_large_comparison_decides_exactly_as_the_float64_rule_at_every_step_around_its_allowance(dtype, tolerances):
    """A large comparison takes its allowance block by block (never whole): a value must meet
    ``|actual - expected| <= allowed`` in float64 exactly as the whole rule says, to the last step of the dtype."""
    g = torch.Generator().manual_seed(3)
    n = 2 * compare.LARGE + 5  # (blocks, and a last one cut short)
    magnitudes = 10.0 ** torch.randint(-6, 4, (n,), generator=g).double()
    expected = torch.randn(n, generator=g, dtype=torch.float64) * magnitudes
    allowed = tolerance.full_allowance(expected, dtype, tolerances.get("rtol"), tolerances.get("atol"))
    for sign in (-1.0, 1.0):
        edge = (expected + sign * allowed).to(dtype)
        for steps in range(-3, 4):  # from three steps inside the allowance to three outside
            actual = edge
            toward = torch.full_like(edge, sign * torch.inf if steps > 0 else -sign * torch.inf)
            for _ in range(abs(steps)):
                actual = torch.nextafter(actual, toward)
            meets = (actual.double() - expected).abs() <= allowed
            for picked in (meets, ~meets):  # the elements that meet the rule, then those that do not
                if not bool(picked.any()):
                    continue
                one = torch.where(picked, actual, expected.to(dtype))
                rule = bool(((one.double() - expected).abs() <= allowed).all())
                assert (compare.compare_full(one, expected, **tolerances) is None) == rule, (sign, steps)


def test_a_failed_large_comparison_keeps_only_the_values_it_compared_and_reports_the_whole():
    """A failed comparison of millions of elements keeps, until its report is read, what the report and the
    pictures need: the values it compared (the actual ones in their own dtype, not a float64 copy, and the expected
    ones), not its temporaries (the differences, their ratios, the mismatch mask) nor its allowance (as large as
    the expected values in float64: made again when read). A grader holds such failures for a whole submission, and
    caches some. The actual values are its own: the caller writing into its tensor later changes no report."""
    g = torch.Generator().manual_seed(5)
    expected = torch.randn(4, compare.LARGE, generator=g, dtype=torch.float64)
    actual = (expected * (1 + 1e-3 * torch.randn(expected.shape, generator=g, dtype=torch.float64))).float()
    mismatch = compare.compare_full(actual, expected)
    cells = [cell.cell_contents for cell in mismatch.report.__closure__]
    held = {value.untyped_storage().data_ptr() for value in cells if isinstance(value, torch.Tensor)}
    assert held <= {t.untyped_storage().data_ptr() for t in (mismatch.actual, mismatch.expected)}
    assert mismatch.actual.dtype == torch.float32 and torch.equal(mismatch.actual, actual.reshape(-1))
    assert mismatch.actual.untyped_storage().data_ptr() != actual.untyped_storage().data_ptr()
    assert not isinstance(mismatch.allowed, torch.Tensor)
    assert torch.equal(mismatch.allowance, tolerance.full_allowance(expected, torch.float32).reshape(-1))
    # The worst element, found block by block, is the whole comparison's first greatest ratio; the report, made
    # when read, counts what one pass over the whole counts.
    allowed = tolerance.full_allowance(expected, torch.float32)
    ratio = ((actual.double() - expected).abs() / allowed).reshape(-1)
    ratio = ratio.masked_fill(ratio <= 1, 0.0)
    worst = int(ratio.argmax())
    assert mismatch.index == (worst // compare.LARGE, worst % compare.LARGE)
    assert mismatch.ratio == float(ratio[worst]) > 1
    actual.zero_()  # (the caller's tensor, written after the comparison: the report is of what was compared)
    assert f"Mismatched elements: {int((ratio > 0).sum())} / {ratio.numel()} " in mismatch.message


def test_a_cache_of_failed_results_counts_what_their_failures_keep():
    from attention_core.grading.naming.kept import Kept, nbytes  # noqa: PLC0415
    from attention_core.harness.checking.results import Failure, Result, Status  # noqa: PLC0415

    expected = torch.zeros(compare.LARGE, dtype=torch.float64)
    failed = compare.compare_full(torch.ones(compare.LARGE), expected)
    result = Result(Status.FAILED, "c", "f.yaml:1", failures=(Failure("out", 1, failed, (compare.LARGE,)),))
    assert nbytes(result) >= failed.actual.untyped_storage().nbytes() > 0  # (empty outputs: the failure's own values)
    cache = Kept(most_bytes=nbytes(result) * 2)
    for key in range(4):
        cache.get(key, lambda: result)
    assert len(cache) == 2 and cache.bytes <= cache.most_bytes


def test_a_nan_in_a_large_comparison_s_allowance_hides_no_mismatch_further_on():
    """The worst element is found block by block, each block in the branch the whole comparison takes: a NaN
    allowance (no allowance) early on, where the value matches, and a NaN result in a later block: the NaN result is
    the worst (its difference is infinite), as one pass over the whole finds it."""
    n = 3 * compare.BLOCK + 1
    expected = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    actual = expected.clone()
    actual[n - 3] = float("nan")
    allowed = torch.full((n,), 1e-5, dtype=torch.float64)
    allowed[7] = float("nan")
    mismatch = compare.compare_values(actual, expected, allowed, (n,), finite=True)
    assert mismatch.index == (n - 3,) and mismatch.ratio == math.inf
    assert "Mismatched elements: 1 / " in mismatch.message
