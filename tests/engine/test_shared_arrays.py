"""``kaleido_hw.engine.shared_arrays``: an array shared by two views. Cycle by cycle under
random steps and a random switch: the array takes the selected view's steps and tag, the
selected view sees the array's drain records (tag cut to its width) and busy count, the
other view sees no valid record and no busy PE; engines that are not built for it are
rejected."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.kaleido_engine import KaleidoEngine
from kaleido_hw.engine.pv_engine import PvEngine
from kaleido_hw.engine.shared_arrays import ArrayView, folded_array, share_array


@pytest.mark.parametrize("dispatcher", ["none", "full"])
def test_share_array_routes_to_the_selected_view(dispatcher):
    config = KaleidoConfig(rows=2, cols=3, engine_pe="reuse-pv", engine_dispatcher=dispatcher,
                           sched_pattern_width=4, matcher_channels=4)
    cls, _, _ = folded_array(config)
    array = cls(config, tag_width=6)
    views = [ArrayView(config, 6, "a"), ArrayView(config, 3, "b")]
    select = Signal()
    m = Module()
    m.submodules.array = array
    share_array(m, array, views, select)
    rng = random.Random(3)
    seen = {"drains": [0, 0], "busy": [0, 0]}

    async def bench(ctx):
        sel = 0
        for cycle in range(400):
            if cycle % 37 == 0:
                sel = rng.randrange(2)
            ctx.set(select, sel)
            for view in views:
                ctx.set(view.row.as_value(), rng.getrandbits(len(view.row.as_value())))
                ctx.set(view.col.as_value(), rng.getrandbits(len(view.col.as_value())))
                ctx.set(view.tag, rng.getrandbits(view.tag_width))
            await ctx.delay(1e-9)
            mine = views[sel]
            assert ctx.get(array.row.as_value()) == ctx.get(mine.row.as_value())
            assert ctx.get(array.col.as_value()) == ctx.get(mine.col.as_value())
            assert ctx.get(array.tag) == ctx.get(mine.tag)
            for k, view in enumerate(views):
                for j in range(config.cols):
                    src, dst = array.drain[j], view.drain[j]
                    valid = ctx.get(src.valid) and k == sel
                    assert ctx.get(dst.valid) == valid
                    seen["drains"][k] += valid
                    if valid:
                        assert ctx.get(dst.data) == ctx.get(src.data)
                        assert ctx.get(dst.row) == ctx.get(src.row)
                        assert ctx.get(dst.tag) == ctx.get(src.tag) % (1 << view.tag_width)
                busy = ctx.get(view.busy_count)
                assert busy == (ctx.get(array.busy_count) if k == sel else 0)
                seen["busy"][k] += busy
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert min(seen["drains"]) > 0 and min(seen["busy"]) > 0     # both views were served


def test_engines_share_only_arrays_with_the_pv_mode():
    config = KaleidoConfig(rows=2, cols=2, engine_max_tokens=16, engine_max_head_dim=16,
                           sched_pattern_width=4, matcher_channels=4, sched_entries=4)
    with pytest.raises(ValueError, match="engine_pe = 'reuse-pv'"):
        KaleidoEngine(config, shared_arrays=True)
    with pytest.raises(ValueError, match="engine_pe = 'reuse-pv'"):
        PvEngine(config, shared_arrays=True)
    engine = KaleidoEngine(config.replace(engine_pe="reuse-pv"), shared_arrays=True)
    assert len(engine.array_views) == config.engine_arrays
