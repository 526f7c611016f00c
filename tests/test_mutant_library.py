"""The shipped mutant library: each mutant is wrong where it says, right where it says, and writes out as a submission."""

import ast
import functools
import gc
import inspect
import weakref
from types import SimpleNamespace

import pytest
import torch

from attention_core import reference, spec
from attention_core.grading.naming import diagnose, mutants
from attention_core.grading.naming.mutants import MUTANTS, Mutant, relevant, submission_source
from attention_core.harness.checking import runner
from attention_core.harness.checking.results import Result, Status

# transpose_for_2d_only uses k.T on batched tensors on purpose; torch warns that it is deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:The use of `x.T`:UserWarning")

GRADED = [
    item for item in runner.collect(runner.default_cases_folder()) if item.error is None and item.check.kind == "call"
]
BY_BREAKS = {breaks: [m for m in MUTANTS if m.breaks == breaks] for breaks in mutants.BREAKS}


def ids(mutant):
    return mutant.name


def _checks(mutant):
    """(item, result) for each graded check that calls a function the mutant changes."""
    functions = {**runner.REFERENCE, **mutant.functions}
    return ((item, runner.run(item, functions=functions)) for item in GRADED if item.check.function in mutant.functions)


# ---------------------------------------------------------------- against the shipped case files


DOCUMENTS = ("000_", "001_", "002_", "003_", "004_")


# Mistakes the documents themselves make work on their own inputs: caught beyond them only.
BEYOND_ONLY = {
    # Document 003's In [29] merges with b.transpose(1, 2).view(...), where b was itself transposed: its view works
    # there, and raises on a contiguous input (900_beyond_the_documents's heads_4d).
    "merge_heads_view_of_transposed",
}


@pytest.mark.parametrize("mutant", BY_BREAKS["values"], ids=ids)
def test_a_values_mutant_fails_a_check_of_the_documents_themselves(mutant):
    where = ("900_",) if mutant.name in BEYOND_ONLY else DOCUMENTS
    assert any(not result.passed for item, result in _checks(mutant) if item.file.name.startswith(where)), (
        f"{mutant.name}: no check of {where} catches it"
    )


@pytest.mark.parametrize("mutant", BY_BREAKS["gradient"] + BY_BREAKS["side effect"], ids=ids)
def test_a_mutant_with_right_values_passes_every_shipped_check(mutant):
    checks = list(_checks(mutant))
    assert checks, f"{mutant.name}: no shipped check calls {sorted(mutant.functions)}"
    for _item, result in checks:
        assert result.passed, result.report


# ---------------------------------------------------------------- sample inputs


def _sample(name):
    """Fresh ``(args, kwargs)`` for spec function ``name``: batched, float32, the same on every call."""
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    return {
        "softmax": lambda: ((r(2, 3, 4),), {"dim": -1}),
        "causal_mask": lambda: ((5,), {}),
        "causal_average": lambda: ((r(2, 5, 3),), {}),
        "attention": lambda: (
            (r(2, 3, 4), r(2, 5, 4), r(2, 5, 6)),
            {"mask": torch.ones(3, 5, dtype=torch.bool).tril(2)},
        ),  # every row attends somewhere
        "split_heads": lambda: ((r(2, 5, 6), 3), {}),
        "merge_heads": lambda: ((r(2, 3, 5, 2),), {}),
        "multi_head_attention": lambda: (
            (r(2, 5, 6), r(6, 6), r(6, 6), r(6, 4), 2),
            {"mask": torch.ones(5, 5, dtype=torch.bool).tril()},
        ),
        "layer_norm": lambda: ((r(2, 3, 4),), {}),
    }[name]()


def _outcome(function, name):
    """The results as a tuple of tensors, or the type of the exception raised."""
    args, kwargs = _sample(name)
    try:
        result = function(*args, **kwargs)
    except Exception as err:
        return type(err)
    return result if isinstance(result, tuple) else (result,)


@functools.cache
def _submission(mutant_name):
    """The spec functions of the mutant's submission source, executed in a fresh namespace."""
    namespace = {"__name__": f"submission_{mutant_name}"}
    exec(compile(submission_source(mutants.BY_NAME[mutant_name]), f"<{mutant_name}>", "exec"), namespace)
    return {name: namespace[name] for name in spec.NAMES}


def _library(mutant_name):
    return {**runner.REFERENCE, **mutants.BY_NAME[mutant_name].functions}


FRONTS = {"library": _library, "submission": _submission}


# ---------------------------------------------------------------- gradients and side effects


def _gradients(function, name):
    """d sum(output * a fixed random projection) / d each floating input; None where none reaches it."""
    args, kwargs = _sample(name)
    inputs = [a.requires_grad_() for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    output = function(*args, **kwargs)
    output = output[0] if isinstance(output, tuple) else output
    if not output.requires_grad:
        return [None] * len(inputs)
    projection = torch.randn(output.shape, generator=torch.Generator().manual_seed(1))
    return torch.autograd.grad((output * projection).sum(), inputs, allow_unused=True)


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("mutant", BY_BREAKS["gradient"], ids=ids)
def test_a_gradient_mutant_loses_or_breaks_the_gradient(mutant, front):
    for name in mutant.functions:
        expected = _gradients(reference.__dict__[name], name)
        assert all(g is not None for g in expected)
        actual = _gradients(FRONTS[front](mutant.name)[name], name)
        assert any(a is None or not torch.allclose(a, e) for a, e in zip(actual, expected)), (
            f"{mutant.name}: {name}'s gradient is right"
        )


def _changes_its_inputs(function, name):
    args, kwargs = _sample(name)
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    try:
        function(*args, **kwargs)
    except Exception:
        pass
    return any(isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(args, before))


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("mutant", MUTANTS, ids=ids)
def test_only_a_side_effect_mutant_changes_the_callers_tensors(mutant, front):
    functions = FRONTS[front](mutant.name)
    changed = [name for name in mutant.functions if _changes_its_inputs(functions[name], name)]
    assert bool(changed) == (mutant.breaks == "side effect"), changed


@pytest.mark.parametrize("mutant", MUTANTS, ids=ids)
def test_a_mutant_keeps_the_float32_dtype(mutant):
    for name, function in mutant.functions.items():
        outcome = _outcome(function, name)
        if isinstance(outcome, tuple):
            assert all(t.dtype == torch.float32 for t in outcome if t.is_floating_point()), name


# ---------------------------------------------------------------- the submission source


@pytest.mark.parametrize("mutant", MUTANTS, ids=ids)
def test_the_submission_source_behaves_as_the_mutant_for_every_spec_function(mutant):
    submission, library = _submission(mutant.name), _library(mutant.name)
    for name in spec.NAMES:
        expected, actual = _outcome(library[name], name), _outcome(submission[name], name)
        if isinstance(expected, type):
            assert actual is expected, name
        else:
            torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True, msg=name)


@pytest.mark.parametrize("mutant", MUTANTS, ids=ids)
def test_the_submission_source_imports_only_torch_and_math(mutant):
    tree = ast.parse(submission_source(mutant))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree))
    assert imported == {"math", "torch"}
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(defined) == len(set(defined)), "a name defined twice"
    assert set(spec.NAMES) <= set(defined)


def test_a_mutant_function_uses_only_torch_math_and_the_private_helpers():
    allowed = {"torch", "math"}
    for function in [f for m in MUTANTS for f in m.functions.values()] + mutants._helpers(
        f for m in MUTANTS for f in m.functions.values()
    ):
        codes = [function.__code__, *(c for c in function.__code__.co_consts if inspect.iscode(c))]
        used = {n for c in codes for n in c.co_names if n in vars(mutants)}
        assert all(n in allowed or (n.startswith("_") and inspect.isfunction(vars(mutants)[n])) for n in used), (
            function.__name__,
            used,
        )


def test_renaming_touches_names_only():
    source = 'def softmax(x):  # softmax\n    return reference.softmax(softmax, "softmax")\n'
    assert (
        mutants._renamed(source, {"softmax": "_s"})
        == 'def _s(x):  # softmax\n    return reference.softmax(_s, "softmax")\n'
    )


# ---------------------------------------------------------------- the catalogue


def test_every_mutant_is_described_and_matches_the_spec_signatures():
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    for m in MUTANTS:
        assert m.functions and m.mistake and m.fix, m.name
        for name, function in m.functions.items():
            params = inspect.signature(function).parameters.values()
            wanted = spec.FUNCTIONS[name].params
            assert [p.name for p in params] == [p.name for p in wanted], (m.name, name)
            assert [p.default for p in params] == [
                inspect.Parameter.empty if p.required else p.default for p in wanted
            ], (m.name, name)


def test_relevant_lists_the_mutants_that_change_a_function():
    assert [m.name for m in relevant("softmax")] == [
        "softmax_wrong_axis",
        "softmax_without_max_subtraction",
        "tolist_round_trip",
        "softmax_as_log_softmax",
    ]
    assert relevant("no_such_function") == []
    for name in spec.NAMES:
        assert relevant(name), f"no mutant of {name}"


def test_agreement_with_a_mutant_matches_an_infinity_only_with_itself_and_nan_with_nan():
    inf, nan = float("inf"), float("nan")
    ours = torch.tensor([0.0, inf, -inf, nan, 1.0], dtype=torch.float64)
    theirs = torch.tensor([inf, inf, inf, nan, 1.0], dtype=torch.float64)
    assert [diagnose._close(a, b, 1e-5, 1e-8) for a, b in zip(ours, theirs)] == [False, True, False, True, True]


def test_breaks_is_one_of_three_words():
    with pytest.raises(ValueError, match="breaks must be one of"):
        Mutant("x", {}, "mistake", "fix", "speed")


def test_a_mistake_in_two_functions_is_worded_for_each_alone():
    with pytest.raises(ValueError, match="its parts must word the mistake of each of them alone"):
        Mutant("x", {"softmax": None, "attention": None}, "mistake", "fix", "values")


@pytest.mark.parametrize("wrong", ["softmax", "attention"])
def test_a_failed_check_names_only_the_mistake_of_the_function_it_checks(wrong):
    """A student who made one half of a two-function mistake: the other function passes its own
    checks, and no feedback sends the student to it."""
    both = next(m for m in MUTANTS if m.name == "softmax_wrong_axis")
    functions = {**runner.REFERENCE, wrong: both.functions[wrong]}
    grades = []
    for item in GRADED:
        if item.check.function in both.functions:
            result = runner.run(item, functions=functions)
            grades.append(SimpleNamespace(item=item, result=result, check_id=item.id, diagnosis=""))
    diagnose.Diagnoser().explain(SimpleNamespace(grades=grades))
    failed = [g for g in grades if not g.result.passed]
    assert failed and {g.item.check.function for g in failed} == {wrong}
    own, other = both.parts[wrong][0], next(part[0] for f, part in both.parts.items() if f != wrong)
    assert any(own in g.diagnosis for g in failed)
    assert not any(other in g.diagnosis or both.mistake in g.diagnosis for g in failed)


@pytest.mark.parametrize("name", ["no_scale", "weights_times_v_transposed"])
def test_on_a_large_check_a_mutant_unlike_the_student_on_the_first_batch_entry_is_not_run_on_the_whole(name):
    item = next(i for i in GRADED if i.id.endswith("/sdpa/attention"))
    mutant = next(m for m in MUTANTS if m.name == name)
    with torch.no_grad():
        student = runner.run(item, functions={**runner.REFERENCE, **mutant.functions})
    assert not student.passed
    diagnoser = diagnose.Diagnoser()
    assert name in [m.name for m in diagnoser.candidates(item, student)]
    first = {key[1]: result for key, (result, _) in diagnoser._results._entries.items() if key[-1] is diagnoser._first}
    whole = {key[1] for key in diagnoser._results._entries if key[-1] is diagnoser.preparation}
    assert len(first) == len(relevant("attention")) - sum(m.breaks != "values" for m in relevant("attention"))
    # Run on the whole: the match, and those the first batch entry could not tell apart from it.
    assert name in whole and len(whole) <= 3, sorted(whole)


def test_a_diagnosis_keeps_nothing_of_a_result_once_the_grader_drops_it():
    no_scale = next(m for m in MUTANTS if m.name == "no_scale")
    functions = {**runner.REFERENCE, **no_scale.functions}
    item = next(i for i in GRADED if i.check.function == "attention" and not runner.run(i, functions=functions).passed)
    grade = SimpleNamespace(item=item, result=runner.run(item, functions=functions), check_id=item.id, diagnosis="")
    diagnoser = diagnose.Diagnoser()  # lives for the whole batch
    diagnoser.explain(SimpleNamespace(grades=[grade]))
    assert no_scale.mistake in grade.diagnosis
    kept = weakref.ref(grade.result)
    del grade
    gc.collect()
    assert kept() is None, "over a batch, every failed result (a large check's outputs) would be held"
    assert diagnoser.library  # the diagnoser outlives the result


def test_a_function_built_on_a_wrong_one_of_the_students_is_sent_to_that_one():
    """A multi_head_attention that calls the student's own attention, whose mask is read inverted:
    no mutant of multi_head_attention explains its failures, and the feedback names attention."""
    inverted = next(m for m in MUTANTS if m.name == "mask_inverted")
    student = {}
    exec(inspect.getsource(reference), student)  # noqa: S102 (our own text)
    student["attention"] = inverted.functions["attention"]  # the student's module calls its own attention
    functions = {name: student[name] for name in spec.NAMES}
    grades = [
        SimpleNamespace(item=item, result=runner.run(item, functions=functions), check_id=item.id, diagnosis="")
        for item in GRADED
        if item.check.function in ("attention", "multi_head_attention", "split_heads")
    ]
    diagnose.Diagnoser().explain(SimpleNamespace(grades=grades))
    by_function = {}
    for grade in grades:
        if not grade.result.passed:
            by_function.setdefault(grade.item.check.function, []).append(grade.diagnosis)
    assert set(by_function) == {"attention", "multi_head_attention"}
    assert all(inverted.mistake in d for d in by_function["attention"])
    assert all(
        d.startswith(
            "Likely cause: `attention`, which the reference `multi_head_attention` calls, fails its own checks."
        )
        for d in by_function["multi_head_attention"]
    ), by_function


def test_a_function_that_crashes_on_its_own_is_not_sent_to_a_part_that_fails_another_way():
    """A multi_head_attention whose process dies (``os._exit``) beside the student's wrong attention: a crash is
    never a part's wrong values, so no part is named as its cause; a part that crashes too is."""
    inverted = next(m for m in MUTANTS if m.name == "mask_inverted")
    graded = [i for i in GRADED if i.check.function in ("attention", "multi_head_attention")]

    def grades(attention_crashes, how="crashed: the submission's process died (exit code 0)"):
        made = []
        for item in graded:
            name = item.check.function
            if name == "multi_head_attention" or attention_crashes:
                died = f"`{name}` {how}"
                result = Result(Status.IMPLEMENTATION_ERROR, item.id, item.location, message=died)
            else:
                result = runner.run(item, functions={**runner.REFERENCE, **inverted.functions})
            made.append(SimpleNamespace(item=item, result=result, check_id=item.id, diagnosis=""))
        diagnose.Diagnoser().explain(SimpleNamespace(grades=made))
        return [g.diagnosis for g in made if g.item.check.function == "multi_head_attention"]

    alone = grades(attention_crashes=False)
    assert alone and not any("Likely cause" in d for d in alone), alone
    both = grades(attention_crashes=True)
    assert both and all(d.startswith("Likely cause: `attention`, which the reference") for d in both), both
    # A part's wrong values (a wrong shape) make the caller's own matmul raise: that part is its likely cause
    raised = grades(attention_crashes=False, how="raised RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    assert raised and all(d.startswith("Likely cause: `attention`, which the reference") for d in raised), raised
