"""The staged comparison and its mismatch report: one comparison for every report.

A comparison runs in stages and stops at the first that fails: type, shape, dtype, device,
values. Values are compared element by element against an allowed absolute difference that
``harness/checking/tolerance.py`` sets (every allowance rule lives there).
"""

import math
import weakref
from dataclasses import dataclass

import torch

from attention_core.harness.checking import tolerance

MAX_TABLE_ROWS = 8
BLOCK = 1 << 16  # elements of a block in an element-wise test (float64 temporaries of 512 KiB: in cache)


@dataclass(frozen=True)
class Mismatch:
    """Why a value does not meet its expectation."""

    stage: str  # "type", "shape", "dtype", "device" or "values"
    report: object  # the message, or a function that makes it (a values report is made when first read)
    index: tuple | None = None  # the worst element, for "values"
    ratio: float = math.inf  # worst |diff| / allowed, for "values"
    # For "values": the compared elements, each (N,), and their positions (N, ndim); no positions when every
    # element was compared (then in row-major order). The actual values in their own dtype (float64 is exact
    # for them: the comparison converts them block by block), the expected ones in float64; the allowance in
    # float64, or what makes it (a large comparison's is made again when read, not kept).
    actual: torch.Tensor | None = None
    expected: torch.Tensor | None = None
    allowed: object = None
    positions: torch.Tensor | None = None

    @property
    def message(self):
        if callable(self.report):
            object.__setattr__(self, "report", self.report())
        return self.report

    @property
    def allowance(self):
        """The allowed absolute difference of each compared element, (N,) in float64."""
        return self.allowed() if callable(self.allowed) else self.allowed


def check_shape(actual, shape):
    """Stage "type" and "shape" only: for expectations that give nothing but a shape.

    ``actual`` is a tensor, or a ``torch.Size`` (a target such as ``out.shape``).
    """
    if isinstance(actual, torch.Size):
        actual = torch.empty(actual, device="meta")
    return _check_structure(actual, len(shape), shape, None)


def compare_printed(actual, printed, *, extra=None, noise=None, device=None):
    """Compare a tensor with a printed expectation; ``None`` when it meets it."""
    problem = _check_structure(actual, printed.ndim, printed.shape, device)
    if problem is None and printed.shape is None:
        problem = _check_shown_positions(actual, printed.index)
    if problem is None:
        problem = _check_kind(actual, printed.kind, printed.dtype)
    if problem is not None:
        return problem
    values = actual.detach().to("cpu", torch.float64)
    if printed.ndim:
        values = values[tuple(printed.index.T)]
    else:
        values = values.reshape(1)
    allowed = tolerance.printed_allowance(printed, actual.dtype, extra, noise)
    return compare_values(values, printed.values, allowed, printed.index)


def compare_full(actual, expected, *, rtol=None, atol=None, device=None):
    """Compare with full-precision expected values; a 0-d expectation applies to every element.

    Numbers are numbers: an int result may meet float values and the reverse (a case file's
    ``10`` and ``10.0`` say the same); only bool against numbers is a dtype mismatch. A plain
    Python number or bool result is compared as a 0-d tensor.
    """
    if isinstance(actual, (bool, int, float)):
        try:
            actual = torch.tensor(actual)
        except (OverflowError, RuntimeError, ValueError):  # an integer past 64 bits
            return Mismatch("type", f"the number {str(actual)[:60]} does not fit in a 64-bit tensor")
        device = None
    kept = expected.ndim > 0  # a 0-d expectation is expanded afresh for each comparison: nothing to keep
    if not kept and isinstance(actual, torch.Tensor):
        expected = expected.expand(actual.shape)
    problem = _check_structure(actual, expected.ndim, tuple(expected.shape), device)
    if problem is None and (expected.dtype == torch.bool) != (actual.dtype == torch.bool):
        problem = Mismatch(
            "dtype",
            f"dtype does not match: {actual.dtype} against "
            f"{'bool' if expected.dtype == torch.bool else 'numeric'} expected values",
        )
    if problem is not None:
        return problem
    expected, allowance, finite = _prepared(expected, actual.dtype, rtol, atol, kept)
    shape, given = tuple(actual.shape), actual
    actual = actual.detach().to("cpu").reshape(-1)  # (not copied to float64: converted block by block)
    if actual.dtype not in _EXACT:  # integers (past 2**53 they convert as float64 does: the rule), float8, ...
        actual = actual.to(torch.float64)
    shares = given.device.type == "cpu" and actual.untyped_storage().data_ptr() == given.untyped_storage().data_ptr()
    return compare_values(actual, expected, allowance, shape, finite=finite, owned=not shares)


_EXACT = {torch.float16, torch.bfloat16, torch.float32, torch.float64}  # compared with float64 without a copy


_PREPARED: dict = {}  # id of a large expected tensor, while it lives -> (its version, float64 (N,), finite)
LARGE = 1 << 16  # elements from which an expected tensor's preparation is kept for its next comparison


def _prepared(expected, dtype, rtol, atol, kept=True):
    """(expected as float64 (N,), the allowance of each expected value (a function of a block of them), whether
    they are all finite); kept while a large ``expected`` lives (grading compares every submission against the
    same one). The allowance is made block by block as the comparison goes (whole, it is as large as the
    expected values in float64), and again when a mismatch's report is read."""

    def allowance(values):
        return tolerance.full_allowance(values, dtype, rtol, atol)

    if expected.numel() < LARGE or not kept:
        flat = expected.to(torch.float64).reshape(-1)
        return flat, allowance, bool(torch.isfinite(flat).all())
    known = _PREPARED.get(id(expected))
    if known is None:
        weakref.finalize(expected, _PREPARED.pop, id(expected), None)
    if known is None or known[0] != expected._version:
        flat = expected.to(torch.float64).reshape(-1)
        known = _PREPARED[id(expected)] = (expected._version, flat, bool(torch.isfinite(flat).all()))
    return known[1], allowance, known[2]


def every(test, *tensors):
    """Whether ``test(*blocks)`` is True everywhere, taken block by block over the flat tensors
    (each (N,), or a number or 0-d tensor that applies to every element); False at the first
    block where it is not.

    One pass over a large tensor allocates each temporary afresh and streams it through main
    memory; over blocks of :data:`BLOCK` elements they stay in the CPU's cache (an isclose over
    2M elements in float64: about 22 ms instead of 55).
    """
    n = max(t.numel() if isinstance(t, torch.Tensor) else 1 for t in tensors)
    if n <= BLOCK:
        return bool(test(*tensors).all())
    split = [isinstance(t, torch.Tensor) and t.ndim > 0 for t in tensors]
    for start in range(0, n, BLOCK):
        if not bool(test(*(t[start : start + BLOCK] if cut else t for t, cut in zip(tensors, split))).all()):
            return False
    return True


def _check_structure(actual, ndim, shape, device):
    if not isinstance(actual, torch.Tensor):
        kind = getattr(actual, "type_name", None)  # (a value the wire does not carry: its type's name only)
        return Mismatch("type", f"expected a tensor, got {kind if isinstance(kind, str) else type(actual).__name__}")
    if shape is not None and tuple(actual.shape) != tuple(shape):
        return Mismatch("shape", f"shape does not match: {tuple(actual.shape)} != {tuple(shape)} (actual != expected)")
    if actual.ndim != ndim:
        return Mismatch("shape", f"number of dimensions does not match: {actual.ndim} != {ndim} (actual != expected)")
    if device is not None and actual.device.type != torch.device(device).type:
        return Mismatch("device", f"device does not match: {actual.device} != {device} (actual != expected)")
    return None


def _check_shown_positions(actual, index):
    """An elided or cut-off print fixes no shape, but every shown position must exist."""
    for dim, size in enumerate(actual.shape):
        column = index[:, dim]
        needed = int(column.clamp(min=0).max()) + 1 if (column >= 0).any() else 0
        needed += int((-column.clamp(max=0)).max()) if (column < 0).any() else 0
        if needed > size:
            return Mismatch(
                "shape",
                f"shape {tuple(actual.shape)} is too small for the printed tensor: "
                f"dimension {dim} shows {needed} positions",
            )
    return None


def _check_kind(actual, kind, dtype_name):
    if dtype_name is not None and str(actual.dtype) != f"torch.{dtype_name}":
        return Mismatch("dtype", f"dtype does not match: {actual.dtype} != torch.{dtype_name} (actual != expected)")
    actual_kind = "bool" if actual.dtype == torch.bool else "float" if actual.is_floating_point() else "int"
    if actual_kind != kind and not (kind == "float" and actual.is_complex()):
        return Mismatch("dtype", f"dtype does not match: {actual.dtype} is not a {kind} dtype")
    return None


class _Every:
    """The positions of every element of ``shape`` in row-major order, made one at a time."""

    def __init__(self, shape):
        self.shape = tuple(shape)

    def __getitem__(self, flat):
        flat, position = int(flat), []
        for size in reversed(self.shape):
            flat, i = divmod(flat, size)
            position.append(i)
        return tuple(reversed(position))


def compare_values(actual, expected, allowed, index, *, finite=None, owned=True):
    """Element-wise, in float64: NaN matches only NaN, an infinity only the same infinity, else |diff| <= allowed.

    Args:
        actual, expected: ``(N,)`` (actual in any real dtype: float64 is exact for a float32's values, and the
            differences are taken in float64). allowed: ``(N,)`` or a number, or a function that gives the
            allowance of a block of expected values: then it is made block by block and again when the
            mismatch's report or allowance is read, never kept whole (a large comparison's is as large as the
            expected values in float64). index: ``(N, ndim)`` positions, or a shape tuple when every element of
            that shape is compared in row-major order.
        finite: whether every expected value is finite, where already known.
        owned: whether ``actual`` is the comparison's own (else, a view of the caller's tensor, which may be
            written after: a mismatch keeps a copy of it, in its own dtype, for its report).

    Returns:
        A :class:`Mismatch` of stage "values", or None.
    """
    of = allowed if callable(allowed) else None
    whole = None if of else torch.as_tensor(allowed, dtype=torch.float64)

    def raw(block):  # the allowance of a slice of the compared elements, as given
        return of(expected[block]) if of else whole[block] if whole.ndim else whole

    finite = bool(torch.isfinite(expected).all()) if finite is None else finite
    blocks = [slice(start, start + BLOCK) for start in range(0, max(actual.numel(), 1), BLOCK)]
    if finite and all(bool(((actual[b] - expected[b]).abs() <= raw(b)).all()) for b in blocks):
        return None  # the usual case (NaN and inf differences compare False)
    plain = finite and every(lambda a, e: torch.isfinite(a - e), actual, expected)
    worst, most = _worst_of(actual, expected, raw, blocks, plain)
    if worst is None:
        return None
    actual = actual if owned else actual.clone()
    positions = index if isinstance(index, torch.Tensor) else None
    index = index if positions is not None else _Every(index)

    def allowed_at(block):  # (as _differences takes it: an allowance scaled by a non-finite expectation is none)
        allowed, e = raw(block).expand(expected[block].shape), expected[block]
        if plain:
            return allowed
        return torch.where(torch.isfinite(e) & ~torch.isnan(allowed), allowed, torch.zeros_like(allowed))

    return Mismatch(
        "values",
        lambda: _values_report(actual, expected, allowed_at, blocks, index, plain),
        index=tuple(int(i) for i in index[worst]),
        ratio=most,
        actual=actual,
        expected=expected,
        allowed=(lambda: allowed_at(slice(None))) if of else allowed_at(slice(None)),
        positions=positions,
    )


def _worst_of(actual, expected, raw, blocks, plain):
    """(the position of the greatest |diff| / allowed among the mismatches, the first where several are as great,
    a NaN greatest of all as ``argmax`` takes it; that ratio), or (None, 0.0) where nothing is a mismatch. Block by
    block, each in the branch of :func:`_differences` that the whole takes (``plain``): a failed comparison of
    millions of elements makes temporaries of a block's size, not of its own. ``raw(block)``: the allowance of a
    block."""
    worst, most = None, 0.0
    for block in blocks:
        _, bad, ratio = _differences(actual[block], expected[block], raw(block), plain)
        if bool(bad.any()):
            at = int(ratio.argmax())
            value = float(ratio[at])
            if worst is None or (math.isnan(value) and not math.isnan(most)) or value > most:
                worst, most = block.start + at, value
    return worst, most


def _differences(actual, expected, allowed, plain):
    """(|actual - expected|, where it is a mismatch, |diff| / allowed there and 0 elsewhere), NaN matching NaN and
    an infinity only itself. Made block by block for the verdict, and again for the report (which is read once,
    later): a comparison of millions of elements that fails keeps none of its temporaries. ``plain``: the branch
    for finite differences is taken (else the one for NaN and infinities), as the caller decided it for the whole
    comparison (a block of it is given)."""
    diff = torch.sub(actual, expected).abs_()
    close = diff <= allowed
    allowed = torch.as_tensor(allowed, dtype=torch.float64)
    if plain:
        bad = close.logical_not_()  # every number finite: what is not close is a mismatch
        divisor = allowed.clamp(min=1e-300)  # before it is expanded: a number stays a number
    else:
        allowed = allowed.expand(diff.shape)
        same_special = (torch.isnan(actual) & torch.isnan(expected)) | (torch.isinf(expected) & (actual == expected))
        diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
        diff = torch.where(same_special, torch.zeros_like(diff), diff)
        # An allowance scaled by a non-finite expectation (inf * rtol) would accept anything.
        allowed = torch.where(torch.isfinite(expected) & ~torch.isnan(allowed), allowed, torch.zeros_like(allowed))
        bad = diff > allowed
        divisor = allowed.clamp(min=1e-300)
    ratio = torch.div(diff, divisor).masked_fill_(~bad, 0.0)
    return diff, bad, ratio


def _values_report(actual, expected, allowed_at, blocks, index, plain):
    """The report's text (see :func:`_differences`), made block by block as the verdict was: a failed comparison
    of millions of elements makes temporaries of a block's size when its report is read. ``allowed_at``: the
    allowance of a slice of the compared elements; ``plain``: every difference is finite (the branch of
    :func:`_differences` the whole comparison takes)."""
    n = actual.numel()
    n_bad, most_abs, most_rel = 0, (-1.0, 0), (-1.0, 0)  # (the greatest, its position: the first where tied)
    worst = (torch.empty(0, dtype=torch.float64), torch.empty(0, dtype=torch.long))  # the table's, largest first
    for block in blocks:
        a, e = actual[block], expected[block]
        diff, bad, ratio = _differences(a, e, allowed_at(block), plain)
        n_bad += int(bad.sum())
        at = int(diff.masked_fill(~bad, -1.0).argmax())
        if float(diff[at]) > most_abs[0]:
            most_abs = (float(diff[at]), block.start + at)
        # Relative to a non-zero expected value only: against 0 every difference is infinitely large.
        nonzero = bad & (e != 0) & torch.isfinite(e)
        rel = torch.div(diff, e.abs().clamp(min=1e-300)).masked_fill_(~nonzero, -1.0)
        at = int(rel.argmax())
        if float(rel[at]) > most_rel[0]:
            most_rel = (float(rel[at]), block.start + at)
        # The greatest ratios, ties in position order (a NaN ratio, no allowance, first): a stable sort of the
        # table so far (earlier positions) and this block's own greatest.
        mine = _greatest(ratio, bad)
        values = ratio[mine]
        values, positions = torch.cat([worst[0], values]), torch.cat([worst[1], mine + block.start])
        keep = torch.sort(values, descending=True, stable=True).indices[:MAX_TABLE_ROWS]
        worst = (values[keep], positions[keep])

    def allowed(i):
        return allowed_at(slice(i, i + 1))[0]

    abs_at, rel_at = most_abs[1], most_rel[1]
    relative = (
        f"Greatest relative difference: {_num(most_rel[0])} at index {_idx(index[rel_at])}"
        f" (up to {_num(allowed(rel_at) / expected[rel_at].abs())} allowed)"
        if most_rel[0] >= 0
        else "Greatest relative difference: none (every mismatched element expects 0 or a non-finite value)"
    )
    lines = [
        "Values are not close!",
        f"Mismatched elements: {n_bad} / {n} ({100.0 * n_bad / n:.1f}%)",
        f"Greatest absolute difference: {_num(most_abs[0])} at index {_idx(index[abs_at])}"
        f" (up to {_num(allowed(abs_at))} allowed)",
        relative,
        "Worst elements, by difference over allowance:",
        f"  {'index':<14}{'expected':>15}{'actual':>15}{'|diff|':>12}{'allowed':>12}",
    ]
    for i in worst[1].tolist():
        diff = _differences(actual[i : i + 1], expected[i : i + 1], allowed_at(slice(i, i + 1)), plain)[0]
        shown_expected, shown_actual = _num_pair(expected[i], actual[i])
        lines.append(
            f"  {_idx(index[i]):<14}{shown_expected:>15}{shown_actual:>15}{_num(diff[0]):>12}{_num(allowed(i)):>12}"
        )
    if n_bad > MAX_TABLE_ROWS:
        lines.append(f"  ... and {n_bad - MAX_TABLE_ROWS} more")
    return "\n".join(lines)


def _greatest(ratio, bad):
    """The positions, in order, of the mismatches (``bad``) whose ``ratio`` is among the :data:`MAX_TABLE_ROWS`
    greatest, ties at the last place included (a NaN is the greatest, as a descending sort takes it): what a
    stable descending sort of every mismatch puts first, found without sorting them all (a wrong answer of
    millions of elements is a mismatch everywhere)."""
    if not bool(bad.any()):
        return torch.empty(0, dtype=torch.long)
    ratio = ratio.masked_fill(~bad, -math.inf)  # (a mismatch's ratio is above 0 or NaN: never -inf)
    last = torch.topk(ratio, min(MAX_TABLE_ROWS, ratio.numel())).values[-1]
    among = torch.isnan(ratio) if bool(torch.isnan(last)) else (ratio >= last) | torch.isnan(ratio)
    return torch.nonzero(among & bad).flatten()


def _idx(row):
    return "(" + ", ".join(str(int(i)) for i in row) + ")" if len(row) != 1 else f"({int(row[0])},)"


def _num(x, digits=6):
    x = float(x)
    if math.isinf(x) or math.isnan(x):
        return str(x)
    return f"{x:.{digits}g}" if x == 0 or 1e-4 <= abs(x) < 1e6 else f"{x:.{digits - 2}e}"


def _num_pair(expected, actual):
    """Both numbers, with as many digits as it takes to tell them apart (2360064 against 2360065)."""
    for digits in range(6, 18):
        pair = tuple(
            str(int(x)) if digits > 6 and float(x).is_integer() and abs(x) < 1e16 else _num(x, digits)
            for x in (expected, actual)
        )
        if pair[0] != pair[1] or float(expected) == float(actual):
            return pair
    return repr(float(expected)), repr(float(actual))
