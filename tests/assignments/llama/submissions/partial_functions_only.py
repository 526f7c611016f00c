"""Only the two functions are done; the classes are not handed in."""

import torch


def sliding_window_mask(T, window):
    idx = torch.arange(T)
    diff = idx.unsqueeze(-1) - idx.unsqueeze(0)
    return (diff >= 0) & (diff <= window - 1)


def apply_rope(x, base=10000):
    B, H, T, D = x.shape
    half = D // 2
    exponent = torch.arange(half, dtype=torch.float32, device=x.device) / half
    inv_freq = torch.pow(float(base), -exponent)
    angle = torch.arange(T, dtype=torch.float32, device=x.device).unsqueeze(1) * inv_freq
    cos = torch.cat([angle.cos(), angle.cos()], dim=-1).to(x.dtype)
    sin = torch.cat([angle.sin(), angle.sin()], dim=-1).to(x.dtype)
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
