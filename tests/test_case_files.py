"""Case files: the format's forms load, and every malformed file or case fails alone, naming its line."""

import shutil
import textwrap
from pathlib import Path

import pytest
import torch

from attention_core.harness.checking import runner
from attention_core.harness.reading import model
from attention_core.harness.reading.cases import load_file
from attention_core.harness.reading.fields import FieldError, literal
from tests.outputs import pytest_here

GOOD = """\
document: {title: A test document}
cases:
  - id: good
    inputs:
      a: [[1, 2], [3, 4]]
    checks:
      - id: double
        expr: a * 2
        expect:
          out: |
            tensor([[2., 4.],
                    [6., 8.]])
"""


def _write(tmp_path, text, name="case.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _error(tmp_path, text):
    loaded = load_file(_write(tmp_path, text))
    assert len(loaded.errors) == 1, loaded.errors
    return loaded.errors[0]


def test_a_good_file_loads_with_lines_and_sources(tmp_path):
    loaded = load_file(_write(tmp_path, GOOD))
    assert loaded.errors == ()
    (case,) = loaded.cases
    assert case.source.title == "A test document" and case.dtype == torch.float32
    (check,) = case.checks
    assert (check.kind, check.line, check.expectations[0].line) == ("expr", 7, 11)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("document: {title: T}\ncases:\n  - id: a\n    checks: [\n", 5, "YAML syntax error"),
        ("document: {title: T}\ncases: []\n", 2, "'cases' must be a non-empty list"),
        ("cases: [{id: a, checks: []}]\n", 1, "missing 'document'"),
    ],
)
def test_file_level_problems_name_the_line(tmp_path, text, line, words):
    err = _error(tmp_path, text)
    assert err.line == line and words in err.message


def _case(body):
    return "document: {title: T}\ncases:\n" + textwrap.indent(textwrap.dedent(body), "  ")


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        (
            """\
     - id: ragged
       inputs:
         a: [[1, 2], [3]]
       checks: [{id: c, expr: a, expect: {out: [1]}}]
     """,
            5,
            "ragged list: row [1] has 1 elements, row [0] has 2",
        ),
        (
            """\
     - id: unknown_function
       inputs: {a: [1.0]}
       checks:
         - id: c
           expr: eval(a)
           expect: {out: [1.0]}
     """,
            7,
            "unknown function 'eval'",
        ),
        (
            """\
     - id: unknown_spec_call
       inputs: {a: [1.0]}
       checks:
         - id: c
           call: tril(a)
           expect: {out: [1.0]}
     """,
            7,
            "'call' must call one graded function or class",
        ),
        (
            """\
     - id: unknown_name
       inputs: {a: [1.0]}
       checks:
         - id: c
           expr: a + b
           expect: {out: [1.0]}
     """,
            7,
            "uses 'b', which is not defined before it",
        ),
        (
            """\
     - id: bad_text
       inputs: {a: [1.0]}
       checks:
         - id: c
           expr: a
           expect:
             out: |
               tensor([[1., 2.],
                       [3.]])
     """,
            11,
            "ragged",
        ),
        (
            """\
     - id: cut_off_without_partial
       inputs: {a: [1.0]}
       checks:
         - id: c
           expr: a
           expect:
             out: |
               tensor([[1., 2.],
     """,
            10,
            "partial",
        ),
        (
            """\
     - id: draw_without_seed
       inputs: {x: {randn: [2, 2]}}
       checks: [{id: c, expr: x, expect: {out: "torch.Size([2, 2])"}}]
     """,
            4,
            "has no 'seed'",
        ),
        (
            """\
     - id: lone_rtol
       inputs: {a: [1.0]}
       checks:
         - id: c
           expr: a
           expect: {out: {values: [1.0], rtol: 0.1}}
     """,
            8,
            "rtol and atol together",
        ),
        (
            """\
     - id: typo_key
       inputs: {a: [1.0]}
       checks:
         - id: c
           exprr: a
           expect: {out: [1.0]}
     """,
            7,
            "unknown key 'exprr' in a check",
        ),
        (
            """\
     - id: duplicate_key
       inputs: {a: [1.0], a: [2.0]}
       checks: [{id: c, expr: a, expect: {out: [1.0]}}]
     """,
            4,
            "duplicate key 'a'",
        ),
        (
            """\
     - id: unquoted_commas
       inputs:
         t: {expr: tril(ones(8, 8))}
       checks: [{id: c, expr: t, expect: {out: [1.0]}}]
     """,
            5,
            "must be quoted",
        ),
        (
            """\
     - id: spec_call_in_target
       inputs: {a: [1.0]}
       checks:
         - id: c
           expr: a
           expect: {"attention(a, a, a)": [1.0]}
     """,
            8,
            "spec functions are graded, and are called only in a check's 'call'",
        ),
        (
            """\
     - id: spec_call_in_input
       inputs:
         a: [1.0]
         m: {expr: "causal_mask(3)"}
       checks: [{id: c, expr: a, expect: {out: [1.0]}}]
     """,
            6,
            "unknown function 'causal_mask'",
        ),
        (
            """\
     - id: dtype_not_a_name
       dtype: [float32]
       checks: [{id: c, expr: "ones(1)", expect: {out: [1.0]}}]
     """,
            4,
            "unknown dtype ['float32']",
        ),
        (
            """\
     - id: huge_seed
       seed: 18446744073709551616
       inputs: {x: {randn: [2]}}
       checks: [{id: c, expr: x, expect: {out: "torch.Size([2])"}}]
     """,
            4,
            "seed must be a whole number from 0 to 2**64 - 1",
        ),
        (
            """\
     - id: int_draw
       seed: 1
       inputs: {x: {randn: [2], dtype: int64}}
       checks: [{id: c, expr: x, expect: {out: "torch.Size([2])"}}]
     """,
            5,
            "randn draws a floating dtype",
        ),
        (
            """\
     - id: null_atol
       inputs: {a: [1.0]}
       checks:
         - id: c
           expr: a
           expect: {out: {values: [1.0], rtol: 0.1, atol: ~}}
     """,
            8,
            "atol must be a finite number",
        ),
        (
            """\
     - id: nan_rtol
       inputs: {a: [1.0]}
       checks:
         - id: c
           expr: a
           expect: {out: {values: [1.0], rtol: .nan, atol: .nan}}
     """,
            8,
            "rtol must be a finite number",
        ),
        (
            """\
     - id: too_big
       inputs: {a: [99999999999999999999999]}
       checks: [{id: c, expr: a, expect: {out: [1.0]}}]
     """,
            4,
            "the whole number 99999999999999999999999 (23 digits) does not fit int64 (at most about 9.2e18); with a decimal point it would be a float",
        ),
        (
            """\
     - id: dotted.id
       checks: [{id: c, expr: "ones(1)", expect: {out: [1.0]}}]
     """,
            3,
            "id must be letters, digits, '_' or '-'",
        ),
    ],
)
def test_case_level_problems_name_the_line_and_the_problem(tmp_path, body, line, words):
    err = _error(tmp_path, _case(body))
    assert words in err.message
    assert err.line == line, (err.line, err.message)
    assert str(err).startswith(f"{err.path}:{line}: ") or str(err).startswith(f"{err.path}:{line}:{err.column}: ")


def test_a_malformed_case_fails_alone_and_its_neighbours_still_run(tmp_path):
    _write(tmp_path, GOOD, "a_good.yaml")
    _write(tmp_path, GOOD.replace("a * 2", "a @@ 2"), "b_bad_case.yaml")
    _write(tmp_path, "document: [\n", "c_bad_yaml.yaml")
    items = runner.collect(tmp_path)
    outcome = {item.id: runner.run(item).passed for item in items}
    assert outcome == {"a_good/good/double": True, "b_bad_case/good/invalid": False, "c_bad_yaml/invalid": False}


def test_pytest_reports_a_malformed_file_as_one_failing_item_with_file_and_line(tmp_path):
    root = Path(__file__).resolve().parent.parent
    (tmp_path / "tests").mkdir()
    shutil.copy(root / "tests" / "test_cases.py", tmp_path / "tests" / "test_cases.py")
    shutil.copy(root / "conftest.py", tmp_path / "conftest.py")
    folder = tmp_path / "cases"
    folder.mkdir()
    _write(folder, GOOD, "a_good.yaml")
    _write(folder, GOOD.replace("[6., 8.]", "[6.]"), "b_ragged.yaml")
    run = pytest_here(
        "tests",
        "-p",
        "no:cacheprovider",
        "-q",
        "--cases",
        "cases",
        "--device",
        "cpu",
        "--snapshot-update",
        cwd=tmp_path,
    )
    assert "1 failed, 1 passed" in run.stdout, run.stdout
    assert "b_ragged/good/invalid" in run.stdout
    assert "b_ragged.yaml:12:21: " in run.stdout and "ragged" in run.stdout


NUMBERS = """\
document: {title: Numbers}
cases:
  - id: numbers
    dtype: float64
    inputs:
      x: [[1.0, 2.0, 3.0]]
    checks:
      - id: size
        expr: x.size(-1)
        expect: {out: 3}
      - id: softmax
        call: softmax(x, dim=-1)
        expect: {"out.sum()": {values: 1.0, rtol: 0, atol: 1e-12}}
"""


def test_plain_numbers_are_numbers_and_1e_7_reads_as_a_float(tmp_path):
    loaded = load_file(_write(tmp_path, NUMBERS))
    assert loaded.errors == ()
    assert loaded.cases[0].checks[1].expectations[0].atol == 1e-12
    assert all(runner.run(item).passed for item in runner.collect(tmp_path))


def test_a_graded_call_must_return_the_dtype_it_was_given(tmp_path):
    _write(tmp_path, NUMBERS)
    item = runner.collect(tmp_path)[1]
    in_float32 = {**runner.REFERENCE, "softmax": lambda x, dim=-1: torch.softmax(x.float(), dim=dim)}
    result = runner.run(item, functions=in_float32)
    assert not result.passed
    assert "out: dtype does not match: torch.float32 != torch.float64" in result.report


def test_a_yaml_alias_bomb_is_refused_before_it_is_walked(tmp_path):
    levels = ["      l0: &l0 [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]"]
    levels += [f"      l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    text = _case(
        "- id: bomb\n  inputs:\n"
        + "\n".join(line[2:] for line in levels)
        + "\n  checks: [{id: c, expr: l8, expect: {out: [1.0]}}]\n"
    )
    err = _error(tmp_path, text)
    assert (err.line, err.column) == (10, 11)  # l6: the first whose aliases expand past the limit
    assert "YAML aliases expand this value to more than 1000000 values" in err.message


def test_an_unreadable_file_or_a_folder_named_yaml_fails_alone(tmp_path):
    _write(tmp_path, GOOD, "a_good.yaml")
    (tmp_path / "b_bytes.yaml").write_bytes(b"document: {title: \xff\xfe}\n")
    (tmp_path / "c_deep.yaml").write_text("x: " + "[" * 3000 + "]" * 3000 + "\n", encoding="utf-8")
    (tmp_path / "d_folder.yaml").mkdir()
    items = runner.collect(tmp_path)
    outcome = {item.id: runner.run(item) for item in items}
    assert sorted(outcome) == ["a_good/good/double", "b_bytes/invalid", "c_deep/invalid", "d_folder/invalid"]
    assert "d_folder.yaml:1: the file could not be read: it is a folder" in outcome["d_folder/invalid"].report
    assert outcome["a_good/good/double"].passed
    assert "b_bytes.yaml:1:19: the file is not UTF-8 text: byte 0xff" in outcome["b_bytes/invalid"].report
    assert "c_deep.yaml:1:103: the YAML nests deeper than 100 levels" in outcome["c_deep/invalid"].report


def test_a_list_ragged_below_its_first_row_is_refused_without_walking_an_alias_nest(tmp_path):
    err = _error(
        tmp_path,
        _case("- id: cousins\n  inputs: {a: [[[1]], [[1, 2]]]}\n  checks: [{id: c, expr: a, expect: {out: [1.0]}}]\n"),
    )
    assert err.message == "input 'a': ragged list: row [1, 0] has 2 elements, row [0, 0] has 1"
    nest = [1] * 10
    for _ in range(8):  # what YAML aliases build: one list referenced ten times, eight deep (10**9 leaves)
        nest = [nest] * 10
    deep_one = 1
    for _ in range(10):
        deep_one = [deep_one]
    with pytest.raises(FieldError) as err:
        literal([deep_one, nest])
    assert err.value.message.startswith("ragged list: row [1] has 10 elements")


GRADED = """\
document: {title: Grading}
defaults: {points: 2, visibility: after_due_date}
cases:
  - id: scored
    points: 3
    inputs:
      x: [[1.0, 2.0]]
      n: 3
      t: "tensor([1., 2.])"
      e: {expr: "x * 2"}
    checks:
      - id: default_call
        call: softmax(x, dim=-1)
        expect: {"out.sum()": 1.0, out: "torch.Size([1, 2])"}
      - id: own
        call: softmax(x, dim=-1)
        points: 0.5
        visibility: hidden
        expect: {out: {oracle: "softmax(x, dim=-1)"}}
      - id: arithmetic
        expr: x * n
        expect: {out: {values: [[3.0, 6.0]], rtol: 0, atol: 0}}
  - id: from_the_file
    inputs: {x: [1.0]}
    checks:
      - id: call
        call: softmax(x, dim=0)
        expect: {out: [1.0]}
"""


def test_points_and_visibility_default_from_the_case_then_the_file(tmp_path):
    loaded = load_file(_write(tmp_path, GRADED))
    assert loaded.errors == ()
    first, second = loaded.cases
    got = [(c.id, c.points, c.visibility) for case in loaded.cases for c in case.checks]
    assert got == [
        ("default_call", 3.0, "after_due_date"),
        ("own", 0.5, "hidden"),
        ("arithmetic", 0.0, "after_due_date"),
        ("call", 2.0, "after_due_date"),
    ]
    assert [type(i).__name__ for i in first.inputs.values()] == [
        "LiteralInput",
        "NumberInput",
        "PrintedInput",
        "ExprInput",
    ]
    kinds = [type(e) for c in first.checks for e in c.expectations]
    assert kinds == [model.ValuesExpectation, model.ShapeExpectation, model.OracleExpectation, model.ValuesExpectation]
    assert isinstance(first.checks[0], model.CallCheck) and isinstance(first.checks[2], model.ExprCheck)
    assert first.checks[0].function == "softmax" and first.checks[2].function is None
    assert all(runner.run(item).passed for item in runner.collect(tmp_path))


@pytest.mark.parametrize(
    ("change", "line", "words"),
    [
        (("expr: x * n", "expr: x * n\n        points: 1"), 22, "an 'expr' check is never graded, so it has no points"),
        (
            ("visibility: hidden", "visibility: secret"),
            18,
            "'visibility' must be one of 'visible', 'hidden', 'after_due_date' or 'after_published', got 'secret'",
        ),
        (("points: 0.5", "points: -1"), 17, "points must be a finite number ≥ 0, got -1"),
        (
            ("expect: {out: [1.0]}", "expct: {out: [1.0]}"),
            28,
            "unknown key 'expct' in a check; expected one of call, erratum, expect, expr, id, mode, note, pending, points, returns, source, "
            "state, visibility",
        ),
        (
            ('{oracle: "softmax(x, dim=-1)"}', '{oracle: "softmax(x, dim=-1)", partial: true}'),
            19,
            "expectation for 'out': unknown key 'partial' in an oracle expectation; expected one of atol, note, oracle, pending, recorded, rtol",
        ),
    ],
)
def test_grading_fields_and_unknown_keys_are_refused_at_their_line(tmp_path, change, line, words):
    err = _error(tmp_path, GRADED.replace(*change))
    assert err.line == line and words in err.message, (err.line, err.message)


@pytest.mark.parametrize(
    ("erratum", "words"),
    [
        (
            '{note: "n", differs: "attention(x, x, x)"}',
            "erratum 'differs' must be a call of the same spec function as the check, softmax(...), so that it returns "
            "the call's results (out); got `attention(x, x, x)`",
        ),
        (
            '{note: "n", differs: "softmax(y, dim=0)"}',
            "erratum 'differs' `softmax(y, dim=0)` uses 'y', which is not defined",
        ),
    ],
)
def test_an_erratum_differs_is_held_to_the_spec_rule_at_its_line(tmp_path, erratum, words):
    text = GRADED.replace("        expect: {out: [1.0]}", f"        erratum: {erratum}\n        expect: {{out: [1.0]}}")
    err = _error(tmp_path, text)
    assert err.line == 28 and words in err.message, (err.line, err.message)


def test_an_expr_checks_erratum_calls_no_spec_function(tmp_path):
    text = GRADED.replace("expr: x * n", "expr: x * n\n        erratum: {note: n, differs: 'softmax(x, dim=0)'}")
    err = _error(tmp_path, text)
    assert err.line == 22 and "erratum 'differs' of an 'expr' check is the document's own arithmetic" in err.message


def test_a_file_past_the_size_limit_is_refused_unread(tmp_path):
    _write(tmp_path, GOOD, "a_good.yaml")
    (tmp_path / "b_huge.yaml").write_text("# " + "x" * 2**24 + "\n" + GOOD, encoding="utf-8")
    outcome = {item.id: runner.run(item) for item in runner.collect(tmp_path)}
    assert outcome["a_good/good/double"].passed
    assert f"b_huge.yaml:1: the file is {2**24 + 241} bytes; the limit is 16777216" in outcome["b_huge/invalid"].report


def test_a_whole_number_past_int64_says_whether_it_would_fit_as_a_float():
    with pytest.raises(FieldError, match="does not fit int64 .*; with a decimal point it would be a float"):
        literal([10**308])
    with pytest.raises(FieldError, match=r"\(310 digits\) does not fit int64 \(at most about 9.2e18\), nor a float64"):
        literal([10**309])
