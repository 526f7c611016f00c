"""Seeded streams: each draw equals the torch call it stands for after torch.manual_seed."""

import re

import pytest
import torch
from torch import nn

from attention_core.harness.languages.draws import check_spec, draw


def _stream(seed, *draws_):
    generator = torch.Generator().manual_seed(seed)
    return [draw(kind, check_spec(kind, args), generator, torch.float32) for kind, args in draws_]


def test_randn_matches_manual_seed_and_the_documents_first_value():
    (x,) = _stream(42, ("randn", [4, 8, 2]))
    torch.manual_seed(42)
    assert torch.equal(x, torch.randn(4, 8, 2))
    # Document 000 prints x[0, 0] = [1.9269, 1.4873].
    torch.testing.assert_close(x[0, 0], torch.tensor([1.9269, 1.4873]), atol=5e-5, rtol=0)


def test_randint_matches_manual_seed():
    (b,) = _stream(42, ("randint", {"low": 0, "high": 10, "size": [8, 2]}))
    torch.manual_seed(42)
    assert torch.equal(b, torch.randint(0, 10, (8, 2)))
    assert b.dtype == torch.int64
    # Document 000 prints b = [[2., 7.], [6., 4.], ...] after the same seed.
    assert b[:2].tolist() == [[2, 7], [6, 4]]


def test_rand_follows_the_previous_draw_in_one_stream():
    rand_a, rand_b = _stream(7, ("rand", [3, 4]), ("rand", [2]))
    torch.manual_seed(7)
    assert torch.equal(rand_a, torch.rand(3, 4))
    assert torch.equal(rand_b, torch.rand(2))


def test_linear_draws_equal_nn_linear_init_weight_then_bias_in_order():
    key, query, value = _stream(
        3, ("linear", [2, 3]), ("linear", [2, 3]), ("linear", {"in_features": 2, "out_features": 3})
    )
    torch.manual_seed(3)
    modules = [nn.Linear(2, 3), nn.Linear(2, 3), nn.Linear(2, 3)]
    for drawn, module in zip((key, query, value), modules):
        assert torch.equal(drawn.weight, module.weight.detach())
        assert torch.equal(drawn.bias, module.bias.detach())


def test_linear_without_bias_draws_only_the_weight():
    first, second = _stream(
        5, ("linear", {"in_features": 32, "out_features": 16, "bias": False}), ("linear", [32, 16, False])
    )
    torch.manual_seed(5)
    a, b = nn.Linear(32, 16, bias=False), nn.Linear(32, 16, bias=False)
    assert first.bias is None
    assert torch.equal(first.weight, a.weight.detach()) and torch.equal(second.weight, b.weight.detach())


def test_embedding_then_rand_reproduces_document_004s_stream():
    embed, w_q = _stream(123, ("embedding", [22, 64]), ("rand", [64, 32]))
    torch.manual_seed(123)
    module = nn.Embedding(22, 64)
    assert torch.equal(embed, module.weight.detach())
    assert torch.equal(w_q, torch.rand(64, 32))
    # Document 004 prints W_Q[0, :3] = [0.0605, 0.2699, 0.3683] and the embedding's [0, :3] for word 10.
    torch.testing.assert_close(w_q[0, :3], torch.tensor([0.0605, 0.2699, 0.3683]), atol=5e-5, rtol=0)


def test_draws_in_float64_differ_from_float32():
    generator = torch.Generator().manual_seed(42)
    as64 = draw("randn", {"size": (4, 8, 2)}, generator, torch.float64)
    (as32,) = _stream(42, ("randn", [4, 8, 2]))
    assert not torch.allclose(as64, as32.double(), atol=1e-3)


@pytest.mark.parametrize(
    ("kind", "args", "message"),
    [
        ("randn", [4, "8"], "size must be a list of whole numbers"),
        ("randn", 4, "size must be a list"),
        ("randint", [0, 10], "randint takes [low, high, size]"),
        ("randint", [10, 0, [2]], "low (10) must be below high (0)"),
        ("linear", {"in_features": 2}, "missing: out_features"),
        ("linear", {"in_features": 2, "out_features": 3, "bais": True}, "unknown: bais"),
        ("linear", [2, 3, "yes"], "bias must be true or false"),
        ("embedding", [22, -1], "embedding_dim must be a whole number"),
        ("rand", [100000, 100000], "more than 2**26 elements"),
    ],
)
def test_bad_draw_arguments_are_refused_with_the_reason(kind, args, message):
    with pytest.raises(ValueError) as err:
        check_spec(kind, args)
    assert message in str(err.value)


@pytest.mark.parametrize(("seed", "p", "shape"), [(123, 0.5, [6, 6]), (0, 0.1, [3, 5]), (7, 0.9, [2, 3, 4])])
def test_a_dropout_keep_mask_is_what_nn_dropout_draws(seed, p, shape):
    (keep,) = _stream(seed, ("dropout", {"p": p, "shape": shape}))
    torch.manual_seed(seed)
    dropped = nn.Dropout(p)(torch.ones(shape))  # a module is in training mode when made
    assert keep.dtype == torch.float32 and set(keep.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(keep / (1 - p), dropped)


def test_the_dropout_draw_reproduces_the_tutorials_print_and_continues_the_stream():
    keep, after = _stream(123, ("dropout", {"p": 0.5, "shape": [6, 6]}), ("rand", [2]))
    # nn.Dropout(0.5) applied to torch.ones(6, 6) after torch.manual_seed(123), as printed by torch 2.x.
    torch.manual_seed(123)
    printed = nn.Dropout(0.5)(torch.ones(6, 6))
    assert (keep * 2).tolist() == printed.tolist()
    assert torch.equal(after, torch.rand(2))  # the draw takes from the stream exactly what dropout takes


def test_a_case_with_a_dropout_draw_checks_nn_dropouts_output(tmp_path):
    from attention_core.harness.checking import runner  # noqa: PLC0415

    torch.manual_seed(123)
    printed = str(nn.Dropout(0.5)(torch.ones(6, 6)))
    (tmp_path / "dropout.yaml").write_text(
        "document: {title: Dropout}\ncases:\n  - id: dropout\n    seed: 123\n"
        "    inputs: {keep: {dropout: {p: 0.5, shape: [6, 6]}}}\n"
        "    checks:\n      - id: dropped\n        expr: ones(6, 6) * keep / (1 - 0.5)\n        expect:\n"
        "          out: |\n" + "".join(f"            {line}\n" for line in printed.split("\n")),
        encoding="utf-8",
    )
    (item,) = runner.collect(tmp_path)
    assert runner.run(item).passed, runner.run(item).report


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"p": 1, "shape": [2]}, "dropout: p must be a number from 0 to below 1"),
        ({"p": 0.5}, "dropout takes a mapping {p: 0.5, shape: [6, 6]} (p and shape), got p"),
        ({"p": 0.5, "shape": [-1]}, "dropout: size must be a list of whole numbers"),
    ],
)
def test_bad_dropout_arguments_say_what_to_write(args, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_spec("dropout", args)


def test_a_draw_s_own_seed_seeds_the_stream_again_there_as_manual_seed_does(tmp_path):
    """A tutorial that seeds again before a draw (Raschka's 123 before the inputs, then before the weights):
    that draw and the later ones come from the new stream; with neither the case's seed nor one before it, a draw
    is refused at its line."""
    from attention_core.harness.checking import inputs  # noqa: PLC0415
    from attention_core.harness.reading.cases import load_file  # noqa: PLC0415

    (tmp_path / "s.yaml").write_text(
        "document: {title: T}\ncases:\n  - id: c\n    inputs:\n      x: {rand: [6, 3], seed: 123}\n"
        "      w_query: {rand: [3, 2], seed: 123}\n      w_key: {rand: [3, 2]}\n"
        "    checks:\n      - id: k\n        expr: x\n        expect: {out: {oracle: x}}\n",
        encoding="utf-8",
    )
    loaded = load_file(tmp_path / "s.yaml")
    assert loaded.errors == ()
    made = inputs.materialise(loaded.cases[0])
    torch.manual_seed(123)
    x = torch.rand(6, 3)
    torch.manual_seed(123)
    w_query, w_key = torch.rand(3, 2), torch.rand(3, 2)
    assert torch.equal(made["x"], x) and torch.equal(made["w_query"], w_query) and torch.equal(made["w_key"], w_key)
    (tmp_path / "s.yaml").write_text(
        (tmp_path / "s.yaml").read_text().replace("x: {rand: [6, 3], seed: 123}", "x: {rand: [6, 3]}"),
        encoding="utf-8",
    )
    (error,) = load_file(tmp_path / "s.yaml").errors
    assert "s.yaml:5:" in str(error) and "the case has no 'seed' (give the case one, or this draw its own" in str(error)
