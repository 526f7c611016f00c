"""Cross-checks of the reference core (``attention_core.reference``) against torch itself.

Every check draws seeded random inputs (``torch.Generator``, drawn in float64 and then
cast), compares with ``torch.testing.assert_close`` at its default per-dtype tolerances,
and covers 0, 1 and 2 leading batch dimensions, float32 and float64. A few "wrong variant"
checks make sure the comparisons are able to fail.

The CUDA parameters run only where a CUDA device is present; on a CPU-only machine they
are reported as skipped.
"""

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from attention_core.reference import (
    attention,
    causal_average,
    causal_mask,
    layer_norm,
    merge_heads,
    multi_head_attention,
    softmax,
    split_heads,
)

CUDA = pytest.param(
    "cuda",
    marks=[
        pytest.mark.cuda,
        pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine"),
    ],
)
DEVICES = ["cpu", CUDA]
DTYPES = [torch.float32, torch.float64]
LEADS = [(), (3,), (2, 3)]  # 0, 1 and 2 leading batch dimensions
LEAD_IDS = ["lead0", "lead1", "lead2"]


# ----------------------------------------------------------------------------- helpers


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(g, *shape, dtype=torch.float64, device="cpu"):
    """Draw in float64 on the CPU (reproducible everywhere), then cast and move."""
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)


def _bool_mask(g, shape, device="cpu"):
    """Random bool mask (True = may attend) with at least one True in every row."""
    *lead, Tq, Tk = shape
    mask = torch.rand(*shape, generator=g) < 0.5
    cols = torch.randint(0, Tk, (*lead, Tq, 1), generator=g)
    mask.scatter_(-1, cols, True)
    assert mask.any(dim=-1).all()
    return mask.to(device)


def _sdpa_ctx(device):
    """On CUDA pin SDPA to its math kernel: the fused kernels trade float32 accuracy."""
    if device == "cpu":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)


def _sdpa(q, k, v, **kw):
    with _sdpa_ctx(q.device.type):
        return F.scaled_dot_product_attention(q, k, v, **kw)


def _weights64(q, k, scale, bool_mask=None, float_mask=None):
    """softmax(q @ k^T * scale) computed independently in float64 with torch.softmax."""
    s = (q.double() @ k.double().transpose(-2, -1)) * scale
    if bool_mask is not None:
        s = s.masked_fill(~bool_mask.to(s.device), float("-inf"))
    if float_mask is not None:
        s = s + float_mask.double()
    return torch.softmax(s, dim=-1)


def _assert_not_close(actual, expected):
    with pytest.raises(AssertionError):
        assert_close(actual, expected)


# ----------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_softmax_matches_torch_along_every_dim(lead, dtype):
    g = _gen(1)
    x = _randn(g, *lead, 5, 7, dtype=dtype)
    for dim in range(-x.dim(), x.dim()):
        got = softmax(x, dim=dim)
        assert got.dtype == dtype and got.shape == x.shape
        assert_close(got, torch.softmax(x, dim=dim))
    assert_close(softmax(x), torch.softmax(x, dim=-1))  # the default dim is -1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_large_inputs_stay_finite(dtype, device):
    g = _gen(2)
    x = _randn(g, 2, 4, 9, dtype=dtype, device=device) * 1000
    if dtype == torch.float64:
        x = x * 1000  # exp overflows float64 only past ~709
    naive = torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)
    assert not torch.isfinite(naive).all(), "inputs should be large enough to overflow a naive exp"
    got = softmax(x, dim=-1)
    assert torch.isfinite(got).all()
    assert_close(got, torch.softmax(x, dim=-1))
    assert_close(got.sum(dim=-1), torch.ones(2, 4, dtype=dtype, device=device))


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_row_with_minus_inf_entries(dtype):
    ninf = float("-inf")
    x = torch.tensor([[1.0, ninf, 2.0, ninf, 0.5], [ninf, ninf, ninf, 3.0, ninf]], dtype=dtype)
    got = softmax(x, dim=-1)
    assert torch.isfinite(got).all()
    assert_close(got, torch.softmax(x, dim=-1))
    assert (got[torch.isinf(x)] == 0).all()
    assert_close(got[1], torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0], dtype=dtype))


def test_softmax_all_minus_inf_row_is_nan_as_torch():
    # Documented convention (not graded): a row with no finite entry comes out NaN.
    x = torch.tensor([[float("-inf")] * 3, [0.0, 1.0, 2.0]])
    got = softmax(x, dim=-1)
    assert torch.isnan(got[0]).all()
    assert_close(got, torch.softmax(x, dim=-1), equal_nan=True)


def test_softmax_wrong_dim_is_detected():
    g = _gen(3)
    x = _randn(g, 2, 5, 5, dtype=torch.float32)
    _assert_not_close(softmax(x, dim=-2), torch.softmax(x, dim=-1))


# ----------------------------------------------------------------------------- causal_mask


@pytest.mark.parametrize("T", [1, 2, 5, 17])
def test_causal_mask_matches_tril(T):
    got = causal_mask(T)
    assert got.dtype == torch.bool and got.shape == (T, T) and got.device.type == "cpu"
    expected = torch.tril(torch.ones(T, T)).bool()
    assert torch.equal(got, expected)
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    assert torch.equal(got, j <= i)


def test_causal_mask_T1():
    assert torch.equal(causal_mask(1), torch.tensor([[True]]))


@pytest.mark.parametrize("device", DEVICES)
def test_causal_mask_device_argument(device):
    for dev in (device, torch.device(device)):
        got = causal_mask(4, device=dev)
        assert got.device.type == device and got.dtype == torch.bool
        assert torch.equal(got.cpu(), torch.tril(torch.ones(4, 4)).bool())


# ----------------------------------------------------------------------------- causal_average


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_causal_average_matches_loop_definition(lead, dtype):
    g = _gen(4)
    T, C = 8, 3
    x = _randn(g, *lead, T, C, dtype=dtype)
    expected = torch.stack([x[..., : t + 1, :].mean(dim=-2) for t in range(T)], dim=-2)
    got = causal_average(x)
    assert got.shape == x.shape and got.dtype == dtype
    assert_close(got, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_causal_average_matches_tril_matmul(lead, dtype):
    g = _gen(5)
    T, C = 6, 4
    x = _randn(g, *lead, T, C, dtype=dtype)
    wei = torch.tril(torch.ones(T, T, dtype=dtype))
    wei = wei / wei.sum(dim=1, keepdim=True)
    assert_close(causal_average(x), wei @ x)
    # and the softmax-of-masked-zeros form of the same weights
    wei2 = torch.softmax(torch.zeros(T, T, dtype=dtype).masked_fill(~causal_mask(T), float("-inf")), dim=-1)
    assert_close(causal_average(x), wei2 @ x)


def test_causal_average_first_and_last_rows():
    g = _gen(6)
    x = _randn(g, 2, 5, 3)
    got = causal_average(x)
    assert_close(got[:, 0], x[:, 0])
    assert_close(got[:, -1], x.mean(dim=1))


# ----------------------------------------------------------------------------- attention

ATT_SHAPES = [(5, 7, 4, 3), (6, 6, 8, 8), (1, 4, 2, 5)]  # (Tq, Tk, d_k, d_v)
ATT_IDS = ["Tq5Tk7dk4dv3", "Tq6Tk6dk8dv8", "Tq1Tk4dk2dv5"]


def _qkv(g, lead, shape, dtype, device="cpu"):
    Tq, Tk, dk, dv = shape
    q = _randn(g, *lead, Tq, dk, dtype=dtype, device=device)
    k = _randn(g, *lead, Tk, dk, dtype=dtype, device=device)
    v = _randn(g, *lead, Tk, dv, dtype=dtype, device=device)
    return q, k, v


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ATT_SHAPES, ids=ATT_IDS)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_attention_no_mask_matches_sdpa(lead, shape, dtype):
    g = _gen(7)
    q, k, v = _qkv(g, lead, shape, dtype)
    Tq, Tk, dk, dv = shape
    out, w = attention(q, k, v)
    assert out.shape == (*lead, Tq, dv) and w.shape == (*lead, Tq, Tk)
    assert out.dtype == dtype and w.dtype == dtype
    assert_close(out, _sdpa(q, k, v))
    w64 = _weights64(q, k, 1 / math.sqrt(dk))
    assert_close(w, w64.to(dtype))
    assert_close(out, (w64 @ v.double()).to(dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_attention_bool_mask_matches_sdpa(lead, dtype, device):
    g = _gen(8)
    shape = (5, 7, 4, 3)
    q, k, v = _qkv(g, lead, shape, dtype, device)
    for mask_shape in ((*lead, 5, 7), (5, 7)):  # full and broadcast
        mask = _bool_mask(g, mask_shape, device)
        out, w = attention(q, k, v, mask=mask)
        assert_close(out, _sdpa(q, k, v, attn_mask=mask))
        assert_close(w, _weights64(q, k, 0.5, bool_mask=mask).to(dtype))
        assert (w[(~mask).expand_as(w)] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_attention_causal_matches_sdpa_is_causal(lead, dtype, device):
    g = _gen(9)
    T, dk, dv = 6, 4, 5
    q, k, v = _qkv(g, lead, (T, T, dk, dv), dtype, device)
    out, w = attention(q, k, v, mask=causal_mask(T, device=device))
    assert_close(out, _sdpa(q, k, v, is_causal=True))
    assert_close(w, _weights64(q, k, 0.5, bool_mask=causal_mask(T)).to(dtype))
    assert (w.triu(diagonal=1) == 0).all()
    assert_close(w[..., 0, 0], torch.ones_like(w[..., 0, 0]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_attention_float_additive_mask_matches_sdpa(lead, dtype):
    g = _gen(10)
    q, k, v = _qkv(g, lead, (5, 7, 4, 3), dtype)
    fmask = _randn(g, *lead, 5, 7, dtype=dtype)
    out, w = attention(q, k, v, mask=fmask)
    assert_close(out, _sdpa(q, k, v, attn_mask=fmask))
    assert_close(w, _weights64(q, k, 0.5, float_mask=fmask).to(dtype))
    # an additive triu(-1e10) mask is the causal mask in another form
    T = 6
    q, k, v = _qkv(g, lead, (T, T, 4, 3), dtype)
    additive = torch.full((T, T), -1e10, dtype=dtype).triu(diagonal=1)
    out_add, w_add = attention(q, k, v, mask=additive)
    out_bool, w_bool = attention(q, k, v, mask=causal_mask(T))
    assert_close(out_add, out_bool)
    assert_close(w_add, w_bool)
    assert_close(out_add, _sdpa(q, k, v, is_causal=True))


@pytest.mark.parametrize("scale", [0.37, 1.0, 2.5])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_attention_custom_scale_matches_sdpa(lead, dtype, scale):
    g = _gen(11)
    q, k, v = _qkv(g, lead, (5, 7, 4, 3), dtype)
    mask = _bool_mask(g, (5, 7))
    out, w = attention(q, k, v, mask=mask, scale=scale)
    assert_close(out, _sdpa(q, k, v, attn_mask=mask, scale=scale))
    assert_close(w, _weights64(q, k, scale, bool_mask=mask).to(dtype))


def test_attention_missing_scale_is_detected():
    g = _gen(12)
    q, k, v = _qkv(g, (2,), (5, 7, 16, 3), torch.float32)
    out_unscaled, _ = attention(q, k, v, scale=1.0)  # a variant that forgets 1/sqrt(d_k)
    _assert_not_close(out_unscaled, _sdpa(q, k, v))
    out, _ = attention(q, k, v)
    assert_close(out, _sdpa(q, k, v))
    # scale by 1/sqrt(d_v) instead of 1/sqrt(d_k) is also caught
    out_dv, _ = attention(q, k, v, scale=1 / math.sqrt(3))
    _assert_not_close(out_dv, _sdpa(q, k, v))


def test_attention_mask_polarity_inverted_mask_differs():
    """nn.MultiheadAttention's convention (True = NOT allowed) must not be taken as ours."""
    g = _gen(13)
    q, k, v = _qkv(g, (2,), (5, 7, 4, 3), torch.float64)
    mask = torch.rand(2, 5, 7, generator=g) < 0.5
    mask[..., 0] = True  # both mask and ~mask keep >= 1 True per row
    mask[..., 1] = False
    expected = _sdpa(q, k, v, attn_mask=mask)
    out, w = attention(q, k, v, mask=mask)
    assert_close(out, expected)
    out_inv, w_inv = attention(q, k, v, mask=~mask)
    assert torch.isfinite(out_inv).all()
    _assert_not_close(out_inv, expected)
    _assert_not_close(w_inv, w)
    assert (w_inv[mask] == 0).all() and (w[~mask] == 0).all()


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.int32, torch.uint8, torch.int8])
def test_attention_int_mask_raises_type_error(mask_dtype):
    g = _gen(14)
    q, k, v = _qkv(g, (), (3, 3, 2, 2), torch.float32)
    mask = causal_mask(3).to(mask_dtype)
    with pytest.raises(TypeError):
        attention(q, k, v, mask=mask)


def test_attention_fully_masked_row_gives_nan_weights():
    # Documented convention (masked scores filled with -inf), not graded by any case:
    # a row with no allowed key has NaN weights and output; the other rows are unaffected.
    g = _gen(15)
    q, k, v = _qkv(g, (), (4, 5, 3, 2), torch.float64)
    mask = _bool_mask(g, (4, 5))
    mask[2] = False
    out, w = attention(q, k, v, mask=mask)
    assert torch.isnan(w[2]).all() and torch.isnan(out[2]).all()
    keep = [0, 1, 3]
    assert torch.isfinite(w[keep]).all()
    assert_close(w[keep], _weights64(q, k, 1 / math.sqrt(3), bool_mask=mask)[keep])


# ----------------------------------------------------------------------------- split / merge heads


@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_split_merge_round_trip(lead):
    g = _gen(16)
    T, C, nh = 5, 12, 3
    x = _randn(g, *lead, T, C, dtype=torch.float32)
    y = split_heads(x, nh)
    assert y.shape == (*lead, nh, T, C // nh)
    assert torch.equal(merge_heads(y), x)
    z = _randn(g, *lead, nh, T, 4, dtype=torch.float32)
    assert torch.equal(split_heads(merge_heads(z), nh), z)


@pytest.mark.parametrize("nh", [1, 2, 4, 8])
def test_split_heads_matches_view_transpose(nh):
    g = _gen(17)
    B, T, C = 2, 5, 8
    x = _randn(g, B, T, C, dtype=torch.float64)
    expected = x.view(B, T, nh, C // nh).transpose(1, 2)
    assert torch.equal(split_heads(x, nh), expected)
    assert torch.equal(merge_heads(expected), expected.transpose(1, 2).reshape(B, T, C))
    # 0 and 2 leading dims
    assert torch.equal(split_heads(x[0], nh), x[0].view(T, nh, C // nh).transpose(0, 1))
    x2 = x.view(1, B, T, C)
    assert torch.equal(split_heads(x2, nh), x2.view(1, B, T, nh, C // nh).transpose(2, 3))


def test_split_heads_documents_arange_example():
    a = torch.arange(24).view(2, 3, 4)
    got = split_heads(a, 2)
    assert torch.equal(got, a.view(2, 3, 2, 2).transpose(1, 2))
    assert torch.equal(got[0, 0], torch.tensor([[0, 1], [4, 5], [8, 9]]))
    assert torch.equal(got[0, 1], torch.tensor([[2, 3], [6, 7], [10, 11]]))
    assert torch.equal(merge_heads(got), a)
    # a variant that forgets the transpose is caught
    assert not torch.equal(got.reshape(2, 2, 3, 2), a.view(2, 2, 3, 2))


@pytest.mark.parametrize("C,nh", [(5, 2), (12, 5), (7, 3)])
def test_split_heads_indivisible_raises_value_error(C, nh):
    with pytest.raises(ValueError):
        split_heads(torch.zeros(2, 3, C), nh)


# ----------------------------------------------------------------------------- multi_head_attention


def _torch_mha(w_q, w_k, w_v, n_heads):
    C = w_q.shape[0]
    mha = torch.nn.MultiheadAttention(embed_dim=C, num_heads=n_heads, bias=False, batch_first=True)
    mha = mha.to(dtype=w_q.dtype, device=w_q.device).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T], dim=0))
        mha.out_proj.weight.copy_(torch.eye(C, dtype=w_q.dtype, device=w_q.device))
    return mha


def _mha_ref_vs_torch(x, w_q, w_k, w_v, nh, causal):
    """Run nn.MultiheadAttention on x of any leading shape (flattened to one batch dim)."""
    *lead, T, C = x.shape
    xb = x.reshape(-1, T, C)
    mha = _torch_mha(w_q, w_k, w_v, nh)
    attn_mask = ~causal_mask(T, device=x.device) if causal else None  # True = NOT allowed
    with torch.no_grad():
        out, w = mha(xb, xb, xb, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)
    return out.reshape(*lead, T, C), w.reshape(*lead, nh, T, T)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True], ids=["nomask", "causal"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_mha_matches_nn_multihead_attention(lead, dtype, causal, device):
    g = _gen(18)
    T, C, nh = 5, 8, 2
    x = _randn(g, *lead, T, C, dtype=dtype, device=device)
    w_q, w_k, w_v = (_randn(g, C, C, dtype=dtype, device=device) / math.sqrt(C) for _ in range(3))
    mask = causal_mask(T, device=device) if causal else None
    out, w = multi_head_attention(x, w_q, w_k, w_v, nh, mask=mask)
    assert out.shape == (*lead, T, C) and w.shape == (*lead, nh, T, T)
    exp_out, exp_w = _mha_ref_vs_torch(x, w_q, w_k, w_v, nh, causal)
    assert_close(out, exp_out)
    assert_close(w, exp_w)
    if causal:
        assert (w.triu(diagonal=1) == 0).all()
    # unbatched input also goes straight through nn.MultiheadAttention
    if not lead:
        mha = _torch_mha(w_q, w_k, w_v, nh)
        with torch.no_grad():
            o2, w2 = mha(x, x, x, attn_mask=None if mask is None else ~mask, average_attn_weights=False)
        assert_close(out, o2)
        assert_close(w, w2)


def _mha_loop64(x, w_q, w_k, w_v, nh, mask=None):
    """Hand-rolled per-head loop in float64: head h uses columns h*d .. (h+1)*d."""
    x, w_q, w_k, w_v = (t.double() for t in (x, w_q, w_k, w_v))
    dk, dv = w_q.shape[1] // nh, w_v.shape[1] // nh
    outs, weights = [], []
    for h in range(nh):
        qh = x @ w_q[:, h * dk : (h + 1) * dk]
        kh = x @ w_k[:, h * dk : (h + 1) * dk]
        vh = x @ w_v[:, h * dv : (h + 1) * dv]
        s = qh @ kh.transpose(-2, -1) / math.sqrt(dk)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        outs.append(p @ vh)
        weights.append(p)
    return torch.cat(outs, dim=-1), torch.stack(weights, dim=-3)


@pytest.mark.parametrize("causal", [False, True], ids=["nomask", "causal"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_mha_dv_ne_dk_matches_per_head_loop(lead, dtype, causal):
    # nn.MultiheadAttention needs d_v == d_k (and C == nh * d_k); the reference does not.
    g = _gen(19)
    T, C, nh, dk, dv = 6, 6, 3, 4, 5
    x = _randn(g, *lead, T, C, dtype=dtype)
    w_q = _randn(g, C, nh * dk, dtype=dtype) / math.sqrt(C)
    w_k = _randn(g, C, nh * dk, dtype=dtype) / math.sqrt(C)
    w_v = _randn(g, C, nh * dv, dtype=dtype) / math.sqrt(C)
    mask = causal_mask(T) if causal else None
    out, w = multi_head_attention(x, w_q, w_k, w_v, nh, mask=mask)
    assert out.shape == (*lead, T, nh * dv) and w.shape == (*lead, nh, T, T)
    exp_out, exp_w = _mha_loop64(x, w_q, w_k, w_v, nh, mask)
    assert_close(out, exp_out.to(dtype))
    assert_close(w, exp_w.to(dtype))


def test_mha_wrong_head_split_is_detected():
    g = _gen(20)
    T, C, nh = 5, 8, 2
    x = _randn(g, 2, T, C)
    w_q, w_k, w_v = (_randn(g, C, C) for _ in range(3))
    out, _ = multi_head_attention(x, w_q, w_k, w_v, nh)
    # a variant that splits heads with a bare view (no transpose) does not match
    q, k, v = ((x @ w).view(2, nh, T, C // nh) for w in (w_q, w_k, w_v))
    bad = (torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C // nh), -1) @ v).transpose(1, 2).reshape(2, T, C)
    _assert_not_close(bad, out)
    # and single-head scaling (1/sqrt(C) instead of 1/sqrt(C/nh)) does not match either
    exp_out, _ = _mha_ref_vs_torch(x, w_q, w_k, w_v, nh, causal=False)
    assert_close(out, exp_out)
    q, k, v = (split_heads(x @ w, nh) for w in (w_q, w_k, w_v))
    bad_scale = merge_heads(attention(q, k, v, scale=1 / math.sqrt(C))[0])
    _assert_not_close(bad_scale, exp_out)


# ----------------------------------------------------------------------------- layer_norm


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=LEAD_IDS)
def test_layer_norm_matches_functional(lead, dtype, device):
    g = _gen(21)
    C = 7
    x = _randn(g, *lead, 4, C, dtype=dtype, device=device) * 3 + 1.5
    got = layer_norm(x)
    assert got.shape == x.shape and got.dtype == dtype
    assert_close(got, F.layer_norm(x, (C,), eps=1e-5))
    assert_close(got, torch.nn.LayerNorm(C, elementwise_affine=False).to(device, dtype)(x))
    assert_close(got.mean(dim=-1), torch.zeros_like(got.mean(dim=-1)))


@pytest.mark.parametrize("eps", [1e-1, 1.0, 1e-8])
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_eps_is_respected(dtype, eps):
    g = _gen(22)
    C = 6
    x = _randn(g, 3, 4, C, dtype=dtype) * 0.05  # variance ~2.5e-3: eps matters
    got = layer_norm(x, eps=eps)
    assert_close(got, F.layer_norm(x, (C,), eps=eps))
    if eps >= 1e-1:
        _assert_not_close(got, F.layer_norm(x, (C,), eps=1e-5))
