"""Llama block using torch's scaled_dot_product_attention and complex-number RoPE.

RoPE as complex numbers: channel i and channel i + D/2 are the real and imaginary parts of one
complex number (the rotate-half pairing), multiplied by exp(i * t * theta_i).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def sliding_window_mask(T, window):
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    too_old = torch.ones(T, T, dtype=torch.bool).tril(diagonal=-window)
    return causal & ~too_old


def apply_rope(x, base=10000):
    *_, T, D = x.shape
    half = D // 2
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64, device=x.device) / D)
    angles = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * theta[None, :]
    rot = torch.polar(torch.ones_like(angles), angles)  # (T, D/2) complex128
    z = torch.complex(x[..., :half].double(), x[..., half:].double())  # (..., T, D/2)
    z = z * rot
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-06):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, (self.dim,), self.weight, self.eps)


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.wo = nn.Linear(n_heads * self.head_dim, d_model, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wq = nn.Linear(d_model, n_heads * self.head_dim, bias=False)

    def _split(self, t, heads):
        B, T, _ = t.shape
        return t.view(B, T, heads, self.head_dim).transpose(1, 2)

    def forward(self, x):
        B, T, C = x.shape
        q = apply_rope(self._split(self.wq(x), self.n_heads))
        k = apply_rope(self._split(self.wk(x), self.n_kv_heads))
        v = self._split(self.wv(x), self.n_kv_heads)
        rep = self.n_heads // self.n_kv_heads
        # expand each kv head over its group of consecutive query heads
        k = k[:, :, None].expand(B, self.n_kv_heads, rep, T, self.head_dim).reshape(B, self.n_heads, T, self.head_dim)
        v = v[:, :, None].expand(B, self.n_kv_heads, rep, T, self.head_dim).reshape(B, self.n_heads, T, self.head_dim)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(B, T, C))


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, hidden_dim, eps=1e-06):
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden_dim, bias=False)
        self.w3 = nn.Linear(d_model, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, d_model, bias=False)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.attention = GroupedQueryAttention(d_model, n_heads, n_kv_heads)
        self.attention_norm = RMSNorm(d_model, eps)

    def feed_forward(self, n):
        return self.w2(F.silu(self.w1(n)) * self.w3(n))

    def forward(self, x):
        h = self.attention(self.attention_norm(x)) + x
        return self.feed_forward(self.ffn_norm(h)) + h
