"""The spec functions composed from torch's own functions, for the low-precision comparison.

Run in float64 they give the golden; run in float16 or bfloat16 they are "plain torch in the
same dtype", whose error against the golden sets the allowed error of the reference core (the
way FlashAttention's tests set theirs).
"""

import torch
import torch.nn.functional as F

from attention_core import spec


def softmax(x, dim=-1):
    return F.softmax(x, dim=dim)


def causal_mask(T, device=None):
    return torch.tril(torch.ones(T, T, device=device)).bool()


def causal_average(x):
    T = x.shape[-2]
    tril = torch.tril(torch.ones(T, T, dtype=x.dtype, device=x.device))
    return (tril / tril.sum(-1, keepdim=True)) @ x


def attention(q, k, v, mask=None, scale=None):
    # Plain composition, as FlashAttention's reference: a fused kernel would compute a low
    # precision dtype in float32 inside and stop being "plain torch in the same dtype".
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = F.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights


def split_heads(x, n_heads):
    *lead, T, C = x.shape
    return x.view(*lead, T, n_heads, C // n_heads).transpose(-3, -2)


def merge_heads(x):
    *lead, nh, T, hs = x.shape
    return x.transpose(-3, -2).reshape(*lead, T, nh * hs)


def multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    q, k, v = (split_heads(x @ w, n_heads) for w in (w_q, w_k, w_v))
    output, weights = attention(q, k, v, mask=mask)
    return merge_heads(output), weights


def layer_norm(x, eps=1e-5):
    # Composed, not F.layer_norm: that kernel accumulates a low precision dtype in float32.
    centred = x - x.mean(dim=-1, keepdim=True)
    return centred / torch.sqrt((centred * centred).mean(dim=-1, keepdim=True) + eps)


FUNCTIONS = {name: globals()[name] for name in spec.NAMES}
