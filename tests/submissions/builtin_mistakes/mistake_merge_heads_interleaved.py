# MISTAKE: merge_heads moves the head axis to the end before flattening, so the heads' channels come interleaved
"""Attention, by hand: a student's implementation of the built-in hand-out."""

import math

import torch


def softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=dim, keepdim=True)


def causal_mask(T, device=None):
    return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))


def causal_average(x):
    T = x.shape[-2]
    tri = torch.tril(torch.ones(T, T, dtype=x.dtype, device=x.device))
    tri = tri / tri.sum(dim=-1, keepdim=True)
    return tri @ x


def attention(q, k, v, mask=None, scale=None):
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask.is_floating_point():
            scores = scores + mask
        else:
            raise TypeError(f"mask must be bool or floating, got {mask.dtype}")
    weights = softmax(scores, dim=-1)
    return weights @ v, weights


def split_heads(x, n_heads):
    *lead, T, C = x.shape
    hs = C // n_heads
    return x.reshape(*lead, T, n_heads, hs).transpose(-3, -2)


def merge_heads(x):
    *lead, H, T, hs = x.shape
    return x.movedim(-3, -1).reshape(*lead, T, H * hs)


def multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    q = split_heads(x @ w_q, n_heads)
    k = split_heads(x @ w_k, n_heads)
    v = split_heads(x @ w_v, n_heads)
    out, weights = attention(q, k, v, mask=mask)
    return merge_heads(out), weights


def layer_norm(x, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)
