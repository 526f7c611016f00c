"""A syrupy extension for tensors: readable, exact, compared with tolerance, shared across devices.

Snapshots are regression guards, not golden values: they hold what the reference core
computed, at full precision, so that a change in the 6th digit, or in a value no document
printed, is caught. One file per check, ``tests/__snapshots__/test_cases/<file>.<case>.<check>.txt``,
named from the case file, case and check (never from the test function or the device: one
snapshot serves every device, and syrupy cannot mistake a skipped CUDA item for its owner).

The file holds each named tensor with its dtype and shape and one element per line, written
with the fewest digits that read back to the same value in that dtype. A tensor of more than
``FULL_LIMIT`` elements is summarised instead (see :func:`summary_guarantee`).

``matches`` parses both sides and compares numbers with the per-dtype tolerance, so a CUDA run
matches the CPU-written file, and a difference within tolerance never rewrites it.
"""

import itertools
import math
import random
import re
import struct

import torch
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from attention_core.harness.checking import compare, tolerance
from attention_core.harness.reading.model import ShapeExpectation

FULL_LIMIT = 4096
SAMPLE = 256
_HEADER = "# attention-core snapshot (a regression guard of the reference core, not a golden value)"


def snapshot_name(item):
    """``<file>.<case>.<check>``: the same for every device, and a safe file name.

    Case and check ids hold no ``.`` (the loader refuses one), so the name is unambiguous.
    """
    stem = re.sub(r"[^A-Za-z0-9_-]", "_", item.file.name)
    return f"{stem}.{item.case.id}.{item.check.id}"


def snapshot_data(item, result):
    """What a passing check's snapshot holds: its returned values and expectation targets.

    The steps a document walks through (scores, weights, weighted values) are each a check of
    their own, so every step is guarded once, in the check that computes it. A target that the
    check expects nothing of but a shape is stored as its shape.
    """
    shape_only = {}
    for expectation in item.check.expectations:
        shape_only[expectation.target] = shape_only.get(expectation.target, True) and isinstance(
            expectation, ShapeExpectation
        )
    return {
        name: value.shape if shape_only.get(name) and isinstance(value, torch.Tensor) else value
        for name, value in result.outputs.items()
    }


class TensorSnapshotExtension(SingleFileSnapshotExtension):
    """Use as ``snapshot.use_extension(TensorSnapshotExtension)(name=snapshot_name(item))``."""

    file_extension = "txt"
    _write_mode = WriteMode.TEXT

    @classmethod
    def get_snapshot_name(cls, *, test_location, index=0):
        if isinstance(index, str):
            return index  # made by snapshot_name(): already a safe file name
        return super().get_snapshot_name(test_location=test_location, index=index)

    @classmethod
    def matches_test_location(cls, *, test_location, snapshot_location):
        # Every file in this extension's folder belongs to the parametrised case test.
        return str(snapshot_location).startswith(cls.dirname(test_location=test_location))

    def serialize(self, data, **_):
        """``data``: a mapping of name to tensor (or number), written in sorted order."""
        lines = [_HEADER]
        for name in sorted(data):
            lines += [f"== {name}", *_serialize_value(data[name])]
        return "\n".join(lines) + "\n"

    def matches(self, *, serialized_data, snapshot_data):
        if serialized_data == snapshot_data:  # the usual case: same digits, nothing to parse
            return True
        return not _problems(serialized_data, snapshot_data)

    def read_snapshot_data_from_location(self, *, snapshot_location, snapshot_name, session_id):
        try:
            return super().read_snapshot_data_from_location(
                snapshot_location=snapshot_location, snapshot_name=snapshot_name, session_id=session_id
            )
        except UnicodeDecodeError as err:  # compared as unreadable, and rewritten by --snapshot-update
            return f"(not UTF-8 text: {err})\n"

    def diff_lines(self, serialized_data, snapshot_data):
        if not snapshot_data:  # no file yet: syrupy has just said that it does not exist
            yield "write it with `python -m pytest -m case --snapshot-update`, then review and commit it"
            return
        for problem in _problems(serialized_data, snapshot_data):
            yield from problem.splitlines()


# ---------------------------------------------------------------- writing


def _serialize_value(value):
    if isinstance(value, torch.Size):
        return [f"size: {list(value)}"]
    if isinstance(value, (bool, int, float)):
        return [f"number: {value!r}"]
    if not isinstance(value, torch.Tensor):
        return [f"value: {value!r}"]
    value = value.detach().cpu()
    head = [f"dtype: {str(value.dtype).removeprefix('torch.')}", f"shape: {list(value.shape)}"]
    if value.numel() <= FULL_LIMIT:
        positions = itertools.product(*map(range, value.shape))  # row-major, as reshape(-1)
        return head + [f"{list(p)} {_number(x, value.dtype)}" for p, x in zip(positions, value.reshape(-1).tolist())]
    return head + _summary_lines(value)


def _summary_lines(value):
    slices, per = _slices(value)
    wide = slices.to(torch.float64)
    finite = torch.nan_to_num(wide, nan=0.0, posinf=0.0, neginf=0.0)
    nonfinite = (~torch.isfinite(wide)).sum(dim=1)
    lines = [
        f"summary: {slices.shape[0]} slices over the last {min(2, value.ndim)} dims, {per} elements each; "
        f"float64 sum, sum of |x|, max |x| of the finite elements, count of the others; "
        f"then {SAMPLE} sampled elements"
    ]
    for i in range(slices.shape[0]):
        lead = _index(i, value.shape[:-2]) if value.ndim > 2 else "[]"
        lines.append(
            f"slice {lead} {float(finite[i].sum())!r} {float(finite[i].abs().sum())!r} "
            f"{float(finite[i].abs().max())!r} {int(nonfinite[i])}"
        )
    for flat_index in _sample_indices(value.numel()):
        lines.append(f"{_index(flat_index, value.shape)} {_number(value.reshape(-1)[flat_index].item(), value.dtype)}")
    return lines


def _slices(value):
    if value.ndim <= 2:
        return value.reshape(1, -1), value.numel()
    per = value.shape[-1] * value.shape[-2]
    return value.reshape(-1, per), per


def _sample_indices(n):
    return sorted(random.Random(0).sample(range(n), min(SAMPLE, n)))


def _index(flat, shape):
    position = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        position.append(i)
    return str(position[::-1])


def _number(x, dtype):
    """The fewest significant digits that read back to ``x`` in ``dtype``."""
    if isinstance(x, bool) or not dtype.is_floating_point:
        return str(x)
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if dtype == torch.float64:
        return repr(x)
    low, high = 1, 17  # reading back is monotonic in the digits: search for the fewest
    while low < high:
        middle = (low + high) // 2
        if _round_trip(float(f"{x:.{middle}g}"), dtype) == x:
            high = middle
        else:
            low = middle + 1
    return f"{x:.{low}g}"


def _round_trip(x, dtype):
    """``x`` rounded to ``dtype`` and back to a Python float (NaN where it does not fit)."""
    try:
        if dtype == torch.float32:
            return struct.unpack("f", struct.pack("f", x))[0]
        if dtype == torch.float16:
            return struct.unpack("e", struct.pack("e", x))[0]
    except OverflowError:  # a decimal just past the dtype's largest value (65504 for float16)
        return math.nan
    return torch.tensor(x, dtype=torch.float64).to(dtype).item()


# ---------------------------------------------------------------- reading and comparing


def parse(text):
    """``{name: entry}``: entry is ``{"value": ...}`` or ``{"dtype", "shape", "elements", "slices"}``."""
    entries, current = {}, None
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        if line.startswith("== "):
            current = entries.setdefault(line[3:], {"elements": {}, "slices": {}})
        elif current is None:
            raise ValueError(f"line {number}: expected '== name' before {line!r}")
        elif line.startswith(("dtype: ", "shape: ", "value: ", "summary: ", "size: ", "number: ")):
            key, _, rest = line.partition(": ")
            current[key] = rest
        elif line.startswith("slice "):
            index, _, numbers = line[6:].partition("] ")
            current["slices"][index + "]"] = tuple(float(n) for n in numbers.split())
        else:
            index, _, number = line.partition("] ")
            current["elements"][index + "]"] = number
    return entries


def _problems(serialized, stored):
    """What differs between a computed and a stored snapshot; an unreadable file is one problem."""
    try:
        return _mismatches(parse(serialized), parse(stored))
    except (ValueError, KeyError, IndexError) as err:
        return [
            f"the snapshot file could not be read ({type(err).__name__}: {err}); "
            f"regenerate it with --snapshot-update and review the diff"
        ]


def _mismatches(actual, expected):
    found = [f"{name}: not in the snapshot (new output)" for name in sorted(set(actual) - set(expected))]
    found += [f"{name}: in the snapshot but no longer computed" for name in sorted(set(expected) - set(actual))]
    for name in sorted(set(actual) & set(expected)):
        problem = _entry_mismatch(actual[name], expected[name])
        if problem:
            found.append(f"{name}: {problem}")
    return found


def _entry_mismatch(actual, expected):
    kinds = {k for k in ("size", "number", "value") if k in actual or k in expected}
    if kinds:
        return _plain_mismatch(kinds, actual, expected)
    if actual["shape"] != expected["shape"]:
        return f"shape does not match: {actual['shape']} != {expected['shape']} (actual != snapshot)"
    if actual["dtype"] != expected["dtype"]:
        return f"dtype does not match: {actual['dtype']} != {expected['dtype']} (actual != snapshot)"
    if set(actual["elements"]) != set(expected["elements"]) or set(actual["slices"]) != set(expected["slices"]):
        return "the stored elements differ in layout: regenerate with --snapshot-update and review the diff"
    rtol, atol = tolerance.default_tolerance(getattr(torch, expected["dtype"]))
    problem = _slice_mismatch(actual, expected, rtol, atol)
    if problem:
        return problem
    keys = list(expected["elements"])
    if not keys:
        return None
    got = torch.tensor([_float(actual["elements"][k]) for k in keys], dtype=torch.float64)
    want = torch.tensor([_float(expected["elements"][k]) for k in keys], dtype=torch.float64)
    index = torch.tensor([[int(i) for i in k.strip("[]").split(",") if i.strip()] for k in keys], dtype=torch.int64)
    index = index.reshape(len(keys), -1)
    mismatch = compare.compare_values(got, want, atol + rtol * want.abs(), index)
    return mismatch.message if mismatch else None


def _plain_mismatch(kinds, actual, expected):
    """Sizes and other values compare exactly; a plain number with float32's default tolerance."""
    mine = [k for k in ("size", "number", "value") if k in actual]
    theirs = [k for k in ("size", "number", "value") if k in expected]
    if mine != theirs or len(kinds) != 1:
        return (
            f"kind does not match: {'/'.join(mine) or 'tensor'} != {'/'.join(theirs) or 'tensor'} (actual != snapshot)"
        )
    (kind,) = kinds
    got, want = actual[kind], expected[kind]
    if kind == "number":
        rtol, atol = tolerance.default_tolerance(torch.float32)
        g, w = float(_float(got)), float(_float(want))
        if g == w or (math.isnan(g) and math.isnan(w)) or abs(g - w) <= atol + rtol * abs(w):
            return None
    elif got == want:
        return None
    return f"{kind} does not match: {got} != {want} (actual != snapshot)"


def _float(text):
    return {"True": 1.0, "False": 0.0}.get(text) if text in ("True", "False") else float(text)


def _slice_mismatch(actual, expected, rtol, atol):
    per = int(expected["summary"].split(", ")[1].split()[0]) if "summary" in expected else 0
    for index, (s_want, a_want, m_want, n_want) in expected["slices"].items():
        s_got, a_got, m_got, n_got = actual["slices"][index]
        if n_got != n_want:
            return f"slice {index}: {int(n_got)} non-finite elements != {int(n_want)} (actual != snapshot)"
        sum_tol = per * atol + rtol * a_want
        if abs(s_got - s_want) > sum_tol or abs(a_got - a_want) > sum_tol:
            return (
                f"slice {index}: sum {s_got!r} != {s_want!r} or sum|x| {a_got!r} != {a_want!r} "
                f"(up to {sum_tol:.4g} allowed)"
            )
        if abs(m_got - m_want) > atol + rtol * m_want:
            return f"slice {index}: max|x| {m_got!r} != {m_want!r} (up to {atol + rtol * m_want:.4g} allowed)"
    return None


def summary_guarantee(value):
    """The smallest change of one element that a summarised snapshot of ``value`` always detects.

    A change of one element by ``d`` changes its slice's float64 sum by ``d``; the sums are
    compared with ``n * atol + rtol * sum|x|`` (each element may move by its own tolerance), so
    any ``d`` above that bound fails, whichever element it hits. Sampled elements are also
    checked at element tolerance.
    """
    rtol, atol = tolerance.default_tolerance(value.dtype)
    slices, per = _slices(value.detach().cpu())
    return max(per * atol + rtol * float(s.to(torch.float64).abs().sum()) for s in slices)
