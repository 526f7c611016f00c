"""Known mistakes: the reference core with one slip each, to name what a failed check got wrong.

A :class:`Mutant` replaces some spec functions (``functions``); every other function is the
reference's. Grading compares a student's output with each relevant mutant's output and names
the mistake whose output it matches.

Every mutant function is self-contained source: it uses ``torch``, ``math`` and the private
helpers below, never another module of the package, so :func:`submission_source` can write any
mutant out as a standalone student module.
"""

import inspect
import io
import math
import tokenize
from dataclasses import dataclass, field

import torch

from attention_core import reference

BREAKS = ("values", "gradient", "side effect")


@dataclass(frozen=True)
class Mutant:
    """One known mistake.

    Attributes:
        name: short id, e.g. ``"no_scale"``.
        functions: spec function name -> the mistaken function; the rest is the reference.
        mistake: what is wrong, in the spec's words.
        fix: how to put it right, one sentence.
        breaks: what it gets wrong: ``"values"``, ``"gradient"`` or ``"side effect"``.
        parts: for a mistake made in more than one function, function name -> (mistake, fix) of
            that function alone: a failed check of one function names its own part, never another
            function's, which may be right in the student's code.
    """

    name: str
    functions: dict
    mistake: str
    fix: str
    breaks: str
    parts: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.breaks not in BREAKS:
            raise ValueError(f"breaks must be one of {BREAKS}, not {self.breaks!r}")
        if len(self.functions) > 1 and set(self.parts) != set(self.functions):
            raise ValueError(
                f"mutant {self.name!r} changes {sorted(self.functions)}: its parts must word "
                f"the mistake of each of them alone"
            )

    def words(self, function):
        """(the mistake, its fix) as a failed check of ``function`` tells them."""
        return self.parts.get(function, (self.mistake, self.fix))

    def told(self, function):
        """'Likely mistake: … Fix: …' for a failed check of ``function``."""
        mistake, fix = self.words(function)
        return f"Likely mistake: {mistake}. Fix: {fix}"


# ---------------------------------------------------------------- the reference's pieces, copied


def _softmax(x, dim=-1):
    """The reference softmax: the maximum (0 for a row without a finite one) is subtracted first."""
    top = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
    return e / e.sum(dim=dim, keepdim=True)


def _masked(scores, mask):
    """Scores with a bool mask (True = may attend; blocked get -inf) or a floating mask added."""
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))
    if mask.is_floating_point():
        return scores + mask
    raise TypeError(f"mask must be bool (True = may attend) or floating (added), not {mask.dtype}")


def _scores(q, k, mask=None, scale=None):
    """Scaled, masked scores ``(..., Tq, Tk)``; the scale defaults to 1 / sqrt(d_k)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _masked((q @ k.transpose(-2, -1)) * scale, mask)


def _split(x, n_heads):
    """``(..., T, C)`` -> ``(..., n_heads, T, C // n_heads)``."""
    if x.shape[-1] % n_heads:
        raise ValueError(f"channels {x.shape[-1]} do not divide into {n_heads} heads")
    return x.unflatten(-1, (n_heads, -1)).transpose(-3, -2)  # (..., nh, T, hs)


def _merge(x):
    """``(..., n_heads, T, hs)`` -> ``(..., T, n_heads * hs)``."""
    return x.transpose(-3, -2).flatten(-2)  # (..., T, nh * hs)


# ---------------------------------------------------------------- wrong values


def attention_without_scale(q, k, v, mask=None, scale=None):
    weights = _softmax(_scores(q, k, mask, 1.0 if scale is None else scale))  # (..., Tq, Tk)
    return weights @ v, weights


def attention_scaled_by_d_v(q, k, v, mask=None, scale=None):
    scale = 1.0 / math.sqrt(v.shape[-1]) if scale is None else scale  # d_v where d_k belongs
    weights = _softmax(_scores(q, k, mask, scale))
    return weights @ v, weights


def attention_with_v_transposed(q, k, v, mask=None, scale=None):
    weights = _softmax(_scores(q, k, mask, scale))
    return weights @ v.transpose(-2, -1), weights  # runs only where v's last two sizes allow


def softmax_over_dim_0(x, dim=-1):
    return _softmax(x, dim=0)  # the given dim ignored


def attention_softmax_over_queries(q, k, v, mask=None, scale=None):
    weights = _softmax(_scores(q, k, mask, scale), dim=-2)  # each column sums to one
    return weights @ v, weights


def attention_mask_inverted(q, k, v, mask=None, scale=None):
    if mask is not None and mask.dtype == torch.bool:
        mask = ~mask  # read as nn.MultiheadAttention's: True = may not attend
    weights = _softmax(_scores(q, k, mask, scale))
    return weights @ v, weights


def causal_mask_without_diagonal(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril(-1)


def softmax_without_shift(x, dim=-1):
    e = torch.exp(x)  # inf for large scores in float32: inf / inf is nan
    return e / e.sum(dim=dim, keepdim=True)


def causal_average_without_current(x):
    before = x.cumsum(dim=-2) - x  # (..., T, C): the sum of rows 0..t-1
    counts = torch.arange(x.shape[-2], dtype=x.dtype, device=x.device).clamp(min=1)  # row 0: zeros
    return before / counts[:, None]


def causal_average_of_earlier_rows(x):
    before = x.cumsum(dim=-2) - x  # (..., T, C): the sum of rows 0..t-1
    counts = torch.arange(x.shape[-2], dtype=x.dtype, device=x.device)  # row 0: 0 / 0, NaN
    return before / counts[:, None]


def causal_average_over_channels(x):
    counts = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)  # (C,)
    return x.cumsum(dim=-1) / counts  # a running mean along each token's channels


def softmax_as_log_softmax(x, dim=-1):
    return torch.log(_softmax(x, dim=dim))  # log-probabilities


def attention_ignoring_scale(q, k, v, mask=None, scale=None):
    weights = _softmax(_scores(q, k, mask, None))  # the scale given is never used
    return weights @ v, weights


def split_heads_interleaved(x, n_heads):
    *lead, T, C = x.shape
    return x.reshape(*lead, T, C // n_heads, n_heads).movedim(-1, -3)  # head h: channels h, h + nh, ...


def merge_heads_interleaved(x):
    *lead, nh, T, hs = x.shape
    return x.movedim(-3, -1).reshape(*lead, T, hs * nh)  # channel c * nh + h holds head h's channel c


def split_heads_by_bare_view(x, n_heads):
    *lead, T, C = x.shape
    return x.reshape(*lead, n_heads, T, C // n_heads)  # (..., nh, T, hs), rows and heads mixed up


def merge_heads_view_of_transposed(x):
    *lead, nh, T, hs = x.shape
    return x.transpose(-3, -2).view(*lead, T, nh * hs)  # a view of a transposed tensor: torch refuses it


def attention_bool_mask_added(q, k, v, mask=None, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores + mask  # a bool mask added as numbers: True adds 1, nothing is blocked
    weights = _softmax(scores)
    return weights @ v, weights


def attention_float_mask_multiplied(q, k, v, mask=None, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores * mask  # a floating mask multiplied in: 0 * -inf is nan, and 0 where 0 is added
    weights = _softmax(scores)
    return weights @ v, weights


def merge_heads_by_bare_view(x):
    *lead, nh, T, hs = x.shape
    return x.reshape(*lead, T, nh * hs)  # (..., T, C) with the head axis still in front of T


def attention_returning_scores(q, k, v, mask=None, scale=None):
    scores = _scores(q, k, mask, scale)  # (..., Tq, Tk)
    return _softmax(scores) @ v, scores


def multi_head_attention_without_mask(x, w_q, w_k, w_v, n_heads, mask=None):
    q, k, v = (_split(x @ w, n_heads) for w in (w_q, w_k, w_v))  # (..., nh, T, d_k or d_v)
    weights = _softmax(_scores(q, k))  # the mask never used
    return _merge(weights @ v), weights


def attention_with_k_T(q, k, v, mask=None, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    weights = _softmax(_masked((q @ k.T) * scale, mask))  # .T reverses every axis of a batched k
    return weights @ v, weights


def attention_scaled_by_d_k(q, k, v, mask=None, scale=None):
    scale = 1.0 / q.shape[-1] if scale is None else scale  # 1 / d_k: the square root forgotten
    weights = _softmax(_scores(q, k, mask, scale))
    return weights @ v, weights


def attention_masked_with_zero(q, k, v, mask=None, scale=None):
    if mask is not None and mask.dtype == torch.bool:
        scores = _scores(q, k, None, scale).masked_fill(~mask, 0.0)  # a blocked key keeps exp(0)
    else:
        scores = _scores(q, k, mask, scale)
    weights = _softmax(scores)
    return weights @ v, weights


def causal_mask_of_floats(T, device=None):
    return torch.ones(T, T, device=device).tril()  # 1.0 and 0.0, not True and False: ~mask fails on it


def causal_average_divided_by_T(x):
    return x.cumsum(dim=-2) / x.shape[-2]  # every row divided by T, not by its own count t + 1


def layer_norm_unbiased(x, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(dim=-1, keepdim=True) + eps)  # var divides by C - 1


# ---------------------------------------------------------------- right values, wrong otherwise


def attention_scores_detached(q, k, v, mask=None, scale=None):
    weights = _softmax(_scores(q, k, mask, scale).detach())  # no gradient reaches q or k
    return weights @ v, weights


def softmax_through_tolist(x, dim=-1):
    x = torch.tensor(x.tolist(), dtype=x.dtype, device=x.device)  # a new leaf: the graph is cut
    return _softmax(x, dim=dim)


def layer_norm_under_no_grad(x, eps=1e-5):
    with torch.no_grad():
        centred = x - x.mean(dim=-1, keepdim=True)
        return centred / torch.sqrt((centred**2).mean(dim=-1, keepdim=True) + eps)


def attention_scaling_q_in_place(q, k, v, mask=None, scale=None):
    k, v = k.clone(), v.clone()  # read first: q may be k or v itself, as in attention(x, x, x)
    q.mul_(1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)  # the caller's q is changed
    weights = _softmax(_scores(q, k, mask, 1.0))
    return weights @ v, weights


def attention_masked_after_softmax(q, k, v, mask=None, scale=None):
    weights = _softmax(_scores(q, k, None, scale))  # the mask is applied to the weights, not the scores
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0) if mask.dtype == torch.bool else weights * torch.exp(mask)
    return weights @ v, weights


def attention_float_mask_as_bool(q, k, v, mask=None, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))  # an additive mask's 0 (allowed) read as blocked
    weights = _softmax(scores)
    return weights @ v, weights


def multi_head_attention_scaled_by_width(x, w_q, w_k, w_v, n_heads, mask=None):
    q, k, v = _split(x @ w_q, n_heads), _split(x @ w_k, n_heads), _split(x @ w_v, n_heads)
    scale = 1.0 / math.sqrt(w_q.shape[-1])  # the whole width, n_heads * d_k, where each head's d_k belongs
    weights = _softmax(_scores(q, k, mask, scale))
    return _merge(weights @ v), weights


def multi_head_attention_scaled_by_input_width(x, w_q, w_k, w_v, n_heads, mask=None):
    q, k, v = _split(x @ w_q, n_heads), _split(x @ w_k, n_heads), _split(x @ w_v, n_heads)
    scale = 1.0 / math.sqrt(x.shape[-1])  # the input's width C, where each head's d_k belongs
    weights = _softmax(_scores(q, k, mask, scale))
    return _merge(weights @ v), weights


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "no_scale",
        {"attention": attention_without_scale},
        "the scores q @ kᵀ are not multiplied by the default scale 1 / sqrt(d_k)",
        "Multiply the scores by scale, which defaults to 1 / sqrt(d_k) (q.shape[-1]).",
        "values",
    ),
    Mutant(
        "scale_by_d_v",
        {"attention": attention_scaled_by_d_v},
        "the default scale is 1 / sqrt(d_v), from v's last dimension, instead of 1 / sqrt(d_k)",
        "Take the default scale from q's (or k's) last dimension: 1 / sqrt(d_k).",
        "values",
    ),
    Mutant(
        "weights_times_v_transposed",
        {"attention": attention_with_v_transposed},
        "the output is weights @ vᵀ (the value.T slip) instead of weights @ v; it runs only when v is square",
        "Return weights @ v, of shape (..., Tq, d_v).",
        "values",
    ),
    Mutant(
        "softmax_wrong_axis",
        {"softmax": softmax_over_dim_0, "attention": attention_softmax_over_queries},
        "softmax over the wrong axis: softmax over dim 0 whatever dim is given, and attention's softmax "
        "over the query axis (dim -2), so columns instead of rows sum to one",
        "Normalise over the given dim in softmax, and over the key axis (dim -1) of the scores in attention.",
        "values",
        {
            "softmax": (
                "softmax over the wrong axis: over dim 0 whatever dim is given",
                "Normalise over the given dim: subtract its maximum, exponentiate, divide by its sum.",
            ),
            "attention": (
                "attention's softmax over the query axis (dim -2), so columns instead of rows of "
                "the weights sum to one",
                "Take the softmax of the scores over the key axis (dim -1).",
            ),
        },
    ),
    Mutant(
        "mask_inverted",
        {"attention": attention_mask_inverted},
        "the bool mask is read inverted: True is taken as blocked, where the spec's True means may attend",
        "Fill the scores with -inf where the mask is False (scores.masked_fill(~mask, -inf)).",
        "values",
    ),
    Mutant(
        "causal_mask_without_diagonal",
        {"causal_mask": causal_mask_without_diagonal},
        "the causal mask leaves out the diagonal (tril(-1)): query i may not attend to key i",
        "Keep the diagonal: True where j <= i (tril(), not tril(-1)).",
        "values",
    ),
    Mutant(
        "softmax_without_max_subtraction",
        {"softmax": softmax_without_shift},
        "softmax without subtracting the maximum first: exp overflows to inf and the result is nan for "
        "large inputs (exp(89) is already past float32's largest number)",
        "Subtract the maximum along dim (keepdim=True) before exp.",
        "values",
    ),
    Mutant(
        "causal_average_without_current",
        {"causal_average": causal_average_without_current},
        "the causal average leaves out the current row: row t is the mean of rows 0..t-1 (row 0 zeros), "
        "not of rows 0..t",
        "Average rows 0..t inclusive: the cumulative sum divided by t + 1.",
        "values",
    ),
    Mutant(
        "split_heads_without_transpose",
        {"split_heads": split_heads_by_bare_view},
        "the heads are split by a bare view/reshape to (..., n_heads, T, hs), with no transpose: "
        "each head takes rows of other positions, not its own channels",
        "Reshape to (..., T, n_heads, hs), then transpose(-3, -2).",
        "values",
    ),
    Mutant(
        "merge_heads_without_transpose",
        {"merge_heads": merge_heads_by_bare_view},
        "the heads are merged without moving the head axis back: (..., n_heads, T, hs) reshaped "
        "straight to (..., T, n_heads * hs)",
        "transpose(-3, -2) to (..., T, n_heads, hs) first, then reshape.",
        "values",
    ),
    Mutant(
        "weights_are_scores",
        {"attention": attention_returning_scores},
        "attention returns the scaled scores before the softmax as its weights",
        "Return the softmax of the scores as the weights, the same weights that multiply v.",
        "values",
    ),
    Mutant(
        "multi_head_attention_drops_mask",
        {"multi_head_attention": multi_head_attention_without_mask},
        "multi_head_attention drops the mask: every head attends to every key",
        "Pass the mask on to each head's attention (it broadcasts over the heads).",
        "values",
    ),
    Mutant(
        "transpose_for_2d_only",
        {"attention": attention_with_k_T},
        "k.T instead of k.transpose(-2, -1): right for a 2-D k, but on batched inputs .T reverses every "
        "axis, so it raises or computes the wrong product",
        "Transpose only the last two axes: k.transpose(-2, -1) (or k.mT).",
        "values",
    ),
    Mutant(
        "layer_norm_unbiased_variance",
        {"layer_norm": layer_norm_unbiased},
        "layer_norm divides by the unbiased (n-1) variance instead of the biased one (divided by C)",
        "Use x.var(dim=-1, unbiased=False, keepdim=True).",
        "values",
    ),
    Mutant(
        "scores_detached",
        {"attention": attention_scores_detached},
        "the scores leave autograd (a .detach(), or a round trip through NumPy or .tolist()): the values are "
        "right but no gradient reaches q or k",
        "Compute the scores and weights with torch operations alone, without .detach() or NumPy, so every step "
        "stays in the autograd graph.",
        "gradient",
    ),
    Mutant(
        "tolist_round_trip",
        {"softmax": softmax_through_tolist},
        "softmax goes through .tolist() and torch.tensor: the values are right but the result is cut "
        "from the autograd graph, so x gets no gradient",
        "Compute on the tensor itself with torch operations, never through Python lists.",
        "gradient",
    ),
    Mutant(
        "computed_under_no_grad",
        {"layer_norm": layer_norm_under_no_grad},
        "layer_norm is computed under torch.no_grad(): the values are right but there is no gradient",
        "Remove torch.no_grad(): the spec functions must stay differentiable.",
        "gradient",
    ),
    Mutant(
        "q_scaled_in_place",
        {"attention": attention_scaling_q_in_place},
        "q is scaled in place (q.mul_(scale)): the values are right but the caller's q is changed",
        "Scale out of place: scores = (q @ k.transpose(-2, -1)) * scale.",
        "side effect",
    ),
    Mutant(
        "scale_by_d_k",
        {"attention": attention_scaled_by_d_k},
        "the default scale is 1 / d_k instead of 1 / sqrt(d_k): the square root is missing",
        "Scale the scores by 1 / math.sqrt(d_k), d_k = q.shape[-1].",
        "values",
    ),
    Mutant(
        "masked_with_zero",
        {"attention": attention_masked_with_zero},
        "blocked scores are set to 0 instead of -inf, so a blocked key still gets weight exp(0)",
        "Fill the blocked scores with float('-inf') (scores.masked_fill(~mask, float('-inf'))).",
        "values",
    ),
    Mutant(
        "causal_average_divided_by_T",
        {"causal_average": causal_average_divided_by_T},
        "the causal average divides every cumulative sum by T instead of by its own count: row t is "
        "the sum of rows 0..t over T, not their mean",
        "Divide row t's cumulative sum by t + 1 (torch.arange(1, T + 1)).",
        "values",
    ),
    Mutant(
        "causal_mask_of_floats",
        {"causal_mask": causal_mask_of_floats},
        "the causal mask holds floats (1.0 and 0.0, from torch.ones(T, T).tril()) instead of booleans, so "
        "~mask and masked_fill(~mask, …) cannot take it",
        "Make it boolean: torch.ones(T, T, dtype=torch.bool).tril() (or .tril() of a bool tensor).",
        "values",
    ),
)

MUTANTS += (
    Mutant(
        "mask_after_softmax",
        {"attention": attention_masked_after_softmax},
        "the mask is applied after the softmax, to the weights (blocked weights set to 0, so the rows no "
        "longer sum to 1) instead of to the scores before it",
        "Mask the scores (-inf where blocked, or add a float mask) before the softmax.",
        "values",
    ),
    Mutant(
        "float_mask_as_bool",
        {"attention": attention_float_mask_as_bool},
        "a floating mask is read as a bool one (its 0 entries blocked), where a floating mask is added to the "
        "scores (0: allowed, -inf or a large negative number: blocked)",
        "Add a floating mask to the scores; only a bool mask is filled with -inf where it is False.",
        "values",
    ),
    Mutant(
        "multi_head_attention_scaled_by_width",
        {"multi_head_attention": multi_head_attention_scaled_by_width},
        "multi_head_attention scales each head's scores by 1 / sqrt(n_heads * d_k), the whole width, instead of "
        "1 / sqrt(d_k), each head's own size",
        "Let each head's attention take its default scale from the head's size: 1 / sqrt(d_k), where d_k = "
        "w_q.shape[-1] // n_heads (q.shape[-1] once the heads are split).",
        "values",
    ),
    Mutant(
        "bool_mask_added",
        {"attention": attention_bool_mask_added},
        "a bool mask is added to the scores as a number (True as 1), so nothing is blocked, where a bool mask "
        "blocks the scores where it is False",
        "Fill the blocked scores with -inf: scores.masked_fill(~mask, float('-inf')) for a bool mask; only a "
        "floating mask is added.",
        "values",
    ),
    Mutant(
        "float_mask_multiplied",
        {"attention": attention_float_mask_multiplied},
        "a floating mask multiplies the scores where it is added to them (its 0 keeps nothing of a score, its -inf "
        "turns a score of 0 into nan)",
        "Add a floating mask to the scores: scores + mask (a bool mask is the one filled with -inf).",
        "values",
    ),
    Mutant(
        "merge_heads_view_of_transposed",
        {"merge_heads": merge_heads_view_of_transposed},
        "merge_heads calls .view on the transposed tensor, which is not contiguous in memory: view cannot merge "
        "its axes",
        "Use .reshape(...) there (or .contiguous().view(...)).",
        "values",
    ),
    Mutant(
        "multi_head_attention_scaled_by_input_width",
        {"multi_head_attention": multi_head_attention_scaled_by_input_width},
        "multi_head_attention scales each head's scores by 1 / sqrt(C), the input's width (x.shape[-1]), instead "
        "of 1 / sqrt(d_k), each head's own size",
        "Let each head's attention take its default scale from the head's size: 1 / sqrt(d_k), where d_k = "
        "w_q.shape[-1] // n_heads (q.shape[-1] once the heads are split).",
        "values",
    ),
)

MUTANTS += (
    Mutant(
        "causal_average_of_earlier_rows",
        {"causal_average": causal_average_of_earlier_rows},
        "the causal average leaves out the current row: row t is the mean of rows 0..t-1 (x[:t]), so row 0 is "
        "0 / 0 (NaN), not the mean of rows 0..t",
        "Average rows 0..t inclusive (x[:t + 1]): the cumulative sum divided by t + 1.",
        "values",
    ),
    Mutant(
        "causal_average_over_channels",
        {"causal_average": causal_average_over_channels},
        "the causal average runs along each token's channels (the last dimension) instead of along the tokens (dim -2)",
        "Take the running mean over the tokens: x.cumsum(dim=-2) divided by t + 1.",
        "values",
    ),
    Mutant(
        "softmax_as_log_softmax",
        {"softmax": softmax_as_log_softmax},
        "softmax returns log-probabilities (log_softmax) instead of probabilities that sum to 1",
        "Return the probabilities themselves: exp(x - max) over their sum, not its logarithm.",
        "values",
    ),
    Mutant(
        "attention_ignores_scale",
        {"attention": attention_ignoring_scale},
        "attention ignores the `scale` it is given and always scales by 1 / sqrt(d_k)",
        "Use scale when it is given; 1 / sqrt(d_k) only when scale is None.",
        "values",
    ),
    Mutant(
        "split_heads_interleaved",
        {"split_heads": split_heads_interleaved},
        "the heads are split as (..., T, hs, n_heads): head h takes every n_heads-th channel instead of the "
        "block of channels h * hs .. (h + 1) * hs",
        "Reshape to (..., T, n_heads, hs), then transpose(-3, -2).",
        "values",
    ),
    Mutant(
        "merge_heads_interleaved",
        {"merge_heads": merge_heads_interleaved},
        "merge_heads moves the head axis last before flattening, (..., T, hs, n_heads): the heads' channels come "
        "interleaved (every n_heads-th channel one head's) instead of each head's block side by side",
        "Put the head axis just before the channels: x.transpose(-3, -2), then flatten the last two into n_heads * hs.",
        "values",
    ),
)

BY_NAME = {m.name: m for m in MUTANTS}


def relevant(function_name):
    """The mutants that change the spec function ``function_name``."""
    return [m for m in MUTANTS if function_name in m.functions]


def submission_source(mutant):
    """A complete, standalone Python module (importing only torch and math) with every spec function.

    The reference module's text comes first, then the private helpers the mutant uses, then the
    mutant's functions under their spec names. The reference functions the mutant replaces keep
    their text under the name ``_reference_<name>``, and the reference's own calls go there: each
    spec function of the module behaves as ``{**reference, **mutant.functions}`` does.
    """
    parts = [_renamed(inspect.getsource(reference), {name: f"_reference_{name}" for name in mutant.functions})]
    parts += [inspect.getsource(helper) for helper in _helpers(mutant.functions.values())]
    parts += [_renamed(inspect.getsource(f), {f.__name__: name}) for name, f in mutant.functions.items()]
    return "\n\n".join(part.rstrip("\n") + "\n" for part in parts)


def _helpers(functions):
    """The private module-level functions of this module that ``functions`` use, at any depth, in source order."""
    found, todo = set(), list(functions)
    while todo:
        code = todo.pop().__code__
        names = set(code.co_names).union(*(c.co_names for c in code.co_consts if inspect.iscode(c)))
        for name in names:
            helper = globals().get(name)
            if name.startswith("_") and inspect.isfunction(helper) and helper not in found:
                found.add(helper)
                todo.append(helper)
    return sorted(found, key=lambda f: f.__code__.co_firstlineno)


def _renamed(source, names):
    """``source`` with each name of ``names`` renamed where it is a name (not an attribute, string or comment)."""
    edits, previous = [], None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string in names and previous != ".":
            edits.append(token)
        if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            previous = token.string
    lines = source.splitlines(keepends=True)
    for token in reversed(edits):  # right to left, so earlier columns stay where they were
        (row, col), (_, end) = token.start, token.end
        lines[row - 1] = lines[row - 1][:col] + names[token.string] + lines[row - 1][end:]
    return "".join(lines)
