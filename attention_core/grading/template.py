"""The hand-out: the spec's signatures with docstrings and ``NotImplementedError`` stubs.

``python -m attention_core template > attention_student.py`` writes it. Graded untouched,
every check says "not implemented".
"""

from attention_core import spec

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
    args = "\n".join(f"        {p.name}: {p.doc}" + (f" (default {p.signature().split('=', 1)[1]})" if not p.required
                                                      else "")
                     for p in function.params if p.doc or not p.required)
    doc = [function.purpose]
    if args:
        doc += ["", "    Args:", args]
    doc += ["", "    Returns:", f"        {_plain(function.summary)}"]
    body = "\n".join(doc)
    return (f"\n\ndef {function.signature()}:\n"
            f'    """{body}\n    """\n'
            f'    raise NotImplementedError("{function.name}")\n')


def _plain(text):
    """The README's markdown summary as docstring text."""
    return text.replace("`", "")
