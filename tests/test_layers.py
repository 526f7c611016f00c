"""The package's import graph: each layer imports only those beneath it, and no modules import each other in a
circle (lazy imports inside functions included: they are arrows too)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "attention_core"
# From the ground up; a module imports its own layer or those beneath it.
LAYERS = [
    ("attention_core", "attention_core.spec", "attention_core.reference", "attention_core.instances"),
    ("attention_core.harness", "attention_core.harness.text"),
    ("attention_core.harness.languages",),
    ("attention_core.harness.reading",),
    ("attention_core.harness.checking",),
    ("attention_core.harness.plugin", "attention_core.report", "attention_core.authoring"),
    # grading's rooms (docs/architecture.md), from taking submissions in to the platforms' files
    ("attention_core.grading", "attention_core.grading.intake", "attention_core.grading.server"),
    ("attention_core.grading.process",),
    ("attention_core.grading.properties",),
    ("attention_core.grading.naming",),
    ("attention_core.grading.judging",),
    ("attention_core.grading.outputs",),
    ("attention_core.grading.platforms",),
    ("attention_core.kit", "attention_core.checks"),
    ("attention_core.cli", "attention_core.__main__"),
]


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)  # `from pkg import module`


def _layer(module):
    best = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return best[0]


def _graph():
    modules = dict(_modules())
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def test_each_module_imports_only_its_own_layer_and_those_beneath():
    graph = _graph()
    up = [f"{a} -> {b}" for a, targets in graph.items() for b in targets if _layer(b) > _layer(a)]
    assert not up, up


def test_no_modules_import_each_other_in_a_circle():
    graph, state, circles = _graph(), {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, circles


def test_no_folder_holds_more_than_twelve_modules_or_a_quarter_of_the_package():
    lines = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in PACKAGE.rglob("*.py")}
    total = sum(lines.values())
    for folder in {path.parent for path in lines}:
        own = [path for path in lines if path.parent == folder and path.name != "__init__.py"]
        assert len(own) <= 12, (folder, len(own))
        assert sum(lines[path] for path in own) <= total / 4, (folder, sum(lines[path] for path in own), total)
