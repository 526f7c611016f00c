"""Encoder-side attention variants: the teacher's solution.

Five pieces of a Transformer encoder, each graded on its own:

* ``sinusoidal_positions``: the fixed sin/cos position encoding of "Attention Is All You Need";
* ``alibi_bias``: ALiBi's linear distance penalty (Press et al., 2022), causal;
* ``CrossAttention``: multi-head attention from one sequence (queries) onto another (keys/values),
  with an optional key padding mask;
* ``LayerNormAffine``: layer normalisation with a learned scale and shift, written by hand;
* ``PostNormEncoderLayer``: a post-norm encoder layer (the original Transformer's order) whose
  self-attention is biased with ALiBi instead of adding position encodings.

Shapes use B (batch), T (positions), Tq / Tk (query / key positions), D (model channels),
H (heads), Dh = D // H (channels per head).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def sinusoidal_positions(T: int, d: int) -> torch.Tensor:
    """The sinusoidal position encoding of "Attention Is All You Need" (section 3.5).

    Args:
        T: the number of positions (0 .. T-1).
        d: the number of channels; even.

    Returns:
        A float32 tensor ``pe`` of shape ``(T, d)`` with, for position ``p`` and ``i = 0 .. d/2 - 1``:
        ``pe[p, 2i] = sin(p / 10000 ** (2i / d))`` and ``pe[p, 2i + 1] = cos(p / 10000 ** (2i / d))``
        (sin on the even channels, cos on the odd ones, interleaved).
    """
    position = torch.arange(T, dtype=torch.float32)[:, None]  # (T, 1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))  # (d/2,)
    angles = position * div_term  # (T, d/2)
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe


def alibi_bias(n_heads: int, T: int) -> torch.Tensor:
    """ALiBi's causal attention bias.

    Head ``h`` (0-based) has the slope ``m_h = 2 ** (-8 * (h + 1) / n_heads)``. The bias of query
    position ``i`` for key position ``j`` is ``-m_h * (i - j)`` where ``j <= i`` (0 on the diagonal,
    more negative the farther back), and ``-inf`` where ``j > i`` (the future is masked).

    Args:
        n_heads: the number of heads H.
        T: the number of positions.

    Returns:
        A float32 tensor of shape ``(H, T, T)``, to be added to the attention scores
        ``(B, H, T, T)`` before the softmax.
    """
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, dtype=torch.float32) / n_heads)  # (H,)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    distance = (i - j).to(torch.float32)  # (T, T), i - j
    bias = -slopes[:, None, None] * distance  # (H, T, T)
    return bias.masked_fill(j > i, float("-inf"))


class CrossAttention(nn.Module):
    """Multi-head cross-attention: queries from ``x``, keys and values from ``context``.

    Args:
        d_model: the channels D of ``x``, of ``context`` and of the output.
        n_heads: the number of heads H; D must be divisible by H.

    Parameters (matched by name when graded): ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``,
    each an ``nn.Linear(d_model, d_model)`` with a bias.

    Called as ``attn(x, context, key_padding_mask=None)``:
        x: ``(B, Tq, D)``, the sequence that asks (the decoder side, say).
        context: ``(B, Tk, D)``, the sequence attended to (the encoder's output).
        key_padding_mask: optional bool ``(B, Tk)``, ``True`` where a key is kept (a real token)
            and ``False`` where it is padding, which no query may attend to.
    Returns ``(B, Tq, D)``: per head, ``softmax(q k^T / sqrt(Dh)) v``, heads concatenated, then
    ``out_proj``. No causal mask.
    """

    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, context, key_padding_mask=None):
        B, Tq, D = x.shape
        Tk = context.shape[1]
        H, Dh = self.n_heads, self.head_dim
        q = self.q_proj(x).view(B, Tq, H, Dh).transpose(1, 2)  # (B, H, Tq, Dh)
        k = self.k_proj(context).view(B, Tk, H, Dh).transpose(1, 2)  # (B, H, Tk, Dh)
        v = self.v_proj(context).view(B, Tk, H, Dh).transpose(1, 2)  # (B, H, Tk, Dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)  # (B, H, Tq, Tk)
        if key_padding_mask is not None:
            keep = key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
            scores = scores.masked_fill(~keep, float("-inf"))
        weights = F.softmax(scores, dim=-1)  # (B, H, Tq, Tk)
        out = (weights @ v).transpose(1, 2).reshape(B, Tq, D)  # (B, Tq, D)
        return self.out_proj(out)


class LayerNormAffine(nn.Module):
    """Layer normalisation over the last dimension, with a learned scale and shift.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias``, where ``mean`` and ``var`` are taken over
    the last dimension and ``var`` is the biased variance (divided by ``dim``, not ``dim - 1``).

    Args:
        dim: the size of the last dimension.
        eps: added to the variance, inside the square root.

    Parameters: ``weight`` ``(dim,)`` and ``bias`` ``(dim,)``. (The solution starts them near 1 and
    0 at random so that the tests can tell them apart; when graded, your module is given the
    solution's values, so how you initialise them does not matter.)

    Called on ``x`` of shape ``(..., dim)``; returns the same shape.
    """

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(dim))
        self.bias = nn.Parameter(0.5 * torch.randn(dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased
        x_hat = (x - mean) / torch.sqrt(var + self.eps)
        return x_hat * self.weight + self.bias


class PostNormEncoderLayer(nn.Module):
    """A post-norm Transformer encoder layer with ALiBi self-attention.

    Args:
        d_model: the channels D.
        n_heads: the heads H of the self-attention; D must be divisible by H.
        d_ff: the hidden channels of the MLP.

    Parameters (matched by name when graded): ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``
    (``nn.Linear(D, D)`` with bias), ``norm1`` and ``norm2`` (``LayerNormAffine(D)``), ``fc1``
    (``nn.Linear(D, d_ff)``) and ``fc2`` (``nn.Linear(d_ff, D)``).

    Called on ``x`` ``(B, T, D)``; returns ``(B, T, D)``:

    1. ``a``: multi-head self-attention on ``x``, scores ``q k^T / sqrt(Dh)`` plus
       ``alibi_bias(H, T)`` (which also masks the future), softmax, heads concatenated, ``out_proj``;
    2. ``h = norm1(x + a)``: residual, then normalisation (post-norm);
    3. ``f = fc2(gelu(fc1(h)))`` with the exact (erf) GELU;
    4. returns ``norm2(h + f)``.
    """

    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.norm1 = LayerNormAffine(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.norm2 = LayerNormAffine(d_model)

    def forward(self, x):
        B, T, D = x.shape
        H, Dh = self.n_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k_proj(x).view(B, T, H, Dh).transpose(1, 2)
        v = self.v_proj(x).view(B, T, H, Dh).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)  # (B, H, T, T)
        scores = scores + alibi_bias(H, T).to(scores)  # (H, T, T) broadcast over B
        weights = F.softmax(scores, dim=-1)
        a = self.out_proj((weights @ v).transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        h = self.norm1(x + a)
        f = self.fc2(F.gelu(self.fc1(h)))
        return self.norm2(h + f)
