"""A correct Head: its layers made in another order, the mask from triu, softmax by hand."""

import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, embed_dim, head_size, dropout):
        super().__init__()
        self.value = nn.Linear(embed_dim, head_size, bias=False)
        self.query = nn.Linear(embed_dim, head_size, bias=False)
        self.key = nn.Linear(embed_dim, head_size, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value):
        q, k, v = self.query(query), self.key(key), self.value(value)
        T = k.shape[-2]
        scores = q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=q.device), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        weights = torch.exp(scores - scores.amax(-1, keepdim=True))
        weights = weights / weights.sum(-1, keepdim=True)
        return self.dropout(weights) @ v
