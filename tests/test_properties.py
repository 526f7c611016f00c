"""Property checks: every right answer holds them, a realistic mistake breaks the one that names it, and the
teacher sets which ones a name gets and what they are worth (docs/properties.md)."""

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from attention_core import reference
from attention_core.grading import properties
from attention_core.grading.judging.grader import Grader
from attention_core.grading.process import client
from attention_core.harness.checking import runner
from attention_core.harness.reading import assignment
from attention_core.harness.reading.settings import PROPERTY_KINDS, SettingsError, read_settings
from tests.implementations import STYLES
from tests.outputs import command, folder

ROOT = Path(__file__).resolve().parent.parent
HEAD = ROOT / "examples" / "head"
BOOK = Path(__file__).resolve().parent / "assignments" / "book"
REFERENCE = {name: getattr(reference, name) for name in assignment.default().names}

# The built-in spec's properties, as docs/properties.md lists them.
BUILT_IN = {
    "softmax": {"rows_sum_to_one", "shift", "batched", "large_inputs", "deterministic"},
    "causal_average": {"causal", "constant", "batched", "deterministic"},
    "attention": {"rows_sum_to_one", "permutation", "shift", "batched", "large_inputs", "deterministic", "causal"},
    "split_heads": {"split_merge", "permutation_rows", "batched", "deterministic"},
    "merge_heads": {"permutation_rows", "batched", "deterministic"},
    "multi_head_attention": {"one_head", "permutation", "rows_sum_to_one", "batched", "deterministic", "causal"},
    "layer_norm": {"moments", "batched", "deterministic"},
}


def _builtin_probes():
    chosen = assignment.default()
    return properties.probes(chosen, runner.collect(chosen.cases, chosen))


def _broken(functions):
    """probe id -> message, for the properties ``functions`` (the reference's, some replaced) break."""
    return {
        pid: message
        for pid, (_, message) in properties.evaluate(_builtin_probes(), {**REFERENCE, **functions}).items()
        if message
    }


def test_the_built_in_spec_gets_every_property_it_declares_and_its_reference_holds_them():
    found = {}
    for probe in _builtin_probes():
        found.setdefault(probe.name, set()).add(probe.kind)
    assert found == BUILT_IN  # a property the reference broke would be missing here
    assert set(properties.KINDS) == set(PROPERTY_KINDS)  # what assignment.yaml may name


def _logsumexp_softmax(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def _logsumexp_attention(q, k, v, mask=None, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = _logsumexp_softmax(scores)
    return weights @ v, weights


@pytest.mark.parametrize("style", [*STYLES, "logsumexp"])
def test_every_correct_style_holds_every_property(style):
    functions = STYLES.get(style) or {"softmax": _logsumexp_softmax, "attention": _logsumexp_attention}
    assert _broken(functions) == {}


def _softmax_dim0(x, dim=-1):
    return torch.softmax(x, dim=0)


def _naive_softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim, keepdim=True)


def _attention_mask_inverted(q, k, v, mask=None, scale=None):
    return reference.attention(q, k, v, None if mask is None else ~mask, scale)


def _attention_masked_after_softmax(q, k, v, mask=None, scale=None):
    _, weights = reference.attention(q, k, v, None, scale)
    weights = weights if mask is None else weights.masked_fill(~mask, 0.0)
    return weights @ v, weights


def _attention_dropout_left_on(q, k, v, mask=None, scale=None):
    _, weights = reference.attention(q, k, v, mask, scale)
    weights = torch.nn.functional.dropout(weights, 0.1, training=True)
    return weights @ v, weights


def _attention_scaled_over_batch(q, k, v, mask=None, scale=None):
    out, weights = reference.attention(q, k, v, mask, scale)
    return out / q.shape[0], weights  # divides by the batch size: right for a batch of one


def _average_over_all(x):
    return x.cumsum(-2) / x.shape[-2]


def _split_without_transpose(x, n_heads):
    *lead, T, C = x.shape
    return x.reshape(*lead, n_heads, T, C // n_heads)


def _merge_wrong_order(x):
    *lead, nh, T, hs = x.shape
    return x.reshape(*lead, T, nh * hs)


def _mha_transposed_projection(x, w_q, w_k, w_v, n_heads, mask=None):
    return reference.multi_head_attention(x, w_q.T, w_k.T, w_v.T, n_heads, mask)


def _layer_norm_whole_tensor(x, eps=1e-5):
    return (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps)


def _layer_norm_unbiased(x, eps=1e-5):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps)


@pytest.mark.parametrize(
    ("mistake", "broken"),
    [
        ({"softmax": _softmax_dim0}, "softmax/rows_sum_to_one"),
        ({"softmax": _naive_softmax}, "softmax/large_inputs"),
        ({"attention": _attention_mask_inverted}, "attention/causal"),
        ({"attention": _attention_masked_after_softmax}, "attention/rows_sum_to_one"),
        ({"attention": _attention_dropout_left_on}, "attention/deterministic"),
        ({"attention": _attention_scaled_over_batch}, "attention/batched"),
        ({"causal_average": _average_over_all}, "causal_average/constant"),
        ({"split_heads": _split_without_transpose}, "split_heads/split_merge"),
        ({"merge_heads": _merge_wrong_order}, "merge_heads/permutation_rows"),
        ({"multi_head_attention": _mha_transposed_projection}, "multi_head_attention/one_head"),
        ({"layer_norm": _layer_norm_whole_tensor}, "layer_norm/batched"),
        ({"layer_norm": _layer_norm_unbiased}, "layer_norm/moments"),
    ],
    ids=lambda v: v if isinstance(v, str) else next(iter(v.values())).__name__,
)
def test_a_mistake_breaks_the_property_that_names_it_and_no_property_of_another_function(mistake, broken):
    found = _broken(mistake)
    assert f"properties/{broken}" in found, found
    (name,) = mistake
    # (one_head calls attention, split_merge merge_heads: a relation between two functions)
    assert all(pid.split("/")[1] == name or pid.endswith(("/one_head", "/split_merge")) for pid in found), found


def test_a_failed_property_says_what_broke_and_on_which_inputs():
    message = _broken({"attention": _attention_mask_inverted})["properties/attention/causal"]
    assert "position 0 of `output` changed when only the tokens after position 0 changed" in message
    assert "(inputs: 5 tokens, causal mask)" in message
    message = _broken({"layer_norm": _layer_norm_unbiased})["properties/layer_norm/moments"]
    assert "variance 0.8333, not 1" in message


def test_the_inputs_are_the_same_for_every_student_and_every_regrade():
    first, second = _builtin_probes(), _builtin_probes()
    for a, b in zip(first, second):
        for ca, cb in zip(a.calls, b.calls):
            assert all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(ca.args, cb.args))


@pytest.mark.grading
def test_a_submission_s_property_calls_go_out_in_one_round_trip_and_a_second_for_split_then_merge(
    tmp_path, monkeypatch
):
    import inspect  # noqa: PLC0415

    (tmp_path / "s.py").write_text(inspect.getsource(reference), encoding="utf-8")
    trips = []
    original = client.Submission.call_all

    def counted(self, calls, **kwargs):
        trips.append([name for name, _, _ in calls])
        return original(self, calls, **kwargs)

    monkeypatch.setattr(client.Submission, "call_all", counted)
    with Grader() as grader:
        graded = grader.grade(tmp_path / "s.py")
    assert [len(set(t)) for t in trips] == [len(BUILT_IN), 1]  # every name, then merge
    assert trips[1] == ["merge_heads"]
    props = [g for g in graded.grades if g.check_id.startswith("properties/")]
    assert len(props) == sum(map(len, BUILT_IN.values())) and all(g.score == g.max_score == 1 for g in props)


def _teacher(tmp_path, settings=""):
    folder = tmp_path / "head"
    shutil.copytree(HEAD, folder)
    (folder / "assignment.yaml").write_text(settings, encoding="utf-8")
    chosen = assignment.load(folder)
    return chosen, {p.id: p for p in properties.probes(chosen, runner.collect(chosen.cases, chosen))}


def test_a_teacher_s_class_gets_every_property_its_reference_holds(tmp_path):
    _, found = _teacher(tmp_path)
    assert set(found) == {
        "properties/Head/causal",
        "properties/Head/batched",
        "properties/Head/large_inputs",
        "properties/Head/deterministic",
    }
    assert all(p.points == 0.0 for p in found.values())  # the teacher gave no points: feedback, worth nothing
    _, given = _teacher(tmp_path / "given", "property_points: 1.5\n")
    assert set(given) == set(found) and all(p.points == 1.5 for p in given.values())


WINDOW_REFERENCE = """import math

import torch


def sliding_window_attention(q, k, v, window):
    i, j = torch.arange(q.shape[-2])[:, None], torch.arange(k.shape[-2])[None, :]
    seen = (j <= i) & (j > i - window)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~seen, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def row_norm(x):
    return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)
"""
WINDOW_CASES = """document: {title: windows}
cases:
  - id: windows
    seed: 0
    inputs: {q: {randn: [5, 4]}, k: {randn: [5, 4]}, v: {randn: [5, 4]}}
    checks:
      - id: one
        call: sliding_window_attention(q, k, v, 1)
        expect: {out: {oracle: v}}
      - id: three
        call: sliding_window_attention(q, k, v, 3)
        expect: {out: "torch.Size([5, 4])"}
      - id: norm
        call: row_norm(q)
        expect: {out: "torch.Size([5, 4])"}
"""


def test_a_permutation_that_holds_on_some_inputs_only_leaves_the_causal_property(tmp_path):
    """A window of one gives ``v`` itself, which any permutation permutes: that says so of those inputs alone, and
    the causal property stays; a name whose every row stands alone (a row norm) still gets the permutation only."""
    (tmp_path / "cases").mkdir()
    (tmp_path / "reference.py").write_text(WINDOW_REFERENCE, encoding="utf-8")
    (tmp_path / "cases" / "windows.yaml").write_text(WINDOW_CASES, encoding="utf-8")
    chosen = assignment.load(tmp_path)
    found = {p.id for p in properties.probes(chosen, runner.collect(chosen.cases, chosen))}
    assert {"properties/sliding_window_attention/causal", "properties/row_norm/permutation"} <= found, found
    assert "properties/row_norm/causal" not in found


def test_a_teacher_lists_a_name_s_properties_reweighs_one_or_switches_them_off(tmp_path):
    _, found = _teacher(
        tmp_path, "properties:\n  Head: [causal, batched]\nchecks:\n  properties/Head/causal: {points: 3}\n"
    )
    assert {pid: p.points for pid, p in found.items()} == {
        "properties/Head/causal": 3.0,
        "properties/Head/batched": 0.0,
    }
    assert _teacher(tmp_path / "b", "properties:\n  Head: []\n")[1] == {}
    assert _teacher(tmp_path / "c", "property_points: 0\n")[1] == {}
    chosen, _ = _teacher(tmp_path / "d", "checks:\n  properties/Head/causal: {points: 2}\n")
    assert chosen.settings_problems(runner.collect(chosen.cases, chosen)) == []  # a property's id is known


def test_an_unknown_property_in_assignment_yaml_is_refused_at_its_line(tmp_path):
    path = tmp_path / "assignment.yaml"
    path.write_text("title: t\nproperties:\n  Head: [causal, casual]\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"assignment.yaml:3:.*properties\.Head\.1"):
        read_settings(path)


@pytest.mark.grading
def test_the_book_s_mask_after_softmax_breaks_causality_and_its_right_classes_hold_every_property(tmp_path):
    out = tmp_path / "o"
    run = command(
        "grade",
        "--assignment",
        str(BOOK),
        *map(str, sorted((BOOK / "submissions").iterdir())),
        "--out",
        str(out),
        "--jobs",
        "2",
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    for name in ("reordered", "notebook", "mask_after_softmax"):
        tests = json.loads((folder(out, name) / "results.json").read_text())["tests"]
        broken = {t["name"] for t in tests if t["name"].startswith("properties/") and t["status"] != "passed"}
        if name == "mask_after_softmax":
            assert broken == {"properties/CausalAttention/causal", "properties/MultiHeadAttentionWrapper/causal"}
            causal = next(t for t in tests if t["name"] == "properties/CausalAttention/causal")
            assert "must not see later tokens" in causal["output"] and "The call: CausalAttention(" in causal["output"]
        else:
            assert broken == set(), name


def test_a_row_whose_every_score_is_blocked_is_told_as_a_cause_of_nan(tmp_path):
    """The mask inverted: the last row blocks every key, and the softmax gives NaN. Large inputs' property says
    that may be the cause, beside an overflowing exp."""
    source = (HEAD / "submissions" / "correct.py").read_text(encoding="utf-8")
    (tmp_path / "inverted.py").write_text(
        source.replace("masked_fill(future,", "masked_fill(~future,"), encoding="utf-8"
    )
    with Grader(assignment=HEAD) as grader:
        graded = grader.grade(tmp_path / "inverted.py")
    (large,) = [g for g in graded.grades if g.check_id == "properties/Head/large_inputs"]
    assert not large.result.passed and "a row has every score blocked" in large.result.report, large.result.report
