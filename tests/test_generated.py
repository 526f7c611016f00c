"""Mistakes made from a teacher's reference: each kind of slip worded for a student, named only where it
alone gives the student's results, and the teacher told which ones no case catches (adequacy)."""

import math
import re
from pathlib import Path

import pytest
import torch

from attention_core.grading.judging.grader import Grader
from attention_core.grading.naming import generated
from attention_core.harness.reading import assignment
from tests.outputs import command

pytestmark = pytest.mark.slow  # end to end: the quick loop leaves this module out

ROOT = Path(__file__).resolve().parent.parent
BOOK = Path(__file__).resolve().parent / "assignments" / "book"
HEAD = ROOT / "examples" / "head"
LLAMA = Path(__file__).resolve().parent / "assignments" / "llama"


def test_the_book_s_reference_gets_every_kind_of_slip_its_code_can_make():
    made = generated.generate(assignment.load(BOOK))
    kinds = {generated.kind_of(m) for m in made}
    assert {
        "scale_by_d",
        "no_scale",
        "scale_multiplied",
        "softmax_wrong_dim",
        "softmax_missing",
        "mask_inverted",
        "mask_missing",
        "mask_fill_zero",
        "mask_blocks_diagonal",
        "mask_after_softmax",
        "transpose_missing",
        "concatenated_wrong_dim",
        "layer_missing",
        "reshape_order",
        "product_swapped",
        "part_swapped",
        "scale_by_other_size",
        "summed_not_concatenated",
        "transpose_as_T",
        "size_from_fixed_axis",
    } <= kinds
    assert len({m.name for m in made}) == len(made)  # each its own name: its runs are kept under it
    owners = {generated.owner_of(m) for m in made}
    assert owners == {
        "SelfAttention_v1",
        "SelfAttention_v2",
        "CausalAttention",
        "MultiHeadAttentionWrapper",
        "MultiHeadAttention",
    }


def test_a_slip_is_worded_for_a_student_never_as_a_line_a_constant_or_a_variable_of_the_reference():
    source = (BOOK / "reference.py").read_text()
    # (plain English words that happen to be names too, keys and values, may be said)
    assigned = re.findall(r"^\s+([a-z_][a-z0-9_]*(?:, *[a-z_][a-z0-9_]*)*) = ", source, re.M)  # b, t, d = x.shape too
    variables = {v.strip() for names in assigned for v in names.split(",") if len(v.strip()) > 1}  # (`b @ a`: letters)
    variables -= {"keys", "values", "queries"}
    assert {"attn_scores", "attn_weights", "context", "num_tokens", "d_in"} <= variables
    for mutant in generated.generate(assignment.load(BOOK)):
        words = f"{mutant.mistake} {mutant.fix}"
        assert not re.search(r"reference\.py|line \d|:\d+|->", words), words
        assert not any(re.search(rf"\b{v}\b", words) for v in variables), words


def test_each_mutant_is_the_reference_with_one_change_that_runs():
    chosen = assignment.load(BOOK)
    for mutant in generated.generate(chosen):
        assert set(mutant.functions) == set(chosen.names)


@pytest.mark.grading
def test_a_student_s_slip_is_named_where_it_alone_gives_their_results_and_a_right_one_gets_no_name():
    with Grader(assignment=BOOK) as grader:
        graded = {g.name: g for g in grader.grade_each(sorted((BOOK / "submissions").iterdir()))}
    diagnosis = {name: {d for g in one.grades for d in g.diagnosis.split("\n") if d} for name, one in graded.items()}
    unscaled = [d for d in diagnosis["v1_unscaled"] if d.startswith("Likely mistake")]
    assert len(unscaled) == 1 and "the scores are not scaled by the square root of the dimension" in unscaled[0]
    assert "of `SelfAttention_v1`" in unscaled[0]
    after = [d for d in diagnosis["mask_after_softmax"] if d.startswith("Likely mistake")]
    assert len(after) == 1 and "the mask is applied after the softmax" in after[0]
    assert not any(d.startswith("Likely mistake") for d in diagnosis["renamed_projection"])  # its names differ
    assert diagnosis["reordered"] == diagnosis["notebook"] == set()


def test_adequacy_names_the_mistakes_no_case_catches():
    # The book's multi-head case has one dimension per head: sqrt(1) == 1, so no case tells the scale apart.
    run = command("adequacy", "--assignment", str(BOOK), cwd=ROOT)
    assert run.returncode == 0, run.stderr
    missed = [line for line in run.stdout.splitlines() if line.startswith("  not caught")]
    assert len(missed) == 3 and all("in `MultiHeadAttention`" in line for line in missed), run.stdout
    assert any("the scores are not scaled by the square root of the dimension" in line for line in missed)
    assert "the reference's results everywhere tried" in run.stdout  # dropout left out, in eval mode


def test_adequacy_of_an_assignment_whose_cases_catch_everything(tmp_path):
    run = command("adequacy", "--assignment", str(HEAD), "-v", cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "0 are not caught" in run.stdout and "caught, in `Head`: the mask is inverted" in run.stdout


MISTAKES = Path(__file__).resolve().parent / "assignments" / "book_mistakes"  # written apart from the reference


@pytest.mark.grading
def test_mistakes_written_apart_from_the_reference_are_named_or_given_with_what_else_they_could_be():
    with Grader(assignment=BOOK) as grader:
        graded = {g.name: g for g in grader.grade_each(sorted(MISTAKES.glob("*.py")))}
    said = {
        name: sorted(
            {d for g in one.grades for d in g.diagnosis.split("\n") if d.startswith(("Likely mistake", "Possible"))}
        )
        for name, one in graded.items()
    }
    assert said["c02_einsum_sdpa"] == [] and graded["c02_einsum_sdpa"].score == graded["c02_einsum_sdpa"].max_score
    named = {
        "m04_v2_values_from_key": "`W_key` is used where `W_value` belongs",
        "m10_wrapper_sum_heads": "the pieces (the heads' outputs) are added together instead of concatenated",
        "m06_causal_mask_after_softmax": "the mask is applied after the softmax",
    }
    for name, words in named.items():
        assert len(said[name]) == 1 and said[name][0].startswith("Likely mistake: ") and words in said[name][0], said
    # keys.T on a batch raises exactly as a missing transpose or swapped factors do: no single name, but what it
    # could be, the right one among them
    (keys_T,) = said["m07_causal_keys_dot_T"]
    assert keys_T.startswith("Possible mistakes") and "`.T` where `.transpose(1, 2)` belongs" in keys_T
    # scaling by sqrt(d_out) gives what reading the size from shape[1] gives on every case; further inputs of the
    # same shapes (other values) tell them apart: the one that also gives the student's results there is named
    (scale,) = said["m14_mha_scale_by_dout"]
    assert scale.startswith("Likely mistake: ") and "the square root of `d_out`" in scale


def test_making_the_mutants_runs_nothing_of_the_reference_but_its_definitions_again(tmp_path):
    import shutil  # noqa: PLC0415

    folder = tmp_path / "head"
    shutil.copytree(HEAD, folder)
    marker = tmp_path / "loads"
    with (folder / "reference.py").open("a") as handle:  # a reference whose import does work of its own
        handle.write(f"\nLOADED = open({str(marker)!r}, 'a').write('x')  # say, a dataset loaded\n")
    chosen = assignment.load(folder)
    assert marker.read_text() == "x"
    made = generated.generate(chosen)
    assert len(made) > 10 and marker.read_text() == "x"  # its import's work, done once


def test_a_mask_under_an_if_is_moved_after_the_softmax_under_the_same_if(tmp_path):
    """``if self.causal: scores = scores.masked_fill(...)``, the usual way to make the mask optional: the mistake
    of masking the weights after the softmax is made there too (it was not, and so never named)."""
    import shutil  # noqa: PLC0415

    folder = tmp_path / "head"
    shutil.copytree(HEAD, folder, ignore=shutil.ignore_patterns("submissions"))
    source = (folder / "reference.py").read_text(encoding="utf-8")
    masking = '        scores = scores.masked_fill(~causal, float("-inf"))\n'
    assert masking in source
    (folder / "reference.py").write_text(source.replace(masking, "        if T > 0:\n    " + masking))
    made = generated.generate(assignment.load(folder))
    moved = [m for m in made if generated.kind_of(m) == "mask_after_softmax"]
    assert [generated.owner_of(m) for m in moved] == ["Head"]


def test_a_teachers_own_mistake_is_named_as_the_library_names_and_adequacy_says_whether_a_case_catches_it(tmp_path):
    import io  # noqa: PLC0415
    import shutil  # noqa: PLC0415

    from attention_core.authoring import mistakes  # noqa: PLC0415
    from attention_core.grading.naming import (
        adequacy,
        own_mistakes,  # noqa: PLC0415
    )

    folder = tmp_path / "head"
    shutil.copytree(HEAD, folder, ignore=shutil.ignore_patterns("submissions"))
    chosen = assignment.load(folder)
    path = mistakes.scaffold(chosen, "values_from_keys")
    assert own_mistakes.load(chosen)[1] == [
        f"{path}:1: its docstring is still the template's: write the mistake and its fix"
    ]
    text = path.read_text().split('"""', 2)[2].replace("p_attn @ self.value(value)", "p_attn @ key", 1)
    assert text != path.read_text().split('"""', 2)[2]
    path.write_text(
        '"""the output weighs the keys where the values belong\n\nFix: multiply the weights by the values.\n"""' + text
    )
    (folder / "mistakes" / "broken.py").write_text('"""no fix line"""\n')
    made, problems = own_mistakes.load(chosen)
    assert [m.name for m in made] == ["Head:own:values_from_keys"] and len(problems) == 1
    assert "broken.py:1: its module docstring must hold the mistake" in problems[0]
    out = io.StringIO()
    assert adequacy.report(adequacy.assess(chosen), stream=out) == 1  # (the broken file: an error)
    assert (
        "values_from_keys (`Head`): the output weighs the keys where the values belong: caught by head/"
        in out.getvalue()
    )
    student = tmp_path / "student.py"
    student.write_text(
        (HEAD / "submissions" / "correct.py")
        .read_text()
        .replace("self.dropout(weights) @ v", "self.dropout(weights) @ k")
    )
    with Grader(assignment=folder) as grader:
        graded = grader.grade(student)
    said = {d for g in graded.grades for d in g.diagnosis.split("\n") if d}
    assert (
        "Likely mistake: the output weighs the keys where the values belong. Fix: multiply the weights by the "
        "values." in said
    ), said


ENCODER = Path(__file__).resolve().parent / "assignments" / "encoder"
BUILTIN_MISTAKES = Path(__file__).resolve().parent / "submissions" / "builtin_mistakes"
# Each one-mistake file -> words its "Likely mistake" line must hold; None: nothing may be named "likely". A name
# with other words is a wrong name.
NAMED = {
    ENCODER: {
        "alibi_sign": None,
        "alibi_slope_off_by_one": "a range starts one too early",
        "cross_kv_from_x": "`x` is used where `context` belongs",
        "eps_outside_sqrt": "outside the square root",
        "gelu_tanh": "the tanh approximation of GELU",
        "heads_merged_without_transpose": "is left out",
        "mask_polarity": "the mask is inverted",
        "pre_norm": "the normalisation is applied to the sublayer's input",
        "residual_after_norm": "the residual is added after the normalisation",
        "sin_cos_concatenated": None,
        "sin_cos_swapped": "the sine and the cosine are in each other's place",
        "unbiased_variance": "the unbiased one",
    },
    BUILTIN_MISTAKES: {
        "attention_mask_after_softmax": "the mask is applied after the softmax",
        # The library's "dim -2" fits its 3-D checks alone; the fixed axis fits all, 4-D ones too
        "attention_softmax_fixed_axis": "the softmax is taken over dim 1, a fixed axis",
        "attention_mask_inverted": "the bool mask is read inverted",
        "attention_scale_dk": "1 / d_k",
        "causal_average_channel_axis": "along each token's channels",
        "attention_float_mask_multiplied": "a floating mask multiplies the scores where it is added to them",
        "causal_average_off_by_one": "leaves out the current row",
        "causal_mask_triu": "the wrong triangle",
        "layer_norm_no_center": "the mean is not subtracted",
        "layer_norm_unbiased": "unbiased",
        "merge_heads_no_transpose": "without moving the head axis",
        "merge_heads_interleaved": "the heads' channels come interleaved",
        "mha_scale_model_dim": "the input's width",
        "mha_weights_transposed": "transposed",
        "softmax_log_softmax": "log-probabilities",
        "softmax_sum_no_keepdim": "keepdim",
        "split_heads_interleaved": "every n_heads-th channel",
    },
}


@pytest.mark.grading
@pytest.mark.parametrize("folder", [ENCODER, BUILTIN_MISTAKES], ids=["encoder", "builtin"])
def test_one_mistake_files_are_named_by_their_own_mistake_and_never_by_another(folder):
    subs = folder / "submissions" if (folder / "submissions").is_dir() else folder
    files = sorted(subs.glob("*.py"))
    with Grader(assignment=folder if folder == ENCODER else None) as grader:
        graded = dict(zip(files, grader.grade_each(files)))
    for path, one in graded.items():
        likely = {d for g in one.grades for d in g.diagnosis.split("\n") if d.startswith("Likely mistake")}
        if not path.stem.startswith("mistake_"):
            assert one.score == one.max_score and not likely, (path.name, likely)
            continue
        words = NAMED[folder][path.stem.removeprefix("mistake_")]
        assert one.score < one.max_score, path.name
        if words is None:
            assert not likely, (path.name, likely)
        else:
            assert likely and all(words in line for line in likely), (path.name, likely)


@pytest.mark.grading
def test_rope_turning_the_other_way_is_named_by_its_sign_on_the_other_piece(tmp_path):
    """rotate_half written ``cat((x2, -x1))`` for ``cat((-x2, x1))``: the commonest RoPE slip, named as itself."""
    llama = Path(__file__).resolve().parent / "assignments" / "llama"
    source = (llama / "reference.py").read_text(encoding="utf-8")
    assert "torch.cat((-x2, x1), dim=-1)" in source
    (tmp_path / "rope_sign.py").write_text(source.replace("torch.cat((-x2, x1)", "torch.cat((x2, -x1)"))
    with Grader(assignment=llama) as grader:
        graded = grader.grade(tmp_path / "rope_sign.py")
    likely = {d for g in graded.grades for d in g.diagnosis.split("\n") if d.startswith("Likely mistake")}
    assert graded.score < graded.max_score and likely
    assert all("the minus sign is on the other piece given to `cat`" in line for line in likely), likely
    assert all("(This one mistake alone gives your results, right and wrong, on the " in line for line in likely)


@pytest.mark.grading
def test_an_activation_where_another_belongs_is_named_by_both(tmp_path):
    """SwiGLU's gate written with another of the usual activations (as a function or as a method): each named as
    itself, with the one that belongs."""
    llama = Path(__file__).resolve().parent / "assignments" / "llama"
    source = (llama / "reference.py").read_text(encoding="utf-8")
    gate = "F.silu(self.w1(n))"
    assert gate in source
    files = {"relu": "F.relu(self.w1(n))", "tanh": "self.w1(n).tanh()"}
    for name, written in files.items():
        (tmp_path / f"{name}.py").write_text(source.replace(gate, written), encoding="utf-8")
    with Grader(assignment=llama) as grader:
        graded = grader.grade_each([tmp_path / f"{name}.py" for name in files])
        for name, one in zip(files, graded):
            likely = {d for g in one.grades for d in g.diagnosis.split("\n") if d.startswith("Likely mistake")}
            assert one.score < one.max_score and likely, name
            assert all(f"`{name}` where SiLU belongs" in line for line in likely), (name, likely)


def test_a_reference_s_mistakes_are_made_once_in_a_process_and_again_for_a_changed_source(monkeypatch, tmp_path):
    made = []
    real = generated._generate
    monkeypatch.setattr(generated, "_generate", lambda *args: made.append(args[1:]) or real(*args))
    chosen = assignment.load(HEAD)
    source = (HEAD / "reference.py").read_text(encoding="utf-8") + f"\n# {tmp_path}\n"  # made by no other test
    first = generated.generate(chosen, source=source)
    again = generated.generate(chosen, source=source)
    assert len(made) == 1 and [m.name for m in again] == [m.name for m in first]
    again.clear()  # each caller's own list: what one does to it leaves the next one's whole
    assert [m.name for m in generated.generate(chosen, source=source)] == [m.name for m in first]
    changed = source + "# changed\n"
    generated.generate(chosen, source=changed)
    assert len(made) == 2  # a teacher's edit to the reference between two gradings makes its mistakes anew
    for edit in range(generated._SOURCES_KEPT):  # a session of many edits keeps the last few
        generated.generate(chosen, source=changed + f"# edit {edit}\n")
    generated.generate(chosen, source=source)
    assert len(made) == 3 + generated._SOURCES_KEPT  # the first source's were dropped: made again


@pytest.mark.grading
def test_a_mistake_s_results_that_no_expectation_reads_are_kept_as_their_shape_alone(tmp_path):
    """The diagnosis keeps each mistake's results on a check for the batch (the next student with the same wrong
    values is named without running it again): a result no expectation of the check reads (attention's weights,
    where only its output is checked) is kept as its shape, as a student's own reply is, not its values."""
    import torch  # noqa: PLC0415

    from attention_core.grading.naming import mutants  # noqa: PLC0415

    (unscaled,) = [m for m in mutants.MUTANTS if m.name == "no_scale"]
    path = tmp_path / "unscaled.py"
    path.write_text(mutants.submission_source(unscaled), encoding="utf-8")
    with Grader() as grader:
        graded = grader.grade(path)
        entries = list(grader.diagnoser._results._entries.items())
    assert any(g.mistakes for g in graded.grades)  # (named: the mistakes ran)
    unread = [
        value
        for (item, _, _), (found, _) in entries
        if isinstance(found, dict)
        for name, value in found.items()
        if isinstance(value, torch.Tensor) and name not in item.check.read_names()
    ]
    assert unread and all(value.device.type == "meta" for value in unread)


def _head_with(tmp_path, more):
    """A copy of the head example's assignment (without its submissions) with ``more`` added to its reference."""
    import shutil  # noqa: PLC0415

    folder = tmp_path / "head"
    shutil.copytree(HEAD, folder, ignore=shutil.ignore_patterns("submissions"))
    with (folder / "reference.py").open("a", encoding="utf-8") as reference:
        reference.write(more)
    return folder


def _rope_by_loops(x, base, pair):
    """RoPE in float64, one channel pair at a time: ``pair(i, D)`` the two channels turned by angle ``i``."""
    x = x.double()
    out = x.clone()
    D, T = x.shape[-1], x.shape[-2]
    for t in range(T):
        for i in range(D // 2):
            angle = t * base ** (-2 * i / D)
            a, b = pair(i, D)
            xa, xb = x[..., t, a], x[..., t, b]
            out[..., t, a] = xa * math.cos(angle) - xb * math.sin(angle)
            out[..., t, b] = xa * math.sin(angle) + xb * math.cos(angle)
    return out


NEIGHBOURS = lambda i, D: (2 * i, 2 * i + 1)  # noqa: E731 (x[..., 0::2] with x[..., 1::2])
HALVES = lambda i, D: (i, i + D // 2)  # noqa: E731 (rotate_half's pairs)


def test_rope_s_other_pairing_is_made_from_either_reference_and_is_that_convention_exactly(tmp_path):
    """A reference that pairs neighbouring channels gets the mistake of pairing the halves, and the reverse: a
    mutant of each computes the other convention exactly (against RoPE written pair by pair in float64): its pieces
    and their putting back written the other way where the function pairs them itself, else the function given the
    other layout (the reference's rotate_half helper written the other way keeps the tables of halves: a mistake of
    its own)."""
    interleaved = _head_with(
        tmp_path,
        (
            "\n\ndef apply_rope(x, base=10000.0):\n"
            "    T, D = x.shape[-2], x.shape[-1]\n"
            "    inv_freq = base ** (-torch.arange(0, D, 2, dtype=x.dtype) / D)\n"
            "    angles = torch.outer(torch.arange(T, dtype=x.dtype), inv_freq)\n"
            "    x1, x2 = x[..., 0::2], x[..., 1::2]\n"
            "    out1 = x1 * angles.cos() - x2 * angles.sin()\n"
            "    out2 = x1 * angles.sin() + x2 * angles.cos()\n"
            "    return torch.stack((out1, out2), dim=-1).flatten(-2)\n"
        ),
    )
    x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    kinds = ("pairs_convention", "pairs_pieces")
    for folder, theirs in ((interleaved, HALVES), (LLAMA, NEIGHBOURS)):
        made = [m for m in generated.generate(assignment.load(folder)) if generated.kind_of(m) in kinds]
        assert made and {generated.owner_of(m) for m in made} == {"apply_rope"}, folder
        exactly = [
            m
            for m in made
            if all(torch.allclose(m.functions["apply_rope"](x, b), _rope_by_loops(x, b, theirs)) for b in (1e4, 100.0))
        ]
        assert exactly, (folder, [m.name for m in made])


@pytest.mark.grading
def test_rmsnorm_centred_a_scale_by_another_size_itself_and_rope_paired_the_other_way_are_named(tmp_path):
    """Three mistakes of a modern block, each named as itself: RMSNorm subtracting the mean as LayerNorm does, the
    scores divided by the model's width where the square root of the head's belongs (two changes in one place), and
    RoPE written with neighbouring channels paired where rotate_half's halves belong (throughout, or in the
    rotation's helper alone)."""
    source = (LLAMA / "reference.py").read_text(encoding="utf-8")
    rms = "        ms = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)\n"
    scale = "scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)"
    rope = "    return x * cos + _rotate_half(x) * sin\n"
    assert rms in source and scale in source and rope in source
    neighbours = (
        "    x1, x2 = x[..., 0::2], x[..., 1::2]\n"
        "    cos, sin = cos[..., : D // 2], sin[..., : D // 2]\n"
        "    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)\n"
    )
    helper = "    x1, x2 = x[..., :half], x[..., half:]\n    return torch.cat((-x2, x1), dim=-1)\n"
    assert helper in source
    every_two = "    x1, x2 = x[..., 0::2], x[..., 1::2]\n    return torch.stack((-x2, x1), dim=-1).flatten(-2)\n"
    files = {
        "centred": source.replace(rms, "        x = x - x.mean(-1, keepdim=True)\n" + rms),
        "width": source.replace(scale, "scores = q @ k.transpose(-2, -1) / C"),
        "neighbours": source.replace(rope, neighbours),
        "every_two": source.replace(helper, every_two),  # GPT-J's rotate_every_two with Llama's tables
    }
    words = {
        "centred": "`x`'s mean is subtracted first, as LayerNorm does",
        "width": "the scale is `x.shape[-1]` itself where the square root of `self.head_dim` belongs",
        "neighbours": "the channels are paired as neighbours (x[..., 0::2] with x[..., 1::2]) where the two halves",
        "every_two": "the channels are paired as neighbours (x[..., 0::2] with x[..., 1::2]) where the two halves",
    }
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    with Grader(assignment=LLAMA) as grader:
        graded = dict(zip(files, grader.grade_each([tmp_path / f"{name}.py" for name in files])))
    for name, one in graded.items():
        likely = {d for g in one.grades for d in g.diagnosis.split("\n") if d.startswith("Likely mistake")}
        assert one.score < one.max_score and likely, name
        assert all(words[name] in line for line in likely), (name, likely)


def test_rope_of_two_inputs_a_centring_and_their_look_alikes_are_made_only_where_they_are_those_mistakes(tmp_path):
    """The other RoPE pairing of a function rotating two inputs (whatever their names) converts both; a caller that
    passes it its own tensors gets no such mistake; RMSNorm's centring is made before the statement that takes the
    root mean square (its axis a local), and not of a LayerNorm whose variance is written E[x²] - E[x]²; partial
    rotary, split where the rotated channels end rather than at a half, is no pairing."""
    folder = _head_with(
        tmp_path,
        (
            "\n\ndef _half_turn(t):\n"
            "    h = t.shape[-1] // 2\n"
            "    return torch.cat((-t[..., h:], t[..., :h]), dim=-1)\n"
            "\n\ndef rope_qk(X, o, base=10000.0):\n"
            "    T, D = X.shape[-2], X.shape[-1]\n"
            "    angles = torch.outer(torch.arange(T, dtype=X.dtype), base ** (-torch.arange(0, D, 2, dtype=X.dtype) / D))\n"
            "    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()\n"
            "    return X * cos + _half_turn(X) * sin, o * cos + _half_turn(o) * sin\n"
            "\n\ndef rotated_sum(x):\n"
            "    q, k = x * 2, x * 3\n"
            "    a, b = rope_qk(q, k)\n"
            "    return a + b\n"
            "\n\ndef rms(x, eps=1e-6):\n"
            "    d = -1\n"
            "    return x / (x.pow(2).mean(d, keepdim=True) + eps).sqrt()\n"
            "\n\ndef layer_norm_by_moments(x, eps=1e-5):\n"
            "    m = x.mean(-1, keepdim=True)\n"
            "    v = (x ** 2).mean(-1, keepdim=True) - m ** 2\n"
            "    return (x - m) / (v + eps).sqrt()\n"
            "\n\ndef rms_guarded(x, eps=1e-6):\n"
            "    if torch.isnan(x.mean()):\n"
            "        raise ValueError('nan')\n"
            "    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()\n"
            "\n\ndef rope_partial(x, rot=4):\n"
            "    x_rot, x_pass = x[..., :rot], x[..., rot:]\n"
            "    return torch.cat((_half_turn(x_rot) + x_rot, x_pass), dim=-1)\n"
        ),
    )
    made = generated.generate(assignment.load(folder))
    kinds = {(generated.owner_of(m), generated.kind_of(m)) for m in made}
    assert ("rope_qk", "pairs_convention") in kinds
    assert not {k for k in kinds if k[0] == "rotated_sum" and k[1].startswith("pairs")}
    assert ("rms", "mean_subtracted") in kinds and ("layer_norm_by_moments", "mean_subtracted") not in kinds
    assert ("rms_guarded", "mean_subtracted") in kinds  # (a mean only tested is not a variance's)
    assert ("rope_partial", "pairs_convention") not in kinds  # split where the rotated channels end, not at a half
    q, k = torch.randn(2, 2, 5, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64).unbind(0)
    (other,) = [m for m in made if generated.owner_of(m) == "rope_qk" and generated.kind_of(m) == "pairs_convention"]
    a, b = other.functions["rope_qk"](q, k)
    assert torch.allclose(a, _rope_by_loops(q, 1e4, NEIGHBOURS)) and torch.allclose(
        b, _rope_by_loops(k, 1e4, NEIGHBOURS)
    )
    (centred,) = [m for m in made if generated.owner_of(m) == "rms" and generated.kind_of(m) == "mean_subtracted"]
    x = q[0]
    expected = (x - x.mean(-1, keepdim=True)) / (
        (x - x.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True) + 1e-6
    ).sqrt()
    assert torch.allclose(centred.functions["rms"](x), expected)
