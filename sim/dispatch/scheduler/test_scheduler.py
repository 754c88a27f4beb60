"""cocotb bench of cluster_scheduler: random and adversarial batches, random valid gaps and
ready back-pressure; every run checks the invariants (output is a permutation of the input,
every queue exactly at capacity, emitted cluster by cluster) and exact equality with
``golden.dispatch.model.schedule``; runs without back-pressure also check the cycle of every output
against ``golden.dispatch.model.scheduler_output_cycles``.

``make -C sim/dispatch/scheduler [SIM=icarus]``; ``KALEIDO_SEEDS=N`` runs N seeds per random test;
``KALEIDO_MANIFEST`` names the manifest of a non-default variant.
"""

from __future__ import annotations

import random
from collections import Counter

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time
from dispatch_codec import DispatchCodec, load_config
from simlib import StreamSink, StreamSource, seeds_requested, start_clock_and_reset

from golden.dispatch.model import (SchedulerParams, draw_pivot_offsets, schedule,
                                   scheduler_output_cycles)


CFG = load_config()
CODEC = DispatchCodec(CFG)
P = SchedulerParams.from_config(CFG)
E, W, K, Q = P.entries, P.pattern_width, P.clusters, P.capacity
ALL = (1 << W) - 1
PERIOD_NS = 10


def edge_now() -> int:
    """Index of the rising edge we are at (the clock has edges at 0, 10, 20 ns, ...)."""
    return int(get_sim_time("ns")) // PERIOD_NS


def rng_for(test: str, n: int = 0) -> random.Random:
    return random.Random(f"{cocotb.RANDOM_SEED}-{test}-{n}")


def token_ids(rng: random.Random, n: int) -> list[int]:
    """Distinct token ids, so that a lost or duplicated entry cannot hide."""
    space = 1 << P.token_id_width
    if n <= space:
        return rng.sample(range(space), n)
    return [rng.randrange(space) for _ in range(n)]


async def run(dut, ids, pats, *, gap=0.0, stall=0.0, rng=None):
    """Stream the batches through the DUT; return (input edges, outputs, output edges)."""
    rng = rng or random.Random(0)
    # Drive the handshake inputs before reset ends: on Icarus an undriven (X) valid would
    # turn the entry count into X at the first edge after reset.
    dut.i__valid.value = 0
    dut.o__ready.value = 0
    await start_clock_and_reset(dut)
    src = StreamSource(dut, "i", gap=gap, rng=random.Random(rng.random()))
    sink = StreamSink(dut, "o", stall=stall, rng=random.Random(rng.random()))
    e0 = edge_now()
    sink.start()
    in_edges = []
    for tid, pat in zip(ids, pats):
        await src.send([CODEC.sched_in(tid, pat)])
        in_edges.append(edge_now())
    budget = (len(ids) + 3 * E) * (1 + int(8 * stall)) + 100
    for _ in range(budget):
        if len(sink.items) >= len(ids):
            break
        await RisingEdge(dut.clk)
    for _ in range(2 * E + 8):       # anything extra would be a duplicate
        await RisingEdge(dut.clk)
    outs = [CODEC.sched_out(v) for v in sink.items]
    out_edges = [e0 + c for c in sink.cycles_seen]
    return in_edges, outs, out_edges


def check(ids, pats, outs, state=None):
    """Invariants of the issue, then exact equality with the golden model."""
    n = len(ids)
    assert len(outs) == n, f"{len(outs)} entries out for {n} in (lost or duplicated entries)"
    for b in range(n // E):
        batch_in = Counter(zip(ids[b * E:(b + 1) * E], pats[b * E:(b + 1) * E]))
        batch_out = outs[b * E:(b + 1) * E]
        assert Counter((t, p) for t, p, _, _ in batch_out) == batch_in, \
            f"batch {b}: output is not a permutation of the input"
        clusters = [c for _, _, c, _ in batch_out]
        assert clusters == sorted(clusters), f"batch {b}: not emitted cluster by cluster"
        assert Counter(clusters) == {k: Q for k in range(K)}, \
            f"batch {b}: queue sizes {Counter(clusters)} instead of {Q} each"
        lasts = [j for j, (_, _, _, last) in enumerate(batch_out) if last]
        assert lasts == [k * Q + Q - 1 for k in range(K)], f"batch {b}: last flags at {lasts}"
    golden = schedule(np.array(pats, dtype=np.uint64), P, state)
    expected = golden.output(ids, np.array(pats, dtype=np.uint64))
    for j, (got, exp) in enumerate(zip(outs, expected)):
        assert got == exp, f"output {j} (batch {j // E}): got {got}, golden {exp}"
    return golden


def random_patterns(rng: random.Random, n: int) -> list[int]:
    """A mix of uniform strings and sparse/dense biased ones (as reuse masks look)."""
    kind = rng.choice(["uniform", "sparse", "dense", "mixed"])
    out = []
    for _ in range(n):
        k = kind if kind != "mixed" else rng.choice(["uniform", "sparse", "dense"])
        p1 = {"uniform": 0.5, "sparse": 0.15, "dense": 0.85}[k]
        out.append(sum(1 << j for j in range(W) if rng.random() < p1))
    return out


@cocotb.test()
async def random_batches_backpressure(dut):
    """Random batches, 30% valid gaps, 40% ready stalls: invariants and golden equality."""
    for s in range(seeds_requested(2)):
        rng = rng_for("random", s)
        nb = 5
        ids, pats = token_ids(rng, nb * E), random_patterns(rng, nb * E)
        _, outs, _ = await run(dut, ids, pats, gap=0.3, stall=0.4, rng=rng)
        check(ids, pats, outs)


def adversarial_batches(rng: random.Random) -> list[tuple[str, list[int]]]:
    """Batches that stress ties and capacity spill. Pivot positions come from the golden
    LFSR, so a batch can make every entry prefer one chosen cluster."""
    names = ["all equal", "all zero", "all ones", "alternating", "cluster 0 preferred",
             f"cluster {K - 1} preferred", "late arrivals preferred", "two patterns"]
    offsets, _ = draw_pivot_offsets(P.seed, K, Q, len(names))
    batches = []
    for b, name in enumerate(names):
        piv = [k * Q + int(offsets[b, k]) for k in range(K)]
        x = rng.randrange(ALL + 1)
        alt = int("01" * 32, 2) & ALL
        if name == "all equal":
            pats = [x] * E
        elif name == "all zero":
            pats = [0] * E
        elif name == "all ones":
            pats = [ALL] * E
        elif name == "alternating":
            pats = [alt if i % 2 else alt ^ ALL for i in range(E)]
        elif name.endswith(" preferred") and name.startswith("cluster"):
            want = 0 if name == "cluster 0 preferred" else K - 1
            # Near-zero strings everywhere, the chosen pivot zero, every other pivot all ones.
            pats = [(1 << rng.randrange(W)) if rng.random() < 0.5 else 0 for _ in range(E)]
            for k, i in enumerate(piv):
                pats[i] = 0 if k == want else ALL
        elif name == "late arrivals preferred":
            # Early arrivals are far from every pivot, late ones all want cluster 0.
            pats = [ALL if i < E // 2 else 0 for i in range(E)]
            for k, i in enumerate(piv):
                pats[i] = 0 if k == 0 else alt
        else:
            pats = [rng.choice([x, x ^ ALL]) for _ in range(E)]
        batches.append((name, pats))
    return batches


@cocotb.test()
async def adversarial_batches_backpressure(dut):
    """Equal, zero, all-ones, alternating and one-cluster-preferred batches in one stream."""
    rng = rng_for("adversarial")
    batches = adversarial_batches(rng)
    pats = [p for _, b in batches for p in b]
    ids = token_ids(rng, len(pats))
    _, outs, _ = await run(dut, ids, pats, gap=0.2, stall=0.5, rng=rng)
    golden = check(ids, pats, outs)
    # The preferred-cluster batches must really have spilled (the test would be toothless if not).
    for b, (name, _) in enumerate(batches):
        nearest = golden.distances[b].argmin(axis=1)
        spilled = int((golden.cluster[b] != nearest).sum())
        dut._log.info(f"batch {b} ({name}): {spilled} entries spilled to a farther cluster")
        if "preferred" in name:
            assert spilled > 0, f"batch {name!r} did not exercise the capacity spill"


@cocotb.test()
async def timing_back_to_back(dut):
    """One input per cycle, output always ready: never refused, and every output leaves
    exactly when the golden model says (last input + E + 5 + j), batches back to back."""
    rng = rng_for("timing")
    nb = 4
    ids, pats = token_ids(rng, nb * E), random_patterns(rng, nb * E)
    in_edges, outs, out_edges = await run(dut, ids, pats, rng=rng)
    check(ids, pats, outs)
    assert in_edges == list(range(in_edges[0], in_edges[0] + nb * E)), "input was refused"
    last = np.array(in_edges).reshape(nb, E)[:, -1]
    expected = scheduler_output_cycles(last, P).ravel().tolist()
    assert out_edges == expected, f"output cycles {out_edges[:4]}... != golden {expected[:4]}..."
    assert out_edges == list(range(out_edges[0], out_edges[0] + nb * E)), "output has gaps"
    dut._log.info(f"{nb} batches of {E}: first output {out_edges[0] - in_edges[-1 - (nb - 1) * E]}"
                  f" cycles after the batch's last input, {out_edges[-1] - in_edges[0] + 1} "
                  f"cycles in total")


@cocotb.test()
async def timing_with_gaps(dut):
    """Random valid gaps, output always ready: cycles still equal the golden prediction."""
    rng = rng_for("timing-gaps")
    nb = 3
    ids, pats = token_ids(rng, nb * E), random_patterns(rng, nb * E)
    in_edges, outs, out_edges = await run(dut, ids, pats, gap=0.4, rng=rng)
    check(ids, pats, outs)
    last = np.array(in_edges).reshape(nb, E)[:, -1]
    assert out_edges == scheduler_output_cycles(last, P).ravel().tolist()
