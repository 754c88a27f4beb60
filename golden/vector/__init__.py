"""Integer softmax and P @ V of the vector unit (``docs/numerics.md``, section 14).

- ``golden.vector.softmax``: the row-wise integer softmax (fixed-point scale, base-2 exp
  through a 256-entry table, one reciprocal per row, P as uint8 of scale 1/255);
- ``golden.vector.attention``: ``O = P_q @ V_eff`` in integers, its merged (V reuse) form
  and the quality of the integer pipeline against float64 attention;
- ``golden.vector.online``: attention by key blocks with a running maximum and the output
  normalised at the end (section 15), the numerics of heads longer than one box.
"""

from golden.vector import attention, online, softmax
from golden.vector.attention import (attention_int, integer_attention_quality, pv_merged,
                                     pv_ops)
from golden.vector.online import attention_online, online_attention_quality, online_stages
from golden.vector.softmax import (EXP_LUT, EXP_ONE, MAX_ROW, P_ONE, RECIP_BITS, SHIFT_MAX,
                                   SHIFT_MIN, Y_FRAC_BITS, SoftmaxScale, exp_fixed, scale_of,
                                   softmax_int, softmax_scale, softmax_stages)


__all__ = ["EXP_LUT", "EXP_ONE", "MAX_ROW", "P_ONE", "RECIP_BITS", "SHIFT_MAX", "SHIFT_MIN",
           "Y_FRAC_BITS", "SoftmaxScale", "attention", "attention_int", "attention_online",
           "exp_fixed", "online", "online_attention_quality", "online_stages",
           "integer_attention_quality", "pv_merged", "pv_ops", "scale_of", "softmax",
           "softmax_int", "softmax_scale", "softmax_stages"]
