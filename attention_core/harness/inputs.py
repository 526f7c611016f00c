"""A case's inputs made real: literals, printed tensors, seeded draws, token ids and expressions.

Inputs are made in the order the case writes them. Draws come from one CPU generator
seeded with the case's seed, in the case's dtype (CUDA's stream differs, and ``randn`` in
float64 gives other numbers); every floating input is then cast to the compute dtype and
moved to the device.
"""

import torch

from attention_core.harness import draws


def materialise(case, *, device="cpu", dtype=None, perturb=None):
    """The case's inputs by name, on ``device``, floating ones in ``dtype`` (default: the case's).

    ``perturb`` (a CPU generator) moves every printed input to a random corner of its
    ±half-printed-unit box: the rounding the print did, undone one way or another.
    """
    dtype = dtype or case.dtype
    generator = torch.Generator().manual_seed(case.seed) if case.seed is not None else None
    scope = {}
    for item in case.inputs:
        if item.kind == "expr":
            value = item.value.evaluate(scope, device=device, dtype=dtype)
        elif item.kind == "draw":
            kind, spec = item.value
            value = draws.draw(kind, spec, generator, item.dtype or case.dtype)
        elif item.kind == "printed":
            value = _printed(item.value, perturb)
        elif item.kind == "token_ids":
            value = token_ids(**item.value)
        elif isinstance(item.value, torch.Tensor) and item.value.dtype != torch.bool:
            # Literal numbers are the case's dtype unless the input names one (ids: int64).
            value = item.value.to(item.dtype or dtype)
        else:
            value = item.value
        scope[item.name] = _place(value, device, dtype, keep=item.dtype is not None)
    return scope


def token_ids(text, lower=False, remove=""):
    """Number the words of ``text`` by their place in its sorted word list.

    As the documents do it: ``{s: i for i, s in enumerate(sorted(words))}``, so a repeated
    word takes its last place.
    """
    if lower:
        text = text.lower()
    words = text.translate({ord(c): None for c in remove}).split()
    vocab = {word: i for i, word in enumerate(sorted(words))}
    return torch.tensor([vocab[word] for word in words], dtype=torch.int64)


def has_rounded_inputs(case):
    """Whether any input is a printed tensor with digits after the point (rounded when printed)."""
    return any(i.kind == "printed" and bool((i.value.unit > 0).any()) for i in case.inputs)


def _printed(printed, perturb):
    value = printed.dense()
    if perturb is not None:
        signs = torch.randint(0, 2, value.shape, generator=perturb, dtype=torch.float64) * 2 - 1
        value = value + signs * printed.unit.reshape(value.shape) * 0.5
    if printed.kind == "bool":
        return value.to(torch.bool)
    if printed.kind == "int":
        return value.to(torch.int64)
    return value if printed.dtype is None else value.to(getattr(torch, printed.dtype))


def _place(value, device, dtype, *, keep=False):
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and not keep:
            value = value.to(dtype)
        return value.to(device)
    if hasattr(value, "weight"):  # a Linear draw
        return type(value)(**{k: _place(v, device, dtype, keep=keep) for k, v in vars(value).items()})
    return value
