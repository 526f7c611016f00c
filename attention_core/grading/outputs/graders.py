"""The grader's side of a batch: reading the assignment into a :class:`Plan`, grading submissions with a
:class:`Grader` and writing each one's files; in a grader process of its own, or in the caller's.

This is where a batch loads torch: the batch command (batch.py) does not.
"""

import collections
import contextlib
import ctypes
import gc
import os
import signal
import sys
import tempfile
import traceback

from attention_core.grading.intake import ids
from attention_core.grading.judging.grader import Grader
from attention_core.grading.judging.grades import NEUTRAL
from attention_core.grading.outputs import gradescope, records
from attention_core.grading.outputs.plan import Plan
from attention_core.grading.outputs.scores import Score, Scores
from attention_core.grading.process import forks
from attention_core.grading.process.link import Link
from attention_core.grading.properties.model import is_property
from attention_core.harness.checking import runner
from attention_core.harness.reading.assignment import resolve
from attention_core.harness.text import shorten
from attention_core.report.figures import Drawings
from attention_core.report.html import submission_page


def plan(assignment, cases, options, entry):
    """(the Plan of ``assignment`` with ``cases``, the Assignment it read and its checks as read (its case files'
    items), or None and None where it cannot be read)."""
    try:
        chosen = resolve(assignment, cases)
    except ValueError as err:  # an AssignmentError or SettingsError: the folder, its reference or its settings
        return Plan(problem=str(err)), None, None
    if not chosen.cases.is_dir():
        return Plan(problem=f"--cases {chosen.cases}: no such folder"), None, None
    items = runner.collect(chosen.cases, chosen)
    problem, broken = nothing_graded(chosen, items)
    settings = {**options.as_dict(), "assignment": str(assignment), "cases": str(cases), "entry": entry}
    return (
        Plan(tuple(chosen.names), problem or "", tuple(broken), records.batch_key(chosen, settings), chosen.name),
        chosen,
        items,
    )


def nothing_graded(chosen, items):
    """(why no submission could score anything against the Assignment ``chosen`` whose case files hold ``items``,
    or None; the case errors, as ``location: message``). Nothing to grade: no case file, no graded check that
    loads (each names a function the reference does not define...), or a setting that names no check."""
    graded = [i for i in items if i.error is None and i.check.kind == "call"]
    errors = [i for i in items if i.error is not None]
    broken = [f"{i.location}: {i.error.message}" for i in errors]
    settings = chosen.settings_problems(items)
    if settings:
        return "\n".join(settings), broken
    if graded:
        return None, broken
    if not items:
        return f"{chosen.cases}: no case files (*.yaml, *.yml): nothing to grade", broken
    first = f"; the first: {broken[0]}" if errors else ""
    return (
        f"{chosen.cases}: no graded check loads ({len(errors)} case error{'s' * (len(errors) != 1)}{first}); "
        f"a graded check's 'call' names a function or class of the assignment "
        f"({', '.join(chosen.names) or 'none'}); run lint for every problem"
    ), broken


def grade_here(chosen, items, options, entry, todo, out, finished, progress):
    """Grade ``todo`` ((path, id) pairs) in this process against the Assignment ``chosen`` (its checks read:
    ``items``), handing each one's Scores to ``finished`` and calling ``progress`` after it."""
    with Grader(assignment=chosen, options=options, entry=entry, items=items) as grader:
        # What this process holds now (it may be the caller's own session) left out of the collector's passes for
        # the batch, and given back to them after it: garbage among it is collected then, so no collection first
        # (one walks the whole session's objects). Malloc is left alone.
        gc.freeze()
        try:
            for (_, name), graded in zip(todo, grader.grade_each([p for p, _ in todo])):
                finished(write(graded, name, out))
                progress()
        finally:
            gc.unfreeze()


def forked(sock, channel):
    """A batch's grader process, just forked for it with torch imported (``forks.grader``): its environment and
    arguments come on ``sock`` from the batch's command (see :func:`grader_process`); ``channel``: its own way to the
    forking process, for its worker servers."""
    link = Link(sock)
    environ, args = link.get()
    os.environ.clear()  # (the forking process's environment is its own)
    os.environ.update(environ)
    tempfile.tempdir = None  # (read again: the batch's folder, which the command removes whatever ends this process)
    try:
        grader_process(*args, link=link, channel=channel)
    finally:
        forks.close()


def grader_process(assignment, cases, options, entry, out, planner, link, channel=None):
    """A grader process: it reads the assignment (and, the ``planner``, sends its Plan on ``link`` as
    ``("plan", Plan, None)``), then asks for submissions, one at a time (``("next", None, None)``, answered with
    ``(index, path, name)``, or None or the link's end when there are no more), sending ``(index, Scores, None)``
    for each, or ``(None, None, traceback)`` should grading itself fail. ``channel``: the batch's forking process,
    for its worker servers."""
    taken = collections.deque()
    if channel is not None:
        forks.adopt(channel)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles ^C: it ends us with SIGTERM
    signal.signal(signal.SIGTERM, _end_quietly)

    def paths():
        while True:
            link.put(("next", None, None))
            try:
                task = link.get()
            except EOFError:
                return
            if task is None:
                return
            taken.append(task)
            yield task[1]

    try:
        read, chosen, items = plan(assignment, cases, options, entry)
        if planner:
            link.put(("plan", read, None))
        if chosen is None or read.problem:
            return
        with Grader(assignment=chosen, options=options, entry=entry, items=items) as grader:
            trim = _settled()
            for graded in grader.grade_each(paths()):
                index, _, name = taken.popleft()
                link.put((index, write(graded, name, out), None))
                del graded
                trim()
    except BaseException:  # noqa: BLE001 (the batch fails with it, in the parent)
        with contextlib.suppress(OSError):  # (a command that has ended reads nothing)
            link.put((None, None, traceback.format_exc()))
    finally:  # its work is done (its Grader closed): a SIGTERM while the interpreter ends ends it, quietly
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _end_quietly(*_):
    """SIGTERM in a grader process: unwind (its Grader closes its worker server and scratch folders)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(1)


def write(graded, name, out):
    """Write a graded submission's results.json (the student's) and report.html (the teacher's); its Scores.
    Should its drawings or page fail (whatever it returned), they are written without pictures; should that
    fail too, it is the grader's failure on this submission alone."""
    graded.name = name
    folder, teachers = ids.folder_of(out, name), ids.folder_of(out, name, ids.REPORTS)
    teachers.mkdir(parents=True, exist_ok=True)
    try:
        drawings = Drawings()  # each failed check drawn once, for results.json and report.html
        gradescope.write_results(graded, folder, drawings=drawings)
        (teachers / "report.html").write_text(submission_page(graded, drawings=drawings), encoding="utf-8")
    except Exception:  # noqa: BLE001
        try:
            gradescope.write_results(graded, folder)
            (teachers / "report.html").write_text(submission_page(graded), encoding="utf-8")
        except Exception as err:  # noqa: BLE001
            graded.error = graded.error or (
                f"this submission's results could not be written: the grader failed "
                f"on them ({type(err).__name__}: {shorten(str(err), 200)})"
            )
            graded.grades = []
            graded.note = graded.error
            gradescope.write_results(graded, folder)
            (teachers / "report.html").write_text(submission_page(graded), encoding="utf-8")
    return Scores(
        name,
        graded.score,
        graded.max_score,
        graded.protections,
        [score for g in graded.grades for score in _scores(g)],
        graded.error,
    )


def _scores(grade):
    """A grade's Score, then one for each check not run whose points it carries (a backward check of wrong values:
    its own column, next to its value check's, 0 of its points, as every submission's gradebook has it)."""
    yield Score(
        grade.check_id,
        grade.score,
        grade.max_score,
        tuple(grade.mistakes),
        _kind(grade.check_id),
        grade.worth,
        None if grade.result.status in NEUTRAL else bool(grade.result.passed),  # (a case's error: no one's)
    )
    for check_id, own in grade.stands_for:
        yield Score(check_id, 0.0, 0.0, (), _kind(check_id), own)


def _kind(check_id):
    if is_property(check_id):
        return "property"
    return "backward" if check_id.endswith("/backward") else "value"


def freeze():
    """What the grader holds for the whole batch (torch, the cases, their inputs) left out of the
    collector's full passes, each of which would otherwise walk every one of those objects again."""
    gc.collect()
    gc.freeze()


# Bytes: a block this large is the system's own pages, given back when freed. Above a comparison block's float64
# temporaries (compare.BLOCK: 512 KiB), which come and go thousands of times a submission: at 256 KiB each was
# mapped and faulted in afresh, and a wrong answer to a large check cost its grader process twice the CPU.
MMAP_THRESHOLD = 1 << 20
M_MMAP_THRESHOLD = -3  # (glibc's malloc.h)


def _settled():
    """Set a grader process of its own up for a long batch: frozen (see :func:`freeze`), its large blocks (a
    large check's inputs, results, golden values and their temporaries) each mapped of its own and given back
    when freed; returns what gives the rest of the memory a submission's grading freed back to the system
    (glibc's ``malloc_trim``; nothing elsewhere), so that a grading slot holds what it keeps, not the peak of the
    largest submission so far.

    glibc raises its threshold for mapping a block of its own to the size of the largest one freed (up to 32 MB),
    so that after a large check's first run its 16 MB temporaries come from the heap, which keeps them: a fixed
    threshold turns that off (``mallopt(M_MMAP_THRESHOLD)``) for blocks above :data:`MMAP_THRESHOLD`."""
    freeze()
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return lambda: None
    return lambda: trim(0)
