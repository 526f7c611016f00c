import math

import torch
from torch.nn import functional as F


def softmax(x, dim=-1):
    return F.softmax(x, dim=dim)


def causal_mask(T, device=None):
    return torch.ones((T, T), dtype=torch.bool, device=device).tril(diagonal=0)


def causal_average(x):
    # "version 3" of the bag of words: uniform scores, masked, then softmax
    T = x.shape[-2]
    wei = torch.zeros((T, T), dtype=x.dtype, device=x.device)
    tril = torch.tril(torch.ones(T, T, device=x.device))
    wei = wei.masked_fill(tril == 0, float("-inf"))
    wei = F.softmax(wei, dim=-1)
    return wei @ x


def attention(q, k, v, mask=None, scale=None):
    scale = 1.0 / math.sqrt(k.size(-1)) if scale is None else scale
    att = torch.matmul(q, k.transpose(-2, -1)).mul(scale)
    if mask is not None:
        if mask.dtype is torch.bool:
            att = torch.where(mask, att, torch.tensor(float("-inf"), dtype=att.dtype, device=att.device))
        elif mask.dtype.is_floating_point:
            att = att + mask.type(att.dtype)
        else:
            raise TypeError("attention mask has to be bool or floating point")
    att = F.softmax(att, dim=-1)
    return torch.matmul(att, v), att


def split_heads(x, n_heads):
    T, C = x.size(-2), x.size(-1)
    return x.contiguous().view(*x.shape[:-2], T, n_heads, C // n_heads).transpose(-2, -3)


def merge_heads(x):
    H, T, hs = x.shape[-3:]
    return x.transpose(-3, -2).contiguous().view(*x.shape[:-3], T, H * hs)


def multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    q = split_heads(torch.matmul(x, w_q), n_heads)
    k = split_heads(torch.matmul(x, w_k), n_heads)
    v = split_heads(torch.matmul(x, w_v), n_heads)
    y, att = attention(q, k, v, mask=mask)
    return merge_heads(y), att


def layer_norm(x, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    sigma2 = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(sigma2 + eps)
