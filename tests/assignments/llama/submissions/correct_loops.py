"""Llama block written with explicit Python loops (slow, but spelled out)."""

import math

import torch
import torch.nn as nn


def sliding_window_mask(T, window):
    mask = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        start = max(0, i - window + 1)
        for j in range(start, i + 1):
            mask[i, j] = True
    return mask


def apply_rope(x, base=10000):
    B, H, T, D = x.shape
    half = D // 2
    cols = []
    firsts, seconds = [], []
    for i in range(half):
        freq = base ** (-2.0 * i / D)
        angle = torch.arange(T, dtype=torch.float64, device=x.device) * freq  # (T,)
        c = torch.cos(angle).to(x.dtype)
        s = torch.sin(angle).to(x.dtype)
        a = x[..., i]          # (B, H, T)
        b = x[..., i + half]
        firsts.append(a * c - b * s)
        seconds.append(b * c + a * s)
    return torch.stack(firsts + seconds, dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-06):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        mean_sq = (x ** 2).sum(dim=-1, keepdim=True) / x.shape[-1]
        return x / (mean_sq + self.eps) ** 0.5 * self.weight


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
        hd = self.head_dim
        q = self.wq(x).view(B, T, self.n_heads, hd).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_heads, hd).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_heads, hd).transpose(1, 2)
        q = apply_rope(q)
        k = apply_rope(k)
        group = self.n_heads // self.n_kv_heads
        heads = []
        for h in range(self.n_heads):
            kv = h // group
            qh, kh, vh = q[:, h], k[:, kv], v[:, kv]  # (B, T, hd)
            rows = []
            for t in range(T):
                s = qh[:, t : t + 1] @ kh[:, : t + 1].transpose(1, 2) / math.sqrt(hd)  # (B, 1, t+1)
                w = torch.softmax(s, dim=-1)
                rows.append(w @ vh[:, : t + 1])  # (B, 1, hd)
            heads.append(torch.cat(rows, dim=1))  # (B, T, hd)
        out = torch.cat(heads, dim=-1)  # (B, T, H*hd), head-major like a transpose+reshape
        return self.wo(out)


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, hidden_dim, eps=1e-06):
        super().__init__()
        self.attention_norm = RMSNorm(d_model, eps)
        self.attention = GroupedQueryAttention(d_model, n_heads, n_kv_heads)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.w1 = nn.Linear(d_model, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, d_model, bias=False)
        self.w3 = nn.Linear(d_model, hidden_dim, bias=False)

    def forward(self, x):
        attn_out = self.attention(self.attention_norm(x))
        h = x + attn_out
        n = self.ffn_norm(h)
        a = self.w1(n)
        silu = a / (1 + torch.exp(-a))
        ff = self.w2(silu * self.w3(n))
        return h + ff
