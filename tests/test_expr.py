"""Tests of the case-file expression language (attention_core.harness.expr)."""

import math
import pickle
import types

import pytest
import torch

from attention_core.harness import expr as expr_module
from attention_core.harness.expr import BUILTINS, CONSTANTS, Expr, ExprError, parse

torch.manual_seed(0)
A = torch.randn(3, 4)
B = torch.randn(3, 4)
M = torch.randn(4, 5)
P = torch.rand(3, 4) + 0.5  # positive: safe for log, sqrt, pow
I = torch.tensor([[5, -3], [7, 2]])
J = torch.tensor([[2, 4], [-3, 5]])
X3 = torch.randn(2, 3, 4)
MASK = torch.tensor([[True, False], [False, True]])
MASK2 = torch.tensor([[True, True], [False, True]])
V = torch.randn(4)
U = torch.randn(3)
W = torch.randn(3, 4)
REC = types.SimpleNamespace(weight=torch.randn(4, 2), bias=torch.randn(2), name_count=3)

SCOPE = {
    "a": A, "b": B, "m": M, "p": P, "i": I, "j": J, "x3": X3, "mask": MASK, "mask2": MASK2,
    "v": V, "u": U, "w": W, "key": REC, "n": 8, "half_n": 4.0,
}


def ev(source, scope=SCOPE, **kwargs):
    return parse(source).evaluate(scope, **kwargs)


def assert_same(got, expected):
    """Equal values and, for tensors, equal dtype and shape (NaN == NaN)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert torch.allclose(got, expected, equal_nan=True, rtol=1e-6, atol=1e-6) if (
            expected.is_floating_point()
        ) else torch.equal(got, expected)
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
    from attention_core.harness.expr import TENSOR_METHODS

    sources = " ".join(source for source, _ in METHOD_CASES)
    assert {name for name in TENSOR_METHODS if f".{name}(" not in sources} == set()


# ------------------------------------------------------------------ builtins


@pytest.mark.parametrize(
    "source, expected",
    [
        ("tril(a)", torch.tril(A)),
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


def test_builtin_list():
    assert set(BUILTINS) == {
        "tril", "triu", "ones", "zeros", "full", "eye", "arange", "tensor", "masked_fill",
        "bmm", "matmul", "exp", "log", "sqrt", "abs", "softmax", "stack", "cat", "where",
        "maximum", "minimum", "float", "int", "scaled_dot_product_attention", "torch_layer_norm",
    }
    assert set(CONSTANTS) == {
        "inf", "nan", "pi", "float16", "bfloat16", "float32", "float64", "int32", "int64", "bool",
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
    assert_same(ev("MW_Q.permute(2, 0, 1).reshape(64, 128)", {"MW_Q": mw}),
                mw.permute(2, 0, 1).reshape(64, 128))
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

    expr = parse("attention(q, k, v, scale=s).sum(1) + softmax(key.weight, dim=0)[0, 0]",
                 extra_functions={"attention"})
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
        ("x.masked_fill_(m, 0)", "method 'masked_fill_' is not allowed", 3),
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
    assert str(err) == (
        "`q @ k` failed: mat1 and mat2 shapes cannot be multiplied (4x5 and 4x5) (at column 1)"
    )
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
    assert err.message == (
        "`key.scale` failed: the record has no field 'scale' (it has: bias, name_count, weight)"
    )
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


def test_creation_over_the_limit_is_refused_before_allocating(monkeypatch):
    def no_allocation(*args, **kwargs):
        raise AssertionError("allocated")

    monkeypatch.setattr(torch, "ones", no_allocation)
    err = failure("ones(100000, 100000)", {})
    assert err.message == (
        "`ones(100000, 100000)` refused: would create 10000000000 elements; the limit is 67108864"
    )
    assert err.column == 1


@pytest.mark.parametrize(
    "source",
    [
        "zeros((8192, 8193))",
        "full((2**13, 2**13 + 1), 0.0)",
        "eye(10000)",
        "arange(0, 2**27)",
        "arange(0.0, 1.0, 1e-9)",
        "ones(2**26).repeat(2)",
        "ones(4096, 1).repeat(1, 2**14 + 1)",
        "ones(1, 1).expand(2**13, 2**13 + 1)",
        "ones(2**13, 1).expand(-1, 2**13 + 1)",
        "ones(2**13, 1) * ones(1, 2**13 + 1)",
        "ones(2**13, 1) == ones(1, 2**13 + 1)",
        "ones(2**13, 1) @ ones(1, 2**13 + 1)",
        "matmul(ones(2**13, 1), ones(1, 2**13 + 1))",
        "ones(2**13, 1).matmul(ones(1, 2**13 + 1))",
        "bmm(ones(1, 2**13, 1), ones(1, 1, 2**13 + 1))",
        "where(ones(2**13, 1) > 0, ones(1, 2**13 + 1), 0.0)",
        "maximum(ones(2**13, 1), ones(1, 2**13 + 1))",
        "ones(2**13, 1).masked_fill(ones(1, 2**13 + 1) > 0, 0)",
        "ones(2**13, 0) @ ones(0, 2**13 + 1)",
        # advanced indexing, sized before indexing (expand makes views: nothing allocated)
        "ones(1, 2**13)[zeros(2**13 + 1, dtype=int64)]",
        "ones(2, 2)[zeros(2**13, 1, dtype=int64), zeros(1, 2**13 + 1, dtype=int64)]",
        "ones(1, 1).expand(1, 2**26)[[0, 0]]",
        # methods and builtins that broadcast against a second tensor
        "ones(2**13, 1).max(ones(1, 2**13 + 1))",
        "ones(2**13, 1).min(other=ones(1, 2**13 + 1))",
        "ones(2**13, 1).eq(other=ones(1, 2**13 + 1))",
        "ones(2**13, 1).isclose(ones(1, 2**13 + 1))",
        "ones(2**13, 1).allclose(ones(1, 2**13 + 1))",
        "ones(2**13, 1).masked_fill(mask=ones(1, 2**13 + 1) > 0, value=0)",
        "ones(2**13, 1).matmul(other=ones(1, 2**13 + 1))",
        "where(ones(2**9, 1, 1) > 0, ones(1, 2**9, 1), ones(1, 1, 2**9))",
        "maximum(ones(2**20, 1), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "
        "0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "
        "0, 0, 0, 0, 0, 0, 0, 0, 0, 0])",
        "scaled_dot_product_attention(ones(2**13, 1, 1), ones(1, 1, 1), ones(1, 1, 2**13 + 1))",
        # cat and stack: the inputs' elements together
        "cat([ones(1, 1).expand(2**13, 2**13), ones(1, 2**13)])",
        "stack([ones(1, 1).expand(2**13, 2**13)] + [ones(1, 1).expand(2**13, 2**13)])",
    ],
)
def test_resource_limits(source):
    err = failure(source, {})
    assert "refused: would create" in err.message
    assert err.message.endswith("the limit is 67108864")


def test_at_the_limit_is_allowed():
    assert ev("ones(2**13, 1).expand(-1, 2**13)", {}).shape == (2**13, 2**13)
    assert ev("arange(2**26).numel()", {}) == 2**26


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


# ------------------------------------------------------------------ limits that guards size


@pytest.fixture
def small_limit(monkeypatch):
    """MAX_ELEMENTS = 10_000, so that refusals are tested with small, fast inputs."""
    monkeypatch.setattr(expr_module, "MAX_ELEMENTS", 10_000)


def refused_without_calling(owner, name, source, scope):
    """The ExprError for ``source``, asserting that ``owner.name`` (the allocation) never ran."""

    def no_allocation(*args, **kwargs):
        raise AssertionError(f"{name} ran")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(owner, name, no_allocation)
        return failure(source, scope)


LONG = torch.int64


@pytest.mark.parametrize(
    "source, scope, count",
    [
        ("x[i]", {"x": torch.ones(1, 1000), "i": torch.zeros(1000, dtype=LONG)}, 1000 * 1000),
        ("x[i, j]", {"x": torch.ones(10, 10), "i": torch.zeros(1000, 1, dtype=LONG),
                     "j": torch.zeros(1, 1000, dtype=LONG)}, 1000 * 1000),
        ("x[:, i]", {"x": torch.ones(1000, 1), "i": torch.zeros(1000, dtype=LONG)}, 1000 * 1000),
        ("x[(i, i)]", {"x": torch.ones(10, 10), "i": torch.zeros(1000, 100, dtype=LONG)}, 100_000),
        ("x[[i, i]]", {"x": torch.ones(10, 10), "i": torch.zeros(1000, 100, dtype=LONG)}, 100_000),
        # a mask with one True broadcasts against an index of 10**5
        ("x[m, j]", {"x": torch.ones(10, 10), "m": torch.arange(10) == 3,
                     "j": torch.zeros(100_000, dtype=LONG)}, 100_000),
        ("x[[0, 0, 0]]", {"x": torch.ones(1, 5000)}, 15_000),
        ("x[True, i]", {"x": torch.ones(1, 1000), "i": torch.zeros(1000, dtype=LONG)}, 1000 * 1000),
    ],
)
def test_advanced_indexing_is_sized_before_indexing(small_limit, source, scope, count):
    err = refused_without_calling(torch.Tensor, "__getitem__", source, scope)
    assert err.message == f"`{source}` refused: would create {count} elements; the limit is 10000"


X34 = torch.arange(12).reshape(3, 4)
X234 = torch.arange(24).reshape(2, 3, 4)


@pytest.mark.parametrize(
    "x, index",
    [
        (X34, torch.tensor([0, 2, 2, 1])),
        (X34, torch.tensor([[0, 1], [2, 2]])),
        (X34, (torch.tensor([0, 2]), torch.tensor([1, 3]))),
        (X34, (torch.tensor([[0], [2]]), torch.tensor([1, 3, 0]))),
        (X34, (slice(None), torch.tensor([1, 3, 0]))),
        (X34, (slice(1, None), torch.tensor([[1], [3]]))),
        (X34, (slice(None, None, 2), torch.tensor([1, 1, 1]))),
        (X34, (Ellipsis, torch.tensor([1, 3]))),
        (X34, (None, torch.tensor([1, 2]), None)),
        (X34, (torch.tensor(1), torch.tensor([0, 1, 1]))),
        (X34, (1, torch.tensor([0, 1, 1]))),
        (X34, X34 > 4),
        (X34, X34 > 100),
        (X34, (X34[:, 0] > 0, torch.tensor([3]))),
        (X34, (torch.tensor([True, False, True]), slice(None))),
        (X34, True),
        (X34, False),
        (X34, (True, torch.tensor([0, 0]))),
        (X34, torch.tensor(True)),
        (X34, [0, 2, 2]),
        (X34, [True, False, True]),
        (X34, ([0, 1], [1, 2])),
        (X34, [torch.tensor([0, 1]), torch.tensor([1, 2])]),
        (X234, (Ellipsis, torch.tensor([[0, 1, 3]]))),
        (X234, (torch.tensor([1, 0]), slice(None), torch.tensor([2, 3]))),
        (X234, (slice(None), X234[0] > 5)),
        (X234, (torch.tensor([0, 1, 1]), None, torch.tensor([[2], [0]]))),
        (X234, (0, Ellipsis, torch.tensor([1]), None)),
        (torch.ones(0, 3), torch.tensor([1, 2])[:0]),
    ],
)
@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence for multidimensional indexing")
def test_advanced_indexing_is_sized_exactly(monkeypatch, x, index):
    """With the limit just below the result, the refusal names its exact size; at it, it runs."""
    expected = x[index]
    scope = {"x": x, "index": index}
    if expected.numel() > 0:
        monkeypatch.setattr(expr_module, "MAX_ELEMENTS", expected.numel() - 1)
        if x.numel() * max(1, expected.numel()) > expected.numel() - 1:  # not the quick bound
            err = failure("x[index]", scope)
            assert err.message == (
                f"`x[index]` refused: would create {expected.numel()} elements; "
                f"the limit is {expected.numel() - 1}"
            )
    monkeypatch.setattr(expr_module, "MAX_ELEMENTS", max(1, expected.numel()))
    assert_same(ev("x[index]", scope), expected)


def test_large_tensors_index_within_the_limit(small_limit):
    x = torch.zeros(200, 200)  # 40_000 elements, from the caller
    x[0, :5] = 1
    scope = {"x": x, "m": x > 0, "i": torch.tensor([0, 1])}
    assert ev("x[m]", scope).shape == (5,)  # a mask's result is its count of True
    assert ev("x[i]", scope).shape == (2, 200)  # 400 elements, though x.numel() * 2 is over
    assert ev("x[0]", scope).shape == (200,)  # basic indexing makes views
    assert ev("x[:, 1:3]", scope).shape == (200, 2)
    assert ev("x[None, ..., 0]", scope).shape == (1, 200)
    with pytest.warns(UserWarning):  # torch reads this list as a tuple of indices (deprecated)
        assert ev("x[[[0, 1], [1, 2]]]", scope).shape == (2,)


@pytest.mark.parametrize(
    "source, owner, name",
    [
        ("x.max(y)", torch.Tensor, "max"),
        ("x.min(y)", torch.Tensor, "min"),
        ("x.max(other=y)", torch.Tensor, "max"),
        ("x.eq(other=y)", torch.Tensor, "eq"),
        ("x.ne(y)", torch.Tensor, "ne"),
        ("x.lt(y)", torch.Tensor, "lt"),
        ("x.le(y)", torch.Tensor, "le"),
        ("x.gt(y)", torch.Tensor, "gt"),
        ("x.ge(y)", torch.Tensor, "ge"),
        ("x.isclose(y)", torch.Tensor, "isclose"),
        ("x.allclose(other=y)", torch.Tensor, "allclose"),
        ("x.masked_fill(y > 0, 0.0)", torch.Tensor, "masked_fill"),
        ("x.masked_fill(mask=y > 0, value=0.0)", torch.Tensor, "masked_fill"),
        ("x.matmul(other=y)", torch.Tensor, "matmul"),
        ("x @ y", torch.Tensor, "__matmul__"),
        ("x * y", torch.Tensor, "__mul__"),
        ("x <= y", torch.Tensor, "__le__"),
        ("masked_fill(x, y > 0, 0.0)", torch, "masked_fill"),
        ("matmul(x, y)", torch, "matmul"),
        ("maximum(x, y)", torch, "maximum"),
        ("minimum(x, y)", torch, "minimum"),
        ("where(x > 0, x, y)", torch, "where"),
    ],
)
def test_second_tensor_broadcasts_are_sized(small_limit, source, owner, name):
    scope = {"x": torch.ones(1000, 1), "y": torch.ones(1, 1000)}
    err = refused_without_calling(owner, name, source, scope)
    assert err.message == f"`{source}` refused: would create 1000000 elements; the limit is 10000"


def test_every_method_taking_a_second_tensor_is_guarded():
    from attention_core.harness.expr import _METHOD_GUARDS

    binary = {
        "max", "min", "eq", "ne", "lt", "le", "gt", "ge", "isclose", "allclose", "masked_fill", "matmul",
    }
    assert binary <= set(_METHOD_GUARDS)


def test_three_way_and_list_broadcasts_are_sized(small_limit):
    # Each pair is 100 x 100, within the limit; all three broadcast to 100 x 100 x 100.
    scope = {
        "c": torch.ones(100, 1, 1, dtype=torch.bool), "x": torch.ones(1, 100, 1), "y": torch.ones(1, 1, 100)
    }
    err = refused_without_calling(torch, "where", "where(c, x, y)", scope)
    assert err.message == "`where(c, x, y)` refused: would create 1000000 elements; the limit is 10000"
    # A list operand of maximum becomes a tensor: 1000 x 20.
    source = "maximum(x, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])"
    err = refused_without_calling(torch, "maximum", source, {"x": torch.ones(1000, 1)})
    assert err.message == f"`{source}` refused: would create 20000 elements; the limit is 10000"


def test_attention_output_is_sized(small_limit):
    # The weights are 1000 x 1 x 1 (within the limit); the output is 1000 x 1 x 1000.
    scope = {"q": torch.ones(1000, 1, 4), "k": torch.ones(1, 1, 4), "v": torch.ones(1, 1, 1000)}
    source = "scaled_dot_product_attention(q, k, v)"
    err = refused_without_calling(torch.nn.functional, "scaled_dot_product_attention", source, scope)
    assert err.message == f"`{source}` refused: would create 1000000 elements; the limit is 10000"
    # A mask that broadcasts the weights: 1 x 1000 x 1000.
    scope = {"q": torch.ones(1, 1000, 4), "k": torch.ones(1, 1000, 4), "v": torch.ones(1, 1000, 1),
             "m": torch.zeros(1000, 1)}
    source = "scaled_dot_product_attention(q, k, v, attn_mask=m)"
    err = refused_without_calling(torch.nn.functional, "scaled_dot_product_attention", source, scope)
    assert err.message == f"`{source}` refused: would create 1000000 elements; the limit is 10000"


@pytest.mark.parametrize(
    "source, name, count",
    [
        ("cat([x, x])", "cat", 20_000),
        ("cat((x, x), dim=1)", "cat", 20_000),
        ("cat([x] + [x] + [x])", "cat", 30_000),
        ("stack([x, x])", "stack", 20_000),
        ("stack((x,) + (x,), 1)", "stack", 20_000),
        ("stack(tensors=[x, x])", "stack", 20_000),
    ],
)
def test_cat_and_stack_are_sized(small_limit, source, name, count):
    err = refused_without_calling(torch, name, source, {"x": torch.ones(100, 100)})
    assert err.message == f"`{source}` refused: would create {count} elements; the limit is 10000"


def test_sequence_length_limit(monkeypatch):
    long = [0] * 2**16
    assert len(ev("l + []", {"l": long})) == 2**16
    err = failure("l + [1]", {"l": long})
    assert err.message == "`l + [1]` refused: would create a sequence of 65537 items; the limit is 65536"
    monkeypatch.setattr(expr_module, "MAX_SEQUENCE", 4)
    assert ev("(1, 2) + (3, 4)", {}) == (1, 2, 3, 4)
    err = failure("[1, 2] + [3, 4] + [5]", {})
    assert err.message == (
        "`[1, 2] + [3, 4] + [5]` refused: would create a sequence of 5 items; the limit is 4"
    )
    assert err.column == 1
    err = failure("[0] * t", {"t": torch.tensor([10**9])})  # no repetition by a tensor either
    assert err.message == "`[0] * t` failed: only `+` is allowed on tuples and lists"


# ------------------------------------------------------------------ the evaluation's budget


@pytest.fixture
def small_budget(monkeypatch):
    """MAX_ELEMENTS = 10_000 and MAX_TOTAL_ELEMENTS = 40_000."""
    monkeypatch.setattr(expr_module, "MAX_ELEMENTS", 10_000)
    monkeypatch.setattr(expr_module, "MAX_TOTAL_ELEMENTS", 40_000)


def test_budget_default():
    assert expr_module.MAX_TOTAL_ELEMENTS == 4 * expr_module.MAX_ELEMENTS == 2**28


def test_budget_refuses_chains_of_allowed_operations(small_budget):
    # 10_000 each: three ones and a sum make 40_000, and the second sum would pass the budget.
    source = "ones(100, 100) + ones(100, 100) + ones(100, 100)"
    err = failure(source, {})
    assert err.message == (
        f"`{source}` refused: would create 10000 more elements, 50000 in this evaluation; "
        "the budget is 40000"
    )
    assert err.column == 1
    assert_same(ev("ones(100, 100) + ones(100, 100) + 1", {}), torch.full((100, 100), 3.0))
    assert_same(ev("(ones(100, 100) + ones(100, 100)).sum()", {}), torch.tensor(20000.0))


def test_budget_refuses_before_allocating(monkeypatch, small_budget):
    calls = []
    exp = torch.Tensor.exp

    def counted_exp(self, *args, **kwargs):
        calls.append(self.numel())
        return exp(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "exp", counted_exp)
    source = "x.exp().exp().exp().exp().exp()"
    err = failure(source, {"x": torch.zeros(100, 100)})  # the caller's x costs nothing
    assert err.message == (
        f"`{source}` refused: would create 10000 more elements, 50000 in this evaluation; "
        "the budget is 40000"
    )
    assert calls == [10_000] * 4


def test_budget_covers_builtins_methods_operators_and_indexing(small_budget):
    scope = {"x": torch.zeros(100, 100), "i": torch.zeros(100, dtype=LONG)}
    for source in [
        "exp(exp(exp(exp(exp(x)))))",
        "-(-(-(-(-x))))",
        "x[i][i][i][i][i]",
        "x.float().double().float().double().float().double()",  # x.float() is x itself
        "tril(x).sum(0) + tril(x) + tril(x) + tril(x)",
        "cat([x[:50], x[50:]]) * stack([x[:50], x[50:]]).reshape(100, 100) + x + x",
    ]:
        assert "the budget is 40000" in failure(source, scope).message, source


def test_budget_charges_nothing_for_views_and_the_scope(small_budget):
    scope = {"x": torch.zeros(100, 100), "w": torch.zeros(1000, 1000)}  # w alone is 10**6
    views = "x.T.mT.T.transpose(0, 1).permute(1, 0).reshape(10000).view(100, 100)[0][1:3]"
    assert ev(views, scope).shape == (2,)
    assert ev("w.T.unsqueeze(0).squeeze(0).detach().shape", scope) == (1000, 1000)
    assert ev("x.contiguous().float().to(float32).shape", scope) == (100, 100)  # each is x itself
    expr = parse("x + x + x")  # 20_000 per evaluation: the budget starts afresh
    for _ in range(5):
        expr.evaluate(scope)


def test_budget_of_an_evaluation_inside_a_function(small_budget):
    inner = parse("ones(100, 100) + ones(100, 100)")  # 30_000, counted apart

    def f():
        return inner.evaluate({}).sum()

    # The outer evaluation spends 30_001 before calling f: 60_000 and more if the two were shared.
    outer = parse("(ones(100, 100) + ones(100, 100)).sum() + f()", extra_functions=("f",))
    assert_same(outer.evaluate({}, functions={"f": f}), torch.tensor(40000.0))
    assert expr_module._METER.evaluation is None  # nothing left over after evaluating
    source = "(ones(100, 100) + ones(100, 100)).sum() + f() + ones(100, 100)"
    err = failure(source, {}, extra_functions=("f",), functions={"f": f})
    assert err.message == (
        "`ones(100, 100)` refused: would create 10000 more elements, 40003 in this evaluation; "
        "the budget is 40000"
    )
    assert err.column == source.rindex("ones") + 1
    assert expr_module._METER.evaluation is None


def test_guards_do_not_call_torch_broadcast_shapes(monkeypatch):
    # Its first call imports for a third of a second; the guards size shapes in plain Python.
    def no_broadcast_shapes(*shapes):
        raise AssertionError("torch.broadcast_shapes was called")

    monkeypatch.setattr(torch, "broadcast_shapes", no_broadcast_shapes)
    monkeypatch.setattr(expr_module, "MAX_ELEMENTS", 16)
    # Each quick bound (the product of the operands' sizes) is over 16: the shapes are sized.
    scope = {"x": torch.ones(4, 4), "y": torch.ones(1, 4), "i": torch.zeros(2, 1, dtype=LONG)}
    for source in ["x * y", "x.max(y)", "where(x > 0, x, y)", "x @ y.T", "x[i, i.T]",
                   "scaled_dot_product_attention(x, x, x, attn_mask=y)"]:
        ev(source, scope)
    for source in ["x * x.reshape(16, 1, 1)", "x[zeros(8, 1, dtype=int64), zeros(1, 8, dtype=int64)]"]:
        assert "refused: would create" in failure(source, scope).message


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
