"""The reference attention core: the spec functions that cases check and students implement."""

from attention_core import spec
from attention_core.reference import (
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
