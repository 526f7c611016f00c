"""Malformed and hostile case files fail alone, fast and small: no hang, no traceback, no flood.

Every file here lies beside a valid one in one folder, which a child process checks under a
1.5 GB address-space limit and a time limit: it loads and runs each item (``runner.collect``,
``runner.run``) and then the command line (``cli.main``). Each file's first reported line names
its ``file:line`` (``:column`` where one is known) and says what to change.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_case_files import GOOD

pytestmark = pytest.mark.slow  # end to end: the quick loop leaves this module out

ROOT = Path(__file__).resolve().parent.parent
LIMIT_BYTES = 1536 * 2**20
MAX_OUTPUT = 100_000

_CHECK = "    checks: [{id: c, expr: 'ones(1)', expect: {out: [1.0]}}]\n"


def _bomb(levels, line):
    """Anchors nested ``levels`` deep, nine aliases each, then a case using the last at ``line``."""
    anchors = ["  - &l0 [" + ", ".join(["1"] * 9) + "]"]
    anchors += [f"  - &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "anchors:\n" + "\n".join(anchors) + "\ndocument: {title: T}\ncases:\n  - id: c\n" + line + _CHECK


def _case(body):
    return "document: {title: T}\ncases:\n" + textwrap.indent(textwrap.dedent(body), "  ")


# name: (text or bytes, the item id, its location, words of its message)
HOSTILE = {
    # 9**10 leaves behind a few lines: refused while reading, at the innermost value past the limit.
    "bomb_dtype": (_bomb(10, "    dtype: *l9\n"), "invalid", "8:5", "YAML aliases expand this value to more than"),
    "bomb_seed": (_bomb(10, "    seed: *l9\n"), "invalid", "8:5", "YAML aliases expand this value to more than"),
    "bomb_size": (
        _bomb(10, "    seed: 1\n    inputs: {x: {randn: *l9}}\n"),
        "invalid",
        "8:5",
        "YAML aliases expand this value to more than",
    ),
    "bomb_rtol": (
        _bomb(10, "    checks: [{id: c, expr: 'ones(1)', expect: {out: {values: 1, rtol: *l9, atol: 0}}}]\n").replace(
            _CHECK, ""
        ),
        "invalid",
        "8:5",
        "YAML aliases expand this value to more than",
    ),
    # 9**5 leaves: within the limit, so the seed's own check refuses it, quoting it short.
    "bomb_small": (
        _case(
            "- id: c\n  seed: [&l0 ["
            + ", ".join(["1"] * 9)
            + "]"
            + "".join(f", &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 5))
            + "]\n"
            + _CHECK[2:]
        ),
        "c/invalid",
        "4:11",
        "seed must be a whole number",
    ),
    "int_tag": (_case("- id: c\n  seed: !!int abc\n" + _CHECK[2:]), "invalid", "4:11", "cannot read 'abc' as !!int"),
    "float_tag": (
        _case("- id: c\n  checks: [{id: c, expr: 'ones(1)', expect: {out: !!float abc}}]\n"),
        "invalid",
        "4:53",
        "cannot read 'abc' as !!float",
    ),
    # YAML 1.2 reads 0x_ as text, which the seed refuses at its own line.
    "hex": (_case("- id: c\n  seed: 0x_\n" + _CHECK[2:]), "c/invalid", "4:11", "seed must be a whole number"),
    "sexagesimal": (_case("- id: c\n  points: 1:30\n" + _CHECK[2:]), "c/invalid", "4:13", "points must be a finite"),
    "custom_tag": (_case("- id: c\n  note: !foo bar\n" + _CHECK[2:]), "invalid", "4:11", "unknown YAML tag '!foo'"),
    "syntax": (_case("- id: c\n  checks: [{id: c, expr: a\n"), "invalid", "5:1", "YAML syntax error"),
    "not_utf8": (
        _case("- id: c\n  note: caf\xe9\n" + _CHECK[2:]).encode("latin-1"),
        "invalid",
        "4:14",
        "not UTF-8 text: byte 0xe9",
    ),
    "tensor_text": (
        _case("""\
        - id: c
          inputs: {a: [1.0, 2.0]}
          checks:
            - id: c
              expr: a
              expect:
                out: |
                  tensor([1.0000,
                          2.0x00])
        """),
        "c/invalid",
        "11:24",
        "expectation for 'out'",
    ),
    "expr_column": (
        _case("- id: c\n  inputs: {a: [1.0]}\n  checks: [{id: c, expr: 'a + lambda: 1', expect: {out: [1.0]}}]\n"),
        "c/invalid",
        "5:33",
        "expr `a + lambda: 1`",
    ),
    "huge_size": (
        _case("- id: c\n  seed: 1\n  inputs: {x: {randn: [0, 9223372036854775808]}}\n" + _CHECK[2:]),
        "c/invalid",
        "5:25",
        "size must be a list of whole numbers from 0 to 2**31 - 1",
    ),
    "draws_budget": (
        _case(
            "- id: c\n  seed: 1\n  inputs:\n    x: {randn: [4096, 8192]}\n    y: {rand: [4096, 8192]}\n" + _CHECK[2:]
        ),
        "c/invalid",
        "7:10",
        "the budget is 33554432 elements",
    ),
    "expr_budget": (
        _case("""\
        - id: c
          dtype: float64
          inputs:
            a: {expr: "ones(2048, 8192)"}
            b: {expr: "ones(2048, 8192)"}
            d: {expr: "ones(2048, 8192)"}
          checks: [{id: c, expr: a, expect: {out: "torch.Size([2048, 8192])"}}]
        """),
        "c/c",
        "9",
        "input 'd' (line 8): `ones(2048, 8192)` refused: would create 16777216 more elements, "
        "50331648 in all; the budget is 33554432",
    ),
    "ansi_expr": (
        _case('- id: c\n  inputs: {a: [1.0]}\n  checks: [{id: c, expr: "a\\e[2J", expect: {out: [1.0]}}]\n'),
        "c/invalid",
        "5:30",
        "\\x1b",
    ),
}
VALID = {
    # A date is text; a merge key's mapping gives way to the keys beside it; a title is shown escaped.
    "date_note": _case("- id: c\n  note: 2024-02-30\n" + _CHECK[2:]),
    "merge": _case("""\
        - id: c
          inputs: {a: [[1, 2], [3, 4]]}
          checks:
            - &base {id: one, expr: a * 2, expect: {out: [[2, 4], [6, 8]]}}
            - <<: *base
              id: two
              expr: a * 3
              expect: {out: [[3, 6], [9, 12]]}
        """),
    "ansi_title": 'document: {title: "\\e[2J\\e[HAll passed"}\ncases:\n  - id: c\n' + _CHECK,
    "ansi\x1b[2Jname": _case("- id: c\n" + _CHECK[2:]),  # a file name, shown escaped too
}

_PROBE = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from attention_core import cli
from attention_core.harness.checking import runner
folder, report = sys.argv[1], sys.argv[2]
found = {{}}
for item in runner.collect(folder):
    result = runner.run(item)
    found[item.id] = [result.passed, result.report[:2000], len(result.report)]
with open(report, "w", encoding="utf-8") as out:
    json.dump(found, out)
sys.stdout.flush()
sys.exit(cli.main(["--cases", folder, "--device", "cpu", "-v"]))
"""


def _check_folder(folder, files):
    """``files`` (name: text or bytes) beside a valid file in ``folder``, checked by a child under the limits."""
    (folder / "a_good.yaml").write_text(GOOD, encoding="utf-8")
    for name, text in files.items():
        path = folder / f"{name}.yaml"
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text, encoding="utf-8")
    report = folder.parent / f"{folder.name}.json"
    run = subprocess.run(
        [sys.executable, "-c", _PROBE.format(limit=LIMIT_BYTES), str(folder), str(report)],
        capture_output=True,
        timeout=300,
        cwd=folder.parent,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    return run, json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    return _check_folder(tmp_path_factory.mktemp("cases"), {**{n: t for n, (t, *_) in HOSTILE.items()}, **VALID})


def test_the_folder_is_checked_within_the_limits_without_a_traceback(checked):
    run, found = checked
    assert found, run.stderr.decode()[-3000:]
    assert run.returncode == 1, run.stderr.decode()[-3000:]
    assert "Traceback" not in run.stdout.decode() + run.stderr.decode()
    assert len(run.stdout) < MAX_OUTPUT
    assert b"\x1b" not in run.stdout  # an escape in a title or an expression is shown, never sent
    assert "\\x1b[2J\\x1b[HAll passed" in run.stdout.decode() and "ansi\\x1b[2Jname" in run.stdout.decode()


def test_the_valid_neighbours_still_run_and_pass(checked):
    _, found = checked
    passed = {i: v[0] for i, v in found.items() if i.split("/")[0] in ("a_good", *VALID)}
    assert passed == {
        "a_good/good/double": True,
        "date_note/c/c": True,
        "merge/c/one": True,
        "merge/c/two": True,
        "ansi_title/c/c": True,
        "ansi\x1b[2Jname/c/c": True,
    }


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_file_fails_alone_at_its_line_with_a_short_message(checked, name):
    _, found = checked
    _, item, where, words = HOSTILE[name]
    passed, report, size = found[f"{name}/{item}"]
    first_line = report.split("\n")[0]
    assert not passed
    assert f"{name}.yaml:{where}: " in first_line, first_line
    assert words in report
    assert size < 2000 and "\x1b" not in report
    assert [i for i in found if i.split("/")[0] == name] == [f"{name}/{item}"]


# Files whose every part is small but whose whole would take the run past its limits.
_FLOOD = "".join(f'        "x + {i}": [0.0]\n' for i in range(2000))
LARGE = {
    "deep_flow": (
        "document: {title: T}\ncases: " + "[" * 30000 + "]" * 30000 + "\n",
        "invalid",
        "2:107",
        "the YAML nests deeper than 100 levels",
    ),
    "deep_block": (
        "document: {title: T}\ncases:\n" + "- " * 30000 + "x\n",
        "invalid",
        "3:199",
        "the YAML nests deeper than 100 levels",
    ),
    "many_targets": (
        _case(
            '- id: c\n  dtype: float64\n  inputs: {a: {expr: "ones(4096, 4096)"}}\n'
            "  checks:\n    - id: k\n      expr: a\n      expect:\n"
            + "".join(f'        "a + {i}": 1.0\n' for i in range(40))
        ),
        "c/k",
        "7",
        "the budget is 33554432",
    ),
    "flood": (
        _case("- id: c\n  inputs: {x: [1.0]}\n  checks:\n    - id: k\n      expr: x\n      expect:\n" + _FLOOD),
        "c/k",
        "6",
        "x + 0 (line 9): Values are not close!",
    ),
}


@pytest.fixture(scope="module")
def checked_large(tmp_path_factory):
    return _check_folder(tmp_path_factory.mktemp("large"), {n: t for n, (t, *_) in LARGE.items()})


@pytest.mark.parametrize("name", LARGE)
def test_a_file_too_deep_too_large_or_too_loud_stays_within_the_limits(checked_large, name):
    run, found = checked_large
    assert found, run.stderr.decode()[-3000:]
    assert run.returncode == 1 and "Traceback" not in run.stdout.decode() + run.stderr.decode()
    assert len(run.stdout) < MAX_OUTPUT
    assert found["a_good/good/double"][0]
    _, item, where, words = LARGE[name]
    passed, report, size = found[f"{name}/{item}"]
    assert not passed and f"{name}.yaml:{where}" in report.split("\n")[0] and words in report, report[:600]
    assert size < 10_000  # ten failed expectations in full, then "… and N more expectations not met"
