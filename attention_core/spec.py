"""The spec contract: the functions an implementation provides, in one place.

Each function's parameters (with their defaults), the names of its results and whether a
case may grade it. The case loader, the runner, the package's ``__all__``, the float64 torch
route and the spec table of docs/spec.md all read this; grading's template reads it too. Imports
nothing but the standard library.
"""

from dataclasses import dataclass

REQUIRED = object()  # a parameter without a default


@dataclass(frozen=True)
class Param:
    name: str
    default: object = REQUIRED
    doc: str = ""
    shown: str | None = None  # the default as the signature writes it, where repr() would not (1e-5)

    @property
    def required(self):
        return self.default is REQUIRED

    def signature(self):
        if self.required:
            return self.name
        return f"{self.name}={self.shown or repr(self.default)}"


@dataclass(frozen=True)
class SpecFunction:
    """One function of the contract."""

    name: str
    params: tuple[Param, ...]
    returns: tuple[str, ...]  # what a check calls its results when it does not say
    summary: str  # the "returns" column of docs/spec.md's table
    purpose: str = ""  # one sentence for the hand-out's docstring
    graded: bool = True  # whether a case's ``call`` may grade it

    def signature(self):
        return f"{self.name}({', '.join(p.signature() for p in self.params)})"


SPEC = (
    SpecFunction(
        "softmax",
        (Param("x", doc="scores, any shape"), Param("dim", -1, "the axis that sums to one")),
        ("out",),
        "numerically stable softmax (the maximum is subtracted first)",
        "Softmax of x along dim; subtract the maximum first so large scores do not overflow.",
    ),
    SpecFunction(
        "causal_mask",
        (Param("T", doc="number of positions"), Param("device", None, "where to create the mask")),
        ("out",),
        "bool `(T, T)`, True where query `i` may attend to key `j` (`j <= i`)",
        "The causal mask: a bool (T, T) tensor, True on and below the diagonal (query i may attend to key j <= i).",
    ),
    SpecFunction(
        "causal_average",
        (Param("x", doc="(..., T, C)"),),
        ("out",),
        'the "bag of words": row `t` of `(..., T, C)` is the mean of rows `0..t`',
        "The causal average of x: row t of the result is the mean of rows 0..t of x (same shape as x).",
    ),
    SpecFunction(
        "attention",
        (
            Param("q", doc="(..., Tq, d_k)"),
            Param("k", doc="(..., Tk, d_k)"),
            Param("v", doc="(..., Tk, d_v)"),
            Param("mask", None, "bool, True = may attend; or floating, added to the scores"),
            Param("scale", None, "multiplies the scores; default 1 / sqrt(d_k)"),
        ),
        ("output", "weights"),
        "`(output, weights)`: `(..., Tq, d_v)` and `(..., Tq, Tk)`",
        "Scaled dot-product attention: weights = softmax(scale * q @ k^T, masked), output = weights @ v.",
    ),
    SpecFunction(
        "split_heads",
        (Param("x", doc="(..., T, C)"), Param("n_heads", doc="number of heads (the channels divide evenly)")),
        ("out",),
        "`(..., T, C)` → `(..., n_heads, T, C // n_heads)`",
        "Split the channels into heads: (..., T, C) -> (..., n_heads, T, C // n_heads); head h takes channels h*hs..(h+1)*hs.",
    ),
    SpecFunction(
        "merge_heads",
        (Param("x", doc="(..., n_heads, T, hs)"),),
        ("out",),
        "the inverse: `(..., n_heads, T, hs)` → `(..., T, n_heads * hs)`",
        "Merge heads back, the inverse of split_heads: (..., n_heads, T, hs) -> (..., T, n_heads * hs).",
    ),
    SpecFunction(
        "multi_head_attention",
        (
            Param("x", doc="(..., T, C)"),
            Param("w_q", doc="(C, n_heads * d_k)"),
            Param("w_k", doc="(C, n_heads * d_k)"),
            Param("w_v", doc="(C, n_heads * d_v)"),
            Param("n_heads", doc="number of heads (the channels divide evenly)"),
            Param("mask", None, "as attention's, broadcast over the heads"),
        ),
        ("output", "weights"),
        "`(output, weights)`: `(..., T, n_heads * d_v)` and `(..., n_heads, T, T)`",
        "Multi-head self-attention without an output projection: q = x @ w_q (likewise k, v), split into heads, "
        "attend per head with scale 1 / sqrt(d_k), merge.",
    ),
    SpecFunction(
        "layer_norm",
        (
            Param("x", doc="(..., C)"),
            Param("eps", 1e-5, shown="1e-5", doc="added to the variance under the square root"),
        ),
        ("out",),
        "normalised over the last dimension (biased variance), no affine parameters",
        "Layer norm over the last dimension: (x - mean) / sqrt(var + eps), biased variance (divide by n), no affine.",
    ),
)

FUNCTIONS = {f.name: f for f in SPEC}
NAMES = tuple(FUNCTIONS)
GRADED = tuple(f.name for f in SPEC if f.graded)


def readme_table():
    """The spec table of docs/spec.md, made from the contract."""
    rows = ["| function | returns |", "|---|---|"]
    rows += [f"| `{f.signature()}` | {f.summary} |" for f in SPEC]
    return "\n".join(rows)
