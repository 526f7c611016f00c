"""The reference attention core: the spec functions that cases check and students implement.

The functions are loaded from :mod:`attention_core.reference` on first use, so that the commands that
need no torch (scheduling a grading batch) do not load it.
"""

import importlib
import os
import sys
import warnings


def _off_the_path():
    """``python -m attention_core`` puts the folder it runs in first on the module path, before the standard library
    and torch: a student's file there named like a module (torch.py, yaml.py, dataclasses.py) would be imported in
    its place, in the teacher's own process and in the grader processes (which take this path). That folder is taken
    off the path, first thing, unless it is the checkout this package is imported from."""
    if sys.argv[:1] != ["-m"] or not sys.path or not sys.path[0]:
        return
    try:
        here = os.getcwd()
        if os.path.samefile(sys.path[0], here) and not os.path.samefile(
            os.path.dirname(os.path.dirname(__file__)), here
        ):
            del sys.path[0]
    except OSError:  # (a folder gone meanwhile: nothing of it to import)
        pass


_off_the_path()

# torch warns on import when NumPy is absent; nothing here uses NumPy. (Before torch's import.)
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

from attention_core import spec  # noqa: E402

__all__ = list(spec.NAMES)


def __getattr__(name):
    """``attention_core.softmax`` and the other spec functions: the reference's (PEP 562)."""
    if name in __all__:
        return getattr(importlib.import_module("attention_core.reference"), name)
    raise AttributeError(f"module 'attention_core' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
