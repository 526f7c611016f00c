"""Seeded draws: the documents' random tensors, taken in order from one CPU generator.

Each draw reproduces what the named torch call gives after ``torch.manual_seed(seed)``:
``torch.Generator().manual_seed(s)`` yields the same stream. Draws are taken on the CPU in
the document's dtype (CUDA's stream differs, and ``randn`` in float64 gives other numbers),
then cast and moved by the caller.
"""

import math
from types import SimpleNamespace

import torch

from attention_core.harness.text import shorten as _short

KINDS = ("randn", "rand", "randint", "embedding", "linear", "dropout")
FLOATING = ("randn", "rand", "embedding", "linear", "dropout")  # drawn in a floating dtype
MAX_ELEMENTS = 2**26


def draw(kind, spec, generator, dtype):
    """Take one draw of ``kind`` from ``generator``.

    Args:
        kind: one of :data:`KINDS`.
        spec: the case file's arguments, already validated by :func:`check_spec`.
        generator: a CPU ``torch.Generator``; the draw advances it.
        dtype: the floating dtype the document drew in.

    Returns:
        A tensor, or for ``linear`` a record with ``weight`` ``(out, in)`` and ``bias`` ``(out,)``;
        for ``dropout`` the keep mask (1 kept, 0 dropped) that ``nn.Dropout(p)`` draws for an input
        of that shape.
    """
    if kind == "randn":
        return torch.randn(spec["size"], generator=generator, dtype=dtype)
    if kind == "rand":
        return torch.rand(spec["size"], generator=generator, dtype=dtype)
    if kind == "randint":
        return torch.randint(spec["low"], spec["high"], tuple(spec["size"]), generator=generator)
    if kind == "dropout":
        # nn.Dropout(p) on the CPU: empty_like(input).bernoulli_(1 - p), then input * mask / (1 - p).
        return torch.empty(spec["size"], dtype=dtype).bernoulli_(1 - spec["p"], generator=generator)
    if kind == "embedding":
        # nn.Embedding initialises its weight with normal_(0, 1): the randn stream.
        return torch.randn(spec["num_embeddings"], spec["embedding_dim"], generator=generator, dtype=dtype)
    return _linear(spec["in_features"], spec["out_features"], spec["bias"], generator, dtype)


def _linear(fan_in, fan_out, bias, generator, dtype):
    # nn.Linear: kaiming_uniform_(a=sqrt(5)) is uniform(±1/sqrt(fan_in)); the bias follows, same bound.
    bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
    weight = torch.empty(fan_out, fan_in, dtype=dtype).uniform_(-bound, bound, generator=generator)
    b = torch.empty(fan_out, dtype=dtype).uniform_(-bound, bound, generator=generator) if bias else None
    return SimpleNamespace(weight=weight, bias=b)


def check_spec(kind, args, *, limit=MAX_ELEMENTS):
    """Normalise a case file's draw arguments; raise ValueError saying what is wrong.

    Accepted forms (a list gives the positional arguments of the torch call):
    ``randn: [4, 8, 2]``; ``rand: [64, 32]``; ``randint: [0, 10, [3, 2]]`` or
    ``{low: 0, high: 10, size: [3, 2]}``; ``embedding: [22, 64]``;
    ``linear: [2, 3]`` or ``{in_features: 2, out_features: 3, bias: false}``. A draw of more than
    ``limit`` elements, or with a size of 2**31 or more (which torch cannot index), is refused.
    """
    if kind in ("randn", "rand"):
        size = args.get("size") if isinstance(args, dict) else args
        return {"size": _size(size, kind, limit)}
    if kind == "dropout":
        return _dropout(args, limit)
    names = {
        "randint": ("low", "high", "size"),
        "embedding": ("num_embeddings", "embedding_dim"),
        "linear": ("in_features", "out_features", "bias"),
    }[kind]
    if isinstance(args, list):
        if kind == "linear" and len(args) == 2:
            args = [*args, True]
        if len(args) != len(names):
            raise ValueError(f"{kind} takes [{', '.join(names)}], got {len(args)} values")
        args = dict(zip(names, args))
    if not isinstance(args, dict):
        raise ValueError(f"{kind} takes a list [{', '.join(names)}] or a mapping of those names")
    args = {"bias": True, **args} if kind == "linear" else dict(args)
    unknown = set(args) - set(names)
    missing = set(names) - set(args)
    if unknown or missing:
        raise ValueError(
            f"{kind} takes {', '.join(names)}"
            + (f"; unknown: {_short(', '.join(sorted(map(str, unknown))))}" if unknown else "")
            + (f"; missing: {', '.join(sorted(missing))}" if missing else "")
        )
    for name in names:
        value = args[name]
        if name == "size":
            args[name] = _size(value, kind, limit)
        elif name == "bias":
            if not isinstance(value, bool):
                raise ValueError(f"{kind}: bias must be true or false")
        elif not _is_int(value) or (value < 0 and kind != "randint") or (kind != "randint" and value >= 2**31):
            raise ValueError(f"{kind}: {name} must be a whole number below 2**31, got {_short(value)}")
    if kind == "randint" and args["low"] >= args["high"]:
        raise ValueError(f"randint: low ({args['low']}) must be below high ({args['high']})")
    if kind == "randint" and not -(2**63) <= args["low"] < args["high"] <= 2**63 - 1:
        raise ValueError("randint: low and high must fit in int64")
    sizes = {"embedding": ("num_embeddings", "embedding_dim"), "linear": ("in_features", "out_features")}
    if kind in sizes and math.prod(args[n] for n in sizes[kind]) > limit:
        raise ValueError(f"{kind}: more than {_count(limit)} elements")
    return args


def _dropout(args, limit):
    """``{p: 0.5, shape: [6, 6]}``: the probability of dropping an element, and the input's shape."""
    if not isinstance(args, dict) or set(args) != {"p", "shape"}:
        got = ", ".join(sorted(map(str, args))) if isinstance(args, dict) else _short(args)
        raise ValueError(f"dropout takes a mapping {{p: 0.5, shape: [6, 6]}} (p and shape), got {got}")
    p = args["p"]
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p < 1:
        raise ValueError(
            f"dropout: p must be a number from 0 to below 1 (the chance an element is dropped), got {_short(p)}"
        )
    return {"p": float(p), "size": _size(args["shape"], "dropout", limit)}


def _size(size, kind, limit):
    if not isinstance(size, list) or not all(_is_int(n) and 0 <= n < 2**31 for n in size):
        raise ValueError(f"{kind}: size must be a list of whole numbers from 0 to 2**31 - 1, got {_short(size)}")
    if math.prod(size) > limit:  # a zero size does not excuse the others: each is checked above
        raise ValueError(f"{kind}: size {_short(size)} has more than {_count(limit)} elements")
    return tuple(size)


def _count(limit):
    return f"2**{limit.bit_length() - 1}" if limit & (limit - 1) == 0 else str(limit)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)
