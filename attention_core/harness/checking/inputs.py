"""A case's inputs made real: literals, printed tensors, seeded draws, token ids and expressions.

Inputs are made in the order the case writes them. Draws come from one CPU generator
seeded with the case's seed, in the case's dtype (CUDA's stream differs, and ``randn`` in
float64 gives other numbers); every floating input is then cast to the compute dtype and
moved to the device.
"""

import torch

from attention_core.harness.languages import draws
from attention_core.harness.languages.expr import Budget
from attention_core.harness.reading.fields import MAX_CASE_ELEMENTS
from attention_core.harness.reading.model import (
    DrawInput,
    ExprInput,
    LiteralInput,
    NumberInput,
    PrintedInput,
    TokenIdsInput,
)


class InputError(ValueError):
    """An input that could not be made, named with its line (``line``)."""

    def __init__(self, message, line=0):
        super().__init__(message)
        self.line = line


class Scope(dict):
    """A case's inputs by name, and ``rng_state``: the seeded stream's state after them (None without a
    seed), from which a class call makes the reference's instance."""

    __slots__ = ("rng_state",)


class BudgetError(ValueError):
    """A case's inputs together take more elements than :data:`MAX_CASE_ELEMENTS`."""


def materialise(case, *, device="cpu", dtype=None, perturb=None):
    """The case's inputs by name, on ``device``, floating ones in ``dtype`` (default: the case's).

    ``perturb`` (a CPU generator) moves every printed input to a random corner of its
    ±half-printed-unit box: the rounding the print did, undone one way or another. Raises
    :class:`BudgetError` naming the input that takes the case past its element budget.
    """
    dtype = dtype or case.dtype
    generator = torch.Generator().manual_seed(case.seed) if case.seed is not None else None
    scope, total = Scope(), 0
    budget = Budget(MAX_CASE_ELEMENTS)  # what the case's expressions create along the way, all together
    for name, item in case.inputs.items():
        if isinstance(item, DrawInput) and item.seed is not None:  # torch.manual_seed(seed) just before it
            generator = (generator or torch.Generator()).manual_seed(item.seed)
        try:
            value = _make(item, scope, generator, case.dtype, device, dtype, perturb, budget)
        except Exception as err:
            raise InputError(f"input {name!r} (line {item.line}): {err}", item.line) from err
        total += _elements(value)
        if total > MAX_CASE_ELEMENTS:
            raise BudgetError(
                f"input {name!r} (line {item.line}) takes the case's inputs to {total} elements; "
                f"the budget is {MAX_CASE_ELEMENTS} for all of a case's inputs together"
            )
        scope[name] = _place(value, device, dtype, keep=getattr(item, "dtype", None) is not None)
    scope.rng_state = generator.get_state() if generator is not None else None
    return scope


def _make(item, scope, generator, case_dtype, device, dtype, perturb, budget):
    if isinstance(item, ExprInput):
        return item.expr.evaluate(scope, device=device, dtype=dtype, budget=budget)
    if isinstance(item, DrawInput):
        return draws.draw(item.draw, item.spec, generator, item.dtype or case_dtype)
    if isinstance(item, PrintedInput):
        return _printed(item.printed, perturb)
    if isinstance(item, TokenIdsInput):
        return token_ids(item.token_ids.text, item.token_ids.lower, item.token_ids.remove)
    if isinstance(item, LiteralInput):
        # Literal numbers are the case's dtype unless the input names one (ids: int64); booleans stay.
        return item.tensor if item.tensor.dtype == torch.bool else item.tensor.to(item.dtype or dtype)
    if isinstance(item, NumberInput):
        return item.number
    raise TypeError(f"not an input: {type(item).__name__}")


def _elements(value):
    if isinstance(value, torch.Tensor):
        return value.numel()
    if hasattr(value, "weight"):  # a Linear draw
        return sum(_elements(v) for v in vars(value).values())
    if isinstance(value, (tuple, list)):
        return sum(_elements(v) for v in value)
    return 1


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
    return any(isinstance(i, PrintedInput) and bool((i.printed.unit > 0).any()) for i in case.inputs.values())


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
