"""Tests of the case-file expression language (attention_core.harness.languages.expr)."""

import math
import pickle
import re
import types
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from attention_core.harness.languages import expr as expr_module
from attention_core.harness.languages.expr import BUILTINS, CONSTANTS, Budget, Expr, ExprError, parse

torch.manual_seed(0)
A = torch.randn(3, 4)
B = torch.randn(3, 4)
M = torch.randn(4, 5)
P = torch.rand(3, 4) + 0.5  # positive: safe for log, sqrt, pow
I = torch.tensor([[5, -3], [7, 2]])  # noqa: E741 (the integer tensors are I and J)
J = torch.tensor([[2, 4], [-3, 5]])
X3 = torch.randn(2, 3, 4)
MASK = torch.tensor([[True, False], [False, True]])
MASK2 = torch.tensor([[True, True], [False, True]])
V = torch.randn(4)
U = torch.randn(3)
W = torch.randn(3, 4)
REC = types.SimpleNamespace(weight=torch.randn(4, 2), bias=torch.randn(2), name_count=3)

SCOPE = {
    "a": A,
    "b": B,
    "m": M,
    "p": P,
    "i": I,
    "j": J,
    "x3": X3,
    "mask": MASK,
    "mask2": MASK2,
    "v": V,
    "u": U,
    "w": W,
    "key": REC,
    "n": 8,
    "half_n": 4.0,
}


def ev(source, scope=SCOPE, **kwargs):
    return parse(source).evaluate(scope, **kwargs)


def assert_same(got, expected):
    """Equal values and, for tensors, equal dtype and shape (NaN == NaN)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert (
            torch.allclose(got, expected, equal_nan=True, rtol=1e-6, atol=1e-6)
            if (expected.is_floating_point())
            else torch.equal(got, expected)
        )
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(got)
    else:
        assert type(got) is type(expected) and got == expected


def refusal(source, **kwargs):
    with pytest.raises(ExprError) as info:
        parse(source, **kwargs)
    return info.value


def failure(source, scope=SCOPE, **kwargs):
    expr = parse(source, extra_functions=kwargs.pop("extra_functions", ()))
    with pytest.raises(ExprError) as info:
        expr.evaluate(scope, **kwargs)
    return info.value


# ------------------------------------------------------------------ literals


@pytest.mark.parametrize(
    "source, expected",
    [
        ("3", 3),
        ("2.5", 2.5),
        ("1e-3", 1e-3),
        ("True", True),
        ("False", False),
        ("(3, 2)", (3, 2)),
        ("[2, 0, 1]", [2, 0, 1]),
        ("()", ()),
        ("[1, [2.5, 3]]", [1, [2.5, 3]]),
        ("(n, half_n)", (8, 4.0)),
        ("inf", math.inf),
        ("-inf", -math.inf),
        ("pi", math.pi),
        ("float64", torch.float64),
        ("bfloat16", torch.bfloat16),
        ("int32", torch.int32),
        ("bool", torch.bool),
    ],
)
def test_literals_and_constants(source, expected):
    assert_same(ev(source), expected)


def test_none_ellipsis_nan():
    assert ev("None") is None
    assert ev("...") is Ellipsis
    assert math.isnan(ev("nan"))


# ------------------------------------------------------------------ operators


@pytest.mark.parametrize(
    "source, expected",
    [
        ("a + b", A + B),
        ("a - b", A - B),
        ("a * b", A * B),
        ("a / b", A / B),
        ("a // b", A // B),
        ("a % b", A % B),
        ("p ** 2", P**2),
        ("p ** 0.5", P**0.5),
        ("2 ** p", 2**P),
        ("a @ m", A @ M),
        ("i & j", I & J),
        ("i | j", I | J),
        ("i ^ j", I ^ J),
        ("mask & mask2", MASK & MASK2),
        ("mask | mask2", MASK | MASK2),
        ("mask ^ mask2", MASK ^ MASK2),
        ("-a", -A),
        ("+a", +A),
        ("~mask", ~MASK),
        ("~i", ~I),
        ("a + 1", A + 1),
        ("1 - a", 1 - A),
        ("a * 3 ** -0.5", A * 3**-0.5),
        ("a == b", A == B),
        ("a != b", A != B),
        ("a < b", A < B),
        ("a <= b", A <= B),
        ("a > b", A > B),
        ("a >= b", A >= B),
        ("a > 0", A > 0),
    ],
)
def test_tensor_operators(source, expected):
    assert_same(ev(source), expected)


@pytest.mark.parametrize(
    "source, expected",
    [
        ("7 + 2", 9),
        ("7 - 2", 5),
        ("7 * 2", 14),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("7 % 2", 1),
        ("2 ** 10", 1024),
        ("3 ** -0.5", 3**-0.5),
        ("2 ** 64", 2**64),
        ("6 & 3", 2),
        ("6 | 3", 7),
        ("6 ^ 3", 5),
        ("-7", -7),
        ("+7", 7),
        ("~7", -8),
        ("not 0", True),
        ("not True", False),
        ("1 == 1", True),
        ("1 != 1", False),
        ("1 < 2", True),
        ("2 <= 1", False),
        ("2 > 1", True),
        ("1 >= 1", True),
        ("(1, 2) + (3,)", (1, 2, 3)),
        ("a.shape + (1,)", torch.Size([3, 4, 1])),
        ("a.shape == (3, 4)", True),
        ("n // 2 * half_n", 16.0),
        ("(1 + 2) * 3", 9),
        ("1 + 2 * 3", 7),
    ],
)
def test_number_operators(source, expected):
    assert_same(ev(source), expected)


# ------------------------------------------------------------------ subscripts


@pytest.mark.parametrize(
    "source, expected",
    [
        ("a[0]", A[0]),
        ("a[-1]", A[-1]),
        ("a[0, :3]", A[0, :3]),
        ("a[1:, ::2]", A[1:, ::2]),
        ("(5, 6, 7)[::-1]", (7, 6, 5)),
        ("a[None]", A[None]),
        ("a[:, None]", A[:, None]),
        ("x3[..., 0]", X3[..., 0]),
        ("x3[0, ..., 1:]", X3[0, ..., 1:]),
        ("a[a > 0]", A[A > 0]),
        ("a[tensor([2, 0])]", A[torch.tensor([2, 0])]),
        ("a[[0, 2]]", A[[0, 2]]),
        ("a[n - 7]", A[1]),
        ("a.shape[0]", 3),
        ("a.shape[-1]", 4),
        ("(5, 6, 7)[1:]", (6, 7)),
        ("u[:, None] * w.T[:, :, None]", U[:, None] * W.T[:, :, None]),
    ],
)
def test_subscripts(source, expected):
    assert_same(ev(source), expected)


# ------------------------------------------------------------------ attributes


@pytest.mark.parametrize(
    "source, expected",
    [
        ("a.T", A.T),
        ("x3.mT", X3.mT),
        ("a.shape", torch.Size([3, 4])),
        ("x3.ndim", 3),
        ("a.dtype", torch.float32),
        ("a.dtype == float32", True),
        ("key.weight", REC.weight),
        ("key.bias", REC.bias),
        ("key.name_count", 3),
        ("a @ key.weight + key.bias", A @ REC.weight + REC.bias),
        ("key.weight.T.shape", torch.Size([2, 4])),
        ("a.max(1).values", A.max(1).values),
        ("a.min(0).indices", A.min(0).indices),
        ("a.max(1)[0]", A.max(1)[0]),
    ],
)
def test_attributes(source, expected):
    assert_same(ev(source), expected)


# ------------------------------------------------------------------ tensor methods


METHOD_CASES = [
    ("a.transpose(0, 1)", A.transpose(0, 1)),
    ("a.tanh()", A.tanh()),
    ("a.sigmoid()", A.sigmoid()),
    ("a.relu()", A.relu()),
    ("p.rsqrt()", P.rsqrt()),
    ("a.square()", A.square()),
    ("p.pow(0.5)", P.pow(0.5)),
    ("a.clamp(min=-0.5, max=0.5)", A.clamp(min=-0.5, max=0.5)),
    ("a.norm(dim=-1)", A.norm(dim=-1)),
    ("x3.permute(2, 0, 1)", X3.permute(2, 0, 1)),
    ("x3.permute([2, 0, 1])", X3.permute([2, 0, 1])),
    ("x3.permute(2, 0, 1).reshape(4, 6)", X3.permute(2, 0, 1).reshape(4, 6)),
    ("a.view(2, 6)", A.view(2, 6)),
    ("a.view(-1)", A.view(-1)),
    ("a.unsqueeze(0)", A.unsqueeze(0)),
    ("a[None].squeeze(0)", A),
    ("x3.flatten(1)", X3.flatten(1)),
    ("a.T.contiguous()", A.T.contiguous()),
    ("a.clone()", A.clone()),
    ("a.detach()", A),
    ("a.sum()", A.sum()),
    ("a.sum(1, keepdim=True)", A.sum(1, keepdim=True)),
    ("a.sum(dim=0)", A.sum(dim=0)),
    ("a.mean(-1)", A.mean(-1)),
    ("a.std()", A.std()),
    ("a.var(1, unbiased=False)", A.var(1, unbiased=False)),
    ("a.amax(1)", A.amax(1)),
    ("a.amin(0, keepdim=True)", A.amin(0, keepdim=True)),
    ("a.max()", A.max()),
    ("a.min()", A.min()),
    ("a.argmax(1)", A.argmax(1)),
    ("a.argmin()", A.argmin()),
    ("a.abs()", A.abs()),
    ("a.exp()", A.exp()),
    ("p.log()", P.log()),
    ("p.sqrt()", P.sqrt()),
    ("a.cumsum(0)", A.cumsum(0)),
    ("a.t()", A.t()),
    ("a.diagonal()", A.diagonal()),
    ("a.repeat_interleave(2, dim=0)", A.repeat_interleave(2, dim=0)),
    ("a.repeat(2, 1)", A.repeat(2, 1)),
    ("a.T.repeat(4, 1, 1)", A.T.repeat(4, 1, 1)),
    ("v.expand(3, 4)", V.expand(3, 4)),
    ("v[None].expand(3, -1)", V[None].expand(3, -1)),
    ("a.tril()", A.tril()),
    ("a.triu(1)", A.triu(1)),
    ("a.tril(diagonal=-1)", A.tril(diagonal=-1)),
    ("a.masked_fill(a < 0, 0)", A.masked_fill(A < 0, 0)),
    ("a.masked_fill(a < 0, -inf)", A.masked_fill(A < 0, -math.inf)),
    ("a.softmax(-1)", A.softmax(-1)),
    ("a.softmax(dim=0)", A.softmax(dim=0)),
    ("i.float()", I.float()),
    ("a.double()", A.double()),
    ("a.half()", A.half()),
    ("a.bfloat16()", A.bfloat16()),
    ("a.long()", A.long()),
    ("a.int()", A.int()),
    ("i.bool()", I.bool()),
    ("a.size()", A.size()),
    ("a.size(1)", 4),
    ("a.numel()", 12),
    ("x3.dim()", 3),
    ("a[0, 0].item()", A[0, 0].item()),
    ("a.allclose(a + 1e-9)", True),
    ("a.isclose(b)", A.isclose(B)),
    ("(a / 0).isfinite()", (A / 0).isfinite()),
    ("(a * nan).isnan()", (A * math.nan).isnan()),
    ("a.eq(b)", A.eq(B)),
    ("a.ne(b)", A.ne(B)),
    ("a.lt(0)", A.lt(0)),
    ("a.le(b)", A.le(B)),
    ("a.gt(b)", A.gt(B)),
    ("a.ge(0)", A.ge(0)),
    ("a.matmul(m)", A.matmul(M)),
    ("a.to(float64)", A.to(torch.float64)),
    ("a.to(dtype=float16)", A.to(dtype=torch.float16)),
    ("i.to(bool)", I.to(torch.bool)),
]


@pytest.mark.parametrize("source, expected", METHOD_CASES)
def test_tensor_methods(source, expected):
    assert_same(ev(source), expected)


def test_every_allowed_method_is_tested():
    from attention_core.harness.languages.expr import TENSOR_METHODS

    sources = " ".join(source for source, _ in METHOD_CASES)
    assert {name for name in TENSOR_METHODS if f".{name}(" not in sources} == set()


# ------------------------------------------------------------------ builtins


@pytest.mark.parametrize(
    "source, expected",
    [
        ("tril(a)", torch.tril(A)),
        ("tanh(a)", torch.tanh(A)),
        ("tanh(0.5)", math.tanh(0.5)),
        ("sigmoid(a)", torch.sigmoid(A)),
        ("sigmoid(0.0)", 0.5),
        ("relu(a)", torch.relu(A)),
        ("relu(-2)", 0),
        ("gelu(a)", torch.nn.functional.gelu(A)),
        ("silu(a)", torch.nn.functional.silu(A)),
        ("tril(a, -1)", torch.tril(A, -1)),
        ("triu(a, diagonal=1)", torch.triu(A, diagonal=1)),
        ("ones(2, 3)", torch.ones(2, 3)),
        ("ones((2, 3))", torch.ones(2, 3)),
        ("ones(a.shape)", torch.ones(3, 4)),
        ("zeros(4)", torch.zeros(4)),
        ("zeros(2, 2, dtype=int64)", torch.zeros(2, 2, dtype=torch.int64)),
        ("ones(2, 2, dtype=bool)", torch.ones(2, 2, dtype=torch.bool)),
        ("full((2, 3), 1.5)", torch.full((2, 3), 1.5)),
        ("full((2, 3), -inf)", torch.full((2, 3), -math.inf)),
        ("full((2,), 7)", torch.full((2,), 7)),
        ("full((2,), True)", torch.full((2,), True)),
        ("eye(3)", torch.eye(3)),
        ("eye(2, 3)", torch.eye(2, 3)),
        ("arange(5)", torch.arange(5)),
        ("arange(1, 9, 2)", torch.arange(1, 9, 2)),
        ("arange(0, 1, 0.25)", torch.arange(0, 1, 0.25)),
        ("arange(4.0)", torch.arange(4.0)),
        ("tensor([1, 2])", torch.tensor([1, 2])),
        ("tensor([1., 2.5])", torch.tensor([1.0, 2.5])),
        ("tensor([[1, 2.5], [3, 4]])", torch.tensor([[1, 2.5], [3, 4]])),
        ("tensor([True, False])", torch.tensor([True, False])),
        ("tensor(3)", torch.tensor(3)),
        ("tensor(a)", A.clone()),
        ("masked_fill(a, a > 0, 0.0)", torch.masked_fill(A, A > 0, 0.0)),
        ("bmm(x3, x3.mT)", torch.bmm(X3, X3.mT)),
        ("matmul(a, m)", torch.matmul(A, M)),
        ("matmul(x3, m[:, 0])", torch.matmul(X3, M[:, 0])),
        ("exp(a)", torch.exp(A)),
        ("exp(1)", math.e),
        ("log(p)", torch.log(P)),
        ("log(100)", math.log(100)),
        ("sqrt(p)", torch.sqrt(P)),
        ("sqrt(64)", 8.0),
        ("sqrt(half_n)", 2.0),
        ("abs(a)", torch.abs(A)),
        ("abs(-3)", 3),
        ("softmax(a, 0)", torch.softmax(A, 0)),
        ("softmax(a, dim=1)", torch.softmax(A, 1)),
        ("softmax(a)", torch.softmax(A, -1)),
        ("stack([a, b])", torch.stack([A, B])),
        ("stack((a, b), dim=1)", torch.stack((A, B), dim=1)),
        ("cat([a, b])", torch.cat([A, B])),
        ("cat([a, b], 1)", torch.cat([A, B], 1)),
        ("where(a > 0, a, b)", torch.where(A > 0, A, B)),
        ("where(a > 0, a, 0.0)", torch.where(A > 0, A, 0.0)),
        ("maximum(a, b)", torch.maximum(A, B)),
        ("minimum(a, b)", torch.minimum(A, B)),
        ("maximum(a, 0)", torch.clamp(A, min=0)),
        ("minimum(1, a)", torch.clamp(A, max=1)),
        ("maximum(2, 3)", 3),
        ("float(3)", 3.0),
        ("float(a[0, 0])", A[0, 0].item()),
        ("int(7 / 2)", 3),
        ("int(a.shape[1] / 2)", 2),
    ],
)
def test_builtins(source, expected):
    assert_same(ev(source), expected)


@pytest.mark.parametrize("name", ["gelu", "silu"])
def test_an_activation_of_a_number_is_torch_s_in_float64(name):
    for x in (-3.0, -0.5, 0.0, 1.0, 4.0):
        want = float(getattr(torch.nn.functional, name)(torch.tensor(x, dtype=torch.float64)))
        assert ev(f"{name}({x})") == pytest.approx(want, rel=1e-14, abs=1e-15)


def test_the_case_format_page_lists_every_allowed_method_and_function():
    """docs/case-format.md names the allow-lists in full: an author learns there what an expression may call."""
    from attention_core.harness.languages.expr import TENSOR_METHODS  # noqa: PLC0415

    page = " ".join((Path(__file__).resolve().parent.parent / "docs" / "case-format.md").read_text().split())
    methods = re.search(r"allow-list of tensor methods \(`([^`]*)`\)", page).group(1).split()
    functions = re.search(r"functions `([^`]*)` and torch's own `scaled_dot_product_attention`", page).group(1).split()
    assert sorted(methods) == sorted(TENSOR_METHODS)
    assert sorted(functions) == sorted(set(BUILTINS) - {"scaled_dot_product_attention", "torch_layer_norm"})
    dtypes = re.search(r"and the dtype names `([^`]*)`", page).group(1).split()
    assert sorted(dtypes) == sorted(set(CONSTANTS) - {"inf", "nan", "pi"})
    assert all(isinstance(CONSTANTS[name], torch.dtype) for name in dtypes)


@pytest.mark.parametrize(
    "pasted, plain",
    [
        ("torch.softmax(a, dim=-1)", "softmax(a, dim=-1)"),
        ("F.softmax(a, -1) * math.sqrt(4.0)", "softmax(a, -1) * sqrt(4.0)"),
        ("torch.nn.functional.gelu(a)", "gelu(a)"),
        ("a.masked_fill(a > 0, -torch.inf)", "a.masked_fill(a > 0, -inf)"),
        ("a.to(torch.float64) * math.pi", "a.to(float64) * pi"),
        ("a.to(torch.float)", "a.to(float32)"),
        ("(a > 0).to(torch.uint8)", "(a > 0).to(uint8)"),
        ("(a > 0).to(torch.long)", "(a > 0).long()"),
        ("a.to(torch.half) + a.to(torch.double).float()", "a.to(float16) + a.to(float64).float()"),
    ],
)
def test_pasted_code_keeps_its_module_in_front_of_a_name_the_language_has(pasted, plain):
    """What a notebook writes, read as the plain names the language has: the same values."""
    scope = {"a": A}
    assert_same(ev(pasted, scope), ev(plain, scope))
    assert "torch" not in parse(pasted).names and "F" not in parse(pasted).names


def test_repeat_interleave_is_bounded_and_an_in_place_method_is_told_its_plain_form():
    a = torch.arange(6.0).reshape(2, 3)
    with pytest.raises(ExprError, match="would create 600000000 elements"):
        ev("a.repeat_interleave(100000000, dim=0)", {"a": a})
    for hostile in ("[9223372036854775807, 9223372036854775807, 4]", "[-1, 2, 3]"):  # int64 wraps; torch would crash
        with pytest.raises(ExprError, match="refused"):
            ev(f"a[0].repeat_interleave(tensor({hostile}))", {"a": a})
    with pytest.raises(ExprError, match=r"method 'masked_fill_' is not allowed: nothing is changed in place, use"):
        parse("a.masked_fill_(a > 1, 0)")


def test_an_input_may_not_take_a_module_s_name(tmp_path):
    from attention_core.harness.reading.cases import load_file  # noqa: PLC0415

    path = tmp_path / "f.yaml"
    path.write_text(
        "document: {title: t}\ncases:\n  - id: c\n    inputs:\n      F: [1.0, 2.0]\n    checks:\n"
        "      - id: k\n        expr: F.softmax(-1)\n        expect: {out: [0.2689, 0.7311]}\n",
        encoding="utf-8",
    )
    (error,) = load_file(path).errors
    assert "f.yaml:5:" in str(error) and "an input may not be named 'F'" in str(error)
    path.write_text(path.read_text(encoding="utf-8").replace("F", "half"), encoding="utf-8")  # torch.half's word
    assert load_file(path).errors == ()


def test_a_module_s_other_names_stay_refused_and_float_inf_is_told_how_to_write():
    with pytest.raises(ExprError, match="uses|unknown|not allowed"):
        ev("torch.load(a)", {"a": A})
    with pytest.raises(ExprError, match=r"strings are not allowed: write `inf` or `nan` as they are"):
        parse('a.masked_fill(a > 0, -float("inf"))')


def test_builtin_list():
    assert set(BUILTINS) == {
        "tril",
        "triu",
        "ones",
        "zeros",
        "full",
        "eye",
        "arange",
        "tensor",
        "masked_fill",
        "bmm",
        "matmul",
        "exp",
        "log",
        "sqrt",
        "abs",
        "sin",
        "cos",
        "tanh",
        "sigmoid",
        "relu",
        "gelu",
        "silu",
        "softmax",
        "stack",
        "cat",
        "where",
        "maximum",
        "minimum",
        "float",
        "int",
        "scaled_dot_product_attention",
        "torch_layer_norm",
    }
    assert set(CONSTANTS) == {
        "inf",
        "nan",
        "pi",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int32",
        "int64",
        "bool",
        "uint8",
        "int8",
        "int16",
    }
    with pytest.raises(TypeError):
        BUILTINS["eval"] = eval  # read-only


# ------------------------------------------------------------------ the brief's examples


def test_worked_examples():
    x = torch.randn(8, 16)
    w_query = torch.randn(16, 4)
    qk = torch.randn(8, 8)
    scope = {"input": x, "w_query": w_query, "matmul_qk": qk, "x": x}
    assert_same(ev("input @ w_query", scope), x @ w_query)
    causal = torch.tril(torch.ones(8, 8))
    assert_same(
        ev("tril(ones(8, 8)) / tril(ones(8, 8)).sum(1, keepdim=True)", scope),
        causal / causal.sum(1, keepdim=True),
    )
    assert_same(
        ev("(matmul_qk * 3 ** -0.5).masked_fill(tril(ones(8, 8)) == 0, -inf)", scope),
        (qk * 3**-0.5).masked_fill(causal == 0, -math.inf),
    )
    assert_same(ev("x[0, :3]", scope), x[0, :3])
    mw = torch.randn(128, 4, 16)
    assert_same(ev("MW_Q.permute(2, 0, 1).reshape(64, 128)", {"MW_Q": mw}), mw.permute(2, 0, 1).reshape(64, 128))
    emb = torch.randn(5, 3)
    assert_same(ev("embedded.T.repeat(4, 1, 1)", {"embedded": emb}), emb.T.repeat(4, 1, 1))


def test_multiline_and_surrounding_whitespace():
    assert_same(ev("(a\n + b)"), A + B)
    assert_same(ev("  a + b\n"), A + B)


# ------------------------------------------------------------------ names and calls


def test_names_and_calls():
    expr = parse("(matmul_qk * 3 ** -0.5).masked_fill(tril(ones(8, 8)) == 0, -inf)")
    assert expr.names == {"matmul_qk"}
    assert expr.calls == {"tril", "ones"}

    expr = parse("attention(q, k, v, scale=s).sum(1) + softmax(key.weight, dim=0)[0, 0]", extra_functions={"attention"})
    assert expr.names == {"q", "k", "v", "s", "key"}
    assert expr.calls == {"attention", "softmax"}

    expr = parse("x.to(float64)[..., None] * pi + y[i:j:k]")
    assert expr.names == {"x", "y", "i", "j", "k"}
    assert expr.calls == frozenset()


def test_expr_value_semantics():
    expr = parse("a + b")
    assert isinstance(expr, Expr)
    assert expr == parse("a + b")
    assert hash(expr) == hash(parse("a + b"))
    assert "a + b" in repr(expr)
    with pytest.raises(AttributeError):
        expr.source = "c"  # frozen


def test_evaluate_is_repeatable():
    expr = parse("a @ m + 1")
    first = expr.evaluate(SCOPE)
    assert_same(expr.evaluate(SCOPE), first)
    assert_same(expr.evaluate({"a": B, "m": M}), B @ M + 1)


def test_scope_takes_precedence_over_constants():
    assert ev("pi", {"pi": 3}) == 3
    assert ev("inf + 1", {}) == math.inf


# ------------------------------------------------------------------ device and dtype


@pytest.mark.parametrize(
    "source, dtype",
    [
        ("ones(2, 2)", torch.float64),
        ("zeros(2)", torch.float64),
        ("eye(2)", torch.float64),
        ("full((2,), 0.5)", torch.float64),
        ("arange(0, 1, 0.5)", torch.float64),
        ("tensor([1., 2.])", torch.float64),
        ("tensor([])", torch.float64),
        ("tensor(a)", torch.float64),
        ("arange(3)", torch.int64),
        ("tensor([1, 2])", torch.int64),
        ("full((2,), 1)", torch.int64),
        ("ones(2, dtype=float16)", torch.float16),
        ("arange(3, dtype=float32)", torch.float32),
        ("tensor([1.5], dtype=bfloat16)", torch.bfloat16),
        ("ones(2, dtype=int32)", torch.int32),
    ],
)
def test_dtype_injection(source, dtype):
    assert ev(source, dtype=torch.float64).dtype == dtype


def test_dtype_property_reports_injected_dtype():
    assert ev("ones(2, 2).dtype", dtype=torch.float64) is torch.float64
    assert ev("ones(2, 2).dtype") is torch.float32


def test_float64_literals_keep_precision():
    got = ev("tensor([0.1, 0.2])", dtype=torch.float64)
    assert got.tolist() == [0.1, 0.2]


def test_device_injection():
    assert ev("ones(2)", {}, device="cpu").device.type == "cpu"
    meta = ev("ones(2, 3) @ eye(3)", {}, device="meta")
    assert meta.device.type == "meta" and meta.shape == (2, 3)
    for source in ["zeros(2)", "full((2,), 1.0)", "arange(4)", "tensor([1, 2])", "eye(2)"]:
        assert ev(source, {}, device=torch.device("meta")).device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_device_injection():
    assert ev("ones(2) + arange(2)", {}, device="cuda").device.type == "cuda"


# ------------------------------------------------------------------ caller functions


def test_caller_function_is_called():
    calls = []

    def attention(q, k, v, scale=None):
        calls.append(scale)
        return q + k + v

    expr = parse("attention(a, b, a, scale=1)", extra_functions={"attention"})
    assert_same(expr.evaluate(SCOPE, functions={"attention": attention}), A + B + A)
    assert calls == [1]


def test_caller_function_takes_precedence_over_builtin():
    def my_softmax(x, dim=-1):
        return "mine"

    expr = parse("softmax(a, dim=0)")
    assert expr.evaluate(SCOPE, functions={"softmax": my_softmax}) == "mine"
    assert_same(expr.evaluate(SCOPE), torch.softmax(A, 0))


def test_caller_function_exceptions_propagate_unchanged():
    class Wrong(Exception):
        pass

    error = Wrong("student code broke")

    def attention(*args):
        raise error

    expr = parse("1 + attention(a)", extra_functions=["attention"])
    with pytest.raises(Wrong) as info:
        expr.evaluate(SCOPE, functions={"attention": attention})
    assert info.value is error

    def broken_softmax(x, dim):
        raise RuntimeError("shape bug")

    with pytest.raises(RuntimeError, match="^shape bug$"):
        parse("softmax(a, 1)").evaluate(SCOPE, functions={"softmax": broken_softmax})


def test_declared_function_not_supplied():
    err = failure("2 * attention(a)", extra_functions={"attention"})
    assert err.message == "function 'attention' was not supplied"
    assert err.column == 5


# ------------------------------------------------------------------ refusals at parse time


@pytest.mark.parametrize(
    "source, message, column",
    [
        ("__import__('os')", "names starting with '_' are not allowed: '__import__'", 1),
        ("x.__class__", "attributes starting with '_' are not allowed: '__class__'", 3),
        ("x._foo", "attributes starting with '_' are not allowed: '_foo'", 3),
        ("_x + 1", "names starting with '_' are not allowed: '_x'", 1),
        ("eval('1')", "unknown function 'eval'", 1),
        ("open(p)", "unknown function 'open'", 1),
        ("1 + exec(x)", "unknown function 'exec'", 5),
        ("getattr(x, y)", "unknown function 'getattr'", 1),
        ("lambda: 1", "lambdas are not allowed", 1),
        ("[i for i in x]", "comprehensions are not allowed", 1),
        ("(i for i in x)", "comprehensions are not allowed", 1),
        ("{i: i for i in x}", "comprehensions are not allowed", 1),
        ("'abc'", "strings are not allowed", 1),
        ("x + 'abc'", "strings are not allowed", 5),
        ("ones(2, dtype='float64')", "strings are not allowed", 15),
        ("b'abc'", "bytes are not allowed", 1),
        ("f'{x}'", "f-strings are not allowed", 1),
        ("1j", "complex numbers are not allowed", 1),
        ("{1: 2}", "dicts are not allowed", 1),
        ("{1, 2}", "sets are not allowed", 1),
        ("x if y else z", "conditional expressions (`a if c else b`) are not allowed", 1),
        ("a < b < c", "chained comparisons are not allowed; compare two values at a time", 1),
        ("a and b", "`and`/`or` are not allowed; use `&` and `|` on masks", 1),
        ("a or b", "`and`/`or` are not allowed; use `&` and `|` on masks", 1),
        ("a is None", "operator `is` is not allowed", 1),
        ("a in b", "operator `in` is not allowed", 1),
        ("a << 2", "operator `<<` is not allowed", 1),
        ("ones(**{})", "`**` arguments are not allowed", 6),
        ("ones(*x)", "starred expressions (`*x`) are not allowed", 6),
        ("(*x, 1)", "starred expressions (`*x`) are not allowed", 2),
        ("(y := 1)", "assignment expressions (`:=`) are not allowed", 2),
        ("x.numpy()", "method 'numpy' is not allowed", 3),
        ("x.T.tolist()", "method 'tolist' is not allowed", 5),
        (
            "x.masked_fill_(m, 0)",
            "method 'masked_fill_' is not allowed: nothing is changed in place, use `masked_fill`",
            3,
        ),
        ("(1).bit_length()", "attributes and methods are only allowed on tensors and records", 1),
        ("(1).float()", "attributes and methods are only allowed on tensors and records", 1),
        ("[1, 2].T", "attributes and methods are only allowed on tensors and records", 1),
        ("x[0](1)", "only named functions and tensor methods can be called", 1),
        ("exp(a, out=b)", "keyword argument 'out' is not allowed", 8),
        ("ones(2, device=d)", "keyword argument 'device' is not allowed", 9),
        ("ones(2, _x=1)", "keyword arguments starting with '_' are not allowed: '_x'", 9),
        ("a +", "syntax error: invalid syntax (the expression ends early)", 4),
        ("a b", "syntax error: invalid syntax", 3),
        ("x = 1", "syntax error: invalid syntax", 3),
        ("import os", "syntax error: invalid syntax", 1),
    ],
)
def test_refused_at_parse_time(source, message, column):
    err = refusal(source)
    assert err.message == message
    assert err.column == column
    assert err.source == source
    assert str(err) == f"{message} (at column {column})"


def test_await_and_yield_are_refused():
    # Outside a function these do not even parse; either way parse() refuses them.
    for source in ["await x", "(yield x)"]:
        assert isinstance(refusal(source), ExprError)


def test_extra_functions_allow_calls():
    refusal("attention(q, k, v)")
    expr = parse("attention(q, k, v)", extra_functions={"attention"})
    assert expr.calls == {"attention"}


def test_bare_function_names_are_just_names():
    # `open` and `eval` are not Python builtins here: they are unknown names.
    expr = parse("open")
    assert expr.names == {"open"}
    err = failure("open + 1", {})
    assert err.message == "unknown name 'open'" and err.column == 1


def test_columns_count_characters_not_bytes():
    err = refusal("é + ü.__dict__")
    assert err.column == 7
    err = refusal("ééé b")
    assert err.message.startswith("syntax error") and err.column == 5


def test_columns_include_leading_whitespace():
    assert refusal("   x.__class__").column == 6
    assert failure("  q @ k", {"q": A, "k": B}).column == 3


def test_too_long_source():
    source = "1" + " + 1" * 700
    err = refusal(source)
    assert err.message == f"expression is {len(source)} characters long; the limit is 2000"
    assert err.column is None
    assert str(err) == err.message


def test_too_deep():
    assert parse("-" * 49 + "x").names == {"x"}
    err = refusal("-" * 50 + "x")  # 51 nested nodes: the name is one too many
    assert err.message == "expression is nested too deeply; the limit is 50"
    assert err.column == 51
    err = refusal("-" * 1990 + "x")  # too deep even for Python's parser
    assert "nested too deeply" in err.message
    assert refusal("(" * 300 + "x" + ")" * 300).message.startswith("syntax error")


def test_source_must_be_a_string():
    with pytest.raises(ExprError, match="must be a string"):
        parse(b"1 + 1")


# ------------------------------------------------------------------ runtime errors


def test_runtime_error_quotes_the_failing_subexpression():
    q = torch.ones(4, 5)
    err = failure("q @ k", {"q": q, "k": q})
    assert str(err) == ("`q @ k` failed: mat1 and mat2 shapes cannot be multiplied (4x5 and 4x5) (at column 1)")
    err = failure("softmax(x + (q @ k), 1)", {"q": q, "k": q, "x": 1})
    assert err.message.startswith("`q @ k` failed: mat1 and mat2 shapes cannot be multiplied")
    assert err.column == 14
    assert isinstance(err.__cause__, RuntimeError)


def test_runtime_error_in_method_and_builtin():
    err = failure("a.reshape(5, 5)")
    assert err.message.startswith("`a.reshape(5, 5)` failed: shape '[5, 5]' is invalid")
    assert err.column == 1
    err = failure("1 + cat([a, m])")
    assert err.message.startswith("`cat([a, m])` failed: ")
    assert "\n" not in err.message and err.column == 5
    err = failure("a[5]")
    assert err.message.startswith("`a[5]` failed: index 5 is out of bounds")
    err = failure("1 / 0", {})
    assert err.message == "`1 / 0` failed: division by zero"
    err = failure("sqrt(-1)", {})
    assert err.message == "`sqrt(-1)` failed: math domain error"


def test_multiline_segment_is_quoted_on_one_line():
    err = failure("(a\n @ a)")
    assert err.message.startswith("`a @ a` failed:") and err.column == 2


def test_unknown_name():
    err = failure("a + foo * 2")
    assert err.message == "unknown name 'foo'"
    assert str(err) == "unknown name 'foo' (at column 5)"


def test_method_on_a_non_tensor():
    err = failure("n.float()")
    assert err.message == "`n.float()` failed: 'float' is a tensor method, and the value is a int"
    err = failure("key.sum()")
    assert "the value is a SimpleNamespace" in err.message


def test_attribute_errors():
    err = failure("a.weight")
    assert err.message == "`a.weight` failed: tensors have no property 'weight'"
    err = failure("a.sum")
    assert err.message == "`a.sum` failed: tensors have no property 'sum'; it is a method, call it"
    err = failure("key.scale")
    assert err.message == ("`key.scale` failed: the record has no field 'scale' (it has: bias, name_count, weight)")
    assert err.column == 1
    err = failure("n.real")
    assert err.message == "`n.real` failed: cannot read attribute 'real' of a int"
    err = failure("a.shape.index")
    assert "cannot read attribute 'index' of a Size" in err.message


def test_record_class_attributes_are_not_reachable():
    class Record(types.SimpleNamespace):
        secret = "class attribute"

    err = failure("r.secret", {"r": Record(weight=1)})
    assert "has no field 'secret'" in err.message


def test_cannot_index_a_non_sequence():
    err = failure("key[0]")
    assert err.message == "`key[0]` failed: cannot index a SimpleNamespace"


def test_to_refuses_devices():
    err = failure("a.to(d)", {"a": A, "d": "cuda"})
    assert err.message == "`a.to(d)` refused: `to` only converts dtypes, e.g. `x.to(float64)`"
    failure("a.to(b)")  # a tensor as a template carries a device
    failure("a.to(float64, d)", {"a": A, "d": torch.device("cpu")})
    failure("a.to(float64, non_blocking=True)")


def test_sequence_repetition_is_refused():
    err = failure("[0] * 1000000000", {})
    assert err.message == "`[0] * 1000000000` failed: only `+` is allowed on tuples and lists"
    failure("a.shape * 2")


# ------------------------------------------------------------------ resource limits

LONG = torch.int64
LIMIT = "the limit is 10000"


@pytest.fixture
def small_limits(monkeypatch):
    """MAX_ELEMENTS = 10_000 and MAX_TOTAL_ELEMENTS = 40_000, so that refusals are tested with small inputs."""
    monkeypatch.setattr(expr_module, "MAX_ELEMENTS", 10_000)
    monkeypatch.setattr(expr_module, "MAX_TOTAL_ELEMENTS", 40_000)


class Allocations(TorchFunctionMode):
    """The largest tensor torch returns off the meta device while the mode is on."""

    largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for part in result if isinstance(result, tuple) else (result,):
            if isinstance(part, torch.Tensor) and not part.is_meta:
                self.largest = max(self.largest, part.numel())
        return result


def refused(source, scope):
    """The refusal of ``source``, asserting that torch made nothing over the limit on the way."""
    with Allocations() as allocations:
        err = failure(source, scope)
    assert allocations.largest <= expr_module.MAX_ELEMENTS
    assert " refused: " in err.message
    return err


BIG = {
    "x": torch.ones(1000, 1),
    "y": torch.ones(1, 1000),
    "z": torch.ones(100, 100),
    "row": torch.ones(1, 1000),
    "i": torch.zeros(1000, dtype=LONG),
    "col": torch.zeros(1000, 1, dtype=LONG),
    "w": torch.arange(100).reshape(10, 10),
    "m": torch.arange(10) == 3,
    "j": torch.zeros(100_000, dtype=LONG),
    "p": torch.ones(20, 1, 1, 50),
    "r": torch.ones(1, 20, 50, 1),
    "t": torch.zeros((), dtype=LONG) + 101,
    "long": [0] * 101,
    "rows": [[0] * 101] * 100,
    "d": torch.ones(200, 200),
    "dm": torch.ones(200, 200, dtype=torch.bool),
}


@pytest.mark.parametrize(
    "source, count",
    [
        # creation
        ("ones(101, 100)", 10_100),
        ("zeros((101, 100))", 10_100),
        ("full((101, 100), 0.5)", 10_100),
        ("eye(101)", 10_201),
        ("arange(10_001)", 10_001),
        ("arange(0.0, 1.0, 1e-5)", 100_000),
        ("tensor(rows)", 10_100),
        ("ones(t, 100)", 10_100),
        # broadcasts: operators, methods and builtins with a second tensor
        ("x * y", 10**6),
        ("x <= y", 10**6),
        ("x.max(y)", 10**6),
        ("x.eq(other=y)", 10**6),
        ("x.isclose(y)", 10**6),
        ("x.masked_fill(y > 0, 0.0)", 10**6),
        ("where(x > 0, x, y)", 10**6),
        ("maximum(x, y)", 10**6),
        ("minimum(x, y)", 10**6),
        ("masked_fill(x, y > 0, 0.0)", 10**6),
        # matrix products, also with an empty inner dimension
        ("x @ y", 10**6),
        ("matmul(x, y)", 10**6),
        ("x.matmul(other=y)", 10**6),
        ("bmm(x[None], y[None])", 10**6),
        ("zeros(1000, 0) @ zeros(0, 1000)", 10**6),
        # a batched product of 400 elements, whose operands torch first copies out to the (20, 20) batch
        ("p @ r", 20_000),
        ("matmul(p, r)", 20_000),
        ("p.matmul(r)", 20_000),
        # repeat and expand (an expanded view shows as many elements as it would hold)
        ("z.repeat(2, 1)", 20_000),
        ("z.T.repeat(1, 1, 2)", 20_000),
        ("x.expand(1000, 1000)", 10**6),
        ("x.expand(-1, 11)", 11_000),
        # cat and stack
        ("cat([z, z])", 20_000),
        ("cat((z, z), dim=1)", 20_000),
        ("stack((z,) + (z,))", 20_000),
        ("stack(tensors=[z, z])", 20_000),
        # advanced indexing with tensors and lists
        ("row[i]", 10**6),
        ("w[col, i]", 10**6),
        ("x[:, i]", 10**6),
        ("w[[col, i]]", 10**6),
        ("z[(col, i)]", 10**6),
        ("z[long]", 10_100),
        ("z[[0, 1] + long]", 10_300),
        ("row[True, i]", 10**6),
        # a boolean mask with one True, broadcast against 10**5 indices
        ("w[m, j]", 100_000),
        # a dense mask: its True positions counted, not listed (listing them would allocate 80,000)
        ("d[dm]", 40_000),
        # torch's own attention: its (L, S) weights as well as its output
        ("scaled_dot_product_attention(x[:, :, None], x[:1, :, None], y[:, None])", 10**6),
        ("scaled_dot_product_attention(x[None], x[None], x[None])", 10**6),
    ],
)
@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence for multidimensional indexing")
def test_oversized_results_are_refused_before_allocating(small_limits, source, count):
    err = refused(source, BIG)
    if count is not None:
        assert err.message.endswith(f"would create {count} elements; {LIMIT}")
    assert err.column == 1


@pytest.mark.parametrize(
    "source, shape",
    [
        ("zz[i2]", (2, 200)),  # 400 elements: sized on the meta device, as zz * 2 would not be
        ("zz[mask]", (5,)),  # a mask selects its count of True
        ("zz[:, zz[0] > 0]", (200, 5)),
        ("zz[None, ..., 0]", (1, 200)),
        ("zz.sum(0)", (200,)),
        ("zz[0].reshape(10, 20).T", (20, 10)),  # views of a part
        ("zz[0, 0].item()", ()),
        ("int(zz.sum())", ()),
    ],
)
def test_large_operands_with_small_results_are_allowed(small_limits, source, shape):
    zz = torch.zeros(200, 200)  # 40_000 elements, from the caller
    zz[0, :5] = 1
    got = ev(source, {"zz": zz, "mask": zz > 0, "i2": torch.tensor([0, 1])})
    assert (got.shape if isinstance(got, torch.Tensor) else ()) == shape


@pytest.mark.parametrize("source", ["zz.allclose(zz)", "zz[bools]"])
def test_value_dependent_results_of_large_operands_are_refused(small_limits, source):
    # The meta device has no values to count True in a list, or to compare.
    err = refused(source, {"zz": torch.zeros(200, 200), "bools": [True] * 200})
    assert err.message == f"`{source}` refused: its size depends on values, which the meta device does not have"


def test_refusals_at_full_size():
    # The real limits, and results that would not fit in memory at all.
    scope = {"x": torch.ones(2, 2), "i": torch.zeros(1, dtype=LONG).expand(10**9)}  # a view: no storage
    for source in [
        "ones(2**40)",
        "x.repeat(10**6, 10**6)",
        "x[i]",
        "eye(2**20)",
        "x[i, i, None] + 1",
        "arange(0.0, 1.0, 1e-9)",
        "ones(2**12, 1) @ ones(1, 2**12 + 1)",
    ]:
        err = refused(source, scope)
        assert err.message.endswith("elements; the limit is 16777216"), source


def test_at_the_limit_is_allowed():
    assert expr_module.MAX_ELEMENTS == 2**24 and expr_module.MAX_TOTAL_ELEMENTS == 2**25
    assert ev("ones(2**12, 1).expand(-1, 2**12).shape", {}) == (2**12, 2**12)
    assert ev("arange(2**24).numel()", {}) == 2**24


def test_small_expressions_are_not_sized_on_the_meta_device(monkeypatch):
    # Their quick bound is under the limits: the meta device (and its first-use imports) is not needed.
    def unused(*args):
        raise AssertionError("sized on the meta device")

    monkeypatch.setattr(expr_module, "size_on_meta", unused)
    test_worked_examples()
    for source, expected in METHOD_CASES:
        assert_same(ev(source), expected)


def test_supplied_functions_run_only_for_real(small_limits):
    devices = []

    def attention(q, k):
        devices.append((q.device.type, k.device.type))
        return torch.ones(300, 100)  # 30_000: charged once it returns

    scope, functions = {"zz": torch.ones(200, 200)}, {"attention": attention}
    expr = parse("attention(zz, zz).sum()", extra_functions={"attention"})
    assert_same(expr.evaluate(scope, functions=functions), torch.tensor(30000.0))
    err = failure("attention(zz, zz).sum() + ones(100, 100)", scope, extra_functions={"attention"}, functions=functions)
    assert err.message == (
        "`ones(100, 100)` refused: would create 10000 more elements, 40001 in all; the budget is 40000"
    )
    assert devices == [("cpu", "cpu")] * 2


# ------------------------------------------------------------------ the budget


def test_budget_refuses_chains_of_allowed_operations(small_limits):
    # 10_000 each: three ones and a sum make 40_000, and the second sum would pass the budget.
    source = "ones(100, 100) + ones(100, 100) + ones(100, 100)"
    err = refused(source, {})
    assert err.message == (f"`{source}` refused: would create 10000 more elements, 50000 in all; the budget is 40000")
    assert_same(ev("ones(100, 100) + ones(100, 100) + 1", {}), torch.full((100, 100), 3.0))
    scope = {"z": torch.zeros(100, 100), "i": torch.zeros(100, dtype=LONG)}
    for source in [
        "exp(exp(exp(exp(exp(z)))))",
        "-(-(-(-(-z))))",
        "z[i][i][i][i][i]",
        "z.double().float().double().float().double()",
        "cat([z[:50], z[50:]]) * stack([z[:50], z[50:]]).reshape(100, 100) + z + z",
    ]:
        assert refused(source, scope).message.endswith("the budget is 40000"), source


def test_budget_charges_nothing_for_views_and_the_scope(small_limits):
    scope = {"z": torch.zeros(100, 100)}
    views = "z.T.mT.T.transpose(0, 1).permute(1, 0).reshape(10000).view(100, 100)[0][1:3]"
    assert ev(views, scope).shape == (2,)
    assert ev("z.contiguous().float().to(float32) + z + z + z", scope).shape == (100, 100)
    expr = parse("z + z + z")  # 30_000 per evaluation: each starts afresh
    for _ in range(3):
        expr.evaluate(scope)


def test_budget_shared_by_evaluations(small_limits):
    budget = Budget(24_000)
    scope = {"z": torch.zeros(100, 100)}
    parse("z + 1").evaluate(scope, budget=budget)
    parse("ones(50, 100)").evaluate(scope, budget=budget)
    assert (budget.limit, budget.spent) == (24_000, 15_000)
    err = failure("z * 2", scope, budget=budget)
    assert err.message == "`z * 2` refused: would create 10000 more elements, 25000 in all; the budget is 24000"
    assert budget.spent == 15_000  # a refusal spends nothing
    assert parse("z[0] * 2").evaluate(scope, budget=budget).shape == (100,)
    assert budget.spent == 15_100


def test_budget_of_an_evaluation_inside_a_function(small_limits):
    inner = parse("ones(100, 100) + ones(100, 100)")  # 30_000, on a budget of its own

    def f():
        return inner.evaluate({}).sum()

    outer = parse("(ones(100, 100) + ones(100, 100)).sum() + f()", extra_functions=("f",))
    assert_same(outer.evaluate({}, functions={"f": f}), torch.tensor(40000.0))


# ------------------------------------------------------------------ call_arguments


def test_call_arguments_evaluates_only_the_arguments():
    calls = []

    def attention(*args, **kwargs):
        calls.append(args)

    def causal_mask(n):
        return torch.ones(n, n, dtype=torch.bool).tril()

    expr = parse(
        "attention(a, b @ m, mask=causal_mask(3), scale=n ** -0.5)", extra_functions={"attention", "causal_mask"}
    )
    name, args, kwargs = expr.call_arguments(SCOPE, functions={"attention": attention, "causal_mask": causal_mask})
    assert name == "attention" and calls == []
    assert_same(args[0], A)
    assert_same(args[1], B @ M)
    assert set(kwargs) == {"mask", "scale"}
    assert_same(kwargs["mask"], causal_mask(3))
    assert kwargs["scale"] == 8**-0.5


def test_call_arguments_of_a_builtin_and_on_a_budget(small_limits):
    budget = Budget(40_000)
    name, args, kwargs = parse("softmax(ones(100, 100) * 2, dim=0)").call_arguments(
        {}, dtype=torch.float64, budget=budget
    )
    assert (name, kwargs) == ("softmax", {"dim": 0})
    assert_same(args[0], torch.full((100, 100), 2.0, dtype=torch.float64))
    assert budget.spent == 20_000


@pytest.mark.parametrize("source, column", [("a + f(b)", 1), ("  a.sum(1)", 3), ("a", 1), ("f(a)[0]", 1)])
def test_call_arguments_needs_one_call_of_a_name(source, column):
    expr = parse(source, extra_functions={"f"})
    with pytest.raises(ExprError) as info:
        expr.call_arguments(SCOPE, functions={"f": lambda x: x})
    assert info.value.message == "the expression must be one call of a named function, e.g. `f(x, y)`"
    assert info.value.column == column


def test_call_arguments_failures_quote_the_argument():
    err = pytest.raises(ExprError, parse("f(a, a @ a)", extra_functions={"f"}).call_arguments, SCOPE).value
    assert err.message.startswith("`a @ a` failed: mat1 and mat2 shapes cannot be multiplied")
    assert err.column == 6


# ------------------------------------------------------------------ ExprError


def test_expr_error_shape():
    err = ExprError("boom", 3, "x + y")
    assert isinstance(err, ValueError)
    assert (err.message, err.column, err.source) == ("boom", 3, "x + y")
    assert str(err) == "boom (at column 3)"
    assert str(ExprError("boom")) == "boom"
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.message, copy.column, copy.source, str(copy)) == ("boom", 3, "x + y", str(err))


def test_torch_oracles_are_torch_own_functions():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, generator=g, dtype=torch.float64) for _ in range(3))
    got = parse("scaled_dot_product_attention(q, k, v, is_causal=True)").evaluate({"q": q, "k": k, "v": v})
    torch.testing.assert_close(got, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    got = parse("torch_layer_norm(q, eps=0.5)").evaluate({"q": q})
    torch.testing.assert_close(got, torch.nn.functional.layer_norm(q, (4,), eps=0.5))


def test_integer_power_limits():
    assert ev("2 ** 64", {}) == 2**64
    assert ev("2.0 ** 100", {}) == 2.0**100
    assert_same(ev("a ** 100"), A**100)
    err = failure("1 + 2 ** 65", {})
    assert err.message == "`2 ** 65` refused: integer power with exponent 65; the limit is 64"
    assert err.column == 5
    err = failure("(10 ** 64) ** 64", {})
    assert err.message == "`(10 ** 64) ** 64` refused: integer power would exceed 4096 bits"
    failure("10 ** 10 ** 10", {})


def test_sequence_length_limit(monkeypatch):
    long = [0] * 2**16
    assert len(ev("l + []", {"l": long})) == 2**16
    err = failure("l + [1]", {"l": long})
    assert err.message == "`l + [1]` refused: would create a sequence of 65537 items; the limit is 65536"
    monkeypatch.setattr(expr_module, "MAX_SEQUENCE", 4)
    assert ev("(1, 2) + (3, 4)", {}) == (1, 2, 3, 4)
    err = failure("[1, 2] + [3, 4] + [5]", {})
    assert err.message == ("`[1, 2] + [3, 4] + [5]` refused: would create a sequence of 5 items; the limit is 4")
    assert err.column == 1
    err = failure("[0] * t", {"t": torch.tensor([10**9])})  # no repetition by a tensor either
    assert err.message == "`[0] * t` failed: only `+` is allowed on tuples and lists"


@pytest.mark.parametrize(
    "args, kwargs", [((7,), {}), ((7, 3), {}), ((7,), {"m": 3}), ((7,), {"dtype": torch.float64}), ((), {"n": 5})]
)
def test_the_quick_bound_of_eye_is_its_size(args, kwargs):
    assert expr_module.SIZE_BOUNDS["eye"](args, kwargs) == torch.eye(*args, **kwargs).numel()


def test_a_budget_runs_out_of_time_and_a_large_matrix_product_is_refused_before_it_runs():
    budget = Budget(2**30, seconds=0.0)  # its time already up
    err = failure("ones(2, 2) + 1", {}, budget=budget)
    assert "ran out of its time budget of 0 s" in err.message
    err = failure("ones(2048, 2048) @ ones(2048, 2048)", {})
    assert (
        err.message.endswith("would take 8589934592 multiply-adds; the limit is 2147483648 (at column 1)")
        or "would take 8589934592 multiply-adds; the limit is 2147483648" in err.message
    )
