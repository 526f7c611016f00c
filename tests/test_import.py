"""``import``: a notebook's printed tensors become a draft case file, every one the inventory lists.

The corpus inventory (``cases/inventory/*.csv``) is the answer key: for each of the five
documents, every row whose case-file expectation is torch's print (or a size) must be found by
the import in the row's cell, with the same printed elements and digits.
"""

import io
from pathlib import Path

import nbformat
import pytest
import torch
import yaml

from attention_core import checks, cli
from attention_core.harness.checking import runner
from attention_core.harness.checking.results import Status
from attention_core.harness.reading import inventory
from attention_core.harness.reading.cases import load_file

ROOT = Path(__file__).resolve().parent.parent
# The documents live in ../shared/seeds beside the checkout (or beside a folder above it).
SEEDS = next(
    (p / "shared" / "seeds" for p in ROOT.parents if (p / "shared" / "seeds").is_dir()),
    ROOT.parent / "shared" / "seeds",
)
DOCUMENTS = sorted(SEEDS.glob("0*.txt"))
INVENTORY = inventory.load(ROOT / "cases")
# Rows whose printed value is not torch's print of a tensor or a size: the import looks for those only.
NOT_TENSOR_PRINTS = {
    ("004_self_attention_from_scratch", "In [4]"): "prints len(listofwords), the number 22",
    ("004_self_attention_from_scratch", "In [5]"): "prints the vocabulary, a dict",
}

needs_documents = pytest.mark.skipif(not DOCUMENTS, reason=f"the documents are not here ({SEEDS})")


def _import(source, out):
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", stdout)
        status = cli.main(["import", str(source), "--out", str(out)])
    assert status == 0, stdout.getvalue()
    return stdout.getvalue()


def _document(seed):
    return next(name for name in INVENTORY if name[:3] == seed.name[:3])


def _answer_key(document):
    """(row, [expectations]) for each inventory row the case file holds as a print or a size."""
    cases = {case.id: case for case in load_file(ROOT / "cases" / f"{document}.yaml").cases}
    for row in INVENTORY[document]:
        if row.status not in ("encoded", "input") or (document, row.cell) in NOT_TENSOR_PRINTS:
            continue
        wanted = []
        for ref in row.refs:
            if "/" in ref:
                (case_id, check_id), target = ref.split(":", 1)[0].split("/"), ref.split(":", 1)[1]
                check = next(c for c in cases[case_id].checks if c.id == check_id)
                wanted.append(check.expect[target])
            else:
                case_id, name = ref.split(":")
                wanted.append(cases[case_id].inputs[name])
        wanted = [w for w in wanted if w.kind in ("printed", "shape")]
        if wanted:
            yield row, wanted


def _contains(found, wanted):
    """Whether the draft's print ``found`` shows the elements of ``wanted``, in order, with the same digits."""
    if wanted.kind == "shape":
        if found.kind == "shape":
            return tuple(found.shape) == tuple(wanted.shape)
        return found.kind == "printed" and found.printed.ndim == len(wanted.shape)  # an elided print's shape
    if found.kind != "printed":
        return False
    f, w = found.printed, wanted.printed
    n = w.values.numel()
    for start in range(f.values.numel() - n + 1):
        if torch.equal(f.values[start : start + n].nan_to_num(), w.values.nan_to_num()) and torch.equal(
            f.unit[start : start + n], w.unit
        ):
            return True
    return False


@needs_documents
@pytest.mark.parametrize("seed", DOCUMENTS, ids=lambda p: p.name[:3])
def test_a_document_imports_as_a_draft_holding_every_print_the_inventory_lists(tmp_path, seed):
    document = _document(seed)
    out = tmp_path / f"{document}.yaml"
    said = _import(seed, out)
    draft = load_file(out)
    assert draft.errors == ()
    found = {}
    for case in draft.cases:
        found.setdefault(case.source.cell, []).extend(e for check in case.checks for e in check.expectations)
    missed = [
        f"{row.cell} {row.variable}"
        for row, wanted in _answer_key(document)
        if not any(_contains(f, w) for f in found.get(row.cell, []) for w in wanted)
    ]
    assert missed == []
    prints = sum(len(v) for v in found.values())
    assert said.startswith(f"{out}: {len(draft.cases)} draft cases, {prints} pending expectations")
    # Every expectation is pending, so the draft runs as pending, never as passed, and check exits 1.
    assert {runner.run(item).status for item in runner.collect(tmp_path)} == {Status.PENDING}
    assert checks.check_command(tmp_path, ["cpu"], out=io.StringIO()) == 1
    for (name, cell), why in NOT_TENSOR_PRINTS.items():
        if name == document:  # the rows left out of the key print no tensor: nothing to find there
            assert cell not in found, why


@needs_documents
def test_the_answer_key_covers_the_documents_prints():
    keyed = sum(1 for seed in DOCUMENTS for _ in _answer_key(_document(seed)))
    assert keyed >= 100


def _notebook(path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Softmax by hand\nA worked example."),
        nbformat.v4.new_code_cell("import torch"),
        nbformat.v4.new_code_cell(
            "x = torch.tensor([1., 2., 3.])\nx.softmax(0)",
            execution_count=3,
            outputs=[
                nbformat.v4.new_output(
                    "execute_result", {"text/plain": "tensor([0.0900, 0.2447, 0.6652])"}, execution_count=3
                )
            ],
        ),
        nbformat.v4.new_code_cell(
            'print("scores:", s)\nprint("weights\\n", w)\nw.shape',
            execution_count=4,
            outputs=[
                nbformat.v4.new_output(
                    "stream",
                    name="stdout",
                    text="scores: tensor([[1., 0.],\n        [0., 1.]])\n"
                    "weights\n tensor([[0.7311, 0.2689],\n        [0.2689, 0.7311]])\n",
                ),
                nbformat.v4.new_output("execute_result", {"text/plain": "torch.Size([2, 2])"}, execution_count=4),
            ],
        ),
    ]
    nbformat.write(nb, str(path))


def test_an_ipynb_imports_through_nbformat(tmp_path):
    _notebook(tmp_path / "softmax.ipynb")
    out = tmp_path / "cases" / "softmax.yaml"
    out.parent.mkdir()
    _import(tmp_path / "softmax.ipynb", out)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# yaml-language-server: $schema=")
    assert "  #     x = torch.tensor([1., 2., 3.])\n  #     x.softmax(0)\n" in text  # the cell's source, kept
    draft = load_file(out)
    assert draft.errors == () and draft.document.title == "Softmax by hand"
    shown = {
        (case.id, case.source.cell, check.id, e.kind, e.pending): e
        for case in draft.cases
        for check in case.checks
        for e in check.expectations
    }
    assert sorted(shown) == [
        ("in_3", "In [3]", "x_softmax_0", "printed", True),
        ("in_4", "In [4]", "print_3", "shape", True),
        ("in_4", "In [4]", "scores", "printed", True),
        ("in_4", "In [4]", "weights", "printed", True),
    ]
    weights = shown[("in_4", "In [4]", "weights", "printed", True)].printed
    assert weights.values.tolist() == [0.7311, 0.2689, 0.2689, 0.7311] and weights.shape == (2, 2)
    assert shown[("in_4", "In [4]", "print_3", "shape", True)].shape == (2, 2)


def test_an_existing_file_is_not_replaced_without_force(tmp_path, capsys):
    _notebook(tmp_path / "n.ipynb")
    (tmp_path / "out.yaml").write_text("mine\n", encoding="utf-8")
    assert cli.main(["import", str(tmp_path / "n.ipynb"), "--out", str(tmp_path / "out.yaml")]) == 2
    assert (tmp_path / "out.yaml").read_text(encoding="utf-8") == "mine\n"
    assert "exists: give --force to replace it" in capsys.readouterr().err


def test_a_cell_whose_prints_name_a_floating_dtype_drafts_a_case_of_that_dtype(tmp_path):
    export = tmp_path / "nb.txt"
    export.write_text(
        "In [1]:\nx.softmax(-1)\n\ntensor([0.2689, 0.7311], dtype=torch.float64)\n\n"
        "In [2]:\ny.softmax(-1)\n\ntensor([0.2689, 0.7311])\n",
        encoding="utf-8",
    )
    _import(export, tmp_path / "draft.yaml")
    cases = yaml.safe_load((tmp_path / "draft.yaml").read_text(encoding="utf-8"))["cases"]
    assert [case.get("dtype") for case in cases] == ["float64", None]  # unnamed: torch's default, float32


def test_a_displayed_values_out_prompt_is_output_not_the_cells_source(tmp_path):
    export = tmp_path / "nb.txt"
    export.write_text(
        "In [2]:\nx * 2\n\nOut[2]:\ntensor([2., 2.])\n\nIn [3]:\ny\nOut[3]: tensor([1.])\n", encoding="utf-8"
    )
    _import(export, tmp_path / "draft.yaml")
    text = (tmp_path / "draft.yaml").read_text(encoding="utf-8")
    assert "Out[" not in text and "#     x * 2\n" in text and "#     y\n" in text
    assert len(yaml.safe_load(text)["cases"]) == 2
