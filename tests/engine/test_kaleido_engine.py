"""Amaranth-simulator tests of the multi-array KaleidoEngine (``docs/engine.md``, section
"RTL"): whole runs of small engines (P = 1, 2 and 3 arrays of 2 x 2 PEs) with S bit-exact
against ``golden.attention_scores`` / ``q @ k.T`` and every counter (engine and per array)
equal to ``golden.engine.model.engine_counters``; the unit arithmetic against ``golden.array.schedule.units``;
the chunk count bound; configuration errors; random stalls on every internal stream
(``engine_stall_seed``) with the dispatcher invariants of ``golden.engine.trace`` (one run
here, the sweep with ``KALEIDO_ENGINE_SET=full``: the cases marked ``full_set``, which
``make regress`` runs). The cocotb benches
(``tests/engine/test_kaleido_engine_sim.py``) run the generated Verilog."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator
from host_harness import configure_and_start, wait_done, write_operand

from golden.array.schedule import units
from golden.engine.model import EngineParams, EngineTiming, chunks, engine_counters
from golden.engine.trace import (OrderTrace, SlotTrace, check_counters, check_trace, decode_block,
                                 decode_sel, expected_trace, observed_fallbacks)
from golden.numerics import ChannelGroups, VideoGrid, attention_scores
from golden.window import linear
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.array_sequencer import ArraySequencer
from kaleido_hw.engine.engine_layouts import (KaleidoGeometry, engine_run_layout, max_chunks,
                                              walk_constants_layout, walk_layout)
from kaleido_hw.engine.host_port import s_beat_count, unpack_s_beats
from kaleido_hw.engine.unit_walk import (const_coords, const_position, unit_tokens, walk_add,
                                         walk_constants, walk_has_follower, walk_inc)
from kaleido_hw.engine.kaleido_engine import (ARRAY_COUNTERS, ENGINE_COUNTERS, ERROR_BITS,
                                              KaleidoEngine, check_engine_run, engine_ports,
                                              model_counters)


def simulate(dut, bench, monitor=None):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    if monitor is not None:
        sim.add_process(monitor(dut))
    sim.run()


def dispatch_monitor(cfg, orders: dict, slots: dict):
    """A process constructor recording the OrderUnits' and SlotUnits' probe wires (sampled at
    each clock edge) into ``orders`` (side -> OrderTrace) and ``slots`` (array -> SlotTrace).
    Called after elaboration, so the engine's dispatcher blocks exist."""
    def make(dut):
        watch = []                                  # (record function, probe names, signals)
        for side, ou in dut.order_units.items():
            tr = orders.setdefault(side, OrderTrace())
            p = ou.probes

            def rec_order(v, tr=tr):
                if v["probe_abort"]:
                    tr.abort(v["probe_abort_replace"])
                if v["probe_in_fire"]:
                    tr.unit_in(v["probe_in_unit"], v["probe_in_last"], v["cycle"])
                if v["probe_out_fire"] or v["probe_out_done"]:
                    tr.unit_out(v["probe_out_unit"] if v["probe_out_fire"] else None,
                                v["probe_out_done"])
            watch.append((rec_order, list(p), list(p.values())))
        for a, seq in enumerate(dut.sequencers):
            su = getattr(seq, "slot_unit", None)
            if su is None:
                continue
            tr = slots.setdefault(a, SlotTrace())
            p = su.probes

            def rec_slot(v, tr=tr):
                if v["probe_blk_fire"]:
                    tr.block(decode_block(v["probe_blk_codes"], cfg.cols, cfg.sched_pattern_width))
                if v["probe_slot_fire"]:
                    tr.slot(v["probe_slot_a"], v["probe_slot_b"], v["probe_slot_merged"],
                            decode_sel(v["probe_slot_sel"], cfg.cols), v["probe_slot_last"])
            watch.append((rec_slot, list(p), list(p.values())))
        signals = [s for _, _, sigs in watch for s in sigs]

        async def monitor(ctx):
            cycle = 0
            async for _, _, *values in ctx.tick().sample(*signals):
                i = 0
                for record, names, sigs in watch:
                    record({"cycle": cycle, **dict(zip(names, values[i:i + len(sigs)]))})
                    i += len(sigs)
                cycle += 1
        return monitor
    return make


def dispatch_qk(rng, n, d):
    """Q near one common token (every code class occurs) and K a random walk over the
    tokens (smooth neighbours): ``n`` tokens of ``d`` int8 channels each, from ``rng``."""
    base = rng.integers(-100, 100, (n, d))
    q = np.clip(base + rng.integers(-6, 7, (n, d)), -128, 127).astype(np.int8)
    k = np.clip(np.cumsum(rng.integers(-5, 6, (n, d)), 0), -128, 127).astype(np.int8)
    return q, k


def run_engine(cfg, q, k, grid, groups, variant="pe", stall_every=0, ports=None, trace=False,
               max_cycles=100_000):
    """One run; ``trace``: also record the dispatcher probes (``out["orders"]``,
    ``out["slots"]``); fails if ``done`` does not come within ``max_cycles``."""
    dut = KaleidoEngine(cfg)
    ports = ports or engine_ports(cfg, grid, groups, variant=variant)
    out = {}
    monitor = None
    if trace:
        out["orders"], out["slots"] = {}, {}
        monitor = dispatch_monitor(cfg, out["orders"], out["slots"])

    async def bench(ctx):
        await write_operand(ctx, dut, 0, q)
        await write_operand(ctx, dut, 1, k)
        await configure_and_start(ctx, dut, ports)
        # A lost or invented dispatcher token would stall the run forever: bound it.
        await wait_done(ctx, dut, max_cycles)
        out["error"] = ctx.get(dut.error)
        if out["error"]:
            return
        cnt = {name: ctx.get(getattr(dut.cnt, name)) for name in ENGINE_COUNTERS}
        for a in range(cfg.engine_arrays):
            arr = getattr(dut.cnt, f"a{a}")
            cnt.update({f"a{a}__{name}": ctx.get(getattr(arr, name)) for name in ARRAY_COUNTERS})
        out["counters"] = cnt
        ctx.set(dut.read, 1)
        await ctx.tick()
        ctx.set(dut.read, 0)
        beats, cycle = [], 0
        while len(beats) < s_beat_count(grid.n ** 2):
            ready = not (stall_every and cycle % stall_every == 0)
            ctx.set(dut.s.ready, ready)
            await ctx.delay(1e-9)
            if ready and ctx.get(dut.s.valid):
                beats.append(ctx.get(dut.s.payload))
            await ctx.tick()
            cycle += 1
        ctx.set(dut.s.ready, 0)
        for _ in range(4):
            await ctx.tick()
            assert not ctx.get(dut.s.valid), "S read-out gave more than ceil(N*N / 2) beats"
        out["S"] = unpack_s_beats(beats, grid.n ** 2).reshape(grid.n, grid.n)

    simulate(dut, bench, monitor)
    return out


def smooth(grid, d, rng):
    return tuple(np.clip(np.cumsum(rng.integers(-4, 5, (grid.n, d)), 0), -128, 127)
                 .astype(np.int8) for _ in range(2))


def check_s_runs(cfg, q, k, grid, groups, variants):
    """Each variant's whole run with S read out under back-pressure: S bit-exact (Q @ K^T
    for dense) and every counter equal to the cycle model."""
    for variant in variants:
        out = run_engine(cfg, q, k, grid, groups, variant, stall_every=3)
        assert out["error"] == 0
        want_s = (attention_scores(q, k, grid, groups) if variant != "dense"
                  else q.astype(np.int64) @ k.astype(np.int64).T)
        assert np.array_equal(out["S"], want_s), f"{variant}: S differs"
        want = model_counters(cfg, q, k, grid, groups, variant)
        assert out["counters"] == want, f"{variant}:\n rtl   {out['counters']}\n model {want}"


@pytest.mark.parametrize("arrays,sides", [
    (1, "q"), pytest.param(3, "q", marks=pytest.mark.full_set),
    pytest.param(1, "qk", marks=pytest.mark.full_set), (3, "qk")])
def test_small_engine_runs(arrays, sides):
    """Whole runs of P arrays of 2 x 2 PEs (chunks of 4 channels: groups of 3/5/4 give
    1 + 2 + 1 chunks; odd grid; smooth data; scheduler batches of 4 units): every variant
    on one array (pe, pe-sh, pe-m, full, dense), pe / full / dense on three: S bit-exact,
    every counter equal to the cycle model (with the scheduler: the pre-pass and the chunk
    start at max(barrier, orders ready)), S read out under back-pressure. P = 3: 6 banks
    per plane, not a power of two (bank and block of the read-out are a modulo and a division).
    ``sched_sides`` "q": a plane per group, the y group's two chunks accumulating into one;
    "qk": a plane per chunk, both sides ordered."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=arrays, engine_max_tokens=16,
                        engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=4, sched_sides=sides)
    grid, groups = VideoGrid(2, 3, 2), ChannelGroups.from_sizes(3, 5, 4, directions=(2, 1, 0))
    rng = np.random.default_rng(arrays)
    q, k = smooth(grid, 12, rng)
    variants = ("pe", "pe-sh", "pe-m", "full", "dense") if arrays == 1 else ("pe", "full",
                                                                            "dense")
    check_s_runs(cfg, q, k, grid, groups, variants)


@pytest.mark.parametrize("dispatcher", [pytest.param("full", marks=pytest.mark.full_set),
                                        "none"])
def test_engine_on_arrays_with_the_pv_mode(dispatcher):
    """``engine_pe = "reuse-pv"``: the engine on PvMergedArrays (with the matcher) or
    PvPEArrays, every step with ``pv`` 0: S bit-exact and every counter equal to the cycle
    model, as on the arrays without the mode, for S and for a linear block."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                        engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=4, engine_pe="reuse-pv", engine_dispatcher=dispatcher)
    grid, groups = VideoGrid(2, 3, 2), ChannelGroups.from_sizes(3, 5, 4, directions=(2, 1, 0))
    q, k = smooth(grid, 12, np.random.default_rng(5))
    variants = ("full", "pe-m", "dense") if dispatcher == "full" else ("pe", "dense")
    check_s_runs(cfg, q, k, grid, groups, variants)
    axes = np.asarray(groups.directions)[np.asarray(groups.group_of)]
    ports = engine_ports(cfg, grid, groups, variant=variants[0], linear=True)
    out = run_engine(cfg, q, k, grid, groups, variants[0], stall_every=3, ports=ports)
    assert np.array_equal(out["S"], linear(q, k.T, grid, axes, 2))
    assert out["counters"] == model_counters(cfg, q, k, grid, groups, variants[0], linear=True)


@pytest.mark.full_set
def test_linear_blocks():
    """``cfg__linear``: Q holds an activation X, K weight rows (row j = column j of W, the
    rows past C_out zero), P = 2 arrays of 2 x 2 on an odd grid, channels along all three
    axes: S = golden.linear(X, W, window 2) bit-exact (X @ W for dense), every counter equal
    to the cycle model with ``linear``, S read out under back-pressure. X is smooth, so
    windows the window rule calls FULL and the top-bits rule does not (and the reverse) occur,
    and W repeats itself along the tokens, so the attention rule would reuse K codes: either
    rule in the wrong place gives another S. In ``make regress``; in ``make test`` the engine
    core's linear layers (``tests/engine/test_core.py``) and the linear block on the arrays
    with the P @ V mode run this engine's linear path."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=32,
                        engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=4)
    grid = VideoGrid(3, 3, 2)
    groups = ChannelGroups.from_sizes(5, 6, 5, directions=(1, 0, 2))
    rng = np.random.default_rng(21)
    x, _ = smooth(grid, 16, rng)
    c_out = 13
    w = rng.integers(-128, 128, (16, c_out)).astype(np.int8)
    k = np.zeros((grid.n, 16), np.int8)
    k[:c_out] = w.T
    k[1:c_out:2] = k[0:c_out - 1:2]                     # neighbours equal: K would reuse
    w = k[:c_out].T
    axes = np.asarray(groups.directions)[np.asarray(groups.group_of)]
    want = linear(x, w, grid, axes, 2)
    assert not np.array_equal(want, attention_scores(x, k, grid, groups)[:, :c_out])
    for variant in ("full", "pe", "dense"):
        ports = engine_ports(cfg, grid, groups, variant=variant, linear=True)
        out = run_engine(cfg, x, k, grid, groups, variant, stall_every=3, ports=ports)
        assert out["error"] == 0
        ref = want if variant != "dense" else x.astype(np.int64) @ w.astype(np.int64)
        assert np.array_equal(out["S"][:, :c_out], ref), f"{variant}: Y differs"
        assert not out["S"][:, c_out:].any()
        model = model_counters(cfg, x, k, grid, groups, variant, linear=True)
        assert out["counters"] == model, f"{variant}:\n rtl   {out['counters']}\n model {model}"


@pytest.mark.full_set
def test_accumulating_runs():
    """``acc``: runs that add onto the result before them, as a linear layer's input channels
    in slices (three runs of 16 channels each, P = 2 arrays: the read-out is the sum of the
    slices' golden.linear, every run's counters equal to its model), with three direction
    groups (three planes) and with one; and the exactness bound: with acc_width 21 a plane
    sums at most 63 channels, so with all 16 channels in one group a fourth run is rejected
    (error bit group_size). In ``make regress``; in ``make test`` the engine core's
    input-channel slices (``test_core_linear_channel_slices``) accumulate through this
    engine."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=32,
                        engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=4, acc_width=21)
    grid = VideoGrid(3, 3, 2)
    rng = np.random.default_rng(8)
    xs = [smooth(grid, 16, rng)[0] for _ in range(3)]
    ks = [rng.integers(-128, 128, (grid.n, 16)).astype(np.int8) for _ in range(3)]
    bit = {name: 1 << i for i, (name, _) in enumerate(ERROR_BITS)}
    for groups, variant in ((ChannelGroups.from_sizes(5, 6, 5, directions=(1, 0, 2)), "full"),
                            (ChannelGroups.from_sizes(16, 0, 0), "pe")):
        dut = KaleidoEngine(cfg)
        ports = engine_ports(cfg, grid, groups, variant=variant, linear=True)
        out = {"errors": [], "counters": []}

        async def start(ctx, r, acc):
            ctx.set(dut.accumulate, acc)
            await configure_and_start(ctx, dut, ports)
            await wait_done(ctx, dut, 20_000)
            out["errors"].append(ctx.get(dut.error))
            out["counters"].append({n: ctx.get(getattr(dut.cnt, n)) for n in
                                    ("cycles", "chunks")})

        async def bench(ctx):
            for r in range(3):
                await write_operand(ctx, dut, 0, xs[r])
                await write_operand(ctx, dut, 1, ks[r])
                await start(ctx, r, r > 0)
            ctx.set(dut.read, 1)
            await ctx.tick()
            ctx.set(dut.read, 0)
            ctx.set(dut.s.ready, 1)
            beats = []
            for _ in range(20 * grid.n ** 2):
                await ctx.delay(1e-9)
                if ctx.get(dut.s.valid):
                    beats.append(ctx.get(dut.s.payload))
                await ctx.tick()
                if len(beats) == s_beat_count(grid.n ** 2):
                    break
            out["S"] = unpack_s_beats(beats, grid.n ** 2).reshape(grid.n, grid.n)
            await start(ctx, 3, 1)                          # a fourth slice

        simulate(dut, bench)
        axes = groups.channel_directions()
        want = sum(linear(xs[r], ks[r].T, grid, axes, 2) for r in range(3))
        assert np.array_equal(out["S"], want)
        assert not np.array_equal(out["S"], linear(xs[2], ks[2].T, grid, axes, 2))
        assert out["errors"][:3] == [0] * 3
        for r in range(3):
            model = model_counters(cfg, xs[r], ks[r], grid, groups, variant, linear=True)
            assert out["counters"][r] == {n: model[n] for n in ("cycles", "chunks")}
        # 64 channels in the one plane of (16, 0, 0) exceed 63; 22 in a plane of 5/6/5 do not.
        assert out["errors"][3] == (bit["group_size"] if groups.sizes[0] == 16 else 0)


def test_odd_token_counts_read_out():
    """Odd N_max (15: the banks' last row pair and the reorder buffer's halves are half
    used) and an odd grid (3x1x5: N*N odd, so the read-out's last beat has a zero high half
    and the row pairs straddle beats), P = 2 arrays, full and dense, S read out under
    back-pressure: S bit-exact and every counter equal to the cycle model."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=15,
                        engine_max_head_dim=8, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=4)
    grid, groups = VideoGrid(3, 1, 5), ChannelGroups.from_sizes(3, 2, 3, directions=(0, 2, 2))
    q, k = smooth(grid, 8, np.random.default_rng(15))
    for variant, stall_every in (("full", 2), ("dense", 5)):
        out = run_engine(cfg, q, k, grid, groups, variant, stall_every=stall_every)
        want_s = (attention_scores(q, k, grid, groups) if variant != "dense"
                  else q.astype(np.int64) @ k.astype(np.int64).T)
        assert np.array_equal(out["S"], want_s), f"{variant}: S differs"
        assert out["counters"] == model_counters(cfg, q, k, grid, groups, variant), variant


@pytest.mark.parametrize("variant,sides", [pytest.param("pe-m", "q", marks=pytest.mark.full_set),
                                           ("full", "q"),
                                           pytest.param("full", "qk",
                                                        marks=pytest.mark.full_set)])
def test_dispatcher_wider_chunks(variant, sides):
    """pe-m and full on P = 2 arrays of 2 x 4 PEs with chunks of 8 channels (lookahead 4,
    scheduler batches of 8 units), a random channel map and noisy / smooth data (many HALF
    codes, so many merged slots): S bit-exact, every counter (``merged``, pass-3
    ``issued``/``skipped``, ``busy_pe_cycles``, cycles) equal to the cycle model."""
    cfg = KaleidoConfig(rows=2, cols=4, engine_arrays=2, engine_max_tokens=32,
                        engine_max_head_dim=16, sched_pattern_width=8, matcher_channels=8,
                        sched_entries=8, sched_sides=sides)
    grid = VideoGrid(2, 3, 4)
    gmap = tuple(int(x) for x in np.random.default_rng(3).integers(0, 3, 16))
    groups = ChannelGroups(gmap, (2, 0, 1))
    q, k = dispatch_qk(np.random.default_rng(11), grid.n, 16)
    out = run_engine(cfg, q, k, grid, groups, variant, stall_every=2)
    assert out["error"] == 0
    assert np.array_equal(out["S"], attention_scores(q, k, grid, groups))
    want = model_counters(cfg, q, k, grid, groups, variant)
    assert out["counters"] == want
    assert want["a0__merged"] > 0 and want["a1__merged"] > 0


@pytest.mark.parametrize("rows, cols", [(2, 2), (4, 2), (2, 4)])
def test_anchor_words_single_buffered(rows, cols):
    """With C <= R a reuse sequencer keeps no anchor words in its loading slot (they are
    fetched just in time into the stepping slot, ``ArraySequencer._fetch``) but keeps its
    follower words and codes double-buffered; with C > R (2 x 4) both stay double-buffered.
    The runs above (2 x 2, and 2 x 4 in ``test_dispatcher_wider_chunks``) hold either form to
    the cycle model."""
    cfg = KaleidoConfig(rows=rows, cols=cols, engine_arrays=1, engine_max_tokens=16,
                        engine_max_head_dim=8, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=4)
    text = rtlil.convert(ArraySequencer(cfg), name="seq", emit_src=False)
    fetching = cols <= rows
    assert ("ld_qa0" in text, "ld_ka0" in text) == (not fetching, not fetching)
    assert ("q_fetch_on" in text, "ld_ktok_a0" in text) == (fetching, fetching)
    assert "ld_qf0" in text and "ld_kf0" in text and "ld_qlo0" in text


@pytest.mark.parametrize("variant,sides,seed", [
    ("full", "qk", 0), ("pe-sh", "qk", 0),
    pytest.param("full", "qk", 0x4321, marks=pytest.mark.full_set)])
def test_chunks_fall_back_to_natural_order(variant, sides, seed):
    """A tiny head on P = 2 arrays of 2 x 2 with scheduler batches of 32 units, both sides
    ordered (each pre-pass reads its own port): a pre-pass
    ((1 + 2) * 32 + 7 = 103 cycles) outlasts the chunks before chunks 1 and 3, which run in
    natural order at once (the OrderUnits' ``abort`` and ``natural``), while chunk 2 (after
    the longest chunk) is scheduled, its LFSR from the seed. S bit-exact, every counter
    equal to the cycle model (no chunk waits for its orders), the dropped pre-passes and
    every order equal to the model's. With stall injection the fallbacks follow the run's
    timing: the model takes them from the run and the work counters must still agree."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                        engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=32, sched_sides=sides, engine_stall_seed=seed)
    grid, groups = VideoGrid(2, 3, 2), ChannelGroups.from_sizes(3, 5, 4, directions=(2, 1, 0))
    q, k = smooth(grid, 12, np.random.default_rng(2))
    model = engine_counters(q, k, grid, groups, EngineParams.from_config(cfg), variant)
    assert model.fallbacks == (1, 3)
    # No chunk waits for an order: never slower than dense.
    dense = engine_counters(q, k, grid, groups, EngineParams.from_config(cfg), "dense")
    assert model.cycles < dense.cycles
    got, want, summary = check_dispatch_run(cfg, q, k, grid, groups, variant,
                                            f"{variant} {sides} seed={seed:#x}")
    if not seed:
        assert summary["fallbacks"] == 2
        assert summary["orders"] == len(cfg.ordered_sides)


@pytest.mark.parametrize("variant", ["full", pytest.param("pe-sh", marks=pytest.mark.full_set)])
def test_snooped_prepass_is_cycle_exact(variant):
    """The Q side alone ordered (``sched_sides = "q"``): chunk k+1's pre-pass snoops array
    0's loads of chunk k's first column block (``docs/engine.md``, "Orders"). On this head
    (P = 3 arrays of 2 x 2, batches of 32, groups of 5/6/5 channels in chunks of 4: six
    chunks) chunks 2 and 4 open a group and run in natural order; the order of chunk 5 is
    complete in exactly the cycle the chunk starts, chunk 1's one cycle too late:
    ``EngineTiming.snoop_base`` one lower or higher predicts other fallbacks, so the
    RTL's (S, every counter, every order) equal to the model's pins the snooped pre-pass's
    timing to the cycle."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=3, engine_max_tokens=32,
                        engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=32, sched_sides="q")
    grid, groups = VideoGrid(3, 3, 2), ChannelGroups.from_sizes(5, 6, 5, directions=(1, 0, 2))
    q, k = dispatch_qk(np.random.default_rng(2), grid.n, 16)
    p = EngineParams.from_config(cfg)
    if variant == "full":
        assert engine_counters(q, k, grid, groups, p, variant).fallbacks == (1, 2, 4)
        for base, want in ((8, (2, 4)), (10, (1, 2, 4, 5))):
            timing = EngineTiming(snoop_base=base)
            assert engine_counters(q, k, grid, groups, p, variant,
                                   timing=timing).fallbacks == want
    _, want, summary = check_dispatch_run(cfg, q, k, grid, groups, variant, "snooped pre-pass")
    if variant == "full":
        assert summary["fallbacks"] == 3 and summary["orders"] == 2


def test_fallback_with_one_side_complete_under_stalls():
    """Both sides ordered (``sched_sides = "qk"``) under stall injection: the two
    schedulers' streams are stalled independently, so at a fallback one side's order of the
    chunk may already be complete while the other's is not. That side's OrderUnit must put
    the natural chunk into the complete order's banks (``abort`` replaces it): the run here
    (nine chunks; seed found by search) has two fallbacks, one of them such a replacement,
    and S, the work counters, the dropped pre-passes (the same on both sides) and every order
    still agree with the model."""
    seed = 0xBEEF
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=32,
                        engine_max_head_dim=32, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=32, engine_stall_seed=seed, sched_sides="qk")
    grid = VideoGrid(3, 3, 2)
    groups = ChannelGroups.from_sizes(10, 12, 10, directions=(1, 0, 2))
    q, k = dispatch_qk(np.random.default_rng(200 + seed % 97), grid.n, 32)
    _, _, summary = check_dispatch_run(cfg, q, k, grid, groups, "full", "qk stalls")
    assert summary["fallbacks"] == 2 and summary["replaced"] == 1


def test_engine_with_idle_arrays_and_empty_group():
    """P = 2 arrays with more arrays than column blocks in some chunks (the extra array
    idles, counted), an empty group, and an interleaved channel map, pe and pe-sh (the
    scheduler with units fewer than a batch): S and counters."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                        engine_max_head_dim=8, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=4)
    grid = VideoGrid(1, 2, 3)
    groups = ChannelGroups((2, 0, 2, 0, 0, 2, 2, 2), (0, 1, 1))
    rng = np.random.default_rng(7)
    q, k = smooth(grid, 8, rng)
    for variant in ("pe", "pe-sh"):
        out = run_engine(cfg, q, k, grid, groups, variant)
        assert np.array_equal(out["S"], attention_scores(q, k, grid, groups))
        want = model_counters(cfg, q, k, grid, groups, variant)
        assert out["counters"] == want, variant
        assert want["a1__quads"] < want["a0__quads"]


@pytest.mark.parametrize("shape", [(3, 5, 4), (2, 3, 2), (1, 1, 7), (5, 1, 1), (4, 2, 1)])
def test_unit_walk_matches_golden_units(shape):
    """The loaders' unit positions without division (``kaleido_hw.engine.unit_walk``), for
    every direction: stepping one unit at a time from unit 0 gives, unit by unit, the anchor,
    follower and follower bit of ``golden.array.schedule.units``; and every constant jump k
    (1..9, the loaders' ``a*C`` and ``P*C``: coordinates by :func:`const_coords`, anchor by
    :func:`const_position`) added to every unit u lands on unit u + k."""
    cfg = KaleidoConfig(engine_max_tokens=64, engine_max_head_dim=8)
    geo = KaleidoGeometry.from_config(cfg)
    grid = VideoGrid(*shape)
    t, h, w = shape
    jumps = range(1, 10)
    m = Module()
    run = Signal(engine_run_layout(geo))
    d = Signal(2)
    consts = Signal(walk_constants_layout(geo))
    w2, h2 = Signal(8), Signal(8)
    m.d.comb += walk_constants(geo, consts, d, run.w, run.hw, w2, h2)
    pos = Signal(walk_layout(geo))
    step = walk_inc(m, geo, pos, consts, "step")
    anchor, follower, hasf = unit_tokens(m, geo, run, d, pos.tok,
                                         walk_has_follower(run, d, pos), 1, "u")
    ks = [Signal(walk_layout(geo), name=f"k{k}") for k in jumps]
    sums = []
    for k, ksig in zip(jumps, ks):
        m.d.comb += const_coords(k, w2, h2, ksig)
        m.d.comb += const_position(geo, ksig, d, run)
        sums.append(walk_add(m, geo, pos, ksig, consts, f"sum{k}"))

    async def bench(ctx):
        ctx.set(run.t, t)
        ctx.set(run.h, h)
        ctx.set(run.w, w)
        ctx.set(run.hw, h * w)
        for g in range(3):
            ctx.set(d, g)
            dims = [t, h, w]
            dims[g] = -(-dims[g] // 2)
            ctx.set(h2, dims[1])
            ctx.set(w2, dims[2])
            anchors, followers = units(grid, g)
            walked = []
            raw = pos.as_value()
            ctx.set(raw, 0)
            for u in range(anchors.size):
                walked.append(ctx.get(raw))
                assert ctx.get(anchor) == anchors[u], (g, u)
                assert ctx.get(hasf) == (followers[u] >= 0), (g, u)
                if followers[u] >= 0:
                    assert ctx.get(follower) == followers[u], (g, u)
                ctx.set(raw, ctx.get(step.as_value()))
            for u in range(anchors.size):
                ctx.set(raw, walked[u])
                for k, total in zip(jumps, sums):
                    if u + k < anchors.size:
                        got = ctx.get(total.as_value())
                        assert got == walked[u + k], (g, u, k)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_chunk_bound_and_geometry():
    """The buffer has a plane per group (at most 3), or with the K side ordered a plane for
    the most chunks any head can have, and the bank address fields of docs/engine.md."""
    assert max_chunks(16, 16) == 3 and max_chunks(128, 16) == 10 and max_chunks(8, 4) == 4
    for sizes in [(16, 56, 56), (1, 1, 126), (17, 17, 94)]:
        assert len(chunks(ChannelGroups.from_sizes(*sizes), 16)) <= max_chunks(128, 16)
    geo = KaleidoGeometry.from_config(KaleidoConfig())
    assert geo.banks == 16 and geo.planes == 3 and not geo.k_ordered
    assert KaleidoGeometry.from_config(KaleidoConfig(sched_sides="qk")).planes == 10
    assert KaleidoGeometry.from_config(KaleidoConfig(engine_dispatcher="matcher",
                                                     sched_sides="qk")).planes == 3
    assert KaleidoGeometry.from_config(KaleidoConfig(
        engine_max_head_dim=8, sched_pattern_width=4, matcher_channels=4)).planes == 3
    assert 1 << geo.kb_width == 8                 # KB = 2^ceil(log2(2 * ceil(64 / 16)))
    assert geo.row_pairs == 32 and geo.bank_depth == 32 * 8   # a word holds rows 2r, 2r+1


def test_rejected_starts_and_python_check():
    """Error bits of a few bad configurations (the dispatcher bit included), and the Python
    check before simulation."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16,
                        engine_max_head_dim=8, sched_pattern_width=4, matcher_channels=4,
                        engine_dispatcher="none")
    grid, groups = VideoGrid(1, 2, 2), ChannelGroups.from_sizes(2, 3, 3)
    q = k = np.zeros((grid.n, 8), np.int8)
    good = engine_ports(cfg, grid, groups)
    names = [n for n, _ in ERROR_BITS]
    for change, name in [({"cfg__t": 0}, "grid"), ({"cfg__head_dim": 9}, "head_dim"),
                         ({"cfg__half_bits": 5}, "bits"), ({"cfg__schedule": 1}, "dispatcher"),
                         ({"cfg__match": 1}, "dispatcher")]:
        out = run_engine(cfg, q, k, grid, groups, ports={**good, **change})
        assert out["error"] == 1 << names.index(name), change
    dense_sched = run_engine(cfg, q, k, grid, groups, ports={**good, "cfg__reuse": 0,
                                                             "cfg__schedule": 1})
    assert dense_sched["error"] == 0        # dense ignores the dispatcher bits
    with pytest.raises(ValueError, match="engine_max_tokens"):
        check_engine_run(cfg, VideoGrid(1, 1, 17), groups)
    for variant in ("pe-sh", "pe-m", "full"):
        with pytest.raises(ValueError, match="dispatcher hardware"):
            check_engine_run(cfg, grid, groups, variant=variant)
    check_engine_run(dataclasses.replace(cfg, engine_dispatcher="matcher"), grid, groups,
                     variant="pe-m")
    with pytest.raises(ValueError, match="dispatcher hardware"):
        check_engine_run(dataclasses.replace(cfg, engine_dispatcher="matcher"), grid, groups,
                         variant="pe-sh")
    with pytest.raises(ValueError, match="variant must be one of"):
        check_engine_run(cfg, grid, groups, variant="fast")


def _prepass_gaps(trace, cfg) -> int:
    """Cycles by which a side's pre-pass handshakes strayed from their cadence (0 unless
    injected stalls block them). Reading its own port, the pre-pass hands over one unit per
    two cycles; snooping array 0's loads (``sched_sides = "q"``), one per two cycles within
    the R row units of a quad (the units are numbered by their row positions)."""
    out = 0
    for units_in, cycles in zip(trace.inputs, trace.input_cycles):
        if cfg.sched_sides == "qk":
            out += cycles[-1] - cycles[0] - 2 * (len(cycles) - 1) if cycles else 0
            continue
        for (u0, c0), (u1, c1) in zip(zip(units_in, cycles), zip(units_in[1:], cycles[1:])):
            if u0 // cfg.rows == u1 // cfg.rows:
                out += abs(c1 - c0 - 2)
    return out


def check_dispatch_run(cfg, q, k, grid, groups, variant, label):
    """One run with the dispatcher probes recorded: S bit-exact; without stall injection
    every counter equal to the cycle model, with it the work counters (issued, skipped,
    merged, bubbles, quads, busy PE-cycles, chunks) equal and the time only longer, every
    lost cycle counted (idle + stall = cycles - issued - bubbles per array); the orders and
    slots satisfy the invariants of ``golden.engine.trace`` and equal the golden model's."""
    want = model_counters(cfg, q, k, grid, groups, variant)
    out = run_engine(cfg, q, k, grid, groups, variant, stall_every=3, trace=True,
                     max_cycles=6 * want["cycles"] + 1000)
    assert out["error"] == 0, label
    assert np.array_equal(out["S"], attention_scores(q, k, grid, groups)), f"{label}: S differs"
    got = out["counters"]
    gaps = sum(_prepass_gaps(tr, cfg) for tr in out["orders"].values())
    # Under stall injection the chunks that fall back follow the run's own timing.
    natural = observed_fallbacks(out["orders"]) if cfg.engine_stall_seed else None
    if natural is not None:
        want = model_counters(cfg, q, k, grid, groups, variant, natural=natural)
    check_counters(got, want, cfg.engine_arrays, bool(cfg.engine_stall_seed), label)
    got["gaps"] = gaps
    summary = check_trace(expected_trace(q, k, grid, groups, EngineParams.from_config(cfg),
                                         variant, natural=natural),
                          out["orders"], out["slots"], label)
    return got, want, summary


#: Stall-injection runs: (arrays, variant, engine_stall_seed); the first is in make test,
#: the rest marked full_set (make regress).
STALL_RUNS = [(2, "full", 0x5A5A, "qk"), (2, "full", 0x5A5A, "q"), (2, "full", 0, "q"),
              (1, "pe-sh", 0x1234, "q"), (1, "pe-m", 0x0BAD, "q"), (1, "full", 0x7777, "qk"),
              (1, "full", 0, "qk"), (2, "pe-sh", 0x2468, "qk"), (2, "pe-m", 0x1357, "q"),
              (2, "pe-m", 0, "q"), (2, "pe-sh", 0, "q")]


@pytest.mark.parametrize("arrays,variant,seed,sides", [
    r if i < 1 else pytest.param(*r, marks=pytest.mark.full_set)
    for i, r in enumerate(STALL_RUNS)])
def test_dispatch_invariants_under_stalls(arrays, variant, seed, sides):
    """Random stalls on every internal stream (pre-pass -> OrderUnits, their schedulers, the
    SlotUnits' blk / quad / item streams and matchers; ``engine_stall_seed``), P arrays of
    2 x 2 on an odd 3x3x2 grid with chunks of 4 (groups 5/6/5: 2 + 2 + 2 chunks, several
    scheduler batches of 4 per chunk): S, work counters, the stall accounting, and per
    chunk and column block the orders (permutations of the chunk's units) and the slots
    (each channel with work exactly once, only compatible pairs), equal to the golden model;
    with the seed 0 (no injection) every counter is cycle-exact and ``stall`` is 0."""
    cfg = KaleidoConfig(rows=2, cols=2, engine_arrays=arrays, engine_max_tokens=32,
                        engine_max_head_dim=16, sched_pattern_width=4, matcher_channels=4,
                        sched_entries=4, engine_stall_seed=seed, sched_sides=sides)
    grid = VideoGrid(3, 3, 2)
    groups = ChannelGroups.from_sizes(5, 6, 5, directions=(1, 0, 2))
    q, k = dispatch_qk(np.random.default_rng(arrays * 100 + seed % 97), grid.n, 16)
    got, want, summary = check_dispatch_run(cfg, q, k, grid, groups, variant,
                                            f"P={arrays} {variant} seed={seed:#x}")
    sched, match = variant in ("pe-sh", "full"), variant in ("pe-m", "full")
    # Every chunk but the first (natural order) and the fallbacks passes through the ordered
    # sides' schedulers.
    sides = len(cfg.ordered_sides)
    assert summary["orders"] == (sides * (want["chunks"] - 1 - summary["fallbacks"]) if sched
                                 else 0)
    assert (summary["slots"] > 0) == match
    stalls = sum(got[f"a{a}__stall"] for a in range(arrays))
    # Without injection the pre-pass keeps its cadence; with it, the injection must show: as
    # lost cycles of the run when the matcher's streams are stalled, and, when the
    # scheduler's are, as gaps in the pre-pass (those the next chunk's work hides: pe-sh runs
    # may take no more cycles than the model, by design) or, where it snoops array 0's loads
    # (sides "q"), which cannot wait, as pre-passes dropped (chunks fallen back).
    if seed and sched and sides == 1:
        timed = engine_counters(q, k, grid, groups, EngineParams.from_config(cfg), variant)
        assert got["gaps"] > 0 or summary["fallbacks"] > len(timed.fallbacks), got["gaps"]
    else:
        assert (got["gaps"] > 0) == bool(seed and sched), got["gaps"]
    if seed:
        assert got["cycles"] > want["cycles"] or not match
        assert (stalls > 0) == match          # only the SlotUnit's items stall the stepper
