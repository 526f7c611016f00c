"""Runs one check: make the case's inputs, call the implementation, compare every expectation.

The same function serves pytest, the command line and grading; each turns a
:class:`Result` into its own report. Besides the implementation under test, the reference
core is run on the CPU to measure a check's numerics: its rounding noise in the case's dtype
against float64, and how far the rounding of printed inputs moves its outputs.
"""

import functools
from dataclasses import dataclass, field
from pathlib import Path

import torch

from attention_core import reference, spec
from attention_core.harness import compare
from attention_core.harness.cases import load_folder
from attention_core.harness.expr import ExprError
from attention_core.harness.inputs import has_rounded_inputs, materialise
from attention_core.harness.text import escape

# Printed inputs are rounded: their rounding is propagated by re-running a check in
# float64 with every printed input moved within ±half its printed unit, PERTURBATIONS
# times; the largest change seen, times SAFETY, is added to the allowance.
PERTURBATIONS = 8
SAFETY = 2.0
REFERENCE = {name: getattr(reference, name) for name in spec.NAMES}


@dataclass(frozen=True, eq=False)  # hashed by identity: a cache key
class CheckItem:
    """One check of one case."""

    file: object  # CaseFile
    case: object  # model.Case
    check: object  # model.CallCheck or model.ExprCheck
    error = None  # a loaded check has no error; see LoadError

    @property
    def id(self):
        return f"{self.file.name}/{self.case.id}/{self.check.id}"

    @property
    def location(self):
        """``path:line`` of the check."""
        return f"{_shown(self.file.path)}:{self.check.line}"


@dataclass(frozen=True, eq=False)
class LoadError:
    """A case (or a whole file) that failed to load: one failing item of its own."""

    file: object  # CaseFile
    error: object  # CaseError
    case = check = None

    @property
    def id(self):
        case = self.error.case_id
        return f"{self.file.name}/{case}/invalid" if case else f"{self.file.name}/invalid"

    @property
    def location(self):
        """``path:line`` (``path:line:column`` where the column is known) of the error."""
        column = f":{self.error.column}" if self.error.column else ""
        return f"{_shown(self.file.path)}:{self.error.line}{column}"


def _shown(path):
    if path.is_absolute() and path.is_relative_to(Path.cwd()):
        path = path.relative_to(Path.cwd())
    return escape(path)  # a file's name may hold control characters


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
        items += [LoadError(case_file, err) for err in case_file.errors]
        items += [CheckItem(case_file, case, check) for case in case_file.cases for check in case.checks]
    return items


def default_cases_folder():
    """``cases/`` beside the package (a source checkout), else the copy installed with it."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "cases", here / "cases"):
        if candidate.is_dir():
            return candidate
    return here.parent / "cases"


def run(item, *, functions=None, device="cpu"):
    """Run one check on ``device`` with the spec ``functions`` (default: the reference core).

    Never raises for a problem in the case or the implementation: it becomes a failed result.
    """
    if item.error is not None:
        return Result(False, f"{item.location}: {item.error.message}")
    functions = REFERENCE if functions is None else functions
    case, check = item.case, item.check
    header = f"{item.location}: {item.id} — {check.kind} `{check.expr.source}` on {device}, {_dtype_name(case.dtype)}"
    try:
        return _run(item, functions, device, header)
    except _CallFailed as err:
        return Result(False, f"{header}\n{err}")
    except ExprError as err:
        return Result(False, f"{header}\nthe case could not be evaluated: {err}")
    except Exception as err:  # a case the loader could not fully vet (sizes, dtypes at run time)
        return Result(False, f"{header}\nthe check could not run: {type(err).__name__}: {err}")


def _run(item, functions, device, header):
    case, check = item.case, item.check
    scope = materialise(case, device=device)
    given = set()
    if check.kind == "call":
        functions = {**functions, check.function: _recording(functions[check.function], given)}
    outputs = _call(check, check.expr, scope, functions, device, case.dtype)
    _check_output_dtypes(outputs, given)
    values = _targets(check, scope, outputs, device, case.dtype)
    failures = _failures(item, values, device)
    if check.erratum is not None and not failures:
        stale = _stale_erratum(item, scope, functions, device)
        if stale:
            failures.append(stale)
    if failures:
        return Result(False, header + "\n" + "\n\n".join(failures), values)
    return Result(True, outputs=values)


def _failures(item, values, device):
    noise, spread = _numerics(item)
    oracles = _oracles(item)
    failures = []
    for expectation in item.check.expectations:
        target = expectation.target
        mismatch = _compare(expectation, values[target], device, noise.get(target), spread.get(target),
                            oracles.get(target), item.case.dtype)
        if mismatch is not None:
            failures.append(f"{target} (line {expectation.line}): {mismatch.message}")
    return failures


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


def _compare(expectation, actual, device, noise=None, spread=None, oracle=None, dtype=None):
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
    if not (isinstance(actual, torch.Tensor) and actual.dtype == dtype):
        noise = None  # measured in the case's dtype: another dtype falls back to the general floor
    return compare.compare_printed(actual, printed, extra=extra, noise=noise, device=device)


@functools.lru_cache(maxsize=None)
def _oracles(item):
    """Each oracle expectation's value: torch's own functions on the inputs, in float64 on the CPU."""
    wanted = [e for e in item.check.expectations if e.kind == "oracle"]
    if not wanted:
        return {}
    scope = materialise(item.case, device="cpu", dtype=torch.float64)
    values = {}
    for e in wanted:
        value = e.oracle.evaluate(scope, device="cpu", dtype=torch.float64)
        values[e.target] = torch.as_tensor(value, dtype=torch.float64) if not isinstance(value, torch.Tensor) else value
    return values


def _numerics(item):
    """Per target, as the reference core shows them: (rounding noise, printed-input spread).

    The noise is max |reference in the case's dtype - reference in float64| over the target;
    the spread, for cases with printed inputs, is the largest change of each element over
    PERTURBATIONS float64 runs with the inputs moved within their printed rounding, x SAFETY.
    Empty where the reference itself cannot run the check.
    """
    if not any(e.kind == "printed" for e in item.check.expectations) or item.case.dtype == torch.float64:
        return {}, {}  # a float64 case has no wider dtype to measure its noise against
    try:
        return _numerics_cached(item)
    except Exception:  # the run itself reports what is wrong with the case
        return {}, {}


@functools.lru_cache(maxsize=None)
def _numerics_cached(item):
    case, check = item.case, item.check
    base = _reference_targets(case, check, torch.float64)
    own = _reference_targets(case, check, case.dtype)
    # Only where the float64 run really computed in float64 (an expression may cast with .float()).
    noise = {name: _max_change(own[name], value) for name, value in base.items()
             if _comparable(own.get(name), value) and value.dtype == torch.float64}
    spread = {}
    if has_rounded_inputs(case):
        generator = torch.Generator().manual_seed(0)
        for _ in range(PERTURBATIONS):
            moved = _reference_targets(case, check, torch.float64, generator)
            for name, value in moved.items():
                if _comparable(value, base.get(name)):
                    change = torch.nan_to_num((value - base[name]).abs(), nan=0.0, posinf=0.0)
                    spread[name] = torch.maximum(spread[name], change) if name in spread else change
    return noise, {name: change * SAFETY for name, change in spread.items()}


def _reference_targets(case, check, dtype, perturb=None):
    scope = materialise(case, device="cpu", dtype=dtype, perturb=perturb)
    outputs = _call(check, check.expr, scope, REFERENCE, "cpu", dtype)
    return _targets(check, scope, outputs, "cpu", dtype)


def _comparable(a, b):
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.is_floating_point()
            and b.is_floating_point() and a.shape == b.shape)


def _max_change(a, b):
    change = torch.nan_to_num((a.to(torch.float64) - b.to(torch.float64)).abs(), nan=0.0, posinf=0.0)
    return float(change.max()) if change.numel() else 0.0


def _stale_erratum(item, scope, functions, device):
    """An erratum's correct computation must still miss the printed values, or the note is stale."""
    differs = item.check.erratum.differs
    if differs is None:
        return None
    try:
        outputs = _call(item.check, differs, scope, functions, device, item.case.dtype)
        values = _targets(item.check, scope, outputs, device, item.case.dtype)
    except (_CallFailed, ExprError) as err:
        return f"erratum: the correct computation `{differs.source}` could not be evaluated: {err}"
    if _failures(item, values, device):
        return None
    return (f"erratum is stale: the correct computation `{differs.source}` reproduces the printed values too, "
            f"so the erratum note (line {item.check.erratum.line}) no longer explains anything")
