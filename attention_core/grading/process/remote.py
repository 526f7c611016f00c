"""A submission's spec functions as the grader calls them: each call made in the submission's process
(``client.Submission``), its outcome turned into the value or the CallFailed the check reports."""

from attention_core.grading.process import replies
from attention_core.grading.server import wire
from attention_core.harness.checking.results import CallFailed, Status

GRADIENT_LIMIT = 4096  # a floating input larger than this is cut to its leading slice
PROJECTION_SEED = 0


class RemoteFunctions:
    """The spec functions of a submission, each call made in the submission's process.

    After a timeout a function is not called again: its later checks fail at once. With
    ``gradients``, a call on small floating inputs also brings back the gradients the backward
    check compares (one round trip for both), kept in ``last_grad``. ``fetch`` makes a check's
    call before the check runs (the grader looks at the reply first); the check's own call then
    takes that outcome.
    """

    isolated = True  # the arguments are copied into another process: no need to copy them here

    def __init__(self, submission, timeout, *, gradients=False, differentiable=None):
        self.submission, self.timeout, self.gradients = submission, timeout, gradients
        self._differentiable = {} if differentiable is None else differentiable  # reuse -> _differentiable(…)
        self.timed_out = set()
        self.last_grad = None  # (name, outcome) of the latest call that brought gradients back
        self.keep = None  # the result positions the current check reads (the others: shapes only)
        self.ready = None  # (name, args, kwargs, outcome) of the call fetched for the current check
        self.limit = None  # the most bytes the current check's reply may have (None: the worker's limit)

    def get(self, name, default=None):
        return self._function(name) if name in self.submission.names else default

    def fetch(self, name, args, kwargs, reuse):
        """Call ``name`` now, for the check about to run (``reuse``: the grader's name for these arguments)."""
        self.ready = (name, args, kwargs, self._outcome(name, args, kwargs, reuse))
        return self.ready[3]

    def _function(self, name):
        def call(*args, **kwargs):
            if name in self.timed_out:
                raise CallFailed(Status.TIMEOUT, f"`{name}` timed out earlier (not called again)")
            ready, self.ready = self.ready, None
            if ready is not None and ready[0] == name and _same(ready[1], args) and _same(ready[2], kwargs):
                return self.value(name, ready[3])
            return self.value(name, self._outcome(name, args, kwargs, None))

        return call

    def _outcome(self, name, args, kwargs, reuse):
        outcome = None
        if self.gradients and self._small(args, kwargs, reuse):
            outcome = self.submission.call_grad(
                name,
                args,
                kwargs,
                projection_seed=PROJECTION_SEED,
                timeout=self.timeout,
                keep=self.keep,
                reuse=reuse,
                limit=self.limit,
            )
            if outcome.status == replies.RAISED:
                outcome = None  # it may raise under autograd only (.numpy()): its values still count
            else:
                self.last_grad = (name, outcome)
        if outcome is None:
            outcome = self.submission.call(
                name, args, kwargs, timeout=self.timeout, keep=self.keep, reuse=reuse, limit=self.limit
            )
        return outcome

    def ahead(self, name, args, kwargs, *, keep, reuse, limit=None):
        """Say that ``name`` is called next (as :meth:`fetch` would call it, with ``keep``)."""
        grad = self.gradients and self._small(args, kwargs, reuse)
        self.submission.ahead(
            name, args, kwargs, projection_seed=PROJECTION_SEED if grad else None, keep=keep, reuse=reuse, limit=limit
        )

    def _small(self, args, kwargs, reuse):
        """_differentiable(args, kwargs), once per batch for the arguments the grader calls ``reuse``."""
        if reuse is None:
            return _differentiable(args, kwargs)
        if reuse not in self._differentiable:
            self._differentiable[reuse] = _differentiable(args, kwargs)
        return self._differentiable[reuse]

    def value(self, name, outcome):
        """The outcome's value, or the CallFailed that says why there is none."""
        details = "\n".join(outcome.traceback) + (
            f"\noutput:\n{replies.printed(outcome.output)}" if outcome.output else ""
        )
        if outcome.status == replies.OK:
            return outcome.value
        if outcome.status == replies.TIMEOUT:
            self.timed_out.add(name)
            raise CallFailed(Status.TIMEOUT, f"`{name}`: {outcome.message}", details)
        if outcome.status == replies.NOT_IMPLEMENTED:
            raise CallFailed(Status.NOT_IMPLEMENTED, f"`{name}` raised {outcome.message}", details)
        if outcome.status == replies.CRASHED:
            raise CallFailed(Status.IMPLEMENTATION_ERROR, f"`{name}` crashed: {outcome.message}", details)
        if outcome.status == replies.TOO_LARGE:
            raise CallFailed(Status.IMPLEMENTATION_ERROR, f"`{name}` returned {outcome.message}", details)
        raise CallFailed(Status.IMPLEMENTATION_ERROR, f"`{name}` raised {outcome.message}", details)


def _same(a, b):
    """The same argument objects (a list or tuple of them, or a dict of them by name)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(a[k] is b[k] for k in a)
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _differentiable(args, kwargs):
    """Floating tensor inputs, none over GRADIENT_LIMIT elements: gradients come with the value."""
    tensors = [t for t in wire.tensors_in([list(args), kwargs]) if t.is_floating_point()]
    return bool(tensors) and max(t.numel() for t in tensors) <= GRADIENT_LIMIT
