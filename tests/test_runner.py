"""One check → one Result: the status says whose problem it is, and a grade lands on the function called."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attention_core import reference, spec
from attention_core.cli import main
from attention_core.harness.checking import compare, refusals, runner
from attention_core.harness.checking.results import Failure, Status

ITEMS = [i for i in runner.collect(runner.default_cases_folder()) if i.error is None]
GRADED = [i for i in ITEMS if i.check.kind == "call"]


def _spies(calls):
    def spy(name):
        def call(*args, **kwargs):
            calls.append(name)
            return getattr(reference, name)(*args, **kwargs)

        return call

    return {name: spy(name) for name in spec.NAMES}


@pytest.mark.parametrize("item", GRADED, ids=lambda i: i.id)
def test_a_graded_call_calls_exactly_the_function_it_grades(item):
    calls = []
    assert runner.run(item, functions=_spies(calls)).passed
    assert calls == [item.check.function]


def test_judging_given_results_gives_what_running_the_check_gives():
    def no_scale(q, k, v, mask=None, scale=None):
        return reference.attention(q, k, v, mask, scale=1.0)

    for functions in (None, {"attention": no_scale}):
        for item in [i for i in GRADED if i.check.function == "attention"][:6]:
            values = runner.outputs(item, functions=functions)
            ran, judged = runner.run(item, functions=functions), runner.judged(item, values)
            assert (judged.status, judged.message) == (ran.status, ran.message), item.id
            assert [f.render() for f in judged.failures] == [f.render() for f in ran.failures], item.id
    assert any(
        not runner.judged(i, runner.outputs(i, functions={"attention": no_scale})).passed
        for i in GRADED
        if i.check.function == "attention"
    )


def test_results_whose_structure_already_fails_come_back_as_that_failure_not_as_values():
    def output_only(q, k, v, mask=None, scale=None):
        return reference.attention(q, k, v, mask, scale=scale)[0]  # the spec returns (output, weights)

    item = next(i for i in GRADED if i.check.function == "attention")
    given, ran = (
        runner.outputs(item, functions={"attention": output_only}),
        runner.run(item, functions={"attention": output_only}),
    )
    assert not isinstance(given, dict) and not ran.passed
    assert (given.status, [f.render() for f in given.failures]) == (ran.status, [f.render() for f in ran.failures])
    assert any("must return 2 values (output, weights)" in f.render() for f in given.failures)


def test_nested_spec_calls_are_evaluated_with_the_reference():
    item = next(i for i in GRADED if "causal_mask(8)" in i.check.expr.source and i.check.function == "softmax")
    result = runner.run(item, functions={"softmax": reference.softmax})
    assert result.status is Status.PASSED


def test_a_missing_function_is_not_implemented_and_says_which():
    item = next(i for i in GRADED if i.check.function == "causal_average")
    result = runner.run(item, functions={"softmax": reference.softmax})
    assert result.status is Status.NOT_IMPLEMENTED
    assert result.message == "the implementation has no `causal_average`"
    assert "not implemented: the implementation has no `causal_average`" in result.report


def test_a_stub_raising_not_implemented_error_is_not_implemented():
    def causal_average(x):
        raise NotImplementedError("write me")

    item = next(i for i in GRADED if i.check.function == "causal_average")
    assert runner.run(item, functions={"causal_average": causal_average}).status is Status.NOT_IMPLEMENTED


def test_an_implementation_that_raises_keeps_its_exception_and_its_own_traceback_lines():
    def causal_average(x):
        return helper(x)

    def helper(x):
        raise ValueError("oops")

    item = next(i for i in GRADED if i.check.function == "causal_average")
    result = runner.run(item, functions={"causal_average": causal_average})
    assert result.status is Status.IMPLEMENTATION_ERROR
    assert result.message == "`causal_average` raised ValueError: oops"
    assert "in helper" in result.details and "raise ValueError" in result.details
    assert "attention_core/harness" not in result.details  # the harness's own frames are left out


def test_a_wrong_result_structure_is_a_failed_check_not_an_error():
    item = next(i for i in GRADED if i.check.function == "attention")
    result = runner.run(item, functions={"attention": lambda q, k, v, mask=None, scale=None: q})
    assert result.status is Status.FAILED
    assert "must return 2 values (output, weights)" in result.report


def test_a_result_in_another_dtype_fails_naming_the_dtypes():
    item = next(i for i in GRADED if i.check.function == "layer_norm")
    result = runner.run(item, functions={"layer_norm": lambda x, eps=1e-5: reference.layer_norm(x.double(), eps)})
    assert result.status is Status.FAILED
    assert "dtype does not match: torch.float64 != torch.float32" in result.report


def test_an_expectation_a_result_cannot_take_names_the_results_kind_and_what_the_spec_returns():
    item = next(i for i in GRADED if i.id == "003_attention_math_trick/bag_of_words/wei_masked")
    result = runner.run(item, functions={"causal_mask": lambda T, device=None: torch.ones(T, T).tril()})
    assert result.status is Status.FAILED
    assert "`~out` failed" in result.report
    assert "(`out` is float32 of shape [8, 8]; the spec's `causal_mask` returns bool `(T, T)`" in result.report


def test_failures_carry_their_tensors_for_drawing():
    item = next(i for i in ITEMS if i.id == "000_attention_explained/version3_p_attn/p_attn")
    inverted = lambda q, k, v, mask=None, scale=None: reference.attention(q, k, v, ~mask, scale)  # noqa: E731
    result = runner.run(item, functions={"attention": inverted})
    failure = next(f for f in result.failures if f.target == "weights")
    expected, actual, allowed, shown = failure.dense()
    assert expected.shape == actual.shape == allowed.shape == shown.shape == (8, 8)
    assert shown.all() and float(expected[0, 1]) == 0.0 and float(actual[0, 1]) > 0.0
    assert failure.mismatch.index is not None and failure.line > 0


def test_a_bug_of_the_harness_is_a_harness_error_and_the_cli_exits_2(monkeypatch, capsys, tmp_path):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(compare, "compare_printed", broken)
    item = next(i for i in ITEMS if i.id == "001_self_attention/four_by_four/softmax")
    result = runner.run(item)
    assert result.status is Status.HARNESS_ERROR and "ZeroDivisionError: a bug" in result.message
    _one_file(
        tmp_path, "      - id: s\n        call: softmax(x)\n        expect:\n          out: tensor([0.2689, 0.7311])\n"
    )
    assert main(["--cases", str(tmp_path), "--device", "cpu"]) == 2
    out = capsys.readouterr().out
    assert "HARNESS ERROR" in out and "Traceback" not in out
    assert main(["--cases", str(tmp_path), "--device", "cpu", "-v"]) == 2
    assert "Traceback (most recent call last)" in capsys.readouterr().out


def test_an_input_refused_when_it_is_made_is_a_case_error_told_in_the_authors_words(tmp_path, capsys):
    """The refusal as the author reads it: the input, its line, the limit; not the harness's own exception type."""
    (tmp_path / "c.yaml").write_text(
        "document: {title: T}\ncases:\n  - id: c\n    inputs:\n      x: [1.0, 2.0]\n"
        '      p: {expr: "9 ** 9 ** 9 ** 9"}\n    checks:\n      - id: k\n        expr: x * 2\n'
        "        expect: {out: [2.0, 4.0]}\n",
        encoding="utf-8",
    )
    assert main(["--cases", str(tmp_path), "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    said = "case error: the inputs could not be made: input 'p' (line 6): `9 ** 9 ** 9` refused: integer power"
    assert said in out and "InputError" not in out, out[-600:]


def test_a_report_names_the_dtype_and_prints_close_numbers_in_full():
    item = next(i for i in GRADED if i.id == "001_self_attention/four_by_four/softmax")
    assert runner.run(item, functions={"softmax": lambda x, dim=-1: x}).header.endswith("on cpu, float32")
    report = compare.compare_full(
        torch.tensor([2360065.0], dtype=torch.float64), torch.tensor([2360064.0], dtype=torch.float64)
    ).message
    assert "2360064" in report and "2360065" in report


def test_a_full_comparison_reports_positions_in_row_major_order_and_its_worst_elements_first():
    expected = torch.zeros(2, 3, 4, dtype=torch.float64)
    actual = expected.clone()
    actual[1, 2, 3], actual[0, 1, 2], actual[1, 0, 0] = 5.0, 3.0, 1.0
    mismatch = compare.compare_full(actual, expected, rtol=0.0, atol=0.5)
    assert mismatch.index == (1, 2, 3) and mismatch.positions is None
    table = mismatch.message.split("Worst elements")[1].splitlines()[2:]
    assert [row.split(")")[0] + ")" for row in table] == ["  (1, 2, 3)", "  (0, 1, 2)", "  (1, 0, 0)"]
    assert "Mismatched elements: 3 / 24" in mismatch.message
    dense_expected, dense_actual, _, shown = Failure("out", 1, mismatch, (2, 3, 4)).dense()
    assert torch.equal(dense_actual, actual) and torch.equal(dense_expected, expected) and shown.all()


def test_tied_worst_elements_are_listed_in_index_order_from_the_one_the_report_names():
    # A fully masked row read inverted: every element of it NaN, every difference infinite.
    expected = torch.tril(torch.rand(8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    actual = expected.clone()
    actual[7] = float("nan")
    mismatch = compare.compare_full(actual, expected)
    assert mismatch.index == (7, 0) and "Greatest absolute difference: inf at index (7, 0)" in mismatch.message
    table = mismatch.message.split("Worst elements")[1].splitlines()[2:]
    assert [row.split(")")[0] + ")" for row in table[:8]] == [f"  (7, {j})" for j in range(8)]


def test_the_worst_elements_of_a_large_comparison_are_found_across_its_blocks_largest_first_ties_in_order():
    n = 3 * compare.BLOCK + 5  # blocks, and a short last one
    expected = torch.rand(n, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    actual = expected.clone()
    wrong = {n - 1: 4e-3, 7: 1e-3, compare.BLOCK + 3: 4e-3, 2 * compare.BLOCK: 2e-3, 5: 2e-3, 6: 3e-3}
    for where, by in wrong.items():
        actual[where] += by
    table = compare.compare_values(actual, expected, 1e-6, (n,)).message.split("Worst elements")[1].splitlines()[2:]
    listed = [int(row.split("(")[1].split(",")[0]) for row in table]
    assert listed == [compare.BLOCK + 3, n - 1, 6, 5, 2 * compare.BLOCK, 7]


def test_a_large_expected_tensor_compared_again_after_it_changed_in_place_is_compared_as_it_is_now():
    expected = torch.rand(compare.LARGE, generator=torch.Generator().manual_seed(0))
    actual = expected.clone()
    assert compare.compare_full(actual, expected) is None
    expected[7] += 1.0
    assert compare.compare_full(actual, expected).index == (7,)
    assert compare.compare_full(actual, expected, rtol=0.0, atol=2.0) is None


def test_a_large_comparison_taken_block_by_block_finds_a_mismatch_in_its_last_block_alone():
    n = 3 * compare.BLOCK + 5  # blocks, and a short last one
    expected = torch.rand(n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for where in (0, compare.BLOCK, n - 1):
        actual = expected.clone()
        actual[where] += 1e-3
        mismatch = compare.compare_values(actual, expected, 1e-6, (n,))
        assert mismatch.index == (where,) and "Mismatched elements: 1 / " in mismatch.message
        assert compare.compare_full(actual.float(), expected).index == (where,)  # the bounds' pass too
    assert compare.compare_values(expected + 5e-7, expected, 1e-6, (n,)) is None
    assert compare.every(lambda a, b: a == b, torch.zeros(n), torch.tensor(0.0))
    assert not compare.every(lambda a: a == 0, torch.zeros(n).index_fill(0, torch.tensor([n - 1]), 1.0))


def test_the_cli_shows_each_failure_in_full_without_v_and_lists_only_errata_that_held(tmp_path, capsys):
    (tmp_path / "e.yaml").write_text(
        "document: {title: E}\ncases:\n  - id: c\n    inputs: {x: [1.0, 2.0]}\n    checks:\n"
        "      - id: wrong\n        call: softmax(x)\n        erratum: a note\n        expect: {out: [0.5, 0.5]}\n"
        "      - id: held\n        call: softmax(x)\n        erratum: another note\n"
        "        expect: {out: [0.2689414, 0.7310586]}\n",
        encoding="utf-8",
    )
    assert main(["--cases", str(tmp_path), "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "Values are not close!" in out  # the report itself, not only its header line
    errata = out.split("errata:", 1)[1].split("\n\n", 1)[0]
    assert "e/c/held" in errata and "e/c/wrong" not in errata


def test_the_command_line_prints_no_numpy_warning():
    done = subprocess.run(
        [sys.executable, "-m", "attention_core", "template"], capture_output=True, text=True, check=True
    )
    assert "NumPy" not in done.stderr and "def softmax" in done.stdout


def _one_file(folder, checks):
    (folder / "f.yaml").write_text(
        "document: {title: F}\ncases:\n  - id: c\n    inputs: {x: [1.0, 2.0]}\n    checks:\n" + checks, encoding="utf-8"
    )
    return runner.collect(folder)


@pytest.mark.parametrize(
    ("returns", "message"),
    [
        ("[a, b]", "softmax returns 1 value (out): 'returns' must name 1, not 2"),
        ("[o, o]", "'returns' names a result twice: o, o"),
    ],
)
def test_returns_that_cannot_match_the_spec_are_a_load_error(tmp_path, returns, message):
    items = _one_file(
        tmp_path,
        f"      - id: k\n        call: softmax(x)\n        returns: {returns}\n        expect: {{out: [0.5, 0.5]}}\n",
    )
    assert [i.error is not None for i in items] == [True] and message in items[0].error.message


@pytest.mark.parametrize(
    "check",
    [
        '      - id: k\n        expr: x\n        expect: {"x[5]": 1.0}\n',  # a target the document's arithmetic cannot take
        '      - id: k\n        call: softmax(x)\n        erratum: {note: n, differs: "softmax(x, dim=7)"}\n'
        "        expect: {out: [0.2689414, 0.7310586]}\n",  # a 'differs' that raises
    ],
)
def test_a_mistake_of_the_case_file_is_a_case_error_never_a_failed_check(tmp_path, check):
    (item,) = _one_file(tmp_path, check)
    for functions in (None, {"softmax": reference.softmax}):
        assert runner.run(item, functions=functions).status is Status.CASE_ERROR


def test_an_expectation_key_that_is_not_text_is_refused_at_its_line(tmp_path):
    (item,) = _one_file(tmp_path, "      - id: k\n        expr: x\n        expect: {1.5: 1, out: [1.0, 2.0]}\n")
    assert item.error is not None and item.location.endswith("f.yaml:8:17")
    assert "an expectation target must be an output's name or an expression, as text" in item.error.message


def test_a_number_too_large_for_a_tensor_is_a_failed_check_not_a_harness_error(tmp_path):
    (item,) = _one_file(tmp_path, '      - id: k\n        expr: "2**63"\n        expect: {out: 1}\n')
    result = runner.run(item)
    assert result.status is Status.FAILED and "does not fit in a 64-bit tensor" in result.report


_SHAPES_THAT_CANNOT_GO_THROUGH = (
    "document: {title: F}\ncases:\n  - id: c\n    seed: 0\n"
    "    inputs: {q: {randn: [3, 2]}, k: {randn: [3, 3]}, v: {randn: [3, 3]}}\n"
    "    checks:\n      - id: a\n        call: attention(q, k, v)\n        returns: [out, weights]\n"
    "        expect: {out: {shape: [3, 3]}}\n"
)


_RESULT_TOO_LARGE = (
    "document: {title: F}\ncases:\n  - id: c\n    seed: 0\n"
    "    inputs: {q: {randn: [1, 16384, 64]}}\n"
    "    checks:\n      - id: a\n        call: attention(q, q, q)\n"
    "        expect: {output: {shape: [1, 16384, 64]}}\n"
    "      - id: m\n        call: causal_mask(200000)\n        expect: {out: {shape: [200000, 200000]}}\n"
)


def test_a_call_whose_result_would_be_too_large_to_check_is_a_case_error_before_anything_is_made(tmp_path):
    (tmp_path / "f.yaml").write_text(_RESULT_TOO_LARGE, encoding="utf-8")
    called = []

    def attention(q, k, v, mask=None, scale=None):
        called.append(q.shape)
        raise AssertionError("not to be called")

    for item in runner.collect(tmp_path):
        for functions in (None, {"attention": attention, "causal_mask": attention}):
            result = runner.run(item, functions=functions)
            assert result.status is Status.CASE_ERROR and "would return a result of" in result.message, result.message
    assert not called


def test_the_bound_on_a_calls_result_holds_for_every_shipped_check_and_for_broadcast_masks():
    preparation = runner.Preparation()
    for item in GRADED:
        name, args, kwargs = preparation.arguments(item, "cpu")
        results = runner.REFERENCE[name](*args, **kwargs)
        largest = max(r.numel() for r in (results if isinstance(results, tuple) else (results,)))
        assert refusals.result_bound(name, args, kwargs) >= largest, item.id
    q, k, v = torch.zeros(1, 1, 5, 2), torch.zeros(3, 1, 7, 2), torch.zeros(1, 4, 7, 6)
    mask = torch.ones(2, 1, 1, 1, 7, dtype=torch.bool)  # broadcast over a new leading axis
    largest = max(r.numel() for r in reference.attention(q, k, v, mask=mask))
    assert (
        refusals.result_bound("attention", (q, k, v), {"mask": mask}) >= largest == 2 * 3 * 4 * 5 * 6
    )  # the output (2, 3, 4, 5, 6)


def test_a_call_the_reference_core_cannot_make_either_is_a_case_error_not_the_implementations(tmp_path):
    (tmp_path / "f.yaml").write_text(_SHAPES_THAT_CANNOT_GO_THROUGH, encoding="utf-8")
    [item] = runner.collect(tmp_path)

    def attention(q, k, v, mask=None, scale=None):  # any implementation raises on these shapes
        return q @ k.transpose(-2, -1)

    for functions in (None, {"attention": attention}):
        result = runner.run(item, functions=functions)
        assert result.status is Status.CASE_ERROR, result.message
        assert "the reference core cannot run `attention` on these arguments either" in result.message
        assert "mat1 and mat2 shapes cannot be multiplied" in result.message

    def wrong(q, k, v, mask=None, scale=None):  # where the reference runs, a raise stays the implementation's
        raise ValueError("oops")

    fine = next(i for i in GRADED if i.check.function == "attention")
    assert runner.run(fine, functions={"attention": wrong}).status is Status.IMPLEMENTATION_ERROR


def test_a_large_prepared_argument_s_copies_are_each_a_call_s_own_and_cost_nothing_until_written():
    """Each in-process call gets its own copy of a large argument (it may write into it), mapped from a memory
    file rather than cloned: a write reaches neither the argument nor another copy, and the pages a copy only
    reads are the argument's own."""
    from attention_core.harness.checking import unwritten  # noqa: PLC0415

    original = torch.rand(4, unwritten.LARGE // 4, generator=torch.Generator().manual_seed(0))
    argument = unwritten.kept(original.clone())
    assert torch.equal(argument, original)
    first, second = unwritten.copy(argument), unwritten.copy(argument)
    assert first.data_ptr() not in (argument.data_ptr(), second.data_ptr())
    first.mul_(2)  # a call writing into its copy
    assert torch.equal(argument, original) and torch.equal(second, original)
    assert torch.equal(first, original * 2)
    if hasattr(os, "memfd_create"):
        maps = Path("/proc/self/smaps").read_text().split("\n")
        private = [
            int(line.split()[1])
            for start, line in zip(maps, maps[1:])
            if "attention-argument" in start and line.startswith("Size:")
        ]
        assert len(private) >= 3  # (the argument and its two copies: mappings of the file, not clones)
    argument.add_(1)  # written itself (never by the grader): a copy then holds what it holds now
    assert torch.equal(unwritten.copy(argument), original + 1)
    small = unwritten.kept(torch.ones(3))
    assert unwritten.copy(small).data_ptr() != small.data_ptr()


def test_without_memory_files_a_prepared_input_stays_as_it_is_and_its_copies_are_clones(monkeypatch):
    """Where the system has no memory files or fcntl (Windows), the check command still runs: a copy is a clone."""
    from attention_core.harness.checking import unwritten  # noqa: PLC0415

    monkeypatch.setattr(unwritten, "fcntl", None)
    value = torch.ones(unwritten.LARGE)
    assert unwritten.kept(value) is value and unwritten.file_of(value) is None
    copy = unwritten.copy(value)
    assert torch.equal(copy, value) and copy.data_ptr() != value.data_ptr()


def test_output_its_reader_stops_taking_ends_the_command_quietly(monkeypatch, capsys):
    """``python -m attention_core points | head``: the pipe closed under it ends the command with exit code 1, not a
    BrokenPipeError's traceback."""
    from attention_core import cli  # noqa: PLC0415

    read, write = os.pipe()
    os.close(read)  # the reader has gone before anything is written
    with capsys.disabled(), os.fdopen(write, "w") as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        monkeypatch.setattr(sys, "argv", ["attention_core", "template"])
        assert cli.run() == 1
