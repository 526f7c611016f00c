"""A grade depends on the student's file alone.

Every kind of submission (correct, partial, constant, one-mistake, crashing, a notebook, a zip, a folder) is
graded alone by a grader of its own, then in one grader after every other kind and after itself (a sequence
holding each ordered pair), and in a batch of two grader processes: its results are the same each time. And
the reference with any one name removed keeps every point of every check and property that does not need
that name (by the reference's own calls).
"""

import ast
import inspect
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from attention_core import reference
from attention_core.grading.judging.grader import Grader
from attention_core.grading.judging.options import GradingOptions
from attention_core.grading.naming.diagnose import calls_of
from attention_core.grading.outputs import gradescope
from attention_core.grading.outputs.batch import grade_command
from attention_core.harness.reading import assignment as assignments

pytestmark = pytest.mark.grading

TESTS = Path(__file__).resolve().parent
BUILTIN = TESTS / "submissions" / "builtin"
LLAMA = TESTS / "assignments" / "llama"
BOOK = TESTS / "assignments" / "book"
OPTIONS = GradingOptions()  # the defaults, as a teacher grades (a crash is tried here, not a hang)


def _every_pair(kinds):
    """A sequence of ``kinds`` in which each kind follows every kind, itself included (n * n + 1 long)."""
    n = len(kinds)
    unused = {i: list(range(n)) for i in range(n)}
    path, stack = [], [0]
    while stack:  # Hierholzer's walk of the complete directed graph with loops: an Eulerian circuit
        node = stack[-1]
        if unused[node]:
            stack.append(unused[node].pop())
        else:
            path.append(stack.pop())
    return [kinds[i] for i in reversed(path)]


def _seen(graded):
    """What a student and the gradebook see of a graded submission, less its time."""
    results = gradescope.results_json(graded)
    results.pop("execution_time")
    return json.dumps(results, sort_keys=True)


def _builtin_kinds(tmp):
    folder = tmp / "folder"
    folder.mkdir()
    shutil.copy(BUILTIN / "correct_matmul.py", folder / "solution.py")
    crash = tmp / "crash.py"
    crash.write_text(inspect.getsource(reference) + "\n\nimport os\n\ndef layer_norm(x, eps=1e-5):\n    os._exit(0)\n")
    return [
        BUILTIN / "correct_einsum.py",
        BUILTIN / "partial_missing_names.py",
        BUILTIN / "constant_zeros.py",
        BUILTIN / "mistake_scale_by_d.py",
        BUILTIN / "notebook_correct.ipynb",
        crash,
        folder,
    ]


def _assert_the_same_alone_and_among_others(kinds, assignment=None):
    alone = {}
    for kind in kinds:
        with Grader(assignment=assignment, options=OPTIONS) as grader:
            alone[kind] = _seen(grader.grade(kind))
    sequence = _every_pair(kinds)
    with Grader(assignment=assignment, options=OPTIONS) as grader:
        for position, (kind, graded) in enumerate(zip(sequence, grader.grade_each(sequence))):
            before = sequence[position - 1].name if position else "nothing"
            assert _seen(graded) == alone[kind], f"{kind.name} graded after {before} differs from it alone"
    return alone


def test_builtin_submissions_of_every_kind_grade_the_same_alone_first_last_and_after_each_other(tmp_path):
    kinds = _builtin_kinds(tmp_path)
    alone = _assert_the_same_alone_and_among_others(kinds)
    scores = {k.name: json.loads(alone[k])["score"] for k in kinds}
    assert scores["correct_einsum.py"] == scores["notebook_correct.ipynb"] == scores["folder"] == 152
    assert scores["constant_zeros.py"] == 0  # an answer that computes nothing earns nothing


def test_a_teachers_submissions_of_every_kind_grade_the_same_alone_and_after_each_other(tmp_path):
    subs = LLAMA / "submissions"
    kinds = [
        subs / "correct_sdpa_complex.py",
        subs / "partial_norm_attention.py",
        subs / "constant_identity.py",
        subs / "mistake_rope_on_values.py",
    ]
    alone = _assert_the_same_alone_and_among_others(kinds, LLAMA)
    scores = {k.name: (json.loads(alone[k])["score"], json.loads(alone[k])["max_score"]) for k in kinds}
    assert scores["correct_sdpa_complex.py"] == (44, 44)  # the teacher's maximum: the case files' points
    assert scores["constant_identity.py"][0] == 0


def test_two_grader_processes_give_each_submission_what_one_gives(tmp_path):
    kinds = _builtin_kinds(tmp_path)
    zipped = tmp_path / "zipped.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.write(BUILTIN / "correct_functional.py", "attention_student.py")
    kinds.append(zipped)
    found = {}
    for jobs, order in ((1, kinds), (2, kinds[::-1])):
        out = tmp_path / f"out{jobs}"
        assert grade_command(order, out, jobs=jobs, options=OPTIONS, stream=_Null(), report=_Null()) == 0
        for kind in kinds:
            (results,) = (out / "submissions").rglob(f"{kind.stem}/results.json")
            text = json.loads(results.read_text(encoding="utf-8"))
            text.pop("execution_time")
            found.setdefault(kind.name, []).append(text)
    for name, (one, two) in found.items():
        assert one == two, f"{name}: --jobs 1 and --jobs 2 differ"
    assert found["zipped.zip"][0]["score"] == 152


class _Null:
    def write(self, text):
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False


# ------------------------------------------------------------------------- the reference less one name


def _without(source, name):
    """``source`` with the top-level definition of ``name`` removed."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    (node,) = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name]
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    return "".join(lines[:start] + lines[node.end_lineno :])


def _needs(chosen):
    """graded name -> the graded names it needs: itself and what its reference calls, at any depth."""
    direct = calls_of(chosen.reference, chosen.names)
    needs = {}
    for name in chosen.names:
        found, todo = {name}, [name]
        while todo:
            for other in direct.get(todo.pop(), ()):
                if other not in found:
                    found.add(other)
                    todo.append(other)
        needs[name] = found
    return needs


@pytest.mark.parametrize("folder", [None, LLAMA, BOOK], ids=["builtin", "llama", "book"])
def test_the_reference_less_any_one_name_keeps_every_point_that_does_not_need_that_name(tmp_path, folder):
    chosen = assignments.resolve(folder)
    source = inspect.getsource(chosen.reference) if folder is None else (folder / "reference.py").read_text()
    needs = _needs(chosen)
    variants = []
    for name in chosen.names:
        path = tmp_path / f"without_{name}.py"
        path.write_text(_without(source, name), encoding="utf-8")
        variants.append((name, path))
    with Grader(assignment=folder, options=OPTIONS) as grader:
        probes = {p.id: p for p in grader.probes}
        for (removed, _path), graded in zip(variants, grader.grade_each([p for _, p in variants])):
            assert graded.max_score > 0
            for grade in graded.grades:
                function = getattr(grade.item.check, "function", None)
                used = set(needs.get(function, {function}))
                if grade.check_id in probes:  # a property may call other names (one_head: attention)
                    for other in probes[grade.check_id].names:
                        used |= needs.get(other, {other})
                if removed in used:
                    continue
                said = " ".join(grade.result.message.split())[:300]
                assert grade.score == grade.max_score, (
                    f"without {removed}: {grade.check_id} ({function}, which does not need it) scored "
                    f"{grade.score} of {grade.max_score}: {said}"
                )
