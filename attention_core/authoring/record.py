"""``record``: fill the expectations a case file leaves empty, by a route independent of the reference core.

An expectation written with no value (``out:``) is computed on the case's inputs in float64
by torch's own functions (``harness/checking/torch_route.py`` for a spec function; an ``expr`` check is
torch arithmetic already), cast to the case's dtype and written as torch prints it, as a
notebook shows it. Where that route fails, the reference core computes it in the case's
dtype, and the mark says so. Each recorded expectation carries ``recorded: <how>`` until its
author has compared it with the document and removed the mark; ``lint`` reports it until then.

The file is edited through ruamel.yaml's round trip: comments, key order, quoting and the
rest of the file stay as they were.
"""

import torch
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import LiteralScalarString

from attention_core.harness.checking import calls, torch_route
from attention_core.harness.checking.inputs import materialise
from attention_core.harness.reading.cases import load_file
from attention_core.harness.reading.model import waiting

TORCH_ROUTE = "torch's functions in float64, cast to {dtype}"
TEACHER_ROUTE = "the assignment's reference in float64, cast to {dtype}"
REFERENCE_ROUTE = "the reference core in {dtype} (no independent route: {why}); check it against the document"


class RecordError(ValueError):
    """The file cannot be recorded: it does not load, the case asked for is not in it, or a check
    cannot be computed by either route."""


def record(path, *, case_id=None, assignment=None):
    """Fill every missing expectation of ``path`` (of the case ``case_id`` only, if given).

    Returns:
        ``(check id, target, how)`` for each expectation written, in file order.
    """
    case_file = load_file(path, assignment=assignment)
    if case_file.errors:
        first = case_file.errors[0]
        raise RecordError(f"{first.where}: {first.message} (fix what lint reports first)")
    cases = [c for c in case_file.cases if case_id is None or c.id == case_id]
    if case_id is not None and not cases:
        raise RecordError(f"{path}: no case {case_id!r} (cases: {', '.join(c.id for c in case_file.cases)})")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    yaml = round_trip(text)
    tree = yaml.load(text)
    written = []
    for case in cases:
        raw_case = next(c for c in tree["cases"] if c.get("id") == case.id)
        for check in case.checks:
            missing = [e.target for e in check.expectations if e.kind == "missing"]
            if not missing or check.expr is None:
                continue
            try:
                values, how = _compute(case, check, case_file.assignment)
            except Exception as err:  # noqa: BLE001 (neither route can run it: nothing is written)
                why = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
                raise RecordError(f"{path}:{check.line}: {case.id}/{check.id} cannot be computed: {why}") from None
            raw_expect = next(c for c in raw_case["checks"] if c.get("id") == check.id)["expect"]
            for target in missing:
                raw_expect[target] = _expectation(values[target], how)
                written.append((f"{case.id}/{check.id}", target, how))
    if written:
        with open(path, "w", encoding="utf-8") as handle:
            yaml.dump(tree, handle)
    return written


def pending_checks(path):
    """The checks of ``path`` that stay drafts after recording (their computation is not written)."""
    return [
        f"{case.id}/{check.id}"
        for case in load_file(path).cases
        for check in case.checks
        if check.expr is None and waiting(check)
    ]


def _compute(case, check, assignment):
    """The check's results and targets, by the torch route in float64 (cast back), else by the reference core.

    A teacher's assignment has no route of torch's own beside its reference: its reference computes
    in float64 (cast back), and the mark says so."""
    dtype = str(case.dtype).removeprefix("torch.")
    reference = assignment.functions
    independent = assignment.builtin or check.kind != "call"
    try:
        scope = materialise(case, dtype=torch.float64)
        functions = torch_route.FUNCTIONS if check.kind == "call" and assignment.builtin else reference
        outputs = calls.call(check, check.expr, scope, functions, "cpu", case, reference=reference, dtype=torch.float64)
        values = calls.targets(check, scope, outputs, "cpu", torch.float64)
        how = TORCH_ROUTE.format(dtype=dtype) if independent else TEACHER_ROUTE.format(dtype=dtype)
        return {k: _cast(v, case.dtype) for k, v in values.items()}, how
    except Exception as err:  # noqa: BLE001 (the route cannot take this case: the reference core can)
        why = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
    scope = materialise(case)
    outputs = calls.call(check, check.expr, scope, reference, "cpu", case, reference=reference)
    return calls.targets(check, scope, outputs, "cpu", case.dtype), REFERENCE_ROUTE.format(dtype=dtype, why=why)


def _cast(value, dtype):
    return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def _expectation(value, how):
    recorded = CommentedMap()
    if isinstance(value, torch.Tensor):
        recorded["printed"] = LiteralScalarString(str(value.cpu()) + "\n")
    else:
        recorded["values"] = value.item() if hasattr(value, "item") else value
    recorded["recorded"] = how
    return recorded


def round_trip(text):
    yaml = YAML()  # round trip: comments, order, quoting and the file's own indentation kept
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long line the author wrote
    mapping, sequence, offset = _layout(text)  # a file of another layout keeps it
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


def _layout(text):
    """(mapping, sequence, offset) indentation of the file's block collections, as ruamel.yaml takes them:
    from the first mapping and the first sequence nested under a key (comments skipped); else this
    project's own 2, 4, 2."""
    mapping = sequence = offset = None
    parent = None  # the indentation of the previous line, where it opens a block (ends with ':')
    for line in text.splitlines():
        body = line.lstrip(" ")
        if not body or body.startswith("#"):
            continue
        indent = len(line) - len(body)
        if parent is not None and indent >= parent:
            if body.startswith("- ") and sequence is None:
                offset, sequence = indent - parent, indent - parent + 2
            elif not body.startswith("- ") and mapping is None and indent > parent:
                mapping = indent - parent
        parent = indent if body.split(" #")[0].rstrip().endswith(":") else None
    return mapping or 2, sequence or 4, 2 if offset is None else offset
