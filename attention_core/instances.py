"""Instances of a graded ``nn.Module`` class, made the same way on both sides of the grader.

A case's ``call: CausalAttention(3, 2, 6, 0.0)(batch)`` makes an instance with the first
parentheses and calls it with the second. The reference's instance is drawn from the case's
seeded stream (as a notebook's ``torch.manual_seed(123)`` then ``CausalAttention(...)``); an
implementation's instance is made with the same arguments and then given the reference's
parameters and buffers by ``state_dict`` name, so the order in which it makes its layers never
matters. Imports only torch and the standard library: the grading worker loads this file by path.
"""

from types import SimpleNamespace

import torch

INSTANCE = "instance"  # the key of the record that stands first in a class call's arguments


class StateMismatch(Exception):
    """An implementation's instance whose parameter or buffer names or shapes are not the reference's."""


def instance_record(init_args, init_kwargs, state, mode, dtype, buffers=(), rng=None):
    """What an implementation needs to make its instance and call it: a plain dict (it crosses the wire).
    ``buffers``: the names in ``state`` that are buffers, not parameters; ``rng``: the generator state the
    call starts from (the case's stream after the reference made its instance), so that a module in train
    mode draws its dropout as the notebook did."""
    return {
        INSTANCE: {
            "args": list(init_args),
            "kwargs": dict(init_kwargs),
            "state": dict(state),
            "mode": mode,
            "dtype": str(dtype).removeprefix("torch."),
            "buffers": sorted(buffers),
            "rng": rng,
        }
    }


def call(instance, record, args, kwargs):
    """``instance(*args, **kwargs)``, its random draws (dropout) from the record's generator state, if any;
    the caller's own generator is left as it was."""
    rng = record[INSTANCE].get("rng")
    if rng is None:
        return instance(*args, **kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.set_state(rng)
        return instance(*args, **kwargs)


def buffer_names(instance):
    """The state_dict names of an instance's buffers (the rest of its state is parameters)."""
    return [name for name, _ in instance.named_buffers() if name in instance.state_dict()]


def is_record(value):
    return isinstance(value, dict) and set(value) == {INSTANCE} and isinstance(value[INSTANCE], dict)


def reference_instance(cls, init_args, init_kwargs, *, rng_state, dtype, device="cpu", mode="eval"):
    """(the reference's instance, the generator state after it): made from the generator state ``rng_state``
    (the case's stream after its inputs), its floating parameters and buffers then cast to ``dtype``, on
    ``device``, in ``mode``."""
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.set_state(rng_state)
        instance = cls(*init_args, **init_kwargs)
        after = torch.random.default_generator.get_state()
    return _placed(instance, dtype, device, mode), after


def implementation_instance(cls, record, device="cpu"):
    """An implementation's instance of ``cls`` holding the reference's state (``record``, from
    :func:`instance_record`); raises :class:`StateMismatch` naming what differs."""
    spec = record[INSTANCE]
    with torch.random.fork_rng(devices=[]):  # its own initial draws are replaced, and must not move ours
        instance = cls(*spec["args"], **spec["kwargs"])
    if not isinstance(instance, torch.nn.Module):
        raise StateMismatch(f"{cls.__name__}(...) made a {type(instance).__name__}, not an nn.Module")
    instance = _placed(instance, getattr(torch, spec["dtype"]), device, spec["mode"])
    load_state(instance, spec["state"], cls.__name__, spec.get("buffers", ()))
    return instance


def load_state(instance, state, name, buffers=()):
    """Copy the parameters of ``state`` (name -> tensor) into ``instance``; raise :class:`StateMismatch` where
    their names or shapes differ from the instance's parameters.

    Parameters must match by name and shape: they are what the reference drew. Buffers (``buffers`` names
    them in ``state``; a causal mask, say) are the implementation's own: it made them from the same
    arguments, and a mask it keeps otherwise (on the fly, under another name, True where blocked) is as
    right as the reference's, while a wrong one must show. A buffer the reference draws at random is not
    reproduced: such a class keeps it as a parameter, or the case fixes it otherwise."""
    buffers = set(buffers)
    state = {k: v for k, v in state.items() if k not in buffers}
    own = dict(instance.named_parameters(remove_duplicate=False))
    missing = [k for k in state if k not in own]
    extra = [k for k in own if k not in state]
    shapes = [k for k in state if k in own and tuple(own[k].shape) != tuple(state[k].shape)]
    if missing or extra or shapes:
        parts = []
        if missing:
            parts.append(f"your {name} has no {_listed(missing, most=2)}")
        if extra:
            parts.append(
                f"it has {_listed(extra, own, most=2)} {'instead' if missing else 'that the reference does not'}"
            )
        if shapes:
            parts.append(
                "; ".join(
                    f"your `{k}` is {tuple(own[k].shape)} where the reference's is {tuple(state[k].shape)}"
                    for k in shapes[:4]
                )
            )
        reference = ", ".join(f"`{k}` {tuple(v.shape)}" for k, v in list(state.items())[:8])
        has = f"; the reference has {reference or 'no parameters'}" + (", ..." if len(state) > 8 else "")
        said = "; ".join(parts)
        # A student reads the first 200 characters: the reference's own list goes where it would not fit (what
        # is missing names the reference's parameters already).
        if missing and len(said + has) > 150:
            has = ""
        raise StateMismatch(said + has + " (parameters are matched by name)")
    with torch.no_grad():
        for key, value in state.items():
            own[key].copy_(value)


def _listed(keys, own=None, most=4):
    shown = ", ".join(f"`{k}`" + (f" {tuple(own[k].shape)}" if own is not None else "") for k in keys[:most])
    return shown + (f" and {len(keys) - most} more" if len(keys) > most else "")


def _placed(instance, dtype, device, mode):
    if isinstance(instance, torch.nn.Module):
        instance = instance.to(device=device, dtype=dtype)
        instance.train(mode == "train")
    return instance


def parameters(instance):
    """(state_dict name, tensor) of an instance's trainable floating parameters, in their order (a frozen one,
    ``requires_grad=False``, has no gradient to check)."""
    return [(name, p) for name, p in instance.named_parameters() if p.is_floating_point() and p.requires_grad]


def state_record(state):
    """A module's state (``state_dict`` names -> tensors) as records an expression reads: ``self.key.weight``;
    the members of an ``nn.ModuleList`` or ``nn.Sequential`` by position, ``self.heads[0].W_key.weight``."""
    tree: dict = {}
    for name, value in state.items():
        node, *path, last = [tree, *name.split(".")]  # type: ignore[misc]  # a dict, then the name's parts
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return _record(tree)


def _record(node):
    if not isinstance(node, dict):
        return node
    if node and all(key.isdigit() for key in node):  # a list of modules: indexed, in order
        return tuple(_record(node.get(str(i))) for i in range(max(map(int, node)) + 1))
    return SimpleNamespace(**{key: _record(value) for key, value in node.items()})
