# Attention written the slow, explicit way: loops over positions and heads.
import math
import torch


def softmax(x, dim=-1):
    m = torch.max(x, dim=dim, keepdim=True).values
    num = torch.exp(x - m)
    den = torch.sum(num, dim=dim, keepdim=True)
    return num / den


def causal_mask(T, device=None):
    rows = []
    for i in range(T):
        rows.append([j <= i for j in range(T)])
    return torch.tensor(rows, dtype=torch.bool, device=device).reshape(T, T)


def causal_average(x):
    T = x.shape[-2]
    rows = []
    for t in range(T):
        rows.append(x[..., : t + 1, :].mean(dim=-2))
    return torch.stack(rows, dim=-2)


def attention(q, k, v, mask=None, scale=None):
    if scale is None:
        scale = 1 / math.sqrt(q.shape[-1])
    if mask is not None and mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError("bad mask dtype")
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if mask is not None:
        mask = torch.broadcast_to(mask, torch.broadcast_shapes(mask.shape, scores.shape))
        scores = scores.expand(mask.shape)
    Tq = scores.shape[-2]
    weight_rows = []
    for i in range(Tq):
        row = scores[..., i, :]
        if mask is not None:
            m = mask[..., i, :]
            if m.dtype == torch.bool:
                row = row.masked_fill(m.logical_not(), -math.inf)
            else:
                row = row + m.to(row.dtype)
        weight_rows.append(softmax(row, dim=-1))
    weights = torch.stack(weight_rows, dim=-2)
    out_rows = []
    for i in range(Tq):
        # output row i is the weighted sum of the value rows
        out_rows.append((weights[..., i, :].unsqueeze(-1) * v).sum(dim=-2))
    output = torch.stack(out_rows, dim=-2)
    return output, weights


def split_heads(x, n_heads):
    hs = x.shape[-1] // n_heads
    heads = [x[..., h * hs:(h + 1) * hs] for h in range(n_heads)]
    return torch.stack(heads, dim=-3)


def merge_heads(x):
    n_heads = x.shape[-3]
    return torch.cat([x[..., h, :, :] for h in range(n_heads)], dim=-1)


def multi_head_attention(x, w_q, w_k, w_v, n_heads, mask=None):
    d_k = w_q.shape[-1] // n_heads
    d_v = w_v.shape[-1] // n_heads
    if mask is not None:
        # the mask broadcasts against the (..., n_heads, T, T) weights: pick each head's slice
        T = x.shape[-2]
        full = torch.broadcast_shapes(mask.shape, (n_heads, T, T))
        mask = mask.expand(full)
    outs, ws = [], []
    for h in range(n_heads):
        q = x @ w_q[:, h * d_k:(h + 1) * d_k]
        k = x @ w_k[:, h * d_k:(h + 1) * d_k]
        v = x @ w_v[:, h * d_v:(h + 1) * d_v]
        o, w = attention(q, k, v, mask=None if mask is None else mask[..., h, :, :])
        outs.append(o)
        ws.append(w)
    return torch.cat(outs, dim=-1), torch.stack(ws, dim=-3)


def layer_norm(x, eps=1e-5):
    n = x.shape[-1]
    mean = x.sum(dim=-1, keepdim=True) / n
    centred = x - mean
    var = (centred * centred).sum(dim=-1, keepdim=True) / n
    return centred / (var + eps) ** 0.5
