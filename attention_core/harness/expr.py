"""A small, safe expression language for deriving tensors in case files.

Case files are data written by people, so their expressions are never handed to
Python's ``eval``. :func:`parse` reads the text with ``ast.parse(mode="eval")`` and
checks every node against an allow-list, once; :meth:`Expr.evaluate` then walks the
validated tree with a dispatch table keyed by node type. Examples::

    input @ w_query
    tril(ones(8, 8)) / tril(ones(8, 8)).sum(1, keepdim=True)
    (matmul_qk * 3 ** -0.5).masked_fill(tril(ones(8, 8)) == 0, -inf)
    MW_Q.permute(2, 0, 1).reshape(64, 128)
    attention(q, k, v, scale=1)        # a function the caller supplies

Names resolve from the caller's scope, then :data:`CONSTANTS`. Calls resolve from
the caller's ``functions``, then :data:`BUILTINS`. Creation functions (``ones``,
``zeros``, ``full``, ``eye``, ``arange``, ``tensor``) build on the evaluation device,
and their floating results take the evaluation dtype unless ``dtype=`` is given.

Resource limits are enforced before anything is allocated: no operation may create more
than :data:`MAX_ELEMENTS` elements (creation, broadcasting, matrix products, ``repeat``,
``expand``, ``cat``/``stack``, advanced indexing), one evaluation may create at most
:data:`MAX_TOTAL_ELEMENTS` in all (views and the scope's own tensors cost nothing), and a
tuple or list built with ``+`` may hold at most :data:`MAX_SEQUENCE` items.

Columns in errors are 1-based character positions in the source text as given.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import threading
import types
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

__all__ = ["ExprError", "Expr", "parse", "BUILTINS", "CONSTANTS"]

MAX_SOURCE_CHARS = 2000
MAX_DEPTH = 50
MAX_ELEMENTS = 2**26  # elements one operation may create
MAX_TOTAL_ELEMENTS = 2**28  # elements one evaluation may create, all operations together
MAX_SEQUENCE = 2**16  # items in a tuple or list built with `+`
MAX_INT_EXPONENT = 64
MAX_INT_POWER_BITS = 4096

Tensor = torch.Tensor


# --------------------------------------------------------------------------- errors


class ExprError(ValueError):
    """A refused or failed expression: ``message``, 1-based ``column`` (or None), ``source``."""

    def __init__(self, message: str, column: int | None = None, source: str | None = None):
        self.message = message
        self.column = column
        self.source = source
        super().__init__(message, column, source)

    def __str__(self) -> str:
        if self.column is None:
            return self.message
        return f"{self.message} (at column {self.column})"

    def __reduce__(self):
        # Keep message, column and source through pickling (e.g. pytest-xdist workers).
        return (type(self), (self.message, self.column, self.source))


class _Refusal(ExprError):
    """An operation refused before it ran: a resource limit, or a device move in ``to``."""


class _Meter(threading.local):
    """This thread's evaluation (its ``spent`` counts the elements created), for the guards.

    None outside :meth:`Expr.evaluate`. Views and the scope's own tensors cost nothing.
    """

    evaluation: _Context | None = None


_METER = _Meter()


def _check_count(count: int) -> None:
    # The one place the per-operation element limit is enforced (then the evaluation's budget).
    if count > MAX_ELEMENTS:
        raise _Refusal(f"would create {count} elements; the limit is {MAX_ELEMENTS}")
    _reserve(count)


def _reserve(count: int) -> None:
    # Refuse an operation that would take this evaluation past its budget of elements.
    evaluation = _METER.evaluation
    if evaluation is not None and evaluation.spent + count > MAX_TOTAL_ELEMENTS:
        raise _Refusal(
            f"would create {count} more elements, {evaluation.spent + count} in this evaluation; "
            f"the budget is {MAX_TOTAL_ELEMENTS}"
        )


def _fits(bound: int) -> bool:
    # True if an operation creating at most ``bound`` (> 0) elements is within the limit and the
    # budget: the guards' fast path, which then need not size the result exactly.
    if 0 < bound <= MAX_ELEMENTS:
        evaluation = _METER.evaluation
        return evaluation is None or evaluation.spent + bound <= MAX_TOTAL_ELEMENTS
    return False


def _account(ctx: _Context, result, operand=None) -> None:
    # Charge a result to the evaluation's budget: not a view, and not an operand handed back.
    if isinstance(result, Tensor):
        if result is not operand and not result._is_view():
            ctx.spent += result.numel()
    elif type(result) in _RESULT_TYPES:  # x.max(dim): values and indices
        for part in result:
            _account(ctx, part)


# --------------------------------------------------------------------------- constants

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
    }
)


# --------------------------------------------------------------------------- resource guards


def _int_sizes(sizes) -> list[int]:
    """``f(2, 3)`` or ``f((2, 3))`` as a list of ints; non-integer sizes raise TypeError."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = sizes[0]
    try:
        return [operator.index(s) for s in sizes]
    except TypeError:
        kinds = ", ".join(type(s).__name__ for s in sizes)
        raise TypeError(f"sizes must be integers, got ({kinds})") from None


def _broadcast_shapes(*shapes):
    """``torch.broadcast_shapes`` in plain Python (torch's own imports half a second on first use)."""
    ndim = max((len(shape) for shape in shapes), default=0)
    result = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape, ndim - len(shape)):
            if size != 1 and result[i] not in (1, size):
                raise RuntimeError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast")
            if size != 1:
                result[i] = size
    return tuple(result)


def _check_broadcast(a, b, c=None) -> None:
    """Refuse an elementwise operation whose broadcast result would be too large.

    Operands that are not tensors count as scalars; with no tensor at all, nothing is created.
    """
    # A broadcast result never has more elements than the product of the operands'.
    if c is None:  # the usual case, kept quick
        if isinstance(a, Tensor):
            bound = a.numel() * b.numel() if isinstance(b, Tensor) else a.numel()
        elif isinstance(b, Tensor):
            bound = b.numel()
        else:
            return
        if 0 < bound <= MAX_ELEMENTS:  # _fits(bound), inline: this runs for every operator
            evaluation = _METER.evaluation
            if evaluation is None or evaluation.spent + bound <= MAX_TOTAL_ELEMENTS:
                return
    tensors = [x for x in (a, b, c) if isinstance(x, Tensor)]
    if not tensors or _fits(math.prod(x.numel() for x in tensors)):
        return
    _check_count(math.prod(_broadcast_shapes(*(x.shape for x in tensors))))


def _check_matmul(a, b) -> None:
    """Refuse a matrix product whose result would be too large."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        return
    bound = a.numel() * b.numel()  # a product never has more elements than this (k >= 1)
    if _fits(bound) or a.dim() == 0 or b.dim() == 0:  # torch refuses 0-dim operands
        return
    batch = _broadcast_shapes(a.shape[:-2], b.shape[:-2])
    rows = a.shape[-2] if a.dim() > 1 else 1
    cols = b.shape[-1] if b.dim() > 1 else 1
    _check_count(math.prod(batch) * rows * cols)


def _check_attention(q, k, v, mask) -> None:
    """Refuse an attention whose weights ``(..., L, S)`` or output ``(..., L, Ev)`` would be too large."""
    if not all(isinstance(t, Tensor) and t.dim() >= 2 for t in (q, k, v)):
        return  # torch refuses these itself
    mask_shape = mask.shape if isinstance(mask, Tensor) else ()
    bound = q.numel() * k.numel() * v.numel() * math.prod(mask_shape)
    if _fits(bound):
        return
    batch = _broadcast_shapes(q.shape[:-2], k.shape[:-2])
    _check_count(math.prod(_broadcast_shapes((*batch, q.shape[-2], k.shape[-2]), mask_shape)))
    batch = _broadcast_shapes(batch, v.shape[:-2])
    _check_count(math.prod(batch) * q.shape[-2] * v.shape[-1])


def _check_total(tensors) -> None:
    """Refuse a ``cat`` or ``stack`` whose result (the inputs' elements together) would be too large."""
    if isinstance(tensors, (tuple, list)):
        _check_count(sum(t.numel() for t in tensors if isinstance(t, Tensor)))


def _check_sequences(left, right) -> None:
    """Refuse a tuple or list ``+`` whose result would be too long."""
    if isinstance(left, (tuple, list)) and isinstance(right, (tuple, list)):
        length = len(left) + len(right)
        if length > MAX_SEQUENCE:
            raise _Refusal(f"would create a sequence of {length} items; the limit is {MAX_SEQUENCE}")


# Index items that make x[...] copy rather than view: tensors, sequences and bools. (A 0-dim
# integer tensor selects, like an int; sizing it as an advanced index gives the same count.)
_ADVANCED = (Tensor, list, tuple, bool)


def _index_bound(item) -> int:
    # At least as many elements as the index item contributes, however torch reads a sequence.
    if isinstance(item, Tensor):
        return item.numel()
    if isinstance(item, (tuple, list)):
        return max(len(item), 1) * math.prod(_index_bound(part) for part in item)
    return 1


def _check_index(x: Tensor, index) -> None:
    """Refuse advanced indexing (tensor, sequence or bool indices) whose result would be too large."""
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        if isinstance(item, _ADVANCED):
            break
    else:
        return  # basic indexing: a view
    bound = x.numel() * math.prod(_index_bound(item) for item in items)
    if _fits(bound):
        return
    try:
        count = _index_count(x, index)
    except Exception:  # an index torch would refuse too; its loose bound is still an upper bound
        count = bound
    _check_count(count)


def _index_count(x: Tensor, index) -> int:
    """The number of elements ``x[index]`` creates, from shapes (and the count of True in masks)."""
    if isinstance(index, tuple):
        return _items_count(x, index)
    if not isinstance(index, list):
        return _items_count(x, (index,))
    # torch reads a short list holding tensors, sequences, slices, None or ... as a tuple of
    # indices (deprecated, and due to change) and any other list as one tensor: size both.
    readings = [(index,)]
    if len(index) < 32 and any(
        isinstance(i, (Tensor, list, tuple, slice)) or i is None or i is Ellipsis for i in index
    ):
        readings.append(tuple(index))
    counts = []
    for items in readings:
        try:
            counts.append(_items_count(x, items))
        except Exception as exc:
            error = exc
    if not counts:
        raise error
    return max(counts)


def _items_count(x: Tensor, items: tuple) -> int:
    # Elements of x[items]: the sizes of the dimensions kept (sliced) times the broadcast shape of
    # the advanced indices (a k-dim mask consumes k dimensions and gives one of its count of True).
    plan = []  # (dimensions consumed, slice or None)
    advanced = []
    ellipsis = 0
    for item in items:
        if isinstance(item, (tuple, list)):
            item = torch.tensor(item)  # as torch does with a sequence inside an index
        if item is Ellipsis:
            ellipsis += 1
            plan.append((None, None))
        elif item is None:
            pass
        elif isinstance(item, bool):
            advanced.append((1,) if item else (0,))
        elif isinstance(item, slice):
            plan.append((1, item))
        elif isinstance(item, Tensor):
            if item.dtype in (torch.bool, torch.uint8):
                if item.dim() == 0:
                    advanced.append((1,) if item.item() else (0,))
                else:
                    plan.append((item.dim(), None))
                    advanced.append((int(item.count_nonzero()),))
            elif item.is_floating_point() or item.is_complex():
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
            else:
                plan.append((1, None))
                advanced.append(tuple(item.shape))
        else:
            operator.index(item)  # an int: selects one position of a dimension
            plan.append((1, None))
    if ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    shape = x.shape
    consumed = sum(dims for dims, _ in plan if dims is not None)
    if consumed > len(shape):
        raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
    count = 1
    position = 0
    for dims, part in plan:
        if dims is None:  # the ellipsis keeps the dimensions nothing else consumes
            dims = len(shape) - consumed
            count *= math.prod(shape[position : position + dims])
        elif part is not None:
            count *= len(range(*part.indices(shape[position])))
        position += dims
    count *= math.prod(shape[position:])
    return count * math.prod(_broadcast_shapes(*advanced))


def _power(base, exponent):
    """``base ** exponent`` with a cap on exact integer powers (which can grow without bound)."""
    if isinstance(base, int) and isinstance(exponent, int):
        if exponent > MAX_INT_EXPONENT:
            raise _Refusal(
                f"integer power with exponent {exponent}; the limit is {MAX_INT_EXPONENT}"
            )
        if abs(base).bit_length() * exponent > MAX_INT_POWER_BITS:
            raise _Refusal(f"integer power would exceed {MAX_INT_POWER_BITS} bits")
    return base**exponent


# --------------------------------------------------------------------------- builtins


def _is_float(value) -> bool:
    # A Python float or a floating tensor.
    return isinstance(value, float) or (isinstance(value, Tensor) and value.is_floating_point())


def _contains_float(data) -> bool:
    # True if nested lists/tuples of data hold a float anywhere.
    if isinstance(data, (list, tuple)):
        return any(_contains_float(item) for item in data)
    return _is_float(data)


def _floating(dtype, default_dtype):
    # The dtype for a floating result: explicit, else the evaluation dtype, else torch's default.
    return dtype or default_dtype or torch.get_default_dtype()


def ones(*size, dtype=None, device=None, default_dtype=None):
    """``torch.ones``; floating by default (the evaluation dtype)."""
    sizes = _int_sizes(size)
    _check_count(math.prod(sizes))
    return torch.ones(sizes, dtype=_floating(dtype, default_dtype), device=device)


def zeros(*size, dtype=None, device=None, default_dtype=None):
    """``torch.zeros``; floating by default (the evaluation dtype)."""
    sizes = _int_sizes(size)
    _check_count(math.prod(sizes))
    return torch.zeros(sizes, dtype=_floating(dtype, default_dtype), device=device)


def full(size, fill_value, dtype=None, device=None, default_dtype=None):
    """``torch.full``; an int fill gives int64 and a bool fill gives bool, as in torch."""
    sizes = _int_sizes(size if isinstance(size, (tuple, list)) else (size,))
    _check_count(math.prod(sizes))
    if dtype is None and _is_float(fill_value):
        dtype = _floating(None, default_dtype)
    return torch.full(sizes, fill_value, dtype=dtype, device=device)


def eye(n, m=None, dtype=None, device=None, default_dtype=None):
    """``torch.eye``: an ``n x m`` identity, floating by default."""
    rows = operator.index(n)
    cols = rows if m is None else operator.index(m)
    _check_count(rows * cols)
    return torch.eye(rows, cols, dtype=_floating(dtype, default_dtype), device=device)


def _arange_length(args) -> int:
    # ceil((end - start) / step), as torch computes it; 0 for ranges torch rejects itself.
    if not 1 <= len(args) <= 3:
        return 0
    start, end, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    try:
        return math.ceil((float(end) - float(start)) / float(step))
    except (ArithmeticError, ValueError, TypeError):
        return 0


def arange(*args, dtype=None, device=None, default_dtype=None):
    """``torch.arange``: int64 when every bound is an int, else the evaluation dtype."""
    _check_count(_arange_length(args))
    if dtype is None and any(_is_float(a) for a in args):
        dtype = _floating(None, default_dtype)
    return torch.arange(*args, dtype=dtype, device=device)


def _data_count(data) -> int:
    # Elements torch.tensor(data) creates (nested sequences are read along their first items).
    if isinstance(data, Tensor):
        return data.numel()
    count = 1
    while isinstance(data, (tuple, list)):
        count *= len(data)
        if not data:
            break
        data = data[0]
    return count


def tensor(data, dtype=None, device=None, default_dtype=None):
    """``torch.tensor``: ints stay int64, bools stay bool, floats take the evaluation dtype."""
    _check_count(_data_count(data))
    if dtype is None and _contains_float(data):
        dtype = _floating(None, default_dtype)
    if isinstance(data, Tensor):
        return data.detach().to(device=device, dtype=dtype, copy=True)
    result = torch.tensor(data, dtype=dtype, device=device)
    if dtype is None and result.is_floating_point():  # e.g. tensor([]): torch's default
        result = result.to(_floating(None, default_dtype))
    return result


def masked_fill(x, mask, value):
    """``torch.masked_fill``: ``value`` where ``mask`` is True."""
    _check_broadcast(x, mask)
    return torch.masked_fill(x, mask, value)


def matmul(a, b):
    """``torch.matmul`` (the ``@`` operator)."""
    _check_matmul(a, b)
    return torch.matmul(a, b)


def bmm(a, b):
    """``torch.bmm``: batched ``(B, n, k) @ (B, k, m)``."""
    _check_matmul(a, b)
    return torch.bmm(a, b)


def exp(x):
    """``torch.exp`` for tensors, ``math.exp`` for numbers."""
    return torch.exp(x) if isinstance(x, Tensor) else math.exp(x)


def log(x):
    """``torch.log`` for tensors, ``math.log`` for numbers."""
    return torch.log(x) if isinstance(x, Tensor) else math.log(x)


def sqrt(x):
    """``torch.sqrt`` for tensors, ``math.sqrt`` (a float) for numbers."""
    return torch.sqrt(x) if isinstance(x, Tensor) else math.sqrt(x)


def abs_(x):
    """``torch.abs`` for tensors, Python ``abs`` for numbers."""
    return torch.abs(x) if isinstance(x, Tensor) else abs(x)


def softmax(x, dim=-1):
    """``torch.nn.functional.softmax`` along ``dim`` (the last by default)."""
    return F.softmax(x, dim=dim)


def where(condition, x, y):
    """``torch.where(condition, x, y)``: ``x`` where ``condition`` is True, else ``y``."""
    _check_broadcast(condition, x, y)
    return torch.where(condition, x, y)


def _as_tensor_pair(a, b):
    # Promote a Python number to a tensor like its partner, for torch.maximum/minimum.
    if not isinstance(a, Tensor):
        a = torch.as_tensor(a, dtype=b.dtype, device=b.device)
    if not isinstance(b, Tensor):
        b = torch.as_tensor(b, dtype=a.dtype, device=a.device)
    return a, b


def maximum(a, b):
    """Elementwise maximum; numbers are allowed on either side."""
    if not (isinstance(a, Tensor) or isinstance(b, Tensor)):
        return max(a, b)
    a, b = _as_tensor_pair(a, b)  # a list becomes a tensor: size it as one
    _check_broadcast(a, b)
    return torch.maximum(a, b)


def minimum(a, b):
    """Elementwise minimum; numbers are allowed on either side."""
    if not (isinstance(a, Tensor) or isinstance(b, Tensor)):
        return min(a, b)
    a, b = _as_tensor_pair(a, b)  # a list becomes a tensor: size it as one
    _check_broadcast(a, b)
    return torch.minimum(a, b)


def scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """torch's own ``F.scaled_dot_product_attention``: an independent route for expected values."""
    _check_attention(q, k, v, attn_mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)


def torch_layer_norm(x, eps=1e-5):
    """torch's own ``F.layer_norm`` over the last dimension, without affine parameters."""
    return F.layer_norm(x, (x.shape[-1],), eps=eps)


def stack(tensors, *args, **kwargs):
    """``torch.stack``: equal-shaped tensors along a new dimension (``dim=0`` by default)."""
    _check_total(tensors)
    return torch.stack(tensors, *args, **kwargs)


def cat(tensors, *args, **kwargs):
    """``torch.cat``: tensors joined along an existing dimension (``dim=0`` by default)."""
    _check_total(tensors)
    return torch.cat(tensors, *args, **kwargs)


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
        "masked_fill": masked_fill,
        "bmm": bmm,
        "matmul": matmul,
        "exp": exp,
        "log": log,
        "sqrt": sqrt,
        "abs": abs_,
        "softmax": softmax,
        "scaled_dot_product_attention": scaled_dot_product_attention,
        "torch_layer_norm": torch_layer_norm,
        "stack": stack,
        "cat": cat,
        "where": where,
        "maximum": maximum,
        "minimum": minimum,
        "float": float,
        "int": int,
    }
)

# Builtins that receive the evaluation device and dtype.
_CREATION = frozenset({ones, zeros, full, eye, arange, tensor})

# Builtins that do not size their results themselves: none is larger than their largest tensor.
_UNSIZED = frozenset({torch.tril, torch.triu, exp, log, sqrt, abs_, softmax, torch_layer_norm})


# --------------------------------------------------------------------------- tensor attributes

TENSOR_PROPERTIES = frozenset({"T", "mT", "shape", "ndim", "dtype"})

TENSOR_METHODS = frozenset(
    """
    transpose permute reshape view unsqueeze squeeze flatten contiguous clone detach
    sum mean std var amax amin max min argmax argmin abs exp log sqrt cumsum
    repeat expand tril triu masked_fill softmax
    float double half bfloat16 long int bool
    size numel dim item allclose isclose isfinite isnan eq ne lt le gt ge matmul to
    """.split()
)

# Fields of the named tuples that x.max(dim) and x.min(dim) return.
_RESULT_FIELDS = frozenset({"values", "indices"})
_RESULT_TYPES = (torch.return_types.max, torch.return_types.min)


def _guard_repeat(x, args, kwargs):
    # Result has x.numel() * prod(repeats) elements.
    repeats = _int_sizes(args or (kwargs.get("repeats", ()),))
    _check_count(x.numel() * math.prod(repeats))


def _guard_expand(x, args, kwargs):
    # -1 keeps the existing size of an aligned dimension.
    sizes = _int_sizes(args or (kwargs.get("size", ()),))
    offset = len(sizes) - x.dim()
    count = 1
    for i, size in enumerate(sizes):
        count *= x.shape[i - offset] if size == -1 and i >= offset else size
    _check_count(count)


def _guard_to(x, args, kwargs):
    # Only dtype conversions: no devices, no tensors-as-templates.
    dtypes = list(args)
    if "dtype" in kwargs:
        dtypes.append(kwargs["dtype"])
    only_dtypes = dtypes and all(isinstance(d, torch.dtype) for d in dtypes)
    if not only_dtypes or set(kwargs) - {"dtype", "copy"}:
        raise _Refusal("`to` only converts dtypes, e.g. `x.to(float64)`")
    _reserve(x.numel())


def _other(args, kwargs):
    # The second operand of a binary method, given by position or by name.
    if args:
        return args[0]
    return kwargs.get("other", kwargs.get("mask"))


def _guard_other(x, args, kwargs):
    # Methods that broadcast x against a second tensor (x.max(dim) and x.min(dim) reduce x).
    _check_broadcast(x, _other(args, kwargs))


def _guard_matmul(x, args, kwargs):
    # x.matmul(other), sized like the @ operator.
    _check_matmul(x, _other(args, kwargs))


# Every method that takes a second tensor is guarded here; the rest create at most x.numel().
_METHOD_GUARDS: dict[str, Callable] = {
    "repeat": _guard_repeat,
    "expand": _guard_expand,
    "to": _guard_to,
    "matmul": _guard_matmul,
    **dict.fromkeys(
        ["masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "isclose", "allclose", "max", "min"],
        _guard_other,
    ),
}

# Methods that return a view of x, or no tensor: they create nothing.
_VIEW_METHODS = frozenset("transpose permute view unsqueeze squeeze detach size numel dim item".split())


def _guard_size(x, args, kwargs):
    # Methods that create at most x.numel() elements (elementwise, reductions, conversions).
    _reserve(x.numel())


# The check each allowed method runs before it is called; None for those that create nothing.
_METHOD_CHECKS: dict[str, Callable | None] = {
    name: _METHOD_GUARDS.get(name, None if name in _VIEW_METHODS else _guard_size)
    for name in TENSOR_METHODS
}


# --------------------------------------------------------------------------- positions


def _line_starts(text: str) -> list[int]:
    # Character offsets where each line begins (ast counts \n, \r\n and \r as line ends).
    return [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]


def _column(source: str, lineno: int, char_offset: int) -> int:
    """1-based column in ``source`` of a 0-based character offset on a line of its parsed text."""
    body = source.lstrip()
    shift = len(source) - len(body)
    starts = _line_starts(body)
    return shift + starts[min(lineno, len(starts)) - 1] + char_offset + 1


def _node_column(source: str, node: ast.AST) -> int:
    # ast gives col_offset in UTF-8 bytes; convert to characters on that line.
    body = source.lstrip()
    starts = _line_starts(body)
    line_start = starts[node.lineno - 1]
    line = body[line_start:].encode("utf-8")
    chars = len(line[: node.col_offset].decode("utf-8", errors="replace"))
    return _column(source, node.lineno, chars)


def _attr_column(source: str, node: ast.Attribute) -> int:
    # The column of the attribute name itself (``x.__class__`` -> the ``_``), when locatable.
    segment = ast.get_source_segment(source.lstrip(), node) or ""
    if node.end_lineno == node.lineno and segment.endswith(node.attr):
        return _node_column(source, node) + len(segment) - len(node.attr)
    return _node_column(source, node)


def _segment(source: str, node: ast.AST) -> str:
    # The node's source text on one line.
    text = ast.get_source_segment(source.lstrip(), node) or ast.unparse(node)
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


# --------------------------------------------------------------------------- validation

_BINOPS: dict[type, Callable] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _power,
    ast.MatMult: operator.matmul,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}

_UNARYOPS: dict[type, Callable] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
    ast.Not: operator.not_,
}

_COMPAREOPS: dict[type, Callable] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}

_OP_SYMBOLS = {ast.LShift: "<<", ast.RShift: ">>", ast.Is: "is", ast.IsNot: "is not",
               ast.In: "in", ast.NotIn: "not in"}

# Node types refused outright, with the reason given.
_REFUSED: dict[type, str] = {
    ast.JoinedStr: "f-strings are not allowed",
    ast.Dict: "dicts are not allowed",
    ast.Set: "sets are not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.Lambda: "lambdas are not allowed",
    ast.IfExp: "conditional expressions (`a if c else b`) are not allowed",
    ast.NamedExpr: "assignment expressions (`:=`) are not allowed",
    ast.Starred: "starred expressions (`*x`) are not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
    ast.BoolOp: "`and`/`or` are not allowed; use `&` and `|` on masks",
}

# Keyword arguments that would write into a tensor or pick a device.
_REFUSED_KEYWORDS = frozenset({"out", "device", "default_dtype"})

# Receivers that can never be a tensor or a record.
_LITERAL_NODES = (ast.Constant, ast.List, ast.Tuple)


class _Validator:
    """One pass over a parsed tree: refuses what is not allowed, collects names and calls."""

    def __init__(self, source: str, functions: frozenset[str]):
        self.source = source
        self.functions = functions
        self.names: set[str] = set()
        self.calls: set[str] = set()

    def refuse(self, message: str, node: ast.AST | None = None, column: int | None = None):
        if column is None and node is not None:
            column = _node_column(self.source, node)
        raise ExprError(message, column, self.source)

    def visit(self, node: ast.AST, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.refuse(f"expression is nested too deeply; the limit is {MAX_DEPTH}", node)
        check = getattr(self, "visit_" + type(node).__name__, None)
        if check is None:
            reason = _REFUSED.get(type(node), f"{type(node).__name__} expressions are not allowed")
            self.refuse(reason, node)
        check(node, depth + 1)

    def visit_optional(self, node: ast.AST | None, depth: int) -> None:
        if node is not None:
            self.visit(node, depth)

    def visit_Constant(self, node: ast.Constant, depth: int) -> None:
        value = node.value
        if isinstance(value, str):
            self.refuse("strings are not allowed", node)
        if isinstance(value, bytes):
            self.refuse("bytes are not allowed", node)
        if isinstance(value, complex):
            self.refuse("complex numbers are not allowed", node)

    def visit_Name(self, node: ast.Name, depth: int) -> None:
        self.check_identifier(node.id, "names", node)
        if node.id not in CONSTANTS:
            self.names.add(node.id)

    def visit_Tuple(self, node: ast.Tuple, depth: int) -> None:
        for element in node.elts:
            self.visit(element, depth)

    visit_List = visit_Tuple

    def visit_BinOp(self, node: ast.BinOp, depth: int) -> None:
        self.check_operator(node.op, _BINOPS, node)
        self.visit(node.left, depth)
        self.visit(node.right, depth)

    def visit_UnaryOp(self, node: ast.UnaryOp, depth: int) -> None:
        self.visit(node.operand, depth)

    def visit_Compare(self, node: ast.Compare, depth: int) -> None:
        if len(node.ops) > 1:
            self.refuse("chained comparisons are not allowed; compare two values at a time", node)
        self.check_operator(node.ops[0], _COMPAREOPS, node)
        self.visit(node.left, depth)
        self.visit(node.comparators[0], depth)

    def visit_Subscript(self, node: ast.Subscript, depth: int) -> None:
        self.visit(node.value, depth)
        self.visit(node.slice, depth)

    def visit_Slice(self, node: ast.Slice, depth: int) -> None:
        for part in (node.lower, node.upper, node.step):
            self.visit_optional(part, depth)

    def visit_Attribute(self, node: ast.Attribute, depth: int) -> None:
        self.check_attribute(node)
        self.visit(node.value, depth)

    def visit_Call(self, node: ast.Call, depth: int) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            self.check_identifier(func.id, "names", func)
            if func.id not in self.functions:
                self.refuse(f"unknown function '{func.id}'", func)
            self.calls.add(func.id)
        elif isinstance(func, ast.Attribute):
            self.check_attribute(func)
            if func.attr not in TENSOR_METHODS:
                column = _attr_column(self.source, func)
                self.refuse(f"method '{func.attr}' is not allowed", column=column)
            self.visit(func.value, depth)
        else:
            self.refuse("only named functions and tensor methods can be called", func)
        for argument in node.args:
            self.visit(argument, depth)
        for keyword in node.keywords:
            self.check_keyword(keyword)
            self.visit(keyword.value, depth)

    def check_identifier(self, name: str, kind: str, node: ast.AST) -> None:
        if name.startswith("_"):
            self.refuse(f"{kind} starting with '_' are not allowed: '{name}'", node)

    def check_attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_"):
            column = _attr_column(self.source, node)
            self.refuse(f"attributes starting with '_' are not allowed: '{node.attr}'", column=column)
        if isinstance(node.value, _LITERAL_NODES):
            self.refuse("attributes and methods are only allowed on tensors and records", node)

    def check_keyword(self, keyword: ast.keyword) -> None:
        if keyword.arg is None:
            self.refuse("`**` arguments are not allowed", keyword)
        self.check_identifier(keyword.arg, "keyword arguments", keyword)
        if keyword.arg in _REFUSED_KEYWORDS:
            self.refuse(f"keyword argument '{keyword.arg}' is not allowed", keyword)

    def check_operator(self, op: ast.AST, allowed: Mapping, node: ast.AST) -> None:
        if type(op) not in allowed:
            symbol = _OP_SYMBOLS.get(type(op), type(op).__name__)
            self.refuse(f"operator `{symbol}` is not allowed", node)


# --------------------------------------------------------------------------- parse


def _parse_tree(source: str) -> ast.Expression:
    # ast.parse with its failures turned into ExprError.
    body = source.lstrip()
    try:
        return ast.parse(body, mode="eval")
    except SyntaxError as exc:
        if exc.offset:
            column = _column(source, exc.lineno or 1, exc.offset - 1)
            raise ExprError(f"syntax error: {exc.msg}", column, source) from None
        column = len(source.rstrip()) + 1
        raise ExprError(f"syntax error: {exc.msg} (the expression ends early)", column, source) from None
    except (RecursionError, MemoryError):
        raise ExprError(f"expression is nested too deeply; the limit is {MAX_DEPTH}", None, source) from None
    except ValueError as exc:  # e.g. a NUL character
        raise ExprError(f"syntax error: {exc}", None, source) from None


def parse(source: str, *, extra_functions: Collection[str] = ()) -> Expr:
    """Parse and validate an expression, once.

    Args:
        source: the expression text (at most 2000 characters).
        extra_functions: names of functions the caller will supply to
            :meth:`Expr.evaluate` (e.g. ``"attention"``); these and :data:`BUILTINS`
            are the only names that may be called.

    Returns:
        An :class:`Expr` that can be evaluated many times.

    Raises:
        ExprError: naming the refused construct and its column.
    """
    if not isinstance(source, str):
        raise ExprError(f"an expression must be a string, not {type(source).__name__}")
    if len(source) > MAX_SOURCE_CHARS:
        raise ExprError(
            f"expression is {len(source)} characters long; the limit is {MAX_SOURCE_CHARS}",
            None,
            source,
        )
    tree = _parse_tree(source)
    validator = _Validator(source, frozenset(BUILTINS) | frozenset(extra_functions))
    validator.visit(tree.body, 1)
    return Expr(source, tree, frozenset(validator.names), frozenset(validator.calls))


# --------------------------------------------------------------------------- evaluation


class _Context:
    """What one evaluation needs: the scope, the functions, the device and dtype; and its spending."""

    __slots__ = ("source", "scope", "functions", "device", "dtype", "spent")

    def __init__(self, source, scope, functions, device, dtype):
        self.source = source
        self.scope = scope
        self.functions = functions
        self.device = device
        self.dtype = dtype
        self.spent = 0  # elements created so far, against MAX_TOTAL_ELEMENTS

    def error(self, message: str, node: ast.AST) -> ExprError:
        return ExprError(message, _node_column(self.source, node), self.source)

    def failure(self, node: ast.AST, exc: BaseException) -> ExprError:
        # "`q @ k` failed: <torch's first line>", or "refused" for a guard's refusal.
        if isinstance(exc, _Refusal):
            verb, text = "refused", exc.message
        else:
            verb, text = "failed", (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return self.error(f"`{_segment(self.source, node)}` {verb}: {text}", node)


def _evaluate(node: ast.AST, ctx: _Context):
    # The dispatch: one function per allowed node type.
    return _EVALUATORS[type(node)](node, ctx)


def _eval_constant(node: ast.Constant, ctx: _Context):
    return node.value


def _eval_name(node: ast.Name, ctx: _Context):
    name = node.id
    try:
        return ctx.scope[name]
    except KeyError:
        pass
    try:
        return CONSTANTS[name]
    except KeyError:
        raise ctx.error(f"unknown name '{name}'", node) from None


def _eval_tuple(node: ast.Tuple, ctx: _Context):
    return tuple([_evaluate(element, ctx) for element in node.elts])


def _eval_list(node: ast.List, ctx: _Context):
    return [_evaluate(element, ctx) for element in node.elts]


def _eval_binop(node: ast.BinOp, ctx: _Context):
    left = _evaluate(node.left, ctx)
    right = _evaluate(node.right, ctx)
    op = _BINOPS[type(node.op)]
    try:
        if isinstance(left, (tuple, list)) or isinstance(right, (tuple, list)):
            if op is not operator.add:  # no `[0] * 10**9` (nor `[0] * tensor([10**9])`)
                raise TypeError("only `+` is allowed on tuples and lists")
            _check_sequences(left, right)
            return op(left, right)
        if not (isinstance(left, Tensor) or isinstance(right, Tensor)):
            return op(left, right)  # numbers
        if op is operator.matmul:
            _check_matmul(left, right)
        else:
            _check_broadcast(left, right)
        result = op(left, right)
    except Exception as exc:
        raise ctx.failure(node, exc) from exc
    if isinstance(result, Tensor):  # a new tensor (never a view)
        ctx.spent += result.numel()
    return result


def _eval_unaryop(node: ast.UnaryOp, ctx: _Context):
    operand = _evaluate(node.operand, ctx)
    op = _UNARYOPS[type(node.op)]
    try:
        if not isinstance(operand, Tensor):
            return op(operand)  # a number
        if ctx.spent + operand.numel() > MAX_TOTAL_ELEMENTS:
            _reserve(operand.numel())  # refuses
        result = op(operand)
    except Exception as exc:
        raise ctx.failure(node, exc) from exc
    if isinstance(result, Tensor) and result is not operand:  # `+x` is x; `not x` is a bool
        ctx.spent += result.numel()
    return result


def _eval_compare(node: ast.Compare, ctx: _Context):
    left = _evaluate(node.left, ctx)
    right = _evaluate(node.comparators[0], ctx)
    op = _COMPAREOPS[type(node.ops[0])]
    try:
        if not (isinstance(left, Tensor) or isinstance(right, Tensor)):
            return op(left, right)  # numbers, shapes
        _check_broadcast(left, right)
        result = op(left, right)
    except Exception as exc:
        raise ctx.failure(node, exc) from exc
    if isinstance(result, Tensor):  # a new tensor
        ctx.spent += result.numel()
    return result


def _eval_slice(node: ast.Slice, ctx: _Context):
    lower = None if node.lower is None else _evaluate(node.lower, ctx)
    upper = None if node.upper is None else _evaluate(node.upper, ctx)
    step = None if node.step is None else _evaluate(node.step, ctx)
    return slice(lower, upper, step)


def _eval_subscript(node: ast.Subscript, ctx: _Context):
    value = _evaluate(node.value, ctx)
    index = _evaluate(node.slice, ctx)
    if not isinstance(value, (Tensor, tuple, list)):  # torch.Size is a tuple
        raise ctx.error(f"`{_segment(ctx.source, node)}` failed: cannot index a {type(value).__name__}", node)
    try:
        if isinstance(value, Tensor):
            _check_index(value, index)
        result = value[index]
    except Exception as exc:
        raise ctx.failure(node, exc) from exc
    _account(ctx, result, value)
    return result


def _eval_attribute(node: ast.Attribute, ctx: _Context):
    value = _evaluate(node.value, ctx)
    attr = node.attr
    if isinstance(value, Tensor):
        if attr in TENSOR_PROPERTIES:
            try:
                return getattr(value, attr)
            except Exception as exc:
                raise ctx.failure(node, exc) from exc
        hint = "; it is a method, call it" if attr in TENSOR_METHODS else ""
        problem = f"tensors have no property '{attr}'{hint}"
    elif isinstance(value, types.SimpleNamespace):
        fields = vars(value)  # the record's own fields only
        if attr in fields:
            return fields[attr]
        problem = f"the record has no field '{attr}' (it has: {', '.join(sorted(fields)) or 'none'})"
    elif isinstance(value, _RESULT_TYPES) and attr in _RESULT_FIELDS:
        return getattr(value, attr)
    else:
        problem = f"cannot read attribute '{attr}' of a {type(value).__name__}"
    raise ctx.error(f"`{_segment(ctx.source, node)}` failed: {problem}", node)


def _eval_arguments(node: ast.Call, ctx: _Context):
    # Positional and keyword argument values, in source order.
    args = [_evaluate(argument, ctx) for argument in node.args]
    kwargs = {keyword.arg: _evaluate(keyword.value, ctx) for keyword in node.keywords}
    return args, kwargs


def _eval_call(node: ast.Call, ctx: _Context):
    func = node.func
    if type(func) is ast.Attribute:
        return _call_method(node, func, ctx)
    name = func.id
    supplied = ctx.functions.get(name) if ctx.functions else None
    if supplied is not None:
        args, kwargs = _eval_arguments(node, ctx)
        result = supplied(*args, **kwargs)  # the caller's exceptions pass through unchanged
        _account(ctx, result)
        return result
    builtin = BUILTINS.get(name)
    if builtin is None:
        raise ctx.error(f"function '{name}' was not supplied", func)
    args, kwargs = _eval_arguments(node, ctx)
    if builtin in _CREATION:
        kwargs["device"] = ctx.device
        kwargs["default_dtype"] = ctx.dtype
    try:
        if builtin in _UNSIZED and args and isinstance(args[0], Tensor):
            # Their input comes first, and they create no more elements than it has.
            if ctx.spent + args[0].numel() > MAX_TOTAL_ELEMENTS:
                _reserve(args[0].numel())  # refuses
        result = builtin(*args, **kwargs)
    except Exception as exc:
        raise ctx.failure(node, exc) from exc
    _account(ctx, result, args[0] if args else None)
    return result


def _call_method(node: ast.Call, func: ast.Attribute, ctx: _Context):
    receiver = _evaluate(func.value, ctx)
    name = func.attr
    if not isinstance(receiver, Tensor):
        kind = type(receiver).__name__
        raise ctx.error(
            f"`{_segment(ctx.source, node)}` failed: '{name}' is a tensor method, "
            f"and the value is a {kind}",
            node,
        )
    args, kwargs = _eval_arguments(node, ctx)
    check = _METHOD_CHECKS[name]
    try:
        if check is _guard_size:  # inline: most methods come here
            if ctx.spent + receiver.numel() > MAX_TOTAL_ELEMENTS:
                _reserve(receiver.numel())  # refuses
        elif check is not None:
            check(receiver, args, kwargs)
        result = getattr(receiver, name)(*args, **kwargs)
    except Exception as exc:
        raise ctx.failure(node, exc) from exc
    if check is not None:
        _account(ctx, result, receiver)
    return result


_EVALUATORS: dict[type, Callable] = {
    ast.Constant: _eval_constant,
    ast.Name: _eval_name,
    ast.Tuple: _eval_tuple,
    ast.List: _eval_list,
    ast.BinOp: _eval_binop,
    ast.UnaryOp: _eval_unaryop,
    ast.Compare: _eval_compare,
    ast.Slice: _eval_slice,
    ast.Subscript: _eval_subscript,
    ast.Attribute: _eval_attribute,
    ast.Call: _eval_call,
}


# --------------------------------------------------------------------------- Expr


@dataclass(frozen=True)
class Expr:
    """A validated expression: evaluate it as often as needed.

    Attributes:
        source: the text as given.
        tree: the validated ``ast.Expression``.
        names: free variable names it reads (not functions, not :data:`CONSTANTS`).
        calls: plain function names it calls (not methods).
    """

    source: str
    tree: ast.Expression = field(compare=False, repr=False)
    names: frozenset[str] = frozenset()
    calls: frozenset[str] = frozenset()

    def evaluate(
        self,
        scope: Mapping[str, object],
        *,
        functions: Mapping[str, Callable] | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> object:
        """Evaluate with ``scope`` for names and ``functions`` for caller-supplied calls.

        Creation functions build on ``device``; their floating results are ``dtype``.
        Failures of builtins, methods and operators raise :class:`ExprError` quoting the
        failing sub-expression; exceptions from ``functions`` propagate unchanged.
        """
        ctx = _Context(self.source, scope, functions, torch.device(device), dtype)
        outer = _METER.evaluation  # one inside a caller's function has its own budget
        _METER.evaluation = ctx
        try:
            return _evaluate(self.tree.body, ctx)
        finally:
            _METER.evaluation = outer


    def call_arguments(
        self,
        scope: Mapping[str, object],
        *,
        functions: Mapping[str, Callable] | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> tuple[str, list, dict]:
        """For an expression that is one call of a named function: its name and evaluated arguments.

        The call itself is not made; calls nested in the arguments resolve from ``functions``,
        then :data:`BUILTINS`.
        """
        body = self.tree.body
        if not (isinstance(body, ast.Call) and isinstance(body.func, ast.Name)):
            raise ExprError("the expression is not a call of a named function", 1, self.source)
        ctx = _Context(self.source, scope, functions, torch.device(device), dtype)
        outer = _METER.evaluation
        _METER.evaluation = ctx
        try:
            args, kwargs = _eval_arguments(body, ctx)
        finally:
            _METER.evaluation = outer
        return body.func.id, args, kwargs
