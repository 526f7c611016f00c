"""A case folder's checks as items: each check of each case (:class:`CheckItem`), or a case or file that did not
load (:class:`LoadError`), with the ``path:line`` a report shows for it."""

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from attention_core.harness.reading.cases import load_folder
from attention_core.harness.text import escape


@dataclass(frozen=True, eq=False)  # hashed by identity: a cache key
class CheckItem:
    """One check of one case."""

    file: object  # CaseFile
    case: object  # model.Case
    check: object  # model.CallCheck or model.ExprCheck
    error = None  # a loaded check has no error; see LoadError

    @property
    def id(self):
        return f"{self.file.name}/{self.case.id}/{self.check.id}"

    @property
    def location(self):
        """``path:line`` of the check."""
        return f"{_shown(self.file.path)}:{self.check.line}"


@dataclass(frozen=True, eq=False)
class LoadError:
    """A case (or a whole file) that failed to load: one failing item of its own."""

    file: object  # CaseFile
    error: object  # CaseError
    case = check = None

    @property
    def id(self):
        case = self.error.case_id
        return f"{self.file.name}/{case}/invalid" if case else f"{self.file.name}/invalid"

    @property
    def location(self):
        """``path:line`` (``path:line:column`` where the column is known) of the error."""
        column = f":{self.error.column}" if self.error.column else ""
        return f"{_shown(self.file.path)}:{self.error.line}{column}"


_SHOWN_FROM: list = []  # folders that locations are shown relative to, innermost last; none: the working folder


@contextlib.contextmanager
def locations_relative_to(folder):
    """Show check locations relative to ``folder`` meanwhile (grading: the case folder's parent, so
    that a student reads ``cases/x.yaml:12`` whatever folder the grader was started from)."""
    _SHOWN_FROM.append(Path(folder).resolve())
    try:
        yield
    finally:
        _SHOWN_FROM.pop()


def _shown(path):
    cwd = Path(os.getcwd())
    return _shown_from(path if path.is_absolute() else cwd / path, _SHOWN_FROM[-1] if _SHOWN_FROM else cwd)


@functools.lru_cache(maxsize=4096)
def _shown_from(path, root):
    if path.is_relative_to(root):
        path = path.relative_to(root)
    return escape(path)  # a file's name may hold control characters


def collect(folder, assignment=None):
    """Every check of every case file in ``folder``, load errors included, in a stable order; their calls
    settled against ``assignment`` (default: the built-in one)."""
    items = []
    for case_file in load_folder(folder, assignment):
        items += [LoadError(case_file, err) for err in case_file.errors]
        items += [CheckItem(case_file, case, check) for case in case_file.cases for check in case.checks]
    return items
