# CONSTANT: computes nothing -- every result is zeros (an all-False mask) of the right shape and dtype.
import torch


def softmax(x, dim=-1):
    return torch.zeros_like(x)


def causal_mask(T, device=None):
    return torch.zeros(T, T, dtype=torch.bool, device=device)


def causal_average(x):
    return torch.zeros_like(x)


def attention(q, k, v, mask=None, scale=None):
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    weights = torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype, device=q.device)
    return out, weights


def split_heads(x, n_heads):
    *lead, T, C = x.shape
    return torch.zeros(*lead, n_heads, T, C // n_heads, dtype=x.dtype, device=x.device)


def merge_heads(x):
    *lead, H, T, hs = x.shape
    return torch.zeros(*lead, T, H * hs, dtype=x.dtype, device=x.device)


def multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    *lead, T, C = x.shape
    out = torch.zeros(*lead, T, w_v.shape[-1], dtype=x.dtype, device=x.device)
    weights = torch.zeros(*lead, n_heads, T, T, dtype=x.dtype, device=x.device)
    return out, weights


def layer_norm(x, eps=1e-5):
    return torch.zeros_like(x)
