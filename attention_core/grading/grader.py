"""Grading: every graded check of the case files, run against a submission out of process.

The grader makes each check's inputs and evaluates a graded call's arguments itself, sends the
tensors to the submission's process, and compares what comes back here; expected values never
leave this process. For each graded call on floating inputs a second check, ``…/backward``,
asks the submission's process for the gradients of a fixed random projection of the outputs
and compares them with the float64 torch route's, and fails a call that changed its input
tensors in place.
"""

import contextlib
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from attention_core import assignment as assignments
from attention_core import instances
from attention_core.grading import archives, client, feedback, generated, notebooks, properties, replies, sandbox, wire
from attention_core.grading.diagnose import Diagnoser, calls_of, leading_slice
from attention_core.grading.remote import GRADIENT_LIMIT, PROJECTION_SEED, RemoteFunctions
from attention_core.harness import compare, runner, tolerance, torch_route
from attention_core.harness.model import ShapeExpectation
from attention_core.harness.results import CallFailed, Failure, Result, Status
from attention_core.harness.text import escape, first_given
from attention_core.harness.text import points as points_text

SHARE_LIMIT = 1 << 16  # an argument with this many elements or more is stored in the worker server once
REPLY_ROOM = 1 << 20  # bytes of a reply beyond its tensors: the messages, a traceback, the labels
PROPERTY_REPLY = 1 << 20  # the same for a submission's property calls together


@dataclass
class Grade:
    """One check of one submission: its result, points and what the feedback says."""

    check_id: str
    item: object  # the check's CheckItem (or the load error's item)
    result: Result
    score: float
    max_score: float
    visibility: str = "visible"
    source: str = ""  # the document and cell the check comes from
    diagnosis: str = ""
    call: str = ""  # the call as the student's function sees it (feedback.call_text)
    charged: str = ""  # what else this check's score stands for (its gradients, not checked: one charge)


@dataclass
class SubmissionGrade:
    """A submission graded: its name, each check's grade, and what happened at import."""

    name: str
    path: Path
    grades: list = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""  # import problems and other messages for the whole submission
    protections: dict = field(default_factory=dict)  # the sandbox's: "held" and "missing" (name -> why)

    @property
    def score(self):
        return sum(g.score for g in self.grades)

    @property
    def max_score(self):
        return sum(g.max_score for g in self.grades)


def sandbox_warning(protections):
    """A loud paragraph naming each protection of the sandbox that was not in force; "" when all were."""
    missing = (protections or {}).get("missing") or {}
    if not missing:
        return ""
    lines = [f"WARNING: this submission ran without {len(missing)} of the sandbox's protections "
             f"(see docs/isolation.md):"]
    lines += [f"  - {sandbox.NAMES.get(name, name)}: not in force ({why})" for name, why in missing.items()]
    return "\n".join(lines)


def submission_name(path):
    """A submission's name: its file or folder name without ``.py`` (or ``.ipynb``, ``.zip``)."""
    path = Path(path)
    return path.stem if path.suffix == ".py" or notebooks.is_notebook(path) or archives.is_zip(path) else path.name


class Grader:
    """Grades submissions against the graded checks of an assignment, with one worker server.

    ``assignment``: an Assignment, or an assignment's folder (default: the built-in one); ``cases``: another
    folder of case files for it. A time limit or gradient points given here win over the assignment's.
    """

    def __init__(self, cases=None, *, assignment=None, call_timeout=None, budget=None, gradient_points=None,
                 property_points=None):
        self.assignment = assignment = assignments.resolve(assignment, cases)
        settings = assignment.settings
        folder = Path(assignment.cases)
        self._locations = runner.locations_relative_to(folder.resolve().parent)  # not the grader's own folders
        self.items = [i for i in runner.collect(folder, assignment) if i.error is not None or i.check.kind == "call"]
        self.call_timeout = settings.call_timeout if call_timeout is None else call_timeout
        self.budget = settings.budget if budget is None else budget
        self.gradient_points = settings.gradient_points if gradient_points is None else gradient_points
        self.property_points = settings.property_points if property_points is None else property_points
        self._probes = None  # the assignment's properties (made on first use: the reference is run for them)
        self.preparation = runner.Preparation()  # inputs and arguments, made once for the whole batch
        # The mutant library names mistakes of the built-in spec's functions only.
        # and mistakes made from the reference itself (generated.py) name those of any assignment's names.
        made = generated.generate(assignment)
        self.diagnoser = Diagnoser(self.preparation, generated=made, reference_functions=assignment.functions) \
            if assignment.builtin else Diagnoser(self.preparation, library=(), generated=made,
                                                  calls=calls_of(assignment.reference, assignment.names),
                                                  reference_functions=assignment.functions)
        self._route = torch_route.FUNCTIONS if assignment.builtin else assignment.functions
        self._worker = None
        self._golden_grads = {}
        self._call_texts = {}  # check -> the call as the student's function sees it
        self._judged = {}  # (check, the reply's bytes[, "backward"]) -> the Result they gave: judged once
        self._reads = {i: _read_results(i.check) for i in self.items if i.error is None}  # the results each reads
        self._differentiable, self._sliced = {}, {}  # per check, for the batch: see their uses
        self._bounds = {}  # check -> the most bytes its reply may have (see _reply_bound)
        self._threads = None

    def __enter__(self):
        # The grader's own tensors are small: one thread avoids thread-pool overhead on every operation.
        self._threads = torch.get_num_threads()
        torch.set_num_threads(1)
        self._locations.__enter__()
        self._notebooks = tempfile.TemporaryDirectory(prefix="attention-notebooks-")
        self._worker = self._new_worker()
        return self

    def __exit__(self, *exc):
        try:
            self._worker.close()
        finally:
            self._notebooks.cleanup()
            torch.set_num_threads(self._threads)
            self._locations.__exit__(*exc)

    def grade(self, path, *, into=None):
        """Grade one submission (a ``.py`` file or a folder); ``into``: the SubmissionGrade to fill, check
        by check (another thread may read what is graded so far)."""
        path = Path(path)
        opened = self._on_a_live_server(path, self._set_up(path))
        return self._graded(path, opened, into, lambda submission: submission and submission.close())

    def grade_each(self, paths):
        """Grade each of ``paths`` (any iterable) in turn, yielding its SubmissionGrade.

        Once a submission's calls are made, the next path is read and the grading server sets its
        process up (its sandbox built; nothing of the submission runs before its turn) and collects
        the one before, while the grader diagnoses and the caller writes out: that work goes on beside
        the grader's own rather than between submissions. The next path is not read any earlier, so
        that grader processes sharing one queue take a submission only when about to grade it.
        """
        paths = iter(paths)
        upcoming = None  # (path, the future of its set-up): the next submission
        with ThreadPoolExecutor(1, thread_name_prefix="grading-server-chores") as chores:
            def calls_made(submission):
                nonlocal upcoming
                if submission is not None:
                    chores.submit(submission.close)
                following = next(paths, None)
                if following is not None:  # (upcoming is None here: taken, or not yet set)
                    upcoming = (Path(following), chores.submit(self._set_up, Path(following)))

            calls_made(None)
            try:
                while upcoming is not None:
                    (path, future), upcoming = upcoming, None
                    opened = future.result()  # (the one before it collected first)
                    yield self._graded(path, self._on_a_live_server(path, opened), None, calls_made)
            finally:
                with contextlib.suppress(Exception):  # never in place of the exception that ends the batch
                    if upcoming is not None and upcoming[1].result()[0] is not None:
                        upcoming[1].result()[0].close()

    def _on_a_live_server(self, path, opened):
        """``opened`` (see :meth:`_set_up`); where the grading server failed (it died, and the process set
        up for the submission with it), a new server and the submission set up there once more: the
        grading machinery's failure is never a submission's."""
        if not opened[2] and self._worker.alive():
            return opened
        if opened[0] is not None:
            opened[0].close()
        self._restart()
        return self._set_up(path)

    def _set_up(self, path):
        """(the submission's process, set up but not started, or None; why none; whether the server failed).
        A notebook is graded as the module that runs its code cells (``notebooks.py``), made here first."""
        link = _first_link(path)
        if link is not None:
            return None, (f"the submission could not be opened: {escape(str(link))} is a symbolic link; a submission "
                          f"is read as data, and its links are never followed"), False
        try:
            if archives.is_zip(path):  # unpacked here under bounds, then graded as what it holds
                path = archives.unpack(path, tempfile.mkdtemp(dir=self._notebooks.name))
            if path.is_dir() and not any(path.glob("*.py")):
                inside = sorted(path.glob("*.ipynb"))
                path = inside[0] if len(inside) == 1 else path  # a folder holding one notebook: that notebook
            if notebooks.is_notebook(path):
                path = notebooks.write_module(path, tempfile.mkdtemp(dir=self._notebooks.name))
            return self._worker.open(path, start=False), "", False
        except ValueError as err:  # a folder with no single entry module; a notebook that cannot be read
            return None, f"the submission could not be opened: {err}", False
        except client.WorkerError as err:  # the grading server failed: this submission fails, the batch goes on
            return None, f"the grading server failed while opening the submission: {err}", True

    def _graded(self, path, opened, into, calls_made):
        """The submission ``opened`` (see :meth:`_set_up`) graded; ``calls_made(submission or None)`` is
        called once its calls are made (or could not be); should grading itself fail, it is closed."""
        start = time.monotonic()
        graded = into if into is not None else SubmissionGrade(submission_name(path), path)
        submission, graded.note, _ = opened
        try:
            if submission is not None and submission.start().status != replies.OK:
                graded.note = f"the submission could not be imported: {submission.message}\n" + \
                              "\n".join(submission.traceback)
            functions = (RemoteFunctions(submission, self.call_timeout, gradients=self.gradient_points > 0,
                                         differentiable=self._differentiable) if submission is not None else None)
            problem = graded.note
            if submission is not None:
                graded.protections = submission.protections
                printed = f"Printed at import:\n{submission.output}" if submission.output else ""
                graded.note = "\n\n".join(filter(None, [sandbox_warning(submission.protections), problem, printed]))
            for item, following in zip(self.items, [*self.items[1:], None]):
                if following is not None and functions is not None:
                    self._say_next(following, functions)
                graded.grades += self._grade_item(item, submission, functions, problem)
            graded.grades += self._property_grades(submission, functions, problem)
        except BaseException:
            if submission is not None:
                submission.close()
            raise
        calls_made(submission)
        self.diagnoser.explain(graded)
        graded.seconds = time.monotonic() - start
        return graded

    def _restart(self):
        """A new worker server in place of one that failed."""
        old, self._worker = self._worker, self._new_worker()
        try:
            old.close()
        except Exception:  # noqa: BLE001 (it is gone already)
            pass

    def _new_worker(self):
        """A worker server holding the graded calls' large arguments (its children inherit them)."""
        worker = client.Worker(budget=self.budget, names=self.assignment.names)
        large = []
        for item in self.items:
            if item.error is None:
                try:
                    _, args, kwargs = self.preparation.arguments(item, "cpu")
                except Exception:  # noqa: BLE001 (a case mistake: the check reports it when it runs)
                    continue
                large += [t for t in wire.tensors_in([args, kwargs]) if t.numel() >= SHARE_LIMIT]
        worker.share(large)
        return worker

    def _grade_item(self, item, submission, functions, problem):
        if item.error is not None:  # a case file that does not load: reported, worth nothing
            return [Grade(item.id, item, runner.run(item), 0.0, 0.0)]
        override = self.assignment.settings.override(item.id)
        points = float(first_given(override.points, item.check.points, 1.0))
        visibility = override.visibility or item.check.visibility or "visible"
        gradient_points = float(first_given(override.gradient_points, self.gradient_points))
        source = _source(item)
        refused = self._case_refused(item)
        if refused:  # worth nothing to anyone: no implementation can pass it
            return [Grade(item.id, item, Result(Status.CASE_ERROR, item.id, item.location, message=refused),
                          0.0, 0.0, visibility, source)]
        if functions is None or submission.status != replies.OK:
            result = Result(Status.IMPLEMENTATION_ERROR, item.id, item.location, message=problem.split("\n")[0])
        else:
            functions.last_grad, functions.keep, functions.limit = None, self._reads[item], self._reply_bound(item)
            result = self._value_result(item, functions)
        if result.status in (Status.CASE_ERROR, Status.HARNESS_ERROR):  # the case's fault, or ours: no one's to pay
            return [Grade(item.id, item, result, 0.0, 0.0, visibility, source)]
        call = self._call_texts.setdefault(item, self._call_text(item))
        value = Grade(item.id, item, result, self._value_score(item, result, points), points, visibility, source,
                      call=call)
        if gradient_points <= 0 or not self._has_backward(item):
            return [value]
        if not result.passed:  # one charge per mistake: its gradients are not checked, and charged with it
            value.max_score += gradient_points
            why = "the values are wrong" if result.status is Status.FAILED else "the call returned no values"
            value.charged = (f"Its gradients were not checked: {why}. This check stands for its backward check's "
                             f"{points_text(gradient_points)} point{'s' * (gradient_points != 1)} too: one mistake, "
                             f"charged once.")
            return [value]
        backward = self._backward(item, submission, functions, result)
        score = gradient_points if backward.passed else 0.0
        return [value, Grade(backward.check_id, item, backward, score, gradient_points, visibility, source,
                             call=call)]

    def _value_score(self, item, result, points):
        """The points a value check earns: all of them where it passed; where only some of the results its
        expectations read are wrong (or missing), their share of the points for each result that is right;
        else none."""
        if result.passed:
            return points
        read = [item.check.returns[i] for i in self._reads[item]]
        if result.status is not Status.FAILED or not read:
            return 0.0
        targets = {e.target: e for e in item.check.expectations}
        wrong = set()
        for failure in result.failures:
            expectation = targets.get(failure.target)
            named = {failure.target, *expectation.expr.names} if expectation is not None else \
                set(failure.target.split(", "))
            wrong |= named & set(read)
        return points * (len(read) - len(wrong)) / len(read)

    def _has_backward(self, item):
        """Whether ``item`` has a backward check (floating inputs small enough, a floating output), per batch."""
        if item not in self._sliced:
            self._sliced[item] = self._backward_call(item)
        if self._sliced[item] is None:
            return False
        name, args, kwargs, _ = self._sliced[item]
        return self._golden(item, name, args, kwargs) is not None

    def _reply_bound(self, item):
        """The most bytes a reply to the call ``item`` checks can need: twice the reference's results, three
        times the arguments (gradients, the arguments as the call left them), and room for its messages.
        Once per check and batch; None where the reference's results cannot be made (the worker's limit)."""
        if item not in self._bounds:
            bound = None
            try:
                _, args, kwargs = self.preparation.arguments(item, "cpu")
                made = runner.outputs(item, preparation=self.preparation)
                if isinstance(made, dict):
                    bound = 2 * _nbytes(list(made.values())) + 3 * _nbytes([args, kwargs]) + REPLY_ROOM
            except Exception:  # noqa: BLE001 (the check reports its own case mistake)
                bound = None
            self._bounds[item] = bound
        return self._bounds[item]

    def _call_text(self, item):
        """The call ``item`` makes, as the student's function sees it (see feedback.call_text); "" where its
        arguments cannot be made."""
        call = self._graded_call(item)
        return "" if call is None else feedback.call_text(self.assignment.graded.get(call[0]), *call)

    def _say_next(self, item, functions):
        """Tell the submission the call ``item`` will make (it computes it while this one is judged)."""
        call = None if item.error is not None or self._case_refused(item) else self._graded_call(item)
        if call is not None and call[0] not in functions.timed_out:
            functions.ahead(*call, keep=self._reads[item], reuse=item, limit=self._reply_bound(item))

    def _case_refused(self, item):
        """Why the call ``item`` checks cannot be asked of anyone (a result too large to check, or
        arguments the reference core itself raises on: a mistake of the case file), once per check
        and batch; None where it runs."""
        if item.error is not None:
            return None
        try:
            self.preparation.arguments(item, "cpu")
        except Exception as err:  # noqa: BLE001 (the case's own mistake: a missing seed, arguments that fail)
            return f"the arguments of `{item.check.expr.source}` could not be made: {err}"
        return self.preparation.oversized(item, "cpu") or self.preparation.refused(item, "cpu")

    def _graded_call(self, item):
        """(name, args, kwargs) of the call ``item`` checks; None where its arguments cannot be made
        (a case mistake: the check's run reports it)."""
        try:
            return self.preparation.arguments(item, "cpu")
        except Exception:  # noqa: BLE001
            return None

    def _value_result(self, item, functions):
        """The check run with the submission's functions. Its call is made first: a reply this batch
        has already judged for this check (another submission's same bytes) gets the same result."""
        key, call = None, self._graded_call(item)
        if call is not None and call[0] in functions.submission.names and call[0] not in functions.timed_out:
            reply = functions.fetch(*call, reuse=item).reply
            key = None if reply is None else (item, reply)
        result = self._judged_once(key, lambda: runner.run(item, functions=functions, preparation=self.preparation))
        functions.ready = None
        return result

    def _judged_once(self, key, judge):
        """``judge()``, kept under ``key`` (a check and the reply's bytes) for the batch; None: not kept."""
        if key is None:
            return judge()
        if key not in self._judged:
            self._judged[key] = judge()
        return self._judged[key]

    # ---------------------------------------------------------------- properties

    @property
    def probes(self):
        """The assignment's properties (see properties.py), made once per grader."""
        if self._probes is None:
            runnable = [i for i in self.items if i.error is None and not self._case_refused(i)]
            self._probes = properties.probes(self.assignment, runnable, self.preparation, self.property_points)
            self.diagnoser.probes = self._probes
        return self._probes

    def _property_grades(self, submission, functions, problem):
        """A grade per property: every property's calls made in one round trip (a second one for the calls
        made from the first's results), then each relation judged here."""
        probes = self.probes
        if not probes:
            return []
        values = {}
        if functions is None or submission.status != replies.OK:
            failed = CallFailed(Status.IMPLEMENTATION_ERROR, problem.split("\n")[0] or "the submission did not import")
        else:
            failed = None
            self._make_property_calls([c for p in probes for c in p.calls], submission, functions, values, "properties")
            more = properties.second_calls(probes, values)
            if more:
                self._make_property_calls(more, submission, functions, values, None)
        grades = []
        for probe in probes:
            why, broken = (failed.status, failed.message) if failed is not None else probe.verdict(values)
            item = properties.PropertyItem(probe)
            status = Status.PASSED if broken is None else why or Status.FAILED
            result = Result(status, probe.id, item.location, f"property: {probe.title}", message=broken or "")
            override = self.assignment.settings.override(probe.id)
            grades.append(Grade(probe.id, item, result, probe.points if broken is None else 0.0, probe.points,
                                override.visibility or self.assignment.settings.visibility, "property",
                                call=self._property_call_text(probe)))
        return grades

    def _make_property_calls(self, calls, submission, functions, values, reuse):
        """Make ``calls`` (each once, in order) and put each one's value, or CallFailed, in ``values``."""
        unique = list({id(c): c for c in calls}.values())
        asked = []
        for call in unique:
            if call.name in functions.timed_out:
                values[call] = CallFailed(Status.TIMEOUT, f"`{call.name}` timed out earlier (not called again)")
            elif call.name not in submission.names:
                values[call] = CallFailed(Status.NOT_IMPLEMENTED, f"the implementation has no `{call.name}`")
            else:
                asked.append(call)
        limit = PROPERTY_REPLY + sum(4 * _nbytes([c.args, c.kwargs]) + (64 << 10) for c in asked)
        outcomes = submission.call_all([(c.name, c.args, c.kwargs) for c in asked], timeout=self.call_timeout,
                                       reuse=reuse, limit=limit)
        names = list(dict.fromkeys(c.name for c in asked))
        if len(names) > 1 and outcomes and outcomes[0].status in (replies.TIMEOUT, replies.CRASHED):
            # One call hung or killed the process: each name's calls again on their own, so that it is that
            # name's properties alone that fail.
            by_name = {}
            for name in names:
                mine = [c for c in asked if c.name == name]
                by_name.update(zip(map(id, mine), submission.call_all([(c.name, c.args, c.kwargs) for c in mine],
                                                                      timeout=self.call_timeout, limit=limit)))
            outcomes = [by_name[id(c)] for c in asked]
        for call, outcome in zip(asked, outcomes):
            try:
                values[call] = functions.value(call.name, outcome)
            except CallFailed as failed:
                values[call] = failed

    def _property_call_text(self, probe):
        if probe.id not in self._call_texts:
            call = probe.parts[0].base.call if probe.parts and probe.parts[0].base is not None else None
            self._call_texts[probe.id] = "" if call is None else feedback.call_text(
                self.assignment.graded.get(call.name), call.name, call.args, call.kwargs)
        return self._call_texts[probe.id]

    # ---------------------------------------------------------------- the backward check

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
            outcome = submission.call_grad(name, args, kwargs, projection_seed=PROJECTION_SEED,
                                           timeout=self.call_timeout, reuse=(item, "backward"),
                                           limit=self._reply_bound(item))
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
        full = (args[len(record):], kwargs)
        args, kwargs = leading_slice(full[0], GRADIENT_LIMIT), leading_slice(kwargs, GRADIENT_LIMIT)
        if max((t.numel() for t in wire.tensors_in([args, kwargs]) if t.is_floating_point()), default=0) > \
                GRADIENT_LIMIT:
            return None
        return name, [*record, *args], kwargs, args is not full[0] or kwargs is not full[1]

    def _gradient_failures(self, item, name, outcome, golden):
        """(status, failures) of a backward check from the call's outcome and the torch route's gradients."""
        failures = []
        mutated = self._mutated(item, outcome)
        if mutated:
            which = ", ".join(_label(label, name, self.assignment) for label in mutated)
            failures.append(Failure("inputs", item.check.line, compare.Mismatch(
                "side effect", f"`{name}` changed its input {which} in place: a graded function leaves the caller's "
                               f"tensors alone (compute into a new tensor: `q = q * scale`, not `q *= scale`)")))
        if outcome.grad_error:
            failures.append(Failure("gradient", item.check.line, compare.Mismatch(
                "gradient", f"backward failed: {outcome.grad_error}")))
        values = _reads_values(item.check)  # a check of shapes holds its gradients to their shapes
        if mutated:  # an input changed in place: the gradients are of other inputs; that change is the mistake
            return Status.FAILED, failures
        for label, want in golden.items():
            got = (outcome.grads or {}).get(label)
            target = f"d/d{_label(label, name, self.assignment)}"
            if got is None:
                failures.append(Failure(target, item.check.line, compare.Mismatch(
                    "gradient", f"no gradient reaches {_label(label, name, self.assignment)}: the computation leaves autograd "
                                f"(a `.detach()`, a round trip through `.tolist()` or NumPy, or `torch.no_grad()`)")))
                continue
            if not values:
                mismatch = None if got.shape == want.shape else compare.Mismatch(
                    "shape", f"the gradient's shape {list(got.shape)} is not its input's {list(want.shape)}")
            else:
                rtol, atol = tolerance.gradient_tolerance(item.case.dtype, self._noise(item, label))
                mismatch = compare.compare_full(got, want, rtol=rtol, atol=atol)
            if mismatch is not None:
                failures.append(Failure(target, item.check.line, mismatch, tuple(got.shape)))
        return Status.FAILED if failures else Status.PASSED, failures

    def _mutated(self, item, outcome):
        """The labels of the tensor arguments the call changed in place, told here: the arguments as the call
        left them (sent back) against the grader's own copies. A label the grader did not send is no label;
        an argument that did not come back counts as changed. The submission's own report is not read."""
        _, args, kwargs, _ = self._sliced[item]
        sent = {**{i: a for i, a in enumerate(args) if isinstance(a, torch.Tensor)},
                **{k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}}
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
                moved = [_route_grads(self._route, name, *_moved(args, kwargs, item.case.dtype, seed), torch.float64)
                         for seed in range(tolerance.GRADIENT_PERTURBATIONS)] if wide is not None else []
            except Exception:  # noqa: BLE001 (the route's own rounding is the allowance then)
                moved = []
            self._golden_grads[item] = (wide, own, moved)
        return self._golden_grads[item][0]

    def _noise(self, item, label):
        """How far a correct gradient in the case's dtype may be from float64's: the torch route's own rounding,
        or the change a relative ±eps move of the inputs makes (see tolerance.GRADIENT_PERTURBATIONS)."""
        wide, own, moved = self._golden_grads[item]
        changes = [tolerance.max_change(g[label], wide[label]) for g in [own, *moved]
                   if g is not None and g.get(label) is not None and wide.get(label) is not None]
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
        made = instances.implementation_instance(function.cls, {instances.INSTANCE: {
            **record, "state": state, "dtype": str(dtype).removeprefix("torch.")}})
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
    return {label: (g.to(torch.float64) if g is not None else torch.zeros_like(t, dtype=torch.float64))
            for (label, t), g in zip(labelled.items(), grads)}


def _nbytes(value):
    """The bytes of the tensors in ``value`` (lists, tuples, dicts, an instance record's state included)."""
    return sum(t.numel() * t.element_size() for t in wire.tensors_in(value))


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


def _read_results(check):
    """The positions of the results a check's expectations read (by name or in an expression)."""
    read = set()
    for expectation in check.expectations:
        read |= {expectation.target} | set(expectation.expr.names)
    return [i for i, name in enumerate(check.returns) if name in read]


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


def _first_link(path):
    """The first symbolic link at or under ``path`` (its folders walked without following links), or None."""
    if os.path.islink(path):
        return path
    if os.path.isdir(path):
        for root, folders, files in os.walk(path, followlinks=False):
            for name in sorted(folders + files):
                if os.path.islink(os.path.join(root, name)):
                    return Path(root, name)
    return None





def _source(item):
    source = item.check.source
    parts = [getattr(source, "title", None), getattr(source, "cell", None)]
    return escape(", ".join(p for p in parts if p))
