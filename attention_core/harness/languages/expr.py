"""A small, safe expression language for deriving tensors in case files.

Case files are data written by people, so their expressions are never handed to Python's
``eval``. :func:`parse` reads the text with ``ast.parse(mode="eval")`` and checks every node
against an allow-list, once; :meth:`Expr.evaluate` then walks the validated tree with a
dispatch table keyed by node type. Examples::

    tril(ones(8, 8)) / tril(ones(8, 8)).sum(1, keepdim=True)
    (matmul_qk * 3 ** -0.5).masked_fill(tril(ones(8, 8)) == 0, -inf)
    attention(q, k, v, scale=1)        # a function the caller supplies

Names resolve from the caller's scope, then :data:`CONSTANTS`; calls from the caller's ``functions``,
then :data:`BUILTINS` (see :mod:`.expr_builtins`). A number beyond float64's range is refused.

Limits hold before anything is allocated. No result may hold more than :data:`MAX_ELEMENTS` = 2**24
elements (an expanded view too), and the new tensors of one evaluation at most :data:`MAX_TOTAL_ELEMENTS`
= 2**25, or what a :class:`Budget` shared by several evaluations allows (views and the scope's tensors
are free). At 8 bytes (float64), 2**25 elements are 256 MiB: a case re-run in float64 several times
stays under 1.5 GB. Tuples and lists built with ``+`` hold at most :data:`MAX_SEQUENCE` items. Torch
sizes the operations itself: one whose quick bound (from its operands' shapes) could pass a limit is
first run on the meta device (shapes without storage) and refused if its result is too large; one
whose size depends on values the meta device lacks is refused there. Functions supplied by the
caller are called as they are, and their results charged once they return.

Columns in errors are 1-based character positions in the source text as given.
"""

from __future__ import annotations

import ast
import operator
import types
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import torch

from attention_core.harness.languages.expr_builtins import (
    BUILTINS,
    CONSTANTS,
    CREATION,
    DTYPE_ALIASES,
    MAX_MULTIPLY_ADDS,
    MODULE_PREFIXES,
    RESULT_FIELDS,
    SIZE_BOUNDS,
    TENSOR_METHODS,
    TENSOR_PROPERTIES,
    Budget,
    Refused,
    check_to,
    created_elements,
    index_bound,
    matmul,
    multiply_adds,
    power,
    quick_bound,
    size_on_meta,
)
from attention_core.harness.languages.expr_tree import attr_column, called_name, makes_instance, node_column, segment  # noqa: F401
from attention_core.harness.languages.expr_tree import column as source_column
from attention_core.harness.text import read_float

__all__ = ["ExprError", "Expr", "Budget", "parse", "BUILTINS", "CONSTANTS", "TENSOR_METHODS", "TENSOR_PROPERTIES"]

MAX_SOURCE_CHARS = 2000
MAX_DEPTH = 50
MAX_ELEMENTS = 2**24  # elements one result may hold
MAX_TOTAL_ELEMENTS = 2**25  # elements one evaluation may create, all operations together
MAX_SEQUENCE = 2**16  # items in a tuple or list built with `+`

Tensor = torch.Tensor


# --------------------------------------------------------------------------- errors


class ExprError(ValueError):
    """A refused or failed expression: ``message``, 1-based ``column`` (or None), ``source``."""

    def __init__(self, message: str, column: int | None = None, source: str | None = None):
        self.message, self.column, self.source = message, column, source
        super().__init__(message, column, source)

    def __str__(self) -> str:
        return self.message if self.column is None else f"{self.message} (at column {self.column})"

    def __reduce__(self):
        # Keep message, column and source through pickling (e.g. pytest-xdist workers).
        return (type(self), (self.message, self.column, self.source))


# --------------------------------------------------------------------------- sizing


def _run(ctx: _Context, node: ast.AST, fn: Callable, args, kwargs=None, bound: Callable = quick_bound):
    """``fn(*args, **kwargs)``, sized on the meta device first unless its quick bound is small."""
    kwargs, budget = kwargs or {}, ctx.budget
    try:
        budget.check_time()
        work = multiply_adds(fn, args)
        if work > MAX_MULTIPLY_ADDS:
            raise Refused(f"would take {work} multiply-adds; the limit is {MAX_MULTIPLY_ADDS}")
        most = bound(args, kwargs)
        if most > MAX_ELEMENTS or budget.spent + most > budget.limit:
            largest, created = size_on_meta(fn, args, kwargs)
            if largest > MAX_ELEMENTS:
                raise Refused(f"would create {largest} elements; the limit is {MAX_ELEMENTS}")
            budget.reserve(created)
        result = fn(*args, **kwargs)
    except Exception as exc:
        raise ctx.failure(node, exc) from exc
    budget.spent += created_elements(result, args)
    return result


# --------------------------------------------------------------------------- validation

_BINOPS: dict[type, Callable] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: power,
    ast.MatMult: matmul,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_UNARYOPS: dict[type, Callable] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
    ast.Not: operator.not_,
}
_COMPAREOPS: dict[type, Callable] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_OP_SYMBOLS = {ast.LShift: "<<", ast.RShift: ">>", ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}

# Node types refused outright, with the reason given.
_REFUSED: dict[type, str] = {
    ast.JoinedStr: "f-strings are not allowed",
    ast.Dict: "dicts are not allowed",
    ast.Set: "sets are not allowed",
    **dict.fromkeys([ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp], "comprehensions are not allowed"),
    ast.Lambda: "lambdas are not allowed",
    ast.IfExp: "conditional expressions (`a if c else b`) are not allowed",
    ast.NamedExpr: "assignment expressions (`:=`) are not allowed",
    ast.Starred: "starred expressions (`*x`) are not allowed",
    ast.Await: "await is not allowed",
    **dict.fromkeys([ast.Yield, ast.YieldFrom], "yield is not allowed"),
    ast.BoolOp: "`and`/`or` are not allowed; use `&` and `|` on masks",
}

# What ``float("...")`` spells that the language writes as a name.
_SPELLED = frozenset({"inf", "infinity", "nan"})

# Keyword arguments that would write into a tensor or pick a device.
_REFUSED_KEYWORDS = frozenset({"out", "device", "default_dtype"})

# Receivers that can never be a tensor or a record.
_LITERAL_NODES = (ast.Constant, ast.List, ast.Tuple)


class _Validator:
    """One pass over a parsed tree: refuses what is not allowed, collects names and calls."""

    def __init__(self, source: str, functions: frozenset[str], any_function: bool = False):
        self.source, self.functions, self.any_function = source, functions, any_function
        self.top: ast.AST | None = None  # a graded call's whole expression: `Cls(...)(...)` is allowed there
        self.names: set[str] = set()
        self.calls: set[str] = set()

    def refuse(self, message: str, node: ast.AST | None = None, column: int | None = None) -> NoReturn:
        if column is None and node is not None:
            column = node_column(self.source, node)
        raise ExprError(message, column, self.source)

    def visit(self, node: Any, depth: int) -> None:  # dispatched on its exact node type
        if node is None:  # an absent part of a slice
            return
        if depth > MAX_DEPTH:
            self.refuse(f"expression is nested too deeply; the limit is {MAX_DEPTH}", node)
        kind, children = type(node), ()  # type: tuple[type, tuple[Any, ...]]
        if kind is ast.Constant:
            for refused, name in ((str, "strings"), (bytes, "bytes"), (complex, "complex numbers")):
                if isinstance(node.value, refused):
                    if isinstance(node.value, str) and node.value.strip().lower().lstrip("+-") in _SPELLED:
                        self.refuse(
                            f"strings are not allowed: write `inf` or `nan` as they are, not as float({node.value!r})",
                            node,
                        )
                    self.refuse(f"{name} are not allowed", node)
            if isinstance(node.value, float):  # float64's largest, rounded, is kept; past it is refused
                node.value, why = read_float(ast.get_source_segment(self.source.lstrip(), node), node.value)
                if why:
                    self.refuse(why, node)
        elif kind is ast.Name:
            self.check_identifier(node.id, "names", node)
            if node.id not in CONSTANTS:
                self.names.add(node.id)
        elif kind in (ast.Tuple, ast.List):
            children = node.elts
        elif kind is ast.BinOp:
            self.check_operator(node.op, _BINOPS, node)
            children = node.left, node.right
        elif kind is ast.UnaryOp:
            children = (node.operand,)
        elif kind is ast.Compare:
            if len(node.ops) > 1:
                self.refuse("chained comparisons are not allowed; compare two values at a time", node)
            self.check_operator(node.ops[0], _COMPAREOPS, node)
            children = node.left, node.comparators[0]
        elif kind is ast.Subscript:
            children = node.value, node.slice
        elif kind is ast.Slice:
            children = node.lower, node.upper, node.step
        elif kind is ast.Attribute:
            self.check_attribute(node)
            children = (node.value,)
        elif kind is ast.Call:
            self.check_call(node, depth)
        else:
            self.refuse(_REFUSED.get(kind, f"{kind.__name__} expressions are not allowed"), node)
        for child in children:
            self.visit(child, depth + 1)

    def check_call(self, node: ast.Call, depth: int) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            self.check_identifier(func.id, "names", func)
            if func.id not in self.functions and not self.any_function:
                self.refuse(f"unknown function '{func.id}'", func)
            self.calls.add(func.id)
        elif isinstance(func, ast.Call) and node is self.top and isinstance(func.func, ast.Name):
            self.check_call(func, depth + 1)  # a class made, then called: `CausalAttention(3, 2)(x)`
        elif isinstance(func, ast.Attribute):
            self.check_attribute(func)
            if func.attr not in TENSOR_METHODS:
                plain = func.attr.removesuffix("_")
                hint = (
                    f": nothing is changed in place, use `{plain}`"
                    if plain != func.attr and plain in TENSOR_METHODS
                    else ""
                )
                self.refuse(f"method '{func.attr}' is not allowed{hint}", column=attr_column(self.source, func))
            self.visit(func.value, depth + 1)
        else:
            self.refuse("only named functions and tensor methods can be called", func)
        for argument in node.args:
            self.visit(argument, depth + 1)
        for keyword in node.keywords:
            if keyword.arg is None:
                self.refuse("`**` arguments are not allowed", keyword)
            self.check_identifier(keyword.arg, "keyword arguments", keyword)
            if keyword.arg in _REFUSED_KEYWORDS:
                self.refuse(f"keyword argument '{keyword.arg}' is not allowed", keyword)
            self.visit(keyword.value, depth + 1)

    def check_identifier(self, name: str, kind: str, node: ast.AST) -> None:
        if name.startswith("_"):
            self.refuse(f"{kind} starting with '_' are not allowed: '{name}'", node)

    def check_attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_"):
            self.refuse(
                f"attributes starting with '_' are not allowed: '{node.attr}'", column=attr_column(self.source, node)
            )
        if isinstance(node.value, _LITERAL_NODES):
            self.refuse("attributes and methods are only allowed on tensors and records", node)

    def check_operator(self, op: ast.AST, allowed: Mapping, node: ast.AST) -> None:
        if type(op) not in allowed:
            self.refuse(f"operator `{_OP_SYMBOLS.get(type(op), type(op).__name__)}` is not allowed", node)


# --------------------------------------------------------------------------- parse


def _parse_tree(source: str) -> ast.Expression:
    # ast.parse with its failures turned into ExprError.
    try:
        return ast.parse(source.lstrip(), mode="eval")
    except SyntaxError as exc:
        if exc.offset:
            raise ExprError(
                f"syntax error: {exc.msg}", source_column(source, exc.lineno or 1, exc.offset - 1), source
            ) from None
        column = len(source.rstrip()) + 1
        raise ExprError(f"syntax error: {exc.msg} (the expression ends early)", column, source) from None
    except (RecursionError, MemoryError):
        raise ExprError(f"expression is nested too deeply; the limit is {MAX_DEPTH}", None, source) from None
    except ValueError as exc:  # e.g. a NUL character
        raise ExprError(f"syntax error: {exc}", None, source) from None


class _Unprefixed(ast.NodeTransformer):
    """``torch.softmax``, ``F.softmax``, ``math.sqrt``, ``torch.inf``, ``torch.float``: the plain name of the language
    that pasted code writes with its module in front (only a name the language has: ``F.weight`` stays)."""

    def __init__(self, known):
        self.known = known

    def visit_Attribute(self, node):
        module = _dotted(node.value) if isinstance(node.ctx, ast.Load) else ""
        if module in MODULE_PREFIXES:
            name = DTYPE_ALIASES.get(node.attr, node.attr) if module == "torch" else node.attr
            if name in self.known:
                return ast.copy_location(ast.Name(name, ast.Load()), node)
        return self.generic_visit(node)


_UNPREFIXED = _Unprefixed(frozenset(BUILTINS) | frozenset(CONSTANTS))  # (it keeps no state between trees)


def _dotted(node):
    """``a.b.c`` as its text; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def parse(source: str, *, extra_functions: Collection[str] = (), any_function: bool = False) -> Expr:
    """Parse and validate an expression, once.

    Args:
        source: the expression text (at most 2000 characters).
        extra_functions: names of functions the caller will supply to :meth:`Expr.evaluate`
            (e.g. ``"attention"``); these and :data:`BUILTINS` are the only names that may be called.
        any_function: a graded call, whose names are checked later against an assignment: any plain
            name may be called, and the whole expression may make a class and call it, ``C(a)(x)``.

    Returns:
        An :class:`Expr` that can be evaluated many times.

    Raises:
        ExprError: naming the refused construct and its column.
    """
    if not isinstance(source, str):
        raise ExprError(f"an expression must be a string, not {type(source).__name__}")
    if len(source) > MAX_SOURCE_CHARS:
        raise ExprError(f"expression is {len(source)} characters long; the limit is {MAX_SOURCE_CHARS}", None, source)
    tree = _parse_tree(source)
    try:
        tree = _UNPREFIXED.visit(tree)
    except RecursionError:
        raise ExprError(f"expression is nested too deeply; the limit is {MAX_DEPTH}", None, source) from None
    validator = _Validator(source, frozenset(BUILTINS) | frozenset(extra_functions), any_function)
    validator.top = tree.body if any_function else None
    validator.visit(tree.body, 1)
    return Expr(source, tree, frozenset(validator.names), frozenset(validator.calls))


# --------------------------------------------------------------------------- evaluation


class _Context:
    """What one evaluation needs: the scope, the functions, the device and dtype, the budget."""

    __slots__ = ("source", "scope", "functions", "device", "dtype", "budget")

    def __init__(self, source, scope, functions, device, dtype, budget):
        self.source, self.scope, self.functions = source, scope, functions or {}
        self.device, self.dtype = torch.device(device), dtype
        self.budget = Budget(MAX_TOTAL_ELEMENTS) if budget is None else budget

    def error(self, message: str, node: ast.AST) -> ExprError:
        return ExprError(message, node_column(self.source, node), self.source)

    def failure(self, node: ast.AST, exc: BaseException) -> ExprError:
        # "`q @ k` failed: <torch's first line>", or "refused" for a refusal.
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        verb = "refused" if isinstance(exc, Refused) else "failed"
        return self.error(f"`{segment(self.source, node)}` {verb}: {text}", node)


def _evaluate(node: ast.AST, ctx: _Context):
    return _EVALUATORS[type(node)](node, ctx)


def _eval_name(node: ast.Name, ctx: _Context):
    if node.id in ctx.scope:
        return ctx.scope[node.id]
    if node.id in CONSTANTS:
        return CONSTANTS[node.id]
    raise ctx.error(f"unknown name '{node.id}'", node)


def _eval_binop(node: ast.BinOp, ctx: _Context):
    left, right = _evaluate(node.left, ctx), _evaluate(node.right, ctx)
    op = _BINOPS[type(node.op)]
    sequences = isinstance(left, (tuple, list)), isinstance(right, (tuple, list))
    if any(sequences) and op is not operator.add:  # no `[0] * 10**9` (nor `[0] * tensor([10**9])`)
        raise ctx.error(f"`{segment(ctx.source, node)}` failed: only `+` is allowed on tuples and lists", node)
    if all(sequences) and len(left) + len(right) > MAX_SEQUENCE:
        length = len(left) + len(right)
        raise ctx.failure(node, Refused(f"would create a sequence of {length} items; the limit is {MAX_SEQUENCE}"))
    return _apply(node, ctx, op, (left, right))


def _apply(node, ctx: _Context, op: Callable, operands):
    # An operator: sized when it has a tensor operand, else applied to numbers (or shapes).
    if any(isinstance(x, Tensor) for x in operands):
        return _run(ctx, node, op, operands)
    try:
        return op(*operands)
    except Exception as exc:
        raise ctx.failure(node, exc) from exc


def _eval_subscript(node: ast.Subscript, ctx: _Context):
    value, index = _evaluate(node.value, ctx), _evaluate(node.slice, ctx)
    if not isinstance(value, (Tensor, tuple, list)):  # torch.Size is a tuple
        raise ctx.error(f"`{segment(ctx.source, node)}` failed: cannot index a {type(value).__name__}", node)
    if isinstance(value, Tensor):
        return _run(ctx, node, operator.getitem, (value, index), bound=index_bound)
    return _apply(node, ctx, operator.getitem, (value, index))


def _eval_attribute(node: ast.Attribute, ctx: _Context):
    value = _evaluate(node.value, ctx)
    attr = node.attr
    if isinstance(value, Tensor):
        if attr in TENSOR_PROPERTIES:
            return getattr(value, attr)
        hint = "; it is a method, call it" if attr in TENSOR_METHODS else ""
        problem = f"tensors have no property '{attr}'{hint}"
    elif isinstance(value, types.SimpleNamespace):
        fields = vars(value)  # the record's own fields only
        if attr in fields:
            return fields[attr]
        problem = f"the record has no field '{attr}' (it has: {', '.join(sorted(fields)) or 'none'})"
    elif attr in RESULT_FIELDS.get(type(value), ()):  # x.max(dim).values
        return getattr(value, attr)
    else:
        problem = f"cannot read attribute '{attr}' of a {type(value).__name__}"
    raise ctx.error(f"`{segment(ctx.source, node)}` failed: {problem}", node)


def _eval_arguments(node: ast.Call, ctx: _Context):
    # Positional and keyword argument values, in source order.
    args = [_evaluate(argument, ctx) for argument in node.args]
    return args, {keyword.arg: _evaluate(keyword.value, ctx) for keyword in node.keywords}


def _eval_call(node: ast.Call, ctx: _Context):
    func: Any = node.func  # an Attribute (a method), else a Name
    if type(func) is ast.Attribute:
        return _call_method(node, func, ctx)
    supplied = ctx.functions.get(func.id)
    builtin = BUILTINS.get(func.id)
    if supplied is None and builtin is None:
        raise ctx.error(f"function '{func.id}' was not supplied", func)
    args, kwargs = _eval_arguments(node, ctx)
    if supplied is not None:  # the caller's: not sized, and its exceptions pass through unchanged
        result = supplied(*args, **kwargs)
        ctx.budget.spent += created_elements(result, args)
        return result
    if func.id in CREATION:
        kwargs.update(device=ctx.device, default_dtype=ctx.dtype)
    assert builtin is not None  # (supplied by no caller: a builtin, or refused above)
    return _run(ctx, node, builtin, args, kwargs, SIZE_BOUNDS.get(func.id, quick_bound))


def _call_method(node: ast.Call, func: ast.Attribute, ctx: _Context):
    receiver = _evaluate(func.value, ctx)
    name = func.attr
    if not isinstance(receiver, Tensor):
        raise ctx.error(
            f"`{segment(ctx.source, node)}` failed: '{name}' is a tensor method, "
            f"and the value is a {type(receiver).__name__}",
            node,
        )
    args, kwargs = _eval_arguments(node, ctx)
    args = [receiver, *args]
    if name == "to":
        try:
            check_to(args[1:], kwargs)
        except Refused as exc:
            raise ctx.failure(node, exc) from None
    method = matmul if name == "matmul" else getattr(Tensor, name)
    return _run(ctx, node, method, args, kwargs, SIZE_BOUNDS.get(name, quick_bound))


_EVALUATORS: dict[type, Callable] = {
    ast.Constant: lambda node, ctx: node.value,
    ast.Name: _eval_name,
    ast.Tuple: lambda node, ctx: tuple([_evaluate(element, ctx) for element in node.elts]),
    ast.List: lambda node, ctx: [_evaluate(element, ctx) for element in node.elts],
    ast.BinOp: _eval_binop,
    ast.UnaryOp: lambda node, ctx: _apply(node, ctx, _UNARYOPS[type(node.op)], (_evaluate(node.operand, ctx),)),
    ast.Compare: lambda node, ctx: _apply(
        node, ctx, _COMPAREOPS[type(node.ops[0])], (_evaluate(node.left, ctx), _evaluate(node.comparators[0], ctx))
    ),
    ast.Slice: lambda node, ctx: slice(
        *(part if part is None else _evaluate(part, ctx) for part in (node.lower, node.upper, node.step))
    ),
    ast.Subscript: _eval_subscript,
    ast.Attribute: _eval_attribute,
    ast.Call: _eval_call,
}


# --------------------------------------------------------------------------- Expr


@dataclass(frozen=True)
class Expr:
    """A validated expression: evaluate it as often as needed.

    Attributes:
        source: the text as given.
        tree: the validated ``ast.Expression``.
        names: free variable names it reads (not functions, not :data:`CONSTANTS`).
        calls: plain function names it calls (not methods).
    """

    source: str
    tree: ast.Expression = field(compare=False, repr=False)
    names: frozenset[str] = frozenset()
    calls: frozenset[str] = frozenset()

    def evaluate(
        self,
        scope: Mapping[str, object],
        *,
        functions: Mapping[str, Callable] | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        budget: Budget | None = None,
    ) -> object:
        """Evaluate with ``scope`` for names and ``functions`` for caller-supplied calls.

        Creation functions build on ``device``; their floating results are ``dtype``. The new
        tensors are charged to ``budget`` (shared by evaluations that pass the same one), else
        to a budget of :data:`MAX_TOTAL_ELEMENTS` for this evaluation alone. Failures of
        builtins, methods and operators raise :class:`ExprError` quoting the failing
        sub-expression; exceptions from ``functions`` propagate unchanged.
        """
        ctx = _Context(self.source, scope, functions, device, dtype, budget)
        return _evaluate(self.tree.body, ctx)

    def call_arguments(
        self,
        scope: Mapping[str, object],
        *,
        functions: Mapping[str, Callable] | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        budget: Budget | None = None,
    ) -> tuple[str, list, dict]:
        """For an expression that is one call of a named function, ``f(a, b, c=d)``: evaluate
        only its arguments, as :meth:`evaluate` would, and return ``(name, args, kwargs)``
        without calling it.

        Raises:
            ExprError: if the expression is not a call of a plain name, or an argument fails.
        """
        node: Any = self.tree.body  # a Call, once called_name has said so
        name = called_name(self.tree)
        if name is None:
            raise ExprError(
                "the expression must be one call of a named function, e.g. `f(x, y)`",
                node_column(self.source, node),
                self.source,
            )
        args, kwargs = _eval_arguments(node, _Context(self.source, scope, functions, device, dtype, budget))
        return name, args, kwargs

    def init_arguments(
        self,
        scope: Mapping[str, object],
        *,
        functions: Mapping[str, Callable] | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        budget: Budget | None = None,
    ) -> tuple[list, dict] | None:
        """For ``C(a, b)(x)``, a class made then called: the arguments that make it, ``(args, kwargs)``,
        evaluated as :meth:`call_arguments` does; None for a plain call ``f(x)``."""
        node = self.tree.body
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Call)):
            return None
        return _eval_arguments(node.func, _Context(self.source, scope, functions, device, dtype, budget))
