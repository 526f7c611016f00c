"""Runs one check: make the case's inputs, call one implementation function, compare every expectation.

The same function serves pytest, the command line and grading; each renders the
:class:`~attention_core.harness.results.Result` its own way. A graded ``call`` calls the
implementation for the called function only: its arguments are evaluated on the harness side
with the reference core, so a mistake is charged to the function that makes it. Besides the
implementation under test, the reference core is run on the CPU to measure a check's numerics
(see ``harness/tolerance.py``).
"""

import os
import time
import traceback
from pathlib import Path

import torch

from attention_core import assignment as assignments
from attention_core import instances
from attention_core.harness import compare, tolerance
from attention_core.harness.expr import Budget, ExprError
from attention_core.harness.fields import MAX_CASE_ELEMENTS
from attention_core.harness.inputs import has_rounded_inputs, materialise
from attention_core.harness.items import CheckItem, LoadError, collect, locations_relative_to  # noqa: F401 (its front ends' way in)
from attention_core.harness.model import (CallCheck, DrawInput, OracleExpectation, PrintedExpectation, ShapeExpectation,
                                          ValuesExpectation, waiting)
from attention_core.harness.refusals import REFERENCE, copied, reference_refuses, too_large  # noqa: F401
from attention_core.harness.results import CallFailed, Failure, Result, Status


default_cases_folder = assignments.default_cases_folder


def reference_of(item):
    """The reference's callables for ``item``'s assignment (name -> function; a class's takes its record first)."""
    return (item.file.assignment or assignments.default()).functions


def graded_arguments(check, case, scope, functions, device, dtype):
    """(name, args, kwargs) of a graded call, its arguments evaluated with ``functions`` (the reference's).

    A class made and called, ``C(a)(x)``: the reference's instance is made from the case's stream after
    its inputs, and its record (the arguments that make it, its state, mode and dtype) stands first.
    """
    expression = check.expr
    name, args, kwargs = expression.call_arguments(scope, functions=functions, device=device, dtype=dtype)
    init = expression.init_arguments(scope, functions=functions, device=device, dtype=dtype)
    if init is not None and check.state is not None:  # recorded (a students' kit): no reference draws it
        state = {k: v.to(dtype=dtype if v.is_floating_point() else v.dtype, device=device) for k, v in check.state.items()}
        args = [instances.instance_record(*init, state, check.mode, dtype), *args]
    elif init is not None:
        cls = functions[name].cls
        state = getattr(scope, "rng_state", None)
        if state is None:
            raise ValueError(f"`{name}(...)` makes an instance from the case's seeded stream: give the case a 'seed'")
        made, after = instances.reference_instance(cls, *init, rng_state=state, dtype=dtype, device=device,
                                                   mode=check.mode)
        record = instances.instance_record(*init, made.state_dict(), check.mode, dtype, instances.buffer_names(made),
                                           rng=after)
        args = [record, *args]
    return name, args, kwargs


class Preparation:
    """What a check needs that no implementation changes, made once per check and device.

    A case's inputs, a graded call's arguments (evaluated with the reference core) and its
    oracle values: grading many submissions reuses them. What an implementation is handed is a
    copy, so a call that writes into its inputs changes nothing here.
    """

    def __init__(self):
        self._made = {}

    def clear(self):
        self._made.clear()

    def scope(self, item, device):
        return self._once(("scope", item, device), lambda: materialise(item.case, device=device))

    def arguments(self, item, device):
        """A graded call's (function name, args, kwargs)."""
        def make():
            return graded_arguments(item.check, item.case, self.scope(item, device), reference_of(item), device,
                                    item.case.dtype)
        return self._once(("arguments", item, device), make)

    def oracles(self, item):
        return self._once(("oracles", item), lambda: _oracles(item))

    def refused(self, item, device):
        """Why the reference core raises on the graded call of ``item`` (see :func:`reference_refuses`); None
        where it runs. Asked once per check: of every implementation that raises there, and by the grader."""
        return self._once(("refused", item, device),
                          lambda: reference_refuses(item.check.expr.source, self.arguments(item, device),
                                                    reference_of(item)))

    def oversized(self, item, device):
        """Why the graded call of ``item`` would return a result too large to check (see
        :func:`too_large`); None where its results fit or it cannot be told. Asked once per check."""
        return self._once(("oversized", item, device),
                          lambda: too_large(item.check.expr.source, self.arguments(item, device)))

    def _once(self, key, make):
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]


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


FILE_SECONDS = float(os.environ.get("ATTENTION_CORE_FILE_SECONDS", "4"))  # one case file's checks together
_SPENT: dict = {}  # a case file's path -> the seconds its checks have taken in this process


def _guarded(item, functions, device, preparation, judge):
    if item.error is not None:
        return Result(Status.CASE_ERROR, item.id, item.location, message=item.error.message)
    if functions is not None:  # an implementation's run (grading): its own time limits hold
        return _timed(item, functions, device, preparation, judge)
    path = str(item.file.path)  # the reference's: the case file's own cost
    if _SPENT.get(path, 0.0) > FILE_SECONDS:
        return Result(Status.CASE_ERROR, item.id, item.location, message=(
            f"not run: the case file ran out of its time budget of {FILE_SECONDS:g} s (its checks together; "
            f"ATTENTION_CORE_FILE_SECONDS sets it)"))
    start = time.monotonic()
    try:
        return _timed(item, functions, device, preparation, judge)
    finally:
        _SPENT[path] = _SPENT.get(path, 0.0) + time.monotonic() - start


def _timed(item, functions, device, preparation, judge):
    left = waiting(item.check)
    if left:  # a draft: never run, never passed
        return Result(Status.PENDING, item.id, item.location, message="; ".join(m if n == item.check.line else f"{m} (line {n})"
                                                                  for n, m in left))
    reference = reference_of(item)
    functions = reference if functions is None else functions
    case, check = item.case, item.check
    header = f"{check.kind} `{check.expr.source}` on {device}, {_dtype_name(case.dtype)}"
    try:
        return _run(item, functions, device, header, preparation or Preparation(), judge, reference)
    except _Stop as stop:
        return Result(stop.status, item.id, item.location, header, message=stop.message, details=stop.details)
    except Exception as err:  # a bug of the harness: never disguised as a failed check
        return Result(Status.HARNESS_ERROR, item.id, item.location, header, message=f"{type(err).__name__}: {err}",
                      details="".join(traceback.format_exception(err)))


class _Stop(Exception):
    """Ends a check early with a status other than passed or failed."""

    def __init__(self, status, message, details=""):
        super().__init__(message)
        self.status, self.message, self.details = status, message, details


def _run(item, functions, device, header, preparation, judge, reference):
    case, check = item.case, item.check
    try:
        scope = preparation.scope(item, device)
    except Exception as err:  # the case's inputs: a problem of the case file
        raise _Stop(Status.CASE_ERROR, f"the inputs could not be made: {_describe(err)}") from None
    failures = []
    if isinstance(judge, dict):  # the results are given: judged alone
        outputs = values = judge
    else:
        arguments = _prepared_arguments(item, device, preparation) if isinstance(check, CallCheck) else None
        oversized = preparation.oversized(item, device) if arguments is not None else None
        if oversized:  # told before anything that large is made
            raise _Stop(Status.CASE_ERROR, oversized)
        try:
            outputs = _graded_call(check, case, scope, functions, device, failures, arguments, reference)
        except _Stop as stop:
            refused = preparation.refused(item, device) if stop.status is Status.IMPLEMENTATION_ERROR and \
                arguments is not None else None
            if refused:  # the case's own mistake: no implementation is charged with it
                raise _Stop(Status.CASE_ERROR, refused) from None
            raise
        values = _targets(check, scope, outputs, device, case.dtype, failures,
                          graded=(item.file.assignment or assignments.default()).graded)
        if not judge and not failures:  # a results' structure or dtype already failed: the Result says so
            return values
    failures += _failures(item, values, device, preparation.oracles(item))
    if check.erratum is not None and not failures and reference:  # (a students' kit has no reference to ask)
        stale = _stale_erratum(item, scope, device, reference)
        if stale:  # the erratum note is the case file's: its problem is a case error
            raise _Stop(Status.CASE_ERROR, stale.render())
    status = Status.FAILED if failures else Status.PASSED
    hint = _seed_hint(case, scope) if failures and judge is True and functions is reference else ""
    return Result(status, item.id, item.location, header, tuple(failures), message=hint, outputs=values)


def _seed_hint(case, scope):
    """For a seeded case that the reference fails: what its first draw is, so that an author can tell a
    wrong seed (or draw order) from a wrong computation."""
    first = next((name for name, i in case.inputs.items() if isinstance(i, DrawInput)), None)
    value = scope.get(first) if first is not None else None
    if case.seed is None or not isinstance(value, torch.Tensor) or not value.numel():
        return ""
    shown = ", ".join(f"{v:.4f}" for v in value.reshape(-1)[:3].tolist())
    return (f"the case draws from seed {case.seed}: its first draw, {first}, begins [{shown}, ...]; if the "
            f"document printed other numbers there, its seed or its order of draws differs from the case's")


def _prepared_arguments(item, device, preparation):
    try:
        return preparation.arguments(item, device)
    except Exception as err:
        raise _Stop(Status.CASE_ERROR, f"the arguments of `{item.check.expr.source}` could not be evaluated: "
                                       f"{_describe(err)}") from None


def _graded_call(check, case, scope, functions, device, failures, arguments, reference):
    """The check's results by name; a wrong structure or dtype becomes a failure of the check."""
    try:
        result = _call(check, check.expr, scope, functions, device, case, arguments, reference)
    except _WrongResult as wrong:
        if not isinstance(check, CallCheck):  # the document's own arithmetic: the case file is wrong
            raise _Stop(Status.CASE_ERROR, str(wrong)) from None
        failures.append(Failure(", ".join(wrong.missing or check.returns), check.line,
                                compare.Mismatch(wrong.stage, str(wrong))))
        return wrong.partial
    return result


def _describe(err):
    return str(err) if isinstance(err, ExprError) else f"{type(err).__name__}: {err}"


def _dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


class _WrongResult(Exception):
    """The implementation returned the wrong structure or dtype. ``partial``: the results it did return,
    by name, where only the later ones are missing (``missing`` names them)."""

    def __init__(self, stage, message, partial=None, missing=()):
        super().__init__(message)
        self.stage, self.partial, self.missing = stage, partial or {}, tuple(missing)


def _call(check, expression, scope, functions, device, case, arguments=None, reference=None, dtype=None):
    """Evaluate the check's call or expression and name its results.

    A ``call`` evaluates its arguments with ``reference`` (the reference's functions; or takes
    ``arguments`` made so) and calls ``functions`` for the called function alone, with copies of the
    arguments; an ``expr`` is the document's own arithmetic, evaluated here. ``dtype``: the compute
    dtype, when not the case's.
    """
    dtype = dtype or case.dtype
    if isinstance(check, CallCheck):
        if arguments is None:
            try:
                call = check.updated({"call": expression}) if expression is not check.expr else check
                arguments = graded_arguments(call, case, scope, reference, device, dtype)
            except Exception as err:
                raise _Stop(Status.CASE_ERROR, f"the arguments of `{expression.source}` could not be evaluated: "
                                               f"{_describe(err)}") from None
        name, args, kwargs = arguments
        if not getattr(functions, "isolated", False):  # an in-process call may write into its inputs
            args, kwargs = [copied(a) for a in args], {k: copied(v) for k, v in kwargs.items()}
        result = _call_implementation(functions, name, args, kwargs)
        _check_dtypes(result, check.returns, args, kwargs)
    else:
        try:
            result = expression.evaluate(scope, device=device, dtype=dtype)
        except Exception as err:
            raise _Stop(Status.CASE_ERROR, f"`{expression.source}` could not be evaluated: {_describe(err)}") from None
    if len(check.returns) == 1:
        return {check.returns[0]: result}
    if not isinstance(result, (tuple, list)) or len(result) != len(check.returns):
        got = f"a {type(result).__name__} of {len(result)}" if isinstance(result, (tuple, list)) else type(result).__name__
        given = list(result) if isinstance(result, (tuple, list)) else [result]
        partial = {}
        if 0 < len(given) < len(check.returns) and all(isinstance(v, torch.Tensor) for v in given):
            partial = dict(zip(check.returns, given))  # the first results came back: each is judged on its own
        missing = [n for n in check.returns if n not in partial] if partial else []
        what = f"; missing: {', '.join(missing)}" if missing else ""
        raise _WrongResult("type", f"`{expression.source}` must return {len(check.returns)} values "
                                   f"({', '.join(check.returns)}), got {got}{what}", partial, missing)
    return dict(zip(check.returns, result))


def _call_implementation(functions, name, args, kwargs):
    function = functions.get(name)
    if function is None:
        raise _Stop(Status.NOT_IMPLEMENTED, f"the implementation has no `{name}`")
    try:
        return function(*args, **kwargs)
    except instances.StateMismatch as err:
        raise _Stop(Status.IMPLEMENTATION_ERROR, f"`{name}` raised StateMismatch: {err}") from None
    except CallFailed as failed:  # an out-of-process call: its status and the lines of its traceback
        raise _Stop(failed.status, failed.message, failed.details) from None
    except NotImplementedError as err:
        raise _Stop(Status.NOT_IMPLEMENTED, f"`{name}` raised NotImplementedError" + (f": {err}" if str(err) else ""),
                    _own_frames(err)) from None
    except Exception as err:
        raise _Stop(Status.IMPLEMENTATION_ERROR, f"`{name}` raised {type(err).__name__}: {err}", _own_frames(err)) from None


_HARNESS = Path(__file__).resolve().parent


def _own_frames(err):
    """The traceback lines inside the implementation (the harness's own frames left out)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not Path(f.filename).resolve().is_relative_to(_HARNESS)]
    return "".join(traceback.format_list(frames)) if frames else ""


def _check_dtypes(result, returns, args, kwargs):
    """A spec function keeps the dtype it is given: floating results come back in that dtype."""
    given = {a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_floating_point()}
    values = result if isinstance(result, (tuple, list)) and len(returns) > 1 else (result,)
    for name, value in zip(returns, values):
        if isinstance(value, torch.Tensor) and value.is_complex() and given:
            raise _WrongResult("dtype", f"{name}: dtype does not match: {value.dtype} is complex; a graded function "
                                        f"returns real values in the dtype of its floating inputs")
        if isinstance(value, torch.Tensor) and value.is_floating_point() and given and value.dtype not in given:
            raise _WrongResult("dtype", f"{name}: dtype does not match: {value.dtype} != "
                                        f"{' or '.join(map(str, sorted(given, key=str)))} "
                                        f"(a spec function returns the dtype of its floating inputs)")


def _targets(check, scope, outputs, device, dtype, failures=None, graded=None):
    """Each expectation's target: an output by name, or an expression over outputs and inputs.

    With ``failures`` given, a target that cannot be evaluated on these outputs is a failure
    of the check (the implementation returned something the expression cannot take); its message
    quotes what ``graded`` (the assignment's graded names) says the called one returns.
    """
    names = {**scope, **outputs}
    values = dict(outputs)
    budget = Budget(MAX_CASE_ELEMENTS)  # all the check's targets together, however many it has
    for expectation in check.expectations:
        if expectation.target in values:
            continue
        if failures is not None and not set(expectation.expr.names) <= set(names):
            continue  # an output the call did not return: already a failure
        try:
            values[expectation.target] = expectation.expr.evaluate(names, device=device, dtype=dtype, budget=budget)
        except ExprError as err:
            if failures is None:
                raise
            if not isinstance(check, CallCheck):  # no implementation involved: the case file is wrong
                raise _Stop(Status.CASE_ERROR, f"line {expectation.line}: the target `{expectation.target}` "
                                               f"could not be evaluated: {err}") from None
            failures.append(Failure(expectation.target, expectation.line, compare.Mismatch(
                "type", f"could not be evaluated on the result: {err}{_returned(check, expectation, outputs, graded)}")))
    return values


def _returned(check, expectation, outputs, graded):
    """What the results an expression read are, beside what the spec says its function returns."""
    seen = [f"`{name}` is {str(outputs[name].dtype).removeprefix('torch.')} of shape {list(outputs[name].shape)}"
            for name in sorted(expectation.expr.names, key=lambda n: (expectation.expr.source.find(n), n))
            if isinstance(outputs.get(name), torch.Tensor)]
    if not seen:
        return ""
    said = graded[check.function].summary if graded and check.function in graded else None
    return f" ({'; '.join(seen)}" + (f"; the spec's `{check.function}` returns {said})" if said else ")")


def _failures(item, values, device, oracles=None):
    noise, spread = _numerics(item)
    oracles = _oracles(item) if oracles is None else oracles
    failures = []
    for expectation in item.check.expectations:
        target = expectation.target
        if target not in values:
            continue
        actual = values[target]
        mismatch = _compare(expectation, actual, device, noise.get(target), spread.get(target),
                            oracles.get(target), item.case.dtype)
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
        return compare.compare_full(actual, expectation.values, rtol=expectation.rtol, atol=expectation.atol,
                                    device=device)
    printed = expectation.printed
    extra = tolerance.printed_extra(printed, rtol=expectation.rtol, atol=expectation.atol, spread=spread,
                                    shape=actual.shape if isinstance(actual, torch.Tensor) else None)
    if not (isinstance(actual, torch.Tensor) and actual.dtype == dtype):
        noise = None  # measured in the case's dtype: another dtype falls back to the general floor
    return compare.compare_printed(actual, printed, extra=extra, noise=noise, device=device)


def _oracles(item):
    """Each oracle expectation's value: torch's own functions on the inputs, in float64 on the CPU."""
    wanted = [e for e in item.check.expectations if isinstance(e, OracleExpectation)]
    if not wanted:
        return {}
    scope = materialise(item.case, device="cpu", dtype=torch.float64)
    if isinstance(item.check, CallCheck) and item.check.expr.init_arguments(scope) is not None:
        try:  # `self` is the instance the check makes, its parameters and buffers in float64
            _, args, _ = graded_arguments(item.check, item.case, scope, reference_of(item), "cpu", torch.float64)
        except Exception as err:
            raise _Stop(Status.CASE_ERROR, f"the instance of `{item.check.expr.source}` could not be made: "
                                           f"{_describe(err)}") from None
        scope = {**scope, "self": instances.state_record(args[0][instances.INSTANCE]["state"])}
    values = {}
    for e in wanted:
        try:
            value = e.oracle.evaluate(scope, device="cpu", dtype=torch.float64)
        except Exception as err:
            raise _Stop(Status.CASE_ERROR, f"line {e.line}: the oracle `{e.oracle.source}` could not be evaluated: "
                                           f"{_describe(err)}") from None
        values[e.target] = value if isinstance(value, torch.Tensor) else torch.as_tensor(value, dtype=torch.float64)
    return values


def _numerics(item):
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
        outputs = _call(check, check.expr, scope, reference, "cpu", case, reference=reference, dtype=dtype)
        return _targets(check, scope, outputs, "cpu", dtype)

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
        outputs = _call(item.check, differs, scope, reference, device, item.case, reference=reference)
        values = _targets(item.check, scope, outputs, device, item.case.dtype)
    except (_Stop, _WrongResult, ExprError) as err:
        message = err.message if isinstance(err, _Stop) else str(err)
        return Failure("erratum", line, compare.Mismatch(
            "erratum", f"the correct computation `{differs.source}` could not be evaluated: {message} "
                       f"('differs' must compute the check's results, {', '.join(item.check.returns)}, the correct way)"))
    if _failures(item, values, device):
        return None
    return Failure("erratum", line, compare.Mismatch(
        "erratum", f"erratum is stale: the correct computation `{differs.source}` reproduces the printed values "
                   f"too, so the erratum note no longer explains anything"))
