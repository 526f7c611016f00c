# MISTAKE: layer norm adds eps to the standard deviation instead of to the variance under the square root.
"""Attention, by hand: implement each function below.

Graded against worked examples from attention tutorials. Conventions used throughout:

* Tensors are ``torch.Tensor`` of any floating dtype; return results in the dtype you are given.
  Leading batch dimensions may come before the shapes written below.
* A boolean mask is True where a query MAY attend to a key (as in
  ``torch.nn.functional.scaled_dot_product_attention``); a floating mask is ADDED to the scores.
* ``attention`` scales the scores by ``1 / sqrt(d_k)`` unless ``scale`` is given.
* Do not change the tensors you are given (no ``q /= ...``): compute new ones. Your functions must
  stay differentiable: no ``.detach()``, ``.tolist()``/NumPy round trips or ``torch.no_grad()``.
"""

import math

import torch


def softmax(x, dim=-1):
    """Softmax of x along dim; subtract the maximum first so large scores do not overflow.

    Args:
        x: scores, any shape
        dim: the axis that sums to one (default -1)

    Returns:
        numerically stable softmax (the maximum is subtracted first)
    """
    m = x.max(dim=dim, keepdim=True).values
    e = (x - m).exp()
    return e / e.sum(dim=dim, keepdim=True)


def causal_mask(T, device=None):
    """The causal mask: a bool (T, T) tensor, True on and below the diagonal (query i may attend to key j <= i).

    Args:
        T: number of positions
        device: where to create the mask (default None)

    Returns:
        bool (T, T), True where query i may attend to key j (j <= i)
    """
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def causal_average(x):
    """The causal average of x: row t of the result is the mean of rows 0..t of x (same shape as x).

    Args:
        x: (..., T, C)

    Returns:
        the "bag of words": row t of (..., T, C) is the mean of rows 0..t
    """
    T = x.shape[-2]
    n = torch.arange(1, T + 1, device=x.device, dtype=x.dtype)
    return x.cumsum(dim=-2) / n[:, None]


def attention(q, k, v, mask=None, scale=None):
    """Scaled dot-product attention: weights = softmax(scale * q @ k^T, masked), output = weights @ v.

    Args:
        q: (..., Tq, d_k)
        k: (..., Tk, d_k)
        v: (..., Tk, d_v)
        mask: bool, True = may attend; or floating, added to the scores (default None)
        scale: multiplies the scores; default 1 / sqrt(d_k) (default None)

    Returns:
        (output, weights): (..., Tq, d_v) and (..., Tq, Tk)
    """
    if scale is None:
        scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask.is_floating_point():
            scores = scores + mask.to(scores.dtype)
        else:
            raise TypeError("mask must be bool or floating")
    weights = softmax(scores, dim=-1)
    return weights @ v, weights


def split_heads(x, n_heads):
    """Split the channels into heads: (..., T, C) -> (..., n_heads, T, C // n_heads); head h takes channels h*hs..(h+1)*hs.

    Args:
        x: (..., T, C)
        n_heads: number of heads (the channels divide evenly)

    Returns:
        (..., T, C) → (..., n_heads, T, C // n_heads)
    """
    *lead, T, C = x.shape
    return x.reshape(*lead, T, n_heads, C // n_heads).transpose(-3, -2)


def merge_heads(x):
    """Merge heads back, the inverse of split_heads: (..., n_heads, T, hs) -> (..., T, n_heads * hs).

    Args:
        x: (..., n_heads, T, hs)

    Returns:
        the inverse: (..., n_heads, T, hs) → (..., T, n_heads * hs)
    """
    *lead, H, T, hs = x.shape
    return x.transpose(-3, -2).reshape(*lead, T, H * hs)


def multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    """Multi-head self-attention without an output projection: q = x @ w_q (likewise k, v), split into heads, attend per head with scale 1 / sqrt(d_k), merge.

    Args:
        x: (..., T, C)
        w_q: (C, n_heads * d_k)
        w_k: (C, n_heads * d_k)
        w_v: (C, n_heads * d_v)
        n_heads: number of heads (the channels divide evenly)
        mask: as attention's, broadcast over the heads (default None)

    Returns:
        (output, weights): (..., T, n_heads * d_v) and (..., n_heads, T, T)
    """
    q = split_heads(x @ w_q, n_heads)
    k = split_heads(x @ w_k, n_heads)
    v = split_heads(x @ w_v, n_heads)
    out, weights = attention(q, k, v, mask=mask)
    return merge_heads(out), weights


def layer_norm(x, eps=1e-5):
    """Layer norm over the last dimension: (x - mean) / sqrt(var + eps), biased variance (divide by n), no affine.

    Args:
        x: (..., C)
        eps: added to the variance under the square root (default 1e-5)

    Returns:
        normalised over the last dimension (biased variance), no affine parameters
    """
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / (torch.sqrt(var) + eps)
