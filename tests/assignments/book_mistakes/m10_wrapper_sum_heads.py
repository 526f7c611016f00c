"""Attention classes for the chapter 3 assignment (einsum / functional style)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention_v1(nn.Module):
    """Raw weight matrices."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        queries = torch.einsum("...ti,io->...to", x, self.W_query)
        keys = torch.einsum("...ti,io->...to", x, self.W_key)
        values = torch.einsum("...ti,io->...to", x, self.W_value)
        omega = torch.einsum("...qd,...kd->...qk", queries, keys)
        alpha = F.softmax(omega * keys.size(-1) ** -0.5, dim=-1)
        return torch.einsum("...qk,...kd->...qd", alpha, values)


class SelfAttention_v2(nn.Module):
    """Same thing with nn.Linear layers."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        omega = queries @ keys.mT
        alpha = F.softmax(omega * keys.size(-1) ** -0.5, dim=-1)
        return alpha @ values


class CausalAttention(nn.Module):
    """Causal attention; the heavy lifting is done by the fused kernel."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length).triu(1))

    def forward(self, x):
        T = x.size(1)
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        allowed = ~self.mask[:T, :T].bool()  # sdpa wants True = may attend
        p = self.dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed, dropout_p=p)


class MultiHeadAttentionWrapper(nn.Module):
    """A stack of independent causal heads."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)
        )

    def forward(self, x):
        stacked = torch.stack([h(x) for h in self.heads], dim=-2)  # (b, T, heads, d_out)
        return stacked.sum(-2)  # combine the heads


class MultiHeadAttention(nn.Module):
    """Efficient multi-head attention: one projection, split into heads."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise AssertionError("d_out must be divisible by num_heads")
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length).triu(diagonal=1))

    def forward(self, x):
        B, T, _ = x.shape
        heads = lambda t: t.unflatten(-1, (self.num_heads, self.head_dim)).permute(0, 2, 1, 3)
        q, k, v = heads(self.W_query(x)), heads(self.W_key(x)), heads(self.W_value(x))
        omega = torch.einsum("bhqd,bhkd->bhqk", q, k) / self.head_dim ** 0.5
        omega = omega.masked_fill(self.mask[:T, :T] == 1, float("-inf"))
        alpha = self.dropout(F.softmax(omega, dim=-1))
        ctx = torch.einsum("bhqk,bhkd->bhqd", alpha, v)
        ctx = ctx.permute(0, 2, 1, 3).reshape(B, T, self.d_out)
        return self.out_proj(ctx)
