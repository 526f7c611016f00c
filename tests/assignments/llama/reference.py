"""A modern (Llama-style) decoder block: the teacher's solution.

Every public function and ``nn.Module`` class below is what students implement, in this order:

* ``sliding_window_mask``: the boolean mask of causal sliding-window attention;
* ``apply_rope``: rotary position embeddings, rotate-half convention (Llama, GPT-NeoX);
* ``RMSNorm``: root-mean-square normalisation with a learned gain;
* ``GroupedQueryAttention``: causal attention with fewer key/value heads than query heads;
* ``DecoderBlock``: pre-norm block, attention then a SwiGLU feed-forward, each with a residual.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def sliding_window_mask(T: int, window: int) -> torch.Tensor:
    """The mask of causal sliding-window attention.

    Args:
        T: the number of positions.
        window: how many positions a query sees, itself included (``window >= 1``).

    Returns:
        A bool tensor of shape ``(T, T)``: ``mask[i, j]`` is True (may attend) exactly when
        ``i - window < j <= i``, i.e. ``j`` is not in the future and is one of the last
        ``window`` positions up to and including ``i``. ``window >= T`` gives the causal mask.
    """
    i = torch.arange(T).unsqueeze(1)  # (T, 1) query positions
    j = torch.arange(T).unsqueeze(0)  # (1, T) key positions
    mask = (j <= i) & (j > i - window)  # (T, T)
    return mask


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embeddings (RoPE), rotate-half convention.

    Args:
        x: ``(B, H, T, D)`` queries or keys, ``D`` even. Position ``t`` is the index along ``T``
            (0, 1, ..., T-1).
        base: the base of the frequencies.

    Returns:
        A tensor of the shape and dtype of ``x``. Channel ``i`` (``i < D/2``) is paired with
        channel ``i + D/2`` (first half with second half, as Llama and GPT-NeoX do, not adjacent
        channels), and each pair is rotated by the angle ``t * base ** (-2i / D)``::

            out[..., i]       = x[..., i] * cos - x[..., i + D/2] * sin
            out[..., i + D/2] = x[..., i + D/2] * cos + x[..., i] * sin
    """
    B, H, T, D = x.shape
    inv_freq = base ** (-torch.arange(0, D, 2, dtype=torch.float64, device=x.device) / D)  # (D/2,)
    t = torch.arange(T, dtype=torch.float64, device=x.device)  # (T,)
    angles = torch.outer(t, inv_freq)  # (T, D/2)
    angles = torch.cat((angles, angles), dim=-1)  # (T, D)
    cos = angles.cos().to(x.dtype)
    sin = angles.sin().to(x.dtype)
    return x * cos + _rotate_half(x) * sin


class RMSNorm(nn.Module):
    """Root-mean-square layer normalisation (no mean subtraction, no bias).

    Args:
        dim: the size of the last dimension, which is normalised.
        eps: added to the mean square, inside the square root.

    Called as ``norm(x)`` on ``(..., dim)``; returns the same shape:
    ``x / sqrt(mean(x ** 2, last dim) + eps) * weight``. ``weight`` is a learned gain of
    shape ``(dim,)``, initialised to ones.
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ms = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
        return x * torch.rsqrt(ms + self.eps) * self.weight


class GroupedQueryAttention(nn.Module):
    """Causal grouped-query attention with rotary embeddings.

    Args:
        d_model: the channels C of the input and of the output.
        n_heads: the number of query heads; ``head_dim = d_model // n_heads`` (even).
        n_kv_heads: the number of key/value heads; it divides ``n_heads``. Each key/value head is
            shared by ``n_heads // n_kv_heads`` consecutive query heads (query head ``h`` uses
            key/value head ``h // (n_heads // n_kv_heads)``).

    Layers (``nn.Linear``, no bias): ``wq`` C -> n_heads * head_dim, ``wk`` and ``wv``
    C -> n_kv_heads * head_dim, ``wo`` n_heads * head_dim -> C.

    Called as ``attn(x)`` on ``(B, T, C)``; returns ``(B, T, C)``. The projections are split
    into heads (``(B, heads, T, head_dim)``), RoPE (``apply_rope``, default base) is applied to
    the queries and the keys (not the values), the key/value heads are expanded to ``n_heads``,
    scores are scaled by ``1 / sqrt(head_dim)``, position ``t`` attends to positions ``0..t``,
    softmax over the keys, the heads are merged back and projected by ``wo``.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = d_model // n_heads
        self.wq = nn.Linear(d_model, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, KV, T, hd)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, KV, T, hd)
        q = apply_rope(q)
        k = apply_rope(k)
        n_rep = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(n_rep, dim=1)  # (B, H, T, hd)
        v = v.repeat_interleave(n_rep, dim=1)  # (B, H, T, hd)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        scores = scores.masked_fill(~causal, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        out = weights @ v  # (B, H, T, hd)
        out = out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        return self.wo(out)


class DecoderBlock(nn.Module):
    """A pre-norm decoder block, as in Llama.

    Args:
        d_model: the channels C.
        n_heads: query heads of the attention.
        n_kv_heads: key/value heads of the attention.
        hidden_dim: the hidden size of the SwiGLU feed-forward.
        eps: the ``eps`` of both RMSNorms.

    Members: ``attention_norm`` and ``ffn_norm`` (``RMSNorm(d_model, eps)``), ``attention``
    (``GroupedQueryAttention(d_model, n_heads, n_kv_heads)``), and the feed-forward's
    ``nn.Linear`` layers without bias: ``w1`` and ``w3`` C -> hidden_dim, ``w2`` hidden_dim -> C.

    Called as ``block(x)`` on ``(B, T, C)``; returns ``(B, T, C)``::

        h = x + attention(attention_norm(x))
        out = h + w2(silu(w1(n)) * w3(n))    where n = ffn_norm(h)
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, hidden_dim: int,
                 eps: float = 1e-6):
        super().__init__()
        self.attention_norm = RMSNorm(d_model, eps)
        self.attention = GroupedQueryAttention(d_model, n_heads, n_kv_heads)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.w1 = nn.Linear(d_model, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, d_model, bias=False)
        self.w3 = nn.Linear(d_model, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        n = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(n)) * self.w3(n))
