"""Hypothesis draws of a window-rule layer's shape, shared by the window-rule tests
(``tests/engine/test_linear.py``) and the linear-decode tests
(``tests/engine/test_linear_decode.py``)."""

from hypothesis import strategies as st

from golden import VideoGrid


def draw_window_layer(draw, min_full: int = 1, min_half: int = 0):
    """``(grid, channels, directions, window, full_bits, half_bits)``: a grid of 1-5 tokens
    per axis, 1-6 channels, one direction for all or one per channel, windows of 2 or 3,
    ``full_bits`` in ``[min_full, 7]`` and ``half_bits`` in ``[min_half, full_bits)``."""
    grid = VideoGrid(*(draw(st.integers(1, 5)) for _ in range(3)))
    c = draw(st.integers(1, 6))
    directions = draw(st.one_of(st.integers(0, 2),
                                st.lists(st.integers(0, 2), min_size=c, max_size=c)))
    window = draw(st.integers(2, 3))
    full_bits = draw(st.integers(min_full, 7))
    half_bits = draw(st.integers(min_half, full_bits - 1))
    return grid, c, directions, window, full_bits, half_bits
