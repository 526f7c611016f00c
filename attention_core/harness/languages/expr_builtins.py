"""The operations an expression may use, and how large their results can be.

Constants, builtin functions, tensor methods and properties. Creation functions (``ones``,
``zeros``, ``full``, ``eye``, ``arange``, ``tensor``) build on the evaluation device, and
their floating results take the evaluation dtype unless ``dtype=`` is given.

Sizes: :func:`quick_bound` (and :data:`SIZE_BOUNDS` for operations whose arguments are
sizes) bounds what an operation can create from its operands' shapes alone, so that small
operations run at once; :func:`size_on_meta` runs one on torch's meta device, which knows
every shape rule, for the exact size. The meta device's first use imports a good part of
torch (seconds), which is why small operations skip it.
"""

from __future__ import annotations

import math
import operator
import os
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

Tensor = torch.Tensor
MAX_INT_EXPONENT = 64
MAX_INT_POWER_BITS = 4096


CONSTANTS: Mapping[str, object] = types.MappingProxyType(
    {
        "inf": math.inf,
        "nan": math.nan,
        "pi": math.pi,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
        "float32": torch.float32,
        "float64": torch.float64,
        "int32": torch.int32,
        "int64": torch.int64,
        "bool": torch.bool,
        "uint8": torch.uint8,
        "int8": torch.int8,
        "int16": torch.int16,
    }
)
# torch's other names of a dtype, read only where pasted code writes them after ``torch.`` (``torch.half``): alone
# they stay free for a case's own inputs (``half: 4``), and ``float`` is a function.
DTYPE_ALIASES: Mapping[str, str] = types.MappingProxyType(
    {"float": "float32", "int": "int32", "short": "int16", "half": "float16", "double": "float64", "long": "int64"}
)
# What pasted code writes before a function or constant of the language: ``torch.softmax``, ``F.softmax``,
# ``math.sqrt``, ``torch.inf``; read as the plain name.
MODULE_PREFIXES = frozenset({"torch", "F", "math", "torch.nn.functional", "nn.functional", "functional"})
MODULE_NAMES = frozenset(prefix.split(".")[0] for prefix in MODULE_PREFIXES)  # no input may be named so

TENSOR_PROPERTIES = frozenset({"T", "mT", "shape", "ndim", "dtype"})

# Fields of the named tuples that x.max(dim) and x.min(dim) return.
RESULT_FIELDS = {torch.return_types.max: ("values", "indices"), torch.return_types.min: ("values", "indices")}

TENSOR_METHODS = frozenset(
    """
    transpose permute reshape view unsqueeze squeeze flatten contiguous clone detach
    sum mean std var amax amin max min argmax argmin abs exp log sqrt cumsum
    repeat repeat_interleave expand tril triu masked_fill softmax t diagonal
    tanh sigmoid relu rsqrt square pow clamp norm
    float double half bfloat16 long int bool
    size numel dim item allclose isclose isfinite isnan eq ne lt le gt ge matmul to
    """.split()
)


def power(base, exponent):
    """``base ** exponent`` with a cap on exact integer powers (which can grow without bound)."""
    if isinstance(base, int) and isinstance(exponent, int):
        if exponent > MAX_INT_EXPONENT:
            raise Refused(f"integer power with exponent {exponent}; the limit is {MAX_INT_EXPONENT}")
        if abs(base).bit_length() * exponent > MAX_INT_POWER_BITS:
            raise Refused(f"integer power would exceed {MAX_INT_POWER_BITS} bits")
    return base**exponent


def check_to(args, kwargs) -> None:
    """``x.to`` only converts dtypes: no devices, no tensors as templates."""
    dtypes = [*args, *([kwargs["dtype"]] if "dtype" in kwargs else [])]
    if not dtypes or not all(isinstance(d, torch.dtype) for d in dtypes) or set(kwargs) - {"dtype", "copy"}:
        raise Refused("`to` only converts dtypes, e.g. `x.to(float64)`")


def _int_sizes(sizes) -> list[int]:
    """``f(2, 3)`` or ``f((2, 3))`` as a list of ints; non-integer sizes raise TypeError."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = sizes[0]
    try:
        return [operator.index(s) for s in sizes]
    except TypeError:
        kinds = ", ".join(type(s).__name__ for s in sizes)
        raise TypeError(f"sizes must be integers, got ({kinds})") from None


def _is_float(value) -> bool:
    return isinstance(value, float) or (isinstance(value, Tensor) and value.is_floating_point())


def _contains_float(data) -> bool:
    if isinstance(data, (list, tuple)):
        return any(_contains_float(item) for item in data)
    return _is_float(data)


def _floating(dtype, default_dtype):
    # The dtype for a floating result: explicit, else the evaluation dtype, else torch's default.
    return dtype or default_dtype or torch.get_default_dtype()


def ones(*size, dtype=None, device=None, default_dtype=None):
    """``torch.ones``; floating by default (the evaluation dtype)."""
    return torch.ones(_int_sizes(size), dtype=_floating(dtype, default_dtype), device=device)


def zeros(*size, dtype=None, device=None, default_dtype=None):
    """``torch.zeros``; floating by default (the evaluation dtype)."""
    return torch.zeros(_int_sizes(size), dtype=_floating(dtype, default_dtype), device=device)


def full(size, fill_value, dtype=None, device=None, default_dtype=None):
    """``torch.full``; an int fill gives int64 and a bool fill gives bool, as in torch."""
    sizes = _int_sizes(size if isinstance(size, (tuple, list)) else (size,))
    if dtype is None and _is_float(fill_value):
        dtype = _floating(None, default_dtype)
    return torch.full(sizes, fill_value, dtype=dtype, device=device)


def eye(n, m=None, dtype=None, device=None, default_dtype=None):
    """``torch.eye``: an ``n x m`` identity, floating by default."""
    rows = operator.index(n)
    cols = rows if m is None else operator.index(m)
    return torch.eye(rows, cols, dtype=_floating(dtype, default_dtype), device=device)


def arange(*args, dtype=None, device=None, default_dtype=None):
    """``torch.arange``: int64 when every bound is an int, else the evaluation dtype."""
    if dtype is None and any(_is_float(a) for a in args):
        dtype = _floating(None, default_dtype)
    return torch.arange(*args, dtype=dtype, device=device)


def tensor(data, dtype=None, device=None, default_dtype=None):
    """``torch.tensor``: ints stay int64, bools stay bool, floats take the evaluation dtype."""
    if dtype is None and _contains_float(data):
        dtype = _floating(None, default_dtype)
    if isinstance(data, Tensor):
        return data.detach().to(device=device, dtype=dtype, copy=True)
    result = torch.tensor(data, dtype=dtype, device=device)
    if dtype is None and result.is_floating_point():  # e.g. tensor([]): torch's default
        result = result.to(_floating(None, default_dtype))
    return result


def matmul(input, other):
    """``torch.matmul`` (the ``@`` operator)."""
    result = torch.matmul(input, other)
    if result.is_meta and input.dim() > 2 and other.dim() > 2:
        # Being sized: torch first copies batched operands out to the broadcast batch shape.
        batch = result.shape[:-2]
        return (result, *(x.expand(*batch, *x.shape[-2:]).contiguous() for x in (input, other)))
    return result


def exp(x):
    """``torch.exp`` for tensors, ``math.exp`` for numbers."""
    return torch.exp(x) if isinstance(x, Tensor) else math.exp(x)


def sin(x):
    """``torch.sin`` for tensors, ``math.sin`` for numbers (sinusoidal positional encodings)."""
    return torch.sin(x) if isinstance(x, Tensor) else math.sin(x)


def cos(x):
    """``torch.cos`` for tensors, ``math.cos`` for numbers."""
    return torch.cos(x) if isinstance(x, Tensor) else math.cos(x)


def log(x):
    """``torch.log`` for tensors, ``math.log`` for numbers."""
    return torch.log(x) if isinstance(x, Tensor) else math.log(x)


def sqrt(x):
    """``torch.sqrt`` for tensors, ``math.sqrt`` (a float) for numbers."""
    return torch.sqrt(x) if isinstance(x, Tensor) else math.sqrt(x)


def abs_(x):
    """``torch.abs`` for tensors, Python ``abs`` for numbers."""
    return torch.abs(x) if isinstance(x, Tensor) else abs(x)


def tanh(x):
    """``torch.tanh`` for tensors, ``math.tanh`` for numbers (additive attention's scores)."""
    return torch.tanh(x) if isinstance(x, Tensor) else math.tanh(x)


def sigmoid(x):
    """``torch.sigmoid`` for tensors, ``1 / (1 + e**-x)`` for numbers (a gate)."""
    return torch.sigmoid(x) if isinstance(x, Tensor) else 1 / (1 + math.exp(-x))


def relu(x):
    """``torch.relu`` for tensors, ``max(x, 0)`` for numbers."""
    return torch.relu(x) if isinstance(x, Tensor) else max(x, 0)


def gelu(x):
    """``F.gelu`` (the exact one, by the error function) for tensors and numbers."""
    return F.gelu(x) if isinstance(x, Tensor) else x * (1 + math.erf(x / math.sqrt(2))) / 2


def silu(x):
    """``F.silu`` (``x * sigmoid(x)``) for tensors and numbers (SwiGLU's gate)."""
    return F.silu(x) if isinstance(x, Tensor) else x / (1 + math.exp(-x))


def softmax(x, dim=-1):
    """``torch.nn.functional.softmax`` along ``dim`` (the last by default)."""
    return F.softmax(x, dim=dim)


def where(condition, x, y):
    """``torch.where(condition, x, y)``: ``x`` where ``condition`` is True, else ``y``."""
    return torch.where(condition, x, y)


def _as_tensor_pair(a, b):
    # Promote a Python number (or list) to a tensor like its partner, for torch.maximum/minimum.
    if not isinstance(a, Tensor):
        a = torch.as_tensor(a, dtype=b.dtype, device=b.device)
    if not isinstance(b, Tensor):
        b = torch.as_tensor(b, dtype=a.dtype, device=a.device)
    return a, b


def maximum(a, b):
    """Elementwise maximum; numbers are allowed on either side."""
    if not (isinstance(a, Tensor) or isinstance(b, Tensor)):
        return max(a, b)
    return torch.maximum(*_as_tensor_pair(a, b))


def minimum(a, b):
    """Elementwise minimum; numbers are allowed on either side."""
    if not (isinstance(a, Tensor) or isinstance(b, Tensor)):
        return min(a, b)
    return torch.minimum(*_as_tensor_pair(a, b))


def scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """torch's own ``F.scaled_dot_product_attention``: an independent route for expected values."""
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
    if output.is_meta:  # being sized: the (..., L, S) weights are made too
        weights = torch.matmul(q, k.transpose(-2, -1))
        return output, weights if attn_mask is None else weights + attn_mask
    return output


def torch_layer_norm(x, eps=1e-5):
    """torch's own ``F.layer_norm`` over the last dimension, without affine parameters."""
    return F.layer_norm(x, (x.shape[-1],), eps=eps)


BUILTINS: Mapping[str, Callable] = types.MappingProxyType(
    {
        "tril": torch.tril,
        "triu": torch.triu,
        "ones": ones,
        "zeros": zeros,
        "full": full,
        "eye": eye,
        "arange": arange,
        "tensor": tensor,
        "masked_fill": torch.masked_fill,
        "bmm": torch.bmm,
        "matmul": matmul,
        "exp": exp,
        "log": log,
        "sqrt": sqrt,
        "abs": abs_,
        "sin": sin,
        "cos": cos,
        "tanh": tanh,
        "sigmoid": sigmoid,
        "relu": relu,
        "gelu": gelu,
        "silu": silu,
        "softmax": softmax,
        "scaled_dot_product_attention": scaled_dot_product_attention,
        "torch_layer_norm": torch_layer_norm,
        "stack": torch.stack,
        "cat": torch.cat,
        "where": where,
        "maximum": maximum,
        "minimum": minimum,
        "float": float,
        "int": int,
    }
)

# Builtins that receive the evaluation device and dtype.
CREATION = frozenset({"ones", "zeros", "full", "eye", "arange", "tensor"})


# --------------------------------------------------------------------------- sizes


class Refused(Exception):
    """An operation refused before it runs: a limit, or a device move in ``to``."""


def case_seconds():
    """Seconds the evaluations sharing one budget may take (a case's inputs, a check's targets):
    ATTENTION_CORE_CASE_SECONDS, else 2 (read when a budget is made)."""
    return float(os.environ.get("ATTENTION_CORE_CASE_SECONDS", "2"))


MAX_MULTIPLY_ADDS = 2**31  # of one matrix product: about a second on one core


WALL_CEILING = 10  # times its seconds of CPU time: the wall-clock time an evaluation may take at most


@dataclass
class Budget:
    """Elements that the evaluations sharing it may create together (e.g. one case's), and the CPU time they may
    take (this process's: a loaded machine refuses no case), within WALL_CEILING times as much wall-clock time:
    an expression cheap to write and slow to run ends with a refusal."""

    limit: int
    spent: int = 0
    seconds: float = field(default_factory=case_seconds)
    deadline: float = field(default=0.0)  # of the wall clock (time.monotonic)
    cpu_deadline: float = field(default=0.0)  # of this process's CPU time (time.process_time)

    def __post_init__(self):
        self.deadline = self.deadline or time.monotonic() + WALL_CEILING * self.seconds
        self.cpu_deadline = self.cpu_deadline or time.process_time() + self.seconds

    def reserve(self, count: int) -> None:
        """Refuse ``count`` more elements if they would take the spending past the limit."""
        if self.spent + count > self.limit:
            raise Refused(
                f"would create {count} more elements, {self.spent + count} in all; the budget is {self.limit}"
            )

    def check_time(self) -> None:
        """Refuse the next operation once the time is up."""
        if time.process_time() >= self.cpu_deadline:
            raise Refused(
                f"ran out of its time budget of {self.seconds:g} s of CPU time (ATTENTION_CORE_CASE_SECONDS sets it)"
            )
        if time.monotonic() > self.deadline:
            raise Refused(
                f"ran out of its time budget: {WALL_CEILING * self.seconds:g} s of wall-clock time, "
                f"{WALL_CEILING:g} times its {self.seconds:g} s of CPU time (ATTENTION_CORE_CASE_SECONDS "
                f"sets it)"
            )


MATRIX_PRODUCTS = frozenset({"matmul", "__matmul__", "mm", "bmm"})


def multiply_adds(fn, args) -> int:
    """The multiply-adds of a matrix product ``fn(a, b)`` (0 for any other operation)."""
    name = getattr(fn, "__name__", "")
    if name not in MATRIX_PRODUCTS or len(args) < 2:
        return 0
    a, b = args[0], args[1]
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)) or a.dim() == 0 or b.dim() == 0:
        return 0
    rows = a.shape[-2] if a.dim() >= 2 else 1
    columns = b.shape[-1] if b.dim() >= 2 else 1
    return broadcast_bound([a.shape[:-2], b.shape[:-2]]) * rows * columns * a.shape[-1]


def _magnitude(value) -> int:
    """The product of the integers in a size (or nested sizes), each counted as at least 1."""
    if isinstance(value, (tuple, list)):
        return math.prod(map(_magnitude, value))
    try:
        return max(1, abs(operator.index(value)))
    except TypeError:  # not a size: torch refuses it, or reads it as 1
        return 1


def _eye_size(args, kwargs):
    n = args[0] if args else kwargs.get("n")
    return _magnitude(n) * _magnitude(args[1] if len(args) > 1 else kwargs.get("m", n))


def _arange_length(args):
    # ceil((end - start) / step), plus one for rounding; unknown (inf) where it cannot be read.
    try:
        start, end, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
        return math.ceil((float(end) - float(start)) / float(step)) + 1
    except (ArithmeticError, ValueError, TypeError, IndexError):
        return math.inf


def _data_count(data) -> int:
    # Elements torch.tensor(data) makes: it reads nested sequences along their first items.
    count = 1
    while isinstance(data, (tuple, list)) and data:
        count *= len(data)
        data = data[0]
    return count * data.numel() if isinstance(data, Tensor) else count


def broadcast_bound(shapes) -> int:
    """The product of the largest size in each right-aligned dimension (a zero counted as one).

    No broadcast of tensors of these shapes makes more elements, nor a matrix product of two
    of them (its result and its operands copied out to the broadcast batch shape).
    """
    if len(shapes) == 1:  # the usual case, kept quick
        return math.prod([max(1, size) for size in shapes[0]])
    dims = [1] * max(map(len, shapes), default=0)
    for shape in shapes:
        for i, size in enumerate(shape, len(dims) - len(shape)):
            dims[i] = max(dims[i], size)
    return math.prod(dims)


def _repeats(given) -> int:
    """The most copies ``repeat_interleave`` makes of an element: a number, or a tensor of them (their sum, counted
    in float64, which cannot wrap round as int64 does). A negative count, or a total past 2**40, is past any limit:
    torch itself would overflow on it, so it must never be asked."""
    (repeats,) = given
    if isinstance(repeats, Tensor):
        if not repeats.numel() or repeats.is_floating_point():
            return 1
        counts = repeats.to(torch.float64)
        total = float(counts.sum())
        return _PAST_ANY_LIMIT if bool((counts < 0).any()) or total > 2**40 else max(1, int(total))
    count = _magnitude(repeats)
    return count if count <= 2**40 else _PAST_ANY_LIMIT


_PAST_ANY_LIMIT = 2**62  # a bound no budget allows


def _receiver_size(args) -> int:
    return broadcast_bound([args[0].shape]) if args and isinstance(args[0], Tensor) else 1


def _attention_bound(args, kwargs) -> int:
    return _attention_shapes(*args, **kwargs)


def _attention_shapes(q, k, v, attn_mask=None, **options) -> int:
    # Its (..., L, S) weights are q @ k^T (with the mask); its (..., L, Ev) output is weights @ v.
    if not all(isinstance(t, Tensor) and t.dim() >= 2 for t in (q, k, v)):
        return 1  # torch refuses these
    mask_shape = attn_mask.shape if isinstance(attn_mask, Tensor) else ()
    return max(broadcast_bound([q.shape, k.mT.shape, mask_shape]), broadcast_bound([q.shape, k.shape, v.shape]))


def _size(value) -> int:
    """A bound on the elements of ``value`` as data: a sequence's length times its largest item."""
    if isinstance(value, Tensor):
        return value.numel() or broadcast_bound([value.shape])
    if isinstance(value, (tuple, list)):
        return max(1, len(value)) * max(map(_size, value), default=1)
    return 1


def _index_size(index) -> int:
    # Per element of what it indexes: the index's tensors broadcast together, at most their product.
    if isinstance(index, (tuple, list)):
        return max(1, len(index)) * math.prod(map(_index_size, index))
    return _size(index)


def quick_bound(args, kwargs) -> int:
    """A bound on the elements most operations create: their tensors broadcast, times their sequences."""
    values = (*args, *kwargs.values()) if kwargs else args
    shapes = [value.shape for value in values if isinstance(value, Tensor)]
    return broadcast_bound(shapes) * math.prod(_size(v) for v in values if isinstance(v, (tuple, list)))


def index_bound(args, kwargs) -> int:
    """A bound on the elements ``value[index]`` creates, for ``args`` = ``(value, index)``."""
    return _size(args[0]) * _index_size(args[1])


# Upper bounds (args, kwargs) -> elements, for the operations whose arguments are sizes (and attention).
SIZE_BOUNDS: Mapping[str, Callable] = types.MappingProxyType(
    {
        "ones": lambda args, kwargs: _magnitude((args, *kwargs.values())),
        "zeros": lambda args, kwargs: _magnitude((args, *kwargs.values())),
        "full": lambda args, kwargs: _magnitude(args[:1] or kwargs.get("size")),
        "eye": lambda args, kwargs: _eye_size(args, kwargs),
        "arange": lambda args, kwargs: _arange_length(args),
        "tensor": lambda args, kwargs: _data_count(args[0] if args else kwargs.get("data")),
        "repeat": lambda args, kwargs: _receiver_size(args) * _magnitude((args[1:], *kwargs.values())),
        "expand": lambda args, kwargs: _receiver_size(args) * _magnitude((args[1:], *kwargs.values())),
        "repeat_interleave": lambda args, kwargs: _receiver_size(args) * _repeats(args[1:2] or [kwargs.get("repeats")]),
        "scaled_dot_product_attention": _attention_bound,
    }
)


_META = torch.device("meta")
_MASKS = (torch.bool, torch.uint8)


class ValuesNeeded(Refused):
    """The meta device cannot size an operation: its result's size depends on values."""


def _tensors(value):
    # The tensors of a result: itself, or those of a tuple (x.max(dim) gives two).
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for part in value for t in _tensors(part)]
    return []


def created_elements(result, operands) -> int:
    """Elements of the new tensors in ``result``: not views, not operands handed back."""
    if isinstance(result, Tensor):  # the usual case, kept quick
        return 0 if result._is_view() or any(result is a for a in operands) else result.numel()
    return sum(t.numel() for t in _tensors(result) if not t._is_view() and not any(t is a for a in operands))


def _meta(value, numbers: bool):
    # ``value`` with its tensors on the meta device; with ``numbers``, 0-dim integer ones read as numbers.
    if isinstance(value, Tensor):
        if numbers and value.dim() == 0 and not value.is_floating_point():
            return value.item()  # a size, dimension or index, which torch reads the value of
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=_META)
    if isinstance(value, torch.device):
        return _META  # the device a creation function builds on
    if isinstance(value, list):
        return [_meta(v, numbers) for v in value]
    if isinstance(value, tuple):
        return tuple(_meta(v, numbers) for v in value)
    return value


def _masks_as_indices(index):
    # A k-dim boolean mask selects like the k index tensors of its True positions (torch's rule),
    # which the meta device can size: it cannot count True itself. Counted, not listed: a dense mask's
    # positions would be allocated before anything is refused.
    items = index if isinstance(index, tuple) else (index,)
    if not any(isinstance(i, Tensor) and i.dtype in _MASKS and i.dim() for i in items):
        return index
    result = []
    for item in items:
        is_mask = isinstance(item, Tensor) and item.dtype in _MASKS and item.dim()
        if is_mask:
            count = int(item.count_nonzero())
            result.extend(torch.empty(count, dtype=torch.long, device="meta") for _ in range(item.dim()))
        else:
            result.append(item)
    return tuple(result)


def size_on_meta(fn, args, kwargs) -> tuple[int, int]:
    """``fn(*args, **kwargs)`` run on the meta device (shapes without storage), nothing allocated.

    Returns:
        The elements of its largest result (a view too) and of its new tensors together.

    Raises:
        ValuesNeeded: if the size depends on values (``.item()``, ``allclose``, a list of bools).
        Exception: torch's own, for operands it refuses.
    """
    if fn is operator.getitem:
        args = (args[0], _masks_as_indices(args[1]))
    try:
        try:
            meta_args = [_meta(a, False) for a in args]
            result = fn(*meta_args, **{name: _meta(value, False) for name, value in kwargs.items()})
        except Exception:  # a 0-dim integer tensor may be a size: try again with its value
            meta_args = [_meta(a, True) for a in args]
            result = fn(*meta_args, **{name: _meta(value, True) for name, value in kwargs.items()})
    except Exception as exc:
        if isinstance(exc, NotImplementedError) or "meta" in str(exc):
            raise ValuesNeeded("its size depends on values, which the meta device does not have") from exc
        raise
    largest = max((t.numel() for t in _tensors(result)), default=0)
    return largest, created_elements(result, meta_args)
