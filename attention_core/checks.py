"""The ``check`` and ``inventory`` commands: every case run on the reference core, per document; the corpus
inventory and the README's table."""

import os
import sys
from pathlib import Path

from tqdm import tqdm

from attention_core.harness.checking import runner
from attention_core.harness.checking.devices import skip_reason
from attention_core.harness.checking.results import Status, one_line, render
from attention_core.harness.reading import inventory
from attention_core.harness.reading.cases import load_folder
from attention_core.harness.text import escape, is_terminal
from attention_core.report import html as report

README_START, README_END = "<!-- corpus table: python -m attention_core inventory -->", "<!-- end of corpus table -->"


def inventory_command(folder, readme=None, out=None):
    """Print the inventory's disagreements with the case files, or its table; optionally write it."""
    out = out or sys.stdout
    rows = inventory.load(folder)
    case_files = load_folder(folder)
    found = inventory.problems(rows, case_files)
    for problem in found:
        print(problem, file=out)
    if found:
        return 1
    table = inventory.corpus_table(rows, case_files)
    print(table, file=out)
    if readme is not None:
        text = readme.read_text(encoding="utf-8")
        start, end = text.index(README_START) + len(README_START), text.index(README_END)
        readme.write_text(text[:start] + "\n" + table + "\n" + text[end:], encoding="utf-8")
    return 0


def check_command(folder, devices, verbose=False, out=None, html=None, assignment=None):
    """Run every check; print the per-document table (and failures); return the exit status.

    With ``html`` (a path), the same results are also written there as an HTML report.

    0 when every check passed, 1 when any failed or could not run, 2 on a harness error (a bug here).
    """
    out = out or sys.stdout
    if html is not None and not _writable_folder(Path(html).parent):
        print(
            f"error: --html {html}: {Path(html).parent} is not a folder this user can write to; give a "
            f"report path in one",
            file=sys.stderr,
        )
        return 2
    items = runner.collect(folder, assignment)
    if not items:
        print(f"no case files in {folder}", file=out)
        return 1
    rows, errata, shown = {}, [], Shown(verbose)
    page = report.Page("attention-core: checks on the reference core", subtitle=str(folder)) if html else None
    progress = tqdm(
        items,
        desc="checking",
        unit="check",
        file=sys.stderr,
        leave=False,
        disable=not is_terminal(sys.stderr) or len(items) < 50,
    )  # a bar on a terminal only
    for item in progress:
        title = item.file.document.title if item.file.document else ""
        row = rows.setdefault(item.file.name, {"title": title, **dict.fromkeys(COLUMNS, 0)})
        for device in devices if item.error is None else [None]:
            if skip_reason(device):
                row["skipped"] += 1
                continue
            result = runner.run(item, device=device or "cpu")
            row[_COLUMN[result.status]] += 1
            if page is not None:
                page.add(report.entry(item, result))
            if not result.passed:
                shown.add(result, verbose)  # rendered now: a result's tensors are not kept
            elif item.check.erratum is not None and item not in errata:
                errata.append(item)
    _print_table(rows, out)
    skipped = [f"skipped: {reason}" for reason in dict.fromkeys(filter(None, map(skip_reason, devices)))]
    for line in skipped:
        print(line, file=out)
    if errata:
        print(
            f"\nerrata: {len(errata)} printed values reproduce only with the document's own mistake "
            f"(checked that way{'' if verbose else '; -v gives the notes'}):",
            file=out,
        )
        for item in errata:
            note = f": {escape(item.check.erratum.note)}" if verbose else ""
            print(f"  {escape(item.id)} ({item.location}){note}", file=out)
    shown.print(out)
    settings = assignment.settings_problems(items) if assignment is not None else []
    for problem in settings:
        print(f"error: {problem}", file=out)
    if page is not None:
        page.notes += skipped
        html.write_text(page.html(), encoding="utf-8")
        print(f"\nwrote {html}", file=out)
    if shown.harness_error:
        return 2
    return 1 if shown.count or settings else 0


class Shown:
    """The problems a run prints, bounded: the first MAX_REPORTS in full, then one line each up to MAX_LINES;
    with ``verbose`` (``-v``, asked for), every one in full."""

    MAX_REPORTS, MAX_REPORT_CHARS, MAX_LINES = 20, 6000, 200

    def __init__(self, verbose=False):
        self.reports, self.lines, self.count, self.harness_error = [], [], 0, False
        self.verbose = verbose

    def add(self, result, verbose):
        self.count += 1
        self.harness_error |= result.status is Status.HARNESS_ERROR
        if self.verbose or len(self.reports) < self.MAX_REPORTS:
            text = f"{str(result.status).upper()} {render(result, traceback=verbose)}"
            if not self.verbose and len(text) > self.MAX_REPORT_CHARS:
                text = text[: self.MAX_REPORT_CHARS] + f"\n… ({len(text) - self.MAX_REPORT_CHARS} more characters)"
            self.reports.append(text)
        if len(self.lines) < self.MAX_LINES:
            self.lines.append(one_line(result))

    def print(self, out):
        for text in self.reports:
            print("\n" + text, file=out)
        if self.count > len(self.reports):
            print(f"\n({self.count - len(self.reports)} more problems, one line each below)", file=out)
        if self.lines:
            print("\n" + "\n".join(self.lines), file=out)
        if self.count > len(self.lines):
            print(f"… and {self.count - len(self.lines)} more", file=out)


# The table's columns: the first three stay as they are; later ones are added after them.
COLUMNS = ("passed", "failed", "skipped", "errors", "pending")
_COLUMN = {
    Status.PASSED: "passed",
    Status.FAILED: "failed",
    Status.NOT_IMPLEMENTED: "failed",
    Status.IMPLEMENTATION_ERROR: "failed",
    Status.CASE_ERROR: "errors",
    Status.HARNESS_ERROR: "errors",
    Status.PENDING: "pending",
}


def _print_table(rows, out):
    labels = {name: escape(f"{name}  {row['title']}") for name, row in rows.items()}
    width = max(len("document"), *map(len, labels.values()))
    print(f"{'document':<{width}}  " + "  ".join(f"{c:>7}" for c in COLUMNS), file=out)
    totals = dict.fromkeys(COLUMNS, 0)
    for name, row in rows.items():
        print(f"{labels[name]:<{width}}  " + "  ".join(f"{row[c]:>7}" for c in COLUMNS), file=out)
        for key in totals:
            totals[key] += row[key]
    print(f"{'total':<{width}}  " + "  ".join(f"{totals[c]:>7}" for c in COLUMNS), file=out)


def _writable_folder(folder):
    """Whether ``folder`` exists, is a folder, and this user may create files in it."""
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)
