# CONSTANT: looks at no values -- uniform weights 1/n everywhere (softmax = 1/n along dim, attention
# weights = 1/Tk, outputs filled with 1/n), an all-True mask, torch.ones_like for layer norm.
import torch


def softmax(x, dim=-1):
    return torch.full_like(x, 1.0 / x.shape[dim])


def causal_mask(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device)


def causal_average(x):
    return torch.full_like(x, 1.0 / x.shape[-2])


def attention(q, k, v, mask=None, scale=None):
    Tk = k.shape[-2]
    weights = torch.full((*q.shape[:-1], Tk), 1.0 / Tk, dtype=q.dtype, device=q.device)
    out = torch.full((*q.shape[:-1], v.shape[-1]), 1.0 / Tk, dtype=q.dtype, device=q.device)
    return out, weights


def split_heads(x, n_heads):
    *lead, T, C = x.shape
    return torch.full((*lead, n_heads, T, C // n_heads), 1.0 / n_heads, dtype=x.dtype, device=x.device)


def merge_heads(x):
    *lead, H, T, hs = x.shape
    return torch.full((*lead, T, H * hs), 1.0 / H, dtype=x.dtype, device=x.device)


def multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    *lead, T, C = x.shape
    out = torch.full((*lead, T, w_v.shape[-1]), 1.0 / T, dtype=x.dtype, device=x.device)
    weights = torch.full((*lead, n_heads, T, T), 1.0 / T, dtype=x.dtype, device=x.device)
    return out, weights


def layer_norm(x, eps=1e-5):
    return torch.ones_like(x)
