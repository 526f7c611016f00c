"""Llama block, einsum style, shapes unpacked everywhere."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def sliding_window_mask(T, window):
    rows = torch.arange(T).view(T, 1)
    cols = torch.arange(T).view(1, T)
    dist = rows - cols  # how far back the key is
    return (dist >= 0) & (dist < window)


def apply_rope(x, base=10000):
    B, H, T, D = x.shape
    half = D // 2
    freqs = 1.0 / (base ** (torch.arange(half, dtype=torch.float32, device=x.device) * 2 / D))
    pos = torch.arange(T, dtype=torch.float32, device=x.device)
    theta = torch.einsum("t,f->tf", pos, freqs)  # (T, D/2)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-06):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return self.weight * (x / rms)


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
        H, KV, hd = self.n_heads, self.n_kv_heads, self.head_dim
        q = self.wq(x).reshape(B, T, H, hd).permute(0, 2, 1, 3)
        k = self.wk(x).reshape(B, T, KV, hd).permute(0, 2, 1, 3)
        v = self.wv(x).reshape(B, T, KV, hd).permute(0, 2, 1, 3)
        q, k = apply_rope(q), apply_rope(k)
        group = H // KV
        # group the query heads by the kv head they share: (B, KV, group, T, hd)
        qg = q.reshape(B, KV, group, T, hd)
        scores = torch.einsum("bkgtd,bksd->bkgts", qg, k) / math.sqrt(hd)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        attn = scores.softmax(dim=-1)
        out = torch.einsum("bkgts,bksd->btkgd", attn, v)  # (B, T, KV, group, hd)
        return self.wo(out.reshape(B, T, H * hd))


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
        B, T, C = x.shape
        x = x + self.attention(self.attention_norm(x))
        n = self.ffn_norm(x)
        gate = self.w1(n)
        return x + self.w2(gate * torch.sigmoid(gate) * self.w3(n))
