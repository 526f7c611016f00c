"""What a check needs that no implementation changes, made once per check and device (grading a batch)."""

from attention_core.harness.checking import unwritten
from attention_core.harness.checking.calls import graded_arguments, oracles, reference_of
from attention_core.harness.checking.inputs import materialise
from attention_core.harness.checking.refusals import reference_refuses, too_large


class Preparation:
    """What a check needs that no implementation changes, made once per check and device.

    A case's inputs, a graded call's arguments (evaluated with the reference core) and its
    oracle values: grading many submissions reuses them. What an implementation is handed is a
    copy, so a call that writes into its inputs changes nothing here (a large input's copy costs nothing until
    written: ``unwritten.py``).
    """

    def __init__(self):
        self._made = {}

    def clear(self):
        self._made.clear()

    def scope(self, item, device):
        """A case's inputs; a large one kept so that each call's copy of it costs nothing until written."""

        def make():
            scope, kept = materialise(item.case, device=device), {}  # (inputs that are one tensor: one file)
            for name, value in scope.items():
                if id(value) not in kept:
                    kept[id(value)] = unwritten.kept(value)
                scope[name] = kept[id(value)]
            return scope

        return self._once(("scope", item, device), make)

    def arguments(self, item, device):
        """A graded call's (function name, args, kwargs)."""

        def make():
            return graded_arguments(
                item.check, item.case, self.scope(item, device), reference_of(item), device, item.case.dtype
            )

        return self._once(("arguments", item, device), make)

    def oracles(self, item):
        return self._once(("oracles", item), lambda: oracles(item))

    def refused(self, item, device):
        """Why the reference core raises on the graded call of ``item`` (see :func:`reference_refuses`); None
        where it runs. Asked once per check: of every implementation that raises there, and by the grader."""
        return self._once(
            ("refused", item, device),
            lambda: reference_refuses(item.check.expr.source, self.arguments(item, device), reference_of(item)),
        )

    def oversized(self, item, device):
        """Why the graded call of ``item`` would return a result too large to check (see
        :func:`too_large`); None where its results fit or it cannot be told. Asked once per check."""
        return self._once(
            ("oversized", item, device), lambda: too_large(item.check.expr.source, self.arguments(item, device))
        )

    def _once(self, key, make):
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]
