"""One head of causal self-attention, as document 000 ("Attention Explained", In [46]) writes it.

The teacher's solution: its public nn.Module class is what students implement.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Head(nn.Module):
    """One head of causal self-attention.

    Args:
        embed_dim: the channels C of the inputs.
        head_size: the channels of the projections and of the output.
        dropout: the dropout probability on the attention weights (off in eval mode).

    Called as ``head(query, key, value)`` on ``(B, T, C)`` tensors; returns ``(B, T, head_size)``:
    position t attends to positions 0..t only, with scores scaled by ``head_size ** -0.5``.
    """

    def __init__(self, embed_dim, head_size, dropout):
        super().__init__()
        self.key = nn.Linear(embed_dim, head_size, bias=False)
        self.query = nn.Linear(embed_dim, head_size, bias=False)
        self.value = nn.Linear(embed_dim, head_size, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value):
        B, T, C = key.shape
        key = self.key(key)  # (B, T, hs)
        query = self.query(query)  # (B, T, hs)
        scores = query @ key.transpose(-2, -1) * key.size(-1) ** -0.5  # (B, T, T)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=scores.device))  # (T, T)
        scores = scores.masked_fill(~causal, float("-inf"))
        p_attn = self.dropout(F.softmax(scores, dim=-1))  # (B, T, T)
        return p_attn @ self.value(value)  # (B, T, hs)
