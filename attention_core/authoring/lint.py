"""Lint: case files checked without running a check, every finding at ``file:line:col``.

What loading refuses (YAML syntax, unknown or missing keys, types, tensor text, ragged rows,
unknown names and spec functions, expressions outside the safe language, duplicate ids, rtol
without atol) is an error at the loader's line. Each case that loads is then run dry on the
``meta`` device (shapes without storage): inputs, each check's call or expression and its
targets, so a shape that cannot go through the called function, or that disagrees with the
shape an expectation prints, is an error too. Drafts (pending checks and expectations) and
recorded expectations nobody has reviewed yet are warnings.
"""

from dataclasses import dataclass
from pathlib import Path

import torch

from attention_core.harness.checking import refusals, runner
from attention_core.harness.checking.inputs import InputError, materialise
from attention_core.harness.reading import yaml_lines
from attention_core.harness.reading.cases import find_case_files, load_file, shown_path
from attention_core.harness.reading.model import waiting
from attention_core.harness.text import escape, shorten


@dataclass(frozen=True)
class Finding:
    """One problem of a case file, at a 1-based line and column."""

    path: str
    line: int
    column: int
    severity: str  # "error" or "warning"
    message: str

    def __str__(self):
        return f"{escape(self.path)}:{self.line}:{self.column}: {self.severity}: {escape(self.message)}"


def lint(paths, *, default_folder=None, assignment=None):
    """The findings of every case file named by ``paths`` (files or folders), in file order; calls are
    checked against ``assignment`` (default: the built-in one)."""
    findings = []
    for path in map(Path, paths or [default_folder]):
        files = find_case_files(path) if path.is_dir() else [path]
        if path.is_dir() and not files:
            findings.append(Finding(str(path), 1, 1, "error", "no case files (*.yaml, *.yml) in this folder"))
        for file in files:
            findings += lint_file(file, assignment)
    return findings


def lint_file(path, assignment=None):
    """The findings of one case file: load errors, then each loaded case's dry run and drafts."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return [Finding(str(path), 1, 1, "error", "no such file")]
    case_file = load_file(path, assignment=assignment)
    lines = _lines(path)
    shown = str(shown_path(path))

    def at(line, severity, message, column=None):
        return Finding(shown, line, column or _indent(lines, line), severity, message)

    findings = [at(e.line, "error", e.message, e.column) for e in case_file.errors]
    for case in case_file.cases:
        findings += [at(line, "error", message) for line, message in dry_run(case, case_file.assignment)]
        for check in case.checks:
            findings += [at(line, "warning", f"pending: {message}") for line, message in waiting(check)]
            findings += [
                at(
                    e.line,
                    "warning",
                    f"recorded, not reviewed: the expectation for {e.target!r} was "
                    f"computed by {e.recorded}; compare it with the document, then "
                    f"remove 'recorded'",
                )
                for e in check.expectations
                if getattr(e, "recorded", None)
            ]
    return sorted(findings, key=lambda f: (f.line, f.column))


def dry_run(case, assignment):
    """(line, message) for each shape that cannot go through: each graded call run on the ``meta`` device.

    Inputs and arguments are made on the CPU (a case's own arithmetic, as a run makes it); the
    called function then runs on ``meta`` copies, shapes without storage, and its results' shapes
    are held to the shapes the expectations print.
    """
    try:
        scope = materialise(case, device="cpu")
    except InputError as err:
        return [(err.line or case.line, f"an input cannot be made: {shorten(str(err), 300)}")]
    except Exception:  # noqa: BLE001 (the budget and the like: the check run reports them)
        return []
    problems = []
    for check in case.checks:
        if check.expr is None or waiting(check):
            continue
        try:
            if check.kind == "call" and not assignment.builtin:  # a teacher's reference: run on the CPU
                arguments = runner.graded_arguments(check, case, scope, assignment.functions, "cpu", case.dtype)
                result = assignment.functions[arguments[0]](*arguments[1], **arguments[2])
            elif check.kind == "call":
                arguments = check.expr.call_arguments(scope, functions=assignment.functions, dtype=case.dtype)
                result = refusals.meta_results(*arguments)
                too_large = refusals.results_too_large(check.expr.source, result)
                if too_large:
                    problems.append((check.line, f"check {check.id!r}: {too_large}"))
                    continue
            else:
                result = check.expr.evaluate(scope, dtype=case.dtype)
            values = scope | dict(zip(check.returns, result if len(check.returns) > 1 else (result,)))
        except Exception as err:  # noqa: BLE001 (what running the check would raise)
            problems.append(
                (
                    check.line,
                    f"check {check.id!r}: `{shorten(check.expr.source, 80)}` cannot run"
                    f"{_shapes(check.expr, scope)}: {shorten(_text(err), 300)}",
                )
            )
            continue
        problems += _shape_mismatches(check, values, case.dtype)
    return problems


def _shapes(parsed, scope):
    """`` with q (4, 3), k (4, 5)``: the shapes of the tensors an expression reads."""
    shapes = [f"{n} {_dims(scope[n].shape)}" for n in sorted(parsed.names) if isinstance(scope.get(n), torch.Tensor)]
    return f" with {', '.join(shapes)}" if shapes else ""


def _shape_mismatches(check, values, case_dtype):
    """Where an expectation's shape, number of dimensions or printed dtype is not what the dry run gives."""
    problems = []
    for e in check.expectations:
        value, shape = values.get(e.target), expected_shape(e)
        if not isinstance(value, torch.Tensor):
            continue
        gives = f"`{shorten(check.expr.source, 80)}` gives"
        printed = e.printed if e.kind == "printed" else None
        if shape is not None and tuple(value.shape) != shape:
            problems.append(
                (e.line, f"the expectation for {e.target!r} has shape {_dims(shape)}, but {gives} {_dims(value.shape)}")
            )
        elif printed is not None and shape is None and printed.ndim != value.ndim:
            problems.append(
                (
                    e.line,
                    f"the expectation for {e.target!r} prints {printed.ndim} dimensions, but "
                    f"{gives} {value.ndim} ({_dims(value.shape)})",
                )
            )
        elif printed is not None and printed.dtype and printed.dtype != str(value.dtype).removeprefix("torch."):
            hint = (
                f"; if the document computed in {printed.dtype}, set `dtype: {printed.dtype}` on the case "
                f"(it is {str(case_dtype).removeprefix('torch.')})"
                if value.is_floating_point()
                else ""
            )
            problems.append(
                (
                    e.line,
                    f"the expectation for {e.target!r} prints dtype=torch.{printed.dtype}, but "
                    f"{gives} {value.dtype}{hint}",
                )
            )
    return problems


def expected_shape(expectation):
    """The shape an expectation states in full, else None (an elided or cut-off print, one number)."""
    if expectation.kind == "shape":
        return tuple(expectation.shape)
    if expectation.kind == "printed":
        return expectation.printed.shape
    if expectation.kind == "values" and expectation.values.ndim:
        return tuple(expectation.values.shape)
    return None


def _text(err):
    return getattr(err, "message", None) or str(err)


def _dims(shape):
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _lines(path):
    try:  # as loading reads it: a plain file only, never blocking on a FIFO
        return yaml_lines.read_bytes(path, str(path)).decode("utf-8", errors="replace").split("\n")
    except yaml_lines.CaseError:
        return []


def _indent(lines, line):
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return len(text) - len(text.lstrip(" -")) + 1 if text.strip() else 1
