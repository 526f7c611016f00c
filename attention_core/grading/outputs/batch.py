"""``python -m attention_core grade``: a batch of submissions graded, with a progress bar, written out.

With ``--jobs N`` (N > 1) the batch is graded by N grader processes, each with its own worker
server: a grader's own work (evaluating, comparing, drawing) is Python that one process runs on
one core at a time. Each asks the command for its next submission when it is ready for one; each writes its
submissions' files and sends back their scores alone. Each grades one ahead (``Grader.grade_each``).
"""

import collections
import contextlib
import fcntl
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from attention_core.grading.intake import folders, ids
from attention_core.grading.judging.options import GradingOptions
from attention_core.grading.outputs import cells, gradebook, lms, records
from attention_core.grading.process import forks, scratch
from attention_core.grading.process.link import Link, begin, module_path
from attention_core.grading.process.link import streams as link_streams
from attention_core.grading.server import sandbox
from attention_core.harness.text import escape, is_terminal, points
from attention_core.report.class_page import class_page


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
    try:
        with _interruptible(), _Graders(assignment, cases, options or GradingOptions(), entry, out, jobs) as graders:
            return _planned_batch(graders, paths, out, students, stream, report, regrade, entry)
    except KeyboardInterrupt as stop:  # ^C, or SIGTERM, while the assignment was read: nothing was graded
        print(f"{str(stop) or 'interrupted'}: nothing graded", file=stream)
        return 130
    except GraderLost as lost:  # the planner killed while it read the assignment
        print(f"error: {lost}: nothing graded", file=stream)
        return 1


def _planned_batch(graders, paths, out, students, stream, report, regrade, entry):
    plan = graders.plan
    if plan.problem:
        print(f"error: {plan.problem}", file=stream)
        return 2
    if plan.broken:
        print(
            f"warning: {len(plan.broken)} case{'s' * (len(plan.broken) != 1)} of the case files do not load (their "
            f"checks are worth 0 points to everyone); the first: {plan.broken[0]}; python -m attention_core lint "
            f"lists them",
            file=stream,
        )
    paths, ambiguous, notes = _submissions_in(paths, plan.names, entry)
    if ambiguous:
        print(f"error: {ambiguous}", file=stream)
        return 2
    for note in notes:
        print(f"note: {note}", file=stream)
    firsts: dict[str, Path] = {}
    for path in paths:  # a path given twice (``a.py ./a.py``) is one submission
        firsts.setdefault(ids.same_file_key(path), Path(path))
    with _locked(out, stream) as free:  # before anything is written into --out
        if not free:
            return 2
        # A platform's files of one student: one submission, gathered into --out.
        paths, owned, shown = lms.gathered(list(firsts.values()), out / lms.GATHERED, students)
        return _graded_batch(graders, paths, owned, shown, out, students, stream, report, regrade)


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
        why = folders.TOOLS_OWN.get(path.name)  # (a shell's ``*`` names __pycache__ and __MACOSX beside the work)
        if why:
            notes.append(f"{escape(str(path))} is left aside: {why}, no one's submission")
            continue
        reading = folders.read(path, names, entry)
        if entry is None and any(lms.owner_of(p) for p in path.iterdir()):  # each file is a student's: gathered
            reading = folders.Reading("batch", members=tuple(sorted(p for p in path.iterdir() if p.is_file())))
        if reading.kind == "ambiguous":
            return [], reading.why, []
        found += list(reading.members) if reading.kind == "batch" else [path]
        notes += [reading.note] if reading.note else []
    return found, "", notes


def _graded_batch(graders, paths, owned, shown, out, students, stream, report, regrade):
    names = ids.submission_ids(paths, shown)
    owners = {name: owned.get(path) for path, name in zip(paths, names)}
    out.mkdir(parents=True, exist_ok=True)
    digests = {name: records.submission_hash(path, graders.plan.key) for path, name in zip(paths, names)}
    kept = {} if regrade else {name: records.read(ids.folder_of(out, name), digests[name], name) for name in names}
    todo = [(path, name) for path, name in zip(paths, names) if kept.get(name) is None]
    graded_now = {}
    sources = {name: os.path.abspath(path) for path, name in zip(paths, names)}

    def finished(one):  # a submission's record, as soon as it is graded: the batch may stop at any moment
        # (one the grader failed on gets a record that matches no run: it is graded again next time)
        records.write(ids.folder_of(out, one.name), "" if one.error else digests[one.name], one, sources[one.name])
        graded_now[one.name] = one

    interrupted = 0  # (the lock is held: see grade_command); the exit code of a batch stopped halfway
    try:
        with tqdm(
            total=len(todo),
            desc="grading",
            unit="submission",
            file=stream,
            disable=len(todo) < 2 or not is_terminal(stream),
        ) as bar:  # a bar, with the time left: a TTY's
            graders.grade(todo, finished, bar.update)
    except (KeyboardInterrupt, GraderLost) as stop:  # ^C, SIGTERM (see _interruptible), a grader process killed:
        interrupted = 1 if isinstance(stop, GraderLost) else 130  # what finished is kept
        print(
            f"{'error: ' * (interrupted == 1)}{str(stop) or 'interrupted'}: graded {len(graded_now)}, "
            f"{len(todo) - len(graded_now)} not graded; the same command grades the rest (what was graded is not "
            f"graded again)",
            file=stream,
        )
        names = [name for name in names if name in graded_now or kept.get(name) is not None]
        if not names:
            return interrupted
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
    code = _summarise(scores, names, graded_now, out, stream, report, interrupted or 0, keys, notes)
    if students is not None:
        lms.write_roster_files(students, scores, owners, graders.plan.assignment, out, report)
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
    maximums = gradebook.write_gradebook(scores, out / "gradebook.csv", keys, notes)
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
    for warning in sorted({sandbox.warning(one.protections) for one in scores} - {""}):
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


def class_summary(scores, path):
    """Write ``path`` (CSV: kind, what, students, of): how many of the submissions graded in this run failed
    each check and property (one worth no points too: its points charged to a value check) and made each named
    mistake, largest first; return its rows."""
    failed, mistakes, kinds = collections.Counter(), collections.Counter(), {}
    for one in scores:
        made = set()
        for grade in one.grades:
            kinds[grade.check_id] = grade.kind
            if grade.failed:  # (a property that failed is counted, worth points or not)
                failed[grade.check_id] += 1
            made |= set(grade.mistakes)
        mistakes.update(made)
    rows = [("mistake", m, n) for m, n in mistakes.most_common()] + [
        ("property" if kinds[c] == "property" else "check", c, n) for c, n in failed.most_common()
    ]
    with path.open("w", newline="", encoding="utf-8") as handle:  # (cells.py: no cell starts a formula)
        cells.write_rows(
            handle, [["kind", "what", "students", "of"], *[(kind, what, n, len(scores)) for kind, what, n in rows]]
        )
    return rows


# ---- the graders -----------------------------------------------------------------------------------


class GraderLost(RuntimeError):
    """A grader process ended with submissions still to grade (killed): the batch keeps what finished."""


class _Graders:
    """Where a batch's submissions are graded. In this process where torch is loaded already (a caller's own
    Python session) and one job is asked; otherwise in grader processes of their own, so that the command itself
    never loads torch. Those are forked from the batch's forking process (``forks.grader``), which imported torch
    once for them and for their worker servers: a grader process costs a fork and the import of the grader's side,
    never its own import of torch, and all of them share torch's pages. Without torch here, the first grader
    process (the planner) is started at once: it reads the assignment and sends its Plan while the command goes
    on, then grades the first submission. Each process asks for its submissions one at a time over its link (see
    ``graders.grader_process``), so a slow submission holds up only its own process."""

    def __init__(self, assignment, cases, options, entry, out, jobs):
        self.assignment, self.cases, self.options, self.entry = assignment, cases, options, entry
        self.out, self.jobs = out, jobs
        self.here = "torch" in sys.modules
        self.processes: list = []  # (forks.Server, Link): each grader process and its link
        self.ended: set = set()  # the links told there is nothing more
        self.owed: collections.Counter = collections.Counter()  # link -> submissions given, not yet sent back
        self.gone: set = set()  # the links whose process has ended
        self.closed, self.plan, self.chosen, self.items = False, None, None, None
        self.scratch = None  # the grader processes' temporary folder, removed with them whatever ended them

    def __enter__(self):
        if self.here:
            from attention_core.grading.outputs import graders  # noqa: PLC0415 (torch is loaded here already)

            self.plan, self.chosen, self.items = graders.plan(self.assignment, self.cases, self.options, self.entry)
            return self
        try:
            self._start(planner=True)
            _, (kind, read, error) = self._next()
            if error is not None:
                raise RuntimeError(f"a grader process failed:\n{error}")
            if kind != "plan":
                raise RuntimeError(f"a grader process sent {kind!r} before its plan")
            self.plan = read
        except BaseException:
            self._close(finished=False)
            raise
        return self

    def __exit__(self, *exc):
        self._close(finished=False)  # (where grading finished, it was closed then)

    def _start(self, planner):
        if self.scratch is None:
            self.scratch = scratch.make()
        with link_streams() as (stdout, stderr):
            process = forks.grader(stdout, stderr)
        link = Link(process.ctl)
        self.processes.append((process, link))
        arguments = (self.assignment, self.cases, self.options, self.entry, self.out, planner)
        try:
            begin(process.ctl, "attention_core.grading.outputs.graders", "forked", module_path())
            link.put((dict(os.environ, TMPDIR=self.scratch), arguments))  # (the batch's environment as it is now)
        except OSError:  # it has ended already: told by _next
            pass

    def grade(self, todo, finished, progress):
        """Grade ``todo`` ((path, id) pairs), handing each one's Scores to ``finished`` as soon as it is graded
        and calling ``progress`` after it."""
        if self.here and (self.jobs == 1 or len(todo) < 2):
            if todo:
                from attention_core.grading.outputs import graders  # noqa: PLC0415

                graders.grade_here(
                    self.chosen, self.items, self.options, self.entry, todo, self.out, finished, progress
                )
            return
        # Each process is given its first submission at its first request (one reading ahead must not take the
        # next process's first), then they share the rest, in order.
        rest = collections.deque((index, path, name) for index, (path, name) in enumerate(todo))
        for _ in range(min(self.jobs, len(todo)) - len(self.processes)):
            self._start(planner=False)
        firsts = {link: rest.popleft() if rest else None for _, link in self.processes}
        left = len(todo)
        try:
            while left:
                link, (index, score, error) = self._next()
                if error is not None:
                    raise RuntimeError(f"a grader process failed:\n{error}")
                if index == "next":
                    task = firsts.pop(link, None)
                    task = task if task is not None or not rest else rest.popleft()
                    if task is None:
                        self.ended.add(link)
                    else:
                        self.owed[link] += 1
                    with contextlib.suppress(OSError):  # (one that has ended: told by _next)
                        link.put(task)
                else:
                    self.owed[link] -= 1
                    finished(score)
                    progress()
                    left -= 1
        except BaseException:  # stopped (^C, SIGTERM) or failed: the processes end now, before the summary
            self._close(finished=False)
            raise
        self._close(finished=True)

    def _next(self):
        """(the link, its next message) from any grader process; a RuntimeError as soon as one has ended with
        work still to do (the submissions it held would never be graded), or none is left to send one: GraderLost."""
        while True:
            live = [link for _, link in self.processes if link not in self.gone]
            if not live:
                raise GraderLost("no grader process is left to finish the batch")
            for link in select.select(live, [], [])[0]:
                try:
                    return link, link.get()
                except (EOFError, OSError):
                    self.gone.add(link)
                    if link not in self.ended or self.owed[link] > 0:  # (told there is no more, and all sent)
                        raise GraderLost(
                            "a grader process ended before the batch did (killed: out of memory, or by a signal)"
                        ) from None

    def _close(self, finished):
        """End the grader processes: those that finished are told so and waited for (each closes its worker
        server), the others terminated."""
        if self.closed:
            return
        self.closed = True
        for process, link in self.processes:
            link.end()
            if not finished:
                process.send(signal.SIGTERM)
        # Each closes its worker server as it ends; stopped, a batch ends within seconds, whatever a process waits on
        # (one killed, its worker server reads the end of its socket and ends its children).
        deadline = time.monotonic() + (30.0 if finished else 1.5)
        for process, link in self.processes:
            process.wait(timeout=max(deadline - time.monotonic(), 0.01))
            link.close()
        if self.scratch is not None:  # (a grader process killed left its folders there)
            scratch.remove(self.scratch)
