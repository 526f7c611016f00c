"""General mutation operators: the slips a student makes in any code, not only in attention's.

Each is made at every place of a reference where it can be, one at a time, beside the attention-specific
slips of ``slips.py`` (which come first: where both make the same change, the more specific sentence is
kept). Each kind has its own sentence in a student's terms: the operator, the torch function or graded
name involved, never the reference's line, constant or variable.

* a comparison off by one (``<`` and ``<=``, ``>`` and ``>=``);
* a range's start or step changed (from 0 or from 1; by 1 or by 2);
* two sub-expressions of one kind swapped: two layers, two arguments of a call, the two pieces of a
  ``cat``, the two sides of a subtraction;
* an operation applied to one more, or one fewer, of the sibling tensors it is applied to (a rotation
  also applied to the values);
* a term dropped: the residual (skip) connection, a bias, an added or subtracted term;
* a constant moved across a function (``sqrt(v) + eps`` for ``sqrt(v + eps)``, and back);
* look-alike calls: ``repeat`` and ``repeat_interleave``, ``softmax`` and ``log_softmax``, ``sum`` and
  ``mean``, ``sin`` and ``cos``, the exact GELU and its tanh approximation, SiLU and the sigmoid;
* a sign or an absolute value left out; a module's parameter never used (``y`` for ``y * self.weight``).
"""

from __future__ import annotations

import ast
import collections

from attention_core.grading.naming.slips import (
    Slip,
    _argument,
    _literal,
    _name,
    _number,
    _self_attribute,
    _with_argument,
    tree_copy,
)

TORCH_MODULES = ("torch", "F", "functional", "nn", "math", "np", "numpy")

_FLIPPED = {
    ast.Lt: (ast.LtE, "<", "<="),
    ast.LtE: (ast.Lt, "<=", "<"),
    ast.Gt: (ast.GtE, ">", ">="),
    ast.GtE: (ast.Gt, ">=", ">"),
}

LOOK_ALIKE = {  # a call's name -> (the name put in its place, the sentence, the fix)
    "repeat_interleave": (
        "repeat",
        "`repeat` where `repeat_interleave` belongs: the copies come as whole blocks "
        "(a b a b) instead of each one in turn (a a b b)",
        "Use repeat_interleave, which repeats each entry in turn (a a b b).",
    ),
    "repeat": (
        "repeat_interleave",
        "`repeat_interleave` where `repeat` belongs: each entry is repeated in turn "
        "(a a b b) instead of the whole block (a b a b)",
        "Use repeat, which tiles the whole block (a b a b).",
    ),
    "log_softmax": ("softmax", "`softmax` where `log_softmax` belongs", "Take the log_softmax there."),
    "softmax": (
        "log_softmax",
        "`log_softmax` where `softmax` belongs: the weights are log-probabilities, not probabilities that sum to 1",
        "Take the softmax there, not its logarithm.",
    ),
    "sum": (
        "mean",
        "`mean` where `sum` belongs: the total is divided by the count",
        "Sum there: no division by the number of entries.",
    ),
    "mean": (
        "sum",
        "`sum` where `mean` belongs: the total is not divided by the number of entries",
        "Take the mean there (the sum divided by the number of entries).",
    ),
    "sin": (
        "cos",
        "the sine and the cosine are in each other's place",
        "Use the sine where the formula has it, the cosine where it has the cosine.",
    ),
    "cos": (
        "sin",
        "the sine and the cosine are in each other's place",
        "Use the sine where the formula has it, the cosine where it has the cosine.",
    ),
    "gelu": ("relu", "`relu` where GELU belongs", "Use GELU there (F.gelu), not ReLU."),
    "relu": ("gelu", "`gelu` where ReLU belongs", "Use ReLU there (F.relu), not GELU."),
    "silu": (
        "sigmoid",
        "`sigmoid` where SiLU belongs: the gate is sigmoid(x), not x * sigmoid(x)",
        "Use SiLU (x * sigmoid(x)), e.g. F.silu.",
    ),
}
# More than one look-alike of a call: each is tried (GEGLU written as SwiGLU, and the other way).
MORE_LOOK_ALIKE = {
    "gelu": [("silu", "`silu` where GELU belongs (SwiGLU's gate where GEGLU's belongs)", "Use GELU there (F.gelu).")],
    "silu": [("gelu", "`gelu` where SiLU belongs (GEGLU's gate where SwiGLU's belongs)", "Use SiLU there (F.silu).")],
}

# The usual activations, each tried where another of them is written (relu for silu in a SwiGLU, tanh for a
# sigmoid gate): how a student reads its name, and its call. A layer made in ``__init__`` (``nn.GELU()``) too.
ACTIVATIONS = {
    "relu": ("ReLU", "F.relu"),
    "gelu": ("GELU", "F.gelu"),
    "silu": ("SiLU", "F.silu"),
    "sigmoid": ("the sigmoid", "torch.sigmoid"),
    "tanh": ("tanh", "torch.tanh"),
}
ACTIVATION_LAYERS = {"ReLU": "relu", "GELU": "gelu", "SiLU": "silu", "Sigmoid": "sigmoid", "Tanh": "tanh"}
_FUNCTIONAL = ("F", "functional", "torch.nn.functional", "nn.functional")


def operators(node, owner_names=(), norms=frozenset()):
    """The general slips that can be made at ``node``; ``owner_names``: the graded names (a student's terms);
    ``norms``: the layers of its class that normalise (``self.ln1 = nn.LayerNorm(d)``)."""
    found = []
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIPPED:
        flipped, was, now = _FLIPPED[type(node.ops[0])]
        found.append(
            Slip(
                "comparison_boundary",
                f"a comparison is off by one: `{now}` where `{was}` belongs, so the "
                f"element on the boundary falls on the wrong side",
                f"Compare with `{was}` there: decide which side the boundary element belongs to (i == j, "
                f"or the window's edge).",
                ast.Compare(node.left, [flipped()], node.comparators),
            )
        )
    if isinstance(node, ast.Call):
        name = _name(node)
        found += _ranges(node, name) + _swapped_arguments(node, name, owner_names) + _look_alike(node, name)
        found += _constant_moved_in(node, name) + _variance_of_squares(node, name) + _norm_order(node, norms)
        found += _axes_reordered(node, name) + _fixed_axis(node, name) + _call_left_out(node, name)
        found += (
            _product_moved_out_of_layer(node) + _argument_left_out(node, owner_names) + _layers_nested_swapped(node)
        )
        if name == "abs" and len(node.args) == 1 and not node.keywords:
            found.append(
                Slip(
                    "abs_missing",
                    "the absolute value is left out",
                    "Take the absolute value there (abs).",
                    node.args[0],
                )
            )
    if isinstance(node, ast.BinOp):
        found += _dropped_terms(node) + _constant_moved_out(node) + _layers_swapped(node) + _one_off(node)
        found += _factor_unused(node) + _division_missing(node) + _multiplied_for_divided(node)
        if isinstance(node.op, ast.Sub) and not _constant(node.left) and not _constant(node.right):
            found.append(
                Slip(
                    "subtraction_swapped",
                    "the two sides of a subtraction are swapped (b - a where a - b belongs): its sign is flipped",
                    "Subtract in the order of the formula.",
                    ast.BinOp(node.right, ast.Sub(), node.left),
                )
            )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and not _constant(node.operand):
        found.append(
            Slip(
                "sign_missing",
                "a minus sign is left out (x where -x belongs)",
                "Negate there, as the formula does.",
                node.operand,
            )
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        found += _norm_order_back(node, norms)
    if isinstance(node, ast.Assign):
        found += _unpacked_in_another_order(node)
    if isinstance(getattr(node, "body", None), list) and node.body and isinstance(node.body[0], ast.stmt):
        found += _siblings(node, owner_names) + _pre_norm(node, norms) + _post_norm(node, norms)
        found += _chained_layers_swapped(node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":  # (what it computes)
        found += _parameter_swapped(node) + _parameter_swapped_once(node) + _size_swapped(node) + _centred(node)
        found += _pairs_swapped(node)
        found += _layer_input_swapped(node) + _layer_reused(node) + _residual_added(node) + _returned_as(node)
    return found


# Calls that map a tensor to one of its own shape, element by element or along an axis: left out, the tensor
# itself is used (a gate without its sigmoid, a feature map without its activation).
LEFT_OUT_CALLS = frozenset({"sigmoid", "tanh", "relu", "gelu", "silu", "elu", "softplus", "exp", "normalize"})


def _call_left_out(node, name):
    """``sigmoid(x)`` (or ``x.sigmoid()``) as ``x``: the step left out, its input used as it is."""
    if name not in LEFT_OUT_CALLS:
        return []
    if node.args and not isinstance(node.args[0], ast.Starred):
        operand = node.args[0]
    elif not node.args and isinstance(node.func, ast.Attribute) and not _torch_module(node.func.value):
        operand = node.func.value  # x.sigmoid()
    else:
        return []
    return [
        Slip(
            "call_left_out",
            f"`{name}` is left out: its input is used as it is (x where {name}(x) belongs)",
            f"Apply `{name}` there, as the formula does.",
            operand,
        )
    ]


def _torch_module(node):
    return isinstance(node, ast.Name) and node.id in TORCH_MODULES or isinstance(node, ast.Attribute)


def _product_moved_out_of_layer(node):
    """``self.layer(a * b)`` as ``self.layer(a) * b`` (and ``* a``): a product (a gate, a scale) taken after the
    layer where it belongs before it."""
    layer = _layer_call(node)
    inner = node.args[0] if layer else None
    if not (isinstance(inner, ast.BinOp) and isinstance(inner.op, (ast.Mult, ast.Div))):
        return []
    found = []
    for kept, moved in ((inner.left, inner.right), (inner.right, inner.left)):
        if isinstance(inner.op, ast.Div) and moved is inner.left:
            continue
        call = ast.Call(tree_copy(node.func), [tree_copy(kept)], [])
        found.append(
            Slip(
                "product_after_layer",
                f"a {'product' if isinstance(inner.op, ast.Mult) else 'division'} is taken after `{layer}` where it "
                f"belongs before it, inside the layer's input",
                f"Multiply (or divide) before `{layer}`: pass the product to the layer, as the formula does.",
                ast.BinOp(call, tree_copy(inner.op), tree_copy(moved)),
            )
        )
    return found


def _parameter_swapped_once(function):
    """One read of one of the function's parameters as another of them (the queries made from ``x`` where
    ``latents`` belongs), where the parameter is read more than once (read once: :func:`_parameter_swapped`)."""
    params = _parameters(function)
    reads = [
        (i, n.id)
        for i, n in enumerate(ast.walk(function))
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in params
    ]
    counts = collections.Counter(name for _, name in reads)
    found = []
    for index, param in reads:
        if counts[param] < 2:
            continue
        for other in params:
            if other == param or other not in counts:
                continue
            changed = tree_copy(function)
            _at(changed, index).id = other
            found.append(_used_for(other, param, changed))
    return found


def _constant(node):
    return _number(node) is not None or isinstance(node, ast.Constant)


def _shown(name, owner_names):
    """A call's function as a student knows it: a torch function or a graded name; else None."""
    return name if name and not name.startswith("_") else None


def _ranges(node, name):
    if (
        name not in ("range", "arange")
        or any(k.arg not in ("dtype", "device") for k in node.keywords)
        or not 1 <= len(node.args) <= 3
    ):
        return []
    found = []
    if len(node.args) == 1:
        end = node.args[0]
        changed = ast.Call(node.func, [ast.Constant(1), ast.BinOp(end, ast.Add(), ast.Constant(1))], [])
        found.append(
            Slip(
                "range_start",
                "a range counts from 1 instead of from 0: every index it makes is one too large",
                "Count from 0 (range(n) gives 0 .. n - 1).",
                changed,
            )
        )
    else:
        start = _number(node.args[0])
        for by, words in ((1, "late: every index one too large"), (-1, "early: every index one too small")):
            if start is None or start + by < 0:
                continue
            changed = tree_copy(node)
            changed.args[0] = _shifted(node.args[0], by)
            changed.args[1] = _shifted(node.args[1], by)
            found.append(
                Slip(
                    "range_shifted",
                    f"a range starts one too {words}",
                    "Start and end the range where the formula does.",
                    changed,
                )
            )
    if len(node.args) == 3 and _number(node.args[2]) in (1, 2):
        step = _number(node.args[2])
        changed = tree_copy(node)
        changed.args[2] = ast.Constant(3 - step)
        found.append(
            Slip(
                "range_step",
                f"a range steps by {3 - step} instead of by {step}"
                + (
                    ": every index where every other one belongs"
                    if step == 2
                    else ": every other index where every one belongs"
                ),
                "Step through the range as the formula does.",
                changed,
            )
        )
    return found


def _shifted(node, by):
    """``node + by`` (``n + 1 - 1`` written ``n``)."""
    value = _number(node)
    if value is not None:
        return ast.Constant(value + by)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)) and _number(node.right) is not None:
        total = _number(node.right) * (1 if isinstance(node.op, ast.Add) else -1) + by
        return (
            node.left
            if total == 0
            else ast.BinOp(node.left, ast.Add() if total > 0 else ast.Sub(), ast.Constant(abs(total)))
        )
    return ast.BinOp(node, ast.Add() if by > 0 else ast.Sub(), ast.Constant(abs(by)))


def _swapped_arguments(node, name, owner_names):
    found = []
    shown = _shown(name, owner_names)
    arguments = [(i, a) for i, a in enumerate(node.args) if not _constant(a) and not isinstance(a, ast.Starred)]
    if shown and not _self_attribute(node.func) and len(arguments) >= 2:
        for (i, a), (j, b) in zip(arguments, arguments[1:]):
            if ast.unparse(a) == ast.unparse(b):
                continue
            changed = tree_copy(node)
            changed.args[i], changed.args[j] = tree_copy(b), tree_copy(a)
            found.append(
                Slip(
                    "arguments_swapped",
                    f"two arguments of `{shown}` are in each other's place (its arguments {i + 1} and {j + 1} swapped)",
                    f"Pass `{shown}` its arguments in the order it takes them.",
                    changed,
                )
            )
    if (
        name in ("cat", "concat", "concatenate", "stack")
        and node.args
        and isinstance(node.args[0], (ast.Tuple, ast.List))
        and len(node.args[0].elts) == 2
    ):
        changed = tree_copy(node)
        changed.args[0].elts.reverse()
        found.append(
            Slip(
                "pieces_swapped",
                f"the two pieces given to `{name}` are in each other's place (the halves swapped)",
                "Put the pieces in the order of the formula.",
                changed,
            )
        )
        negated = [isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.USub) for p in node.args[0].elts]
        if sum(negated) == 1:  # RoPE's rotate_half, cat((-x2, x1)), written cat((x2, -x1)): it turns the other way
            changed = tree_copy(node)
            pieces, at = changed.args[0].elts, negated.index(True)
            pieces[at], pieces[1 - at] = pieces[at].operand, ast.UnaryOp(ast.USub(), pieces[1 - at])
            found.append(
                Slip(
                    "sign_moved",
                    f"the minus sign is on the other piece given to `{name}` (a, -b where -a, b belongs): a rotation "
                    f"built from it turns the other way",
                    "Negate the piece the formula negates.",
                    changed,
                )
            )
    return found


def _tiled(node):
    """``x.repeat_interleave(r, dim=d)`` as ``torch.cat([x] * r, dim=d)``: the tiling a ``repeat`` along that one
    dimension makes (``repeat`` itself takes a count per dimension); None where its form is another."""
    receiver = node.func.value if isinstance(node.func, ast.Attribute) and _name(node.func.value) != "torch" else None
    args = list(node.args)
    tensor = receiver if receiver is not None else (args.pop(0) if args else None)
    dims = [k.value for k in node.keywords if k.arg == "dim"]
    count = args[0] if args else next((k.value for k in node.keywords if k.arg == "repeats"), None)
    dim = dims[0] if dims else (args[1] if len(args) > 1 else None)
    if tensor is None or count is None or dim is None:
        return None
    pieces = ast.BinOp(ast.List([tensor], ast.Load()), ast.Mult(), count)
    return ast.Call(
        ast.Attribute(ast.Name("torch", ast.Load()), "cat", ast.Load()), [pieces], [ast.keyword("dim", dim)]
    )


def _look_alike(node, name):
    found = []
    if name == "repeat_interleave":
        tiled = _tiled(node)
        if tiled is not None:
            _, mistake, fix = LOOK_ALIKE[name]
            found.append(Slip("repeat_interleave_for_repeat", mistake, fix, tiled))
        return found
    alikes = ([LOOK_ALIKE[name]] if name in LOOK_ALIKE else []) + MORE_LOOK_ALIKE.get(name, [])
    for other, mistake, fix in alikes if isinstance(node.func, (ast.Attribute, ast.Name)) else ():
        changed = tree_copy(node)
        if isinstance(changed.func, ast.Attribute):
            changed.func.attr = other
        else:
            changed.func.id = other
        kind = "sin_cos_swapped" if name in ("sin", "cos") else f"{name}_for_{other}"  # (both at once: one mistake)
        found.append(Slip(kind, mistake, fix, changed))
    found += _other_activations(node, name, {other for other, _, _ in alikes})
    if name == "gelu":
        approximate = next((k for k in node.keywords if k.arg == "approximate"), None)
        changed = tree_copy(node)
        if approximate is None:
            changed.keywords.append(ast.keyword("approximate", ast.Constant("tanh")))
            found.append(
                Slip(
                    "gelu_approximated",
                    "the tanh approximation of GELU where the exact GELU belongs",
                    "Use the exact GELU (F.gelu(x), approximate='none').",
                    changed,
                )
            )
        else:
            changed.keywords = [k for k in changed.keywords if k.arg != "approximate"]
            found.append(
                Slip(
                    "gelu_exact",
                    "the exact GELU where its tanh approximation belongs",
                    "Use GELU's tanh approximation (approximate='tanh').",
                    changed,
                )
            )
    return found


def _other_activations(node, name, covered):
    """Each usual activation where the one written belongs (``covered``: those the look-alikes already try), as a
    function (``F.silu(x)``), a method (``x.sigmoid()``) or a layer made in ``__init__`` (``nn.GELU()``)."""
    own = ACTIVATION_LAYERS.get(name, name)
    if own not in ACTIVATIONS or not isinstance(node.func, (ast.Attribute, ast.Name)):
        return []
    given = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "input"), None)
    if name in ACTIVATION_LAYERS:
        operand = None
    elif given is not None:
        operand = given  # F.silu(x), F.silu(input=x)
    elif isinstance(node.func, ast.Attribute) and not node.keywords:
        operand = node.func.value  # x.sigmoid()
    else:
        return []
    title, call = ACTIVATIONS[own]
    found = []
    for other, (other_title, _) in ACTIVATIONS.items():
        if other in (own, *covered):
            continue
        if operand is None:  # the layer: nn.GELU() -> nn.SiLU()
            changed = tree_copy(node)
            changed.args, changed.keywords = [], []
            layer = next(k for k, v in ACTIVATION_LAYERS.items() if v == other)
            if isinstance(changed.func, ast.Attribute):
                changed.func.attr = layer
            else:
                changed.func.id = layer
        elif given is not None and isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) in _FUNCTIONAL:
            changed = ast.Call(ast.Attribute(tree_copy(node.func.value), other, ast.Load()), [tree_copy(operand)], [])
        else:
            functional = ast.Attribute(
                ast.Attribute(ast.Name("torch", ast.Load()), "nn", ast.Load()), "functional", ast.Load()
            )
            changed = ast.Call(ast.Attribute(functional, other, ast.Load()), [tree_copy(operand)], [])
        found.append(
            Slip(
                f"{own}_for_{other}",
                f"`{other}` where {title} belongs",
                f"Use {title} there ({call}), not {other_title}.",
                changed,
            )
        )
    return found


def _layers_swapped(node):
    """In an expression of two sides that each call a layer of the module (``self.w1(x)``, ``self.w3(x)``): the two
    layers in each other's place."""

    def layers(side):
        return {n.func.attr for n in ast.walk(side) if isinstance(n, ast.Call) and _self_attribute(n.func)}

    left, right = layers(node.left), layers(node.right)
    found = []
    for a in sorted(left - right):
        for b in sorted(right - left):
            changed = tree_copy(node)
            for call in ast.walk(changed):
                if isinstance(call, ast.Call) and _self_attribute(call.func) and call.func.attr in (a, b):
                    call.func.attr = b if call.func.attr == a else a
            found.append(
                Slip(
                    "layers_swapped",
                    f"the layers `{a}` and `{b}` are in each other's place",
                    f"Apply `{a}` and `{b}` where the formula applies each.",
                    changed,
                )
            )
    return found


def _is_small_constant(node):
    value = _number(node)
    if value is not None:
        return 0 < abs(value) < 1e-2
    text = ast.unparse(node).lower()
    return "eps" in text


ROOTS = ("sqrt", "rsqrt")


def _constant_moved_in(node, name):
    """``sqrt(v + eps)`` -> ``sqrt(v) + eps`` (``rsqrt(v + eps)`` -> ``1 / (sqrt(v) + eps)``)."""
    if name not in ROOTS or len(node.args) != 1 or node.keywords:
        return []
    inner = node.args[0]
    if not (isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Add) and _is_small_constant(inner.right)):
        return []
    root = tree_copy(node)
    if isinstance(root.func, ast.Attribute):
        root.func.attr = "sqrt"
    else:
        root.func.id = "sqrt"
    root.args = [inner.left]
    moved = ast.BinOp(root, ast.Add(), inner.right)
    if name == "rsqrt":
        moved = ast.BinOp(ast.Constant(1.0), ast.Div(), moved)
    return [
        Slip(
            "constant_outside",
            "the small constant (eps) is added outside the square root instead of inside "
            "it: sqrt(v) + eps where sqrt(v + eps) belongs",
            "Add eps under the square root: sqrt(v + eps).",
            moved,
        )
    ]


def _constant_moved_out(node):
    """``sqrt(v) + eps`` -> ``sqrt(v + eps)``."""
    if not (
        isinstance(node.op, ast.Add)
        and isinstance(node.left, ast.Call)
        and _name(node.left) == "sqrt"
        and len(node.left.args) == 1
        and _is_small_constant(node.right)
    ):
        return []
    moved = tree_copy(node.left)
    moved.args = [ast.BinOp(moved.args[0], ast.Add(), node.right)]
    return [
        Slip(
            "constant_inside",
            "the small constant (eps) is added inside the square root instead of outside "
            "it: sqrt(v + eps) where sqrt(v) + eps belongs",
            "Add eps after the square root: sqrt(v) + eps.",
            moved,
        )
    ]


def _dropped_terms(node):
    if not isinstance(node.op, (ast.Add, ast.Sub)) or _constant(node.left) or _constant(node.right):
        return []
    found = []
    if isinstance(node.op, ast.Add):
        for kept, dropped in ((node.right, node.left), (node.left, node.right)):
            text = ast.unparse(dropped).lower()
            if isinstance(dropped, ast.Name) and dropped.id in _sublayer_inputs(kept):
                found.append(
                    Slip(
                        "residual_missing",
                        "the residual (skip) connection is left out: the output is the "
                        "sublayer's alone, without its input added back",
                        "Add the input back: x + sublayer(x).",
                        kept,
                    )
                )
            elif "bias" in text:
                found.append(Slip("bias_missing", "the bias is not added", "Add the bias there.", kept))
            else:
                found.append(
                    Slip(
                        "term_missing",
                        "an added term is left out (a where a + b belongs)",
                        "Add both terms, as the formula does.",
                        kept,
                    )
                )
    elif not (isinstance(node.right, ast.Call) and _name(node.right) == "mean"):
        found.append(
            Slip(
                "subtracted_term_missing",
                "a subtracted term is left out (a where a - b belongs)",
                "Subtract it, as the formula does.",
                node.left,
            )
        )
    return found


def _sublayer_inputs(node):
    """The names read by the arguments of the module's layers (``self.attn(self.norm(x))``: x) that ``node``
    calls: what a residual connection adds back."""
    found = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and _self_attribute(call.func):
            found |= {n.id for arg in call.args for n in ast.walk(arg) if isinstance(n, ast.Name)}
    return found


def _division_missing(node):
    """``a / b`` as ``a``, ``b`` not a constant nor a square root (those are the scale's slips): the result not
    divided by its normaliser."""
    if not isinstance(node.op, ast.Div) or _constant(node.right) or _constant(node.left):
        return []
    if isinstance(node.right, ast.Call) and _name(node.right) in ("sqrt", "rsqrt"):
        return []
    return [
        Slip(
            "division_missing",
            "a division is left out: the result is not divided by its normaliser (a where a / n belongs)",
            "Divide by the normaliser, as the formula does.",
            node.left,
        )
    ]


def _siblings(holder, owner_names):
    """An operation applied to one more, or one fewer, of the tensors of one kind: in one body, statements
    ``a = f(a, ...)``, ``b = f(b, ...)`` for sibling tensors made alike (``a``, ``b``, ``c`` from statements of one
    shape), where ``f`` is left out for one, or applied to ``c`` too."""
    body = holder.body
    made, applied = {}, {}
    for i, statement in enumerate(body):
        if not (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            continue
        target, value = statement.targets[0].id, statement.value
        if (
            isinstance(value, ast.Call)
            and value.args
            and isinstance(value.args[0], ast.Name)
            and value.args[0].id == target
        ):
            applied.setdefault(_name(value) or ast.unparse(value.func), []).append((i, target))
        else:
            made.setdefault(target, (i, _skeleton(value)))
    found = []
    for function, uses in applied.items():
        if len(uses) < 2:
            continue
        shown = _shown(function, owner_names)
        what = f"`{shown}`" if shown else "a step"
        for i, _target in uses:
            changed = tree_copy(holder)
            changed.body = [s for j, s in enumerate(body) if j != i] or [ast.Pass()]
            found.append(
                Slip(
                    "applied_to_one_fewer",
                    f"{what} is left out for one of the tensors it belongs on (it is applied to some of them, not all)",
                    f"Apply {what} to each tensor the formula applies it to.",
                    changed,
                )
            )
        skeletons = {made[t][1] for _, t in uses if t in made}
        if len(skeletons) != 1:
            continue
        (skeleton,) = skeletons
        done = {t for _, t in uses}
        last = uses[-1][0]
        for other, (j, shape) in made.items():
            if other in done or shape != skeleton or j > last:
                continue
            statement = tree_copy(body[last])
            statement.targets = [ast.Name(other, ast.Store())]
            statement.value.args[0] = ast.Name(other, ast.Load())
            changed = tree_copy(holder)
            changed.body = [*body[: last + 1], statement, *body[last + 1 :]]
            found.append(
                Slip(
                    "applied_to_one_more",
                    f"{what} is applied to one more tensor than it belongs on (to a "
                    f"sibling made the same way, as to the values as well as the "
                    f"queries and keys)",
                    f"Apply {what} only to the tensors the formula applies it to.",
                    changed,
                )
            )
    return found


def _skeleton(value):
    """An expression's shape with its names and attributes left out: ``self.wq(x).view(...)`` and
    ``self.wk(x).view(...)`` are alike."""
    tree = tree_copy(value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _self_attribute(node):
            node.attr = "_"
        if isinstance(node, ast.Name) and node.id not in ("self", "torch", "F"):
            node.id = "_"
    return ast.dump(tree)


def _one_off(node):
    """``n + 1`` as ``n`` (and ``n - 1`` as ``n``): a count or an index one off."""
    if not (isinstance(node.op, (ast.Add, ast.Sub)) and _number(node.right) == 1 and not _constant(node.left)):
        return []
    sign = "+" if isinstance(node.op, ast.Add) else "-"
    return [
        Slip(
            "one_off",
            f"a `{sign} 1` is left out: a count or an index is one off",
            f"Keep the `{sign} 1` of the formula there.",
            node.left,
        )
    ]


def _variance_of_squares(node, name):
    """``((x - m) ** 2).mean(dim)`` as the unbiased variance: the sum over the count less one."""
    if name != "mean" or not isinstance(node.func, ast.Attribute):
        return []
    squared = node.func.value
    if not (isinstance(squared, ast.BinOp) and isinstance(squared.op, ast.Pow) and _number(squared.right) == 2):
        return []
    dims = [k.value for k in node.keywords if k.arg == "dim"] or node.args[:1]
    if not dims:
        return []
    summed = tree_copy(node)
    summed.func.attr = "sum"
    count = ast.BinOp(
        ast.Subscript(ast.Attribute(tree_copy(squared), "shape", ast.Load()), dims[0], ast.Load()),
        ast.Sub(),
        ast.Constant(1),
    )
    return [
        Slip(
            "unbiased_variance",
            "the variance is the unbiased one (divided by n - 1) instead of the biased one (divided by n)",
            "Use the biased variance: unbiased=False (divide by n).",
            ast.BinOp(summed, ast.Div(), count),
        )
    ]


def _layer_call(node):
    """The layer's name of ``self.<layer>(one argument)``; None."""
    if _called_layer(node) and len(node.args) == 1 and not node.keywords:
        return node.func.attr
    return None


def _called_layer(node):
    """The layer's name of ``self.<layer>(...)`` (any arguments); None."""
    return node.func.attr if isinstance(node, ast.Call) and _self_attribute(node.func) else None


def _at(tree, index):
    """The node at position ``index`` of ``ast.walk(tree)`` (the same position in a deep copy)."""
    return next(n for i, n in enumerate(ast.walk(tree)) if i == index)


POST_FOR_PRE = (
    "the residual is added after the normalisation (x + norm(f(x))) where it belongs before it (norm(x + f(x)))",
    "Add the input back first, then normalise the sum: norm(x + f(x)).",
)
PRE_NORM = (
    "the normalisation is applied to the sublayer's input (pre-norm: x + f(norm(x))) where it belongs "
    "after the residual sum (post-norm: norm(x + f(x)))",
    "Normalise the residual sum: norm(x + f(x)).",
)
POST_NORM = (
    "the normalisation is applied after the residual sum (post-norm: norm(x + f(x))) where it belongs on "
    "the sublayer's input (pre-norm: x + f(norm(x)))",
    "Normalise the sublayer's input: x + f(norm(x)).",
)


def _normalises(layer, norms):
    return bool(layer) and (layer in norms or "norm" in layer.lower())


def _norm_order(node, norms=frozenset()):
    """``self.norm(x + y)`` as ``x + self.norm(y)``: the residual added after the normalisation."""
    layer = _layer_call(node)
    inner = node.args[0] if layer else None
    if not (isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Add) and _normalises(layer, norms)):
        return []
    normed = ast.Call(tree_copy(node.func), [inner.right], [])
    return [Slip("residual_after_norm", *POST_FOR_PRE, ast.BinOp(inner.left, ast.Add(), normed))]


def _norm_order_back(node, norms=frozenset()):
    """``x + f(self.norm(x))`` (pre-norm) as ``self.norm(x + f(x))`` (post-norm)."""
    if not isinstance(node.left, ast.Name):
        return []
    found = []
    for call in ast.walk(node.right):
        layer = _layer_call(call)
        if _normalises(layer, norms) and isinstance(call.args[0], ast.Name) and call.args[0].id == node.left.id:
            right = tree_copy(node.right)
            for inner in ast.walk(right):
                for field, value in ast.iter_fields(inner):
                    if isinstance(value, list):
                        value[:] = [node.left if ast.dump(v) == ast.dump(call) else v for v in value]
                    elif isinstance(value, ast.AST) and ast.dump(value) == ast.dump(call):
                        setattr(inner, field, node.left)
            post = ast.Call(tree_copy(call.func), [ast.BinOp(node.left, ast.Add(), right)], [])
            found.append(Slip("post_norm", *POST_NORM, post))
    return found


def _pre_norm(holder, norms=frozenset()):
    """A post-norm block, ``h = self.norm(x + y)`` with ``y`` computed from ``x`` before it, made pre-norm: the
    statements from ``x``'s last assignment up to it read ``self.norm(x)`` for ``x``, and it becomes ``h = x + y``;
    each block alone, and every block of the body at once (a layer written pre-norm throughout)."""
    blocks = []
    for i, statement in enumerate(holder.body):
        value = statement.value if isinstance(statement, (ast.Assign, ast.Return)) else None
        layer = _layer_call(value) if value is not None else None
        inner = value.args[0] if layer else None
        if (
            _normalises(layer, norms)
            and isinstance(inner, ast.BinOp)
            and isinstance(inner.op, ast.Add)
            and isinstance(inner.left, ast.Name)
            and isinstance(inner.right, ast.Name)
        ):
            blocks.append(i)
    sets = [[i] for i in blocks] + ([blocks] if len(blocks) > 1 else [])
    return [Slip("pre_norm", *PRE_NORM, _made_pre_norm(holder, chosen)) for chosen in sets]


def _made_pre_norm(holder, blocks):
    changed = tree_copy(holder)
    body = changed.body
    for i in blocks:
        value = body[i].value
        norm, inner = value.func, value.args[0]
        x = inner.left.id
        start = max([j + 1 for j in range(i) if _assigns(body[j], x)], default=0)

        def normed(x=x, norm=norm):
            return ast.Call(tree_copy(norm), [ast.Name(x, ast.Load())], [])

        for statement in body[start:i]:
            for node in ast.walk(statement):
                for field, child in ast.iter_fields(node):
                    if isinstance(child, ast.Name) and child.id == x and isinstance(child.ctx, ast.Load):
                        setattr(node, field, normed())
                    elif isinstance(child, list):
                        child[:] = [
                            normed() if isinstance(c, ast.Name) and c.id == x and isinstance(c.ctx, ast.Load) else c
                            for c in child
                        ]
        body[i].value = ast.BinOp(ast.Name(x, ast.Load()), ast.Add(), ast.Name(inner.right.id, ast.Load()))
    return changed


def _post_norm(holder, norms=frozenset()):
    """A pre-norm block across statements, ``x = x + y`` with ``y`` computed from ``self.norm(x)`` since ``x``'s
    last assignment, made post-norm: those reads of ``self.norm(x)`` read ``x``, and the sum becomes
    ``x = self.norm(x + y)``; each block alone, and every block of the body at once."""
    blocks = []
    for i, statement in enumerate(holder.body):
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            continue
        target, value = statement.targets[0], statement.value
        if not (
            isinstance(target, ast.Name)
            and isinstance(value, ast.BinOp)
            and isinstance(value.op, ast.Add)
            and isinstance(value.left, ast.Name)
            and value.left.id == target.id
        ):
            continue
        x = target.id
        start = max([j + 1 for j in range(i) if _assigns(holder.body[j], x)], default=0)
        normed = [
            call
            for statement_ in holder.body[start : i + 1]
            for call in ast.walk(statement_)
            if _normalises(_layer_call(call), norms)
            and len(call.args) == 1
            and isinstance(call.args[0], ast.Name)
            and call.args[0].id == x
        ]
        if len({ast.dump(call.func) for call in normed}) == 1:  # one norm of x feeds the sublayer
            blocks.append((i, start, normed[0].func))
    sets = [[b] for b in blocks] + ([blocks] if len(blocks) > 1 else [])
    return [Slip("post_norm", *POST_NORM, _made_post_norm(holder, chosen)) for chosen in sets]


def _made_post_norm(holder, blocks):
    changed = tree_copy(holder)
    body = changed.body
    for i, start, norm in blocks:
        x = body[i].targets[0].id
        for statement in body[start : i + 1]:
            for node in ast.walk(statement):
                for field, child in ast.iter_fields(node):
                    if _is_norm_of(child, norm, x):
                        setattr(node, field, ast.Name(x, ast.Load()))
                    elif isinstance(child, list):
                        child[:] = [ast.Name(x, ast.Load()) if _is_norm_of(c, norm, x) else c for c in child]
        body[i].value = ast.Call(tree_copy(norm), [body[i].value], [])
    return changed


def _is_norm_of(node, norm, x):
    return (
        isinstance(node, ast.Call)
        and ast.dump(node.func) == ast.dump(norm)
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == x
    )


def _assigns(statement, name):
    return isinstance(statement, ast.Assign) and any(
        isinstance(n, ast.Name) and n.id == name for t in statement.targets for n in ast.walk(t)
    )


def _parameter_swapped(function):
    """Each read of one of the function's parameters as another of them: keys and values taken from ``x`` where
    ``context`` belongs (a parameter's name is the student's own: the signature is the hand-out's)."""
    params = _parameters(function)
    read = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    found = []
    for param in params:
        if param not in read:
            continue
        for other in params:
            if other == param:
                continue
            changed = tree_copy(function)  # every read of it (keys and values both from x: one mistake)
            for node in ast.walk(changed):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id == param:
                    node.id = other
            found.append(_used_for(other, param, changed))
    return found


def _sizes(function):
    """The sizes a function names from its inputs' shapes: unpacked from a ``.shape`` (``B, T, D = x.shape``) or
    read into a name (``d = x.size(-1)``). (A module's own sizes, ``self.d_out``, are the scale slips' own.)"""
    names = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and _is_shape(node.value):
            target = node.targets[0]
            targets = target.elts if isinstance(target, ast.Tuple) else [target]
            names += [e.id for e in targets if isinstance(e, ast.Name) and e.id not in names]
    return [ast.Name(n, ast.Load()) for n in names]


def _is_shape(node):
    """``x.shape``, ``x.shape[k]``, ``x.size()`` or ``x.size(k)``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and node.func.attr == "size"
    return isinstance(node, ast.Attribute) and node.attr == "shape"


def _rooted(node):
    """The size under a square root at ``node`` (``sqrt(d)``, ``d ** 0.5``, ``d ** -0.5``): (its holder, field)."""
    if isinstance(node, ast.Call) and _name(node) in ("sqrt", "rsqrt") and len(node.args) == 1:
        return node, "args"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and _number(node.right) in (0.5, -0.5):
        return node, "left"
    return None, None


def _size_swapped(function):
    """The size under a scale's square root read as another size of the function: ``sqrt(D)`` (the model's
    width) where ``sqrt(self.head_dim)`` belongs; and that other size itself, its root left out too (``/ D``)."""
    sizes = _sizes(function)
    if not sizes:
        return []
    found = []
    for index, node in enumerate(ast.walk(function)):
        holder, field = _rooted(node)
        if holder is None:
            continue
        size = holder.args[0] if field == "args" else holder.left
        if not (isinstance(size, ast.Name) or _self_attribute(size) or _is_shape(size)):
            continue
        was = ast.unparse(size)
        for other in sizes:
            now = ast.unparse(other)
            if now == was:
                continue
            changed = tree_copy(function)
            target = _at(changed, index)
            if field == "args":
                target.args[0] = tree_copy(other)
            else:
                target.left = tree_copy(other)
            now_text, was_text = _size_text(other, function), _size_text(size, function, "each key's size")
            fix = (
                f"Scale by the square root of {was_text}, the size the formula names (each key's)."
                if was_text.startswith("`")
                else "Scale by the square root of each key's size (the keys' last dimension)."
            )
            found.append(
                Slip(
                    "scale_by_other_size",
                    f"the scale takes the square root of {now_text} where {was_text} belongs: another size",
                    fix,
                    changed,
                )
            )
            # The other size itself, its square root left out too (scores / C where / sqrt(C // n_heads) belongs):
            # the root is kept and given the size's square, so that it is the only change of the scale's code.
            unrooted = tree_copy(function)
            target = _at(unrooted, index)
            squared = ast.BinOp(tree_copy(other), ast.Mult(), tree_copy(other))
            if field == "args":
                target.args[0] = squared
            else:
                target.left = squared
            found.append(
                Slip(
                    "scale_by_other_size_itself",
                    f"the scale is {now_text} itself where the square root of {was_text} belongs: another size, and "
                    f"no square root",
                    fix,
                    unrooted,
                )
            )
    return found


def _centred(function):
    """The mean of a parameter's squares (a root mean square: RMSNorm) taken of the parameter less its mean:
    ``x = x - x.mean(-1, keepdim=True)`` just before, as LayerNorm does, where the input itself belongs. Not where
    the function takes the parameter's own mean too (a variance written ``(x ** 2).mean() - m ** 2``)."""
    parameters = set(_parameters(function))
    found, seen = [], set()
    for position, statement in enumerate(function.body):
        for node in ast.walk(statement):
            base, dims = _mean_of_squares(node)
            if base is None or base not in parameters or base in seen or not dims or _takes_mean_of(function, base):
                continue
            seen.add(base)
            changed = tree_copy(function)
            centring = ast.Assign(
                [ast.Name(base, ast.Store())],
                ast.BinOp(
                    ast.Name(base, ast.Load()),
                    ast.Sub(),
                    ast.Call(
                        ast.Attribute(ast.Name(base, ast.Load()), "mean", ast.Load()),
                        [],
                        [ast.keyword("dim", tree_copy(dims[0])), ast.keyword("keepdim", ast.Constant(True))],
                    ),
                ),
            )
            changed.body.insert(position, centring)
            found.append(
                Slip(
                    "mean_subtracted",
                    f"`{base}`'s mean is subtracted first, as LayerNorm does, where the root mean square of `{base}` "
                    f"itself belongs (no centring)",
                    f"Do not subtract the mean: divide `{base}` as given by the square root of the mean of its "
                    f"squares (plus eps).",
                    changed,
                )
            )
    return found


def _takes_mean_of(function, name):
    """Whether ``function`` takes the mean of ``name`` itself into its arithmetic (``m = x.mean(...)``, or such a mean
    in a sum, a difference or a power: a variance written ``(x ** 2).mean() - m ** 2``); a mean only tested (``if
    torch.isnan(x.mean())``) is not."""

    def mean_of(node):
        if isinstance(node, ast.Call) and _name(node) == "mean" and isinstance(node.func, ast.Attribute):
            of = node.args[0] if _module_name(node.func.value) and node.args else node.func.value
            return isinstance(of, ast.Name) and of.id == name
        return False

    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and mean_of(node.value):
            return True
        if isinstance(node, ast.BinOp) and (mean_of(node.left) or mean_of(node.right)):
            return True
    return False


def _mean_of_squares(node):
    """(the name squared, [its dim]) of ``x.pow(2).mean(dim)``, ``(x ** 2).mean(dim)``, ``(x * x).mean(dim)``,
    ``x.square().mean(dim)`` or ``torch.mean(x ** 2, dim)``; (None, []) for anything else."""
    if not (isinstance(node, ast.Call) and _name(node) == "mean"):
        return None, []
    if isinstance(node.func, ast.Attribute) and _module_name(node.func.value):
        squared, rest = (node.args[0], node.args[1:]) if node.args else (None, [])
    else:
        squared, rest = (node.func.value if isinstance(node.func, ast.Attribute) else None), node.args
    dims = [k.value for k in node.keywords if k.arg == "dim"] or list(rest[:1])
    if isinstance(squared, ast.BinOp) and isinstance(squared.left, ast.Name):
        if (isinstance(squared.op, ast.Pow) and _number(squared.right) == 2) or (
            isinstance(squared.op, ast.Mult)
            and isinstance(squared.right, ast.Name)
            and squared.right.id == squared.left.id
        ):
            return squared.left.id, dims
    if isinstance(squared, ast.Call) and isinstance(squared.func, ast.Attribute):
        base = squared.func.value
        if isinstance(base, ast.Name) and (
            (squared.func.attr == "pow" and squared.args and _number(squared.args[0]) == 2)
            or (squared.func.attr == "square" and not squared.args)
        ):
            return base.id, dims
    return None, []


def _size_text(size, function, otherwise="another size"):
    """A size as a student can read it, never by a local name of the reference's: a parameter, a module's own
    ``self.<name>``, or a shape of a parameter (``B, T, C = x.shape``'s ``C`` is `x.shape[-1]`); else
    ``otherwise``."""
    parameters = {a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
    if not isinstance(size, ast.Name):
        names = {n.id for n in ast.walk(size) if isinstance(n, ast.Name)}
        return f"`{ast.unparse(size)}`" if names <= parameters | {"self"} else otherwise
    if size.id in parameters:
        return f"`{size.id}`"
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and _is_shape(node.value):
            target, value = node.targets[0], node.value
            of = value.value if isinstance(value, ast.Subscript) else value
            of = of.func.value if isinstance(of, ast.Call) else of.value  # x.size() / x.shape: x
            if not (isinstance(of, ast.Name) and of.id in parameters):
                continue
            if isinstance(target, ast.Tuple) and not isinstance(value, ast.Subscript):
                spots = [i for i, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == size.id]
                starred = [i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)]
                if spots:  # counted from the end, or from the front before a starred name (B, *_, D = x.shape)
                    at = spots[0] if starred and spots[0] < starred[0] else spots[0] - len(target.elts)
                    return f"`{of.id}.shape[{at}]`"
            elif isinstance(target, ast.Name) and target.id == size.id:
                return f"`{ast.unparse(value)}`"
    return otherwise


def _factor_unused(node):
    """``y * self.weight`` as ``y``: a parameter (or buffer) of the module never used."""
    if not isinstance(node.op, (ast.Mult, ast.Div)):
        return []
    found = []
    for kept, factor in ((node.left, node.right), (node.right, node.left)):
        if _self_attribute(factor) and not _constant(kept):
            found.append(
                Slip(
                    "parameter_unused",
                    f"the result is not {'multiplied' if isinstance(node.op, ast.Mult) else 'divided'} "
                    f"by `{factor.attr}`: the module's `{factor.attr}` is never used",
                    f"Use `{factor.attr}` as the formula does.",
                    kept,
                )
            )
    return found


_DIVIDED_MULTIPLIED = {
    ast.Div: (
        ast.Mult,
        "multiplied_for_divided",
        "multiplied where it should be divided (a * b where a / b belongs)",
        "Divide there, as the formula does.",
    ),
    ast.Mult: (
        ast.Div,
        "divided_for_multiplied",
        "divided where it should be multiplied (a / b where a * b belongs)",
        "Multiply there, as the formula does.",
    ),
}


def _multiplied_for_divided(node):
    """``a / b`` as ``a * b`` (and back), ``b`` not a constant nor a square root (the scale's own slips); a product
    with a parameter is left alone (a scale or a gain multiplies)."""
    if not isinstance(node.op, (ast.Div, ast.Mult)) or _constant(node.right) or _constant(node.left):
        return []
    if isinstance(node.right, ast.Call) and _name(node.right) in ("sqrt", "rsqrt"):
        return []
    if isinstance(node.op, ast.Mult) and (_self_attribute(node.right) or _self_attribute(node.left)):
        return []
    other, kind, sentence, fix = _DIVIDED_MULTIPLIED[type(node.op)]
    return [Slip(kind, sentence, fix, ast.BinOp(node.left, other(), node.right))]


FIXED_AXIS_CALLS = ("mean", "sum", "var", "std", "amax", "max", "logsumexp", "softmax", "log_softmax", "norm")


def _fixed_axis(node, name):
    """A reduction's (or a softmax's) axis counted from the end, ``dim=-1``, written as a fixed axis, ``dim=1``:
    right for inputs of one number of dimensions only (2-D here)."""
    if name not in FIXED_AXIS_CALLS:
        return []
    method = isinstance(node.func, ast.Attribute) and _name(node.func.value) not in ("torch", "F", "functional")
    where, dim = _argument(node, "dim", 0 if method else 1)
    value = _number(dim)
    if where is None or value is None or value >= 0:
        return []
    found = []
    for fixed in (1, 2, 3):
        found.append(
            Slip(
                "axis_fixed",
                f"the {name} is taken over dim {fixed}, a fixed axis, where dim {value:g} (counted from the end) "
                f"belongs: right only for inputs of {fixed - value:g} dimensions",
                f"Count the axis from the end (dim={value:g}), so that any number of leading dimensions works.",
                _with_argument(node, where, _literal(fixed)),
            )
        )
    return found


def _axes_reordered(node, name):
    """Two neighbouring axes of a ``permute`` in each other's place: patches read column by column where the rows
    come first, a tensor's channels last where they come first."""
    if name != "permute" or node.keywords or len(node.args) < 3:
        return []
    axes = [_number(a) for a in node.args]
    if any(a is None for a in axes):
        return []
    found = []
    for i in range(len(axes) - 1):
        changed = tree_copy(node)
        changed.args[i], changed.args[i + 1] = tree_copy(node.args[i + 1]), tree_copy(node.args[i])
        found.append(
            Slip(
                "axes_reordered",
                "two axes of a permute are in each other's place (the tensor's dimensions come out in the wrong order)",
                "Order the axes as the formula's layout asks.",
                changed,
            )
        )
    return found


SPLITS = ("chunk", "split", "unbind", "tensor_split")


def _unpacked_in_another_order(node):
    """``q, k, v = qkv.chunk(3, -1)`` (or ``= qkv[0], qkv[1], qkv[2]``) as ``k, q, v = ...``: the pieces of a split
    taken in another order."""
    target = node.targets[0] if len(node.targets) == 1 else None
    if not (
        isinstance(target, ast.Tuple)
        and 2 <= len(target.elts) <= 4
        and all(isinstance(e, ast.Name) for e in target.elts)
    ):
        return []
    value = node.value
    split = isinstance(value, ast.Call) and _name(value) in SPLITS
    indexed = (
        isinstance(value, ast.Tuple)
        and len(value.elts) == len(target.elts)
        and all(isinstance(e, ast.Subscript) for e in value.elts)
    )
    if not (split or indexed):
        return []
    found = []
    for i in range(len(target.elts) - 1):
        changed = tree_copy(node)
        elts = changed.targets[0].elts
        elts[i], elts[i + 1] = elts[i + 1], elts[i]
        found.append(
            Slip(
                "pieces_in_another_order",
                "the pieces a tensor is split into are taken in another order (two of them in each other's place)",
                "Take the pieces in the order the tensor holds them.",
                changed,
            )
        )
    return found


def _layer_input_swapped(function):
    """A layer given the input another layer takes: ``self.q_proj(x)`` where ``self.q_proj(latents)`` belongs (the
    queries projected from the sequence instead of the latents), for layers that each take one named tensor."""
    calls = [
        (i, n.func.attr, n.args[0].id)
        for i, n in enumerate(ast.walk(function))
        if _layer_call(n) and isinstance(n.args[0], ast.Name)
    ]
    inputs = list(dict.fromkeys(name for _, _, name in calls))
    found = []
    for index, layer, name in calls:
        for other in inputs:
            if other == name:
                continue
            changed = tree_copy(function)
            _at(changed, index).args[0].id = other
            found.append(
                Slip(
                    "layer_input_swapped",
                    f"`{layer}` is applied to another input than the one it belongs on (one that another layer takes)",
                    f"Give `{layer}` the input the formula gives it.",
                    changed,
                )
            )
    return found


def _parameters(function):
    """A function's parameters but ``self``: names the hand-out's signature gives (the student's own)."""
    return [
        a.arg for a in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs] if a.arg != "self"
    ]


def _used_for(other, param, changed):
    return Slip(
        "parameter_swapped",
        f"`{other}` is used where `{param}` belongs",
        f"Use `{param}` there, as the formula does.",
        changed,
    )


def _argument_left_out(node, owner_names):
    """A layer's or a graded name's call without its last argument (positional, or a keyword): the lengths or
    the mask not passed on, so the callee falls back to its default."""
    callee = _called_layer(node) or (_name(node) if _name(node) in owner_names else None)
    if callee is None or len(node.args) + len(node.keywords) < 2:
        return []
    variants = []
    if node.keywords:
        variants += [ast.Call(node.func, node.args, [k for k in node.keywords if k is not kw]) for kw in node.keywords]
    elif not isinstance(node.args[-1], ast.Starred):
        variants.append(ast.Call(node.func, node.args[:-1], []))
    return [
        Slip(
            "argument_left_out",
            f"`{callee}` is called without one of its arguments, so it falls back to that argument's default (a mask "
            f"or the lengths not passed on)",
            f"Pass `{callee}` every argument the formula gives it.",
            tree_copy(variant),
        )
        for variant in variants
    ]


def _layers_nested_swapped(node):
    """``self.a(self.b(x, *rest))`` as ``self.b(self.a(x), *rest)`` (and with ``rest`` given to both): two
    layers applied in the other order."""
    outer = _called_layer(node)
    inner = node.args[0] if outer and len(node.args) == 1 and not node.keywords else None
    if not (_called_layer(inner) and inner.args and not inner.keywords):
        return []
    first, rest = inner.args[0], inner.args[1:]
    found = []
    for given in ([], rest) if rest else ([],):
        applied = ast.Call(tree_copy(node.func), [tree_copy(first), *tree_copy(given)], [])
        found.append(
            Slip(
                "layers_in_another_order",
                f"`{_called_layer(inner)}` and `{outer}` are applied in the other order",
                f"Apply `{_called_layer(inner)}` first, then `{outer}`, as the formula does.",
                ast.Call(tree_copy(inner.func), [applied, *tree_copy(rest)], []),
            )
        )
    return found


def _layer_reused(function):
    """A layer called where another layer of the function belongs (``self.mab1(x, h)`` where ``self.mab2(x, h)``
    belongs): one applied twice, the other never."""
    calls = [(i, _called_layer(n)) for i, n in enumerate(ast.walk(function)) if _called_layer(n)]
    layers = list(dict.fromkeys(name for _, name in calls))
    found = []
    for index, layer in calls:
        for other in layers:
            if other == layer:
                continue
            changed = tree_copy(function)
            _at(changed, index).func.attr = other
            found.append(
                Slip(
                    "layer_reused",
                    f"`{other}` is used where `{layer}` belongs: one layer applied twice, the other never",
                    f"Use `{layer}` there, as the formula does.",
                    changed,
                )
            )
    return found


def _residual_added(function):
    """``return self.layer(x, ...)`` as ``return x + self.layer(x, ...)``: a residual where none belongs."""
    params = set(_parameters(function))
    found = []
    for index, node in enumerate(ast.walk(function)):
        if not (isinstance(node, ast.Return) and _called_layer(node.value) and node.value.args):
            continue
        first = node.value.args[0]
        if not (isinstance(first, ast.Name) and first.id in params):
            continue
        changed = tree_copy(function)
        target = _at(changed, index)
        target.value = ast.BinOp(ast.Name(first.id, ast.Load()), ast.Add(), target.value)
        found.append(
            Slip(
                "residual_added",
                f"a residual is added where none belongs: `{first.id}` is added to what `{_called_layer(node.value)}` "
                f"gives",
                f"Return what `{_called_layer(node.value)}` gives, without adding `{first.id}` to it.",
                changed,
            )
        )
    return found


def _chained_layers_swapped(holder):
    """``z = self.a(h, *rest)`` then ``z = self.b(z)`` as ``z = self.b(h[, *rest])`` then ``z = self.a(z, *rest)``:
    two layers applied one after the other, in the other order."""
    body, found = holder.body, []
    for i in range(len(body) - 1):
        first, second = body[i], body[i + 1]
        if not (_assigned_call(first) and _assigned_call(second)):
            continue
        made, a, b = first.targets[0].id, first.value, second.value
        if not (b.args and isinstance(b.args[0], ast.Name) and b.args[0].id == made and a.args):
            continue
        rest_a, rest_b = a.args[1:], b.args[1:]
        for given in ([], rest_a) if rest_a else ([],):
            now_first = ast.Assign([ast.Name(made, ast.Store())], ast.Call(b.func, [a.args[0], *rest_b, *given], []))
            now_second = ast.Assign(
                [tree_copy(second.targets[0])], ast.Call(a.func, [ast.Name(made, ast.Load()), *rest_a], [])
            )
            changed = tree_copy(holder)
            changed.body = [*body[:i], tree_copy(now_first), tree_copy(now_second), *body[i + 2 :]]
            found.append(
                Slip(
                    "layers_in_another_order",
                    f"`{b.func.attr}` and `{a.func.attr}` are applied in the other order",
                    f"Apply `{a.func.attr}` first, then `{b.func.attr}`, as the formula does.",
                    changed,
                )
            )
    return found


def _assigned_call(statement):
    """Whether ``statement`` is ``name = self.layer(...)`` with positional arguments alone."""
    return (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
        and _called_layer(statement.value) is not None
        and not statement.value.keywords
    )


MASK_MAKERS = frozenset({"tril", "triu"})


def _returned_as(function):
    """A mask (a comparison, a triangle) returned with the other polarity: True where blocked (nn.MultiheadAttention's
    convention) where True = may attend belongs."""
    found = []
    for index, node in enumerate(ast.walk(function)):
        if not isinstance(node, ast.Return) or node.value is None or isinstance(node.value, ast.Tuple):
            continue
        changed = tree_copy(function)
        target = _at(changed, index)
        if any(
            isinstance(n, ast.Compare) or (isinstance(n, ast.Call) and _name(n) in MASK_MAKERS)
            for n in ast.walk(node.value)
        ):
            target.value = ast.UnaryOp(ast.Invert(), target.value)
            found.append(
                Slip(
                    "mask_polarity_inverted",
                    "the mask is of the other polarity: True where a position is blocked (nn.MultiheadAttention's "
                    "convention) where True = may attend belongs",
                    "Return True where a position may attend, False where it is blocked.",
                    changed,
                )
            )
        else:
            target.value = ast.Call(ast.Attribute(target.value, "float", ast.Load()), [], [])
            found.append(
                Slip(
                    "default_dtype",
                    "the result is float32, torch's default dtype, whatever the input's (a tensor made without "
                    "`dtype=`, as torch.zeros(shape), then filled)",
                    "Make the result in the input's dtype (torch.zeros_like(x), or dtype=x.dtype).",
                    changed,
                )
            )
    return found


# ---------------------------------------------------------------- RoPE's two ways of pairing channels

_HALVES = (
    "the channels are paired as the two halves of the last dimension (x[..., :D/2] with x[..., D/2:], as "
    "rotate_half does) where neighbouring channels belong (x[..., 0::2] with x[..., 1::2]): the other RoPE "
    "convention",
    "Pair each even channel with the next one, x[..., 0::2] with x[..., 1::2], and put the rotated pairs back "
    "in their places.",
)
_NEIGHBOURS = (
    "the channels are paired as neighbours (x[..., 0::2] with x[..., 1::2]) where the two halves of the last "
    "dimension belong (x[..., :D/2] with x[..., D/2:], as rotate_half does): the other RoPE convention",
    "Pair channel i with channel i + D/2, the first half with the second, as rotate_half does.",
)
# (the reference's pairing -> (the other pairing's layout of an input X, the student's layout back of a result O))
_LAYOUTS = {
    "neighbours": (
        "torch.stack((X[..., : X.shape[-1] // 2], X[..., X.shape[-1] // 2 :]), dim=-1).flatten(-2)",
        "torch.cat((O[..., 0::2], O[..., 1::2]), dim=-1)",
    ),
    "halves": (
        "torch.cat((X[..., 0::2], X[..., 1::2]), dim=-1)",
        "torch.stack((O[..., : O.shape[-1] // 2], O[..., O.shape[-1] // 2 :]), dim=-1).flatten(-2)",
    ),
}
_WRAPPER = """
def _f():
    def _pairs_inner():
        pass

    def _pairs_back(_pairs_result):
        if isinstance(_pairs_result, torch.Tensor) and _pairs_result.shape[-1:] in SIZES:
            return BACK
        return _pairs_result
    _pairs_out = CALL
    if isinstance(_pairs_out, tuple):
        return tuple(_pairs_back(_pairs_result) for _pairs_result in _pairs_out)
    return _pairs_back(_pairs_out)
"""


def pairs_convention(function, tree):
    """A function that rotates pairs of channels (RoPE), computed with the other pairing: neighbours where the
    reference pairs the halves, or the reverse. The mutant is the reference's own function given the student's
    layout of the inputs it takes pieces of and giving its results back in it, which is that other convention
    exactly where the function makes its own angles (the pair ``i`` turned by the same angle). Made where the
    function, or a module-level helper it calls, takes both pieces of one pairing of the last dimension (and never
    of the other) of its parameters, and calls torch."""
    parameters = _parameters(function)
    helpers = {top.name: top for top in tree.body if isinstance(top, ast.FunctionDef) and top is not function}
    pieces, moved, called = set(), [], []
    for node in ast.walk(function):
        piece, base = _piece(node), _piece_of(node)
        if piece is not None and isinstance(base, ast.Name) and base.id in parameters:
            pieces.add(piece)
            moved.append(base.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers and node.args:
            called.append(helpers[node.func.id])
            taken, given = _pieces_of_first(called[-1]), node.args[0]
            if taken and isinstance(given, ast.Name) and given.id in parameters:
                pieces |= taken
                moved.append(given.id)
    bodies = [function, *called]
    reference = _one_pairing(pieces, set().union(*map(_halved, bodies)))
    if reference is None or not any(isinstance(n, ast.Name) and n.id == "torch" for b in bodies for n in ast.walk(b)):
        return []  # (the layouts are made with torch, by that name)
    moved = list(dict.fromkeys(moved))
    forward, back = _LAYOUTS[reference]
    sizes = "(" + "".join(f"{name}.shape[-1:], " for name in moved) + ")"
    wrapper = ast.parse(_WRAPPER.replace("BACK", back.replace("O", "_pairs_result")).replace("SIZES", sizes))
    wrapper = wrapper.body[0]
    inner = tree_copy(function)
    inner.name, inner.decorator_list = "_pairs_inner", []
    wrapper.body[0] = inner

    def given(name):
        if name in moved:
            return ast.parse(forward.replace("X", name), mode="eval").body
        return ast.Name(name, ast.Load())

    call = ast.Call(ast.Name("_pairs_inner", ast.Load()), [], [])
    call.args = [given(a.arg) for a in [*function.args.posonlyargs, *function.args.args]]
    if function.args.vararg:
        call.args.append(ast.Starred(ast.Name(function.args.vararg.arg, ast.Load()), ast.Load()))
    call.keywords = [ast.keyword(a.arg, given(a.arg)) for a in function.args.kwonlyargs]
    if function.args.kwarg:
        call.keywords.append(ast.keyword(None, ast.Name(function.args.kwarg.arg, ast.Load())))
    wrapper.body[-3].value = call
    changed = tree_copy(function)
    changed.body = wrapper.body
    mistake, fix = _HALVES if reference == "neighbours" else _NEIGHBOURS
    return [Slip("pairs_convention", mistake, fix, changed)]


def _pieces_of_first(helper):
    """The pieces (:func:`_piece`) a helper takes of its first parameter."""
    first = (helper.args.posonlyargs + helper.args.args)[:1]
    return {
        piece
        for n in ast.walk(helper)
        if (piece := _piece(n)) is not None
        and first
        and isinstance(_piece_of(n), ast.Name)
        and _piece_of(n).id == first[0].arg
    }


def _one_pairing(pieces, halved):
    """ "neighbours" or "halves": the one pairing whose both pieces ``pieces`` (of :func:`_piece`) hold; else None.
    Halves count only where split at a size of ``halved`` (:func:`_halved`), or by ``chunk``: partial rotary's
    ``x[..., :rot]`` is no pairing."""
    pieces = {p for p in pieces if p[0] != "halves" or p[-1] in halved or p[-1] == "chunk"}
    neighbours = {("neighbours", 0), ("neighbours", 1)} <= pieces
    lows = {p[-1] for p in pieces if p[:2] == ("halves", "low")}
    highs = {p[-1] for p in pieces if p[:2] == ("halves", "high")} | ({"chunk"} & lows)
    halves = lows & highs
    if neighbours == bool(halves) or len(halves) > 1:
        return None
    return "neighbours" if neighbours else "halves"


def _piece(node):
    """The piece of a pairing of the last dimension's channels a node takes: ``x[..., 0::2]`` ("neighbours", 0),
    ``x[..., 1::2]`` ("neighbours", 1), ``x[..., :h]`` ("halves", "low", h), ``x[..., h:]`` ("halves", "high", h)
    (``h`` as written), ``x.chunk(2, dim=-1)`` or ``torch.chunk(x, 2, dim=-1)`` both halves at once; else None."""
    if isinstance(node, ast.Call) and _name(node) == "chunk":
        function_form = isinstance(node.func, ast.Attribute) and _module_name(node.func.value)
        count, dims = (node.args[1:2], node.args[2:3]) if function_form else (node.args[:1], node.args[1:2])
        dims = [k.value for k in node.keywords if k.arg == "dim"] or dims
        if count and _number(count[0]) == 2 and dims and _number(dims[0]) == -1:
            return ("halves", "low", "chunk")
        return None
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2):
        return None
    ellipsis, last = node.slice.elts
    if not (isinstance(ellipsis, ast.Constant) and ellipsis.value is Ellipsis and isinstance(last, ast.Slice)):
        return None
    if last.step is not None:
        start = 0 if last.lower is None else _number(last.lower)
        return ("neighbours", start) if _number(last.step) == 2 and last.upper is None and start in (0, 1) else None
    if (last.lower is None) == (last.upper is None):
        return None
    size = last.upper if last.lower is None else last.lower
    if _number(size) is not None:
        return None
    return ("halves", "low" if last.lower is None else "high", ast.unparse(size))


def _halved(function):
    """The sizes a function writes as half of something (``x.shape[-1] // 2``, ``D // 2``), and the names it
    assigns one of them to (``half = x.shape[-1] // 2``): a pairing of halves splits the last dimension at one."""
    halves = set()
    for node in ast.walk(function):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv) and _number(node.right) == 2:
            halves.add(ast.unparse(node))
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and ast.unparse(node.value) in halves:
            halves |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return halves


def _piece_of(node):
    """The tensor a piece (:func:`_piece`) is taken of: ``x`` of ``x[..., 0::2]``, ``x.chunk(2, -1)`` and
    ``torch.chunk(x, 2, -1)``."""
    if isinstance(node, ast.Subscript):
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if _module_name(node.func.value):
            return node.args[0] if node.args else None
        return node.func.value
    return None


def _module_name(node):
    return isinstance(node, ast.Name) and node.id in TORCH_MODULES


def _pairs_swapped(function):
    """The pieces a function (RoPE, or its rotate_half helper) takes of the last dimension, and the way it puts
    them back, written for the other pairing: ``x[..., :h]``/``x[..., h:]`` and ``cat((a, b), -1)`` as
    ``x[..., 0::2]``/``x[..., 1::2]`` and ``stack((a, b), -1).flatten(-2)``, or the reverse. In a helper given
    the reference's tables, that is GPT-J's rotate_every_two where Llama's rotate_half belongs. Made where the
    function takes both pieces of one pairing of a named tensor and puts them back on the last dimension."""
    pieces = {
        piece
        for node in ast.walk(function)
        if (piece := _piece(node)) is not None and isinstance(_piece_of(node), ast.Name)
    }
    reference = _one_pairing(pieces, _halved(function))
    if reference is None or not any(_put_back(n) == reference for n in ast.walk(function)):
        return []
    changed = ast.fix_missing_locations(_OtherPairing(reference).visit(tree_copy(function)))
    mistake, fix = _HALVES if reference == "neighbours" else _NEIGHBOURS
    return [Slip("pairs_pieces", mistake, fix, changed)]


def _put_back(node):
    """``torch.cat((a, b), dim=-1)``: "halves"; ``torch.stack((a, b), dim=-1).flatten(-2)``: "neighbours"."""
    if not isinstance(node, ast.Call):
        return None
    if _name(node) == "flatten" and isinstance(node.func, ast.Attribute) and [_number(a) for a in node.args] == [-2]:
        inner = node.func.value
        return "neighbours" if isinstance(inner, ast.Call) and _name(inner) == "stack" and _last_axis(inner) else None
    return "halves" if _name(node) == "cat" and _last_axis(node) else None


def _last_axis(call):
    """Whether a ``cat``/``stack`` call of two pieces joins them on the last axis."""
    dims = [k.value for k in call.keywords if k.arg == "dim"] or call.args[1:2]
    joined = call.args[0] if call.args else None
    return bool(dims) and _number(dims[0]) == -1 and isinstance(joined, (ast.Tuple, ast.List)) and len(joined.elts) == 2


class _OtherPairing(ast.NodeTransformer):
    """A function's pieces of the last dimension, and their putting back, written for the other pairing."""

    def __init__(self, reference):
        self.reference = reference

    def visit_Subscript(self, node):
        piece = _piece(node)
        if piece is None or piece[0] != self.reference:
            return self.generic_visit(node)
        base = node.value
        if self.reference == "neighbours":  # x[..., 0::2] -> x[..., :x.shape[-1] // 2], x[..., 1::2] -> the rest
            half = ast.parse(f"({ast.unparse(base)}).shape[-1] // 2", mode="eval").body
            part = ast.Slice(None, half, None) if piece[1] == 0 else ast.Slice(half, None, None)
        else:  # x[..., :h] -> x[..., 0::2], x[..., h:] -> x[..., 1::2]
            part = ast.Slice(ast.Constant(0 if piece[1] == "low" else 1), None, ast.Constant(2))
        return ast.Subscript(base, ast.Tuple([ast.Constant(Ellipsis), part], ast.Load()), ast.Load())

    def visit_Call(self, node):
        if _piece(node) == ("halves", "low", "chunk"):  # x.chunk(2, dim=-1) -> (x[..., 0::2], x[..., 1::2])
            base = _piece_of(node)
            if not isinstance(base, ast.Name):
                return self.generic_visit(node)
            return ast.Tuple(
                [
                    ast.Subscript(
                        base,
                        ast.Tuple(
                            [ast.Constant(Ellipsis), ast.Slice(ast.Constant(k), None, ast.Constant(2))], ast.Load()
                        ),
                        ast.Load(),
                    )
                    for k in (0, 1)
                ],
                ast.Load(),
            )
        way = _put_back(node)
        node = self.generic_visit(node)
        if way != self.reference:
            return node
        if way == "halves":  # cat((a, b), dim=-1) -> stack((a, b), dim=-1).flatten(-2)
            stacked = ast.Call(
                ast.Attribute(node.func.value, "stack", ast.Load())
                if isinstance(node.func, ast.Attribute)
                else ast.Name("stack", ast.Load()),
                node.args,
                node.keywords,
            )
            return ast.Call(ast.Attribute(stacked, "flatten", ast.Load()), [_literal(-2)], [])
        stack = node.func.value  # stack((a, b), dim=-1).flatten(-2) -> cat((a, b), dim=-1)
        func = (
            ast.Attribute(stack.func.value, "cat", ast.Load())
            if isinstance(stack.func, ast.Attribute)
            else ast.Name("cat", ast.Load())
        )
        return ast.Call(func, stack.args, stack.keywords)
