"""Submissions for grading tests: the spec written in other styles, and deliberate mistakes.

Each correct style is a complete, independent implementation of every spec function
(``attention_core/spec.py``), a dict of name -> function as a student module would provide:

* ``LOOPS``: explicit Python loops over rows, positions and heads;
* ``FLOAT64``: computed in float64, cast back to the input's dtype;
* ``EINSUM``: every product an ``einsum``;
* ``TORCH``: torch's own functions (``F.scaled_dot_product_attention``, ``torch.softmax``,
  ``F.layer_norm``), with masked scores filled with -1e9 where the reference uses -inf.

Every style keeps the conventions of the spec: a bool mask is True where a query may attend,
a float mask is added; the default scale is 1/sqrt(d_k); a fully masked row is unspecified
(-inf gives NaN, -1e9 a uniform row). Results keep the input's floating dtype.

``SOFTMAX_ONLY`` and ``EMPTY`` are incomplete submissions. The deliberate mistakes at the end
are the harness's own wrong implementations for its tolerance tests (the grader's mistake
library, with every mutant checked against the documents, is ``attention_core/grading/naming/mutants.py``).
"""

import math

import torch
import torch.nn.functional as F

from attention_core import reference


def _default_scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


def _require_mask_dtype(mask):
    if mask is not None and mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"mask must be bool (True = may attend) or floating (added), not {mask.dtype}")


# ---------------------------------------------------------------- (a) explicit loops


def loop_softmax(x, dim=-1):
    """Row by row: subtract the row's largest finite score, exponentiate, divide by the sum."""
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])  # (N, L)
    out = torch.empty_like(rows)
    for i in range(rows.shape[0]):
        row = rows[i]
        top = row.max()
        shift = top if torch.isfinite(top) else torch.zeros_like(top)  # an all -inf row comes out NaN
        e = torch.exp(row - shift)
        out[i] = e / e.sum()
    return out.reshape(moved.shape).movedim(-1, dim)


def loop_causal_mask(T, device=None):
    mask = torch.zeros(T, T, dtype=torch.bool, device=device)
    for i in range(T):
        for j in range(i + 1):
            mask[i, j] = True  # query i may attend to key j <= i
    return mask


def loop_causal_average(x):
    """The documents' version 1: row t is the mean of the rows up to it."""
    out = torch.empty_like(x)
    for t in range(x.shape[-2]):
        out[..., t, :] = x[..., : t + 1, :].mean(dim=-2)
    return out


def loop_attention(q, k, v, mask=None, scale=None):
    """One query position at a time: its scores over every key, their softmax, the weighted sum of v."""
    _require_mask_dtype(mask)
    scale = _default_scale(q, scale)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    Tq, Tk = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = torch.broadcast_to(mask, (*lead, Tq, Tk))
    weights = q.new_empty(*lead, Tq, Tk)
    output = q.new_empty(*lead, Tq, v.shape[-1])
    for i in range(Tq):
        scores = (q[..., i, None, :] * k).sum(-1) * scale  # (..., Tk)
        scores = torch.broadcast_to(scores, (*lead, Tk))
        if mask is not None and mask.dtype == torch.bool:
            scores = torch.where(mask[..., i, :], scores, torch.full_like(scores, -math.inf))
        elif mask is not None:
            scores = scores + mask[..., i, :]
        row = loop_softmax(scores, dim=-1)  # (..., Tk)
        weights[..., i, :] = row
        output[..., i, :] = (row[..., :, None] * v).sum(-2)  # (..., d_v)
    return output, weights


def loop_split_heads(x, n_heads):
    C = x.shape[-1]
    if C % n_heads:
        raise ValueError(f"channels {C} do not divide into {n_heads} heads")
    hs = C // n_heads
    return torch.stack([x[..., h * hs : (h + 1) * hs] for h in range(n_heads)], dim=-3)  # (..., nh, T, hs)


def loop_merge_heads(x):
    return torch.cat([x[..., h, :, :] for h in range(x.shape[-3])], dim=-1)  # (..., T, nh * hs)


def loop_multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    """Each head attends over its own columns of the projections; outputs side by side."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    d_k, d_v = q.shape[-1] // n_heads, v.shape[-1] // n_heads
    outputs, weights = [], []
    for h in range(n_heads):
        out, w = loop_attention(
            q[..., h * d_k : (h + 1) * d_k], k[..., h * d_k : (h + 1) * d_k], v[..., h * d_v : (h + 1) * d_v], mask=mask
        )
        outputs.append(out)
        weights.append(w)
    return torch.cat(outputs, dim=-1), torch.stack(weights, dim=-3)  # (..., T, nh * d_v), (..., nh, T, T)


def loop_layer_norm(x, eps=1e-5):
    rows = x.reshape(-1, x.shape[-1])  # (N, C)
    out = torch.empty_like(rows)
    for i in range(rows.shape[0]):
        row = rows[i]
        mean = row.sum() / row.numel()
        var = ((row - mean) ** 2).sum() / row.numel()  # biased, as nn.LayerNorm
        out[i] = (row - mean) / torch.sqrt(var + eps)
    return out.reshape(x.shape)


LOOPS = {
    "softmax": loop_softmax,
    "causal_mask": loop_causal_mask,
    "causal_average": loop_causal_average,
    "attention": loop_attention,
    "split_heads": loop_split_heads,
    "merge_heads": loop_merge_heads,
    "multi_head_attention": loop_multi_head_attention,
    "layer_norm": loop_layer_norm,
}


# ---------------------------------------------------------------- (b) float64 inside


def _wide(t):
    return t.to(torch.float64) if t.is_floating_point() else t


def wide_softmax(x, dim=-1):
    """exp(x - logsumexp(x)) in float64: the same shift, taken in one step."""
    x64 = x.to(torch.float64)
    return torch.exp(x64 - torch.logsumexp(x64, dim=dim, keepdim=True)).to(x.dtype)


def wide_causal_mask(T, device=None):
    i = torch.arange(T, device=device)
    return i[None, :] <= i[:, None]  # (T, T): key j <= query i


def wide_causal_average(x):
    T = x.shape[-2]
    counts = torch.arange(1, T + 1, dtype=torch.float64, device=x.device)
    averages = torch.tril(torch.ones(T, T, dtype=torch.float64, device=x.device)) / counts[:, None]  # (T, T)
    return (averages @ x.to(torch.float64)).to(x.dtype)


def wide_attention(q, k, v, mask=None, scale=None):
    _require_mask_dtype(mask)
    scale = _default_scale(q, scale)
    scores = (_wide(q) @ _wide(k).transpose(-2, -1)) * scale  # (..., Tq, Tk)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, -math.inf)
    elif mask is not None:
        scores = scores + _wide(mask)
    weights = wide_softmax(scores, dim=-1)  # float64 in, float64 out
    return (weights @ _wide(v)).to(q.dtype), weights.to(q.dtype)


def wide_split_heads(x, n_heads):
    *lead, T, C = x.shape
    if C % n_heads:
        raise ValueError(f"channels {C} do not divide into {n_heads} heads")
    wide = x.to(torch.float64).reshape(*lead, T, n_heads, C // n_heads)  # (..., T, nh, hs)
    return wide.transpose(-3, -2).to(x.dtype)  # (..., nh, T, hs)


def wide_merge_heads(x):
    *lead, nh, T, hs = x.shape
    wide = x.to(torch.float64).transpose(-3, -2)  # (..., T, nh, hs)
    return wide.reshape(*lead, T, nh * hs).to(x.dtype)  # (..., T, C)


def wide_multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    x64 = x.to(torch.float64)
    q = wide_split_heads(x64 @ _wide(w_q), n_heads)  # (..., nh, T, d_k), float64
    k = wide_split_heads(x64 @ _wide(w_k), n_heads)
    v = wide_split_heads(x64 @ _wide(w_v), n_heads)
    output, weights = wide_attention(q, k, v, mask=mask)
    return wide_merge_heads(output).to(x.dtype), weights.to(x.dtype)


def wide_layer_norm(x, eps=1e-5):
    x64 = x.to(torch.float64)
    centred = x64 - x64.mean(dim=-1, keepdim=True)
    var = (centred**2).mean(dim=-1, keepdim=True)  # biased
    return (centred * torch.rsqrt(var + eps)).to(x.dtype)


FLOAT64 = {
    "softmax": wide_softmax,
    "causal_mask": wide_causal_mask,
    "causal_average": wide_causal_average,
    "attention": wide_attention,
    "split_heads": wide_split_heads,
    "merge_heads": wide_merge_heads,
    "multi_head_attention": wide_multi_head_attention,
    "layer_norm": wide_layer_norm,
}


# ---------------------------------------------------------------- (c) einsum


def einsum_softmax(x, dim=-1):
    moved = x.movedim(dim, -1)
    top = moved.amax(dim=-1, keepdim=True)
    e = torch.exp(moved - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
    total = torch.einsum("...l->...", e)
    return (e / total[..., None]).movedim(-1, dim)


def einsum_causal_mask(T, device=None):
    positions, ones = torch.arange(T, device=device), torch.ones(T, dtype=torch.int64, device=device)
    query = torch.einsum("i,j->ij", positions, ones)  # (T, T): the row's query i
    return query.T <= query  # key j <= query i


def einsum_causal_average(x):
    T = x.shape[-2]
    keep = torch.tril(torch.ones(T, T, dtype=x.dtype, device=x.device))  # (T, T)
    averages = keep / torch.einsum("ts->t", keep)[:, None]
    return torch.einsum("ts,...sc->...tc", averages, x)


def einsum_attention(q, k, v, mask=None, scale=None):
    _require_mask_dtype(mask)
    scale = _default_scale(q, scale)
    scores = torch.einsum("...qd,...kd->...qk", q, k) * scale
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, -math.inf)
    elif mask is not None:
        scores = scores + mask
    weights = einsum_softmax(scores, dim=-1)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights


def einsum_split_heads(x, n_heads):
    *lead, T, C = x.shape
    if C % n_heads:
        raise ValueError(f"channels {C} do not divide into {n_heads} heads")
    return torch.einsum("...thd->...htd", x.reshape(*lead, T, n_heads, C // n_heads))  # (..., nh, T, hs)


def einsum_merge_heads(x):
    *lead, nh, T, hs = x.shape
    return torch.einsum("...htd->...thd", x).reshape(*lead, T, nh * hs)  # (..., T, nh * hs)


def einsum_multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    q = einsum_split_heads(torch.einsum("...tc,cd->...td", x, w_q), n_heads)  # (..., nh, T, d_k)
    k = einsum_split_heads(torch.einsum("...tc,cd->...td", x, w_k), n_heads)
    v = einsum_split_heads(torch.einsum("...tc,cd->...td", x, w_v), n_heads)
    output, weights = einsum_attention(q, k, v, mask=mask)
    return einsum_merge_heads(output), weights


def einsum_layer_norm(x, eps=1e-5):
    C = x.shape[-1]
    centred = x - (torch.einsum("...c->...", x) / C)[..., None]
    var = torch.einsum("...c,...c->...", centred, centred) / C  # biased
    return centred / torch.sqrt(var + eps)[..., None]


EINSUM = {
    "softmax": einsum_softmax,
    "causal_mask": einsum_causal_mask,
    "causal_average": einsum_causal_average,
    "attention": einsum_attention,
    "split_heads": einsum_split_heads,
    "merge_heads": einsum_merge_heads,
    "multi_head_attention": einsum_multi_head_attention,
    "layer_norm": einsum_layer_norm,
}


# ---------------------------------------------------------------- (d) torch's own functions


def torch_softmax(x, dim=-1):
    return torch.softmax(x, dim=dim)


def torch_causal_mask(T, device=None):
    return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))


def torch_causal_average(x):
    """The document's version 2: a softmax over zeros masked with -1e9 gives the running means."""
    T = x.shape[-2]
    blocked = torch.zeros(T, T, dtype=x.dtype, device=x.device).masked_fill(~torch_causal_mask(T, x.device), -1e9)
    return torch.softmax(blocked, dim=-1) @ x


def torch_attention(q, k, v, mask=None, scale=None):
    """SDPA for the output (its bool mask is True = may attend, as the spec's); weights beside it.

    SDPA returns no weights, so they are the softmax of the scaled scores, masked with -1e9
    (a fully masked row would come out uniform, not NaN: unspecified by the spec).
    """
    _require_mask_dtype(mask)
    scale = _default_scale(q, scale)
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, -1e9)
    elif mask is not None:
        scores = scores + mask
    return output, torch.softmax(scores, dim=-1)


def torch_split_heads(x, n_heads):
    if x.shape[-1] % n_heads:
        raise ValueError(f"channels {x.shape[-1]} do not divide into {n_heads} heads")
    return x.unflatten(-1, (n_heads, -1)).transpose(-3, -2)  # (..., nh, T, hs)


def torch_merge_heads(x):
    return x.transpose(-3, -2).flatten(-2)  # (..., T, nh * hs)


def torch_multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    q = torch_split_heads(torch.matmul(x, w_q), n_heads)  # (..., nh, T, d_k)
    k = torch_split_heads(torch.matmul(x, w_k), n_heads)
    v = torch_split_heads(torch.matmul(x, w_v), n_heads)
    output, weights = torch_attention(q, k, v, mask=mask)
    return torch_merge_heads(output), weights


def torch_layer_norm(x, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], eps=eps)


TORCH = {
    "softmax": torch_softmax,
    "causal_mask": torch_causal_mask,
    "causal_average": torch_causal_average,
    "attention": torch_attention,
    "split_heads": torch_split_heads,
    "merge_heads": torch_merge_heads,
    "multi_head_attention": torch_multi_head_attention,
    "layer_norm": torch_layer_norm,
}

STYLES = {"loops": LOOPS, "float64": FLOAT64, "einsum": EINSUM, "torch": TORCH}

# Incomplete submissions: what a student hands in halfway, and before starting.
SOFTMAX_ONLY = {"softmax": loop_softmax}
EMPTY = {}


# ---------------------------------------------------------------- deliberate mistakes


def no_scale(q, k, v, mask=None, scale=None):
    return reference.attention(q, k, v, mask=mask, scale=1.0 if scale is None else scale)


def softmax_wrong_axis(x, dim=-1):
    return reference.softmax(x, dim=-2 if x.ndim > 1 and dim in (-1, x.ndim - 1) else dim)


def attention_wrong_axis(q, k, v, mask=None, scale=None):
    scores = (q @ k.transpose(-2, -1)) * _default_scale(q, scale)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    weights = reference.softmax(scores, dim=-2)  # over the queries: each column sums to one
    return weights @ v, weights


def inverted_mask(q, k, v, mask=None, scale=None):
    """Reads a bool mask as nn.MultiheadAttention's: True = may not attend."""
    if mask is not None and mask.dtype == torch.bool:
        mask = ~mask
    return reference.attention(q, k, v, mask=mask, scale=scale)
