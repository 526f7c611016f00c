"""The hand-out: the spec's signatures with docstrings and ``NotImplementedError`` stubs.

``python -m attention_core template > attention_student.py`` writes it. Graded untouched,
every check says "not implemented".
"""

import ast
import inspect
import io
import textwrap
import tokenize

from attention_core import spec
from attention_core.harness.reading.assignment import own_doc

FILE_NAME = "attention_student.py"  # what the hand-out is saved as, and what a Gradescope submission holds

HEADER = '''"""Attention, by hand: implement each function below.

Graded against worked examples from attention tutorials. Conventions used throughout:

* Tensors are ``torch.Tensor`` of any floating dtype; return results in the dtype you are given.
  Leading batch dimensions may come before the shapes written below.
* A boolean mask is True where a query MAY attend to a key (as in
  ``torch.nn.functional.scaled_dot_product_attention``); a floating mask is ADDED to the scores.
* ``attention`` scales the scores by ``1 / sqrt(d_k)`` unless ``scale`` is given.
* Do not change the tensors you are given (no ``q /= ...``): compute new ones. Your functions must
  stay differentiable: no ``.detach()``, ``.tolist()``/NumPy round trips or ``torch.no_grad()``.
"""

import math

import torch
'''


def template():
    """The hand-out module's text."""
    return HEADER + "".join(_function(f) for f in spec.SPEC if f.graded)


def _function(function):
    args = "\n".join(
        f"        {p.name}: {p.doc}" + (f" (default {p.signature().split('=', 1)[1]})" if not p.required else "")
        for p in function.params
        if p.doc or not p.required
    )
    doc = [function.purpose]
    if args:
        doc += ["", "    Args:", args]
    doc += ["", "    Returns:", f"        {_plain(function.summary)}"]
    body = "\n".join(doc)
    return (
        f'\n\ndef {function.signature()}:\n    """{body}\n    """\n    raise NotImplementedError("{function.name}")\n'
    )


def _plain(text):
    """The README's markdown summary as docstring text."""
    return text.replace("`", "")


def assignment_template(assignment, fmt="py"):
    """The hand-out of ``assignment``: for the built-in one, :func:`template`; for a teacher's, the reference's
    imports, then each graded function and class with its signature and docstring and a body that raises
    NotImplementedError. ``fmt="ipynb"``: the same as a notebook's JSON text (a cell per name)."""
    if assignment.builtin:
        parts = [HEADER, *(_function(f) for f in spec.SPEC if f.graded)]
    else:
        parts = [_teacher_header(assignment), *(_stub(assignment, g) for g in assignment.graded.values())]
    if fmt == "ipynb":
        return _notebook(parts)
    return "".join(parts)


def _teacher_header(assignment):
    """The hand-out's first lines: its title, the reference's imports, and the assignments its signatures read."""
    module_source = inspect.getsource(assignment.reference)
    tree = ast.parse(module_source)
    imports = [
        ast.get_source_segment(module_source, node)
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    needed = _needed(module_source, _signatures(assignment))
    title = assignment.settings.title or assignment.name
    return (
        f'"""{title}: implement each function and class below."""\n\n'
        + "\n".join(imports)
        + "\n"
        + ("\n" + "\n".join(needed) + "\n" if needed else "")
    )


def _signatures(assignment):
    """The signature texts the stubs copy: each graded function's, each graded class's __init__ and forward."""
    found = []
    for graded in assignment.graded.values():
        source = textwrap.dedent(inspect.getsource(getattr(assignment.reference, graded.name)))
        node = ast.parse(source).body[0]
        defs = (
            [node]
            if not graded.is_class
            else [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name in ("__init__", "forward")]
        )
        found += [_signature(source, d, "") for d in defs]
    return found


def _stub(assignment, graded):
    value = getattr(assignment.reference, graded.name)
    doc = _docstring(own_doc(value), "    ")
    source = textwrap.dedent(inspect.getsource(value))
    node = ast.parse(source).body[0]
    if not graded.is_class:
        return (
            f"\n\ndef {graded.name}{_signature(source, node, '')}\n{doc}"
            f'    raise NotImplementedError("{graded.name}")\n'
        )
    bases = ", ".join(ast.unparse(b) for b in node.bases) or "nn.Module"
    layers = _layers(node)
    if layers:
        named = ", ".join(f"self.{attr} ({kind})" for attr, kind in layers)
        note = textwrap.fill(
            f"Your instance is given the reference's initial parameters by name: make {named} in "
            f"__init__, with these names.",
            96,
        )
        doc = _docstring(f"{own_doc(value)}\n\n{note}".strip(), "    ")
    forward_doc = _docstring(own_doc(value.forward), "        ")
    methods = {f.name: f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    call = ", ".join(["self", *(p.signature() for p in graded.call_params)])
    own = ", ".join(["self", *(p.signature() for p in graded.params)])
    init = _signature(source, methods["__init__"], "    ") if "__init__" in methods else f"({own}):"
    forward = _signature(source, methods["forward"], "    ") if "forward" in methods else f"({call}):"
    return (
        f"\n\nclass {graded.name}({bases}):\n{doc}\n"
        f"    def __init__{init}\n        super().__init__()\n"
        f'        raise NotImplementedError("{graded.name}.__init__")\n\n'
        f"    def forward{forward}\n{forward_doc}"
        f'        raise NotImplementedError("{graded.name}.forward")\n'
    )


def _signature(source, node, indent):
    """The text of a ``def``'s signature as the reference writes it, from its opening parenthesis to the colon:
    ``(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:`` (annotations, defaults, comments and line breaks
    as written; a continuation line re-indented under ``indent``). Read by Python's tokenizer: a parenthesis or
    a colon in a comment or a string is not the signature's."""
    lines = source.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: node.lineno - 1]) + node.col_offset
    text = source[start:]
    opening = close = None
    depth = 0
    offsets = [0]
    for line in text.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type != tokenize.OP:
                continue
            at = offsets[token.start[0] - 1] + token.start[1]
            if token.string in "([{":
                opening = at if opening is None else opening
                depth += 1
            elif token.string in ")]}":
                depth -= 1
            elif token.string == ":" and depth == 0 and opening is not None:
                close = at
                break
    except (tokenize.TokenError, IndentationError, SyntaxError):
        close = None
    if opening is None or close is None:
        returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
        return f"({ast.unparse(node.args)}){returns}:"
    signature = text[opening : close + 1]
    first, *rest = signature.split("\n")
    own = len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip())
    return "\n".join([first, *(indent + line[own:] if line[:own].isspace() else line for line in rest)])


def _needed(source, signatures):
    """The reference's top-level assignments of the names its copied signatures use (``EPS = 1e-6``, ``Tensor =
    torch.Tensor``), in its order: the hand-out must define what its signatures read."""
    used = set()
    for signature in signatures:
        try:
            tree = ast.parse(f"def _{signature.rstrip(':')}: pass" if signature.startswith("(") else "")
        except SyntaxError:
            continue
        used |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    kept = []
    for node in ast.parse(source).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id in used for t in targets):
            kept.append(ast.get_source_segment(source, node))
    return kept


def _layers(node):
    """(attribute, what makes it) for each ``self.<attribute> = <Class>(...)`` of a class's ``__init__``: the
    names the grader matches parameters by (``W_query``, ``nn.Linear``)."""
    init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    found = []
    for statement in ast.walk(init) if init is not None else ():
        if not (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call)):
            continue
        made = ast.unparse(statement.value.func)
        if not made.split(".")[-1][:1].isupper():
            continue
        for target in statement.targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                found.append((target.attr, made))
    return found


def _params(params):
    return ", ".join(p.signature() for p in params)


def _docstring(text, indent):
    if not text:
        return ""
    body = textwrap.indent(text.replace('"""', "'''"), indent).lstrip()
    return f'{indent}"""{body}\n{indent}"""\n'


def _notebook(parts):
    import nbformat  # noqa: PLC0415

    cells = [nbformat.v4.new_code_cell(part.strip("\n")) for part in parts]
    for number, cell in enumerate(cells, 1):
        cell.id = f"cell-{number}"  # the same notebook every time
    return nbformat.writes(nbformat.v4.new_notebook(cells=cells)) + "\n"
