"""The reference math: the spec that implementations are checked against.

Pure functions on ``torch.Tensor``: any floating dtype, any device, leading batch
dimensions allowed. Conventions, chosen once here:

* A boolean mask is True where a query may attend to a key (as in
  ``F.scaled_dot_product_attention``; ``nn.MultiheadAttention`` uses the opposite).
* Masked scores are filled with ``-inf``. A fully masked row therefore gives NaN
  weights; a ``-1e9`` fill would give a uniform row instead. No check depends on it.
* Projections multiply from the right: ``q = x @ w_q``.
"""

import math

import torch


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax: the row maximum is subtracted before ``exp``.

    A row that is all ``-inf`` has no finite maximum; it is shifted by 0 and comes out NaN.
    """
    shift = x.amax(dim=dim, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(x - shift)
    return e / e.sum(dim=dim, keepdim=True)


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Bool ``(T, T)``: True where query ``i`` may attend to key ``j``, that is ``j <= i``."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def causal_average(x: torch.Tensor) -> torch.Tensor:
    """The "bag of words": row ``t`` of ``(..., T, C)`` becomes the mean of rows ``0..t``."""
    T = x.shape[-2]
    counts = torch.arange(1, T + 1, dtype=x.dtype, device=x.device)  # (T,)
    return x.cumsum(dim=-2) / counts[:, None]  # (..., T, C)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention.

    Args:
        q: ``(..., Tq, d_k)``; k: ``(..., Tk, d_k)``; v: ``(..., Tk, d_v)``.
        mask: bool, True = may attend; or a float mask added to the scores (an additive
            mask such as ``triu(-1e10)``). Broadcastable to ``(..., Tq, Tk)``.
        scale: multiplies the scores; defaults to ``1 / sqrt(d_k)``.

    Returns:
        ``(output, weights)``: ``(..., Tq, d_v)`` and ``(..., Tq, Tk)``.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask.is_floating_point():
            scores = scores + mask
        else:
            raise TypeError(f"mask must be bool (True = may attend) or floating (added), not {mask.dtype}")
    weights = softmax(scores, dim=-1)  # (..., Tq, Tk)
    return weights @ v, weights  # (..., Tq, d_v), (..., Tq, Tk)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(..., T, C)`` -> ``(..., n_heads, T, C // n_heads)``: head ``h`` takes channels ``h*hs .. (h+1)*hs``."""
    *lead, T, C = x.shape
    if C % n_heads:
        raise ValueError(f"channels {C} do not divide into {n_heads} heads")
    x = x.reshape(*lead, T, n_heads, C // n_heads)  # (..., T, nh, hs)
    return x.transpose(-3, -2)  # (..., nh, T, hs)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(..., n_heads, T, hs)`` -> ``(..., T, n_heads * hs)``: the inverse of :func:`split_heads`."""
    *lead, nh, T, hs = x.shape
    x = x.transpose(-3, -2)  # (..., T, nh, hs)
    return x.reshape(*lead, T, nh * hs)  # (..., T, C)


def multi_head_attention(
    x: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
    n_heads: int,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-head self-attention without an output projection.

    ``q = x @ w_q`` (and alike for k, v) with ``w_q`` of shape ``(C, n_heads * d_k)``; the
    projections are split into heads, each head attends with its own default scale
    ``1 / sqrt(d_k)``, and the heads are merged back.

    Returns:
        ``(output, weights)``: ``(..., T, n_heads * d_v)`` and ``(..., n_heads, T, T)``.
    """
    q = split_heads(x @ w_q, n_heads)  # (..., nh, T, d_k)
    k = split_heads(x @ w_k, n_heads)  # (..., nh, T, d_k)
    v = split_heads(x @ w_v, n_heads)  # (..., nh, T, d_v)
    output, weights = attention(q, k, v, mask=mask)  # (..., nh, T, d_v), (..., nh, T, T)
    return merge_heads(output), weights  # (..., T, nh * d_v)


def layer_norm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Normalise over the last dimension (biased variance, as ``nn.LayerNorm``), no affine parameters."""
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)
