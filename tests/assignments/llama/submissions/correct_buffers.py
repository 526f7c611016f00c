"""Llama block with precomputed buffers: a RoPE cos/sin cache and a causal mask, made once."""

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_LEN = 256


def sliding_window_mask(T, window):
    # position i may see j when 0 <= i - j <= window - 1
    return torch.tril(torch.ones(T, T, dtype=torch.bool)) & torch.triu(
        torch.ones(T, T, dtype=torch.bool), diagonal=-(window - 1)
    )


def _rope_cache(T, D, base, device=None):
    inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64, device=device) / D))
    freqs = torch.arange(T, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate(x, cos, sin):
    D = x.shape[-1]
    rotated = torch.cat((-x[..., D // 2 :], x[..., : D // 2]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def apply_rope(x, base=10000):
    cos, sin = _rope_cache(x.shape[-2], x.shape[-1], base, x.device)
    return _rotate(x, cos, sin)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-06):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.variance_epsilon = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = d_model // n_heads
        self.scale = self.head_dim ** -0.5
        self.wq = nn.Linear(d_model, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, d_model, bias=False)
        cos, sin = _rope_cache(MAX_LEN, self.head_dim, 10000.0)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.register_buffer("causal", torch.tril(torch.ones(MAX_LEN, MAX_LEN, dtype=torch.bool)))

    def forward(self, x):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        n_rep = self.n_heads // self.n_kv_heads
        k = torch.repeat_interleave(k, n_rep, dim=1)
        v = torch.repeat_interleave(v, n_rep, dim=1)
        att = torch.matmul(q, k.transpose(2, 3)) * self.scale
        att = att.masked_fill(self.causal[:T, :T] == 0, float("-inf"))
        att = F.softmax(att.float(), dim=-1).type_as(q)
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, -1)
        return self.wo(y)


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, hidden_dim, eps=1e-06):
        super().__init__()
        self.attention = GroupedQueryAttention(d_model, n_heads, n_kv_heads)
        self.attention_norm = RMSNorm(d_model, eps=eps)
        self.ffn_norm = RMSNorm(d_model, eps=eps)
        self.w1 = nn.Linear(d_model, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, d_model, bias=False)
        self.w3 = nn.Linear(d_model, hidden_dim, bias=False)

    def forward(self, x):
        h = x + self.attention.forward(self.attention_norm(x))
        out = h + self.w2(F.silu(self.w1(self.ffn_norm(h))) * self.w3(self.ffn_norm(h)))
        return out
