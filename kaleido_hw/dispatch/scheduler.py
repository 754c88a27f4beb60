"""ClusterScheduler: groups a batch of reuse patterns into equal clusters by Hamming distance.

Golden model: :func:`golden.dispatch.model.schedule`; doc: ``docs/dispatch.md``.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.dispatch.model import LFSR_WIDTH, draw_pivot_offsets, lfsr_advance
from kaleido_hw.bitops import popcount
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.layouts import index_width, sched_entry_layout, sched_out_layout


__all__ = ["ClusterScheduler", "popcount", "lfsr_jump"]


def lfsr_jump(state, steps: int):
    """The LFSR state ``steps`` steps after ``state`` as one XOR layer.

    The LFSR is linear over GF(2), so its n-step map is a 16x16 bit matrix; column j is the
    golden model's ``lfsr_advance(1 << j, n)``, and bit i of the result is the XOR of the
    state bits j whose column has bit i set.
    """
    columns = [lfsr_advance(1 << j, steps) for j in range(LFSR_WIDTH)]
    bits = []
    for i in range(LFSR_WIDTH):
        taps = [state[j] for j in range(LFSR_WIDTH) if (columns[j] >> i) & 1]
        bit = Const(0, 1)
        for t in taps:
            bit = bit ^ t
        bits.append(bit)
    return Cat(*bits)


class ClusterScheduler(wiring.Component):
    """Hamming-distance clustering of reuse patterns into K queues of Q = E / K entries.

    Parameters
        config : KaleidoConfig
            sched_entries (E), sched_pattern_width (W), sched_clusters (K), sched_lfsr_seed,
            token_id_width (T).
        out_patterns : bool
            Whether the output carries each entry's pattern (default). False: ``o.pattern``
            is 0 and the output banks hold only the token ids (T instead of T + W bits per
            entry), for a consumer that needs only the order (the engine's OrderUnit).

    Interface
        ``i``: stream of ``sched_entry_layout`` entries ``(token_id, pattern)``; every E
        consecutive entries form a batch.
        ``o``: stream of ``sched_out_layout``: each batch's entries, cluster 0's queue first,
        then cluster 1's, ..., each queue in arrival order; ``cluster`` tags the queue and
        ``last`` marks a queue's final entry.

    Algorithm (mirrored exactly by :func:`golden.dispatch.model.schedule`)
        Pivots: before a batch is loaded, a 16-bit Fibonacci LFSR (x^16+x^14+x^13+x^11+1,
        reset to the seed) draws one offset per cluster k: it jumps 16 steps to a fresh word
        s and ``r = (s * Q) >> 16``; the pivot of cluster k is the batch's entry k*Q + r. The
        pivot patterns are latched as they arrive, so they are ready when the batch is in.
        Assignment: entries in arrival order go to the non-full cluster with the smallest
        (popcount(pattern ^ pivot_k), k): the nearest pivot, spilling to the next nearest
        when a queue is full, ties to the lower index.

    Microarchitecture
        1. Load: a circular buffer of E entries (the string queue) written in arrival order;
           entry i of every batch sits at address i.
        2. Assign, a 4-stage pipeline at one entry per cycle, starting the cycle after the
           batch's last entry is in: read entry -> register the read data -> K XOR/popcount
           distances -> masked argmin, per-cluster counters, write to address k*Q + count_k
           of an output bank. (The queue is SRAM: its read data, late in the cycle, feeds
           only a register.)
           A read frees a buffer slot, so the next batch loads while this one is assigned.
        3. Drain: two output banks (ping-pong) stream out in address order, one entry per
           cycle, while the next batch is assigned into the other bank.
        Latency: last input of a batch -> its first output = E + 5 cycles; throughput one
        entry per cycle in and out, sustained across batches.
    """

    PORT_DOCS = {
        "i__valid": "input entry valid",
        "i__ready": "input entry accepted when valid and ready",
        "i__payload": "input entry: token_id (bits T-1:0), pattern (bits T+W-1:T; bit j = "
                      "channel j has work)",
        "o__valid": "output entry valid",
        "o__ready": "output entry consumed when valid and ready",
        "o__payload": "output entry: token_id, pattern, cluster index, last (final entry of "
                      "its cluster queue), LSB first",
    }

    def __init__(self, config: KaleidoConfig, out_patterns: bool = True):
        self.config = config
        self.out_patterns = out_patterns
        super().__init__({
            "i": In(stream.Signature(sched_entry_layout(config))),
            "o": Out(stream.Signature(sched_out_layout(config))),
        })

    def elaborate(self, platform):
        cfg = self.config
        E, W, K = cfg.sched_entries, cfg.sched_pattern_width, cfg.sched_clusters
        Q = E // K
        m = Module()

        # -- pivot selection: reset values are the golden draws for batch 0 ---------------------
        offsets0, state1 = draw_pivot_offsets(cfg.sched_lfsr_seed, K, Q)
        lfsr = Signal(LFSR_WIDTH, init=state1)
        paddr = [Signal(range(E), name=f"paddr{k}", init=k * Q + int(offsets0[0, k]))
                 for k in range(K)]
        next_paddr = [Signal(range(E), name=f"next_paddr{k}") for k in range(K)]
        m.d.comb += [p.eq(k * Q + ((lfsr_jump(lfsr, 16 * (k + 1)) * Q) >> LFSR_WIDTH))
                     for k, p in enumerate(next_paddr)]
        next_lfsr = Signal(LFSR_WIDTH)
        m.d.comb += next_lfsr.eq(lfsr_jump(lfsr, 16 * K))

        # -- stage 1: load into the circular string queue ------------------------------------------
        entry_layout = sched_entry_layout(cfg)
        m.submodules.string_queue = queue = memory.Memory(shape=entry_layout, depth=E, init=[])
        qw = queue.write_port()
        qr = queue.read_port()             # synchronous, not transparent: old data on collision
        tail = Signal(range(E))            # arrival index within the batch being loaded
        count = Signal(range(E + 1))       # entries held (loaded, not yet read)
        piv_load = [Signal(W, name=f"piv_load{k}") for k in range(K)]
        piv_act = [Signal(W, name=f"piv_act{k}") for k in range(K)]

        # -- assign pipeline state --------------------------------------------------------------
        active = Signal()                  # reading a batch
        head = Signal(range(E))            # arrival index being read
        pbank = Signal()                   # output bank of the batch being read
        p_valid, p_first, p_last, p_bank = Signal(), Signal(), Signal(), Signal()
        r_valid, r_first, r_last, r_bank = Signal(), Signal(), Signal(), Signal()
        a_valid, a_first, a_last, a_bank = Signal(), Signal(), Signal(), Signal()
        r_entry = Signal(entry_layout)
        a_entry = Signal(entry_layout)
        # A batch's pivots move with its first entry: latched at its first read (piv_load may
        # be overwritten by the next batch's pivot in that cycle), in use from the cycle its
        # first entry reaches the distance stage.
        piv_next = [Signal(W, name=f"piv_next{k}") for k in range(K)]
        dist_w = (W).bit_length()
        a_dist = [Signal(dist_w, name=f"a_dist{k}") for k in range(K)]
        cnt = [Signal(range(Q + 1), name=f"cnt{k}") for k in range(K)]
        full = Signal(2)                   # output bank b holds a complete, undrained batch

        # The pipeline stalls only when the assign stage must write a bank still draining.
        adv = Signal()
        m.d.comb += adv.eq(~(a_valid & full.bit_select(a_bank, 1)))
        pop = Signal()
        start = Signal()
        m.d.comb += [
            pop.eq(adv & (active | (count == E))),
            start.eq(pop & ~active),
        ]

        push = Signal()
        m.d.comb += [
            self.i.ready.eq((count < E) | pop),
            push.eq(self.i.valid & self.i.ready),
            qw.addr.eq(tail),
            qw.data.eq(self.i.payload),
            qw.en.eq(push),
            qr.addr.eq(head),
            qr.en.eq(adv),
        ]
        m.d.sync += count.eq(count + push - pop)
        with m.If(push):
            m.d.sync += tail.eq(Mux(tail == E - 1, 0, tail + 1))
            for k in range(K):
                with m.If(tail == paddr[k]):
                    m.d.sync += piv_load[k].eq(self.i.payload.pattern)
            with m.If(tail == E - 1):      # batch loaded: draw the next batch's pivots
                m.d.sync += [p.eq(n) for p, n in zip(paddr, next_paddr)]
                m.d.sync += lfsr.eq(next_lfsr)

        # -- stage 2 (read issued) -> 3 (read data) -> 4 (distances) -> 5 (assign) -------------
        with m.If(pop):
            m.d.sync += [
                head.eq(Mux(head == E - 1, 0, head + 1)),
                active.eq(head != E - 1),
            ]
            with m.If(head == E - 1):
                m.d.sync += pbank.eq(~pbank)
            with m.If(start):
                m.d.sync += [n.eq(l) for n, l in zip(piv_next, piv_load)]

        # The queue's read data goes straight into a register: an SRAM's clock-to-output
        # leaves no time for the distances in the same cycle.
        with m.If(adv):
            m.d.sync += [
                p_valid.eq(pop), p_first.eq(head == 0), p_last.eq(head == E - 1),
                p_bank.eq(pbank),
                r_valid.eq(p_valid), r_first.eq(p_first), r_last.eq(p_last), r_bank.eq(p_bank),
                r_entry.eq(qr.data),
                a_valid.eq(r_valid), a_first.eq(r_first), a_last.eq(r_last), a_bank.eq(r_bank),
                a_entry.eq(r_entry),
            ]
            with m.If(p_valid & p_first):
                m.d.sync += [a.eq(n) for a, n in zip(piv_act, piv_next)]
            m.d.sync += [d.eq(popcount(r_entry.pattern ^ pv)) for d, pv in zip(a_dist, piv_act)]

        # Assign: nearest non-full pivot; a full queue's key has its top bit set.
        # Shared intermediates are Signals (Amaranth would copy an expression into each use).
        cnt_eff = [Signal(range(Q + 1), name=f"cnt_eff{k}") for k in range(K)]
        m.d.comb += [ce.eq(Mux(a_first, 0, c)) for ce, c in zip(cnt_eff, cnt)]
        keys = [Cat(d, c == Q) for d, c in zip(a_dist, cnt_eff)]
        best = Signal(index_width(K))
        m.d.comb += best.eq(self._argmin(m, keys))
        # Two output banks of E entries (ping-pong): bank b at addresses b*E .. b*E + E-1.
        bank_layout = (entry_layout if self.out_patterns else
                       data.StructLayout({"token_id": unsigned(cfg.token_id_width)}))
        m.submodules.banks = banks = memory.Memory(shape=bank_layout, depth=2 * E, init=[])
        bw = banks.write_port()
        br = banks.read_port()
        # Both lookups padded to a power of two: a partial case is a Verilator CASEINCOMPLETE.
        pad = (1 << len(best)) - K
        base = Array([Const(k * Q, range(E)) for k in range(K)] + [Const(0, range(E))] * pad)
        cnt_arr = Array(cnt_eff + [Const(0, range(Q + 1))] * pad)
        write = Signal()
        m.d.comb += [
            write.eq(a_valid & adv),
            bw.addr.eq(Mux(a_bank, E, 0) + base[best] + cnt_arr[best]),
            bw.data.eq(a_entry if self.out_patterns else a_entry.token_id),
            bw.en.eq(write),
        ]
        with m.If(write):
            m.d.sync += [c.eq(ce + (best == k)) for k, (c, ce) in enumerate(zip(cnt, cnt_eff))]

        # -- stage 6: drain the full bank in address order --------------------------------------
        dbank = Signal()
        dpos = Signal(range(E))
        dcl = Signal(range(K))
        dwithin = Signal(range(max(Q, 2)))   # one bit even when Q = 1 (no zero-width wire)
        ov, ocl, olast = Signal(), Signal(range(K)), Signal()
        take = Signal()
        issue = Signal()
        m.d.comb += [
            take.eq(~ov | self.o.ready),
            issue.eq(take & full.bit_select(dbank, 1)),
            br.addr.eq(Mux(dbank, E, 0) + dpos),
            br.en.eq(issue),
        ]
        with m.If(issue):
            m.d.sync += [
                ov.eq(1), ocl.eq(dcl), olast.eq(dwithin == Q - 1),
                dpos.eq(Mux(dpos == E - 1, 0, dpos + 1)),
                dwithin.eq(Mux(dwithin == Q - 1, 0, dwithin + 1)),
            ]
            with m.If(dwithin == Q - 1):
                m.d.sync += dcl.eq(Mux(dcl == K - 1, 0, dcl + 1))
            with m.If(dpos == E - 1):
                m.d.sync += dbank.eq(~dbank)
        with m.Elif(take):
            m.d.sync += ov.eq(0)

        # Bank flags: set by the assign stage's last write, cleared by the drain's last read
        # (never the same bank in one cycle: the assign stage writes only a non-full bank).
        for b in range(2):
            with m.If(write & a_last & (a_bank == b)):
                m.d.sync += full[b].eq(1)
            with m.If(issue & (dpos == E - 1) & (dbank == b)):
                m.d.sync += full[b].eq(0)

        m.d.comb += [
            self.o.valid.eq(ov),
            self.o.payload.token_id.eq(br.data.token_id),
            self.o.payload.pattern.eq(br.data.pattern if self.out_patterns else 0),
            self.o.payload.cluster.eq(ocl),
            self.o.payload.last.eq(olast),
        ]
        return m

    @staticmethod
    def _argmin(m, keys):
        """Index of the smallest key by a tournament tree; ties keep the lower index."""
        nodes = [(k, Const(i, index_width(len(keys)))) for i, k in enumerate(keys)]
        level = 0
        while len(nodes) > 1:
            nxt = []
            for j in range(0, len(nodes) - 1, 2):
                (kl, il), (kr, ir) = nodes[j], nodes[j + 1]
                right = Signal(name=f"argmin{level}_{j}_right")
                key = Signal(len(kl), name=f"argmin{level}_{j}_key")
                idx = Signal(len(il), name=f"argmin{level}_{j}_idx")
                m.d.comb += [right.eq(kr < kl), key.eq(Mux(right, kr, kl)),
                             idx.eq(Mux(right, ir, il))]
                nxt.append((key, idx))
            if len(nodes) % 2:
                nxt.append(nodes[-1])
            nodes = nxt
            level += 1
        return nodes[0][1]
