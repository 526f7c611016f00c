"""Mistakes made from a reference: one change at a time to its source, each worded as a student reads it.

An AST pass over the reference (a teacher's ``reference.py``, or the package's own) finds the places
where the usual slips of attention code can be made, and makes each slip there, one per mutant:

* the scale: divided by the dimension instead of its square root, left out, or multiplied;
* the softmax: over the wrong dimension, or left out;
* the mask: left out, inverted, or filled with 0 instead of -inf; a triangle that also blocks the
  diagonal, or the other triangle;
* reductions: ``keepdim`` dropped, the wrong dimension, the unbiased variance;
* shapes: a transpose left out, a reshape's last two sizes swapped, pieces concatenated along the
  wrong dimension, a matrix product's factors swapped, results returned in the wrong order;
* a layer of the module (``self.out_proj(...)``) not applied.

Each kind carries its own sentence ("the scores are divided by the dimension itself instead of its
square root"), never a line number or a constant's value. A mutant is the reference module with
that one change, made here, in the grader (the reference is the teacher's own code): its functions
and classes are defined again, one of them changed, in a copy of the namespace the reference's
import left (its imports and constants), so nothing else of the reference runs again. A
mutant that gives the reference's results everywhere it is run is the same program (dropout left
out in eval mode) and names nothing.
"""

from __future__ import annotations

import ast
import copy
import types
import weakref
from dataclasses import dataclass

from attention_core.grading.naming.mutants import Mutant
from attention_core.grading.naming.operators import operators, pairs_convention
from attention_core.grading.naming.slips import Context, Slip, _name, context_of, slips
from attention_core.harness.reading import assignment as assignments

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)  # made again; the rest is the import's


# ---------------------------------------------------------------------------------------- making the mutants


@dataclass(frozen=True)
class Place:
    """A slip at a place: the graded name whose code it is in, its index in the module's walk, the slip."""

    owner: str
    index: int
    slip: Slip


def places(tree, graded):
    """Every slip in the code of the graded names of a module's ``tree``."""
    found = []
    owners, contexts, making = {}, {}, set()
    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.ClassDef)) and top.name in graded:
            contexts[top.name] = context_of(top) if isinstance(top, ast.ClassDef) else Context()
            for node in ast.walk(top):
                owners.setdefault(id(node), top.name)
            for method in top.body if isinstance(top, ast.ClassDef) else ():
                if isinstance(method, ast.FunctionDef) and method.name == "__init__":
                    making |= {
                        id(node) for statement in method.body if _makes_layer(statement) for node in ast.walk(statement)
                    }
    helpers = {}  # a module-level helper the graded names call (``_merge_heads``): its slips are each caller's
    for top in tree.body:
        if isinstance(top, ast.FunctionDef) and top.name not in graded:
            callers = [
                name
                for name in contexts
                if any(isinstance(n, ast.Name) and n.id == top.name for n in ast.walk(_top(tree, name)))
            ]
            for node in ast.walk(top) if callers else ():
                helpers[id(node)] = callers
    for index, node in enumerate(ast.walk(tree)):
        for owner in [owners[id(node)]] if id(node) in owners else helpers.get(id(node), []):
            context = contexts[owner] if id(node) in owners else Context()
            found += [Place(owner, index, slip) for slip in slips(node, context)]
            if id(node) not in making:  # (a class's layers are made with the reference's parameters anyway)
                found += [Place(owner, index, slip) for slip in operators(node, tuple(graded), context.norms)]
            if isinstance(node, ast.FunctionDef) and id(node) in owners and node.name != "__init__":
                found += [Place(owner, index, slip) for slip in pairs_convention(node, tree)]
    return found


def _top(tree, name):
    return next(top for top in tree.body if getattr(top, "name", None) == name)


def _makes_layer(statement):
    """Whether an ``__init__`` statement makes a layer, sets a size or calls the base class: what the grader makes
    with the reference's own parameters. A buffer computed there (ALiBi's slopes, a rotary table) is the class's
    arithmetic: its slips are made too."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return _name(statement.value) != "register_buffer"
    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
        name = _name(statement.value)
        return not name or name[0].isupper()  # nn.Linear(...), nn.Parameter(...): a layer; torch.arange(...): not
    return True  # a size (d_model // num_heads), an assert, the base class's __init__


# reference module -> (its source, its path, the graded names) -> the mutants made of it: made once in a process
# (each grader of a session, a notebook's or a test run's, asks again); the last few sources of a module kept (a
# teacher editing the reference in a session makes a new one at each edit), all of them dropped with the module
_MADE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SOURCES_KEPT = 4


def generate(chosen, source=None, path=None):
    """The generated mutants of an assignment (an Assignment with its reference): a list of Mutant, each
    ``functions`` being every graded name of the changed module, ``name`` ``owner:kind:number`` (unique)."""
    if chosen.reference is None:
        return []
    path = path or getattr(chosen.reference, "__file__", None)
    if source is None:
        try:
            source = open(path, encoding="utf-8").read()  # noqa: PTH123, SIM115
        except (OSError, TypeError):
            return []
    made = _MADE.setdefault(chosen.reference, {})
    key = (source, path, tuple(chosen.graded))
    if key not in made:
        while len(made) >= _SOURCES_KEPT:
            del made[next(iter(made))]  # the oldest
        made[key] = _generate(chosen, source, path)
    return list(made[key])


def _generate(chosen, source, path):
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    tree.body = [node for node in tree.body if isinstance(node, DEFINITIONS)]
    walk = _Walk(tree)
    found, seen = [], set()
    made = places(tree, chosen.graded)
    alike = {}
    for place in made:  # the same slip made at every place of one name where it can be (k and v alike)
        alike.setdefault((place.owner, place.slip.kind, place.slip.mistake), []).append(place)
    every = [group for group in alike.values() if len(group) > 1]
    for number, group in enumerate([[place] for place in made] + every):
        place = group[0]
        module, text = _mutated(tree, walk, group, path, vars(chosen.reference))
        # The same change made by two kinds: the first, more specific, kept (a helper's, once for each caller).
        if module is None or (place.owner, text) in seen:
            continue
        seen.add((place.owner, text))
        functions = assignments.callables(module, chosen.graded)
        words = (place.slip.mistake, place.slip.fix)
        found.append(
            Mutant(
                f"{place.owner}:{place.slip.kind}:{number}",
                functions,
                *words,
                "values",
                parts={name: words for name in functions} if len(functions) > 1 else {},
            )
        )
    return found


def owner_of(mutant):
    return mutant.name.split(":", 1)[0]


def kind_of(mutant):
    return mutant.name.split(":")[1]


def _mutated(tree, walk, group, path, imported):
    """(the module of ``tree`` (the reference's definitions) with the slips of ``group`` (places) made, the text of
    the definitions they change); (None, None) where it does not compile or run. ``walk``: the tree's _Walk.
    The changed tree is a copy of the nodes from each changed one up to the module, sharing every other node with
    ``tree`` (read, never written). Its definitions are made again in a copy of ``imported`` (the reference's
    namespace, as its import left it: its imports and constants), so that nothing else of the reference runs
    again."""
    copies = {}  # id(a node of tree) -> its copy in the changed tree

    def copied(node):
        if id(node) not in copies:
            new = copy.copy(node)
            for field, value in ast.iter_fields(new):
                if isinstance(value, list):
                    setattr(new, field, list(value))
            copies[id(node)] = new
            parent = walk.parents.get(id(node))
            if parent is not None:
                _replace(copied(parent), node, new)
        return copies[id(node)]

    for place in group:
        target = walk.nodes[place.index]
        parent = walk.parents.get(id(target))
        # The slip's own node, not a copy: nothing here writes into it but the places its new nodes lack, which
        # are its target's each time it is used (alone, and in its group of alike places).
        replacement = place.slip.replacement
        if parent is None or not _replace(copied(parent), copies.get(id(target), target), replacement):
            return None, None
        _locate(replacement, target)
    changed = copies[id(tree)]
    place = group[0]
    try:  # the definitions whose text it changes (a change that changes nothing is no mistake)
        texts = [(i, ast.unparse(top)) for i, top in enumerate(changed.body) if top is not tree.body[i]]
    except Exception:  # noqa: BLE001 (a tree no source can show: no mutant)
        return None, None
    text = "\n".join(f"{i}: {own}" for i, own in texts if own != walk.text(i))
    if not text:
        return None, None
    module = types.ModuleType(f"_generated_mutant_{place.owner}_{place.index}")
    module.__dict__.update({k: v for k, v in imported.items() if k not in ("__name__", "__spec__", "__loader__")})
    module.__file__ = path
    try:
        exec(compile(changed, path or "<reference>", "exec"), module.__dict__)  # noqa: S102 (the teacher's own code)
    except Exception:  # noqa: BLE001 (a change that does not run at definition: no mutant)
        return None, None
    return module, text


class _Walk:
    """A tree's nodes in ``ast.walk``'s order, each node's parent, and each top-level statement's text (made once)."""

    def __init__(self, tree):
        self.tree, self.nodes = tree, list(ast.walk(tree))
        self.parents = {id(child): node for node in self.nodes for child in ast.iter_child_nodes(node)}
        self._texts = {}

    def text(self, index):
        if index not in self._texts:
            self._texts[index] = ast.unparse(self.tree.body[index])
        return self._texts[index]


def _locate(replacement, target):
    """Give the nodes of ``replacement`` that have no place ``target``'s (as ``ast.fix_missing_locations`` would
    give them their parent's), leaving the nodes it shares with the tree as they are."""
    for node in ast.walk(replacement):
        for attribute in node._attributes:
            if getattr(node, attribute, None) is None and attribute in ("lineno", "col_offset"):
                setattr(node, attribute, getattr(target, attribute, 1 if attribute == "lineno" else 0))
            elif not hasattr(node, attribute):
                setattr(node, attribute, getattr(target, attribute, None))


def _replace(parent, target, replacement):
    for field, value in ast.iter_fields(parent):
        if value is target:
            setattr(parent, field, replacement)
            return True
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is target:
                    value[i] = replacement
                    return True
    return False
