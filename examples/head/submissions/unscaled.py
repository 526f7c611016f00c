"""A Head with one mistake: the scores are not scaled by head_size ** -0.5."""

import torch
import torch.nn.functional as F
from torch import nn


class Head(nn.Module):
    def __init__(self, embed_dim, head_size, dropout):
        super().__init__()
        self.key = nn.Linear(embed_dim, head_size, bias=False)
        self.query = nn.Linear(embed_dim, head_size, bias=False)
        self.value = nn.Linear(embed_dim, head_size, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value):
        T = key.shape[1]
        scores = self.query(query) @ self.key(key).transpose(-2, -1)
        scores = scores.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
        return self.dropout(F.softmax(scores, dim=-1)) @ self.value(value)
