# Only causal_mask, causal_average and layer_norm; the other five functions were deleted (not defined at all).
import torch


def causal_mask(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def causal_average(x):
    T = x.shape[-2]
    n = torch.arange(1, T + 1, device=x.device, dtype=x.dtype)
    return x.cumsum(dim=-2) / n[:, None]


def layer_norm(x, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)
