"""The S read-out's reorder stage (``kaleido_hw.engine.engine_buffer.RowPairReorder``): row
pairs in by column, row-major beats of two values out, for even and odd row lengths (an odd
count's last beat has a zero high half), under random input gaps and output back-pressure
(every beat once, in order), and one beat per cycle after the first pair when nothing
stalls. Whole read-outs through the engine's planes are in ``test_kaleido_engine.py``."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Const, Elaboratable, Module
from stream_harness import run_stream

from kaleido_hw.engine.engine_buffer import RowPairReorder, pair_column_layout
from kaleido_hw.engine.host_port import s_beat_count, unpack_s_beats

MAX_TOKENS = 9


class FixedLength(Elaboratable):
    """A RowPairReorder with its row length tied to ``n``."""

    def __init__(self, n: int):
        self.n = n
        self.reorder = RowPairReorder(MAX_TOKENS)
        self.i, self.o = self.reorder.i, self.reorder.o

    def elaborate(self, platform):
        m = Module()
        m.submodules.reorder = self.reorder
        m.d.comb += self.reorder.n.eq(self.n)
        return m


def column_pairs(s: np.ndarray) -> list[int]:
    """The planes' order: row pair by row pair, column by column (packed payloads)."""
    n = len(s)
    layout = pair_column_layout(MAX_TOKENS)
    out = []
    for r in range(0, n, 2):
        for c in range(n):
            bottom = int(s[r + 1][c]) if r + 1 < n else 0x5A5A5A5A   # junk: never stored
            out.append(Const.cast(layout.const({
                "top": int(s[r][c]), "bottom": bottom, "col": c,
                "last": c == n - 1, "single": r + 1 == n})).value)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9])
@pytest.mark.parametrize("gap,stall,seed", [(0.0, 0.0, 0), (0.4, 0.5, 1), (0.1, 0.8, 2)])
def test_row_pairs_become_row_major_beats(n, gap, stall, seed):
    rng = np.random.default_rng(n * 10 + seed)
    s = rng.integers(-(1 << 31), 1 << 31, (n, n), dtype=np.int64)
    beats = s_beat_count(n * n)
    run = run_stream(FixedLength(n), column_pairs(s), beats, gap=gap, stall=stall, seed=seed)
    assert len(run.out_items) == beats
    assert np.array_equal(unpack_s_beats(run.out_items, n * n).reshape(n, n), s)
    if not gap and not stall:
        # The first pair is whole before its first beat; then a beat every cycle.
        assert run.out_cycles[0] == n + 1
        assert run.out_cycles == list(range(n + 1, n + 1 + beats))
