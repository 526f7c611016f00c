"""Calls that no implementation should be asked to make: a case file's own mistakes, told from the
reference core (shapes that cannot go through it) or from the arguments' shapes (a result too large
to check), before the call is charged to anyone.
"""

import inspect
import math
import warnings

import torch

from attention_core import reference, spec
from attention_core.harness.checking import unwritten
from attention_core.harness.languages.expr import MAX_ELEMENTS
from attention_core.harness.text import shorten

REFERENCE = {name: getattr(reference, name) for name in spec.NAMES}


def reference_refuses(source, arguments, functions=None):
    """Why the reference raises on the call ``source`` with ``arguments`` (name, args, kwargs): shapes that
    cannot go through it, a mistake of the case, which no implementation should be charged with. None
    where it runs. ``functions``: the reference's (default: the reference core's)."""
    name, args, kwargs = arguments
    function = (REFERENCE if functions is None else functions).get(name)
    if function is None:
        return None
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            function(*[copied(a) for a in args], **{k: copied(v) for k, v in kwargs.items()})
    except Exception as err:  # noqa: BLE001
        return (
            f"`{source}`: the reference core cannot run `{name}` on these arguments either "
            f"({type(err).__name__}: {shorten(str(err), 200)}): a mistake of the case"
        )
    return None


def meta_results(name, args, kwargs):
    """The reference core's results of a call on the ``meta`` device: shapes and dtypes, no storage
    (a function that makes a tensor from sizes alone, such as ``causal_mask``, makes it there too)."""
    function = REFERENCE[name]
    signature = inspect.signature(function)
    bound = signature.bind(*[_meta(a) for a in args], **{k: _meta(v) for k, v in kwargs.items()})
    if "device" in signature.parameters:
        bound.arguments["device"] = "meta"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*bound.args, **bound.kwargs)


def too_large(source, arguments):
    """Why the call ``source`` with ``arguments`` (name, args, kwargs) would return a result of more than
    :data:`MAX_ELEMENTS` elements (its shapes found on the ``meta`` device): a mistake of the case, told
    before anything is allocated. None where every result fits, or where it cannot be told."""
    name, args, kwargs = arguments
    if name not in REFERENCE:
        return None
    bound = result_bound(name, args, kwargs)
    if bound is not None and bound <= MAX_ELEMENTS:
        return None
    try:
        results = meta_results(name, args, kwargs)
    except Exception:  # noqa: BLE001 (shapes that cannot go through: the run itself reports them)
        return None
    return results_too_large(source, results)


def results_too_large(source, results):
    """Why ``results`` (of the call ``source``, on any device, ``meta`` included) hold a result of more
    than :data:`MAX_ELEMENTS` elements; None where every one fits."""
    for result in results if isinstance(results, (tuple, list)) else (results,):
        if isinstance(result, torch.Tensor) and result.numel() > MAX_ELEMENTS:
            return (
                f"`{source}` would return a result of {result.numel()} elements (shape {list(result.shape)}); "
                f"a check's result may hold at most {MAX_ELEMENTS}: a mistake of the case (smaller inputs)"
            )
    return None


def result_bound(name, args, kwargs):
    """At least as many elements as the largest result of the spec function ``name`` holds on these
    arguments, from their shapes alone (the meta device, which tells them exactly, costs a second
    of imports the first time it is used); None where the arguments do not tell it."""
    try:
        bound = inspect.signature(REFERENCE[name]).bind(*args, **kwargs)
        a = bound.arguments
        sizes = [t.numel() for t in a.values() if isinstance(t, torch.Tensor)]
        if name == "causal_mask":
            return int(a["T"]) ** 2
        if name == "attention":
            q, k, v, mask = a["q"], a["k"], a["v"], a.get("mask")
            extra = [mask.shape[:-2]] if isinstance(mask, torch.Tensor) and mask.ndim >= 2 else []
            lead = _broadcast_elements(q.shape[:-2], k.shape[:-2], v.shape[:-2], *extra)
            return max(lead * q.shape[-2] * max(k.shape[-2], v.shape[-1]), *sizes)
        if name == "multi_head_attention":
            x, heads = a["x"], int(a["n_heads"])
            lead = math.prod(x.shape[:-2])
            return max(lead * heads * x.shape[-2] ** 2, lead * x.shape[-2] * a["w_v"].shape[-1], *sizes)
        return max(sizes, default=0)  # the others: a result as large as the input
    except Exception:  # noqa: BLE001 (malformed: the meta device tells)
        return None


def _broadcast_elements(*shapes):
    """The elements of the shapes broadcast together (the largest size of each axis, counted from
    the right; torch.broadcast_shapes imports symbolic shapes on first use)."""
    longest = max((len(s) for s in shapes), default=0)
    return math.prod(
        max((s[len(s) - longest + i] for s in shapes if len(s) - longest + i >= 0), default=1) for i in range(longest)
    )


def _meta(value):
    return torch.empty_like(value, device="meta") if isinstance(value, torch.Tensor) else value


def copied(value):
    """A tensor argument's own copy (a call may write into it); any other value itself. A large prepared one's
    costs nothing until written (see ``unwritten``)."""
    return unwritten.copy(value)
