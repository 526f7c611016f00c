"""The spec contract agrees with every place that states it."""

import inspect
import re
from pathlib import Path

import pytest

import attention_core
from attention_core import reference, spec
from attention_core.harness.checking import torch_route

SPEC_PAGE = Path(__file__).resolve().parent.parent / "docs" / "spec.md"


@pytest.mark.parametrize("module", [reference, torch_route], ids=["reference", "torch_route"])
@pytest.mark.parametrize("function", spec.SPEC, ids=lambda f: f.name)
def test_signatures_match_the_contract(module, function):
    params = inspect.signature(getattr(module, function.name)).parameters
    assert list(params) == [p.name for p in function.params]
    for p in function.params:
        default = params[p.name].default
        assert (default is inspect.Parameter.empty) == p.required, p.name
        if not p.required:
            assert default == p.default, p.name


def test_package_exports_the_contract():
    assert attention_core.__all__ == [
        "softmax",
        "causal_mask",
        "causal_average",
        "attention",
        "split_heads",
        "merge_heads",
        "multi_head_attention",
        "layer_norm",
    ]
    assert all(getattr(attention_core, name) is getattr(reference, name) for name in spec.NAMES)


def test_the_docs_spec_table_is_the_contract():
    text = SPEC_PAGE.read_text(encoding="utf-8")
    table = re.search(r"^\| function \| returns \|\n(?:\|.*\n)+", text, re.M).group(0).rstrip("\n")
    assert table == spec.readme_table()
