"""cocotb bench of ``pv_engine`` (``docs/linear.md``, "P @ V on the PE arrays"): O bit-exact
against ``golden.vector.attention_int(p, V_eff)`` and every counter equal to
``golden.engine.pv.pv_counters`` on the build's P arrays (cycles and the per-array counters
included), windows 2 and 3, every axis, reuse and dense, odd grids, padding row and column
blocks, runs with fewer column blocks than arrays and with several per array, random gaps on the P and V write streams,
random back-pressure on the O stream; then every error bit.

``make -C sim/engine/pv [SIM=icarus]`` on rtl_out (the default build); pytest runs it on a
small variant (``tests/engine/test_pv_engine_sim.py``). ``KALEIDO_SEEDS=N`` runs N seeds;
``KALEIDO_MANIFEST`` names the manifest of a non-default build.
"""

from __future__ import annotations

import random
import zlib

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from run_host import load_config
from simlib import (StreamSink, StreamSource, seeds_requested, start_and_wait_done,
                    start_clock_and_reset, to_signed)

from golden.engine.pv import pv_counters, pv_p_words, pv_v_words
from golden.numerics import VideoGrid
from golden.vector import attention_int
from golden.window import window_effective_operand, window_masks
from kaleido_hw.bitops import bits_for
from kaleido_hw.engine.pv_engine import (ERROR_BITS, PvEngine, counter_names,
                                         counters_from_model)


CFG = load_config()
GEO = PvEngine(CFG)
R, C, AW, P = CFG.rows, CFG.cols, CFG.acc_width, CFG.engine_arrays
RBW = bits_for(GEO.nrb_max - 1)
CBW = bits_for(GEO.ncb_max - 1)
KW = GEO.key_width


def rng_for(test: str, n: int = 0) -> np.random.Generator:
    """A generator seeded by the test name, the seed index and cocotb's seed."""
    return np.random.default_rng([zlib.crc32(test.encode()), n, int(cocotb.RANDOM_SEED)])


def grids():
    """Odd grids (incomplete windows on every axis) that fit the build."""
    out = [g for g in (VideoGrid(5, 3, 3), VideoGrid(3, 3, 3), VideoGrid(3, 2, 5),
                       VideoGrid(2, 2, 2), VideoGrid(1, 1, 3)) if g.n <= GEO.max_keys]
    return out[:2]


def values(kind: str, n: int, d: int, rng) -> np.ndarray:
    """(N, d) int8 V: smooth (a random walk: much FULL), nibble (one high nibble with
    random low nibbles and a few outliers: HALF and NONE) or random."""
    if kind == "smooth":
        return np.clip(np.cumsum(rng.integers(-2, 3, (n, d)), 0) + rng.integers(-60, 60, d),
                       -128, 127).astype(np.int8)
    if kind == "nibble":
        v = (rng.integers(-8, 8, (1, d)) * 16 + rng.integers(0, 16, (n, d))).astype(np.int8)
        v[rng.random(n) < 0.2] = rng.integers(-128, 128, d)
        return v
    return rng.integers(-128, 128, (n, d)).astype(np.int8)


class PvHost:
    """Drives one pv_engine (clock and reset running)."""

    def __init__(self, dut, rng: random.Random):
        self.dut = dut
        self.p_src = StreamSource(dut, "p_in", gap=0.3, rng=rng)
        self.v_src = StreamSource(dut, "v_in", gap=0.3, rng=rng)
        self.sink = StreamSink(dut, "o", stall=0.4, rng=rng)
        self.sink.start()
        dut.start.value = 0

    async def run(self, p, v, grid, axis, window, reuse=True, bits=(5, 3), override=None):
        dut = self.dut
        q, n = p.shape
        d = v.shape[1]
        await self.p_src.send(rb | k << RBW | word << (RBW + KW)
                              for rb, k, word in pv_p_words(p, R))
        await self.v_src.send(cb | k << CBW | word << (CBW + KW)
                              for cb, k, word in pv_v_words(v, C))
        cfg = dict(t=grid.t, h=grid.h, w=grid.w, axis=axis, window=window, queries=q,
                   channels=d, reuse=int(reuse), full_bits=bits[0], half_bits=bits[1])
        cfg.update(override or {})
        for name, value in cfg.items():
            getattr(dut, f"cfg__{name}").value = value
        await start_and_wait_done(dut, 200000, "pv_engine")
        error = int(dut.error.value)
        counters = {c: int(getattr(dut, f"cnt__{c}").value) for c in counter_names(P)}
        if error:
            return error, counters, None
        start = len(self.sink.items)
        while True:
            await RisingEdge(dut.clk)
            if len(self.sink.items) > start and self.sink.items[-1] >> AW & 1:
                break
        for _ in range(4):
            await RisingEdge(dut.clk)
        items = self.sink.items[start:]
        assert len(items) == q * d, f"O stream gave {len(items)} values, expected {q * d}"
        o = np.array([to_signed(x & ((1 << AW) - 1), AW) for x in items], np.int64)
        return error, counters, o.reshape(q, d)


async def check_run(host, p, v, grid, axis, window, reuse=True, bits=(5, 3)):
    error, counters, o = await host.run(p, v, grid, axis, window, reuse, bits)
    assert error == 0, f"error {error:#x}"
    v_eff = v
    if reuse:
        v_eff = window_effective_operand(v, window_masks(v, grid, axis, window, *bits), grid,
                                         axis, window)
    wrap = 1 << AW
    ref = (attention_int(p, v_eff) + wrap // 2) % wrap - wrap // 2
    np.testing.assert_array_equal(o, ref)
    model = pv_counters(p, v, grid, axis, window, R, C, P, *bits, reuse=reuse)
    want = counters_from_model(model)
    assert counters == want, (counters, want)


@cocotb.test()
async def test_runs(dut):
    """Back-to-back runs on one engine: both windows, every axis, three data kinds, reuse
    and dense, queries and channels that leave padding rows and columns, from one column
    block up to more than one per array."""
    await start_clock_and_reset(dut)
    for s in range(seeds_requested()):
        rng = rng_for("runs", s)
        host = PvHost(dut, random.Random(int(rng.integers(1 << 30))))
        k = 0
        for grid in grids():
            for window in (2, 3):
                for axis in range(3):
                    kind = ("smooth", "nibble", "random")[k % 3]
                    reuse = k % 5 != 4
                    k += 1
                    q = int(rng.integers(1, min(GEO.max_queries, 2 * R + 2) + 1))
                    d = int(rng.integers(1, min(GEO.max_channels, (P + 1) * C + 2) + 1))
                    p = rng.integers(0, 256, (q, grid.n))
                    v = values(kind, grid.n, d, rng)
                    dut._log.info(f"grid {grid} window {window} axis {axis} {kind} "
                                  f"reuse {reuse} q {q} d {d}")
                    await check_run(host, p, v, grid, axis, window, reuse)


@cocotb.test()
async def test_errors(dut):
    """Every error bit at start; the engine runs normally afterwards."""
    await start_clock_and_reset(dut)
    rng = rng_for("errors")
    host = PvHost(dut, random.Random(7))
    grid = VideoGrid(1, 2, 2)
    p = rng.integers(0, 256, (2, grid.n))
    v = values("smooth", grid.n, 2, rng)
    cases = [("window", 1, 0), ("axis", 3, 1), ("t", 0, 2), ("queries", 0, 3),
             ("channels", 0, 4), ("full_bits", 3, 5), ("half_bits", 2, 5)]
    assert len(ERROR_BITS) == 6
    for name, value, bit in cases:
        error, _, _ = await host.run(p, v, grid, 0, 2, override={name: value})
        assert error == 1 << bit, (name, value, error)
    await check_run(host, p, v, grid, 0, 2)
