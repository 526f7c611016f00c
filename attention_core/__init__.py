"""The reference attention core: the spec functions that cases check and students implement."""

import warnings

# torch warns on import when NumPy is absent; nothing here uses NumPy. (Before torch's import.)
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

from attention_core import spec  # noqa: E402
from attention_core.reference import (  # noqa: E402
    attention,
    causal_average,
    causal_mask,
    layer_norm,
    merge_heads,
    multi_head_attention,
    softmax,
    split_heads,
)

__all__ = list(spec.NAMES)
