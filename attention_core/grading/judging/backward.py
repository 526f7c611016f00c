"""The backward check of a graded call: differentiable, and its inputs left alone.

For each graded call on floating inputs, ``…/backward`` asks the submission's process for the gradients
of a fixed random projection of the results (``wire.projection``) and compares them with the float64
torch route's, within what a correct route in the case's dtype shows on the same inputs (see
``tolerance.gradient_tolerance``); and it fails a call that changed its input tensors in place, told here
from the arguments as the call left them against the grader's own copies. A mixin of the Grader.
"""

import torch

from attention_core import instances
from attention_core.grading.naming.diagnose import leading_slice
from attention_core.grading.process import replies
from attention_core.grading.process.remote import GRADIENT_LIMIT, PROJECTION_SEED
from attention_core.grading.server import wire
from attention_core.harness.checking import calls, compare, tolerance
from attention_core.harness.checking.results import CallFailed, Failure, Result, Status
from attention_core.harness.reading import assignment as assignments
from attention_core.harness.reading.model import ShapeExpectation


class BackwardChecks:
    """The Grader's backward checks (its preparation, route, time limit and caches are the grader's)."""

    def _has_backward(self, item):
        """Whether ``item`` has a backward check (floating inputs small enough, a floating output), per batch."""
        if item not in self._sliced:
            self._sliced[item] = self._backward_call(item)
        if self._sliced[item] is None:
            return False
        name, args, kwargs, _ = self._sliced[item]
        return self._golden(item, name, args, kwargs) is not None

    def _backward(self, item, submission, functions, value_result):
        """Differentiable, and leaves its inputs alone: gradients against the float64 route. Asked only of a
        check that has one (``_has_backward``) and whose values passed."""
        check_id = f"{item.id}/backward"
        header = f"backward of `{item.check.expr.source}` on cpu, {str(item.case.dtype).removeprefix('torch.')}"
        name, args, kwargs, sliced = self._sliced[item]
        golden = self._golden(item, name, args, kwargs)

        def result(status, failures=(), message="", details=""):
            return Result(status, check_id, item.location, header, tuple(failures), message, details)

        if functions is None or submission.status != replies.OK:
            return result(Status.IMPLEMENTATION_ERROR, message=value_result.message or "the submission did not import")
        if name in functions.timed_out:
            return result(Status.TIMEOUT, message=f"`{name}` timed out earlier (not called again)")
        if name not in submission.names:
            return result(Status.NOT_IMPLEMENTED, message=f"the implementation has no `{name}`")
        if functions.last_grad is not None and functions.last_grad[0] == name and not sliced:
            outcome = functions.last_grad[1]  # brought back with the value
        else:
            outcome = submission.call_grad(
                name,
                args,
                kwargs,
                projection_seed=PROJECTION_SEED,
                timeout=self.options.call_timeout,
                reuse=(item, "backward"),
                limit=self._reply_bound(item),
            )
        try:
            functions.value(name, outcome)
        except CallFailed as failed:
            return result(failed.status, message=failed.message, details=failed.details)
        key = None if outcome.reply is None else (item, outcome.reply, "backward")
        return self._judged_once(key, lambda: result(*self._gradient_failures(item, name, outcome, golden)))

    def _backward_call(self, item):
        """(name, args, kwargs, whether cut to a leading slice) of the backward check's call; None where
        its floating inputs stay too large even so."""
        name, args, kwargs = self.preparation.arguments(item, "cpu")
        record = args[:1] if args and instances.is_record(args[0]) else []  # a class's instance: not cut, not counted
        full = (args[len(record) :], kwargs)
        args, kwargs = leading_slice(full[0], GRADIENT_LIMIT), leading_slice(kwargs, GRADIENT_LIMIT)
        if (
            max((t.numel() for t in wire.tensors_in([args, kwargs]) if t.is_floating_point()), default=0)
            > GRADIENT_LIMIT
        ):
            return None
        return name, [*record, *args], kwargs, args is not full[0] or kwargs is not full[1]

    def _gradient_failures(self, item, name, outcome, golden):
        """(status, failures) of a backward check from the call's outcome and the torch route's gradients."""
        failures = []
        mutated = self._mutated(item, outcome)
        if mutated:
            which = ", ".join(_label(label, name, self.assignment) for label in mutated)
            failures.append(
                Failure(
                    "inputs",
                    item.check.line,
                    compare.Mismatch(
                        "side effect",
                        f"`{name}` changed its input {which} in place: a graded function leaves the caller's "
                        f"tensors alone (compute into a new tensor: `q = q * scale`, not `q *= scale`)",
                    ),
                )
            )
        if outcome.grad_error:
            failures.append(
                Failure(
                    "gradient", item.check.line, compare.Mismatch("gradient", f"backward failed: {outcome.grad_error}")
                )
            )
        values = _reads_values(item.check)  # a check of shapes holds its gradients to their shapes
        if mutated:  # an input changed in place: the gradients are of other inputs; that change is the mistake
            return Status.FAILED, failures
        tied = self._tied(item, golden)
        for label, want in golden.items():
            got = (outcome.grads or {}).get(label)
            shown = _label(label, name, self.assignment)
            target = f"d/d{shown}"
            if label in tied and got is not None and got.shape == want.shape:
                # A table: the gradients that keep its equal entries equal (each set of them taken together, by
                # its mean: an element's own scale, so an element's allowance holds)
                got, want = _averaged(got, tied[label]), _averaged(want, tied[label])
                target = f"d/d{shown} (the mean over each set of its equal entries: a table made from no data)"
            depends = bool(want.abs().max() > 0) if want.numel() else False
            if got is None and isinstance(label, str) and label.startswith("self.") and depends:
                failures.append(
                    Failure(
                        target,
                        item.check.line,
                        compare.Mismatch(
                            "gradient",
                            f"your `{name}` never uses its parameter `{label.removeprefix('self.')}`: its gradient "
                            f"is None, where the right results "
                            f"depend on it (use it in forward; a `.detach()` of it would cut it off the same "
                            f"way)",
                        ),
                    )
                )
                continue
            if got is None:
                failures.append(
                    Failure(
                        target,
                        item.check.line,
                        compare.Mismatch(
                            "gradient",
                            f"no gradient reaches {shown}: the computation leaves autograd "
                            f"(a `.detach()`, a round trip through `.tolist()` or NumPy, or `torch.no_grad()`), "
                            f"or never uses it",
                        ),
                    )
                )
                continue
            if values and depends and got.shape == want.shape and got.numel() and bool(got.abs().max() == 0):
                failures.append(
                    Failure(
                        target,
                        item.check.line,
                        compare.Mismatch(
                            "gradient",
                            f"your results do not depend on {shown}: its gradient is 0 everywhere, where the "
                            f"right results' is not (is it used, or multiplied by 0?)",
                        ),
                        tuple(got.shape),
                    )
                )
                continue
            if not values:
                mismatch = (
                    None
                    if got.shape == want.shape
                    else compare.Mismatch(
                        "shape", f"the gradient's shape {list(got.shape)} is not its input's {list(want.shape)}"
                    )
                )
            else:
                rtol, atol = tolerance.gradient_tolerance(item.case.dtype, self._noise(item, label))
                mismatch = compare.compare_full(got, want, rtol=rtol, atol=atol)
                if mismatch is not None and label not in tied and self._split_among_copies(item, label, got, want):
                    mismatch = None
            if mismatch is not None:
                failures.append(Failure(target, item.check.line, mismatch, tuple(got.shape)))
        return Status.FAILED if failures else Status.PASSED, failures

    def _tied(self, item, golden):
        """label -> the index of each element's set of equal entries, for each table the call is given (see
        ``calls.table_arguments``) where some other argument, or a parameter, is made from data: its gradients
        are held to the directions that keep its equal entries equal. A call on tables alone is checked whole."""
        labels = calls.table_arguments(item.check, item.case)
        given = self._given(item)
        tables = {
            label: given[label]
            for label in golden
            if label in labels and isinstance(given.get(label), torch.Tensor) and given[label].is_floating_point()
        }
        if len(tables) == len(golden):
            return {}
        return {label: torch.unique(t.detach().reshape(-1), return_inverse=True)[1] for label, t in tables.items()}

    def _given(self, item):
        """label -> the argument the backward call is given (a position, or a keyword)."""
        _, args, kwargs, _ = self._sliced[item]
        return {**dict(enumerate(args)), **kwargs}

    def _split_among_copies(self, item, label, got, want):
        """Whether ``got`` differs from ``want`` only in how it shares each set of copies in an argument written as
        repeats of itself along one axis (a rotary table pasted as printed: its halves equal, or each entry twice in
        a row): the case cannot tell those copies apart, so a style that reads one of them is right there. Copies
        only: an argument whose entries are merely equal somewhere (an identity, a LayerNorm's printed ones) is
        checked element by element; nor where the sets' means are 0 (they would check nothing)."""
        given = self._given(item).get(label)
        if (
            not isinstance(given, torch.Tensor)
            or not given.is_floating_point()
            or not given.shape == got.shape == want.shape
        ):
            return False
        sets = _copies(given.detach())
        if sets is None:
            return False
        mean_want = _averaged(want, sets)
        if not bool(mean_want.abs().max() > 0):
            return False
        rtol, atol = tolerance.gradient_tolerance(item.case.dtype, self._noise(item, label))
        return compare.compare_full(_averaged(got, sets), mean_want, rtol=rtol, atol=atol) is None

    def _mutated(self, item, outcome):
        """The labels of the tensor arguments the call changed in place, told here: the arguments as the call
        left them (sent back) against the grader's own copies. A label the grader did not send is no label;
        an argument that did not come back counts as changed. The submission's own report is not read."""
        _, args, kwargs, _ = self._sliced[item]
        sent = {
            **{i: a for i, a in enumerate(args) if isinstance(a, torch.Tensor)},
            **{k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)},
        }
        after = outcome.after or {}
        return [label for label, original in sent.items() if label not in after or not _same(after[label], original)]

    def _golden(self, item, name, args, kwargs):
        """label -> gradient of the projection through torch's own functions, in float64 (cached per check)."""
        if item not in self._golden_grads:
            try:
                wide = _route_grads(self._route, name, args, kwargs, torch.float64)
                own = _route_grads(self._route, name, args, kwargs, item.case.dtype)
            except Exception:  # noqa: BLE001 (a reference that cannot run in float64: no backward check, for anyone)
                self._golden_grads[item] = (None, None, [])
                return None
            try:
                moved = (
                    [
                        _route_grads(self._route, name, *_moved(args, kwargs, item.case.dtype, seed), torch.float64)
                        for seed in range(tolerance.GRADIENT_PERTURBATIONS)
                    ]
                    if wide is not None
                    else []
                )
            except Exception:  # noqa: BLE001 (the route's own rounding is the allowance then)
                moved = []
            self._golden_grads[item] = (wide, own, moved)
        return self._golden_grads[item][0]

    def _noise(self, item, label):
        """How far a correct gradient in the case's dtype may be from float64's: the torch route's own rounding,
        or the change a relative ±eps move of the inputs makes (see tolerance.GRADIENT_PERTURBATIONS)."""
        wide, own, moved = self._golden_grads[item]
        changes = [
            tolerance.max_change(g[label], wide[label])
            for g in [own, *moved]
            if g is not None and g.get(label) is not None and wide.get(label) is not None
        ]
        return max(changes, default=0.0)


def _route_grads(route, name, args, kwargs, dtype):
    """label -> the gradient of the projection through ``route[name]`` in ``dtype``: for each floating
    argument (by position or keyword) and, for a class, each floating parameter (``self.<name>``)."""
    labelled = {}

    def leaf(label, value):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            value = value.detach().to(dtype).requires_grad_(True)
            labelled[label] = value
        return value

    function = route[name]
    if args and instances.is_record(args[0]):  # a class: its instance in ``dtype``, its parameters leaves too
        record = args[0][instances.INSTANCE]
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in record["state"].items()}
        made = instances.implementation_instance(
            function.cls, {instances.INSTANCE: {**record, "state": state, "dtype": str(dtype).removeprefix("torch.")}}
        )
        labelled.update((f"self.{n}", p) for n, p in instances.parameters(made))
        args = [None, *[leaf(i + 1, a) for i, a in enumerate(args[1:])]]
        kwargs = {k: leaf(k, v) for k, v in kwargs.items()}
        outputs = instances.call(made, {instances.INSTANCE: record}, args[1:], kwargs)
    else:
        args = [leaf(i, a) for i, a in enumerate(args)]
        kwargs = {k: leaf(k, v) for k, v in kwargs.items()}
        outputs = function(*args, **kwargs)
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    loss = wire.projection(outputs, PROJECTION_SEED)
    if loss is None or not labelled:
        return None
    grads = torch.autograd.grad(loss, list(labelled.values()), allow_unused=True)
    return {
        label: (g.to(torch.float64) if g is not None else torch.zeros_like(t, dtype=torch.float64))
        for (label, t), g in zip(labelled.items(), grads)
    }


def _copies(value):
    """Each element's set of copies (an index per element) where ``value`` is its first block along one axis
    repeated (``cat((a, a), d)``) or each of its entries repeated in a row (``repeat_interleave``), and not all one
    number; else None."""
    if value.numel() < 2 or bool((value == value.reshape(-1)[0]).all()):
        return None
    index = torch.arange(value.numel()).reshape(value.shape)
    for dim, size in enumerate(value.shape):
        for block in (k for k in range(1, size) if size % k == 0):
            times = [size // block if d == dim else 1 for d in range(value.dim())]
            if torch.equal(value, value.narrow(dim, 0, block).repeat(*times)):
                first = index.narrow(dim, 0, block).repeat(*times)
            else:
                rows = torch.arange(0, size, size // block)
                if not torch.equal(value, value.index_select(dim, rows).repeat_interleave(size // block, dim)):
                    continue
                first = index.index_select(dim, rows).repeat_interleave(size // block, dim)
            return torch.unique(first.reshape(-1), return_inverse=True)[1]
    return None


def _averaged(gradient, sets):
    """``gradient``'s mean over each set of equal entries (``sets``: each element's set), in float64."""
    count = torch.bincount(sets).to(torch.float64)
    total = torch.zeros(len(count), dtype=torch.float64)
    return total.index_add_(0, sets, gradient.detach().to(torch.float64).reshape(-1)) / count


def _same(a, b):
    """Whether ``a`` holds what ``b`` holds: shape, dtype and values, NaN where NaN was."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(((a == b) | (a.isnan() & b.isnan())).all()) if a.is_floating_point() else torch.equal(a, b)


def _moved(args, kwargs, dtype, seed):
    """(args, kwargs) with each floating tensor moved by ±eps(dtype) of each element, in float64 (signs drawn
    from ``seed``); an instance record, and every other argument, as it is."""
    generator = torch.Generator().manual_seed(seed)
    eps = torch.finfo(dtype).eps

    def move(value):
        if not (isinstance(value, torch.Tensor) and value.is_floating_point()):
            return value
        signs = torch.randint(0, 2, value.shape, generator=generator, dtype=torch.float64) * 2 - 1
        return value.double() * (1 + eps * signs)

    return [move(a) for a in args], {k: move(v) for k, v in kwargs.items()}


def _reads_values(check):
    """Whether any expectation of ``check`` reads values (not a check of shapes alone)."""
    return any(not isinstance(e, ShapeExpectation) for e in check.expectations)


def _label(label, name, assignment=None):
    """An argument as the feedback names it: its parameter's name in the spec (``self.key.weight``: a parameter)."""
    if isinstance(label, int):
        entry = (assignment or assignments.default()).graded.get(name)
        params = () if entry is None else entry.call_params
        position = label - 1 if entry is not None and entry.is_class else label  # the record stands first
        return f"`{params[position].name}`" if 0 <= position < len(params) else f"argument {label}"
    return f"`{label}`"
