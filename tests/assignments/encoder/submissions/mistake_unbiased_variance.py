# MISTAKE: layer norm uses the unbiased variance (divides by dim - 1)
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def sinusoidal_positions(T: int, d: int) -> torch.Tensor:
    pe = torch.zeros(T, d)
    pos = torch.arange(T, dtype=torch.float32).unsqueeze(1)
    freqs = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    pe[:, 0::2] = torch.sin(pos * freqs)
    pe[:, 1::2] = torch.cos(pos * freqs)
    return pe


def alibi_bias(n_heads: int, T: int) -> torch.Tensor:
    slopes = torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)])
    pos = torch.arange(T)
    rel = (pos[None, :] - pos[:, None]).float()  # j - i, <= 0 in the past
    bias = slopes.view(-1, 1, 1) * rel  # -m (i - j)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return bias.masked_fill(future, float("-inf"))


def _split(t, h):
    B, T, D = t.shape
    return t.view(B, T, h, D // h).transpose(1, 2)


def _merge(t):
    B, h, T, dh = t.shape
    return t.transpose(1, 2).contiguous().view(B, T, h * dh)


class CrossAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, context, key_padding_mask=None):
        q = _split(self.q_proj(x), self.h)
        k = _split(self.k_proj(context), self.h)
        v = _split(self.v_proj(context), self.h)
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
        if key_padding_mask is not None:
            s = s.masked_fill(key_padding_mask[:, None, None, :] == 0, float("-inf"))
        p = torch.softmax(s, dim=-1)
        return self.out_proj(_merge(p @ v))


class LayerNormAffine(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True)
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class PostNormEncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.norm1 = LayerNormAffine(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.norm2 = LayerNormAffine(d_model)

    def forward(self, x):
        T = x.size(1)
        q, k, v = (_split(p(x), self.h) for p in (self.q_proj, self.k_proj, self.v_proj))
        s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        s = s + alibi_bias(self.h, T).to(s.device, s.dtype)
        attn = self.out_proj(_merge(torch.softmax(s, dim=-1) @ v))
        x = self.norm1(x + attn)
        x = self.norm2(x + self.fc2(F.gelu(self.fc1(x))))
        return x
