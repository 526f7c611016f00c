"""Runs one check: make the case's inputs, call one implementation function, compare every expectation.

The same function serves pytest, the command line and grading; each renders the
:class:`~attention_core.harness.checking.results.Result` its own way. A graded ``call`` calls the
implementation for the called function only: its arguments are evaluated on the harness side
with the reference core, so a mistake is charged to the function that makes it. Besides the
implementation under test, the reference core is run on the CPU to measure a check's numerics
(see ``harness/checking/tolerance.py``).
"""

import os
import time
import traceback

import torch

from attention_core.harness.checking import calls, compare, tolerance
from attention_core.harness.checking.calls import graded_arguments, reference_of  # noqa: F401 (its front ends' way in)
from attention_core.harness.checking.inputs import has_rounded_inputs, materialise
from attention_core.harness.checking.preparation import Preparation
from attention_core.harness.checking.refusals import REFERENCE  # noqa: F401 (its front ends' way in)
from attention_core.harness.checking.results import Failure, Result, Status
from attention_core.harness.languages.expr import ExprError
from attention_core.harness.reading import assignment as assignments
from attention_core.harness.reading.items import CheckItem, collect, locations_relative_to  # noqa: F401 (its front ends' way in)
from attention_core.harness.reading.model import (
    CallCheck,
    DrawInput,
    OracleExpectation,
    PrintedExpectation,
    ShapeExpectation,
    ValuesExpectation,
    waiting,
)

default_cases_folder = assignments.default_cases_folder


def run(item, *, functions=None, device="cpu", preparation=None):
    """Run one check on ``device`` with the spec ``functions`` (default: the reference core).

    ``preparation`` keeps the check's inputs for the next run (grading a batch); by default they
    are made afresh. Never raises: whatever happens becomes a :class:`Result` with its status.
    """
    return _guarded(item, functions, device, preparation, judge=True)


def outputs(item, *, functions=None, device="cpu", preparation=None):
    """The check's named results from ``functions``, compared with nothing; a :class:`Result` instead
    where the run stopped before them (the call raised, was not implemented, …) or their structure
    or dtype already failed the check."""
    return _guarded(item, functions, device, preparation, judge=False)


def judged(item, values, *, device="cpu", preparation=None):
    """The check's :class:`Result` for its named results ``values`` (what :func:`outputs` gave),
    compared with the expectations without calling anything again."""
    return _guarded(item, None, device, preparation, judge=values)


def file_seconds():
    """The CPU seconds one case file's checks may take together: ATTENTION_CORE_FILE_SECONDS, else 4 (read when
    used: a grader process forked from one started earlier reads its own environment)."""
    return float(os.environ.get("ATTENTION_CORE_FILE_SECONDS", "4"))


_SPENT: dict = {}  # a case file's path -> the seconds its checks have taken in this process


def _guarded(item, functions, device, preparation, judge):
    if item.error is not None:
        return Result(Status.CASE_ERROR, item.id, item.location, message=item.error.message)
    if functions is not None:  # an implementation's run (grading): its own time limits hold
        return _timed(item, functions, device, preparation, judge)
    path = str(item.file.path)  # the reference's: the case file's own cost
    seconds = file_seconds()
    if _SPENT.get(path, 0.0) > seconds:
        return Result(
            Status.CASE_ERROR,
            item.id,
            item.location,
            message=(
                f"not run: the case file ran out of its time budget of {seconds:g} s (its checks together; "
                f"ATTENTION_CORE_FILE_SECONDS sets it)"
            ),
        )
    start = time.process_time()  # CPU time: a busy machine refuses no case file
    try:
        return _timed(item, functions, device, preparation, judge)
    finally:
        _SPENT[path] = _SPENT.get(path, 0.0) + time.process_time() - start


def _timed(item, functions, device, preparation, judge):
    left = waiting(item.check)
    if left:  # a draft: never run, never passed
        return Result(
            Status.PENDING,
            item.id,
            item.location,
            message="; ".join(m if n == item.check.line else f"{m} (line {n})" for n, m in left),
        )
    reference = reference_of(item)
    functions = reference if functions is None else functions
    case, check = item.case, item.check
    header = f"{check.kind} `{check.expr.source}` on {device}, {calls.dtype_name(case.dtype)}"
    try:
        return _run(item, functions, device, header, preparation or Preparation(), judge, reference)
    except calls.Stop as stop:
        return Result(stop.status, item.id, item.location, header, message=stop.message, details=stop.details)
    except Exception as err:  # a bug of the harness: never disguised as a failed check
        return Result(
            Status.HARNESS_ERROR,
            item.id,
            item.location,
            header,
            message=f"{type(err).__name__}: {err}",
            details="".join(traceback.format_exception(err)),
        )


def _run(item, functions, device, header, preparation, judge, reference):
    case, check = item.case, item.check
    try:
        scope = preparation.scope(item, device)
    except Exception as err:  # the case's inputs: a problem of the case file
        raise calls.Stop(Status.CASE_ERROR, f"the inputs could not be made: {calls.describe(err)}") from None
    failures = []
    if isinstance(judge, dict):  # the results are given: judged alone
        outputs = values = judge
    else:
        arguments = _prepared_arguments(item, device, preparation) if isinstance(check, CallCheck) else None
        oversized = preparation.oversized(item, device) if arguments is not None else None
        if oversized:  # told before anything that large is made
            raise calls.Stop(Status.CASE_ERROR, oversized)
        try:
            outputs = _graded_call(check, case, scope, functions, device, failures, arguments, reference)
        except calls.Stop as stop:
            refused = (
                preparation.refused(item, device)
                if stop.status is Status.IMPLEMENTATION_ERROR and arguments is not None
                else None
            )
            if refused:  # the case's own mistake: no implementation is charged with it
                raise calls.Stop(Status.CASE_ERROR, refused) from None
            raise
        values = calls.targets(
            check,
            scope,
            outputs,
            device,
            case.dtype,
            failures,
            graded=(item.file.assignment or assignments.default()).graded,
        )
        if not judge and not failures:  # a results' structure or dtype already failed: the Result says so
            return values
    failures += _failures(item, values, device, preparation.oracles(item))
    if check.erratum is not None and not failures and reference:  # (a students' kit has no reference to ask)
        stale = _stale_erratum(item, scope, device, reference)
        if stale:  # the erratum note is the case file's: its problem is a case error
            raise calls.Stop(Status.CASE_ERROR, stale.render())
    status = Status.FAILED if failures else Status.PASSED
    hint = _seed_hint(case, scope, failures) if failures and judge is True and functions is reference else ""
    return Result(status, item.id, item.location, header, tuple(failures), message=hint, outputs=values)


def _seed_hint(case, scope, failures):
    """For a seeded case that the reference fails: what its first draw is, so that an author can tell a
    wrong seed (or draw order) from a wrong computation."""
    first = next((name for name, i in case.inputs.items() if isinstance(i, DrawInput)), None)
    value = scope.get(first) if first is not None else None
    seed = case.inputs[first].seed if first is not None and case.inputs[first].seed is not None else case.seed
    if seed is None or not isinstance(value, torch.Tensor) or not value.numel():
        return ""
    if not all(_broad(f.mismatch) for f in failures):
        return ""  # a wrong shape, or a few elements off (a digit mistyped): not what another seed does
    shown = ", ".join(f"{v:.4f}" for v in value.reshape(-1)[:3].tolist())
    return (
        f"the case draws from seed {seed}: its first draw, {first}, begins [{shown}, ...]; if the "
        f"document printed other numbers there, its seed or its order of draws differs from the case's"
    )


def _broad(mismatch):
    """Whether a mismatch is what drawing from another seed gives: values, most of them off."""
    if getattr(mismatch, "stage", None) != "values":
        return False
    if mismatch.actual is None or mismatch.expected is None or not mismatch.actual.numel():
        return True
    allowed = mismatch.allowed() if callable(mismatch.allowed) else mismatch.allowed
    off = ~((mismatch.actual.to(torch.float64) - mismatch.expected).abs() <= allowed)
    return bool(off.to(torch.float64).mean() > 0.5)


def _prepared_arguments(item, device, preparation):
    try:
        return preparation.arguments(item, device)
    except Exception as err:
        raise calls.Stop(
            Status.CASE_ERROR,
            f"the arguments of `{item.check.expr.source}` could not be evaluated: {calls.describe(err)}",
        ) from None


def _graded_call(check, case, scope, functions, device, failures, arguments, reference):
    """The check's results by name; a wrong structure or dtype becomes a failure of the check."""
    try:
        result = calls.call(check, check.expr, scope, functions, device, case, arguments, reference)
    except calls.WrongResult as wrong:
        if not isinstance(check, CallCheck):  # the document's own arithmetic: the case file is wrong
            raise calls.Stop(Status.CASE_ERROR, str(wrong)) from None
        failures.append(
            Failure(", ".join(wrong.missing or check.returns), check.line, compare.Mismatch(wrong.stage, str(wrong)))
        )
        return wrong.partial
    return result


def _failures(item, values, device, oracles=None):
    noise, spread = numerics(item)
    oracles = calls.oracles(item) if oracles is None else oracles
    failures = []
    for expectation in item.check.expectations:
        target = expectation.target
        if target not in values:
            continue
        actual = values[target]
        mismatch = _compare(
            expectation, actual, device, noise.get(target), spread.get(target), oracles.get(target), item.case.dtype
        )
        if mismatch is not None:
            shape = tuple(actual.shape) if isinstance(actual, torch.Tensor) else None
            failures.append(Failure(target, expectation.line, mismatch, shape))
    return failures


def _compare(expectation, actual, device, noise=None, spread=None, oracle=None, dtype=None):
    if isinstance(expectation, ShapeExpectation):
        return compare.check_shape(actual, expectation.shape)
    if isinstance(expectation, OracleExpectation):
        return compare.compare_full(actual, oracle, rtol=expectation.rtol, atol=expectation.atol, device=device)
    if isinstance(expectation, ValuesExpectation):
        return compare.compare_full(
            actual, expectation.values, rtol=expectation.rtol, atol=expectation.atol, device=device
        )
    printed = expectation.printed
    extra = tolerance.printed_extra(
        printed,
        rtol=expectation.rtol,
        atol=expectation.atol,
        spread=spread,
        shape=actual.shape if isinstance(actual, torch.Tensor) else None,
    )
    if not (isinstance(actual, torch.Tensor) and actual.dtype == dtype):
        noise = None  # measured in the case's dtype: another dtype falls back to the general floor
    return compare.compare_printed(actual, printed, extra=extra, noise=noise, device=device)


def numerics(item):
    """Per target, as the reference core shows them: (rounding noise, printed-input spread).

    Empty for a float64 case (no wider dtype to measure against), for checks without printed
    expectations, and where the reference itself cannot run the check.
    """
    if not any(isinstance(e, PrintedExpectation) for e in item.check.expectations) or item.case.dtype == torch.float64:
        return {}, {}
    case, check = item.case, item.check

    reference = reference_of(item)

    def targets(dtype, perturb):
        scope = materialise(case, device="cpu", dtype=dtype, perturb=perturb)
        outputs = calls.call(check, check.expr, scope, reference, "cpu", case, reference=reference, dtype=dtype)
        return calls.targets(check, scope, outputs, "cpu", dtype)

    try:
        return tolerance.NUMERICS.measure(item, targets, dtype=case.dtype, rounded_inputs=has_rounded_inputs(case))
    except Exception:  # the run itself reports what is wrong with the case
        return {}, {}


def _stale_erratum(item, scope, device, reference):
    """An erratum's correct computation must still miss the printed values, or the note is stale.

    A statement about the document, so the reference core computes it, whatever is graded.
    """
    differs = item.check.erratum.differs
    if differs is None:
        return None
    line = item.check.erratum.line
    try:
        outputs = calls.call(item.check, differs, scope, reference, device, item.case, reference=reference)
        values = calls.targets(item.check, scope, outputs, device, item.case.dtype)
    except (calls.Stop, calls.WrongResult, ExprError) as err:
        message = err.message if isinstance(err, calls.Stop) else str(err)
        return Failure(
            "erratum",
            line,
            compare.Mismatch(
                "erratum",
                f"the correct computation `{differs.source}` could not be evaluated: {message} "
                f"('differs' must compute the check's results, {', '.join(item.check.returns)}, the correct way)",
            ),
        )
    if _failures(item, values, device):
        return None
    return Failure(
        "erratum",
        line,
        compare.Mismatch(
            "erratum",
            f"erratum is stale: the correct computation `{differs.source}` reproduces the printed values "
            f"too, so the erratum note no longer explains anything",
        ),
    )
