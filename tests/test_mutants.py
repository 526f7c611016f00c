"""A reference with one deliberate mistake fails at least one of the documents' own checks."""

import math

import pytest
import torch

from attention_core import reference
from attention_core.harness import runner

DOCUMENTS = ("000_", "001_", "002_", "003_", "004_")


def _no_scale(q, k, v, mask=None, scale=None):
    return reference.attention(q, k, v, mask=mask, scale=1.0 if scale is None else scale)


def _softmax_wrong_axis(x, dim=-1):
    return reference.softmax(x, dim=-2 if x.ndim > 1 and dim in (-1, x.ndim - 1) else dim)


def _attention_wrong_axis(q, k, v, mask=None, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    weights = reference.softmax(scores, dim=-2)
    return weights @ v, weights


def _mask_without_diagonal(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril(-1)


def _split_by_bare_view(x, n_heads):
    *lead, T, C = x.shape
    return x.reshape(*lead, n_heads, T, C // n_heads)  # (..., nh, T, hs) without the transpose


def _merge_by_bare_view(x):
    *lead, nh, T, hs = x.shape
    return x.reshape(*lead, T, nh * hs)


MISTAKES = {
    "no 1/sqrt(d_k) scale": {"attention": _no_scale},
    "softmax over the wrong axis": {"softmax": _softmax_wrong_axis, "attention": _attention_wrong_axis},
    "causal mask without the diagonal": {"causal_mask": _mask_without_diagonal},
    "heads split and merged by a bare view": {"split_heads": _split_by_bare_view, "merge_heads": _merge_by_bare_view},
}


@pytest.fixture(scope="module")
def document_checks():
    items = [i for i in runner.collect(runner.default_cases_folder())
             if i.error is None and i.file.name.startswith(DOCUMENTS)]
    assert all(runner.run(i).passed for i in items), "the reference passes every document check"
    return items


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_mistake_fails_a_document_check(mistake, document_checks):
    functions = {**runner.REFERENCE, **MISTAKES[mistake]}
    failed = [i.id for i in document_checks if i.check.kind == "call" and not runner.run(i, functions=functions).passed]
    assert failed, f"{mistake}: no document check fails"
