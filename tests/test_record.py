"""``record`` fills empty expectations by torch's own route, keeping the file; ``new`` writes a skeleton.

The values ``record`` writes are held to torch's functions called here in float64 (an
independent computation), and the file around them to its text before: comments, order and
quoting survive the round trip. Drafts (``import``, ``new``) are valid under the committed
JSON Schema they name on their first line.
"""

import difflib
import io
import json
from pathlib import Path

import jsonschema
import pytest
import torch
import torch.nn.functional as F

from attention_core import checks, cli
from attention_core.harness.checking import runner, torch_route
from attention_core.harness.checking.results import Status
from attention_core.harness.reading import yaml_lines
from attention_core.harness.reading.cases import load_file

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "cases" / "case-file.schema.json").read_text(encoding="utf-8"))

CASE = """\
# yaml-language-server: $schema=./case-file.schema.json
# Softmax and attention weights, left for record to fill in.
document:
  title: "Recorded"   # a quoted title, and a comment

cases:
  - id: rows
    source: {cell: "In [1]"}
    inputs:
      x: [[1.0, 2.0, 3.0], [0.5, 0.5, 1.0]]  # two rows
      q: [[1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 1.0, 3.0], [2.0, 2.0, 0.0, 1.0]]
    checks:
      - id: softmax
        call: softmax(x)
        expect:
          out:   # to record
          "out.sum(-1)":
      - id: attention
        call: attention(q, q, q)
        expect:
          output: torch.Size([3, 4])
          weights:
  - id: other
    inputs: {a: [1.0, 2.0]}
    checks:
      - id: tripled
        expr: a * 3
        expect:
          out:
"""


def _run(*argv):
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", out)
        status = cli.main([*map(str, argv)])
    return status, out.getvalue()


def _expectations(path):
    return {
        (case.id, check.id, e.target): e
        for case in load_file(path).cases
        for check in case.checks
        for e in check.expectations
    }


def test_record_writes_torch_routes_values_as_printed_and_keeps_the_rest_of_the_file(tmp_path):
    path = tmp_path / "recorded.yaml"
    path.write_text(CASE, encoding="utf-8")
    status, said = _run("record", path)
    assert status == 0 and said.endswith("4 expectations recorded, marked 'recorded' until reviewed\n")
    x = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 1.0]], dtype=torch.float64)
    q = torch.tensor([[1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 1.0, 3.0], [2.0, 2.0, 0.0, 1.0]], dtype=torch.float64)
    weights = F.softmax(q @ q.T / 2.0, dim=-1)  # 1/sqrt(d_k), d_k = 4
    found = _expectations(path)
    how = "torch's functions in float64, cast to float32"
    for key, value in {
        ("rows", "softmax", "out"): F.softmax(x, dim=-1),
        ("rows", "softmax", "out.sum(-1)"): F.softmax(x, dim=-1).sum(-1),
        ("rows", "attention", "weights"): weights,
        ("other", "tripled", "out"): x.new_tensor([3.0, 6.0]),
    }.items():
        assert found[key].recorded == how
        assert found[key].printed.values.tolist() == [float(f"{v:.4f}") for v in value.float().flatten().tolist()]
    assert "tensor([[0.0900, 0.2447, 0.6652]," in path.read_text(encoding="utf-8")  # torch's own print
    # Every line of the file before is still there, in order: the round trip only added lines.
    before, after = CASE.splitlines(), path.read_text(encoding="utf-8").splitlines()
    opcodes = [
        op for op in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes() if op[0] != "equal"
    ]
    assert {op[0] for op in opcodes} == {"insert"}, opcodes


def test_recorded_values_pass_and_lint_reports_them_until_the_mark_is_removed(tmp_path):
    path = tmp_path / "recorded.yaml"
    path.write_text(CASE, encoding="utf-8")
    _run("record", path)
    assert {runner.run(item).status for item in runner.collect(tmp_path)} == {Status.PASSED}
    status, said = _run("lint", path)
    lines = path.read_text(encoding="utf-8").splitlines()
    warned = [int(line.split(":")[1]) for line in said.splitlines() if "recorded, not reviewed" in line]
    assert status == 0 and len(warned) == 4
    assert all(lines[n - 1].strip() == "printed: |" for n in warned)  # each at its expectation
    path.write_text("\n".join(line for line in lines if "recorded:" not in line) + "\n", encoding="utf-8")
    assert _run("lint", path) == (0, "0 errors, 0 warnings\n")


def test_record_fills_one_case_when_asked_and_says_which_cases_there_are(tmp_path, capsys):
    path = tmp_path / "recorded.yaml"
    path.write_text(CASE, encoding="utf-8")
    assert _run("record", path, "--case", "other")[0] == 0
    found = _expectations(path)
    assert found[("other", "tripled", "out")].kind == "printed"
    assert found[("rows", "softmax", "out")].kind == "missing"
    assert _run("record", path, "--case", "nope")[0] == 2
    assert "no case 'nope' (cases: rows, other)" in capsys.readouterr().err


def test_without_the_torch_route_the_reference_core_records_with_a_mark_saying_so(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise NotImplementedError("no route")

    monkeypatch.setitem(torch_route.FUNCTIONS, "softmax", refuse)
    path = tmp_path / "recorded.yaml"
    path.write_text(CASE, encoding="utf-8")
    _run("record", path, "--case", "rows")
    found = _expectations(path)
    assert found[("rows", "softmax", "out")].recorded == (
        "the reference core in float32 (no independent route: `softmax` raised NotImplementedError: no route); "
        "check it against the document"
    )
    assert found[("rows", "attention", "weights")].recorded == "torch's functions in float64, cast to float32"


def test_a_file_that_does_not_load_is_not_recorded(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text(CASE.replace("call: softmax(x)", "call: softmax(y)"), encoding="utf-8")
    assert _run("record", path)[0] == 2
    assert path.read_text(encoding="utf-8") == CASE.replace("call: softmax(x)", "call: softmax(y)")
    assert "broken.yaml:14:" in capsys.readouterr().err


def test_new_writes_a_commented_skeleton_that_loads_and_is_pending(tmp_path, capsys):
    assert _run("new", "my_tutorial", "--cases", tmp_path)[0] == 0
    path = tmp_path / "my_tutorial.yaml"
    text = path.read_text(encoding="utf-8")
    assert (
        text.startswith("# yaml-language-server: $schema=")
        and "# `call:` one function or class of the assignment" in text
    )
    assert load_file(path).errors == ()
    status, said = _run("lint", path)
    assert status == 0 and said.endswith("0 errors, 2 warnings\n")
    assert checks.check_command(tmp_path, ["cpu"], out=io.StringIO()) == 1  # pending until written
    assert _run("new", "my_tutorial", "--cases", tmp_path)[0] == 2
    assert "exists" in capsys.readouterr().err


def test_new_and_import_make_the_folder_they_write_in(tmp_path):
    assert _run("new", "my_tutorial", "--cases", tmp_path / "cases")[0] == 0
    assert load_file(tmp_path / "cases" / "my_tutorial.yaml").errors == ()
    export = tmp_path / "notebook.txt"
    export.write_text("In [1]:\nx\n\ntensor([1., 2.])\n", encoding="utf-8")
    assert _run("import", export, "--out", tmp_path / "drafts" / "d.yaml")[0] == 0
    assert load_file(tmp_path / "drafts" / "d.yaml").errors == ()


def test_a_skeleton_in_the_projects_folder_names_the_committed_schema(tmp_path, monkeypatch):
    from attention_core.authoring.drafts import skeleton  # noqa: PLC0415

    text = skeleton(ROOT / "cases" / "x.yaml", schema=ROOT / "cases" / "case-file.schema.json")
    assert text.splitlines()[0] == "# yaml-language-server: $schema=./case-file.schema.json"


@pytest.mark.parametrize("kind", ["new", "import", "recorded"])
def test_drafts_are_valid_under_the_committed_schema(tmp_path, kind):
    from attention_core.authoring.drafts import draft, skeleton  # noqa: PLC0415
    from attention_core.authoring.notebook import read_text_export  # noqa: PLC0415

    path = tmp_path / "draft.yaml"
    if kind == "new":
        path.write_text(skeleton(path, schema=tmp_path / "s.json"), encoding="utf-8")
    elif kind == "import":
        cells = read_text_export("In [1]:\nx\n\ntensor([1., 2.])\n\nIn [2]:\nx.shape\n\ntorch.Size([2])\n")
        path.write_text(draft(cells, title="T", what="a test", name="draft.yaml"), encoding="utf-8")
    else:
        path.write_text(CASE, encoding="utf-8")
        _run("record", path)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert [e.message for e in validator.iter_errors(yaml_lines.read(path, path))] == []
    assert load_file(path).errors == ()


def test_a_file_in_another_layout_keeps_its_indentation(tmp_path):
    flush = (
        "document:\n  title: Flush\ncases:\n- id: rows  # sequences flush with their key\n"
        "  inputs:\n    x: [[1.0, 2.0, 3.0]]\n  checks:\n  - id: softmax\n    call: softmax(x)\n"
        "    expect:\n      out:\n  - id: double\n    expr: x * 2\n    expect:\n      out:\n"
    )
    path = tmp_path / "flush.yaml"
    path.write_text(flush, encoding="utf-8")
    assert _run("record", path)[0] == 0
    before, after = flush.splitlines(), path.read_text(encoding="utf-8").splitlines()
    opcodes = [
        op for op in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes() if op[0] != "equal"
    ]
    assert {op[0] for op in opcodes} == {"insert"}, opcodes
    assert {e.kind for e in _expectations(path).values()} == {"printed"}


def test_a_check_neither_route_can_compute_is_reported_at_its_line_and_nothing_is_written(tmp_path, capsys):
    text = CASE.replace("call: attention(q, q, q)", "call: attention(q, x, x)")  # 4 columns against 3
    path = tmp_path / "wrong.yaml"
    path.write_text(text, encoding="utf-8")
    assert _run("record", path)[0] == 2
    assert path.read_text(encoding="utf-8") == text
    assert "wrong.yaml:18: rows/attention cannot be computed:" in capsys.readouterr().err
