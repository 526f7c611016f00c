"""Attention with einsum, view/permute and a hand-written stable softmax."""

import math

import torch


def softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=dim, keepdim=True)


def causal_mask(T, device=None):
    i = torch.arange(T, device=device)
    return i[None, :] <= i[:, None]


def causal_average(x):
    T = x.shape[-2]
    counts = torch.arange(1, T + 1, dtype=x.dtype, device=x.device).unsqueeze(-1)
    return torch.cumsum(x, dim=-2) / counts


def attention(q, k, v, mask=None, scale=None):
    d_k = q.shape[-1]
    if scale is None:
        scale = d_k ** -0.5
    scores = torch.einsum("...qd,...kd->...qk", q, k) * scale
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        elif torch.is_floating_point(mask):
            scores = scores + mask.to(scores.dtype)
        else:
            raise TypeError("mask must be bool or float, not %s" % mask.dtype)
    weights = softmax(scores, dim=-1)
    output = torch.einsum("...qk,...kd->...qd", weights, v)
    return output, weights


def split_heads(x, n_heads):
    *batch, T, C = x.shape
    hs = C // n_heads
    return x.reshape(*batch, T, n_heads, hs).permute(*range(len(batch)), -2, -3, -1)


def merge_heads(x):
    *batch, H, T, hs = x.shape
    nb = len(batch)
    return x.permute(*range(nb), nb + 1, nb, nb + 2).reshape(*batch, T, H * hs)


def multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    q = split_heads(torch.einsum("...tc,cd->...td", x, w_q), n_heads)
    k = split_heads(torch.einsum("...tc,cd->...td", x, w_k), n_heads)
    v = split_heads(torch.einsum("...tc,cd->...td", x, w_v), n_heads)
    out, weights = attention(q, k, v, mask)
    return merge_heads(out), weights


def layer_norm(x, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps)
