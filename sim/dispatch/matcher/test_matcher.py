"""cocotb bench of merge_matcher: random and adversarial batches, random valid gaps and ready
back-pressure. Every run checks the invariants independently of the golden model (every
(token, channel) with work issued exactly once with its own work units, at most 2 units per
column per slot, no all-FULL channel issued, first/last flags, token ids) and then exact
equality with ``golden.dispatch.model.match``; runs without back-pressure also check the cycle of
every batch acceptance and slot against ``golden.dispatch.model.matcher_slot_cycles``.

``make -C sim/dispatch/matcher [SIM=icarus]``; ``KALEIDO_SEEDS=N`` runs N seeds per random test;
``KALEIDO_MANIFEST`` names the manifest of a non-default variant.
"""

from __future__ import annotations

import random

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time
from dispatch_codec import DispatchCodec, load_config
from simlib import StreamSink, StreamSource, seeds_requested, start_clock_and_reset

from golden.dispatch.model import (SEL_BYTE_A, SEL_BYTE_B, SEL_NIB_A, SEL_NIB_AB, SEL_NIB_B,
                                   SEL_NONE, MatcherParams, match, matcher_slot_cycles)


CFG = load_config()
CODEC = DispatchCodec(CFG)
P = MatcherParams.from_config(CFG)
C, M, L = P.cols, P.channels, P.lookahead
PERIOD_NS = 10
# Units each select takes from (A, B).
SEL_UNITS = {SEL_NONE: (0, 0), SEL_BYTE_A: (2, 0), SEL_BYTE_B: (0, 2), SEL_NIB_A: (1, 0),
             SEL_NIB_B: (0, 1), SEL_NIB_AB: (1, 1)}


def edge_now() -> int:
    return int(get_sim_time("ns")) // PERIOD_NS


def rng_for(test: str, n: int = 0) -> random.Random:
    return random.Random(f"{cocotb.RANDOM_SEED}-{test}-{n}")


def make_tokens(rng: random.Random, nb: int) -> np.ndarray:
    space = 1 << P.token_id_width
    return np.array([[rng.randrange(space) for _ in range(C)] for _ in range(nb)])


async def run(dut, tokens, codes, n_slots, *, gap=0.0, stall=0.0, rng=None):
    """Stream the batches; return (offer edges, accept edges, slots, slot edges)."""
    rng = rng or random.Random(0)
    # Drive the handshake inputs before reset ends (Icarus would otherwise see X).
    dut.i__valid.value = 0
    dut.o__ready.value = 0
    await start_clock_and_reset(dut)
    src = StreamSource(dut, "i", gap=gap, rng=random.Random(rng.random()))
    sink = StreamSink(dut, "o", stall=stall, rng=random.Random(rng.random()))
    e0 = edge_now()
    sink.start()
    offers, accepts = [], []
    for n in range(len(codes)):
        offers.append(edge_now() + 1)   # valid is first sampled by the next edge (no gap)
        await src.send([CODEC.matcher_in(tokens[n], codes[n])])
        accepts.append(edge_now())
    for _ in range((n_slots + 20) * (1 + int(8 * stall))):
        if len(sink.items) >= n_slots:
            break
        await RisingEdge(dut.clk)
    for _ in range(M + 8):          # anything extra would be a duplicate
        await RisingEdge(dut.clk)
    slots = [CODEC.matcher_slot(v) for v in sink.items]
    return offers, accepts, slots, [e0 + c for c in sink.cycles_seen]


def check(tokens, codes, slots):
    """Invariants (independent of the golden model), then exact golden equality."""
    codes = np.asarray(codes)
    work = np.minimum(codes, 2)
    golden = match(codes, P)
    expected = [(a, b, mg, s, tuple(int(t) for t in tokens[n]), f, l)
                for (n, a, b, mg, s, f, l) in golden.as_tuples()]
    assert len(slots) == len(expected), \
        f"{len(slots)} slots issued, golden issues {len(expected)}"
    n, k = 0, 0
    covered = np.zeros_like(work)
    for j, (a, b, merged, sel, toks, first, last) in enumerate(slots):
        while golden.slots[n] == 0:     # batches without work issue no slot
            assert not work[n].any()
            n += 1
        assert toks == tuple(int(t) for t in tokens[n]), f"slot {j}: token ids {toks}"
        assert first == (k == 0), f"slot {j}: first flag {first}"
        assert merged or b == 0, f"slot {j}: b = {b} without merge"
        chans = (a, b) if merged else (a,)
        for ch in chans:
            assert work[n][:, ch].any(), f"slot {j}: all-FULL channel {ch} issued"
        for c in range(C):
            assert sel[c] in SEL_UNITS, f"slot {j}: column {c} select {sel[c]} is reserved"
            ua, ub = SEL_UNITS[sel[c]]
            assert ua + ub <= 2, f"slot {j}: column {c} carries {ua + ub} units"
            assert ua == work[n][c, a], f"slot {j} col {c}: A={a} takes {ua} of {work[n][c, a]}"
            if merged:
                assert ub == work[n][c, b], f"slot {j} col {c}: B={b} takes {ub}"
                covered[n][c, b] += ub > 0
            else:
                assert ub == 0, f"slot {j}: column {c} reads B of an unmerged slot"
            covered[n][c, a] += ua > 0
        k += 1
        if last:
            n, k = n + 1, 0
    assert np.array_equal(covered, (work > 0).astype(covered.dtype)), \
        "some (token, channel) with work was not issued exactly once"
    for j, (got, exp) in enumerate(zip(slots, expected)):
        assert got == exp, f"slot {j}: got {got}, golden {exp}"
    return golden


def random_codes(rng: random.Random, nb: int) -> np.ndarray:
    """Batches with varied FULL/HALF/NONE mixes, including some without any work."""
    out = np.zeros((nb, C, M), dtype=np.uint8)
    for n in range(nb):
        kind = rng.random()
        if kind < 0.1:
            continue                                     # all FULL: no slot
        weights = [rng.random() ** 2 for _ in range(3)] if kind < 0.7 else [0.6, 0.3, 0.1]
        out[n] = np.array(rng.choices(range(3), weights=weights, k=C * M)).reshape(C, M)
    return out


@cocotb.test()
async def random_batches_backpressure(dut):
    """Random batches, 30% valid gaps, 40% ready stalls: invariants and golden equality."""
    for s in range(seeds_requested(2)):
        rng = rng_for("random", s)
        codes = random_codes(rng, 24)
        tokens = make_tokens(rng, len(codes))
        n_slots = int(match(codes, P).slots.sum())
        _, _, slots, _ = await run(dut, tokens, codes, n_slots, gap=0.3, stall=0.4, rng=rng)
        check(tokens, codes, slots)


def adversarial_codes(rng: random.Random) -> tuple[list[str], np.ndarray]:
    """All FULL (twice in a row), all NONE, all HALF, complementary halves, one live
    channel, a compatible channel just outside the lookahead window, and the reserved code."""
    names, batches = [], []

    def add(name, arr):
        names.append(name)
        batches.append(np.asarray(arr, dtype=np.uint8))

    zeros = np.zeros((C, M), dtype=np.uint8)
    add("all FULL", zeros)
    add("all FULL again", zeros)
    add("all NONE", np.full((C, M), 2))
    add("all HALF", np.full((C, M), 1))
    alt = zeros.copy()
    alt[::2, ::2] = 2                   # even channels use even columns ...
    alt[1::2, 1::2] = 2                 # ... odd channels odd columns: pairs merge
    add("complementary columns", alt)
    one = zeros.copy()
    one[rng.randrange(C), rng.randrange(M)] = rng.choice([1, 2])
    add("one live channel", one)
    # Channels 0..L-1 all need column 0 fully; channel L (column 1 HALF) is compatible with 0
    # but outside its window, so 0 issues alone and 1 pairs with L.
    if C > 1 and M > L:
        win = zeros.copy()
        win[0, :L] = 2
        win[1, L] = 1
        add("compatible channel beyond the window", win)
    add("random dense", np.array(rng.choices(range(3), weights=[1, 1, 3], k=C * M)).reshape(C, M))
    ends = zeros.copy()
    ends[:, 0] = 1
    ends[:, M - 1] = 1                  # the FULL channels between them do not use the window
    add("first and last channel only", ends)
    return names, np.stack(batches)


@cocotb.test()
async def adversarial_batches_backpressure(dut):
    """Adversarial batches under valid gaps and ready stalls."""
    rng = rng_for("adversarial")
    names, codes = adversarial_codes(rng)
    tokens = make_tokens(rng, len(codes))
    golden = match(codes, P)
    _, _, slots, _ = await run(dut, tokens, codes, int(golden.slots.sum()), gap=0.2,
                               stall=0.5, rng=rng)
    check(tokens, codes, slots)
    for name, s in zip(names, golden.slots):
        dut._log.info(f"{name}: {s} slots")


@cocotb.test()
async def reserved_code_counts_as_none(dut):
    """Code 3 is reserved; the RTL treats it as NONE (2 units)."""
    rng = rng_for("reserved")
    codes = np.array(random_codes(rng, 6))
    tokens = make_tokens(rng, len(codes))
    with3 = codes.copy()
    with3[codes == 2] = np.array(rng.choices([2, 3], k=int((codes == 2).sum())))
    n_slots = int(match(codes, P).slots.sum())
    _, _, slots, _ = await run(dut, tokens, with3, n_slots, rng=rng)
    check(tokens, codes, slots)


@cocotb.test()
async def timing_back_to_back(dut):
    """Batches always offered, output always ready: accepted in the cycle of the previous
    batch's last slot (a batch without work takes one cycle), one slot per cycle, exactly
    the golden cycles."""
    rng = rng_for("timing")
    codes = random_codes(rng, 16)
    codes[3] = 0
    codes[4] = 0
    tokens = make_tokens(rng, len(codes))
    golden = match(codes, P)
    offers, accepts, slots, edges = await run(dut, tokens, codes, int(golden.slots.sum()), rng=rng)
    check(tokens, codes, slots)
    # With no gap, batch n is offered from the cycle after batch n-1 was accepted.
    offer = [offers[0]] + [a + 1 for a in accepts[:-1]]
    acc, slot_edges = matcher_slot_cycles(offer, golden.slots)
    assert accepts == acc.tolist(), f"accept cycles {accepts} != golden {acc.tolist()}"
    assert edges == slot_edges.tolist(), "slot cycles differ from the golden model"
    dut._log.info(f"{len(codes)} batches, {len(slots)} slots in {edges[-1] - accepts[0]} cycles")


@cocotb.test()
async def timing_with_gaps(dut):
    """Random valid gaps, output always ready: the golden model predicts every cycle."""
    rng = rng_for("timing-gaps")
    codes = random_codes(rng, 12)
    tokens = make_tokens(rng, len(codes))
    golden = match(codes, P)
    _, accepts, slots, edges = await run(dut, tokens, codes, int(golden.slots.sum()),
                                         gap=0.5, rng=rng)
    check(tokens, codes, slots)
    acc, slot_edges = matcher_slot_cycles(accepts, golden.slots)
    assert accepts == acc.tolist(), "a batch was accepted later than the golden model says"
    assert edges == slot_edges.tolist(), "slot cycles differ from the golden model"
