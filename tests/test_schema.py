"""The committed JSON Schema of a case file: in sync with the model, and every shipped file valid under it."""

import json
from pathlib import Path

import jsonschema
import pytest

from attention_core.harness.reading import model, yaml_lines
from attention_core.harness.reading.cases import SCHEMA_LINE, find_case_files

CASES = Path(__file__).resolve().parent.parent / "cases"
SCHEMA = CASES / "case-file.schema.json"


def _validator():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_committed_schema_is_the_models():
    # Regenerate with: python -m attention_core.harness.reading.model > cases/case-file.schema.json
    written = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert written == model.json_schema(), (
        "python -m attention_core.harness.reading.model > cases/case-file.schema.json"
    )


@pytest.mark.parametrize("path", find_case_files(CASES), ids=lambda p: p.stem)
def test_every_shipped_case_file_is_valid_under_the_schema_and_names_it(path):
    assert path.read_text(encoding="utf-8").splitlines()[0] == SCHEMA_LINE
    problems = [
        f"{list(e.absolute_path)}: {e.message[:200]}" for e in _validator().iter_errors(yaml_lines.read(path, path))
    ]
    assert problems == []


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (("expr: x", "exprr: x"), ["cases", 0, "checks", 0]),
        (("randn: [2]", "randn: [2], dtyp: float32"), ["cases", 0, "inputs", "x"]),
        (("id: c", "id: c\n        visibility: nope"), ["cases", 0, "checks", 0]),
        (("seed: 1", "seed: -1"), ["cases", 0, "seed"]),
    ],
)
def test_the_schema_refuses_what_the_model_refuses(change, where):
    text = (
        "document: {title: T}\ncases:\n  - id: a\n    seed: 1\n"
        "    inputs: {x: {randn: [2]}, y: [1, 2], z: 'tensor([1.])', w: 3}\n"
        "    checks:\n      - id: c\n        expr: x\n"
        "        expect: {out: 'torch.Size([2])', y: [1.0, 2.0], 'x.sum()': {values: 1, rtol: 0, atol: 1}}\n"
    )
    validator = _validator()
    assert list(validator.iter_errors(yaml_lines.parse(text))) == []
    errors = list(validator.iter_errors(yaml_lines.parse(text.replace(*change))))
    assert [list(e.absolute_path) for e in errors] == [where]
