"""What a check calls: its arguments made with the reference, the implementation called with copies of
them, its results named and checked for structure and dtype, each expectation's target evaluated, and
the oracle values torch's own functions give in float64.

A check that cannot go on ends with :class:`Stop` (its status and message); an implementation that
returns the wrong structure or dtype raises :class:`WrongResult`, which the runner turns into a
failure of the check.
"""

import ast
import traceback
from pathlib import Path

import torch

from attention_core import instances
from attention_core.harness.checking import compare
from attention_core.harness.checking.inputs import InputError, materialise
from attention_core.harness.checking.refusals import copied
from attention_core.harness.checking.results import CallFailed, Failure, Status
from attention_core.harness.languages.expr import Budget, ExprError
from attention_core.harness.reading import assignment as assignments
from attention_core.harness.reading.fields import MAX_CASE_ELEMENTS
from attention_core.harness.reading.model import CallCheck, NumberInput, OracleExpectation


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
        state = {
            k: v.to(dtype=dtype if v.is_floating_point() else v.dtype, device=device) for k, v in check.state.items()
        }
        args = [instances.instance_record(*init, state, check.mode, dtype), *args]
    elif init is not None:
        cls = functions[name].cls
        state = getattr(scope, "rng_state", None)
        if state is None:
            raise ValueError(f"`{name}(...)` makes an instance from the case's seeded stream: give the case a 'seed'")
        made, after = instances.reference_instance(
            cls, *init, rng_state=state, dtype=dtype, device=device, mode=check.mode
        )
        record = instances.instance_record(
            *init, made.state_dict(), check.mode, dtype, instances.buffer_names(made), rng=after
        )
        args = [record, *args]
    return name, args, kwargs


def table_arguments(check, case):
    """The labels of a graded call's arguments made from none of the case's data (no draw, no value written out or
    printed; only constructors and constants: a rotary table from ``arange``, a mask from ``tril``): tables, whose
    equal entries a correct implementation may read as one (``cos`` whose halves repeat, read once). A label is the
    argument's position (a class's counted after its record, which stands first) or its keyword."""
    data: dict = {}
    for name, given in case.inputs.items():  # (an expression reads earlier inputs only; a number is a constant)
        if isinstance(given, NumberInput):
            data[name] = False
        else:
            data[name] = given.kind != "expr" or any(data.get(n) for n in given.expr.names)
    node = check.expr.tree.body
    if not isinstance(node, ast.Call):
        return set()
    first = 1 if isinstance(node.func, ast.Call) else 0  # ``C(a)(x)``: the instance's record is argument 0

    def table(value):
        return not any(data.get(n.id) for n in ast.walk(value) if isinstance(n, ast.Name))

    labels: set = {first + i for i, value in enumerate(node.args) if table(value)}
    return labels | {k.arg for k in node.keywords if k.arg is not None and table(k.value)}


class Stop(Exception):
    """Ends a check early with a status other than passed or failed."""

    def __init__(self, status, message, details=""):
        super().__init__(message)
        self.status, self.message, self.details = status, message, details


def describe(err):
    """An error as a case's author reads it: our own errors by their message alone, torch's and Python's with their
    type."""
    return str(err) if isinstance(err, (ExprError, InputError)) else f"{type(err).__name__}: {err}"


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


class WrongResult(Exception):
    """The implementation returned the wrong structure or dtype. ``partial``: the results it did return,
    by name, where only the later ones are missing (``missing`` names them)."""

    def __init__(self, stage, message, partial=None, missing=()):
        super().__init__(message)
        self.stage, self.partial, self.missing = stage, partial or {}, tuple(missing)


def call(check, expression, scope, functions, device, case, arguments=None, reference=None, dtype=None):
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
                raise Stop(
                    Status.CASE_ERROR, f"the arguments of `{expression.source}` could not be evaluated: {describe(err)}"
                ) from None
        name, args, kwargs = arguments
        if not getattr(functions, "isolated", False):  # an in-process call may write into its inputs
            args, kwargs = [copied(a) for a in args], {k: copied(v) for k, v in kwargs.items()}
        result = call_implementation(functions, name, args, kwargs)
        check_dtypes(result, check.returns, args, kwargs)
    else:
        try:
            result = expression.evaluate(scope, device=device, dtype=dtype)
        except Exception as err:
            raise Stop(Status.CASE_ERROR, f"`{expression.source}` could not be evaluated: {describe(err)}") from None
    if len(check.returns) == 1:
        return {check.returns[0]: result}
    if not isinstance(result, (tuple, list)) or len(result) != len(check.returns):
        got = (
            f"a {type(result).__name__} of {len(result)}"
            if isinstance(result, (tuple, list))
            else type(result).__name__
        )
        given = list(result) if isinstance(result, (tuple, list)) else [result]
        partial = {}
        if 0 < len(given) < len(check.returns) and all(isinstance(v, torch.Tensor) for v in given):
            partial = dict(zip(check.returns, given))  # the first results came back: each is judged on its own
        missing = [n for n in check.returns if n not in partial] if partial else []
        what = f"; missing: {', '.join(missing)}" if missing else ""
        raise WrongResult(
            "type",
            f"`{expression.source}` must return {len(check.returns)} values "
            f"({', '.join(check.returns)}), got {got}{what}",
            partial,
            missing,
        )
    return dict(zip(check.returns, result))


def call_implementation(functions, name, args, kwargs):
    function = functions.get(name)
    if function is None:
        raise Stop(Status.NOT_IMPLEMENTED, f"the implementation has no `{name}`")
    try:
        return function(*args, **kwargs)
    except instances.StateMismatch as err:
        raise Stop(Status.IMPLEMENTATION_ERROR, f"`{name}` raised StateMismatch: {err}") from None
    except CallFailed as failed:  # an out-of-process call: its status and the lines of its traceback
        raise Stop(failed.status, failed.message, failed.details) from None
    except NotImplementedError as err:
        raise Stop(
            Status.NOT_IMPLEMENTED,
            f"`{name}` raised NotImplementedError" + (f": {err}" if str(err) else ""),
            own_frames(err),
        ) from None
    except Exception as err:
        raise Stop(
            Status.IMPLEMENTATION_ERROR, f"`{name}` raised {type(err).__name__}: {err}", own_frames(err)
        ) from None


HARNESS = Path(__file__).resolve().parent.parent  # attention_core/harness: its frames are the harness's own


def own_frames(err):
    """The traceback lines inside the implementation (the harness's own frames left out)."""
    frames = [
        f for f in traceback.extract_tb(err.__traceback__) if not Path(f.filename).resolve().is_relative_to(HARNESS)
    ]
    return "".join(traceback.format_list(frames)) if frames else ""


def check_dtypes(result, returns, args, kwargs):
    """A spec function keeps the dtype it is given: floating results come back in that dtype."""
    given = {a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_floating_point()}
    values = result if isinstance(result, (tuple, list)) and len(returns) > 1 else (result,)
    for name, value in zip(returns, values):
        if isinstance(value, torch.Tensor) and value.is_complex() and given:
            raise WrongResult(
                "dtype",
                f"{name}: dtype does not match: {value.dtype} is complex; a graded function "
                f"returns real values in the dtype of its floating inputs",
            )
        if isinstance(value, torch.Tensor) and value.is_floating_point() and given and value.dtype not in given:
            raise WrongResult(
                "dtype",
                f"{name}: dtype does not match: {value.dtype} != "
                f"{' or '.join(map(str, sorted(given, key=str)))} "
                f"(a spec function returns the dtype of its floating inputs)",
            )


def targets(check, scope, outputs, device, dtype, failures=None, graded=None):
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
                raise Stop(
                    Status.CASE_ERROR,
                    f"line {expectation.line}: the target `{expectation.target}` could not be evaluated: {err}",
                ) from None
            failures.append(
                Failure(
                    expectation.target,
                    expectation.line,
                    compare.Mismatch(
                        "type",
                        f"could not be evaluated on the result: {err}{returned(check, expectation, outputs, graded)}",
                    ),
                )
            )
    return values


def returned(check, expectation, outputs, graded):
    """What the results an expression read are, beside what the spec says its function returns."""
    seen = [
        f"`{name}` is {str(outputs[name].dtype).removeprefix('torch.')} of shape {list(outputs[name].shape)}"
        for name in sorted(expectation.expr.names, key=lambda n: (expectation.expr.source.find(n), n))
        if isinstance(outputs.get(name), torch.Tensor)
    ]
    if not seen:
        return ""
    said = graded[check.function].summary if graded and check.function in graded else None
    return f" ({'; '.join(seen)}" + (f"; the spec's `{check.function}` returns {said})" if said else ")")


def oracles(item):
    """Each oracle expectation's value: torch's own functions on the inputs, in float64 on the CPU."""
    wanted = [e for e in item.check.expectations if isinstance(e, OracleExpectation)]
    if not wanted:
        return {}
    scope = materialise(item.case, device="cpu", dtype=torch.float64)
    if isinstance(item.check, CallCheck) and item.check.expr.init_arguments(scope) is not None:
        try:  # `self` is the instance the check makes, its parameters and buffers in float64
            _, args, _ = graded_arguments(item.check, item.case, scope, reference_of(item), "cpu", torch.float64)
        except Exception as err:
            raise Stop(
                Status.CASE_ERROR, f"the instance of `{item.check.expr.source}` could not be made: {describe(err)}"
            ) from None
        scope = {**scope, "self": instances.state_record(args[0][instances.INSTANCE]["state"])}
    values = {}
    for e in wanted:
        try:
            value = e.oracle.evaluate(scope, device="cpu", dtype=torch.float64)
        except Exception as err:
            raise Stop(
                Status.CASE_ERROR,
                f"line {e.line}: the oracle `{e.oracle.source}` could not be evaluated: {describe(err)}",
            ) from None
        values[e.target] = value if isinstance(value, torch.Tensor) else torch.as_tensor(value, dtype=torch.float64)
    return values
