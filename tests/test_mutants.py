"""A reference with one deliberate mistake fails at least one graded check, most of them a document's own."""

import pytest

from attention_core.harness import runner
from implementations import MISTAKES

DOCUMENTS = ("000_", "001_", "002_", "003_", "004_")
# No document masks a multi-head attention: only the cases beyond the documents (900_) can catch this.
BEYOND_THE_DOCUMENTS = ("multi-head attention dropping the mask",)


@pytest.fixture(scope="module")
def graded_checks():
    items = [i for i in runner.collect(runner.default_cases_folder()) if i.error is None]
    assert all(runner.run(i).passed for i in items), "the reference passes every check"
    return [i for i in items if i.check.kind == "call"]


def _failed(mistake, items):
    functions = {**runner.REFERENCE, **MISTAKES[mistake]}
    return [i.id for i in items if not runner.run(i, functions=functions).passed]


@pytest.mark.parametrize("mistake", [m for m in MISTAKES if m not in BEYOND_THE_DOCUMENTS])
def test_each_mistake_fails_a_document_check(mistake, graded_checks):
    assert _failed(mistake, [i for i in graded_checks if i.file.name.startswith(DOCUMENTS)]), \
        f"{mistake}: no document check fails"


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_mistake_fails_a_graded_check(mistake, graded_checks):
    assert _failed(mistake, graded_checks), f"{mistake}: no graded check fails"
