"""Properties: what every right answer does, checked beside the worked examples.

A property is a relation between calls of one graded name (a metamorphic relation): the same call
twice gives the same result; a batch gives what its items give one at a time; an output does not
change when later tokens change; permuting the tokens permutes the output; each row of the weights
sums to 1; large inputs still give finite results; and, for the built-in spec, softmax ignores a
constant added to a row, one head is plain attention, merging the split gives back the input, layer
norm gives mean 0 and variance 1.

Each is checked on inputs made once per assignment from a fixed seed (the same for every student
and every regrade): for the built-in spec, shapes chosen to catch what worked examples miss (Tq !=
Tk, one token, an odd number of heads, large scores); for a teacher's names, the arguments of its
own graded checks, changed as the relation needs. A property applies to a name only where the
reference itself holds it on those inputs, so a right answer cannot fail it; ``assignment.yaml``
lists the ones a name gets (``properties:``) and sets their points (``property_points``, or per
property under ``checks:``). The calls of all of a submission's properties go out in one round trip
(a second one only for a relation that feeds one call's result to another: split, then merge).
"""

from __future__ import annotations

import warnings

import torch

from attention_core import instances
from attention_core.grading.properties import worth
from attention_core.grading.properties.model import (  # noqa: F401 (the room's interface)
    PREFIX,
    Base,
    Broken,
    Call,
    Part,
    Probe,
    PropertyItem,
    argument,
    close,
    fresh,
    is_property,
    replaced,
    second_calls,
    shapes_of,
)
from attention_core.grading.properties.relations import GENERIC, KINDS
from attention_core.harness.checking.results import CallFailed, Status
from attention_core.harness.reading.settings import PROPERTY_POINTS
from attention_core.harness.text import first_given

SEED = 20240917  # the inputs' draws: fixed, so every student and every regrade gets the same
BASES_PER_NAME = 2  # a teacher's name: the arguments of this many of its graded checks


# ---------------------------------------------------------------------------------------- the input sets


def builtin_bases():
    """name -> [(Base, kinds)]: the built-in spec's input sets, each with the properties checked on it."""
    g = torch.Generator().manual_seed(SEED)

    def r(*shape, scale=1.0):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).float()

    one = ("out",)
    pair = ("output", "weights")
    mask5 = torch.ones(5, 5, dtype=torch.bool).tril()
    q, k, v = r(2, 3, 4), r(2, 5, 4), r(2, 5, 6)
    x6 = r(2, 5, 6)
    w = [r(6, 6, scale=0.5) for _ in range(3)]
    found = {
        "softmax": [
            (
                Base(Call("softmax", (r(2, 3, 5, scale=3.0),)), (0,), one, "x: float32 (2, 3, 5)"),
                ("rows_sum_to_one", "shift", "batched", "large_inputs", "deterministic"),
            ),
            (Base(Call("softmax", (r(1, 1),)), (0,), one, "x: one element"), ("rows_sum_to_one",)),
        ],
        "causal_average": [
            (
                Base(Call("causal_average", (r(2, 5, 3),)), (0,), one, "x: float32 (2, 5, 3)"),
                ("causal", "constant", "batched", "deterministic"),
            ),
            (Base(Call("causal_average", (r(1, 4),)), (0,), one, "x: one token"), ("deterministic",)),
        ],
        "attention": [
            (
                Base(Call("attention", (q, k, v)), (0, 1, 2), pair, "Tq = 3 queries, Tk = 5 keys, no mask"),
                ("rows_sum_to_one", "permutation", "shift", "batched", "large_inputs", "deterministic"),
            ),
            (
                Base(
                    Call("attention", (r(2, 5, 4), r(2, 5, 4), r(2, 5, 3)), {"mask": mask5}),
                    (0, 1, 2),
                    pair,
                    "5 tokens, causal mask",
                ),
                ("causal", "rows_sum_to_one"),
            ),
            (Base(Call("attention", (r(1, 4), r(1, 4), r(1, 2))), (0, 1, 2), pair, "one token"), ("rows_sum_to_one",)),
        ],
        "split_heads": [
            (
                Base(Call("split_heads", (x6, 3)), (0,), one, "x: float32 (2, 5, 6), 3 heads"),
                ("split_merge", "permutation_rows", "batched", "deterministic"),
            ),
        ],
        "merge_heads": [
            (
                Base(Call("merge_heads", (r(2, 3, 5, 2),)), (0,), one, "x: float32 (2, 3, 5, 2)"),
                ("permutation_rows", "batched", "deterministic"),
            ),
        ],
        "multi_head_attention": [
            (
                Base(Call("multi_head_attention", (x6, *w, 3)), (0,), pair, "x: float32 (2, 5, 6), 3 heads, no mask"),
                ("one_head", "permutation", "rows_sum_to_one", "batched", "deterministic"),
            ),
            (
                Base(
                    Call("multi_head_attention", (x6, *w, 3), {"mask": mask5}),
                    (0,),
                    pair,
                    "5 tokens, 3 heads, causal mask",
                ),
                ("causal", "one_head"),
            ),
        ],
        "layer_norm": [
            (
                Base(Call("layer_norm", (r(2, 5, 6, scale=4.0) + 3,)), (0,), one, "x: float32 (2, 5, 6)"),
                ("moments", "batched", "deterministic"),
            ),
        ],
    }
    return found


def teacher_bases(assignment, items, preparation):
    """name -> [(Base, kinds)] of a teacher's assignment: each graded name's first graded checks' arguments
    (a class called in eval mode), with every generic property."""
    found = {}
    for item in items:
        if item.error is not None or item.check.kind != "call":
            continue
        name = item.check.function
        if name not in assignment.graded or len(found.get(name, [])) >= BASES_PER_NAME:
            continue
        try:
            _, args, kwargs = preparation.arguments(item, "cpu")
        except Exception:  # noqa: BLE001, S112 (the check reports its own case mistake)
            continue
        args = list(args)
        if args and instances.is_record(args[0]):
            record = args[0][instances.INSTANCE]
            args[0] = {instances.INSTANCE: {**record, "mode": "eval", "rng": None}}
        tokens = tuple(
            label
            for label, value in [*enumerate(args), *kwargs.items()]
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.ndim >= 2
        )
        if not tokens:
            continue
        entry = assignment.graded[name]
        base = Base(Call(name, tuple(args), dict(kwargs)), tokens, entry.returns, f"the inputs of {item.id}")
        found.setdefault(name, []).append((base, GENERIC))
    return found


# ---------------------------------------------------------------------------------------- the probes


def probes(assignment, items, preparation=None, points=None):
    """The properties of ``assignment`` that its reference holds, one Probe per graded name and kind, for the
    names that its checks ``items`` grade; each worth ``points`` (default: the assignment's ``property_points``),
    unless ``checks:`` gives its id other points. None given anywhere: the built-in spec's properties are worth
    PROPERTY_POINTS each, a teacher's are feedback worth 0 (the teacher's points are what the teacher gives);
    0 given: none."""
    points = first_given(points, assignment.settings.property_points)
    feedback = points is None and not assignment.builtin  # shown, worth nothing
    points = 0.0 if feedback else float(first_given(points, PROPERTY_POINTS))  # (0: only those checks: gives)
    if points == 0 and not feedback and not any(key.startswith("properties/") for key in assignment.settings.checks):
        return []
    if assignment.builtin:
        bases = builtin_bases()
    else:
        from attention_core.harness.checking import runner

        bases = teacher_bases(assignment, items, preparation or runner.Preparation())
    functions = assignment.functions
    checked = {i.check.function for i in items if i.error is None and i.check.kind == "call"}
    found = []
    for name, sets in bases.items():
        if name not in assignment.graded or name not in functions or name not in checked:
            continue  # a name no worked example grades gets no property either
        parts_of = {}
        generator = torch.Generator().manual_seed(SEED + len(name))
        for base, kinds in sets:
            for kind in kinds:
                made = KINDS[kind].make(base, generator)
                for part in made if isinstance(made, list) else [made]:
                    if part is not None and _reference_holds(part, functions):
                        parts_of.setdefault(kind, []).append(part)
        wanted = assignment.settings.properties.get(name)
        if wanted is not None:
            parts_of = {k: v for k, v in parts_of.items() if k in wanted}
        elif not assignment.builtin and "causal" in parts_of and _row_wise(parts_of):
            del parts_of["causal"]  # each row on its own (a layer norm): a permutation says more
        for kind, parts in parts_of.items():
            if kind == "permutation_rows" and "permutation" in parts_of:
                continue  # the same relation, read on the rows alone
            found.append(Probe(name, kind, KINDS[kind].title, parts, points))
    kept = []
    for probe in found:
        probe.points, given = worth.property_points(assignment, probe.id, probe.points)
        if probe.points > 0 or (feedback and not given):
            kept.append(probe)
    return kept


def _row_wise(parts_of):
    """Whether a permutation holds on every input set that ``causal`` holds on: each row on its own there (a layer
    norm). A permutation that holds on some of them only (a window of one, where the output is ``v``) says so of
    those inputs alone, and the causal property stays."""
    permuted = {id(p.base) for kind in ("permutation", "permutation_rows") for p in parts_of.get(kind, [])}
    return all(id(p.base) in permuted for p in parts_of["causal"])


def _reference_holds(part, functions):
    """Whether the reference holds ``part`` (a relation it breaks, or inputs it cannot take, is no property);
    where it does, its results' shapes are the ones ``part`` asks of every submission."""
    probe = Probe("", "", "", [part])
    try:  # (a call that raises is the relation's failure; a relation that cannot read the results, too)
        values = _values([probe], functions)
        holds = probe.verdict(values)[1] is None
    except Exception:  # noqa: BLE001
        return False
    if holds:
        part.shapes.update({c: shapes_of(values[c]) for c in part.calls})
    return holds


def _reference_call(functions, call):
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in call.args]
    kwargs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in call.kwargs.items()}
    with torch.no_grad():
        return functions[call.name](*args, **kwargs)


def evaluate(found, functions):
    """probe id -> (status, message) of each of ``found`` on ``functions`` (name -> callable, run here: a
    reference, a generated mutant); (None, None) where the property holds."""
    values = _values(found, functions)
    return {p.id: p.verdict(values) for p in found}


def _values(found, functions):
    """Call -> its value (or CallFailed) for every call of ``found``, the second round trip's too."""
    values = {}
    for call in {id(c): c for p in found for c in p.calls}.values():
        values[call] = _outcome(functions, call)
    for call in second_calls(found, values):
        values[call] = _outcome(functions, call)
    return values


def evaluate_call(functions, call):
    """``call`` made with ``functions`` here (its tensors copied, without autograd; the warnings of a
    reference's own code, an ``x.T`` on a batch, are not the reader's news)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _reference_call(functions, call)


FURTHER_SEED = SEED + 1  # the further inputs that tell the mistakes that fit apart


def further_calls(found):
    """Further calls of one graded name: each input set of its properties ``found`` with its token arguments
    drawn again (the same shapes and dtypes, other values), for telling apart the mistakes that give a
    submission's results on its checks. The same calls every time (a fixed seed)."""
    generator = torch.Generator().manual_seed(FURTHER_SEED)
    bases = list(
        {id(part.base): part.base for probe in found for part in probe.parts if part.base is not None}.values()
    )
    return [
        replaced(base.call, {label: fresh(argument(base.call, label), generator) for label in base.tokens})
        for base in bases
    ]


def outcome_of(functions, call):
    """``call`` made with ``functions`` here: its value, or the CallFailed that says why there is none."""
    return _outcome(functions, call)


def same_outcome(ours, theirs):
    """Whether two outcomes of one call agree: results alike within the agreement tolerance (NaN where NaN), or
    both failed with the same message past the name of the function (the same exception)."""
    if isinstance(ours, CallFailed) or isinstance(theirs, CallFailed):
        return (
            isinstance(ours, CallFailed)
            and isinstance(theirs, CallFailed)
            and ours.message.split(" raised ", 1)[-1] == theirs.message.split(" raised ", 1)[-1]
        )
    a = tuple(ours) if isinstance(ours, (tuple, list)) else (ours,)
    b = tuple(theirs) if isinstance(theirs, (tuple, list)) else (theirs,)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            return False
        if x.shape != y.shape or "meta" in (x.device.type, y.device.type):
            return False
        dtype = x.dtype if x.is_floating_point() else torch.float32
        if not close(x.detach().cpu(), y.detach().cpu(), dtype):
            return False
    return True


def _outcome(functions, call):
    if call.name not in functions:
        return CallFailed(Status.NOT_IMPLEMENTED, f"the implementation has no `{call.name}`")
    try:
        return evaluate_call(functions, call)
    except Exception as err:  # noqa: BLE001 (the call's failure is the property's)
        return CallFailed(Status.IMPLEMENTATION_ERROR, f"`{call.name}` raised {type(err).__name__}: {err}")
