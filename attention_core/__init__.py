"""The reference attention core: the spec functions that cases check and students implement.

The functions are loaded from :mod:`attention_core.reference` on first use, so that the commands that
need no torch (scheduling a grading batch) do not load it.
"""

import importlib
import warnings

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
