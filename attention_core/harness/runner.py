"""Runs one check: make the case's inputs, call the implementation, compare every expectation.

The same function serves pytest, the command line and grading; each turns a
:class:`Result` into its own report.
"""

import functools
from dataclasses import dataclass, field
from pathlib import Path

import torch

from attention_core import reference
from attention_core.harness import compare, draws
from attention_core.harness.cases import SPEC_FUNCTIONS, load_folder
from attention_core.harness.expr import ExprError

# Printed inputs are rounded: their rounding is propagated by re-running a check in
# float64 with every printed input moved within ±half its printed unit, PERTURBATIONS
# times; the largest change seen, times SAFETY, is added to the allowance.
PERTURBATIONS = 8
SAFETY = 2.0
REFERENCE = {name: getattr(reference, name) for name in SPEC_FUNCTIONS}


@dataclass(frozen=True, eq=False)  # hashed by identity: a cache key
class CheckItem:
    """One check of one case, or a case (or file) that failed to load."""

    file: object  # CaseFile
    case: object = None  # Case
    check: object = None  # Check
    error: object = None  # CaseError

    @property
    def id(self):
        if self.error is not None:
            case = self.error.case_id
            return f"{self.file.name}/{case}/invalid" if case else f"{self.file.name}/invalid"
        return f"{self.file.name}/{self.case.id}/{self.check.id}"

    @property
    def location(self):
        """``path:line`` of the check (or of the error)."""
        line = self.error.line if self.error is not None else self.check.line
        return f"{self.file.path}:{line}"


@dataclass
class Result:
    """What running a check found."""

    passed: bool
    report: str = ""  # why it failed, ready to show
    outputs: dict = field(default_factory=dict)  # each returned name and expectation target, as computed


def collect(folder):
    """Every check of every case file in ``folder``, load errors included, in a stable order."""
    items = []
    for case_file in load_folder(folder):
        items += [CheckItem(case_file, error=err) for err in case_file.errors]
        items += [CheckItem(case_file, case, check) for case in case_file.cases for check in case.checks]
    return items


def default_cases_folder():
    """``cases/`` beside the package (a source checkout), else the copy installed with it."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "cases", here / "cases"):
        if candidate.is_dir():
            return candidate
    return here.parent / "cases"


def run(item, *, functions=None, device="cpu", dtype=None):
    """Run one check on ``device`` with the spec ``functions`` (default: the reference core).

    ``dtype`` overrides the case's compute dtype (inputs are still drawn in the case's dtype).
    """
    if item.error is not None:
        return Result(False, f"{item.location}: {item.error.message}")
    functions = REFERENCE if functions is None else functions
    case, check = item.case, item.check
    dtype = dtype or case.dtype
    header = f"{item.location}: {item.id} — {check.kind} `{check.expr.source}` on {device}, {_dtype_name(dtype)}"
    try:
        scope = materialise(case, device=device, dtype=dtype)
        given = set()
        if check.kind == "call":
            functions = {**functions, check.function: _recording(functions[check.function], given)}
        outputs = _call(check, check.expr, scope, functions, device, dtype)
        _check_output_dtypes(outputs, given)
        values = _targets(check, scope, outputs, device, dtype)
    except _CallFailed as err:
        return Result(False, f"{header}\n{err}")
    except ExprError as err:
        return Result(False, f"{header}\nthe case could not be evaluated: {err}")
    spread = _rounding_spread(item) if _has_rounded_inputs(case) else {}
    oracles = _oracles(item)
    failures = []
    for expectation in check.expectations:
        mismatch = _compare(expectation, values[expectation.target], device, spread.get(expectation.target),
                            oracles.get(expectation.target))
        if mismatch is not None:
            failures.append(f"{expectation.target} (line {expectation.line}): {mismatch.message}")
    if check.erratum is not None and not failures:
        stale = _stale_erratum(item, scope, functions, device, dtype)
        if stale:
            failures.append(stale)
    if failures:
        return Result(False, header + "\n" + "\n\n".join(failures), values)
    return Result(True, outputs=values)


def _dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


class _CallFailed(Exception):
    """The implementation under test raised, or returned the wrong structure."""


def _check_output_dtypes(outputs, given):
    """A spec function keeps the dtype it is given: floating results come back in that dtype."""
    for name, value in outputs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and given and value.dtype not in given:
            raise _CallFailed(f"{name}: dtype does not match: {value.dtype} != {' or '.join(map(str, given))} "
                              f"(a spec function returns the dtype of its floating inputs)")


def _recording(function, seen):
    """``function``, noting the dtypes of the floating tensors it is given."""
    def call(*args, **kwargs):
        seen.update(a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_floating_point())
        return function(*args, **kwargs)
    return call


def materialise(case, *, device="cpu", dtype=None, perturb=None):
    """The case's inputs by name: drawn on the CPU in the case's dtype, then cast and moved.

    ``perturb`` (a CPU generator) moves every printed input within ±half its printed unit.
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
            value = _printed_input(item.value, perturb)
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


def _printed_input(printed, perturb):
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


def _call(check, expression, scope, functions, device, dtype):
    """Evaluate the check's call or expression and name its results."""
    if check.kind == "call":
        try:
            result = expression.evaluate(scope, functions=functions, device=device, dtype=dtype)
        except ExprError:
            raise
        except Exception as err:  # the implementation under test raised
            raise _CallFailed(f"`{expression.source}` raised {type(err).__name__}: {err}") from None
    else:
        result = expression.evaluate(scope, device=device, dtype=dtype)
    if len(check.returns) == 1:
        return {check.returns[0]: result}
    if not isinstance(result, (tuple, list)) or len(result) != len(check.returns):
        got = f"a {type(result).__name__} of {len(result)}" if isinstance(result, (tuple, list)) else type(result).__name__
        raise _CallFailed(f"`{expression.source}` must return {len(check.returns)} values "
                          f"({', '.join(check.returns)}), got {got}")
    return dict(zip(check.returns, result))


def _targets(check, scope, outputs, device, dtype):
    """Each expectation's target: an output by name, or an expression over outputs and inputs."""
    names = {**scope, **outputs}
    values = dict(outputs)
    for expectation in check.expectations:
        if expectation.target not in values:
            values[expectation.target] = expectation.expr.evaluate(names, device=device, dtype=dtype)
    return values


def _compare(expectation, actual, device, spread, oracle=None):
    if expectation.kind == "shape":
        return compare.check_shape(actual, expectation.shape)
    if expectation.kind == "oracle":
        return compare.compare_full(actual, oracle, rtol=expectation.rtol, atol=expectation.atol, device=device)
    if expectation.kind == "values":
        return compare.compare_full(actual, expectation.values, rtol=expectation.rtol, atol=expectation.atol,
                                    device=device)
    printed = expectation.printed
    extra = None
    if expectation.rtol is not None:
        extra = expectation.atol + expectation.rtol * printed.values.abs()
    if spread is not None and isinstance(actual, torch.Tensor) and spread.shape == actual.shape:
        gathered = spread[tuple(printed.index.T)] if printed.ndim else spread.reshape(1)
        extra = gathered if extra is None else extra + gathered
    return compare.compare_printed(actual, printed, extra=extra, device=device)


@functools.lru_cache(maxsize=None)
def _oracles(item):
    """Each oracle expectation's value: torch's own functions on the inputs, in float64 on the CPU."""
    wanted = [e for e in item.check.expectations if e.kind == "oracle"]
    if not wanted:
        return {}
    scope = materialise(item.case, device="cpu", dtype=torch.float64)
    return {e.target: e.oracle.evaluate(scope, device="cpu", dtype=torch.float64) for e in wanted}


def _has_rounded_inputs(case):
    return any(i.kind == "printed" and bool((i.value.unit > 0).any()) for i in case.inputs)


@functools.lru_cache(maxsize=None)
def _rounding_spread_cached(item):
    case, check = item.case, item.check
    base = _targets(check, *_float64_run(case, check, None))
    generator = torch.Generator().manual_seed(0)
    spread = {}
    for _ in range(PERTURBATIONS):
        moved = _targets(check, *_float64_run(case, check, generator))
        for name, value in moved.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and name in base:
                change = torch.nan_to_num((value - base[name]).abs(), nan=0.0, posinf=0.0)
                spread[name] = torch.maximum(spread[name], change) if name in spread else change
    return {name: change * SAFETY for name, change in spread.items()}


def _float64_run(case, check, perturb):
    scope = materialise(case, device="cpu", dtype=torch.float64, perturb=perturb)
    outputs = _call(check, check.expr, scope, REFERENCE, "cpu", torch.float64)
    return scope, outputs, "cpu", torch.float64


def _rounding_spread(item):
    """For each target, the float64 spread caused by the rounding of printed inputs (x SAFETY)."""
    try:
        return _rounding_spread_cached(item)
    except (ExprError, _CallFailed, RuntimeError):
        return {}


def _stale_erratum(item, scope, functions, device, dtype):
    """An erratum's correct computation must still miss the printed values, or the note is stale."""
    differs = item.check.erratum.differs
    if differs is None:
        return None
    try:
        outputs = _call(item.check, differs, scope, functions, device, dtype)
        values = _targets(item.check, scope, outputs, device, dtype)
    except (_CallFailed, ExprError) as err:
        return f"erratum: the correct computation `{differs.source}` could not be evaluated: {err}"
    spread = _rounding_spread(item) if _has_rounded_inputs(item.case) else {}
    for expectation in item.check.expectations:
        if expectation.kind != "shape" and _compare(expectation, values[expectation.target], device,
                                                    spread.get(expectation.target)) is not None:
            return None
    return (f"erratum is stale: the correct computation `{differs.source}` reproduces the printed values too, "
            f"so the erratum note (line {item.check.erratum.line}) no longer explains anything")
