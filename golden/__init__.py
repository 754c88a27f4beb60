"""numpy golden model of Kaleido's channel-wise reuse (the contract: docs/numerics.md).

Plain, vectorized numpy; no hardware imports. The RTL matches it bit for bit.
"""

from .numerics import (AXES, AXIS_T, AXIS_X, AXIS_Y, GROUP_NAMES, PRESETS, ChannelGroups,
                       Preset, VideoGrid)

__all__ = ["AXES", "AXIS_T", "AXIS_Y", "AXIS_X", "GROUP_NAMES", "PRESETS", "Preset",
           "VideoGrid", "ChannelGroups"]
