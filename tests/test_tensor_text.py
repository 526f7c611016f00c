"""Tests of the parser of torch's printed tensor form (attention_core.harness.languages.tensor_text)."""

import dataclasses
import itertools
import math
import re
import zlib

import pytest
import torch

from attention_core.harness.languages.tensor_text import (
    PrintedTensor,
    TensorTextError,
    looks_like_size,
    parse_size,
    parse_tensor,
)

# A notebook's print of a 22 x 64 tensor: 3 head and 3 tail rows and columns.
DOC_22x64 = """\
tensor([[-1.1065,  1.2682,  0.3147,  ...,  0.4466, -0.8970,  0.1009],
        [-0.2582, -2.0407, -0.8016,  ...,  0.1132,  0.8365,  0.0285],
        [ 0.3277, -0.8331, -1.6179,  ..., -1.7984, -0.6822, -0.5191],
        ...,
        [-1.0693,  0.4660,  0.7012,  ...,  2.7196,  0.4816,  0.2409],
        [-1.4284,  0.5617,  0.7701,  ..., -1.3574, -1.1745, -0.5126],
        [ 0.5146,  0.9938, -0.2587,  ...,  1.2774, -1.4596, -2.1595]])"""

# Document 001: a 3-D print that the notebook export cut off inside a block.
DOC_001_CUT = """\
tensor([[[1.2298e-04, 2.4596e-04, 3.6893e-04, 4.9191e-04, 2.4596e-04],
         [5.1091e-12, 1.0218e-11, 1.5327e-11, 2.0436e-11, 1.0218e-11]],

        [[1.9930e+00, 9.9650e+00, 2.9895e+00, 1.2954e+01, 8.9685e+00],
         [2.0000e+00, 1.0000e+01, 3.0000e+00, 1.3000e+01, 9.0000e+00],
"""

CORNERS_3 = [0, 1, 2, -3, -2, -1]


@pytest.fixture
def print_options():
    """Lets a test change torch's print options; the defaults come back afterwards."""
    yield torch.set_printoptions
    torch.set_printoptions(profile="default", sci_mode=None)


def corners(edge, ndim):
    """The multi-indices torch shows of an elided tensor, in print order."""
    side = list(range(edge)) + list(range(-edge, 0))
    return [list(position) for position in itertools.product(side, repeat=ndim)]


def assert_matches(printed: PrintedTensor, t: torch.Tensor):
    """Every shown element agrees with `t` at its position, within half a printed unit."""
    assert printed.ndim == t.dim()
    expected = t[tuple(printed.index.T)] if t.dim() else t.reshape(1)
    expected = expected.to(torch.float64)
    values, half = printed.values, printed.unit / 2
    assert torch.equal(torch.isnan(expected), torch.isnan(values))
    finite = torch.isfinite(expected)
    slack = 1e-12 * expected[finite].abs() + 1e-300
    assert torch.all((values[finite] - expected[finite]).abs() <= half[finite] + slack)
    exact = ~torch.isnan(expected) & (printed.unit == 0)
    assert torch.equal(values[exact], expected[exact])


# --- forms -------------------------------------------------------------------------------


def test_zero_dim_integer_mode():
    p = parse_tensor("tensor(0.)")
    assert (p.kind, p.ndim, p.shape, p.notation) == ("float", 0, (), "integer")
    assert p.index.shape == (1, 0) and p.index.dtype == torch.int64
    assert p.values.tolist() == [0.0] and p.unit.tolist() == [0.0]
    assert p.dense().shape == () and p.dense().item() == 0.0
    assert (p.elided, p.partial, p.dtype, p.device, p.requires_grad, p.grad_fn) == (
        False,
        False,
        None,
        None,
        False,
        None,
    )


def test_zero_dim_with_grad_fn():
    p = parse_tensor("tensor(1.0050, grad_fn=<StdBackward0>)")
    assert p.values.tolist() == [1.005]
    assert p.unit.tolist() == [1e-4]
    assert p.grad_fn == "StdBackward0"
    assert p.notation == "fixed"
    assert p.requires_grad is False


def test_zero_dim_int_and_bool():
    p = parse_tensor("tensor(3, dtype=torch.int32)")
    assert (p.kind, p.notation, p.dtype, p.values.tolist()) == ("int", "int", "int32", [3.0])
    p = parse_tensor("tensor(True)")
    assert (p.kind, p.notation, p.values.tolist()) == ("bool", "bool", [1.0])
    p = parse_tensor("tensor(-7)")
    assert p.values.tolist() == [-7.0]


def test_one_dim():
    p = parse_tensor("tensor([1., 2.])")
    assert (p.kind, p.ndim, p.shape, p.notation) == ("float", 1, (2,), "integer")
    assert p.index.tolist() == [[0], [1]]
    assert p.dense().tolist() == [1.0, 2.0]
    assert p.dense().dtype == torch.float64


def test_one_dim_wrapped_over_lines():
    text = """tensor([0.9224, 0.8655, 0.1928, 0.1369, 0.1762, 0.0460, 0.2518, 0.8401, 0.1736,
        0.8578, 0.2376, 0.2325])"""
    p = parse_tensor(text)
    assert p.shape == (12,)
    assert p.values[9].item() == 0.8578 and p.values[-1].item() == 0.2325


def test_two_dim():
    p = parse_tensor("tensor([[ 1.8933, -0.3887],\n        [ 0.2698,  0.0001]])")
    assert p.shape == (2, 2)
    assert p.index.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert p.dense().tolist() == [[1.8933, -0.3887], [0.2698, 0.0001]]


def test_three_dim_with_blank_lines():
    text = """tensor([[[ 1.,  2.],
         [ 3.,  4.]],

        [[ 5.,  6.],
         [ 7., -8.]],

        [[ 9., 10.],
         [11., 12.]]])"""
    p = parse_tensor(text)
    assert (p.ndim, p.shape, p.notation) == (3, (3, 2, 2), "integer")
    assert p.dense()[1, 1, 1].item() == -8.0
    assert p.index[-1].tolist() == [2, 1, 1]


def test_four_dim_from_torch():
    t = torch.arange(48, dtype=torch.float32).reshape(2, 3, 2, 4) / 7
    p = parse_tensor(repr(t))
    assert p.shape == (2, 3, 2, 4) and p.ndim == 4
    assert "\n\n\n" in repr(t)
    assert_matches(p, t)
    assert torch.allclose(p.dense(), t.double(), atol=0.5e-4)


def test_five_dim_from_torch():
    t = torch.arange(32).reshape(2, 2, 2, 2, 2)
    p = parse_tensor(str(t))
    assert p.kind == "int" and p.shape == (2, 2, 2, 2, 2)
    assert torch.equal(p.dense(), t.double())


def test_surrounding_whitespace():
    p = parse_tensor("\n\n   tensor([1.5000, -2.2500])  \n\t")
    assert p.values.tolist() == [1.5, -2.25]


def test_parameter_prefix():
    text = repr(torch.nn.Parameter(torch.tensor([[0.25, 0.5], [1.0, 2.0]])))
    assert text.startswith("Parameter containing:\n")
    p = parse_tensor(text)
    assert p.requires_grad is True
    assert p.dense().tolist() == [[0.25, 0.5], [1.0, 2.0]]
    p = parse_tensor("Parameter containing:\ntensor([1., 2.])")
    assert p.requires_grad is True


# --- numbers, units, notation --------------------------------------------------------------


@pytest.mark.parametrize(
    "token, unit",
    [
        ("0.0900", 1e-4),
        ("-1.4053", 1e-4),
        ("1.2298e-04", 1e-8),
        ("-1.0000e+10", 1e6),
        ("0.0000e+00", 1e-4),
        ("5.1091e-12", 1e-16),
        ("1.2954e+01", 1e-3),
        ("0.123456", 1e-6),
        ("2.", 0.0),
        ("-0.", 0.0),
        ("0.", 0.0),
    ],
)
def test_unit_of_one_token(token, unit):
    p = parse_tensor(f"tensor([{token}])")
    got = p.unit.item()
    if unit == 0.0:
        assert got == 0.0
    else:
        assert abs(got - unit) <= 1e-20 * unit
    assert p.values.item() == float(token)


def test_units_of_nan_inf_int_bool_are_zero():
    assert parse_tensor("tensor([   nan, 1.5000,    inf])").unit.tolist() == [0.0, 1e-4, 0.0]
    assert parse_tensor("tensor([ 1.0000e-05,        nan, -inf])").unit.tolist() == [1e-9, 0, 0]
    assert parse_tensor("tensor([10,  2,  5])").unit.tolist() == [0.0, 0.0, 0.0]
    assert parse_tensor("tensor([True, False])").unit.tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "text, notation",
    [
        ("tensor([0.0900, 1.0000])", "fixed"),
        ("tensor([   nan, 0.5000])", "fixed"),
        ("tensor([1.2298e-04, 1.0000e+00])", "sci"),
        ("tensor([1.0000e+00,        nan])", "sci"),
        ("tensor([2., -0., -inf])", "integer"),
        ("tensor([nan, inf])", "integer"),
        ("tensor(-inf)", "integer"),
        ("tensor([10,  2,  5])", "int"),
        ("tensor([True, False])", "bool"),
        ("tensor([1, 2], dtype=torch.float32)", "integer"),
    ],
)
def test_notation(text, notation):
    assert parse_tensor(text).notation == notation


def test_special_values_and_negative_zero():
    p = parse_tensor("tensor([2., -0., -inf, inf, nan, 0.])")
    values = p.values
    assert values[0].item() == 2.0
    assert torch.signbit(values[1]).item() and values[1].item() == 0.0
    assert values[2].item() == -math.inf and values[3].item() == math.inf
    assert math.isnan(values[4].item())
    assert not torch.signbit(values[5]).item()
    fixed = parse_tensor("tensor([-0.0000,  0.0000])").values
    assert torch.signbit(fixed).tolist() == [True, False]


def test_ints():
    p = parse_tensor("tensor([10,  2,  5])")
    assert (p.kind, p.notation, p.shape) == ("int", "int", (3,))
    assert p.values.tolist() == [10.0, 2.0, 5.0]
    p = parse_tensor("tensor([[ -56,  -61,   33],\n        [  -5,  -58, -100]])")
    assert p.dense().tolist() == [[-56, -61, 33], [-5, -58, -100]]


def test_bools():
    p = parse_tensor("tensor([[ True, False],\n        [False,  True]])")
    assert (p.kind, p.notation, p.shape) == ("bool", "bool", (2, 2))
    assert p.dense().tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert p.values.dtype == torch.float64


# --- suffixes -----------------------------------------------------------------------------


def test_suffixes_in_any_order():
    first = parse_tensor("tensor([1.5000, 2.0000], device='cuda:0', dtype=torch.float64, requires_grad=True)")
    second = parse_tensor("tensor([1.5000, 2.0000], requires_grad=True, dtype=torch.float64, device='cuda:0')")
    for p in (first, second):
        assert (p.dtype, p.device, p.requires_grad, p.grad_fn) == ("float64", "cuda:0", True, None)
        assert p.values.tolist() == [1.5, 2.0]


def test_grad_fn_and_device():
    p = parse_tensor("tensor([0.1000, 0.2000], device='cuda:0', grad_fn=<SelectBackward0>)")
    assert (p.grad_fn, p.device, p.dtype) == ("SelectBackward0", "cuda:0", None)


def test_suffixes_from_torch():
    leaf = torch.tensor([1.0, 2.0], requires_grad=True)
    assert parse_tensor(repr(leaf)).requires_grad is True
    p = parse_tensor(repr(torch.rand(2, 3, requires_grad=True).sum(0)))
    assert p.grad_fn == "SumBackward1" and p.requires_grad is False
    p = parse_tensor(repr(torch.tensor([1.0, 2.0], dtype=torch.bfloat16)))
    assert (p.kind, p.dtype) == ("float", "bfloat16")


@pytest.mark.parametrize(
    "dtype, kind",
    [
        ("int32", "int"),
        ("int64", "int"),
        ("uint8", "int"),
        ("int8", "int"),
        ("float64", "float"),
        ("float16", "float"),
        ("bfloat16", "float"),
    ],
)
def test_dtype_suffix_on_int_tokens(dtype, kind):
    p = parse_tensor(f"tensor([1, 2], dtype=torch.{dtype})")
    assert (p.kind, p.dtype) == (kind, dtype)
    assert p.notation == ("int" if kind == "int" else "integer")


def test_bool_dtype_suffix():
    p = parse_tensor("tensor([], dtype=torch.bool)")
    assert (p.kind, p.dtype, p.shape, p.notation) == ("bool", "bool", (0,), "bool")


def test_empty_tensors():
    p = parse_tensor("tensor([])")
    assert (p.kind, p.ndim, p.shape) == ("float", 1, (0,))
    assert p.index.shape == (0, 1) and p.values.shape == (0,)
    p = parse_tensor(repr(torch.empty(0, 3)))
    assert (p.ndim, p.shape) == (2, (0, 3))
    assert p.index.shape == (0, 2)
    assert p.dense().shape == (0, 3)
    p = parse_tensor(repr(torch.empty(0, 3, dtype=torch.int64)))
    assert (p.kind, p.dtype, p.shape) == ("int", "int64", (0, 3))
    p = parse_tensor(repr(torch.empty(2, 0, 3)))
    assert p.shape == (2, 0, 3)


# --- elision ------------------------------------------------------------------------------


def test_document_elided_22x64():
    p = parse_tensor(DOC_22x64)
    assert (p.ndim, p.shape, p.elided, p.partial) == (2, None, True, False)
    assert p.index.tolist() == corners(3, 2)
    assert len(p.values) == 36
    assert p.values[:6].tolist() == [-1.1065, 1.2682, 0.3147, 0.4466, -0.8970, 0.1009]
    assert p.values[-1].item() == -2.1595
    assert p.values[18].item() == -1.0693
    assert p.index[18].tolist() == [-3, 0]
    with pytest.raises(ValueError, match="elided"):
        p.dense()


def test_elided_inside_rows_only():
    t = torch.rand(2, 3, 500)
    p = parse_tensor(repr(t))
    assert p.elided and p.shape is None and p.ndim == 3
    rows = [[i, j] for i in range(2) for j in range(3)]
    assert p.index.tolist() == [row + [k] for row in rows for k in CORNERS_3]
    assert_matches(p, t)


def test_elided_one_dim():
    t = torch.arange(2000)
    p = parse_tensor(repr(t))
    assert p.index.tolist() == [[k] for k in CORNERS_3]
    assert p.values.tolist() == [0, 1, 2, 1997, 1998, 1999]
    assert p.kind == "int"


def test_elided_four_dim_whole_blocks():
    t = torch.rand(32, 8, 128, 64)
    text = repr(t)
    assert re.search(r"\]\]\],\n\n\n\s+\.\.\.,\n\n\n", text)
    p = parse_tensor(text)
    assert (p.ndim, p.shape, p.elided) == (4, None, True)
    assert p.index.tolist() == corners(3, 4)
    assert_matches(p, t)


@pytest.mark.parametrize("edge", [1, 2, 4])
def test_elision_counts_read_from_text(print_options, edge):
    print_options(edgeitems=edge)
    t = torch.randn(10, 10, 10, 10)
    p = parse_tensor(repr(t))
    assert p.index.tolist() == corners(edge, 4)
    assert_matches(p, t)


def test_rows_with_different_elision_are_ragged():
    text = "tensor([[1., 2.,  ..., 5., 6.],\n        [1.,  ..., 5., 6.]])"
    with pytest.raises(TensorTextError, match=r"ragged rows: row \[1\]") as err:
        parse_tensor(text)
    assert (err.value.line, err.value.column) == (2, 9)


# --- partial prints -----------------------------------------------------------------------


def test_document_partial_3d():
    p = parse_tensor(DOC_001_CUT, partial=True)
    assert (p.ndim, p.shape, p.partial, p.elided, p.notation) == (3, None, True, False, "sci")
    assert len(p.values) == 20
    expected = [[i, j, k] for i in range(2) for j in range(2) for k in range(5)]
    assert p.index.tolist() == expected
    assert p.values[0].item() == 1.2298e-04 and p.values[-1].item() == 9.0
    assert p.unit[0].item() == 1e-8 and p.unit[5].item() == 1e-16 and p.unit[-1].item() == 1e-4
    with pytest.raises(ValueError, match="partial"):
        p.dense()


def test_document_partial_without_flag_is_an_error():
    with pytest.raises(TensorTextError, match="ends before the tensor closes") as err:
        parse_tensor(DOC_001_CUT)
    assert "partial=True" in err.value.message
    assert (err.value.line, err.value.column) == (5, 71)


def test_partial_cut_mid_row():
    p = parse_tensor("tensor([[ 1.8933, -0.3887],\n        [ 0.2698,  ", partial=True)
    assert p.values.tolist() == [1.8933, -0.3887, 0.2698]
    assert p.index.tolist() == [[0, 0], [0, 1], [1, 0]]
    assert (p.ndim, p.shape, p.partial) == (2, None, True)


def test_partial_drops_a_token_that_may_be_cut():
    p = parse_tensor("tensor([[1.2298e-04, 0.0000e+0", partial=True)
    assert p.values.tolist() == [1.2298e-04]
    p = parse_tensor("tensor([[1.2298e-04, 2.0000e-04   ", partial=True)
    assert p.values.tolist() == [1.2298e-04]
    p = parse_tensor("tensor([[True, Fal", partial=True)
    assert p.values.tolist() == [1.0] and p.kind == "bool"
    p = parse_tensor("tensor(0.12", partial=True)
    assert (p.ndim, len(p.values), p.partial) == (0, 0, True)


def test_partial_bracket_depth_only():
    p = parse_tensor("tensor([[[", partial=True)
    assert (p.ndim, p.partial, p.shape) == (3, True, None)
    assert p.index.shape == (0, 3) and p.values.shape == (0,)


def test_partial_cut_inside_the_suffixes():
    p = parse_tensor("tensor([1., 2.], dtype=torch.flo", partial=True)
    assert (p.partial, p.shape, p.dtype) == (True, None, None)
    assert p.values.tolist() == [1.0, 2.0]
    p = parse_tensor("tensor([1., 2.], requires_grad=True, dev", partial=True)
    assert p.requires_grad is True and p.partial


def test_partial_flag_on_complete_text():
    p = parse_tensor("tensor([[1., 2.]])", partial=True)
    assert (p.partial, p.shape) == (False, (1, 2))


def test_partial_after_elision_counts_from_the_end():
    cut = DOC_22x64[: DOC_22x64.index("[-1.4284")]
    p = parse_tensor(cut, partial=True)
    assert p.elided and p.partial
    assert p.index.tolist() == corners(3, 2)[:24]
    assert p.index[18:24, 0].tolist() == [-3] * 6


def test_partial_at_every_cut_matches_the_full_parse():
    t = torch.randn(3, 2, 4) * torch.tensor([1e-6, 1.0, 1e5]).reshape(3, 1, 1)
    text = repr(t)
    full = parse_tensor(text)
    ends = [m.end() for m in re.finditer(r"[-\w.+]+(?=\s*[,\]])", text) if re.fullmatch(r"-?[\d.]+e[-+]\d+", m.group())]
    follows = [re.compile(r"\s*").match(text, end).end() for end in ends]
    assert len(follows) == 24
    for depth in range(4):
        assert parse_tensor(text[: len("tensor(") + depth], partial=True).ndim == depth
    for cut in range(len("tensor([[["), len(text)):
        p = parse_tensor(text[:cut], partial=True)
        shown = sum(1 for position in follows if position < cut)
        assert len(p.values) == shown, text[:cut]
        assert torch.equal(p.values, full.values[:shown])
        assert torch.equal(p.index, full.index[:shown])
        assert p.partial and p.ndim == 3


# --- errors -------------------------------------------------------------------------------


def error_of(text, **options):
    with pytest.raises(TensorTextError) as err:
        parse_tensor(text, **options)
    return err.value


def test_error_is_a_value_error_with_position():
    err = error_of("tensor([1., abc])")
    assert isinstance(err, ValueError)
    assert (err.line, err.column) == (1, 13)
    assert str(err) == f"line 1, column 13: {err.message}"
    assert "'abc'" in err.message


def test_ragged_rows():
    err = error_of("tensor([[1., 2.], [3.]])")
    assert (err.line, err.column) == (1, 19)
    assert "ragged rows" in err.message and "row [1]" in err.message
    assert "has 1 entry" in err.message and "expected 2 entries" in err.message


def test_ragged_rows_three_dim():
    err = error_of("tensor([[[1., 2.],\n         [3., 4.]],\n\n        [[5., 6.],\n         [7., 8., 9.]]])")
    assert (err.line, err.column) == (5, 10)
    assert "row [1, 1]" in err.message and "expected 2 entries" in err.message


def test_ragged_blocks():
    err = error_of("tensor([[[1., 2.]],\n\n        [[3., 4.],\n         [5., 6.]]])")
    assert (err.line, err.column) == (3, 9)
    assert "row [1] has 2 entries, expected 1 entry" in err.message


def test_unbalanced_brackets():
    err = error_of("tensor([[1., 2.], [3., 4.])")
    assert (err.line, err.column) == (1, 27)
    assert "unbalanced brackets" in err.message and "the '[' on this line ('[[1., 2.], [3.,'…)" in err.message
    # The '[' told from the error's own line: the printed text's lines are not the case file's.
    err = error_of("tensor([[0.0900, 0.2447],\n        [0.3333, 0.3333])")
    assert (err.line, err.column) == (2, 25)
    assert "the '[' 1 line above ('[[0.0900, 0.2447'…), found ')'" in err.message
    err = error_of("tensor([1., 2.]])")
    assert (err.line, err.column) == (1, 16)
    assert "unbalanced brackets" in err.message


def test_nesting_that_does_not_match_the_start():
    err = error_of("tensor([[1., 2.],\n        3.])")
    assert (err.line, err.column) == (2, 9)
    assert "expected '['" in err.message
    err = error_of("tensor([1., [2.]])")
    assert (err.line, err.column) == (1, 13)


def test_garbage_tokens():
    err = error_of("tensor([1., 2.],\n       [3., #])")
    assert (err.line, err.column) == (2, 13) and "'#'" in err.message
    err = error_of("tensor([1., 2.5x])")
    assert (err.line, err.column) == (1, 16)


def test_missing_tensor_prefix():
    for text in ("[1., 2.]", "torch.tensor([1.])", "array([1., 2.])", "tensor[1.]"):
        err = error_of(text)
        assert "expected torch's printed form `tensor(...)`" in err.message
    assert (error_of("  \n  array([1.])").line, error_of("  \n  array([1.])").column) == (2, 3)


def test_unknown_suffix():
    err = error_of("tensor([1., 2.], layout=torch.strided)")
    assert (err.line, err.column) == (1, 18)
    assert "unknown suffix 'layout'" in err.message


def test_bad_suffix_values():
    assert error_of("tensor([1.], dtype=float64)").column == 20
    assert error_of("tensor([1.], dtype=torch.complex64)").message.startswith("unsupported dtype")
    assert "given twice" in error_of("tensor([1.], grad_fn=<A>, grad_fn=<B>)").message
    assert "does not fit" in error_of("tensor([1.5000], dtype=torch.int64)").message
    assert "does not fit" in error_of("tensor([True], dtype=torch.float32)").message
    assert "does not fit" in error_of("tensor([1, 0], dtype=torch.bool)").message
    assert "empty tensor" in error_of("tensor([1., 2.], size=(2,))").message


def test_mix_of_bool_and_numbers():
    err = error_of("tensor([True, 1.])")
    assert (err.line, err.column) == (1, 15)
    assert "mix of booleans and numbers" in err.message
    assert error_of("tensor([[1, 2],\n        [False, 3]])").line == 2


def test_trailing_text():
    err = error_of("tensor([1., 2.])\nOut[3]: 5")
    assert (err.line, err.column) == (2, 1)
    assert "after the closing ')'" in err.message


def test_empty_text():
    for text in ("", "   \n  "):
        err = error_of(text)
        assert (err.line, err.column) == (1, 1)
        assert "empty" in err.message


def test_two_ellipses_in_one_row():
    err = error_of("tensor([1., ..., 2., ..., 3.])")
    assert (err.line, err.column) == (1, 22)


def test_unclosed_without_partial():
    err = error_of("tensor([[1., 2.],\n        [3., 4.]]")
    assert (err.line, err.column) == (2, 18)
    assert "partial=True" in err.message


# --- round trips against torch's own printing ---------------------------------------------

SHAPES = [
    (),
    (1,),
    (7,),
    (25,),
    (3, 4),
    (2, 3, 4),
    (2, 2, 3, 2),
    (30, 40),
    (1200,),
    (4, 1000),
    (2, 3, 500),
    (10, 10, 10, 10),
]

SCALES = [1.0, 100.0, 1e-6, 1e5, 1e10]


def random_tensor(shape, dtype, scale, generator):
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype == torch.int64:
        return torch.randint(-1000, 1000, shape, generator=generator)
    return (torch.randn(shape, generator=generator, dtype=torch.float64) * scale).to(dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool], ids=str)
def test_round_trip(shape, dtype):
    generator = torch.Generator().manual_seed(zlib.crc32(f"{shape} {dtype}".encode()))
    scales = SCALES if dtype.is_floating_point else [1.0]
    for scale in scales:
        t = random_tensor(shape, dtype, scale, generator)
        for text in (repr(t), str(t)):
            p = parse_tensor(text)
            assert_matches(p, t)
            assert p.elided == (t.numel() > 1000)
            assert p.kind == {torch.bool: "bool", torch.int64: "int"}.get(dtype, "float")
            assert p.dtype == ("float64" if dtype == torch.float64 else None)
            if not p.elided:
                assert p.shape == tuple(t.shape)
                assert len(p.values) == t.numel()


def test_round_trip_notations():
    fixed = torch.tensor([0.09, -1.4053, 12.5])
    assert parse_tensor(repr(fixed)).notation == "fixed"
    sci = torch.tensor([1.2298e-04, 1.0])
    p = parse_tensor(repr(sci))
    assert p.notation == "sci" and p.unit.tolist() == [1e-8, 1e-4]
    integer = torch.tensor([2.0, -0.0, 5.0])
    assert parse_tensor(repr(integer)).notation == "integer"
    assert torch.signbit(parse_tensor(repr(integer)).values[1])


def test_round_trip_special_values():
    t = torch.tensor([[float("nan"), 1.5, -float("inf")], [0.25, float("inf"), -0.0]])
    p = parse_tensor(repr(t))
    assert_matches(p, t)
    assert p.notation == "fixed"
    t = torch.tensor([1e-5, float("nan"), 3e7], dtype=torch.float64)
    p = parse_tensor(repr(t))
    assert p.notation == "sci" and p.dtype == "float64"
    assert_matches(p, t)


@pytest.mark.parametrize(
    "options",
    [
        dict(precision=2),
        dict(precision=8),
        dict(sci_mode=True),
        dict(sci_mode=False),
        dict(linewidth=40),
        dict(threshold=10, edgeitems=2),
    ],
    ids=str,
)
def test_round_trip_with_print_options(print_options, options):
    print_options(**options)
    generator = torch.Generator().manual_seed(5)
    for dtype, scale in [(torch.float32, 1.0), (torch.float64, 1e-3), (torch.float32, 3e4)]:
        t = random_tensor((6, 7), dtype, scale, generator)
        p = parse_tensor(repr(t))
        assert_matches(p, t)
        if "precision" in options and p.notation == "fixed":
            assert torch.all(p.unit == 10.0 ** -options["precision"])
        if options.get("sci_mode"):
            assert p.notation == "sci"


def test_round_trip_half_precision():
    generator = torch.Generator().manual_seed(11)
    for dtype in (torch.float16, torch.bfloat16):
        t = random_tensor((5, 6), dtype, 10.0, generator)
        p = parse_tensor(repr(t))
        assert p.dtype == str(dtype).removeprefix("torch.")
        assert_matches(p, t)


# --- the dataclass ------------------------------------------------------------------------


def test_dense_is_a_copy_and_the_record_is_frozen():
    p = parse_tensor("tensor([[1., 2.],\n        [3., 4.]])")
    dense = p.dense()
    dense[0, 0] = 100.0
    assert p.values[0].item() == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.shape = (4,)


# --- sizes --------------------------------------------------------------------------------


def test_parse_size():
    assert parse_size("torch.Size([4, 8, 2])") == (4, 8, 2)
    assert parse_size("torch.Size([])") == ()
    assert parse_size("  torch.Size([7])\n") == (7,)
    assert parse_size(str(torch.rand(3, 0, 5).shape)) == (3, 0, 5)


@pytest.mark.parametrize(
    "text, column",
    [
        ("torch.Size([4, -1])", 16),
        ("torch.Size([4, 8)", 17),
        ("Size([4])", 1),
        ("torch.Size([4.])", 13),
        ("torch.Size([4]) x", 17),
        ("", 1),
        ("torch.Size([4, 8]", 18),
    ],
)
def test_parse_size_errors(text, column):
    with pytest.raises(TensorTextError) as err:
        parse_size(text)
    assert (err.value.line, err.value.column) == (1, column)


def test_looks_like_size():
    assert looks_like_size("torch.Size([4, 8, 2])")
    assert looks_like_size("\n  torch.Size([])")
    assert not looks_like_size("tensor([1., 2.])")
    assert not looks_like_size("Size([4])")


def test_float64s_largest_magnitude_as_torch_prints_it_reads_as_itself_and_a_number_past_it_is_refused():
    # masked_fill(~mask, torch.finfo(torch.float64).min) prints -1.7977e+308, which float() reads as -inf
    printed = parse_tensor("tensor([ 0.0000e+00, -1.7977e+308], dtype=torch.float64)")
    assert printed.values.tolist() == [0.0, -torch.finfo(torch.float64).max]
    with pytest.raises(TensorTextError, match=r"column 9: the number 1\.7978e\+308 is beyond float64's range"):
        parse_tensor("tensor([1.7978e+308])")
    with pytest.raises(TensorTextError, match="1e-400 is below float64's smallest magnitude"):
        parse_tensor("tensor([1e-400])")
