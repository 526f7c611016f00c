"""The relations a property checks, each made for one input set (a :class:`Base`): the calls, and the judge
of their values. :data:`KINDS` names them; the first ones fit any graded name, the last ones are the
built-in spec's own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from attention_core.grading.properties.model import (
    Broken,
    Call,
    Part,
    argument,
    close,
    dtype_of,
    first_difference,
    fresh,
    replaced,
    results,
)
from attention_core.harness.checking import tolerance

LARGE = 100.0  # inputs multiplied by this for the large-input property
MOMENT_TOLERANCE = 1e-3  # layer norm's mean and variance, against 0 and 1


def deterministic(base, generator):
    again = Call(base.call.name, base.call.args, base.call.kwargs)  # another call object: made twice
    dtype = dtype_of(base)

    def judge(values):
        first, second = (results(v, base.returns) for v in values)
        for name in base.returns:
            if not close(second[name], first[name], dtype):
                return f"two calls with the same inputs gave different `{name}`"
        return None

    return Part((base.call, again), judge, base=base)


def batched(base, generator):
    """A batch gives what each of its entries gives alone (results compared on their first dimension).

    The batch is made along the leading axis the case's own inputs already have (3 dimensions or more),
    never by adding one: a function written for ``(B, H, T, D)`` is asked for ``(B, H, T, D)``. A batch of
    one grows to three entries; a larger one has its later entries made different. Inputs of two dimensions
    have no batch axis to use: no such property.
    """
    labels = [label for label in base.tokens if argument(base.call, label).ndim >= 3]
    sizes = {argument(base.call, label).shape[0] for label in labels}
    if not labels or len(sizes) != 1:
        return None
    changes = {}
    for label in labels:
        t = argument(base.call, label)
        if t.shape[0] >= 2:
            t = t.clone()
            t[1:] = fresh(t[1:], generator)
        else:
            t = torch.cat([t, fresh(t, generator), fresh(t, generator)])
        changes[label] = t
    whole = replaced(base.call, changes)
    size = next(iter(changes.values())).shape[0]
    items = [replaced(base.call, {label: t[i : i + 1] for label, t in changes.items()}) for i in range(size)]
    dtype = dtype_of(base)

    def judge(values):
        together = results(values[0], base.returns)
        for i, value in enumerate(values[1:]):
            alone = results(value, base.returns)
            for name in base.returns:
                t = together[name]
                if t.ndim == 0 or t.shape[0] != size:
                    continue
                if not close(t[i : i + 1], alone[name], dtype):
                    return (
                        f"entry {i} of a batch of {size} gave a different `{name}` from the same entry called "
                        f"alone (batch entries must not mix)"
                    )
        return None

    return Part((whole, *items), judge, base=base)


def _groups(base):
    """Token-count -> the token arguments of that length (dim -2); only arguments with two dims or more."""
    groups = {}
    for label in base.tokens:
        t = argument(base.call, label)
        if t.ndim >= 2:
            groups.setdefault(t.shape[-2], []).append(label)
    return groups


def causal(base, generator):
    """Changing the tokens after position t leaves every result's rows up to t alone."""
    groups = _groups(base)
    if len(groups) != 1:
        return None
    ((T, labels),) = groups.items()
    if T < 2:
        return None
    cuts = sorted({0, T // 2 - 1 if T > 2 else 0, T - 2})
    calls = []
    for t in cuts:
        changes = {}
        for label in labels:
            x = argument(base.call, label).clone()
            x[..., t + 1 :, :] = fresh(x[..., t + 1 :, :], generator)
            changes[label] = x
        calls.append(replaced(base.call, changes))
    dtype = dtype_of(base)

    def judge(values):
        plain = results(values[0], base.returns)
        for t, value in zip(cuts, values[1:]):
            changed = results(value, base.returns)
            for name in base.returns:
                a, b = changed[name], plain[name]
                if a.ndim < 2 or b.ndim < 2 or a.shape[-2] != T or b.shape[-2] != T:
                    continue
                where = first_difference(a[..., : t + 1, :], b[..., : t + 1, :], dtype)
                if where is not None:
                    position = where[-2] if len(where) >= 2 else "?"
                    later = f"after position {t}" if t < T - 2 else f"at position {T - 1}, the last"
                    return (
                        f"position {position} of `{name}` changed when only the tokens {later} changed "
                        f"(positions count from 0): a position must not see later tokens"
                    )
        return None

    return Part((base.call, *calls), judge, base=base)


def permutation(base, generator, both=True):
    """Permuting the tokens permutes the results the same way (each token length its own order)."""
    groups = _groups(base)
    if not groups or any(T < 2 for T in groups):
        return None
    orders = {T: torch.randperm(T, generator=generator) for T in groups}
    for T, order in orders.items():  # never the identity
        if bool((order == torch.arange(T)).all()):
            orders[T] = order.roll(1)
    changes = {label: argument(base.call, label)[..., orders[T], :] for T, labels in groups.items() for label in labels}
    moved = replaced(base.call, changes)
    dtype = dtype_of(base)

    def expected(t):
        dims = (-2, -1) if both else (-2,)
        for dim in dims:
            if t.ndim >= -dim and t.shape[dim] in orders:
                t = t.index_select(t.ndim + dim, orders[t.shape[dim]])
        return t

    def judge(values):
        plain, permuted = (results(v, base.returns) for v in values)
        for name in base.returns:
            if not close(permuted[name], expected(plain[name]), dtype):
                return f"permuting the input tokens did not permute `{name}` the same way"
        return None

    return Part((base.call, moved), judge, base=base)


def rows_only(base, generator):
    return permutation(base, generator, both=False)


def sums_to_one(base, generator):
    """One part per result: the reference keeps those of its results that are weights."""
    return [_sums_to_one(base, name) for name in base.returns]


def _sums_to_one(base, name):
    dtype = dtype_of(base)

    def judge(values):
        got = results(values[0], base.returns)
        if not got[name].is_floating_point() or got[name].ndim == 0:
            return f"`{name}` is not a floating tensor with rows"
        t = got[name].double()
        rows = t.reshape(-1, t.shape[-1])
        rows = rows[~rows.isnan().any(-1)]
        sums = rows.sum(-1)
        rtol, atol = tolerance.agreement_tolerance(dtype)
        bad = (sums - 1).abs() > atol + rtol
        if bool(bad.any()):
            return f"a row of `{name}` sums to {float(sums[bad][0]):.6g}, not 1"
        if bool((rows < -atol).any()):
            return f"`{name}` holds a negative weight ({float(rows.min()):.6g})"
        return None

    return Part((base.call,), judge, base=base)


def finite(base, generator):
    floating = [label for label in base.tokens if argument(base.call, label).is_floating_point()]
    if not floating:
        return None
    large = replaced(base.call, {label: argument(base.call, label) * LARGE for label in floating})

    def judge(values):
        got = results(values[0], base.returns)
        for name, t in got.items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                return (
                    f"with every input multiplied by {LARGE:g}, `{name}` holds inf or NaN (large scores "
                    f"overflow exp: subtract each row's maximum first; or a row has every score blocked, which a "
                    f"softmax turns into NaN: is the mask the right way round?)"
                )
        return None

    return Part((large,), judge, base=base)


# ---------------------------------------------------------------------------------- the built-in spec's own


def shift(base, generator):
    """softmax(x + c) == softmax(x) for a constant c per row; attention(q, k + u, v) == attention(q, k, v)."""
    dtype = dtype_of(base)
    if base.call.name == "softmax":
        x = base.call.args[0]
        moved = replaced(base.call, {0: x + fresh(x[..., :1], generator) * 10})
    else:
        k = base.call.args[1]
        moved = replaced(base.call, {1: k + fresh(k[..., :1, :], generator)})

    def judge(values):
        plain, shifted = (results(v, base.returns) for v in values)
        for name in base.returns:
            if not close(shifted[name], plain[name], dtype):
                return f"`{name}` changed when the same number was added to every score of a row"
        return None

    return Part((base.call, moved), judge, base=base)


def one_head(base, generator):
    """multi_head_attention(x, w_q, w_k, w_v, 1) == attention(x @ w_q, x @ w_k, x @ w_v)."""
    x, w_q, w_k, w_v = base.call.args[:4]
    mask = base.call.kwargs.get("mask")
    single = replaced(base.call, {4: 1})
    plain = Call("attention", (x @ w_q, x @ w_k, x @ w_v), {} if mask is None else {"mask": mask})
    dtype = dtype_of(base)

    def judge(values):
        mha, att = results(values[0], base.returns), results(values[1], ("output", "weights"))
        if not close(mha["output"], att["output"], dtype):
            return "with one head, `output` is not what your `attention` gives on the projections"
        weights, want = mha["weights"], att["weights"]
        if weights.numel() != want.numel() or not close(weights.reshape(want.shape), want, dtype):
            return "with one head, `weights` are not what your `attention` gives on the projections"
        return None

    return Part((single, plain), judge, base=base)


def split_merge(base, generator):
    """merge_heads(split_heads(x, h)) == x: the split made by the student's own split_heads."""
    x = base.call.args[0]
    dtype = dtype_of(base)

    def then(values):
        (split,) = results(values[0], ("out",)).values()
        if split.numel() != x.numel() or split.numel() > 4 * x.numel():
            raise Broken(f"split_heads returned shape {tuple(split.shape)} for an input of shape {tuple(x.shape)}")
        return (Call("merge_heads", (split,)),)

    def judge(values):
        merged = results(values[1], ("out",))["out"]
        if not close(merged, x, dtype):
            return "merge_heads(split_heads(x, n_heads)) did not give back x: the two must be each other's inverse"
        return None

    return Part((base.call,), judge, then=then, base=base, later=("merge_heads",))


def constant(base, generator):
    """The causal average of a sequence whose tokens are all the same is that sequence."""
    x = base.call.args[0]
    same = x[..., :1, :].expand(x.shape).contiguous()
    dtype = dtype_of(base)

    def judge(values):
        got = results(values[0], base.returns)["out"]
        if not close(got, same, dtype):
            return "the average of tokens that are all the same is not that token"
        return None

    return Part((replaced(base.call, {0: same}),), judge, base=base)


def moments(base, generator):
    """Every row of layer_norm's output has mean 0 and biased variance 1 (less what eps takes)."""
    x = base.call.args[0].double()
    eps = base.call.args[1] if len(base.call.args) > 1 else base.call.kwargs.get("eps", 1e-5)
    want = x.var(-1, unbiased=False) / (x.var(-1, unbiased=False) + eps)

    def judge(values):
        got = results(values[0], base.returns)["out"].double()
        mean, var = got.mean(-1), got.var(-1, unbiased=False)
        if bool(((mean).abs() > MOMENT_TOLERANCE).any()):
            return f"a row of the output has mean {float(mean.flatten()[(mean.abs() > MOMENT_TOLERANCE).flatten()][0]):.4g}, not 0"
        off = (var - want).abs() > MOMENT_TOLERANCE
        if bool(off.any()):
            return (
                f"a row of the output has variance {float(var.flatten()[off.flatten()][0]):.4g}, not 1 (the "
                f"biased variance, divided by n, not n - 1)"
            )
        return None

    return Part((base.call,), judge, base=base)


@dataclass(frozen=True)
class Kind:
    """A kind of property: what a student reads, and how it is made for an input set."""

    title: str
    make: Callable
    builtin_only: bool = False


KINDS = {
    "rows_sum_to_one": Kind("each row of the weights sums to 1, with no negative weight", sums_to_one),
    "causal": Kind(
        "a position's output does not change when later tokens change (nothing leaks from the future)", causal
    ),
    "permutation": Kind("permuting the tokens (no mask) permutes the output the same way", permutation),
    "permutation_rows": Kind("permuting the tokens permutes the output the same way", rows_only),
    "shift": Kind("adding the same number to every score of a row changes nothing (softmax ignores it)", shift, True),
    "one_head": Kind("with one head, multi-head attention is plain attention on the projections", one_head, True),
    "split_merge": Kind("merging the heads that split_heads made gives back its input", split_merge, True),
    "constant": Kind("the causal average of tokens that are all the same is that token", constant, True),
    "moments": Kind("each row of the output has mean 0 and variance 1", moments, True),
    "batched": Kind("a batch gives what each of its entries gives alone", batched),
    "large_inputs": Kind("large inputs still give finite results, no inf or NaN", finite),
    "deterministic": Kind("the same call twice gives the same result (nothing random is left on)", deterministic),
}
GENERIC = tuple(k for k, kind in KINDS.items() if not kind.builtin_only)
