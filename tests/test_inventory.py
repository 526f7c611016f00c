"""The corpus inventory agrees with the case files, and the docs' corpus table is made from it."""

import io
import shutil

import pytest

from attention_core import checks
from attention_core.harness.checking import runner
from attention_core.harness.reading import inventory
from attention_core.harness.reading.cases import load_folder

CASES = runner.default_cases_folder()
CORPUS_PAGE = CASES.parent / "docs" / "corpus.md"
DOCUMENTS = (
    "000_attention_explained",
    "001_self_attention",
    "002_attention_mechanism",
    "003_attention_math_trick",
    "004_self_attention_from_scratch",
)


def test_every_document_has_an_inventory_and_it_agrees_with_the_case_files():
    rows = inventory.load(CASES)
    assert sorted(rows) == sorted(DOCUMENTS)
    assert inventory.problems(rows, load_folder(CASES)) == []


def test_every_row_is_encoded_or_says_why_not():
    for document_rows in inventory.load(CASES).values():
        for row in document_rows:
            assert row.status in inventory.STATUSES
            assert row.refs if row.status == "encoded" else row.reason, row


def test_the_docs_corpus_table_is_made_from_the_inventory():
    text = CORPUS_PAGE.read_text(encoding="utf-8")
    start = text.index(checks.README_START) + len(checks.README_START)
    table = text[start : text.index(checks.README_END)].strip()
    assert table == inventory.corpus_table(inventory.load(CASES), load_folder(CASES))


@pytest.fixture
def copy(tmp_path):
    shutil.copytree(CASES, tmp_path / "cases")
    return tmp_path / "cases"


def _edit(path, old, new):
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _problems(folder):
    return inventory.problems(inventory.load(folder), load_folder(folder))


def test_an_encoded_row_without_a_check_is_reported(copy):
    _edit(copy / "inventory" / "001_self_attention.csv", "encoded,four_by_four/input:out,", "encoded,,")
    assert _problems(copy) == [
        "inventory/001_self_attention.csv:2: input: marked encoded but names no check",
        "cases/001_self_attention.yaml: expectation four_by_four/input:out is in no inventory row",
    ]


def test_a_row_naming_a_missing_check_is_reported(copy):
    _edit(copy / "inventory" / "001_self_attention.csv", "four_by_four/input:out", "four_by_four/inputs:out")
    assert (
        "inventory/001_self_attention.csv:2: input: four_by_four/inputs:out names no check expectation"
        " (case/check:target)" in _problems(copy)
    )


def test_a_check_in_no_row_is_reported(copy):
    _edit(copy / "001_self_attention.yaml", "      - id: keys_at\n", "      - id: keys_at_renamed\n")
    found = _problems(copy)
    assert "cases/001_self_attention.yaml: expectation four_by_four/keys_at_renamed:out is in no inventory row" in found


def test_the_inventory_command_prints_the_table_or_the_problems(copy):
    out = io.StringIO()
    assert checks.inventory_command(CASES, out=out) == 0
    assert out.getvalue().startswith("| document | printed values | encoded | inputs | not encodable |")
    _edit(copy / "inventory" / "001_self_attention.csv", "encoded,four_by_four/input:out,", "done,,")
    out = io.StringIO()
    assert checks.inventory_command(copy, out=out) == 1
    assert "status 'done' must be one of encoded, input, not encodable" in out.getvalue()


def test_an_input_row_must_name_a_printed_input(copy):
    _edit(copy / "inventory" / "003_attention_math_trick.csv", "input,bag_of_words:x0,", "input,bag_of_words:x1,")
    assert (
        "inventory/003_attention_math_trick.csv:3: x[0]: bag_of_words:x1 names no printed input (case:input)"
        in _problems(copy)
    )
