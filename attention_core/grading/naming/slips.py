"""The usual slips of attention code, each at the place of a reference's source where it can be made, with the
sentence a student reads: :func:`slips` gives every one for an AST node (``generated.py`` makes the mutants)."""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Slip:
    """One kind of slip at one place: what a student reads, how to fix it, and the changed node."""

    kind: str
    mistake: str
    fix: str
    replacement: object  # the new AST node (or None: the statement removed)


def tree_copy(node):
    """A deep copy of an AST node (or a list of them): every node new, the values it holds (names, constants)
    shared. It does what ``copy.deepcopy`` does to a parsed tree at a fraction of the cost: deepcopy asks each node
    how to rebuild itself and keeps a memo of every object it met; a mutant's making copies thousands of nodes."""
    if isinstance(node, list):
        return [tree_copy(item) for item in node]
    if not isinstance(node, ast.AST):
        return node  # str, int, float, None and the like: immutable
    new = node.__class__.__new__(node.__class__)
    new.__dict__.update({key: tree_copy(value) for key, value in node.__dict__.items()})
    return new


def _name(node):
    """The last name of a call's function: ``torch.softmax`` -> softmax, ``x.masked_fill`` -> masked_fill."""
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _number(node):
    """A literal number (a negative one too), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    return None


def _literal(value):
    return ast.UnaryOp(ast.USub(), ast.Constant(-value)) if value < 0 else ast.Constant(value)


def _argument(call, keyword, position):
    """(where, node) of an argument given by ``keyword`` or at ``position``; (None, None) if absent."""
    for k in call.keywords:
        if k.arg == keyword:
            return k, k.value
    if len(call.args) > position:
        return position, call.args[position]
    return None, None


def _with_argument(call, where, value):
    call = tree_copy(call)
    if isinstance(where, int):
        call.args[where] = value
    else:
        next(k for k in call.keywords if k.arg == where.arg).value = value
    return call


def _square_root_of(node):
    """The x of ``sqrt(x)`` (math's, torch's, NumPy's) or ``x ** 0.5``; None."""
    if isinstance(node, ast.Call) and _name(node) == "sqrt" and len(node.args) == 1:
        return node.args[0]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and _number(node.right) == 0.5:
        return node.left
    return None


def _receiver(call):
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def _is_minus_infinity(node):
    text = ast.unparse(node)
    return "inf" in text and text.lstrip("(").startswith("-") or text in ("float('-inf')", 'float("-inf")')


# ---------------------------------------------------------------------------------------- the slips


@dataclass(frozen=True)
class Context:
    """What a graded class holds, for the slips that put one of its parts where another belongs: the layers
    it calls (``self.W_key(x)``), the weights it multiplies by (``x @ self.W_key``), and the sizes it keeps
    (``self.head_dim``)."""

    layers: frozenset = frozenset()
    weights: frozenset = frozenset()
    sizes: frozenset = frozenset()
    norms: frozenset = frozenset()  # the layers that normalise (made by a class whose name holds "Norm")


def context_of(top):
    layers, weights, sizes = set(), set(), set()
    norms = {
        t.attr
        for node in ast.walk(top)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and "norm" in _name(node.value).lower()
        for t in node.targets
        if _self_attribute(t)
    }
    for node in ast.walk(top):
        if (
            isinstance(node, ast.Call)
            and _self_attribute(node.func)
            and len(node.args) == 1
            and not node.keywords
            and "drop" not in node.func.attr.lower()
        ):  # (dropout: the same as no layer, in eval mode)
            layers.add(node.func.attr)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and _self_attribute(node.right):
            weights.add(node.right.attr)
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for statement in node.body:
                if (
                    isinstance(statement, ast.Assign)
                    and len(statement.targets) == 1
                    and _self_attribute(statement.targets[0])
                    and all(
                        isinstance(n, (ast.Name, ast.BinOp, ast.operator, ast.Load)) for n in ast.walk(statement.value)
                    )
                ):
                    sizes.add(statement.targets[0].attr)
    return Context(frozenset(layers), frozenset(weights), frozenset(sizes), frozenset(norms))


def _self_attribute(node):
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def slips(node, context=Context()):
    """Every slip that can be made at ``node`` (an expression of a graded function or method); ``context``:
    what its class holds."""
    found = []
    if isinstance(node, ast.BinOp):
        found += _scale(node, context) + _product(node, context)
    if isinstance(node, ast.Call):
        name = _name(node)
        for kinds in (_softmax, _mask, _triangle, _reduction, _shape):
            found += kinds(node, name)
        found += _layer(node, name, context)
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "shape"
        and _number(node.slice) == -1
    ):
        fixed = ast.Subscript(node.value, ast.Constant(1), ast.Load())
        found.append(
            Slip(
                "size_from_fixed_axis",
                "a size is read from a fixed axis (shape[1]) instead of the last "
                "one (shape[-1]): right for 2-D inputs, wrong once there are "
                "batch or head dimensions",
                "Read sizes from the end: shape[-1] is the last dimension whatever comes before it.",
                fixed,
            )
        )
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT") and isinstance(node.ctx, ast.Load):
        found.append(
            Slip(
                "transpose_missing",
                f"a transpose (`.{node.attr}`) is left out",
                "Transpose the keys before the product: scores = queries @ keys transposed.",
                node.value,
            )
        )
    if isinstance(getattr(node, "body", None), list) and node.body and isinstance(node.body[0], ast.stmt):
        found += _mask_after_softmax(node)
    if isinstance(node, ast.FunctionDef):
        found += _weights_transposed(node)
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Sub)
        and (
            (isinstance(node.right, ast.Call) and _name(node.right) == "mean")
            or (isinstance(node.right, ast.Name) and ("mean" in node.right.id.lower() or node.right.id in ("mu", "m")))
        )
    ):
        found.append(
            Slip(
                "mean_not_subtracted",
                "the mean is not subtracted: the input is only divided by its standard deviation",
                "Subtract each row's mean first: (x - mean) / sqrt(var + eps).",
                node.left,
            )
        )
    if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 2:
        swapped = ast.Return(ast.Tuple(node.value.elts[::-1], ast.Load()))
        found.append(
            Slip(
                "results_swapped",
                "the two results are returned in the wrong order",
                "Return the results in the order the assignment gives.",
                swapped,
            )
        )
    return found


def _scale(node, context):
    if isinstance(node.op, ast.Div):
        inner = _square_root_of(node.right)
        if inner is None:
            return []
        others = [
            Slip(
                "scale_by_other_size",
                f"the scores are scaled by the square root of `{size}` instead of the size of each key",
                "Divide by the square root of the size of each key (its last dimension).",
                ast.BinOp(
                    node.left,
                    ast.Div(),
                    ast.BinOp(
                        ast.Attribute(ast.Name("self", ast.Load()), size, ast.Load()), ast.Pow(), ast.Constant(0.5)
                    ),
                ),
            )
            for size in sorted(context.sizes)
            if ast.unparse(inner) != f"self.{size}"
        ]
        return others + [
            Slip(
                "scale_by_d",
                "the scores are divided by the dimension itself instead of by its square root",
                "Divide by the square root of the dimension: / d ** 0.5.",
                ast.BinOp(node.left, ast.Div(), inner),
            ),
            Slip(
                "no_scale",
                "the scores are not scaled by the square root of the dimension",
                "Divide the scores by the square root of the key dimension before the softmax.",
                node.left,
            ),
            Slip(
                "scale_multiplied",
                "the scores are multiplied by the square root of the dimension instead of divided by it",
                "Divide by the square root of the dimension; do not multiply.",
                ast.BinOp(node.left, ast.Mult(), node.right),
            ),
        ]
    if isinstance(node.op, ast.Pow) and _number(node.right) == -0.5:
        return [
            Slip(
                "scale_by_d",
                "the scores are divided by the dimension itself instead of by its square root",
                "Scale by the dimension to the power -0.5.",
                ast.BinOp(node.left, ast.Pow(), _literal(-1)),
            ),
            Slip(
                "no_scale",
                "the scores are not scaled by the square root of the dimension",
                "Scale the scores by 1 / sqrt(d) before the softmax.",
                ast.Constant(1.0),
            ),
        ]
    return []


def _product(node, context):
    if not isinstance(node.op, ast.MatMult):
        return []
    transposed = (
        [
            Slip(
                "weight_transposed",
                "a weight matrix is used transposed (x @ W.T instead of x @ W)",
                "Multiply by the weight as it is given: x @ W, with W of shape (in, out).",
                ast.BinOp(node.left, ast.MatMult(), ast.Attribute(node.right, "T", ast.Load())),
            )
        ]
        if isinstance(node.right, ast.Name) and node.right.id.lower().startswith("w")
        else []
    )
    swapped = (
        [
            Slip(
                "part_swapped",
                f"`{other}` is used where `{node.right.attr}` belongs (a copy-paste slip)",
                f"Use self.{node.right.attr} there.",
                ast.BinOp(node.left, ast.MatMult(), ast.Attribute(ast.Name("self", ast.Load()), other, ast.Load())),
            )
            for other in sorted(context.weights - {node.right.attr})
        ]
        if _self_attribute(node.right)
        else []
    )
    return (
        transposed
        + swapped
        + [
            Slip(
                "product_swapped",
                "the two factors of a matrix product are swapped (b @ a instead of a @ b)",
                "Multiply in the order of the formula: weights @ values, queries @ keys transposed.",
                ast.BinOp(node.right, ast.MatMult(), node.left),
            )
        ]
    )


def _softmax(node, name):
    if not name.endswith("softmax"):
        return []
    found = []
    where, dim = _argument(
        node,
        "dim",
        0
        if _receiver(node) is not None
        and name == "softmax"
        and isinstance(node.func, ast.Attribute)
        and _name(node.func.value) not in ("torch", "F", "functional")
        else 1,
    )
    if _number(dim) == -1:
        found.append(
            Slip(
                "softmax_wrong_dim",
                "the softmax is taken over the wrong dimension (dim=-2, down the "
                "columns) instead of along each row (dim=-1)",
                "Take the softmax over the last dimension, so that each row of weights sums to 1.",
                _with_argument(node, where, _literal(-2)),
            )
        )
    scores = (
        node.args[0]
        if node.args
        and not (isinstance(node.func, ast.Attribute) and _name(node.func.value) not in ("torch", "F", "functional"))
        else _receiver(node)
    )
    if scores is not None:
        found.append(
            Slip(
                "softmax_missing",
                "the softmax is left out: the weights are the raw scores",
                "Apply a softmax over the last dimension to the (scaled, masked) scores.",
                scores,
            )
        )
    return found


def _mask(node, name):
    if name not in ("masked_fill", "masked_fill_") or len(node.args) < 2:
        return []
    mask, value = node.args[0], node.args[1]
    inverted = (
        mask.operand
        if isinstance(mask, ast.UnaryOp) and isinstance(mask.op, ast.Invert)
        else ast.UnaryOp(ast.Invert(), mask)
    )
    found = [
        Slip(
            "mask_inverted",
            "the mask is inverted: the positions it should block are attended, and the others blocked",
            "Block exactly the positions the mask marks as not allowed.",
            _with_argument(node, 0, inverted),
        ),
        Slip(
            "mask_missing",
            "the mask is not applied: every position also sees the later tokens",
            "Fill the blocked scores with -inf before the softmax.",
            _receiver(node),
        ),
    ]
    if _is_minus_infinity(value):
        found.append(
            Slip(
                "mask_fill_zero",
                "blocked scores are filled with 0 instead of -inf, so blocked positions "
                "still get weight after the softmax",
                "Fill blocked scores with -inf (float('-inf')), which the softmax turns into 0.",
                _with_argument(node, 1, ast.Constant(0.0)),
            )
        )
    return found


def _triangle(node, name):
    if name not in ("triu", "tril"):
        return []
    method = isinstance(node.func, ast.Attribute) and _name(node.func.value) not in ("torch",)
    where, diagonal = _argument(node, "diagonal", 0 if method else 1)
    value = 0 if diagonal is None else _number(diagonal)
    if value is None:
        return []
    other = (
        ast.Attribute(node.func.value, "tril" if name == "triu" else "triu", ast.Load())
        if isinstance(node.func, ast.Attribute)
        else ast.Name("tril" if name == "triu" else "triu", ast.Load())
    )
    found = [
        Slip(
            "triangle_swapped",
            "the mask takes the wrong triangle: the later tokens where the earlier ones "
            "belong (triu for tril, or the other way)",
            "Let query i attend to keys j <= i: the lower triangle, diagonal included.",
            ast.Call(other, node.args, node.keywords),
        )
    ]
    if value and where is not None:  # the mirror image: triu(m, 1) (the later tokens blocked) as tril(m, -1)
        mirrored = _literal(-value)
        found.append(
            Slip(
                found[0].kind,
                found[0].mistake,
                found[0].fix,
                _with_argument(ast.Call(other, node.args, node.keywords), where, mirrored),
            )
        )
    if (name == "triu" and value == 1) or (name == "tril" and value == 0):  # blocked above it, or allowed up to it
        moved = _literal(value - 1)  # the diagonal moves into the blocked part
        changed = (
            _with_argument(node, where, moved)
            if where is not None
            else ast.Call(node.func, node.args, [*node.keywords, ast.keyword("diagonal", moved)])
        )
        found.append(
            Slip(
                "mask_blocks_diagonal",
                "the mask also blocks the diagonal: a token cannot attend to itself",
                "Let each token attend to itself: block only the later tokens (j > i).",
                changed,
            )
        )
    return found


REDUCTIONS = ("mean", "sum", "var", "std", "amax", "max", "logsumexp", "cumsum")


def _reduction(node, name):
    if name not in REDUCTIONS or not isinstance(node.func, ast.Attribute):
        return []
    found = []
    for k in node.keywords:
        if k.arg == "keepdim" and isinstance(k.value, ast.Constant) and k.value.value is True:
            found.append(
                Slip(
                    "keepdim_dropped",
                    f"the {name} drops the reduced dimension (keepdim=False), so it broadcasts along the wrong axis",
                    "Keep the reduced dimension (keepdim=True) so it lines up with each row.",
                    _with_argument(node, k, ast.Constant(False)),
                )
            )
        if name == "var" and k.arg in ("unbiased", "correction"):
            biased = (k.arg == "unbiased" and k.value.value is False) or (
                k.arg == "correction" and _number(k.value) == 0
            )
            if biased:
                found.append(
                    Slip(
                        "unbiased_variance",
                        "the variance is the unbiased one (divided by n - 1) instead of the biased one (divided by n)",
                        "Use the biased variance: unbiased=False (divide by n).",
                        _with_argument(node, k, ast.Constant(True) if k.arg == "unbiased" else ast.Constant(1)),
                    )
                )
    where, dim = _argument(node, "dim", 0)
    if _number(dim) == -1 and name in ("mean", "var", "std", "sum", "cumsum"):
        found.append(
            Slip(
                "reduction_wrong_dim",
                f"the {name} is taken over dim -2 (across the tokens) instead of "
                f"the last dim (across each token's features)",
                f"Take the {name} over the last dimension (dim=-1).",
                _with_argument(node, where, _literal(-2)),
            )
        )
    if _number(dim) == -2 and name in ("mean", "var", "std", "sum", "cumsum"):
        found.append(
            Slip(
                "reduction_wrong_dim",
                f"the {name} is taken over the last dim (across each token's "
                f"features) instead of dim -2 (across the tokens)",
                f"Take the {name} over the tokens (dim=-2).",
                _with_argument(node, where, _literal(-1)),
            )
        )
    return found


def _shape(node, name):
    found = []
    if name == "transpose" and len(node.args) == 2 and _receiver(node) is not None:
        shown = ", ".join(ast.unparse(a) for a in node.args)
        found.append(
            Slip(
                "transpose_missing",
                f"a `.transpose({shown})` is left out, so two dimensions are in each other's place",
                f"Swap the two dimensions back with .transpose({shown}).",
                _receiver(node),
            )
        )
        found.append(
            Slip(
                "transpose_as_T",
                f"`.T` where `.transpose({shown})` belongs: on a batch, .T reverses every axis, not just two",
                f"Swap only the two axes: .transpose({shown}) (or .mT for the last two).",
                ast.Attribute(_receiver(node), "T", ast.Load()),
            )
        )
    if name in ("view", "reshape") and len(node.args) >= 3 and not any(isinstance(a, ast.Starred) for a in node.args):
        last, before = node.args[-1], node.args[-2]
        if _number(last) != -1 and _number(before) != -1:
            changed = tree_copy(node)
            changed.args[-1], changed.args[-2] = before, last
            found.append(
                Slip(
                    "reshape_order",
                    "a reshape splits the last dimension in the wrong order (the number "
                    "of heads and the head size swapped)",
                    "Split as (..., num_heads, head_dim): heads first, then each head's size.",
                    changed,
                )
            )
    if name in ("cat", "concat", "concatenate") and node.args:
        summed = ast.Call(
            ast.Attribute(
                ast.Call(ast.Attribute(ast.Name("torch", ast.Load()), "stack", ast.Load()), [node.args[0]], []),
                "sum",
                ast.Load(),
            ),
            [ast.Constant(0)],
            [],
        )
        found.append(
            Slip(
                "summed_not_concatenated",
                "the pieces (the heads' outputs) are added together instead of concatenated",
                "Concatenate the heads' outputs along the last dimension (torch.cat(..., dim=-1)).",
                summed,
            )
        )
        where, dim = _argument(node, "dim", 1)
        if _number(dim) == -1:
            found.append(
                Slip(
                    "concatenated_wrong_dim",
                    "the pieces are concatenated along the wrong dimension "
                    "(dim=-2, the tokens, instead of dim=-1, the features)",
                    "Concatenate the heads along the last dimension (dim=-1).",
                    _with_argument(node, where, _literal(-2)),
                )
            )
    return found


def _mask_after_softmax(holder):
    """The mask moved from the scores to the weights: blocked weights set to 0 after the softmax (the rows then
    sum to less than 1), where one body masks the scores (or does so under an ``if``: ``if self.causal:``) and,
    later, takes a softmax into a name (then masked under the same ``if``)."""
    body = holder.body
    for i, statement in enumerate(body):
        found, guard, at = _masking(statement), None, 0
        if found is None and isinstance(statement, ast.If) and not statement.orelse:
            inside = [(k, _masking(s)) for k, s in enumerate(statement.body)]
            inside = [(k, m) for k, m in inside if m is not None]
            if len(inside) == 1:
                (at, found), guard = inside[0], statement
        if found is None:
            continue
        masking, kept = found
        if guard is not None:
            kept = ast.If(guard.test, [*guard.body[:at], kept, *guard.body[at + 1 :]], [])
        for j in range(i + 1, len(body)):
            later = body[j]
            if (
                isinstance(later, ast.Assign)
                and len(later.targets) == 1
                and isinstance(later.targets[0], ast.Name)
                and any(isinstance(n, ast.Call) and _name(n).endswith("softmax") for n in ast.walk(later.value))
            ):
                weights = later.targets[0].id
                changed = tree_copy(holder)
                after: ast.stmt = ast.Assign(
                    [ast.Name(weights, ast.Store())],
                    ast.Call(
                        ast.Attribute(ast.Name(weights, ast.Load()), "masked_fill", ast.Load()),
                        [masking.args[0], ast.Constant(0.0)],
                        [],
                    ),
                )
                if guard is not None:
                    after = ast.If(guard.test, [after], [])
                changed.body = [*body[:i], kept, *body[i + 1 : j + 1], after, *body[j + 1 :]]
                return [
                    Slip(
                        "mask_after_softmax",
                        "the mask is applied after the softmax, to the weights (blocked "
                        "weights set to 0, so the rows no longer sum to 1) instead of to "
                        "the scores before it",
                        "Mask the scores with -inf before the softmax; the softmax then gives the blocked "
                        "positions 0 and each row still sums to 1.",
                        changed,
                    )
                ]
    return []


def _masking(statement):
    """(the call, what stands in the statement's place without it) of a statement that masks scores with -inf
    (``scores = scores.masked_fill(m, -inf)``, ``scores.masked_fill_(m, -inf)``); None for any other."""
    masking = statement.value if isinstance(statement, (ast.Assign, ast.Expr)) else None
    if not (
        isinstance(masking, ast.Call)
        and _name(masking) in ("masked_fill", "masked_fill_")
        and len(masking.args) >= 2
        and _is_minus_infinity(masking.args[1])
        and _receiver(masking)
    ):
        return None
    kept = ast.Pass() if isinstance(statement, ast.Expr) else ast.Assign(statement.targets, _receiver(masking))
    return masking, kept


def _weights_transposed(function):
    """Every ``x @ w`` of a function (``w`` a weight: its name starts with w) as ``x @ w.T``: the weights read as
    (out, in), nn.Linear's layout, where they are (in, out)."""
    changed = tree_copy(function)
    products = [
        n
        for n in ast.walk(changed)
        if isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.MatMult)
        and isinstance(n.right, ast.Name)
        and n.right.id.lower().startswith("w")
    ]
    if len(products) < 2:
        return []
    for product in products:
        product.right = ast.Attribute(product.right, "T", ast.Load())
    return [
        Slip(
            "weights_transposed",
            "the weight matrices are used transposed (x @ W.T instead of x @ W, "
            "nn.Linear's layout where the weights are given as (in, out))",
            "Multiply by each weight as it is given: x @ W, with W of shape (in, out).",
            changed,
        )
    ]


def _layer(node, name, context):
    if not (_self_attribute(node.func) and len(node.args) == 1 and not node.keywords):
        return []
    found = [
        Slip(
            "layer_missing",
            f"the `{name}` layer is not applied",
            f"Apply self.{name} where the reference does.",
            node.args[0],
        )
    ]
    found += [
        Slip(
            "part_swapped",
            f"`{other}` is used where `{name}` belongs (a copy-paste slip)",
            f"Use self.{name} there.",
            ast.Call(ast.Attribute(ast.Name("self", ast.Load()), other, ast.Load()), node.args, []),
        )
        for other in sorted(context.layers - {name})
    ]
    return found
