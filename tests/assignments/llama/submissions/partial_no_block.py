"""Everything but DecoderBlock (ran out of time)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def sliding_window_mask(T, window):
    m = torch.ones(T, T, dtype=torch.bool).tril()
    if window < T:
        m = m & torch.ones(T, T, dtype=torch.bool).triu(1 - window)
    return m


def apply_rope(x, base=10000):
    D = x.shape[-1]
    T = x.shape[-2]
    inv_freq = base ** (-torch.arange(0, D, 2, dtype=torch.float64, device=x.device) / D)
    ang = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * inv_freq
    ang = torch.cat([ang, ang], -1)
    x1, x2 = x.chunk(2, dim=-1)
    return x * ang.cos().to(x.dtype) + torch.cat([-x2, x1], -1) * ang.sin().to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-06):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        norm = x.norm(dim=-1, keepdim=True) / math.sqrt(x.shape[-1])
        return x / torch.sqrt(norm ** 2 + self.eps) * self.weight


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        self.h = n_heads
        self.kv = n_kv_heads
        self.hd = d_model // n_heads
        self.wq = nn.Linear(d_model, n_heads * self.hd, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(n_heads * self.hd, d_model, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q = apply_rope(self.wq(x).view(B, T, self.h, self.hd).transpose(1, 2))
        k = apply_rope(self.wk(x).view(B, T, self.kv, self.hd).transpose(1, 2))
        v = self.wv(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        k = torch.repeat_interleave(k, self.h // self.kv, dim=1)
        v = torch.repeat_interleave(v, self.h // self.kv, dim=1)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        return self.wo(y.transpose(1, 2).reshape(B, T, C))
