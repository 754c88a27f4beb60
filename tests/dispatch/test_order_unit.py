"""OrderUnit (``kaleido_hw/dispatch/order_unit.py``, ``docs/engine.md`` "Orders"): the order and inverse
of every chunk equal the scheduler's golden order (dummies removed, LFSR carried over the
chunks, restarted by ``start``), read back through the read ports while the next chunk's
order is being written (double buffering), under random valid gaps; the exact latency from
the first unit to ``avail``; and the engine contract through ``golden.engine.model.orders``."""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.sim import Simulator

from golden.array.schedule import units
from golden.dispatch.model import SchedulerParams, schedule
from golden.engine.model import EngineParams, chunks, orders
from golden.numerics import HALF, NONE, ChannelGroups, VideoGrid, reuse_masks
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.order_unit import OrderUnit


SMALL = KaleidoConfig(sched_entries=8, sched_clusters=2, sched_pattern_width=8,
                      matcher_channels=8, engine_max_tokens=64)


def golden_orders(cfg, runs):
    """``runs``: list of runs, each a list of chunks (pattern lists in natural unit order).
    Returns, per chunk in sequence, (order, inverse); every run starts from the seed."""
    sp = SchedulerParams.from_config(cfg)
    E = cfg.sched_entries
    out = []
    for run in runs:
        state = cfg.sched_lfsr_seed
        for pats in run:
            U = len(pats)
            padded = np.zeros(-(-U // E) * E, dtype=np.uint64)
            padded[:U] = pats
            r = schedule(padded, sp, state=state)
            state = r.state
            flat = (r.order + (np.arange(r.order.shape[0]) * E)[:, None]).ravel()
            order = [int(u) for u in flat if u < U]
            out.append((order, [order.index(u) for u in range(U)]))
    return out


def key_of(u, key_width):
    """The key the key-mode tests give unit ``u`` (a scrambled function of it)."""
    return (u * 37 + 5) % (1 << key_width)


def run_unit(cfg, runs, *, gap=0.0, seed=0, hold=True, pauses=None, inverse_banks=2,
             abort_after=0, key_width=0, max_cycles=200_000):
    """Feed every run's chunks (``start`` pulsed before each run) with random valid gaps.
    With ``hold``, an order is read back only once the next chunk's order is complete too
    (or it is the run's last chunk), then released. Returns the orders read, the cycles of
    each chunk's first unit handshake, and the first cycle ``avail`` counted each chunk.
    ``pauses``: {index into the run's units: idle cycles before offering that unit}.
    ``abort_after``: first feed that many units of an unfinished chunk and let them reach
    the scheduler's output (the first run's ``start`` must drop them). ``key_width``: feed
    every unit with :func:`key_of` as its key; the orders read are then keys."""
    pauses = dict(pauses or {})
    rng = random.Random(seed)
    dut = OrderUnit(cfg, order_ports=2, inverse_ports=2, inverse_banks=inverse_banks,
                    key_width=key_width)
    got, first_in, ready_at, max_avail, last_in = [], [], [], [0], []

    async def bench(ctx):
        cycle = 0
        for u in range(abort_after):
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload.unit, u)
            ctx.set(dut.i.payload.pattern, rng.getrandbits(cfg.sched_pattern_width))
            ctx.set(dut.i.payload.last, 0)
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        await ctx.tick().repeat(3 * cfg.sched_entries)

        async def tick():
            nonlocal cycle
            await ctx.tick()
            cycle += 1

        for run in runs:
            ctx.set(dut.start, 1)
            await tick()
            ctx.set(dut.start, 0)
            feed = [(u, p, u == len(pats) - 1) for pats in run for u, p in enumerate(pats)]
            sizes = [len(p) for p in run]
            k_in = 0          # next unit to offer
            done_chunks = 0   # orders counted by avail so far (this run)
            read_chunks = 0
            prev_avail = 0
            offering = False
            while read_chunks < len(run):
                assert cycle < max_cycles, "timeout"
                if not offering and pauses.get(k_in, 0) > 0:
                    pauses[k_in] -= 1
                elif not offering and k_in < len(feed) and not (gap and rng.random() < gap):
                    offering = True
                    u, p, last = feed[k_in]
                    ctx.set(dut.i.payload.unit, u)
                    if key_width:
                        ctx.set(dut.i.payload.key, key_of(u, key_width))
                    ctx.set(dut.i.payload.pattern, int(p))
                    ctx.set(dut.i.payload.last, last)
                ctx.set(dut.i.valid, offering)
                avail = ctx.get(dut.avail)
                max_avail[0] = max(max_avail[0], avail)
                if avail > prev_avail:
                    ready_at.append(cycle)
                    done_chunks += 1
                prev_avail = avail
                can_read = avail and (not hold or avail == 2 or done_chunks == len(run))
                if can_read:
                    ctx.set(dut.i.valid, 0)        # keep the stimulus simple while reading
                    bank = ctx.get(dut.rbank)
                    U = sizes[read_chunks]
                    order, inv = [], []
                    assert bank == read_chunks % 2
                    ibank = read_chunks % inverse_banks
                    # Both ports of each memory, alternately; with keys the last position first
                    # (its key may be written in the cycle avail counts the order).
                    for a in (reversed(range(U)) if key_width else range(U)):
                        op, ip = dut.ord_rd[a % 2], dut.inv_rd[(a + 1) % 2]
                        ctx.set(op.bank, bank)
                        ctx.set(op.addr, a)
                        ctx.set(ip.bank, ibank)
                        ctx.set(ip.addr, a)
                        await tick()
                        order.append(ctx.get(op.data))
                        if key_width:
                            assert not ctx.get(op.natural)
                        inv.append(ctx.get(ip.data))
                    if key_width:
                        order.reverse()
                        inv.reverse()
                    got.append((order, inv))
                    read_chunks += 1
                    ctx.set(dut.release, 1)
                    await tick()
                    ctx.set(dut.release, 0)
                    prev_avail = ctx.get(dut.avail)
                    continue
                _, _, iv, ir = await ctx.tick().sample(dut.i.valid, dut.i.ready)
                if iv and ir:
                    if feed[k_in][0] == 0:
                        first_in.append(cycle)
                    if feed[k_in][2]:
                        last_in.append(cycle)
                    k_in += 1
                    offering = False
                cycle += 1
            assert ctx.get(dut.avail) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return SimpleNamespace(got=got, first_in=first_in, ready_at=ready_at,
                           max_avail=max_avail[0], last_in=last_in)


def random_run(rng, W, n_chunks, max_units):
    """Chunks with unit counts mostly not a multiple of E; clustered and random patterns."""
    run = []
    for _ in range(n_chunks):
        U = rng.choice((1, rng.randrange(1, max_units + 1), rng.randrange(1, max_units + 1)))
        protos = [rng.getrandbits(W) for _ in range(3)]
        pats = [rng.choice((rng.getrandbits(W), rng.choice(protos) ^ (1 << rng.randrange(W)),
                            0, (1 << W) - 1)) for _ in range(U)]
        run.append(pats)
    return run


@pytest.mark.parametrize("cfg,gap,seed,inverse_banks", [
    (SMALL, 0.3, 1, 2),
    (SMALL, 0.0, 2, 3),
    (dataclasses.replace(SMALL, sched_entries=12, sched_clusters=3, sched_pattern_width=12,
                         matcher_channels=4), 0.5, 3, 2),
])
def test_orders_are_the_golden_schedule(cfg, gap, seed, inverse_banks):
    """Two runs (``start`` between them restarts the LFSR) of several chunks each, some of
    exactly E units; every order and inverse equals the golden one (inverse bank k mod
    ``inverse_banks``); orders are read while the next chunk's is already complete in the
    other bank."""
    rng = random.Random(seed)
    W = cfg.sched_pattern_width
    runs = [random_run(rng, W, 5, 40), random_run(rng, W, 3, 40)]
    runs[0][1] = runs[0][1][:1] + [rng.getrandbits(W) for _ in range(cfg.sched_entries * 2 - 1)]
    want = golden_orders(cfg, runs)
    r = run_unit(cfg, runs, gap=gap, seed=seed, inverse_banks=inverse_banks)
    got = r.got
    assert r.max_avail == 2      # both banks held a complete order at once
    assert len(got) == len(want)
    for n, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"chunk {n}"
    # the scheduler really reorders (not the identity everywhere)
    assert any(w[0] != sorted(w[0]) for w in want)


@pytest.mark.parametrize("hold", [True, False])
def test_keys_follow_the_order(hold):
    """With ``key_width`` the order memory holds each unit's key (written one cycle after the
    scheduler's output) in the golden order, ``natural`` reads 0, and the timing is the same:
    without ``hold`` every order is read, last position first, from the cycle ``avail``
    counts it: for a chunk of whole batches that key is written in that very cycle (one
    cycle after the last output), which the transparent read port returns."""
    rng = random.Random(9)
    W, kw, E = SMALL.sched_pattern_width, 11, SMALL.sched_entries
    runs = [random_run(rng, W, 5, 30) + [[rng.getrandbits(W)]],
            [[rng.getrandbits(W) for _ in range(E)]] * 2 + [[rng.getrandbits(W)]]]
    want = golden_orders(SMALL, runs)
    plain = run_unit(SMALL, runs, hold=hold, seed=2)
    keyed = run_unit(SMALL, runs, hold=hold, seed=2, key_width=kw)
    assert keyed.ready_at == plain.ready_at and keyed.first_in == plain.first_in
    assert len(keyed.got) == len(want)
    for n, ((order, inv), w) in enumerate(zip(keyed.got, want)):
        assert order == [key_of(u, kw) for u in w[0]], f"chunk {n}"
        assert inv == w[1], f"chunk {n}"


def test_default_config_and_latency():
    """Defaults (E = 64, K = 4, W = 16): exact orders, and without gaps ``avail`` counts a
    chunk's order exactly ``ceil(U/E)*E + 2E + 4`` cycles after its first unit."""
    cfg = KaleidoConfig()
    rng = random.Random(5)
    runs = [[[rng.getrandbits(16) for _ in range(U)] for U in (50, 64, 3)]]
    want = golden_orders(cfg, runs)
    r = run_unit(cfg, runs, hold=False)
    assert r.got == want
    assert len(r.ready_at) == 3
    E = cfg.sched_entries
    for U, x, ready in zip((50, 64, 3), r.first_in, r.ready_at):
        assert ready - x == -(-U // E) * E + 2 * E + 4, (U, x, ready)


def test_engine_contract_orders():
    """Chunks of a real head (grid 3x5x4, 16 channels in groups 4/6/6, W = 4): the K side's
    units fed with their follower patterns give ``golden.engine.model.orders``' column orders
    (``sched_sides = "qk"``: the build in which K has an OrderUnit)."""
    cfg = KaleidoConfig(sched_entries=8, sched_clusters=2, sched_pattern_width=4,
                        matcher_channels=4, engine_max_tokens=64, sched_sides="qk")
    grid = VideoGrid(3, 5, 4)
    groups = ChannelGroups.from_sizes(4, 6, 6)
    rng = np.random.default_rng(3)
    q = rng.integers(-128, 128, (grid.n, 16)).astype(np.int8)
    k = np.clip(np.cumsum(rng.integers(-6, 7, (grid.n, 16)), axis=0), -128, 127).astype(np.int8)
    codes = (reuse_masks(q, grid, groups), reuse_masks(k, grid, groups))
    p = EngineParams.from_config(cfg)
    want = orders(codes, grid, groups, p, scheduled=True)
    # The engine's first chunk runs in natural order: the OrderUnit sees chunks 1, 2, ...
    assert all((w.k == np.arange(w.k.size)).all() for w in want[:1])
    want = want[1:]
    run = []
    for ch in chunks(groups, p.width)[1:]:
        _, followers = units(grid, ch.direction)
        pats = []
        for f in followers:
            bits = 0
            if f >= 0:
                for j, c in enumerate(ch.channels):
                    bits |= int(codes[1][f, c] in (HALF, NONE)) << j
            pats.append(bits)
        run.append(pats)
    got = run_unit(cfg, [run], gap=0.2, seed=4).got
    assert len(got) == len(want)
    for n, ((order, inv), w) in enumerate(zip(got, want)):
        assert order == [int(u) for u in w.k], f"chunk {n + 1}"
        assert inv == [int(v) for v in w.inv_k], f"chunk {n + 1}"


def test_long_input_pause_at_a_batch_boundary():
    """The input stops for 3E cycles right after a whole batch of a longer chunk: that batch
    drains completely before the chunk goes on, and the order is still complete only at
    the chunk's final batch, 2E + 5 cycles after the last (dummy) entry went in."""
    cfg = SMALL
    E = cfg.sched_entries
    rng = random.Random(6)
    runs = [[[rng.getrandbits(8) for _ in range(2 * E + 3)],
             [rng.getrandbits(8) for _ in range(5)]]]
    want = golden_orders(cfg, runs)
    r = run_unit(cfg, runs, pauses={E: 3 * E, 2 * E: 3 * E}, hold=False)
    assert r.got == want
    # with gaps: ready 2E + 5 cycles after the last entry (unit or dummy) went in
    sizes = [len(c) for c in runs[0]]
    assert r.ready_at == [z + (-(-U // E) * E - U) + 2 * E + 5
                          for z, U in zip(r.last_in, sizes)]


def test_start_drops_a_chunk_in_progress():
    """``start`` in the middle of a chunk (two batches already through the scheduler, a
    third half fed): the new run's orders start again from the seed."""
    cfg = SMALL
    rng = random.Random(11)
    runs = [random_run(rng, cfg.sched_pattern_width, 3, 30)]
    r = run_unit(cfg, runs, abort_after=2 * cfg.sched_entries + 3, seed=12)
    assert r.got == golden_orders(cfg, runs)


class _Port:
    """Testbench steps on a one-port OrderUnit (``dut``) within a simulation (``ctx``)."""

    def __init__(self, ctx, dut):
        self.ctx, self.dut = ctx, dut

    async def pulse(self, *signals):
        for s in signals:
            self.ctx.set(s, 1)
        await self.ctx.tick()
        for s in signals:
            self.ctx.set(s, 0)

    async def wait_avail(self, n):
        for _ in range(10_000):
            if self.ctx.get(self.dut.avail) == n:
                return
            await self.ctx.tick()
        raise AssertionError(f"avail never reached {n}")

    def point(self, bank, addr, ibank, iaddr):
        """Address the order read port at ``bank``/``addr``, the inverse's at
        ``ibank``/``iaddr`` (their data is there after the next edge)."""
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.ord_rd[0].bank, bank)
        ctx.set(dut.ord_rd[0].addr, addr)
        ctx.set(dut.inv_rd[0].bank, ibank)
        ctx.set(dut.inv_rd[0].addr, iaddr)

    async def read(self, units, bank, ibank, release=True):
        """Order and inverse of ``units`` positions of ``bank`` / ``ibank``; then release."""
        ctx, dut = self.ctx, self.dut
        order, inv = [], []
        for a in range(units):
            self.point(bank, a, ibank, a)
            await ctx.tick()
            order.append(ctx.get(dut.ord_rd[0].data))
            inv.append(ctx.get(dut.inv_rd[0].data))
        if release:
            await self.pulse(dut.release)
        return order, inv

    async def open_run(self, chunk):
        """``start``; chunk 0 natural (bank 0, inverse bank 0); ``chunk`` scheduled into
        bank 1, inverse bank 1; both complete."""
        await self.pulse(self.dut.start)
        await self.pulse(self.dut.natural)
        await self.feed(chunk)
        await self.wait_avail(2)

    async def feed(self, pats, count=None):
        """The chunk's units (the first ``count`` of them), one per accepted handshake."""
        ctx, dut = self.ctx, self.dut
        for u, p in enumerate(pats[:count]):
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload.unit, u)
            ctx.set(dut.i.payload.pattern, p)
            ctx.set(dut.i.payload.last, u == len(pats) - 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)


def _simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_natural_chunks_take_a_bank_without_the_scheduler():
    """``natural`` completes a chunk at once in the next bank (order and inverse answer a read
    of ``addr`` with ``addr``); a scheduled chunk written there later answers with its own
    order again, and the LFSR is untouched by natural chunks. Sequence: natural, scheduled
    A, natural, scheduled B, with 3 inverse banks (so the inverse flags rotate differently
    from the order banks)."""
    cfg = SMALL
    rng = random.Random(5)
    W, U = cfg.sched_pattern_width, 37
    chunk_a = [rng.getrandbits(W) for _ in range(U)]
    chunk_b = [rng.getrandbits(W) for _ in range(U)]
    want_a, want_b = golden_orders(cfg, [[chunk_a, chunk_b]])
    identity = (list(range(U)), list(range(U)))
    dut = OrderUnit(cfg, order_ports=1, inverse_ports=1, inverse_banks=3)
    got = []

    async def bench(ctx):
        t = _Port(ctx, dut)
        await t.pulse(dut.start)
        await t.pulse(dut.natural)
        assert ctx.get(dut.avail) == 1 and ctx.get(dut.rbank) == 0
        await t.feed(chunk_a)                      # into bank 1, inverse bank 1
        await t.wait_avail(2)
        got.append(await t.read(U, 0, 0))          # natural
        await t.pulse(dut.natural)                 # bank 0, inverse bank 2
        got.append(await t.read(U, 1, 1))          # chunk A
        await t.feed(chunk_b)                      # bank 1 again, inverse bank 0
        await t.wait_avail(2)
        got.append(await t.read(U, 0, 2))          # natural
        got.append(await t.read(U, 1, 0))          # chunk B (inverse bank 0 was natural)

    _simulate(dut, bench)
    assert got == [identity, want_a, identity, want_b]


def test_abort_drops_the_chunk_in_progress_for_a_natural_one():
    """The engine's fallback (``docs/engine.md``, "Orders"): while chunk A's order is in use
    and chunk B is half scheduled (one batch already written), one cycle carries ``abort``,
    ``natural`` and ``release`` (A): no unit is taken in that cycle, B's bank (order and
    inverse) answers as natural even to reads issued in that very cycle, ``avail`` stays 1,
    and the next chunk C is scheduled with the LFSR from the seed (the scheduler restarted)
    into the following banks. Sequence: natural, A, natural (B dropped), C, with 3 inverse
    banks."""
    cfg = SMALL
    E = cfg.sched_entries
    rng = random.Random(8)
    W, U = cfg.sched_pattern_width, 29
    chunk_a, chunk_b, chunk_c = ([rng.getrandbits(W) for _ in range(U)] for _ in range(3))
    want_a, want_c = golden_orders(cfg, [[chunk_a], [chunk_c]])
    identity = (list(range(U)), list(range(U)))
    dut = OrderUnit(cfg, order_ports=1, inverse_ports=1, inverse_banks=3)
    got, same_cycle = [], []

    async def bench(ctx):
        t = _Port(ctx, dut)
        await t.open_run(chunk_a)                  # chunk 0 natural, A in banks 1
        got.append(await t.read(U, 0, 0))          # natural
        got.append(await t.read(U, 1, 1, release=False))   # A, in use
        await t.feed(chunk_b, E + 3)               # B: bank 0, inverse bank 2
        await ctx.tick().repeat(2 * E + 8)         # its first batch is written
        assert ctx.get(dut.avail) == 1
        # The fallback cycle: a unit offered is not taken; reads of B's banks already natural.
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload.unit, E + 3)
        t.point(0, 5, 2, 7)
        for s in (dut.abort, dut.natural, dut.release):
            ctx.set(s, 1)
        _, _, ready = await ctx.tick().sample(dut.i.ready)
        assert not ready
        same_cycle.append((ctx.get(dut.ord_rd[0].data), ctx.get(dut.inv_rd[0].data)))
        for s in (dut.abort, dut.natural, dut.release, dut.i.valid):
            ctx.set(s, 0)
        assert ctx.get(dut.avail) == 1 and ctx.get(dut.rbank) == 0
        await ctx.tick().repeat(4 * E)             # nothing of B may complete late
        assert ctx.get(dut.avail) == 1
        await t.feed(chunk_c)                      # bank 1, inverse bank 0
        await t.wait_avail(2)
        got.append(await t.read(U, 0, 2))          # B, natural
        got.append(await t.read(U, 1, 0))          # C

    _simulate(dut, bench)
    assert same_cycle == [(5, 7)]
    assert got == [identity, want_a, identity, want_c]


def test_abort_replaces_a_complete_order():
    """With two ordered sides the engine falls back when either side's order is late, so
    one side may see ``abort`` when its own order of that chunk is already complete: the
    natural chunk then replaces that order in its banks (``avail`` counts it once), and the
    next chunk goes to the banks after it, scheduled from the seed. Sequence: natural
    (chunk 0, in use), A complete, then abort + natural + release of chunk 0 in one cycle
    (A dropped: its banks, order 1 and inverse 1 of 3, answer as natural from that cycle),
    then C into order bank 0 and inverse bank 2."""
    cfg = SMALL
    rng = random.Random(12)
    W, U = cfg.sched_pattern_width, 21
    chunk_a, chunk_c = ([rng.getrandbits(W) for _ in range(U)] for _ in range(2))
    (want_c,) = golden_orders(cfg, [[chunk_c]])
    identity = (list(range(U)), list(range(U)))
    dut = OrderUnit(cfg, order_ports=1, inverse_ports=1, inverse_banks=3)
    got, same_cycle = [], []

    async def bench(ctx):
        t = _Port(ctx, dut)
        await t.open_run(chunk_a)                  # chunk 0 natural, A in banks 1
        t.point(1, 3, 1, 4)
        await t.pulse(dut.abort, dut.natural, dut.release)
        same_cycle.append((ctx.get(dut.ord_rd[0].data), ctx.get(dut.inv_rd[0].data)))
        assert ctx.get(dut.avail) == 1 and ctx.get(dut.rbank) == 1
        got.append(await t.read(U, 1, 1))          # the natural chunk in A's banks
        await t.feed(chunk_c)                      # C: bank 0, inverse bank 2
        await t.wait_avail(1)
        got.append(await t.read(U, 0, 2))

    _simulate(dut, bench)
    assert same_cycle == [(3, 4)]
    assert got == [identity, want_c]
