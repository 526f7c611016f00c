"""A property's parts: the calls it makes (:class:`Call`), its input sets (:class:`Base`), one relation on one
input set (:class:`Part`), the property of one graded name (:class:`Probe`), and how a call's value is read."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attention_core.harness.checking import tolerance
from attention_core.harness.checking.results import CallFailed
from attention_core.harness.text import shorten

PREFIX = "properties"


def is_property(check_id):
    """Whether a grade's id is a property's (``properties/<name>/<kind>``) rather than a check's."""
    return check_id.startswith(PREFIX + "/")


class Broken(Exception):
    """A result that cannot be read as the property needs (not a tensor, a wrong shape): the property fails."""


@dataclass(frozen=True, eq=False)
class Call:
    """One call a property makes: the graded ``name`` with ``args`` and ``kwargs`` (an instance record first
    for a class). Compared by identity: calls that several properties share are made once."""

    name: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Base:
    """An input set of one graded name: its call, and which arguments hold tokens (positions on dim -2)."""

    call: Call
    tokens: tuple  # labels (int: position, str: keyword) of the token arguments
    returns: tuple  # the names of the results
    note: str = ""  # what this input set is (for the feedback): "one token", "Tq != Tk", ...


@dataclass(frozen=True)
class Part:
    """One relation on one input set: the calls, and the judge of their values (None: it holds)."""

    calls: tuple
    judge: Callable  # (values: list, one per call) -> None or a sentence saying what broke
    then: Callable | None = None  # (values) -> more calls, made in a second round trip, judged with the first's
    base: Base | None = None
    shapes: dict = field(default_factory=dict, compare=False)  # Call -> its results' shapes, as the reference's
    later: tuple = ()  # the graded names the second round trip's calls call (``then``'s)

    def check_shapes(self, mine):
        """Raise Broken where a result of ``mine`` (one value per call) is not shaped as the reference's."""
        for call, value in zip(self.calls, mine):
            want = self.shapes.get(call)
            got = shapes_of(value)
            if want is None:
                continue
            if len(got) != len(want):
                raise Broken(f"`{call.name}` returned {len(got)} result(s) where {len(want)} are expected")
            i = next((i for i, (a, b) in enumerate(zip(got, want)) if b is not None and a != b), None)
            if i is None:
                continue
            names = self.base.returns if self.base is not None and call.name == self.base.call.name else ()
            name = f"`{names[i]}`" if i < len(names) else f"result {i + 1} of `{call.name}`"
            shown = "not a tensor" if got[i] is None else f"of shape {list(got[i])}"
            raise Broken(
                f"{name} is {shown} where shape {list(want[i])} is expected (on these inputs, the "
                f"right results have that shape)"
            )


@dataclass
class Probe:
    """A property of one graded name: its parts (one per input set) and what a student reads."""

    name: str
    kind: str
    title: str
    parts: list
    points: float = 1.0

    @property
    def id(self):
        return f"{PREFIX}/{self.name}/{self.kind}"

    @property
    def calls(self):
        return [c for part in self.parts for c in part.calls]

    @property
    def names(self):
        """The graded names this property calls (its own name, and any other its relation needs)."""
        return {c.name for c in self.calls} | {n for part in self.parts for n in part.later}

    def judge(self, values):
        """None where the property holds; else what broke (on which input set). ``values``: Call -> its value
        or CallFailed, the second round trip's calls included (see :func:`second_calls`)."""
        return self.verdict(values)[1]

    def verdict(self, values):
        """(status, message): (None, None) where the property holds; (None, what broke) where a relation
        does not; (a call's status, why) where a call did not return (not implemented, raised, timed out)."""
        for part in self.parts:
            status = None
            try:
                mine = [_value(values.get(c)) for c in part.calls]
                part.check_shapes(mine)
                if part.then is not None:
                    then = values.get(("then", id(part)), ())
                    if isinstance(then, Exception):
                        raise then
                    mine += [_value(values.get(c)) for c in then]
                broken = part.judge(mine)
            except CallFailed as failed:
                status, broken = failed.status, failed.message
            except Broken as err:
                broken = str(err)
            except Exception as err:  # noqa: BLE001 (the reference's results were judged: the difference is these)
                broken = (
                    f"these results could not be read as this property needs: {type(err).__name__}: "
                    f"{shorten(str(err), 200)}"
                )
            if broken:
                where = f" (inputs: {part.base.note})" if part.base is not None and part.base.note else ""
                return status, broken + where
        return None, None


def second_calls(probes, values):
    """The calls of the second round trip, made from the first's ``values`` (Call -> value or CallFailed);
    each part's are kept in ``values`` for :meth:`Probe.judge`."""
    more = []
    for probe in probes:
        for part in probe.parts:
            if part.then is None:
                continue
            try:
                calls = tuple(part.then([_value(values.get(c)) for c in part.calls]))
                more += calls
            except (CallFailed, Broken) as err:
                calls = err
            values[("then", id(part))] = calls
    return more


def shapes_of(value):
    """The shapes of a call's results (a tensor, or a tuple or list of results): None for a result that is no
    tensor."""
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    return tuple(tuple(v.shape) if isinstance(v, torch.Tensor) else None for v in values)


def _value(value):
    if isinstance(value, CallFailed):
        raise value
    if value is None:
        raise Broken("the call was not made")
    return value


@dataclass(frozen=True)
class _Where:
    name: str = PREFIX
    document: object = None


@dataclass(frozen=True)
class _What:
    function: str
    returns: tuple = ()
    source: object = None
    line: int = 0


@dataclass(frozen=True, eq=False)
class PropertyItem:
    """A property where the reports expect a check's item (its id, location, file and check)."""

    probe: Probe
    error = None

    @property
    def id(self):
        return self.probe.id

    @property
    def location(self):
        return f"property {self.probe.kind} of {self.probe.name}"

    @property
    def file(self):
        return _Where()

    @property
    def check(self):
        return _What(self.probe.name)


# ---------------------------------------------------------------------------------------- reading values


def results(value, returns):
    """name -> tensor of a call's value (a tensor, or a tuple of them as ``returns`` names them)."""
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if len(values) != len(returns):
        raise Broken(
            f"the call returned {len(values)} result(s) where {len(returns)} ({', '.join(returns)}) are expected"
        )
    out = {}
    for name, v in zip(returns, values):
        if type(v) is not torch.Tensor or v.is_complex():
            raise Broken(
                f"`{name}` is complex, not a real tensor"
                if isinstance(v, torch.Tensor) and v.is_complex()
                else f"`{name}` is a {type(v).__name__}, not a tensor"
            )
        out[name] = v
    return out


def close(a, b, dtype):
    """Whether ``a`` and ``b`` agree as two runs of one right answer in ``dtype`` may (NaN matching NaN)."""
    if a.shape == b.shape and not (a.is_floating_point() and b.is_floating_point()):
        return torch.equal(a, b)
    return first_difference(a, b, dtype) is None


def first_difference(a, b, dtype):
    """The index (a tuple) of the first position where ``a`` and ``b`` differ beyond rounding (``()`` where
    their shapes differ); None where they agree."""
    if a.shape != b.shape:
        return ()
    rtol, atol = tolerance.agreement_tolerance(dtype)
    a, b = a.double(), b.double()
    finite = b[torch.isfinite(b)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    bad = ~torch.isclose(a, b, rtol=rtol, atol=atol + rtol * scale, equal_nan=True)
    if not bool(bad.any()):
        return None
    return tuple(int(i) for i in bad.nonzero()[0])


def dtype_of(base):
    found = [t.dtype for t in tensors_of(base.call) if t.is_floating_point()]
    return found[0] if found else torch.float32


def tensors_of(call):
    return [a for a in [*call.args, *call.kwargs.values()] if isinstance(a, torch.Tensor)]


def argument(call, label):
    return call.args[label] if isinstance(label, int) else call.kwargs[label]


def replaced(call, changes):
    """``call`` with the arguments ``changes`` names (label -> value) replaced."""
    args = list(call.args)
    kwargs = dict(call.kwargs)
    for label, value in changes.items():
        if isinstance(label, int):
            args[label] = value
        else:
            kwargs[label] = value
    return Call(call.name, tuple(args), kwargs)


def fresh(like, generator):
    """A tensor shaped and scaled like ``like``, drawn from ``generator``."""
    spread = float(like.double().std()) if like.numel() > 1 else 1.0
    spread = spread if math.isfinite(spread) and spread > 0 else 1.0
    drawn = torch.randn(like.shape, generator=generator, dtype=torch.float64) * spread
    return drawn.to(like.dtype)
