"""Correct: another style: einsum, torch.where, F.scaled_dot_product_attention, nn.LayerNorm in the layer."""
import math

import torch
from torch import nn
from torch.nn import functional as F


def sinusoidal_positions(T: int, d: int) -> torch.Tensor:
    # angle[p, c] = p / 10000^(2*(c//2)/d); even channels take sin, odd take cos
    c = torch.arange(d)
    inv = torch.exp(-(2 * (c // 2)).float() * math.log(10000.0) / d)
    angle = torch.arange(T).float()[:, None] * inv[None, :]
    return torch.where(c % 2 == 0, torch.sin(angle), torch.cos(angle))


def alibi_bias(n_heads: int, T: int) -> torch.Tensor:
    m = torch.pow(2.0, -8.0 * torch.arange(1, n_heads + 1).float() / n_heads)
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    dist = (i - j).float()
    bias = torch.einsum("h,ij->hij", -m, dist)
    return torch.where(j <= i, bias, torch.full_like(bias, -math.inf))


class CrossAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.out_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.q_proj = nn.Linear(d_model, d_model)

    def forward(self, x, context, key_padding_mask=None):
        B, Tq, D = x.shape
        Tk, H = context.shape[1], self.n_heads
        q = self.q_proj(x).reshape(B, Tq, H, -1).permute(0, 2, 1, 3)
        k = self.k_proj(context).reshape(B, Tk, H, -1).permute(0, 2, 1, 3)
        v = self.v_proj(context).reshape(B, Tk, H, -1).permute(0, 2, 1, 3)
        mask = None if key_padding_mask is None else key_padding_mask.bool().view(B, 1, 1, Tk)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(o.permute(0, 2, 1, 3).reshape(B, Tq, D))


class LayerNormAffine(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        centred = x - x.mean(dim=-1, keepdim=True)
        rstd = torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return torch.addcmul(self.bias, centred * rstd, self.weight)


class PostNormEncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model) for _ in range(4))
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)  # same parameter names: weight, bias
        self.norm2 = nn.LayerNorm(d_model)

    def _attend(self, x):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = (p(x).view(B, T, H, D // H) for p in (self.q_proj, self.k_proj, self.v_proj))
        scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D // H)
        scores = scores + alibi_bias(H, T).to(scores)
        w = scores.softmax(-1)
        return self.out_proj(torch.einsum("bhij,bjhd->bihd", w, v).reshape(B, T, D))

    def forward(self, x):
        h = self.norm1(x + self._attend(x))
        return self.norm2(h + self.fc2(F.gelu(self.fc1(h), approximate="none")))
