"""numpy golden model of Kaleido's channel-wise reuse (the contract: docs/numerics.md).

Plain, vectorized numpy; no hardware imports. The RTL matches it bit for bit.

- ``golden.numerics``: grid, channel groups, presets, masks, effective operand, exact scores,
  oracle op accounting;
- ``golden.window``: the window rule of linear layers (``golden.linear``) and of V;
- ``golden.quality``: float64 attention output, exact vs reused, and the skip baselines;
- ``golden.vector``: the integer softmax of the vector unit and ``P @ V`` in integers;
- ``golden.workloads``: deterministic synthetic Q/K/V and activations, named grids.
"""

from golden import numerics, quality, vector, window, workloads
from golden.numerics import (AXES, AXIS_T, AXIS_X, AXIS_Y, CODE_NAMES, DEFAULT_DIRECTIONS, FULL,
                             GROUP_NAMES, HALF, NONE, PRESETS, ChannelGroups, Preset, VideoGrid,
                             anchor_index, as_grid, attention_scores, code_counts,
                             effective_operand, exact_matmul, follower_mask, oracle_cap,
                             oracle_from_counts, oracle_ops, quantize, reuse_masks)
from golden.quality import attention_output, attention_quality, compare, skip_operand
from golden.vector import (attention_int, integer_attention_quality, pv_merged, softmax_int,
                           softmax_scale)
from golden.window import (linear, linear_ops, window_anchor_index, window_effective_operand,
                           window_masks)
from golden.workloads import GRIDS, make_activations, make_qkv


__all__ = ["AXES", "AXIS_T", "AXIS_Y", "AXIS_X", "GROUP_NAMES", "PRESETS", "Preset",
           "VideoGrid", "ChannelGroups",
           "DEFAULT_DIRECTIONS", "FULL", "HALF", "NONE", "CODE_NAMES", "as_grid", "quantize",
           "anchor_index", "follower_mask", "reuse_masks", "effective_operand", "exact_matmul",
           "attention_scores", "code_counts", "oracle_from_counts", "oracle_ops", "oracle_cap",
           "window_anchor_index", "window_masks", "window_effective_operand", "linear",
           "linear_ops", "attention_output", "attention_quality", "compare", "skip_operand",
           "GRIDS", "make_qkv", "make_activations", "numerics", "quality", "vector", "window",
           "workloads", "softmax_int", "softmax_scale", "attention_int", "pv_merged",
           "integer_attention_quality"]
