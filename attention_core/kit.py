"""A students' kit: the assignment without its solution, for students to check themselves with.

``python -m attention_core student-kit --assignment DIR KIT`` writes KIT, an assignment folder without
``reference.py``::

    KIT/kit.yaml          the graded names: kind, parameters, result names (what reference.py said)
    KIT/assignment.yaml   the teacher's settings, less the per-check ones that name hidden checks
    KIT/cases/*.yaml      the visible checks only; each instance a check makes has its initial
                          parameters recorded ('state'), and an oracle that reads the instance is
                          recorded as values (float64, full precision)
    KIT/template.py       the hand-out (and template.ipynb)
    KIT/README.md         how to check a file: pytest --assignment KIT --impl FILE

With ``--github-classroom``, also GitHub Classroom's autograding workflow, the requirements it installs and the
hand-out as the file it grades (``grading/platforms/classroom.py``).

A check whose arguments call another graded function needs the reference to make them: it is left
out of the kit (the teacher's grading still has it), and the README says how many.
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from attention_core.authoring.record import round_trip
from attention_core.grading.platforms import classroom
from attention_core.grading.platforms.template import FILE_NAME
from attention_core.harness.checking import calls, runner
from attention_core.harness.reading.assignment import KIT_FILE
from attention_core.harness.reading.points import of_check, visible


def write_kit(assignment, kit, out=None, *, github_classroom=False):
    """Write the kit of ``assignment`` into the new folder ``kit`` (with GitHub Classroom's files where
    ``github_classroom``); 0, or 2 when it cannot be written."""
    out = out or sys.stdout
    kit = Path(kit)
    if kit.exists():
        print(f"error: {kit} exists: a kit is written into a new folder", file=sys.stderr)
        return 2
    if not kit.parent.is_dir():
        print(f"error: {kit.parent}: no such folder", file=sys.stderr)
        return 2
    items = runner.collect(assignment.cases, assignment)
    broken = [i for i in items if i.error is not None]
    if broken:
        print(
            f"error: {broken[0].location}: {broken[0].error.message} (a kit is made from case files that "
            f"load: run lint)",
            file=sys.stderr,
        )
        return 2
    building = Path(tempfile.mkdtemp(prefix=f".{kit.name}-", dir=kit.parent))  # renamed to KIT once whole
    try:
        kept, left = _build(assignment, items, building, github_classroom=github_classroom)
    except classroom.ClassroomError as err:
        shutil.rmtree(building, ignore_errors=True)
        print(f"error: --github-classroom: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 (a check the reference cannot compute: no half-written kit)
        shutil.rmtree(building, ignore_errors=True)
        print(f"error: the kit could not be made: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    _readable(building)
    building.rename(kit)
    print(
        f"{kit}: {kept} visible check{'s' * (kept != 1)}"
        + (f", {left} left out (hidden, or needing the reference)" if left else "")
        + f"; students run: pytest --assignment {kit} --impl FILE"
        + (
            f"; GitHub Classroom: commit its files as the template repository (it grades {FILE_NAME})"
            if github_classroom
            else ""
        ),
        file=out,
    )
    return 0


def _build(assignment, items, kit, *, github_classroom=False):
    """Write the kit's files into the folder ``kit``; (checks kept, checks left out)."""
    (kit / "cases").mkdir(parents=True)
    kept, left = 0, 0
    preparation = runner.Preparation()
    by_file = {}
    for item in items:
        by_file.setdefault(item.file.path, []).append(item)
    for path, file_items in by_file.items():
        written, dropped = _kit_file(path, file_items, assignment, preparation, kit / "cases" / path.name)
        kept, left = kept + written, left + dropped
    _write_yaml(kit / KIT_FILE, _spec_tree(assignment))
    students = _students_settings(assignment)
    if students:
        _write_yaml(kit / "assignment.yaml", students)
    from attention_core.grading.platforms.template import assignment_template  # noqa: PLC0415

    (kit / "template.py").write_text(assignment_template(assignment), encoding="utf-8")
    (kit / "template.ipynb").write_text(assignment_template(assignment, fmt="ipynb"), encoding="utf-8")
    (kit / "README.md").write_text(_readme(assignment, kept, left), encoding="utf-8")
    if github_classroom:
        steps = classroom.write(kit)
        with open(kit / "README.md", "a", encoding="utf-8") as readme:
            readme.write(_classroom_readme(steps))
    return kept, left


def _kit_file(path, items, assignment, preparation, target):
    """Write the kit's copy of one case file; (checks kept, checks left out)."""
    text = Path(path).read_text(encoding="utf-8")
    yaml = round_trip(text)
    tree = yaml.load(text)
    kept, left, keep_cases = 0, 0, []
    by_case = {}
    for item in items:
        by_case.setdefault(item.case.id, []).append(item)
    for raw_case in tree["cases"]:
        case_items = by_case.get(raw_case.get("id"), [])
        keep_checks = []
        for shared in raw_case["checks"]:
            item = next((i for i in case_items if i.check.id == shared.get("id")), None)
            if item is None or not visible(assignment, item) or _needs_reference(item, assignment):
                left += 1
                continue
            raw_check = copy.deepcopy(shared)  # a YAML alias may share it with another case: record into a copy
            if item.check.kind == "call":  # its points as resolved: the kit has no checks: to resolve them
                raw_check["points"] = _number(of_check(assignment, item, 0.0).points)
            if _makes_instance(item):
                _record_instance(raw_check, item, preparation)
            _record_oracles(raw_check, item)
            keep_checks.append(raw_check)
            kept += 1
        if keep_checks:
            raw_case["checks"] = keep_checks
            keep_cases.append(raw_case)
    if keep_cases:
        tree["cases"][:] = keep_cases
        with open(target, "w", encoding="utf-8") as handle:
            yaml.dump(tree, handle)
    return kept, left


STUDENTS_SETTINGS = ("title", "graded", "returns", "mode", "call_timeout")  # what a kit's own run reads


def _students_settings(assignment):
    """The teacher's settings a kit's run needs: never ``checks:``, which may name hidden checks and their points
    (each kept check carries its points instead)."""
    given = assignment.settings.model_dump(exclude_unset=True)
    return CommentedMap((key, given[key]) for key in STUDENTS_SETTINGS if key in given)


def _number(value):
    return int(value) if float(value).is_integer() else value


def _readable(folder):
    """A kit is handed out: folders 0755, files 0644 (a temporary folder is made 0700)."""
    for root, _folders, files in os.walk(folder):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)


def _makes_instance(item):
    from attention_core.harness.languages import expr  # noqa: PLC0415

    return item.check.kind == "call" and expr.makes_instance(item.check.expr.tree)


def _needs_reference(item, assignment):
    """Whether the check needs the reference: its arguments call a graded function, or its module is called
    in train mode (whose dropout draws follow the reference's initial draws)."""
    if item.check.kind != "call":
        return False
    if _makes_instance(item) and item.check.mode == "train":
        return True  # its dropout draws from the stream after the reference's own initial draws
    return bool((item.check.expr.calls - {item.check.function}) & set(assignment.graded))


def _record_instance(raw_check, item, preparation):
    """Write the reference instance's initial state into the check, in float64 at full precision."""
    _, args, _ = preparation.arguments(item, "cpu")
    made = args[0]["instance"]
    recorded = CommentedMap()  # the parameters: a buffer (a mask) is the student's own instance's to make
    for name, value in made["state"].items():
        if name in made["buffers"]:
            continue
        recorded[name] = _flow(value.to(torch.float64).tolist() if value.is_floating_point() else value.tolist())
    raw_check["state"] = recorded


def _record_oracles(raw_check, item):
    """An oracle that reads the instance (``self``) becomes its values, in float64 at full precision."""
    reading = [e for e in item.check.expectations if e.kind == "oracle" and "self" in e.oracle.names]
    if not reading:
        return
    values = calls.oracles(item)
    for e in reading:
        raw = raw_check["expect"][e.target]
        recorded = CommentedMap()
        recorded["values"] = _flow(values[e.target].tolist())
        for key in ("rtol", "atol", "note"):
            if key in raw:
                recorded[key] = raw[key]
        raw_check["expect"][e.target] = recorded


def _flow(value):
    if not isinstance(value, list):
        return value
    seq = CommentedSeq(_flow(v) for v in value)
    seq.fa.set_flow_style()
    return seq


def _spec_tree(assignment):
    tree = CommentedMap()
    tree["title"] = assignment.name
    graded = CommentedMap()
    for g in assignment.graded.values():
        entry = CommentedMap(
            kind=g.kind,
            params=_flow([p.name for p in g.params]),
            call_params=_flow([p.name for p in g.call_params]),
            returns=_flow(list(g.returns)),
        )
        graded[g.name] = entry
    tree["graded"] = graded
    return tree


def _write_yaml(path, tree):
    yaml = YAML()
    with open(path, "w", encoding="utf-8") as handle:
        yaml.dump(tree, handle)


def _readme(assignment, kept, left):
    names = ", ".join(f"`{g.signature()}`" for g in assignment.graded.values())
    missing = (
        f"\n{left} of the teacher's checks are not in this kit (hidden ones, and those whose arguments "
        f"need the solution); your grade counts them too.\n"
        if left
        else ""
    )
    return (
        f"# {assignment.name}: a students' kit\n\n"
        f"Implement {names} in one file (start from `template.py`, or `template.ipynb`), then check it "
        f"against the visible worked examples:\n\n"
        f"```sh\npytest --assignment . --impl my_solution.py\n```\n\n"
        f"Each failing check says what was expected and what your code returned. The run ends with a line "
        f"`points: X / Y`: the points of the checks that passed (a failed one earns 0) out of those of all the "
        f"checks here; `--points-json FILE` writes them check by check. This checks values only: "
        f"when your teacher grades, each call's gradients are checked too (no `.detach()`, no change to "
        f"the tensors you are given).\n{missing}"
    )


def _classroom_readme(steps):
    rows = "".join(f"| `cases/{name}.yaml` | {points} |\n" for name, points in steps)
    return (
        f"\n## GitHub Classroom\n\n"
        f"Write your answers in `{FILE_NAME}` and push: each push runs `.github/workflows/classroom.yml`, which "
        f"installs `requirements.txt` and checks that file as above, one case file at a time. A case file's "
        f"points are yours when every one of its checks passes:\n\n"
        f"| case file | points |\n|---|---|\n{rows}\n"
        f"To check it as the workflow does, on your own machine:\n\n"
        f"```sh\npython -m pip install -r requirements.txt\n{classroom.command(steps[0][0])}\n```\n\n"
        f"(`-k '[NAME/'` selects the checks of `cases/NAME.yaml`; leave it out to run them all.)\n"
    )
