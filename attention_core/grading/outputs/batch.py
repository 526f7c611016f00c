"""``python -m attention_core grade``: a batch of submissions graded, with a progress bar, written out.

With ``--jobs N`` (N > 1) the batch is graded by N grader processes, each with its own worker
server: a grader's own work (evaluating, comparing, drawing) is Python that one process runs on
one core at a time. They take submissions from one queue; each writes its submissions' files and
sends back their scores alone. Each grades one ahead (``Grader.grade_each``).
"""

import collections
import contextlib
import ctypes
import fcntl
import gc
import multiprocessing
import os
import queue
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from attention_core.grading.intake import folders, ids
from attention_core.grading.judging.grader import Grader, sandbox_warning
from attention_core.grading.judging.options import GradingOptions
from attention_core.grading.outputs import cells, gradescope, lms, records
from attention_core.grading.properties.model import is_property
from attention_core.harness.reading.assignment import resolve
from attention_core.harness.text import escape, is_terminal, points, shorten
from attention_core.report.class_page import class_page
from attention_core.report.figures import Drawings
from attention_core.report.html import submission_page

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)


def grade_command(
    paths: list[Path],
    out: Path,
    *,
    assignment: Path | None = None,
    cases: Path | None = None,
    jobs: int = 1,
    options: GradingOptions | None = None,
    regrade: bool = False,
    roster: Path | None = None,
    entry: str | None = None,
    stream: TextIO | None = None,
    report: TextIO | None = None,
) -> int:
    """Grade ``paths`` into ``out`` against ``assignment`` (an assignment's folder; default: the built-in one)
    with ``options`` (time limits and points over the assignment's settings);
    print one line per submission (to ``report``, stdout by default: the score table a teacher may redirect),
    the progress bar and warnings to ``stream`` (stderr). A folder is one submission or a batch of them as
    ``folders.read`` tells (``entry``: each folder is one submission, imported from that file). Exit 0 whenever
    grading completed; 2 when there is nothing to grade with (no graded check loads) or a folder is ambiguous."""
    stream, report = stream or sys.stderr, report or sys.stdout
    missing = [p for p in paths if not p.exists() and not p.is_symlink()]  # a link is graded: 0, and why
    if missing:
        print(f"no such submission: {', '.join(map(str, missing))}", file=stream)
        return 2
    try:  # the output folder first: nothing is graded that could not be written
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        print(
            f"error: --out {out}: cannot write there ({err.strerror or err}); give a folder this user can write to",
            file=stream,
        )
        return 2
    try:
        students = lms.read_roster(roster) if roster is not None else None
    except lms.RosterError as err:
        print(f"error: --roster {err}", file=stream)
        return 2
    chosen = resolve(assignment, cases)
    problem, broken = nothing_graded(chosen)
    if problem:
        print(f"error: {problem}", file=stream)
        return 2
    if broken:
        print(
            f"warning: {len(broken)} case{'s' * (len(broken) != 1)} of the case files do not load (their checks are "
            f"worth 0 points to everyone); the first: {broken[0]}; python -m attention_core lint lists them",
            file=stream,
        )
    paths, ambiguous, notes = _submissions_in(paths, chosen.names, entry)
    if ambiguous:
        print(f"error: {ambiguous}", file=stream)
        return 2
    for note in notes:
        print(f"note: {note}", file=stream)
    firsts: dict[str, Path] = {}
    for path in paths:  # a path given twice (``a.py ./a.py``) is one submission
        firsts.setdefault(ids.same_file_key(path), Path(path))
    with _locked(out, stream) as free, _interruptible():  # before anything is written into --out
        if not free:
            return 2
        # A platform's files of one student: one submission, gathered into --out.
        paths, owned, shown = lms.gathered(list(firsts.values()), out / lms.GATHERED, students)
        return _graded_batch(
            paths,
            owned,
            shown,
            out,
            chosen,
            students,
            stream,
            report,
            jobs,
            regrade,
            cases,
            assignment,
            options or GradingOptions(),
            entry,
        )


def _submissions_in(paths, names, entry):
    """(``paths`` with each folder that holds a batch replaced by its submissions, why one cannot be told or
    "", what the teacher is told of a folder graded as one); a platform's download (its files named by the
    platform) is a batch as it is."""
    found, notes = [], []
    for path in paths:
        path = Path(path)
        if not path.is_dir() or path.is_symlink():
            found.append(path)
            continue
        reading = folders.read(path, names, entry)
        if entry is None and any(lms.owner_of(p) for p in path.iterdir()):  # each file is a student's: gathered
            reading = folders.Reading("batch", members=tuple(sorted(p for p in path.iterdir() if p.is_file())))
        if reading.kind == "ambiguous":
            return [], reading.why, []
        found += list(reading.members) if reading.kind == "batch" else [path]
        notes += [reading.note] if reading.note else []
    return found, "", notes


def _graded_batch(
    paths, owned, shown, out, chosen, students, stream, report, jobs, regrade, cases, assignment, options, entry
):
    names = ids.submission_ids(paths, shown)
    owners = {name: owned.get(path) for path, name in zip(paths, names)}
    out.mkdir(parents=True, exist_ok=True)
    key = records.batch_key(
        chosen, {**options.as_dict(), "assignment": str(assignment), "cases": str(cases), "entry": entry}
    )
    made = dict(assignment=assignment, options=options, entry=entry)  # what each grader is made with
    digests = {name: records.submission_hash(path, key) for path, name in zip(paths, names)}
    kept = {} if regrade else {name: _kept(ids.folder_of(out, name), name, digests[name]) for name in names}
    todo = [(path, name) for path, name in zip(paths, names) if kept.get(name) is None]
    graded_now = {}
    sources = {name: os.path.abspath(path) for path, name in zip(paths, names)}

    def finished(one):  # a submission's record, as soon as it is graded: the batch may stop at any moment
        # (one the grader failed on gets a record that matches no run: it is graded again next time)
        records.write(ids.folder_of(out, one.name), "" if one.error else digests[one.name], one, sources[one.name])
        graded_now[one.name] = one

    interrupted = None  # (the lock is held: see grade_command)
    try:
        with tqdm(
            total=len(todo),
            desc="grading",
            unit="submission",
            file=stream,
            disable=len(todo) < 2 or not is_terminal(stream),
        ) as bar:  # a bar, with the time left: a TTY's
            if jobs > 1 and len(todo) > 1:
                _in_processes(
                    [p for p, _ in todo], [n for _, n in todo], out, cases, made, min(jobs, len(todo)), bar, finished
                )
            elif todo:
                with Grader(cases, **made) as grader:
                    _freeze()  # this may be the caller's own process: undone below, and malloc left alone
                    try:
                        for (_, name), graded in zip(todo, grader.grade_each([p for p, _ in todo])):
                            finished(_write(graded, name, out))
                            bar.update()
                    finally:
                        gc.unfreeze()
    except KeyboardInterrupt as stop:  # ^C, or SIGTERM (see _interruptible): what finished is kept
        interrupted = str(stop) or "interrupted"
        print(
            f"{interrupted}: graded {len(graded_now)}, {len(todo) - len(graded_now)} not graded; the same "
            f"command grades the rest (what was graded is not graded again)",
            file=stream,
        )
        names = [name for name in names if name in graded_now or kept.get(name) is not None]
        if not names:
            return 130
    scores = [graded_now.get(name) or kept[name] for name in names]
    keys = {  # with a roster, a row is its student's: the platform's id, the same from any working folder
        name: owners[name].student
        for name in names
        if students is not None and owners.get(name) is not None and owners[name].student in students.by_id()
    }
    alike = ids.look_alikes(names)
    notes = {name: f"its id only looks like {', '.join(others)}" for name, others in alike.items()}
    if alike:
        print(
            f"warning: {len(alike)} submission ids only look like another's (letters of another script, invisible "
            f"characters): {escape(', '.join(ascii(n) for n in sorted(alike)[:6]))}; the gradebook's notes say which",
            file=stream,
        )
    code = _summarise(scores, names, graded_now, out, stream, report, 130 if interrupted else 0, keys, notes)
    if students is not None:
        lms.write_roster_files(students, scores, owners, chosen.name, out, report)
    return code


def _summarise(scores, names, graded_now, out, stream, report, code, keys=None, notes=None):
    """The gradebook (its rows keyed by ``keys``, with ``notes``), the class summary and the terminal's lines for
    ``scores``; returns ``code``."""
    skipped = len(names) - len(graded_now)
    print(
        f"graded {len(graded_now)}, skipped {skipped} as unchanged (--regrade grades them again)"
        if skipped
        else f"graded {len(graded_now)}",
        file=stream,
    )
    maximums = gradescope.write_gradebook(scores, out / "gradebook.csv", keys, notes)
    glance = class_summary(scores, out / "summary.csv")
    (out / "summary.html").write_text(class_page(scores, glance), encoding="utf-8")
    if len(maximums) > 1:
        print(
            f"warning: the rows of {out / 'gradebook.csv'} have different maximums "
            f"({', '.join(map(str, sorted(maximums)))}): the assignment changed since some were graded; grade "
            f"those again",
            file=stream,
        )
    width = max(len(escape(n)) for n in names)
    for one in scores:
        print(f"{escape(one.name):<{width}}  {points(one.score):>6} / {points(one.max_score)}", file=report)
    if len(scores) > 1 and glance:
        print("\nthe class at a glance (summary.csv has every line):", file=report)
        for kind, what, n in glance[:5]:
            said = f"made the mistake: {what}" if kind == "mistake" else f"failed {what}"  # (a property too)
            print(f"  {n} of {len(scores)} {escape(said)}", file=report)
    for warning in sorted({sandbox_warning(one.protections) for one in scores} - {""}):
        print(warning, file=stream)
    failed = [one.name for one in scores if one.error]
    if failed:
        print(
            f"warning: the grader failed on {len(failed)} submission{'s' * (len(failed) != 1)} (a fault of the "
            f"grader, not theirs; each scores 0 and says why in its results.json; the next run grades them "
            f"again): {escape(', '.join(failed[:5]))}" + (" …" if len(failed) > 5 else ""),
            file=stream,
        )
    print(
        f"wrote {out / ids.SUBMISSIONS / '<id>' / 'results.json'} (the student's), "
        f"{out / ids.REPORTS / '<id>' / 'report.html'} (the teacher's), {out / 'gradebook.csv'}, "
        f"{out / 'summary.csv'} and {out / 'summary.html'}",
        file=report,
    )
    return code


LOCK = ".grading.lock"


@contextlib.contextmanager
def _locked(out, stream):
    """Hold ``out``'s lock for the batch (yields False, having said why, where another batch holds it): two
    batches never write one gradebook at once."""
    handle = open(out / LOCK, "a+", encoding="utf-8")  # noqa: SIM115 (held for the batch)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            print(
                f"error: --out {escape(str(out))} is being written by another grading batch ({escape(holder)}); "
                f"wait for it to finish, or give another --out",
                file=stream,
            )
            yield False
            return
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        yield True
    finally:
        handle.close()


@contextlib.contextmanager
def _interruptible():
    """SIGTERM ends the batch as ^C does (KeyboardInterrupt), where this is the main thread."""

    def stop(*_):
        raise KeyboardInterrupt("terminated")

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: the caller's signals stay its own
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _kept(folder, name, digest):
    """The Scores of a submission whose record in ``folder`` matches ``digest`` (unchanged), else None."""
    found = records.read(folder, digest)
    if found is None:
        return None
    score, max_score, protections, grades = found
    return Scores(name, score, max_score, protections, [Score(*g) for g in grades])


def nothing_graded(chosen):
    """(why no submission could score anything against the Assignment ``chosen``, or None; the case errors,
    as ``location: message``). Nothing to grade: no case file, no graded check that
    loads (each names a function the reference does not define...), or a setting that names no check."""
    from attention_core.harness.checking import runner  # noqa: PLC0415

    items = runner.collect(chosen.cases, chosen)
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


@dataclass
class Scores:
    """What the gradebook and the summary need of a graded submission (sent back from a grader process)."""

    name: str
    score: float
    max_score: float
    protections: dict = field(default_factory=dict)
    grades: list = field(default_factory=list)  # Score per check
    error: str = ""  # why the grader could not grade it: no record is kept, the next run grades it again


@dataclass
class Score:
    check_id: str
    score: float
    max_score: float = 0.0
    mistakes: tuple = ()  # the mistakes its feedback names ("Likely mistake: …")


def _write(graded, name, out):
    """Write a graded submission's results.json (the student's) and report.html (the teacher's); its Scores. Should its drawings or page fail
    (whatever it returned), they are written without pictures; should that fail too, it is the grader's
    failure on this submission alone."""
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
        [Score(g.check_id, g.score, g.max_score, g.mistakes) for g in graded.grades],
        graded.error,
    )


def class_summary(scores, path):
    """Write ``path`` (CSV: kind, what, students, of): how many of the submissions graded in this run failed
    each check and made each named mistake, largest first; return its rows."""
    failed, mistakes = collections.Counter(), collections.Counter()
    for one in scores:
        made = set()
        for grade in one.grades:
            if grade.score < grade.max_score:
                failed[grade.check_id] += 1
            made |= set(grade.mistakes)
        mistakes.update(made)
    rows = [("mistake", m, n) for m, n in mistakes.most_common()] + [
        ("property" if is_property(c) else "check", c, n) for c, n in failed.most_common()
    ]
    with path.open("w", newline="", encoding="utf-8") as handle:  # (cells.py: no cell starts a formula)
        cells.write_rows(
            handle, [["kind", "what", "students", "of"], *[(kind, what, n, len(scores)) for kind, what, n in rows]]
        )
    return rows


def _freeze():
    """What the grader holds for the whole batch (torch, the cases, their inputs) left out of the
    collector's full passes, each of which would otherwise walk every one of those objects again."""
    gc.collect()
    gc.freeze()


def _settled():
    """Set a grader process of its own up for a long batch: frozen (see :func:`_freeze`), and large
    temporaries (a failed comparison of millions of elements, in float64) reuse the memory the last
    ones freed rather than fresh pages from the system each time (glibc's malloc only).
    """
    _freeze()
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's largest: blocks under it come from the heap
    mallopt(_M_TRIM_THRESHOLD, 512 << 20)  # and the heap keeps up to this much freed memory


# ---- grader processes ----------------------------------------------------------------------------


def _grader_process(cases, made, out, first, tasks, done):
    """A grader process: its own Grader (and worker server), grading the task ``first`` ((index, path,
    name)), then what it takes from ``tasks`` (None at the end), and sending ``(index, Scores, None)``
    to ``done``, or ``(None, None, traceback)`` should grading itself fail."""
    taken = collections.deque()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles ^C: it ends us with SIGTERM
    signal.signal(signal.SIGTERM, _end_quietly)

    def paths():
        task = first
        while task is not None:
            taken.append(task)
            yield task[1]
            task = tasks.get()

    try:
        with Grader(cases, **made) as grader:
            _settled()
            for graded in grader.grade_each(paths()):
                index, _, name = taken.popleft()
                done.put((index, _write(graded, name, out), None))
    except BaseException:  # noqa: BLE001 (the batch fails with it, in the parent)
        done.put((None, None, traceback.format_exc()))


def _end_quietly(*_):
    """SIGTERM in a grader process: unwind (its Grader closes its worker server and scratch folders)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(1)


def _in_processes(paths, names, out, cases, made, jobs, bar, on_graded):
    # Spawned, not forked: a fork after torch ran parallel work can deadlock. Each process is given its
    # first submission (one reading ahead must not take the next process's first), then they share
    # one queue of the rest, so a slow submission holds up only its own process.
    context = multiprocessing.get_context("spawn")
    tasks, done = context.Queue(), context.Queue()
    every = [(index, path, name) for index, (path, name) in enumerate(zip(paths, names))]
    for task in every[jobs:] + [None] * jobs:
        tasks.put(task)
    processes = [
        context.Process(target=_grader_process, args=(cases, made, out, first, tasks, done)) for first in every[:jobs]
    ]
    for process in processes:
        process.start()
    scores, finished = [None] * len(paths), False
    try:
        for _ in paths:
            index, score, error = _next_done(done, processes)
            if error is not None:
                raise RuntimeError(f"a grader process failed:\n{error}")
            scores[index] = score
            on_graded(score)
            bar.update()
        finished = True
    finally:
        for process in processes:
            if not finished:
                process.terminate()
        # Each closes its worker server as it ends; stopped, a batch ends within seconds, whatever a process waits on
        # (one killed, its worker server reads the end of its socket and ends its children).
        deadline = time.monotonic() + (30.0 if finished else 1.5)
        for process in processes:
            process.join(timeout=max(deadline - time.monotonic(), 0.01))
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
    return scores


def _next_done(done, processes):
    """The next message on ``done``; a RuntimeError as soon as a grader process has died (the
    submissions it held would never be graded), or none is left to send one."""
    while True:
        if any(p.exitcode not in (None, 0) for p in processes):
            break
        try:
            return done.get(timeout=1.0)
        except queue.Empty:
            if not any(p.is_alive() for p in processes):
                break
    codes = ", ".join(str(p.exitcode) for p in processes)
    raise RuntimeError(f"a grader process ended before the batch did (exit codes {codes})")
