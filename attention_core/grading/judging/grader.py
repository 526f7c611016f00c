"""Grading: every graded check of the case files, run against a submission out of process.

The grader makes each check's inputs and evaluates a graded call's arguments itself, sends the
tensors to the submission's process, and compares what comes back here; expected values never
leave this process. For each graded call on floating inputs a second check, ``…/backward``,
asks the submission's process for the gradients of a fixed random projection of the outputs
and compares them with the float64 torch route's, and fails a call that changed its input
tensors in place.
"""

import contextlib
import functools
import queue
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import torch

from attention_core.grading import properties
from attention_core.grading.intake import archives, folders, notebooks, regular
from attention_core.grading.judging.backward import BackwardChecks
from attention_core.grading.judging.grades import Grade, SubmissionGrade, charge_unearned, headline
from attention_core.grading.judging.options import GradingOptions
from attention_core.grading.judging.property_grades import PropertyGrades
from attention_core.grading.naming import feedback, generated, own_mistakes
from attention_core.grading.naming.diagnose import Diagnoser, calls_of
from attention_core.grading.naming.kept import Kept
from attention_core.grading.process import client, replies
from attention_core.grading.process.remote import RemoteFunctions
from attention_core.grading.properties import worth
from attention_core.grading.server import sandbox, wire
from attention_core.harness.checking import runner, torch_route
from attention_core.harness.checking.results import Result, Status
from attention_core.harness.reading import assignment as assignments
from attention_core.harness.reading.model import ShapeExpectation
from attention_core.harness.reading.points import of_check
from attention_core.harness.text import escape, shorten
from attention_core.harness.text import points as points_text

SHARE_LIMIT = 1 << 16  # an argument with this many elements or more is stored in the worker server once
REPLY_ROOM = 1 << 20  # bytes of a reply beyond its tensors: the messages, a traceback, the labels
JUDGED_BYTES, JUDGED_ENTRIES = 32 << 20, 20_000  # the results of replies already judged, kept for the batch


def submission_name(path):
    """A submission's name: its file or folder name without ``.py`` (or ``.ipynb``, ``.zip``)."""
    path = Path(path)
    return path.stem if path.suffix == ".py" or notebooks.is_notebook(path) or archives.is_zip(path) else path.name


class Grader(BackwardChecks, PropertyGrades):
    """Grades submissions against the graded checks of an assignment, with one worker server.

    ``assignment``: an Assignment, or an assignment's folder (default: the built-in one); ``cases``: another
    folder of case files for it. A time limit or gradient points given here win over the assignment's.
    """

    def __init__(
        self, cases=None, *, assignment=None, options: GradingOptions | None = None, entry=None, items=None, **given
    ):
        """``options`` (or its fields given one by one: ``call_timeout=2``) over the assignment's settings;
        ``entry``: the file a folder submission is imported from (default: the one ``folders.read`` finds);
        ``items``: the assignment's case files as already read (``runner.collect``), not read again."""
        self.entry = entry
        self.assignment = assignment = assignments.resolve(assignment, cases)
        if options is not None and given:
            raise TypeError(f"Grader takes options or {', '.join(given)}, not both")
        self.options = (options or GradingOptions(**given)).over(assignment.settings)
        folder = Path(assignment.cases)
        self._locations = runner.locations_relative_to(folder.resolve().parent)  # not the grader's own folders
        read = runner.collect(folder, assignment) if items is None else items
        self.items = [i for i in read if i.error is not None or i.check.kind == "call"]
        self._probes = None  # the assignment's properties (made on first use: the reference is run for them)
        self.preparation = runner.Preparation()  # inputs and arguments, made once for the whole batch
        # The mutant library names mistakes of the built-in spec's functions; mistakes made from the reference
        # itself (generated.py) name those of any assignment's names.
        made = functools.partial(generated.generate, assignment)  # on first need
        # A teacher's own mistakes (mistakes/*.py) are named as the shipped library's are (own_mistakes.py).
        self.diagnoser = (
            Diagnoser(self.preparation, generated=made, reference_functions=assignment.functions)
            if assignment.builtin
            else Diagnoser(
                self.preparation,
                library=own_mistakes.load(assignment)[0],
                generated=made,
                calls=calls_of(assignment.reference, assignment.names),
                reference_functions=assignment.functions,
            )
        )
        self._route = torch_route.FUNCTIONS if assignment.builtin else assignment.functions
        self._worker = None
        self._golden_grads: dict = {}
        self._call_texts: dict = {}  # check -> the call as the student's function sees it
        # (check, the reply's bytes[, "backward"]) -> the Result they gave: judged once, held to a size
        self._judged = Kept(JUDGED_BYTES, JUDGED_ENTRIES)
        self._reads = {i: i.check.read_results() for i in self.items if i.error is None}  # the results each reads
        self._differentiable: dict = {}
        self._sliced: dict = {}  # per check, for the batch: see their uses
        self._bounds: dict = {}  # check -> the most bytes its reply may have (see _reply_bound)
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
        the one before, while the caller writes out: that work goes on beside
        the grader's own rather than between submissions. The next path is not read any earlier, so
        that grader processes sharing a batch ask for a submission only when about to grade it.
        """
        paths = iter(paths)
        upcoming = None  # (path, the future of its set-up): the next submission
        chores, ended = Chores("grading-server-chores"), False

        def calls_made(submission):
            nonlocal upcoming
            if submission is not None:
                chores.submit(submission.close)
            following = next(paths, None)
            if following is not None:  # (upcoming is None here: taken, or not yet set)
                upcoming = (Path(following), chores.submit(self._set_up, Path(following)))

        try:
            calls_made(None)
            while upcoming is not None:
                (path, future), upcoming = upcoming, None
                opened = future.result()  # (the one before it collected first)
                yield self._graded(path, self._on_a_live_server(path, opened), None, calls_made)
            ended = True
        finally:
            # Stopped (^C, SIGTERM, the caller's own end): a set-up still under way is not waited for.
            with contextlib.suppress(Exception):  # never in place of the exception that ends the batch
                if upcoming is not None and (ended or upcoming[1].done()) and upcoming[1].result()[0] is not None:
                    upcoming[1].result()[0].close()
            chores.close(wait=ended)

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
        found = regular.special(path)
        if found is not None:
            odd, what = found
            return (
                None,
                (
                    f"the submission could not be opened: {escape(str(odd))} is {what}; a submission is read as "
                    f"data, regular files in folders, and its links are never followed"
                ),
                False,
            )
        try:
            entry = None
            if archives.is_zip(path):  # unpacked here under bounds, then graded as what it holds
                path = archives.unpack(path, tempfile.mkdtemp(dir=self._notebooks.name))
            if path.is_dir():  # the one rule of folders: its entry file, or why it is not one submission
                reading = folders.read(path, self.assignment.names, self.entry, one=True)
                if reading.kind != "one":
                    return (
                        None,
                        f"the submission could not be opened: {reading.why or folders.several(path, reading)}",
                        False,
                    )
                if notebooks.is_notebook(reading.entry):
                    path = reading.entry  # a folder whose submission is a notebook: that notebook
                else:  # (its entry's own folder: the helpers it imports lie beside it)
                    path, entry = reading.entry.parent, reading.entry.name
            if notebooks.is_notebook(path):
                path = notebooks.write_module(path, tempfile.mkdtemp(dir=self._notebooks.name))
            return self._worker.open(path, entry=entry, start=False), "", False
        except ValueError as err:  # a folder with no single entry module; a notebook that cannot be read
            return None, f"the submission could not be opened: {err}", False
        except client.WorkerError as err:  # the grading server failed: this submission fails, the batch goes on
            return None, f"the grading server failed while opening the submission: {err}", True
        except Exception as err:  # noqa: BLE001 (whatever its files do to the reading of them: this submission's)
            return None, f"the submission could not be opened: {_said(err)}", False

    def _graded(self, path, opened, into, calls_made):
        """The submission ``opened`` (see :meth:`_set_up`) graded; ``calls_made(submission or None)`` is
        called once its calls are made (or could not be); should grading itself fail, it is closed."""
        start = time.monotonic()
        graded = into if into is not None else SubmissionGrade(submission_name(path), path)
        submission, graded.note, _ = opened
        try:
            try:
                self._grade_calls(graded, submission)
            except Exception as err:  # noqa: BLE001 (the grader's fault on this submission: its row, not the batch's end)
                self._not_graded(graded, err)
        except BaseException:
            if submission is not None:
                submission.close()
            raise
        calls_made(submission)
        graded.seconds = time.monotonic() - start
        return graded

    def _grade_calls(self, graded, submission):
        """Fill ``graded`` with the grades of ``submission`` (None: it could not be opened, ``graded.note`` says
        why): each check, then each property, then what is earned only with right values."""
        if submission is not None and submission.start().status != replies.OK:
            graded.note = f"the submission could not be imported: {submission.message}\n" + "\n".join(
                submission.traceback
            )
        functions = (
            RemoteFunctions(
                submission,
                self.options.call_timeout,
                gradients=self.options.gradient_points > 0,
                differentiable=self._differentiable,
            )
            if submission is not None
            else None
        )
        problem = graded.note
        if submission is not None:
            graded.protections = submission.protections
            printed = f"Printed at import:\n{replies.printed(submission.output)}" if submission.output else ""
            missing = [g for g in self.assignment.graded.values() if g.name not in submission.names]
            named = "\n".join(feedback.renamed(missing, submission.others)) if submission.status == replies.OK else ""
            graded.note = "\n\n".join(filter(None, [sandbox.warning(submission.protections), problem, named, printed]))
        for item, following in zip(self.items, [*self.items[1:], None]):
            if following is not None and functions is not None:
                self._say_next(following, functions)
            graded.grades += self._grade_item(item, submission, functions, problem)
        graded.grades += self._property_grades(submission, functions, problem)
        charge_unearned(graded.grades)
        try:  # (while the submission's process is there: further inputs may be asked of it)
            self.diagnoser.explain(graded, ask=lambda calls: self._asked(submission, functions, calls))
        except Exception as err:  # noqa: BLE001 (the grade stands; only the naming of its mistakes failed)
            for grade in graded.grades:
                grade.diagnosis, grade.mistakes = "", ()
            graded.note = "\n\n".join(
                filter(
                    None,
                    [
                        graded.note,
                        f"(The feedback that names mistakes could not be made for this submission: {_said(err)}.)",
                    ],
                )
            )

    def _asked(self, submission, functions, calls):
        """Call -> the submission's value, or CallFailed, for each of ``calls`` (one round trip)."""
        values = {}
        if functions is None or submission is None or submission.status != replies.OK:
            return values
        self._make_property_calls(calls, submission, functions, values, None)
        return values

    def _not_graded(self, graded, err):
        """``graded`` as a row of the grader's own failure ``err``: every check and property at 0 of its points,
        each saying why; the batch writes no record of it, so the next run grades it again."""
        graded.error = (
            f"this submission could not be graded: the grader failed on it ({_said(err)}). This is a "
            f"fault of the grader, not of the submission: it scores 0 until it is graded again "
            f"(--regrade), and the teacher is told"
        )
        graded.note = "\n\n".join(filter(None, [graded.error, graded.note]))
        grades = []
        try:
            for item in self.items:
                result = Result(Status.HARNESS_ERROR, item.id, item.location, message=graded.error)
                if item.error is not None or self._case_refused(item):
                    grades.append(Grade(item.id, item, result, 0.0, 0.0))
                    continue
                points, visibility, gradient_points = self._worth(item)
                grades.append(Grade(item.id, item, result, 0.0, points + gradient_points, visibility, _source(item)))
            for probe in self.probes:
                item = properties.PropertyItem(probe)
                grades.append(
                    Grade(
                        probe.id,
                        item,
                        Result(Status.HARNESS_ERROR, probe.id, item.location, message=graded.error),
                        0.0,
                        probe.points,
                        worth.of_property(self.assignment, probe).visibility,
                        "property",
                    )
                )
        except Exception:  # noqa: BLE001 (its points cannot be told either: the row says why, with none)
            grades = []
        graded.grades = grades

    def _restart(self):
        """A new worker server in place of one that failed."""
        old, self._worker = self._worker, self._new_worker()
        try:
            old.close()
        except Exception:  # noqa: BLE001 (it is gone already)
            pass

    def _new_worker(self):
        """A worker server holding the graded calls' large arguments (its children inherit them)."""
        worker = client.Worker(budget=self.options.budget, names=self.assignment.names)
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
        points, visibility, gradient_points = self._worth(item)
        source = _source(item)
        refused = self._case_refused(item)
        if refused:  # worth nothing to anyone: no implementation can pass it
            return [
                Grade(
                    item.id,
                    item,
                    Result(Status.CASE_ERROR, item.id, item.location, message=refused),
                    0.0,
                    0.0,
                    visibility,
                    source,
                )
            ]
        if functions is None or submission.status != replies.OK:
            result = Result(Status.IMPLEMENTATION_ERROR, item.id, item.location, message=headline(problem))
        else:
            functions.last_grad, functions.keep, functions.limit = None, self._reads[item], self._reply_bound(item)
            result = self._value_result(item, functions)
        if result.status in (Status.CASE_ERROR, Status.HARNESS_ERROR):  # the case's fault, or ours: no one's to pay
            return [Grade(item.id, item, result, 0.0, 0.0, visibility, source)]
        if item not in self._call_texts:  # (made once a batch: setdefault would make it again for each submission)
            self._call_texts[item] = self._call_text(item)
        call = self._call_texts[item]
        value = Grade(
            item.id, item, result, self._value_score(item, result, points), points, visibility, source, call=call
        )
        if gradient_points <= 0:
            return [value]
        if not result.passed:  # one charge per mistake: its gradients are not checked, and charged with it
            value.worth = value.possible
            value.max_score += gradient_points
            value.stands_for = ((f"{item.id}/backward", gradient_points),)
            why = "the values are wrong" if result.status is Status.FAILED else "the call returned no values"
            value.charged = (
                f"Its gradients were not checked: {why}. This check stands for its backward check's "
                f"{points_text(gradient_points)} point{'s' * (gradient_points != 1)} too: one mistake, "
                f"charged once."
            )
            return [value]
        backward = self._backward(item, submission, functions, result)
        score = gradient_points if backward.passed else 0.0
        return [value, Grade(backward.check_id, item, backward, score, gradient_points, visibility, source, call=call)]

    def _worth(self, item):
        """(points, visibility, its backward check's points: 0 where it has none) of the loaded check ``item``."""
        worth_ = of_check(self.assignment, item, self.options.gradient_points)
        gradient_points = worth_.gradient_points if worth_.gradient_points > 0 and self._has_backward(item) else 0.0
        return worth_.points, worth_.visibility, gradient_points

    def points_table(self):
        """(id, kind, points, visibility) of every check, backward check and property a submission is graded on,
        in the order of its grades: what the maximum is made of, before anything is graded."""
        rows = []
        for item in self.items:
            if item.error is not None:
                rows.append((item.id, "case error", 0.0, "visible"))
                continue
            points, visibility, gradient_points = self._worth(item)
            if self._case_refused(item):
                rows.append((item.id, "case error", 0.0, visibility))
                continue
            rows.append((item.id, "value", points, visibility))
            if gradient_points > 0:
                rows.append((f"{item.id}/backward", "backward", gradient_points, visibility))
        for probe in self.probes:
            rows.append((probe.id, "property", probe.points, worth.of_property(self.assignment, probe).visibility))
        return rows

    def _value_score(self, item, result, points):
        """The points a value check earns: all of them where it passed; where only some of the results its
        expectations read the values of are wrong (or missing), their share of the points for each result that is
        right (a result whose shape alone is read earns no share: an answer that computes nothing has it);
        else none."""
        if result.passed:
            return points
        valued = set()
        for expectation in item.check.expectations:
            if not isinstance(expectation, ShapeExpectation):
                valued |= {expectation.target, *expectation.expr.names}
        read = [item.check.returns[i] for i in self._reads[item]]
        if result.status is not Status.FAILED or not read:
            return 0.0
        targets = {e.target: e for e in item.check.expectations}
        wrong = set()
        for failure in result.failures:
            expectation = targets.get(failure.target)
            named = (
                {failure.target, *expectation.expr.names}
                if expectation is not None
                else set(failure.target.split(", "))
            )
            wrong |= named & set(read)
        right = [name for name in read if name in valued and name not in wrong]  # (a shape alone earns no share)
        return points * len(right) / len(read)

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
                    bound = 2 * wire.nbytes(list(made.values())) + 3 * wire.nbytes([args, kwargs]) + REPLY_ROOM
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
        return judge() if key is None else self._judged.get(key, judge)


def points_command(assignment, options, out=None):
    """Print every check's, backward check's and property's points and visibility, and the total, as ``grade``
    would grade them (nothing of a submission is run); 0."""
    out = out or sys.stdout
    rows = Grader(assignment=assignment, options=options).points_table()
    width = max([len("check"), *(len(escape(r[0])) for r in rows)])
    print(f"{'check':<{width}}  {'kind':<10}  {'points':>6}  visibility", file=out)
    for check_id, kind, worth_, visibility in rows:
        print(f"{escape(check_id):<{width}}  {kind:<10}  {points_text(worth_):>6}  {visibility}", file=out)
    total = sum(r[2] for r in rows)
    hidden = sum(r[2] for r in rows if r[3] != "visible")
    feedback = sum(r[1] == "property" and r[2] == 0 for r in rows)
    print(
        f"\ntotal: {points_text(total)} points ({points_text(total - hidden)} visible, {points_text(hidden)} "
        f"hidden)"
        + (
            f"; {feedback} properties are feedback, worth 0 (property_points in assignment.yaml gives them points)"
            if feedback
            else ""
        ),
        file=out,
    )
    return 0


def _said(err):
    """An exception in one line, within 200 characters of its text."""
    return f"{type(err).__name__}: {shorten(str(err), 200)}"


class Chores:
    """One daemon thread that runs what is submitted to it in turn, each with its Future. Unlike a
    ThreadPoolExecutor's, its thread never holds up the process's end: a batch stopped while it waits (on
    whatever it waits) ends at once."""

    def __init__(self, name):
        self._tasks = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, function, *args):
        future = Future()
        self._tasks.put((future, function, args))
        return future

    def close(self, wait=True):
        """No more tasks; ``wait``: until those submitted are done."""
        self._tasks.put(None)
        if wait:
            self._thread.join()

    def _run(self):
        while (task := self._tasks.get()) is not None:
            future, function, args = task
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function(*args))
                except BaseException as err:  # noqa: BLE001 (the Future carries it to the caller)
                    future.set_exception(err)


def _source(item):
    source = item.check.source
    parts = [getattr(source, "title", None), getattr(source, "cell", None)]
    return escape(", ".join(p for p in parts if p))
