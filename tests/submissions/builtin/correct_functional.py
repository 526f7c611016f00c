"""Attention, by hand -- written with torch's own building blocks.

softmax through torch.softmax, the output of attention through
F.scaled_dot_product_attention, layer norm through F.layer_norm,
heads through unflatten/transpose and flatten.
"""

import math

import torch
import torch.nn.functional as F


def softmax(x, dim=-1):
    # torch.softmax subtracts the maximum internally, so it is stable.
    return torch.softmax(x, dim=dim)


def causal_mask(T, device=None):
    return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))


def causal_average(x):
    T = x.shape[-2]
    tri = torch.tril(torch.ones(T, T, dtype=x.dtype, device=x.device))
    tri = tri / tri.sum(dim=-1, keepdim=True)
    return tri @ x


def _scores_mask(mask, dtype):
    """Turn a mask into something to add to the scores."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=dtype, device=mask.device)
        minus_inf = torch.full((), float("-inf"), dtype=dtype, device=mask.device)
        return torch.where(mask, zero, minus_inf)
    if mask.is_floating_point():
        return mask.to(dtype)
    raise TypeError(f"mask must be bool or floating, got {mask.dtype}")


def attention(q, k, v, mask=None, scale=None):
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    additive = _scores_mask(mask, q.dtype)
    scores = (q @ k.transpose(-2, -1)) * scale
    if additive is not None:
        scores = scores + additive
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        # make the mask as big as the scores, which SDPA expects
        sdpa_mask = additive.expand(scores.shape)
    else:
        sdpa_mask = None
    qb, kb, vb = q, k, v
    shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    qb = q.expand(*shape, *q.shape[-2:])
    kb = k.expand(*shape, *k.shape[-2:])
    vb = v.expand(*shape, *v.shape[-2:])
    if sdpa_mask is not None:
        out_batch = torch.broadcast_shapes(shape, sdpa_mask.shape[:-2])
        qb = qb.expand(*out_batch, *q.shape[-2:])
        kb = kb.expand(*out_batch, *k.shape[-2:])
        vb = vb.expand(*out_batch, *v.shape[-2:])
    output = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=sdpa_mask, scale=scale)
    return output, weights


def split_heads(x, n_heads):
    C = x.shape[-1]
    return x.unflatten(-1, (n_heads, C // n_heads)).transpose(-3, -2)


def merge_heads(x):
    return x.transpose(-3, -2).flatten(-2)


def multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    q = split_heads(x @ w_q, n_heads)
    k = split_heads(x @ w_k, n_heads)
    v = split_heads(x @ w_v, n_heads)
    # the mask broadcasts against the (..., n_heads, T, T) scores as it is
    out, weights = attention(q, k, v, mask=mask)
    return merge_heads(out), weights


def layer_norm(x, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), eps=eps)
