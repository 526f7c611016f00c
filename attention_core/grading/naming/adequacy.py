"""Adequacy: which mistakes an assignment's cases and properties would let through.

``python -m attention_core adequacy --assignment DIR`` makes the mistakes of ``generated.py`` from the
assignment's reference (and, for the built-in spec, the shipped library of ``mutants.py`` too), runs
each on every check of the name it is in (and of the names whose reference calls that one) and on its
properties, here, in this process, and reports each mistake that passes them all: no case tells it
from the reference, so a student who makes it keeps every point. A mistake that gives the
reference's results on every input tried, the property inputs included, is the same program (dropout
left out, in eval mode) and is counted apart.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass

import torch

from attention_core.grading import properties
from attention_core.grading.naming import generated, mutants, own_mistakes
from attention_core.grading.naming.diagnose import calls_of
from attention_core.harness.checking import runner


@dataclass
class Verdict:
    """One mistake: where it is, what it is, its kind, and the first check or property that catches it (None:
    none); ``source``: ``library``, ``generated`` or ``own`` (the teacher's ``mistakes/``)."""

    owner: str
    mistake: str
    caught_by: str | None
    same_program: bool = False
    kind: str = ""
    source: str = "generated"


@dataclass
class Assessment:
    """Every mistake's Verdict, the graded names, and the problems of the teacher's own mistake files."""

    verdicts: list
    names: tuple
    problems: list


def assess(chosen):
    """The Assessment of ``chosen`` (an Assignment with its reference): a Verdict for each mistake."""
    items = [i for i in runner.collect(chosen.cases, chosen) if i.error is None and i.check.kind == "call"]
    preparation = runner.Preparation()
    probes = properties.probes(chosen, items, preparation)
    reference = chosen.functions
    callers = calls_of(chosen.reference, chosen.names)
    made = generated.generate(chosen)
    library = [m for m in mutants.MUTANTS if m.breaks == "values"] if chosen.builtin else []
    own, problems = own_mistakes.load(chosen) if not chosen.builtin else ([], [])
    verdicts = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for source, mutant in [
            *(("library", m) for m in library),
            *(("own", m) for m in own),
            *(("generated", m) for m in made),
        ]:
            owners = {generated.owner_of(mutant)} if source == "generated" else set(mutant.functions)
            reach = owners | {name for name, called in callers.items() if owners & set(called)}
            functions = {**reference, **mutant.functions}
            caught = _first_catch(
                [i for i in items if i.check.function in reach], probes, owners, functions, preparation
            )
            kind = generated.kind_of(mutant) if source == "generated" else mutant.name.rsplit(":", 1)[-1]
            verdict = Verdict(", ".join(sorted(owners)), mutant.mistake, caught, kind=kind, source=source)
            if caught is None:
                verdict.same_program = _same_everywhere([p for p in probes if p.name in owners], reference, functions)
            verdicts.append(verdict)
    return Assessment(verdicts, tuple(chosen.names), problems)


def _first_catch(items, probes, owners, functions, preparation):
    for item in items:
        if not runner.run(item, functions=functions, preparation=preparation).passed:
            return item.id
    for pid, (_, message) in properties.evaluate([p for p in probes if p.name in owners], functions).items():
        if message is not None:
            return pid
    return None


def _same_everywhere(probes, reference, functions):
    """Whether ``functions`` give ``reference``'s results on every property input (nothing to tell apart)."""
    for probe in probes:
        for call in probe.calls:
            try:
                ours = properties.evaluate_call(reference, call)
                theirs = properties.evaluate_call(functions, call)
            except Exception:  # noqa: BLE001 (one raises where the other may not: not the same)
                return False
            if not _same(ours, theirs):
                return False
    return True


def _same(a, b):
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    return len(a) == len(b) and all(
        isinstance(x, torch.Tensor)
        and isinstance(y, torch.Tensor)
        and x.shape == y.shape
        and torch.allclose(x.double(), y.double(), rtol=1e-5, atol=1e-6, equal_nan=True)
        for x, y in zip(a, b)
    )


def report(assessment, *, verbose=False, stream=None):
    """The teacher's summary: per graded name, the kinds of mistake tried, those no case or property catches, and
    the names no mistake was made for; the teacher's own mistakes, each caught or not; with ``verbose``, what
    catches each."""
    stream = stream or sys.stdout
    verdicts = assessment.verdicts
    missed = [v for v in verdicts if v.caught_by is None and not v.same_program]
    same = [v for v in verdicts if v.caught_by is None and v.same_program]
    caught = [v for v in verdicts if v.caught_by is not None]
    print(
        f"{len(caught)} of {len(verdicts)} mistakes made from the reference are caught by a check or a property; "
        f"{len(same)} give{'s' * (len(same) == 1)} the reference's results everywhere tried (the same program); "
        f"{len(missed)} {'is' if len(missed) == 1 else 'are'} not caught.",
        file=stream,
    )
    for problem in assessment.problems:
        print(f"error: {problem}", file=stream)
    for name in assessment.names:
        mine = [v for v in verdicts if name in v.owner.split(", ") and v.source != "own"]
        if not mine:
            print(
                f"`{name}`: no mistake is made for it (no slip the generator knows can be made in its code): only "
                f"the cases' values judge it",
                file=stream,
            )
            continue
        kinds = sorted({v.kind for v in mine})
        lost = [v for v in mine if v.caught_by is None and not v.same_program]
        alike = [v for v in mine if v.caught_by is None and v.same_program]
        print(
            f"`{name}`: {len(mine)} mistakes of {len(kinds)} kinds tried ({', '.join(kinds)}); "
            f"{len(mine) - len(lost) - len(alike)} caught, {len(alike)} give the reference's results on every "
            f"input tried, {len(lost)} not caught",
            file=stream,
        )
        seen = set()
        for v in lost:
            if v.mistake not in seen:
                seen.add(v.mistake)
                print(
                    f"  not caught, in `{v.owner}`: {v.mistake}: no case tells this from the reference "
                    f"(add a case where it changes the result)",
                    file=stream,
                )
        for v in alike:
            if v.mistake not in seen:
                seen.add(v.mistake)
                print(
                    f"  the reference's results on every input tried, in `{v.owner}`: {v.mistake} (the same "
                    f"program, as dropout in eval mode; or a difference no input shows, as a parameter whose "
                    f"initial value is 1: only the backward checks can tell)",
                    file=stream,
                )
        if verbose:
            for v in mine:
                if v.caught_by is not None:
                    print(f"  caught, in `{v.owner}`: {v.mistake}: by {v.caught_by}", file=stream)
    own = [v for v in verdicts if v.source == "own"]
    if own:
        print(
            f"the teacher's own mistakes (mistakes/): {sum(v.caught_by is not None for v in own)} of {len(own)} caught",
            file=stream,
        )
        for v in own:
            said = f"caught by {v.caught_by}" if v.caught_by else "NOT caught: no case tells it from the reference"
            print(f"  {v.kind} (`{v.owner}`): {v.mistake}: {said}", file=stream)
    return 1 if assessment.problems else 0
