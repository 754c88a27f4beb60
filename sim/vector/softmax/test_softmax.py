"""cocotb bench of vector_unit (the softmax vector unit): rows of S in, uint8 P out.

Every run checks that each row comes out exactly once, in order, with the input's beat
structure (``tail``, ``last``), lanes past a row's end at 0, and P equal bit for bit to
``golden.vector.softmax_int``. Edge rows (all equal, very negative scores, length 1, the
longest row, the widest scores, the extreme scales) run without back-pressure and also
check the cycle count of a stream of full rows; random rows of random length and scale run
with random input gaps and random output stalls (four mixes of gap and stall rates); a row
longer than the buffer must set ``overflow`` and leave the next row unharmed.

``make -C sim/vector/softmax [SIM=icarus]``; ``KALEIDO_SEEDS=N`` runs N seeds of the random
test; ``KALEIDO_MANIFEST`` names the manifest of a non-default variant.
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from simlib import StreamSink, StreamSource, seeds_requested, start_clock_and_reset

from golden.engine.head import row_period
from golden.vector.softmax import (MULT_MAX, MULT_MIN, SHIFT_MAX, SHIFT_MIN, softmax_int,
                                   softmax_scale)


REPO = Path(__file__).resolve().parents[3]


def load_config() -> dict:
    """The configuration of the Verilog under test (``KALEIDO_MANIFEST`` or rtl_out's)."""
    path = Path(os.environ.get("KALEIDO_MANIFEST", REPO / "rtl_out" / "manifest.json"))
    if path.exists():
        return dict(json.loads(path.read_text())["config"])
    from kaleido_hw.config import KaleidoConfig
    return KaleidoConfig().to_dict()


CFG = load_config()
L = CFG["vector_lanes"]
B = CFG["vector_score_bits"]
MAX_ROW = CFG["vector_max_row"]
NB = CFG["vector_row_buffers"]
TW = max(1, (L - 1).bit_length())
S_MIN, S_MAX = -(1 << (B - 1)), (1 << (B - 1)) - 1


def pack_beats(row, mult, shift, rng):
    """The input beats of one row; lanes past its end carry random junk (must be ignored)."""
    n = len(row)
    beats = []
    for b in range(0, n, L):
        chunk = list(row[b:b + L])
        last = b + L >= n
        tail = len(chunk) - 1
        chunk += [rng.randint(S_MIN, S_MAX) for _ in range(L - len(chunk))]
        word = 0
        for i, s in enumerate(chunk):
            word |= (int(s) & ((1 << B) - 1)) << (i * B)
        pos = L * B
        word |= (tail if last else rng.randrange(1 << TW)) << pos   # tail matters only at last
        pos += TW
        word |= int(last) << pos
        pos += 1
        word |= mult << pos
        word |= shift << (pos + 16)
        beats.append(word)
    return beats


def unpack_beat(word):
    p = [(word >> (8 * i)) & 0xFF for i in range(L)]
    tail = (word >> (8 * L)) & ((1 << TW) - 1)
    last = (word >> (8 * L + TW)) & 1
    return p, tail, last


def check_rows(rows, items):
    """Split the output beats into rows and compare each with the golden model."""
    k = 0
    for r, (row, mult, shift) in enumerate(rows):
        n = len(row)
        nbeats = -(-n // L)
        assert len(items) >= k + nbeats, (
            f"row {r}: expected {nbeats} beats, only {len(items) - k} arrived")
        got = []
        for b in range(nbeats):
            p, tail, last = unpack_beat(items[k + b])
            is_last = b == nbeats - 1
            assert last == int(is_last), f"row {r} beat {b}: last = {last}"
            if is_last:
                valid = n - b * L
                assert tail == valid - 1, f"row {r}: tail {tail}, expected {valid - 1}"
                assert all(v == 0 for v in p[valid:]), f"row {r}: lanes past the row not 0: {p}"
                p = p[:valid]
            got += p
        k += nbeats
        want = softmax_int(np.asarray(row, dtype=np.int64), mult, shift).tolist()
        assert got == want, (f"row {r} (n={n}, mult={mult}, shift={shift}): P differs at "
                             f"{[i for i in range(n) if got[i] != want[i]][:8]}: "
                             f"got {got[:16]}, want {want[:16]}")
    assert len(items) == k, f"{len(items) - k} beats more than the rows have (duplicates?)"


async def run_rows(dut, rows, *, gap=0.0, stall=0.0, seed=0):
    """Stream ``rows`` (score list, mult, shift) through; return (beats out, cycles)."""
    rng = random.Random(seed)
    dut.s__valid.value = 0
    dut.p__ready.value = 0
    await start_clock_and_reset(dut)
    src = StreamSource(dut, "s", gap=gap, rng=random.Random(rng.random()))
    sink = StreamSink(dut, "p", stall=stall, rng=random.Random(rng.random()))
    sink.start()
    beats = [w for row, mult, shift in rows for w in pack_beats(row, mult, shift, rng)]
    await src.send(beats)
    expected = sum(-(-len(r) // L) for r, _, _ in rows)
    for _ in range(200 + 40 * expected * (1 + int(10 * stall))):
        if len(sink.items) >= expected:
            break
        await RisingEdge(dut.clk)
    for _ in range(50):             # anything extra would be a duplicate
        await RisingEdge(dut.clk)
    assert int(dut.overflow.value) == 0, "overflow set though no row was too long"
    return sink.items, sink.cycles_seen


def random_row(rng, n):
    """A row of scores whose logits have a spread of a few units (an interesting softmax),
    or occasionally uniform over the whole score range."""
    scale = math.exp(rng.uniform(math.log(1e-4), math.log(2.0)))
    mult, shift = softmax_scale(scale)
    if rng.random() < 0.15:
        row = [rng.randint(S_MIN, S_MAX) for _ in range(n)]
    else:
        spread = rng.uniform(0.5, 6.0) / scale
        centre = rng.uniform(S_MIN / 2, S_MAX / 2)
        row = [max(S_MIN, min(S_MAX, int(round(rng.gauss(centre, spread))))) for _ in range(n)]
    return row, mult, shift


def edge_rows():
    m0, s0 = softmax_scale(0.01)
    rows = [
        ([1234] * L, m0, s0),                                   # all equal: 255/n each
        ([5] * MAX_ROW, m0, s0),                                # all equal, longest row
        ([77], m0, s0),                                         # length 1: P = 255
        ([S_MIN], MULT_MAX, SHIFT_MIN),                         # length 1, extreme scale
        ([0] + [max(S_MIN, -(1 << 20))] * (L + 3), m0, s0),     # very negative scores
        ([S_MAX] + [S_MIN] * (L - 1), MULT_MAX, SHIFT_MIN),     # widest d, largest scale
        ([S_MAX, S_MIN, 0, -1], MULT_MIN, SHIFT_MAX),           # smallest scale: all ~equal
        (list(range(MAX_ROW)), m0, s0),                         # longest row, a ramp
        ([(-1) ** i * (i * 997 % S_MAX) for i in range(L + 1)], m0, s0),  # one lane over
    ]
    return [(row[:MAX_ROW], mult, shift) for row, mult, shift in rows]   # rows that fit


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_edge_rows(dut):
    """Edge rows, no back-pressure, bit-exact."""
    rows = edge_rows()
    items, _ = await run_rows(dut, rows, seed=1)
    check_rows(rows, items)


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_full_rows_throughput(dut):
    """A stream of longest rows without back-pressure: bit-exact, and once the pipeline is
    full rows of k beats leave on average every max(k, 14, (3k + 28) / NB) cycles
    (``golden.engine.head.row_period``): the reciprocal takes 14 cycles per row, and a row
    holds one of the NB buffers for about 3k + 28 cycles (three passes, the sum pipeline,
    the reciprocal)."""
    rng = random.Random(7)
    beats = MAX_ROW // L
    rows = [random_row(rng, MAX_ROW) for _ in range(3 * NB + 4)]
    items, cycles = await run_rows(dut, rows, seed=2)
    check_rows(rows, items)
    ends = [cycles[beats * (r + 1) - 1] for r in range(len(rows))]   # each row's last beat
    steady = ends[NB:]
    period = (steady[-1] - steady[0]) / (len(steady) - 1)
    dut._log.info(f"{beats}-beat rows, {NB} buffers: {period:.2f} cycles per row once full "
                  f"(gaps {[b - a for a, b in zip(steady, steady[1:])]}; ideal {beats})")
    bound = row_period(beats, NB)
    assert period <= bound, f"rows leave every {period:.2f} cycles, expected at most {bound:.2f}"


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_random_rows_backpressure(dut):
    """Random rows of random length and scale, random input gaps and output stalls."""
    for n in range(seeds_requested()):
        rng = random.Random(f"{cocotb.RANDOM_SEED}-random-{n}")
        lengths = [min(MAX_ROW, max(1, rng.choice([1, L - 1, L, L + 1, MAX_ROW,
                                                    rng.randint(1, MAX_ROW)])))
                   for _ in range(12)]
        rows = [random_row(rng, k) for k in lengths]
        gap, stall = [(0.3, 0.4), (0.0, 0.8), (0.7, 0.0), (0.5, 0.6)][n % 4]
        items, _ = await run_rows(dut, rows, gap=gap, stall=stall, seed=rng.random())
        check_rows(rows, items)


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_overflow_row(dut):
    """A row longer than vector_max_row: its extra beats are dropped, ``overflow`` goes high
    and stays, P is that of its first vector_max_row scores, and the next row is unharmed."""
    rng = random.Random(11)
    long_row, mult, shift = random_row(rng, MAX_ROW + L + 1)
    rows = [(long_row, mult, shift), random_row(rng, L + 2)]
    dut.s__valid.value = 0
    dut.p__ready.value = 0
    await start_clock_and_reset(dut)
    src = StreamSource(dut, "s", gap=0.2, rng=random.Random(1))
    sink = StreamSink(dut, "p", stall=0.3, rng=random.Random(2))
    sink.start()
    await src.send([w for row, m, s in rows for w in pack_beats(row, m, s, rng)])
    expected = MAX_ROW // L + -(-(L + 2) // L)
    for _ in range(2000):
        if len(sink.items) >= expected:
            break
        await RisingEdge(dut.clk)
    for _ in range(50):
        await RisingEdge(dut.clk)
    assert int(dut.overflow.value) == 1, "overflow not set by a row longer than the buffer"
    check_rows([(long_row[:MAX_ROW], mult, shift), rows[1]], sink.items)
