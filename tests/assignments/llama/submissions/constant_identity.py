"""Everything returns its input unchanged (or an all-True mask): the right shapes, no computation."""

import torch
import torch.nn as nn


def sliding_window_mask(T, window):
    return torch.ones(T, T, dtype=torch.bool)


def apply_rope(x, base=10000):
    return x


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-06):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        hd = d_model // n_heads
        self.wq = nn.Linear(d_model, n_heads * hd, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(n_heads * hd, d_model, bias=False)

    def forward(self, x):
        return x.clone()


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
        return x
