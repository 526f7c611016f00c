"""Feedback that names the mistake: a failed check compared with the shipped mutants.

A mutant is the reference core with one known mistake (``mutants.py``). When a student's
output agrees with a mutant's and not with the reference's, or fails the way the mutant fails
(raising where it raises), the feedback names that mistake in the spec's words and says how to
fix it. Mutants are run here, in the grader (they are our code), once per check and batch. On a
large check, a mutant is first run on the first batch entry of the inputs: one whose results
there already disagree with the student's is not run on the whole.
"""

import inspect
import re
import warnings
import weakref

import torch

from attention_core import reference, spec
from attention_core.grading.naming import generated, mutants
from attention_core.grading.naming.kept import Kept
from attention_core.grading.properties.model import is_property
from attention_core.grading.server import wire
from attention_core.harness.checking import compare, runner, tolerance
from attention_core.harness.checking.results import Status

SAMPLE = 4096  # elements of a large result compared first
RESULTS_BYTES = 72 << 20  # of the mistakes' results kept for the batch, per slot (a large check's: 32 MB)
LARGE = 1 << 16  # elements of an argument from which a check's mutants are tried on the first batch entry first


def calls_of(module, names):
    """Graded name -> the other graded names its version in ``module`` (a reference) calls or makes."""
    called = {}
    for name in names:
        try:
            source = inspect.getsource(getattr(module, name))
        except (OSError, TypeError, AttributeError):
            source = ""
        called[name] = [other for other in names if other != name and re.search(rf"\b{other}\(", source)]
    return called


CALLS = calls_of(reference, spec.NAMES)


# Generated kinds named only where no other kind gives the same results: a fixed axis equals an axis counted from
# the end at the rank graded, and which of the two was written, the results cannot tell.
FALLBACK_KINDS = frozenset({"axis_fixed"})


class Diagnoser:
    """Names known mistakes behind failed checks; caches each mutant's result per check."""

    def __init__(
        self, preparation=None, library=mutants.MUTANTS, calls=CALLS, generated=(), probes=(), reference_functions=None
    ):
        self.library, self.calls = library, calls
        # mistakes made from the reference (generated.py), named where singled out: a list, or what makes one
        # (called on first need: a batch where nothing fails never makes them)
        self._generated = generated
        self.probes = list(probes)  # the assignment's properties: a mutant's verdicts on them are evidence too
        self.reference_functions = reference_functions or {}
        self._verdicts_of = {}  # mutant's name -> {property id: whether it holds}
        self._further = {}  # graded name -> the further calls that tell the mistakes that fit apart
        self.preparation = preparation or runner.Preparation()
        self._first = _FirstEntry(self.preparation)  # large checks' arguments cut to their first batch entry
        # (check, mutant, preparation) -> the mutant's named results, detached (held to a size: run again if dropped)
        self._results = Kept(RESULTS_BYTES)
        self._verdicts = {}  # (check, mutant) -> whether those results pass the check's expectations
        self._found = {}  # id(result) -> the mutants it matched, while that Result lives (the grader shares it)
        self._large = {}  # check -> whether it is large (an argument over LARGE elements)

    def explain(self, graded, ask=None):
        """Fill ``diagnosis`` on every failed grade of a graded submission. ``ask(calls)``: the submission's
        value (or CallFailed) for each of ``calls`` (properties.Call), asked where further inputs must tell
        the mistakes that fit its checks apart from each other and from what it did (None: not asked)."""
        passed = {g.check_id for g in graded.grades if g.result.passed}
        wrong = {_function_of(g) for g in graded.grades if not g.result.passed and g.item.error is None}
        # names with a wrong value somewhere (a check, a property): a mistake that keeps values right is not theirs,
        # not even on a check whose values are right (one that reads shapes alone)
        values_wrong = {
            _function_of(g)
            for g in graded.grades
            if not g.result.passed and g.item.error is None and not g.check_id.endswith("/backward")
        }
        named = []  # (a failed value check, its function, the library's mistakes that fit it)
        for grade in graded.grades:
            if grade.result.passed or grade.item.error is not None or is_property(grade.check_id):
                continue  # a property's failure names itself
            if grade.check_id.endswith("/backward"):
                values_right = (
                    grade.check_id.removesuffix("/backward") in passed and _function_of(grade) not in values_wrong
                )
                grade.diagnosis, grade.mistakes = self._backward(grade.item, grade.result, values_right)
            else:
                key = id(grade.result)
                if key not in self._found:  # a Result the grader shared between submissions: diagnosed once
                    self._found[key] = self.candidates(grade.item, grade.result)
                    weakref.finalize(grade.result, self._found.pop, key, None)
                found = self._found[key]
                function = grade.item.check.function
                if _raised(grade.result) and wrong & set(self.calls.get(function, ())):
                    found = []  # it raises, and so does a function the reference builds it on: no proof of its own
                named.append((grade, function, found))
        for grade, function, found in _fitting_all(named):
            grade.diagnosis = "\n".join(m.told(function) for m in found)
            grade.mistakes = tuple(m.words(function)[0] for m in found)
        self._name_generated(graded.grades, ask)
        _name_failing_parts(graded.grades, self.calls)
        _name_backward_by_values(graded.grades)

    # ---------------------------------------------------------------- mistakes made from the reference

    @property
    def generated(self):
        if callable(self._generated):
            self._generated = list(self._generated())
        return self._generated

    def _name_generated(self, grades, ask=None):
        """For each graded name that lost points on checks no mistake of the library named (all of them, or some:
        softmax(dim=1) is the library's dim -2 on 3-D scores and no mistake of its on 4-D ones): the generated
        mistakes of its code whose results match the student's on every check and property of that name
        (failing where it fails, with its values; passing where it passes), and then on further inputs of
        the same shapes (``ask``), where the submission's results are asked too. One sentence between them:
        it is named on each failed grade of the name (in the library's place, which explained only some); two
        or three, where the library named none: they are given as what it could be.
        The mistakes are generated at the first name that needs them (a correct submission needs none)."""
        by_name = {}
        for grade in grades:
            name = _function_of(grade)
            if name is not None and grade.item.error is None and not grade.check_id.endswith("/backward"):
                by_name.setdefault(name, []).append(grade)
        failing = {name for name, own in by_name.items() if any(not g.result.passed for g in own)}
        for name, own in by_name.items():
            failed = [g for g in own if not g.result.passed]
            checks = [g for g in failed if not is_property(g.check_id)]
            named = [g for g in failed if g.diagnosis]  # by the library (value checks alone): some, maybe all
            if not failed or (named and len(named) == len(checks)):
                continue
            if failing & set(self.calls.get(name, ())):  # a name it is built on fails its own checks: that is
                continue  # the likely cause (named there), not a mistake of how this one calls it
            fitting = [m for m in self.generated if generated.owner_of(m) == name and self._fits(m, own)]
            if fitting and ask is not None:
                fitting = self._confirmed(name, fitting, ask)
            specific = [m for m in fitting if m.name.split(":")[1] not in FALLBACK_KINDS]
            fitting = specific or fitting  # (softmax(dim=2) on 4-D scores is softmax(dim=-2): the student's own)
            sentences = list(dict.fromkeys((m.mistake, m.fix) for m in fitting))
            checks = sum(not is_property(g.check_id) for g in own)
            properties_ = len(own) - checks
            evidence = f"{checks} check{'s' * (checks != 1)}" + (
                f" and {properties_} propert{'ies' if properties_ != 1 else 'y'}" if properties_ else ""
            )
            if len(sentences) == 1:
                ((mistake, fix),) = sentences
                text = (
                    f"Likely mistake: {mistake}. Fix: {fix} (This one mistake alone gives your results, right and "
                    f"wrong, on the {evidence} of `{name}`.)"
                )
            elif 1 < len(sentences) <= 3 and not named:
                text = (
                    f"Possible mistakes (each alone gives your results, right and wrong, on the {evidence} of "
                    f"`{name}`; they cannot tell which): " + "; ".join(m for m, _ in sentences) + "."
                )
            else:
                continue
            for grade in failed:
                grade.diagnosis = text
                grade.mistakes = (sentences[0][0],) if len(sentences) == 1 else ()

    def _fits(self, mutant, grades):
        """Whether ``mutant`` gives what the student got on each of ``grades`` (one graded name's)."""
        for grade in grades:
            if is_property(grade.check_id):
                if self._holds(mutant, grade.check_id) != grade.result.passed:
                    return False
                continue
            item, result = grade.item, grade.result
            if result.status in (Status.CASE_ERROR, Status.HARNESS_ERROR, Status.PENDING):
                continue
            theirs = self._mutant_run(item, mutant)
            if self._passes(item, mutant, theirs) != result.passed:
                return False
            if result.passed:
                continue
            if result.status is Status.FAILED:
                values = theirs if isinstance(theirs, dict) else theirs.outputs
                if not (_agree(result.outputs, values or {}, item) or _same_failures(result, theirs)):
                    return False
            elif isinstance(theirs, dict) or not (_raised(result) and _raised(theirs) and _same_error(result, theirs)):
                return False
        return True

    def _confirmed(self, name, fitting, ask):
        """The mistakes of ``fitting`` that also give the submission's results on further inputs of ``name``
        (each property input set's, drawn again: the same shapes, other values; the same every time)."""
        from attention_core.grading import properties  # noqa: PLC0415

        if name not in self._further:
            self._further[name] = properties.further_calls([p for p in self.probes if p.name == name])
        calls = self._further[name]
        if not calls:
            return fitting
        theirs = ask(calls)
        kept = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for mutant in fitting:
                functions = {**self.reference_functions, **mutant.functions}
                if all(
                    properties.same_outcome(properties.outcome_of(functions, call), theirs.get(call)) for call in calls
                ):
                    kept.append(mutant)
        return kept

    def _holds(self, mutant, property_id):
        if mutant.name not in self._verdicts_of:
            from attention_core.grading import properties  # noqa: PLC0415

            functions = {**self.reference_functions, **mutant.functions}
            owner = generated.owner_of(mutant)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                verdicts = properties.evaluate([p for p in self.probes if p.name == owner], functions)
            self._verdicts_of[mutant.name] = {pid: message is None for pid, (_, message) in verdicts.items()}
        return self._verdicts_of[mutant.name].get(property_id, True)

    def candidates(self, item, result):
        """The value mutants whose result on ``item`` matches the student's ``result``."""
        found = []
        if not (result.status is Status.FAILED or _raised(result)):
            return found  # not called, or no value to compare: no mistake to name
        for mutant in self.library:
            if mutant.breaks != "values" or item.check.function not in mutant.functions:
                continue
            if self._ruled_out(item, mutant, result):
                continue
            theirs = self._mutant_run(item, mutant)
            if isinstance(theirs, dict) or theirs.status is Status.FAILED:  # it returned: does it give the
                values = theirs if isinstance(theirs, dict) else theirs.outputs  # student's values, and fail?
                if (
                    result.status is Status.FAILED
                    and (_agree(result.outputs, values, item) or _same_failures(result, theirs))
                    and not self._passes(item, mutant, theirs)
                ):
                    found.append(mutant)
            elif _raised(result) and _raised(theirs) and _same_error(result, theirs):  # it fails as the mutant fails
                found.append(mutant)
        return found

    def _mutant_run(self, item, mutant, preparation=None):
        """The mutant's named results on ``item`` (runner.outputs), once per check, preparation and batch."""
        preparation = preparation or self.preparation

        def run():
            with warnings.catch_warnings():  # a mutant's own mistake may warn (x.T on a batch): not the grader's
                warnings.simplefilter("ignore")
                base = self.reference_functions or runner.REFERENCE  # (a teacher's own mistakes: their reference)
                found = runner.outputs(item, functions={**base, **mutant.functions}, preparation=preparation)
            if isinstance(found, dict):  # (their values are compared: no autograd graph is kept with them; a result
                read = item.check.read_names()  # no expectation reads is kept as its shape alone, as a student's is)
                return {k: _kept(v, k in read) for k, v in found.items()}
            return found

        return self._results.get((item, mutant.name, preparation), run)

    def _passes(self, item, mutant, theirs):
        """Whether the mutant's results ``theirs`` on ``item`` pass the check's expectations, once per check and
        batch (``theirs`` a Result where its run already failed on the results' structure or dtype)."""
        if not isinstance(theirs, dict):
            return theirs.passed
        key = (item, mutant.name)
        if key not in self._verdicts:
            self._verdicts[key] = runner.judged(item, theirs, preparation=self.preparation).passed
        return self._verdicts[key]

    def _ruled_out(self, item, mutant, result):
        """On a large check, the mutant's run on the first batch entry already tells it apart from the
        student's: it returned where the student raised, or its results disagree with the student's
        there. Only such a clear difference rules a mutant out (its full run is then not needed);
        anything else leaves the question to the full run.
        """
        if item not in self._large:
            self._large[item] = self._first.cuts(item)
        if not self._large[item]:
            return False
        theirs = self._mutant_run(item, mutant, self._first)
        if not isinstance(theirs, dict):
            return False
        if result.status is not Status.FAILED:
            return _raised(result)
        ours = {name: _first_entry(value) for name, value in result.outputs.items()}
        names = [
            n
            for n in item.check.returns
            if isinstance(ours.get(n), torch.Tensor)
            and isinstance(theirs.get(n), torch.Tensor)
            and ours[n].shape == theirs[n].shape
            and "meta" not in (ours[n].device.type, theirs[n].device.type)
        ]
        return bool(names) and not _agree({n: ours[n] for n in names}, {n: theirs[n] for n in names}, item)

    def _backward(self, item, result, values_right):
        """(the feedback naming them, their sentences) of the mutants of the check's function that lose what its
        backward check found lost. A gradient
        mutant's mistake keeps the values right: it is named only where the check's values passed
        (wrong values lose gradients for reasons of their own)."""
        stages = {f.mismatch.stage for f in result.failures}
        no_gradient = values_right and any(
            f.mismatch.stage == "gradient" and "no gradient reaches" in f.mismatch.message for f in result.failures
        )
        found = [
            m
            for m in self.library
            if item.check.function in m.functions
            and ((m.breaks == "side effect" and "side effect" in stages) or (m.breaks == "gradient" and no_gradient))
        ]
        return (
            "\n".join(m.told(item.check.function) for m in found),
            tuple(m.words(item.check.function)[0] for m in found),
        )


def _function_of(grade):
    check = getattr(grade.item, "check", None)
    return getattr(check, "function", None)


def _ran_wrong(result, function):
    """Whether the student's ``function`` ran and was wrong: wrong values, or it raised, crashed or hung
    (not a submission that failed to import, nor a function it does not have)."""
    if result.status in (Status.FAILED, Status.TIMEOUT):
        return True
    return result.status is Status.IMPLEMENTATION_ERROR and result.message.startswith(f"`{function}`")


def _how(result, function):
    """How a function that ran failed: wrong values, out of time, crashed (its process died) or raised."""
    if result.status is Status.IMPLEMENTATION_ERROR:
        return "crashed" if result.message.startswith(f"`{function}` crashed") else "raised"
    return result.status


# How a part fails -> how a caller built on it fails: the same way, or, for a part's wrong values (a wrong shape),
# with an exception of the caller's own (its matmul refuses them). A crash or a hang is never a part's wrong values.
_EXPLAINS = {
    Status.FAILED: {Status.FAILED, "raised"},
    "raised": {"raised"},
    Status.TIMEOUT: {Status.TIMEOUT},
    "crashed": {"crashed"},
}


def _name_failing_parts(grades, calls=CALLS):
    """A failed value check that no mutant explains, of a function whose reference version calls
    spec functions that fail their own checks in this submission: the feedback names them (a
    multi_head_attention built on the student's own wrong attention fails where attention does)."""

    def failing(grade):
        return (
            grade.item.error is None
            and not grade.check_id.endswith("/backward")
            and not is_property(grade.check_id)
            and _ran_wrong(grade.result, grade.item.check.function)
        )

    wrong: dict = {}  # function -> how its checks fail (a part explains a caller that fails as _EXPLAINS says)
    for grade in grades:
        if failing(grade):
            wrong.setdefault(grade.item.check.function, set()).add(_how(grade.result, grade.item.check.function))
    for grade in grades:
        if failing(grade) and not grade.diagnosis:
            function = grade.item.check.function
            how = _how(grade.result, function)
            parts = [
                f"`{name}`"
                for name in calls.get(function, ())
                if any(how in _EXPLAINS.get(way, ()) for way in wrong.get(name, ()))
            ]
            if parts:
                fails, them = ("fails its", "it") if len(parts) == 1 else ("fail their", "them")
                grade.diagnosis = (
                    f"Likely cause: {' and '.join(parts)}, which the reference `{function}` calls, "
                    f"{fails} own checks. Fix: if yours calls {them}, make {them} pass first; "
                    f"these failures may then go too."
                )


def _name_backward_by_values(grades):
    """A failed backward check that nothing named, of a function whose values are wrong on its other checks in
    this submission, where a mistake was named: that mistake is its likely cause (one case's values can come out
    right with it, as without the scale where a row's scores are all equal, and their gradients still be wrong)."""
    named: dict = {}  # function -> its value checks' named mistakes, in order
    for grade in grades:
        found = getattr(grade, "mistakes", ())  # (a check that passed was not explained)
        if found and not grade.check_id.endswith("/backward") and not is_property(grade.check_id):
            named.setdefault(_function_of(grade), {}).update(dict.fromkeys(found))
    for grade in grades:
        function = _function_of(grade)
        if (
            grade.check_id.endswith("/backward")
            and not grade.result.passed
            and not grade.diagnosis
            and named.get(function)
        ):
            mistakes = tuple(named[function])
            grade.mistakes = mistakes
            grade.diagnosis = (
                f"Likely cause: the mistake named on `{function}`'s other checks ({'; '.join(mistakes)}): values "
                f"computed with it can come out right on one case and their gradients still be wrong. Fix: that "
                f"mistake first; this check may then pass too."
            )


class _FirstEntry(runner.Preparation):
    """A preparation whose large checks' arguments are cut to their first batch entry."""

    def __init__(self, base):
        super().__init__()
        self.base = base

    def scope(self, item, device):
        return self.base.scope(item, device)

    def oracles(self, item):
        return self.base.oracles(item)

    def arguments(self, item, device):
        name, args, kwargs = self.base.arguments(item, device)
        return name, leading_slice(args, LARGE), leading_slice(kwargs, LARGE)

    def cuts(self, item):
        """Whether ``item`` is a large check (an argument over LARGE elements)."""
        try:
            _, args, kwargs = self.base.arguments(item, "cpu")
        except Exception:  # noqa: BLE001 (the run reports a case mistake)
            return False
        return any(t.numel() > LARGE for t in wire.tensors_in([args, kwargs]))


def _kept(value, read):
    if not isinstance(value, torch.Tensor):
        return value
    return value.detach() if read else torch.empty_like(value, device="meta")


def leading_slice(value, limit):
    """An argument list (or dict) with its batched tensors (3-D and up) cut to their first entry,
    where any tensor in it has more than ``limit`` elements; else ``value`` itself."""
    if not any(t.numel() > limit for t in wire.tensors_in(value)):
        return value
    if isinstance(value, dict):
        return {k: _first_entry(v) for k, v in value.items()}
    return [_first_entry(v) for v in value]


def _first_entry(value):
    return value[:1] if isinstance(value, torch.Tensor) and value.ndim >= 3 else value


def _raised(result):
    """Whether the implementation ran and raised (not a crash, a hang or a failed import)."""
    return result.status is Status.IMPLEMENTATION_ERROR and result.message.startswith(f"`{_called(result)}` raised")


def _same_error(ours, theirs):
    """Whether two runs that raised raised the same: the same exception and message (the same operation failing
    on the same shapes)."""
    return ours.message.split(" raised ", 1)[-1] == theirs.message.split(" raised ", 1)[-1]


def _called(result):
    return result.message[1:].split("`", 1)[0] if result.message.startswith("`") else ""


def _agree(ours, theirs, item):
    """Whether every result the check names agrees between the two runs."""
    names = [n for n in item.check.returns if n in ours and n in theirs]
    if not names:
        return False
    rtol, atol = tolerance.agreement_tolerance(item.case.dtype)
    for name in names:
        a, b = ours[name], theirs[name]
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            return False
        if "meta" in (a.device.type, b.device.type):
            continue  # a result the check does not read came back as its shape alone
        if not (a.is_floating_point() and b.is_floating_point()):
            if not torch.equal(a.cpu(), b.cpu()):
                return False
            continue
        # two results in a coarser dtype than the case's agree only to that dtype's precision
        coarse = tolerance.agreement_tolerance(max((a.dtype, b.dtype), key=lambda d: torch.finfo(d).eps))
        near, within = max(rtol, coarse[0]), max(atol, coarse[1])
        a, b = a.detach().reshape(-1), b.detach().reshape(-1)
        step = a.numel() // SAMPLE
        if step > 1 and not _close(a[::step], b[::step], near, within):
            return False  # an evenly spread sample settles most disagreements at a fraction of the cost
        if not _close(a, b, near, within):
            return False
    return True


def _same_failures(result, theirs):
    """Whether two failed runs that kept no values (a result of the wrong dtype or structure: it fails before its
    values are read) failed alike: the same targets, each with the same message (``torch.float32 != torch.float64``)."""
    if isinstance(theirs, dict) or result.outputs or theirs.outputs or not result.failures:
        return False
    told = [(f.target, f.mismatch.stage, f.mismatch.message) for f in result.failures]
    return told == [(f.target, f.mismatch.stage, f.mismatch.message) for f in theirs.failures]


def _close(a, b, rtol, atol):
    """Element-wise in float64 |a - b| <= atol + rtol |b|, NaN matching NaN and an infinity only itself (no report)."""
    return compare.every(lambda x, y: torch.isclose(x.double(), y.double(), rtol=rtol, atol=atol, equal_nan=True), a, b)


def _fitting_all(named):
    """``named`` ((a failed value check, its function, the mistakes that fit it), ...) with, for each function whose
    every failed check some mistake fits, only those mistakes named on each: where two fit some checks alike (the
    input's width and the projections' width, equal there), the one that fits them all is the student's."""
    by_function = {}
    for entry in named:
        by_function.setdefault(entry[1], []).append(entry)
    kept = []
    for function, entries in by_function.items():
        every = set.intersection(*({m.name for m in found} for _, _, found in entries))
        if len(entries) < 2 or not every:
            kept += entries
        else:
            kept += [(grade, function, [m for m in found if m.name in every]) for grade, _, found in entries]
    return kept
