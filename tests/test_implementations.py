"""Grading other implementations: each correct style passes every graded check; what is missing is named.

A submission is passed to the runner on its own, never merged with the reference core, so a
check that needs a function the submission lacks shows it.
"""

import pytest
from implementations import EMPTY, SOFTMAX_ONLY, STYLES

from attention_core import spec
from attention_core.harness.checking import runner
from attention_core.harness.checking.results import Status

GRADED = [
    item for item in runner.collect(runner.default_cases_folder()) if item.error is None and item.check.kind == "call"
]


@pytest.mark.parametrize(
    ("style", "item"),
    [(style, item) for style in STYLES for item in GRADED],
    ids=lambda p: p if isinstance(p, str) else p.id,
)
def test_a_correct_style_passes_every_graded_check(style, item):
    result = runner.run(item, functions=STYLES[style])
    assert result.passed, result.report


@pytest.mark.parametrize("item", [i for i in GRADED if i.check.function == "softmax"], ids=lambda i: i.id)
def test_a_softmax_only_submission_passes_every_softmax_check(item):
    result = runner.run(item, functions=SOFTMAX_ONLY)
    assert result.passed, result.report


@pytest.mark.parametrize(
    ("submission", "item"),
    [("softmax_only", i) for i in GRADED if i.check.function != "softmax"] + [("empty", i) for i in GRADED],
    ids=lambda p: p if isinstance(p, str) else p.id,
)
def test_a_missing_function_fails_its_checks_as_not_implemented(submission, item):
    functions = {"softmax_only": SOFTMAX_ONLY, "empty": EMPTY}[submission]
    result = runner.run(item, functions=functions)
    assert not result.passed
    assert result.status is Status.NOT_IMPLEMENTED, result.report
    assert f"not implemented: the implementation has no `{item.check.function}`" in result.report


def test_every_spec_function_is_graded_somewhere_and_each_style_implements_them_all():
    assert {item.check.function for item in GRADED} == set(spec.GRADED)
    for style, functions in STYLES.items():
        assert set(functions) == set(spec.NAMES), style
