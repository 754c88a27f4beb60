"""OrderUnit: one side's (Q or K) unit order per chunk, from the ClusterScheduler
(``docs/engine.md``, "Orders").

Golden model: :func:`golden.engine.model.orders` (per chunk: units in natural order through the
scheduler, padded with dummies to whole batches, dummies removed; LFSR state carried over
the chunks of a run).
"""

from __future__ import annotations

import dataclasses

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.bitops import bits_for
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.scheduler import ClusterScheduler
from kaleido_hw.stall_inject import probe_wires, stall_gate


__all__ = ["order_in_layout", "OrderReadSignature", "OrderUnit"]


def _unit_width(config: KaleidoConfig) -> int:
    """Bits of a unit index or an order position (a chunk has at most engine_max_tokens units)."""
    return bits_for(config.engine_max_tokens - 1)


def order_in_layout(config: KaleidoConfig, key_width: int = 0) -> data.StructLayout:
    """One unit of a chunk, in natural order: its index, its pattern (bit j = the unit's
    follower is HALF or NONE at chunk channel j; 0 for FULL, no follower, or j past the
    chunk's end), ``last`` (last unit of the chunk) and, with ``key_width`` > 0, the ``key``
    the order stores for it."""
    fields = {"unit": unsigned(_unit_width(config)),
              "pattern": unsigned(config.sched_pattern_width),
              "last": unsigned(1)}
    if key_width:
        fields["key"] = unsigned(key_width)
    return data.StructLayout(fields)


def OrderReadSignature(bank_width: int, addr_width: int, data_width: int, *,
                       natural: bool = False) -> wiring.Signature:
    """A synchronous read port, as its user sees it: drive ``bank`` and ``addr`` in cycle c,
    read ``data`` (and, with ``natural``, whether the bank holds the natural order) in cycle
    c + 1."""
    members = {"bank": Out(bank_width), "addr": Out(addr_width), "data": In(data_width)}
    if natural:
        members["natural"] = In(1)
    return wiring.Signature(members)


class OrderUnit(wiring.Component):
    """Scheduled unit order of every chunk of a run for one side (Q rows or K columns).

    Parameters
    ----------
    config : KaleidoConfig
        ``sched_entries`` (E), ``sched_clusters`` (K), ``sched_pattern_width`` (W),
        ``sched_lfsr_seed``, ``engine_max_tokens`` (sizes the memories: U <= max tokens).
    order_ports : int
        Read ports of the order memory (e.g. one per array).
    inverse_ports : int
        Read ports of the inverse-order memory.
    inverse_banks : int
        Banks of the inverse-order memory: chunk k's inverse goes to bank ``k mod
        inverse_banks`` (2: double-buffered like the order; the number of planes: every
        chunk's inverse kept for the read-out).
    key_width : int
        0: the order memory holds unit indices. Otherwise every unit comes with a key of this
        many bits (the engine's: its anchor token and follower bit), kept in a key memory at
        its index while the chunk is scheduled, and the order memory holds keys, so that its
        reader converts nothing; a read port then also tells whether its bank is natural.
    stall_ids : tuple of two ints
        Verification only (``engine_stall_seed``): stream ids of the scheduler's input and
        output for :func:`~kaleido_hw.stall_inject.stall_gate` (no logic when the seed is 0).

    Interface
        ``start`` (pulse): restart: the scheduler's LFSR returns to ``sched_lfsr_seed`` (a
        local reset of the ClusterScheduler), any chunk in progress is dropped, both order
        banks are free; no unit is accepted in that cycle.
        ``i`` (stream of :func:`order_in_layout`): the chunk's units in natural order,
        ``last`` on the final one. Accepted only when no chunk is in progress and an
        order bank is free (``avail`` < 2); the next chunk is taken after this one's order
        is complete.
        ``avail`` (0..2): complete orders not yet released, oldest in bank ``rbank``.
        ``release`` (pulse, when ``avail`` > 0): the oldest order is no longer read; its
        bank may be overwritten.
        ``natural`` (pulse, when ``avail`` < 2 and either no chunk is in progress or
        ``abort`` is set): a chunk whose order is the natural one is complete at once, in
        the next bank, without a pass through the scheduler and without memory writes: both
        banks it takes (order and inverse) answer a read of ``addr`` with ``addr`` until a
        scheduled chunk is written there, reads issued in the pulse's own cycle included.
        The engine runs its first chunk so, while the scheduler orders the second, and
        every chunk whose order is not complete when it could start (``docs/engine.md``,
        "Orders").
        ``abort`` (pulse, with ``natural``): drop the newest chunk: the scheduler restarts
        (its LFSR from the seed, its batches emptied), the units taken so far and any order
        output this cycle are forgotten, no unit is accepted in that cycle. If that chunk's
        order is already complete (``avail`` still counts it after this cycle's ``release``:
        with two ordered sides, the engine falls back when the other side's order is late)
        the natural chunk replaces it in its banks; otherwise it takes the next banks. The
        older orders and their banks are kept.
        ``ord_rd[n]``: order memory reads, ``data`` = unit at position ``addr`` of the order
        in bank ``bank`` (chunk k is in bank k mod 2), or its key with ``key_width``; then
        ``natural`` is set when the bank holds a natural order (``data`` is ``addr``, not a
        key). ``inv_rd[n]``: inverse reads,
        ``data`` = position of unit ``addr`` in chunk k's order, bank = k mod
        ``inverse_banks``. Both have one cycle of read latency.

    Algorithm
        Each unit enters the scheduler as an entry with token id ``Cat(unit, 0)``; after the
        last one, dummies (id ``Cat(0, 1)``, pattern 0) fill the batch up to a multiple of
        E. Every non-dummy scheduler output (in output order) is written to the order bank
        at the next position p, and p to the inverse bank at its unit's address. The order
        is complete at the last output of the chunk's final batch (the batch boundary at
        which all U units have come out).

    Latency (the scheduler's output is never stalled here but by stall injection)
        With the first unit accepted in cycle x and one unit per cycle, U units and
        N = ceil(U/E)*E entries: ``avail`` counts the order from cycle
        ``x + N + 2*E + 4`` (so ``pre(U) = N + 2E + 4`` from the first unit; in general
        ``z + 2*E + 5`` after the cycle z of the last entry, unit or dummy, into the
        scheduler: E + 5 scheduler latency, E outputs, one cycle to register ``avail``).
        Reads of the new order may be issued in that cycle.
    """

    def __init__(self, config: KaleidoConfig, *, order_ports: int = 1, inverse_ports: int = 1,
                 inverse_banks: int = 2, key_width: int = 0, stall_ids: tuple = (2, 3)):
        for name, v, lo in (("order_ports", order_ports, 1), ("inverse_ports", inverse_ports, 1),
                            ("inverse_banks", inverse_banks, 2)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= 64:
                raise ValueError(f"{name} must be an integer in [{lo}, 64], got {v!r}")
        if (isinstance(key_width, bool) or not isinstance(key_width, int)
                or not 0 <= key_width <= 64):
            raise ValueError(f"key_width must be an integer in [0, 64], got {key_width!r}")
        self.key_width = key_width
        self.config = config
        self.order_ports, self.inverse_ports = order_ports, inverse_ports
        self.inverse_banks = inverse_banks
        self.stall_ids = stall_ids
        uw = _unit_width(config)
        self.unit_width = uw
        self.inverse_bank_width = bits_for(inverse_banks - 1)
        super().__init__({
            "start": In(1),
            "i": In(stream.Signature(order_in_layout(config, key_width))),
            "avail": Out(2),
            "rbank": Out(1),
            "release": In(1),
            "natural": In(1),
            "abort": In(1),
            "ord_rd": In(OrderReadSignature(1, uw, key_width or uw,
                                            natural=bool(key_width))).array(order_ports),
            "inv_rd": In(OrderReadSignature(self.inverse_bank_width, uw, uw)).array(inverse_ports),
        })

    def scheduler_config(self) -> KaleidoConfig:
        """The embedded scheduler's configuration: token ids are ``Cat(unit, dummy)``."""
        return dataclasses.replace(self.config, token_id_width=self.unit_width + 1)

    def elaborate(self, platform):
        cfg = self.config
        E = cfg.sched_entries
        uw = self.unit_width
        depth = 1 << uw
        m = Module()
        # ``abort`` restarts the scheduler alone (a local reset; ``start`` resets all). The
        # order needs only the ids of the scheduler's output, not the patterns.
        m.submodules.sched = sched = ResetInserter(self.abort)(
            ClusterScheduler(self.scheduler_config(), out_patterns=False))
        kw = self.key_width
        m.submodules.order = order = memory.Memory(shape=kw or uw, depth=2 * depth, init=[])
        m.submodules.inverse = inverse = memory.Memory(
            shape=uw, depth=self.inverse_banks * depth, init=[])

        # ``start`` resets everything (the scheduler's LFSR included): see the return.
        IDLE, FEED, PAD, DRAIN = range(4)
        phase = Signal(2)
        fed = Signal(range(E))            # entries of the current batch already in
        nunits = Signal(range(depth + 1))
        avail = Signal(2)
        wbank, rbank = Signal(), Signal()
        ibank = Signal(range(self.inverse_banks))
        opos = Signal(uw + 1)             # order positions written
        obat = Signal(range(E))           # output entries of the current batch

        # -- input: units, then dummies up to a whole batch ----------------------------------
        take = Signal()
        m.d.comb += take.eq(~self.start & ~self.abort
                            & ((phase == FEED) | ((phase == IDLE) & (avail != 2))))
        pad = Signal()
        m.d.comb += pad.eq(phase == PAD)
        sp = sched.i.payload
        # Stall injection (test builds only): the gates withhold the scheduler's handshakes.
        gate_i = stall_gate(m, cfg, self.stall_ids[0], "sched_i")
        gate_o = stall_gate(m, cfg, self.stall_ids[1], "sched_o")
        m.d.comb += [
            sched.i.valid.eq((pad | (take & self.i.valid)) & gate_i),
            self.i.ready.eq(take & sched.i.ready & gate_i),
            sp.token_id.eq(Mux(pad, Const(1 << uw, uw + 1), Cat(self.i.payload.unit, 0))),
            sp.pattern.eq(Mux(pad, 0, self.i.payload.pattern)),
        ]
        fed_next = Signal(range(E))
        m.d.comb += fed_next.eq(Mux(fed == E - 1, 0, fed + 1))
        with m.If(sched.i.valid & sched.i.ready):
            m.d.sync += fed.eq(fed_next)
            with m.If(pad):
                with m.If(fed == E - 1):
                    m.d.sync += phase.eq(DRAIN)
            with m.Else():
                m.d.sync += [nunits.eq(Mux(phase == IDLE, 1, nunits + 1)), phase.eq(FEED)]
                with m.If(self.i.payload.last):
                    m.d.sync += phase.eq(Mux(fed == E - 1, DRAIN, PAD))

        # -- output: write the order and its inverse -----------------------------------------
        ow = order.write_port()
        iwp = inverse.write_port()
        so = sched.o.payload
        real = Signal()
        unit = Signal(uw)
        out = Signal()
        m.d.comb += [
            sched.o.ready.eq(gate_o),
            out.eq(sched.o.valid & gate_o & ~self.abort),
            unit.eq(so.token_id[:uw]),
            real.eq(~so.token_id[uw]),
            iwp.addr.eq(Cat(unit, ibank)),
            iwp.data.eq(opos[:uw]),
            iwp.en.eq(out & real),
        ]
        if kw:
            # The key of unit u was stored when u came in; the output's key is written one
            # cycle after the output, from the key memory's read port.
            m.submodules.keys = keys = memory.Memory(shape=kw, depth=depth, init=[])
            kwr = keys.write_port()
            krd = keys.read_port(domain="sync", transparent_for=())
            w_addr = Signal(uw + 1)
            w_en = Signal()
            m.d.comb += [kwr.addr.eq(self.i.payload.unit), kwr.data.eq(self.i.payload.key),
                         kwr.en.eq(self.i.valid & self.i.ready), krd.addr.eq(unit)]
            m.d.sync += [w_addr.eq(Cat(opos[:uw], wbank)), w_en.eq(out & real)]
            m.d.comb += [ow.addr.eq(w_addr), ow.data.eq(krd.data), ow.en.eq(w_en)]
        else:
            m.d.comb += [ow.addr.eq(Cat(opos[:uw], wbank)), ow.data.eq(unit),
                         ow.en.eq(out & real)]
        complete = Signal()
        m.d.comb += complete.eq(out & (obat == E - 1) & (phase == DRAIN)
                                & (opos + real == nunits))
        with m.If(out):
            m.d.sync += [opos.eq(opos + real), obat.eq(Mux(obat == E - 1, 0, obat + 1))]
        # A bank holds either a scheduled order (written above) or the natural one (flag).
        natural_bank = Signal(2)
        natural_ibank = Signal(self.inverse_banks)
        done = Signal()
        m.d.comb += done.eq(complete | self.natural)
        with m.If(complete | self.abort):
            m.d.sync += [opos.eq(0), phase.eq(IDLE)]
        with m.If(self.abort):
            m.d.sync += [fed.eq(0), obat.eq(0)]
        # The banks a completing chunk takes: the next ones; but an ``abort`` that finds the
        # dropped chunk's order already complete (not released by this cycle's ``release``:
        # the other side of the engine was late) puts the natural chunk into that order's
        # banks instead, which it replaces.
        rel = Signal()
        m.d.comb += rel.eq(self.release & (avail != 0))
        replace = Signal()
        m.d.comb += replace.eq(self.abort & (avail - rel != 0))
        last_ibank = Signal.like(ibank)
        m.d.comb += last_ibank.eq(Mux(ibank == 0, self.inverse_banks - 1, ibank - 1))
        nat_bank = Signal()
        nat_ibank = Signal.like(ibank)
        m.d.comb += [nat_bank.eq(Mux(replace, ~wbank, wbank)),
                     nat_ibank.eq(Mux(replace, last_ibank, ibank))]
        with m.If(done & ~replace):
            m.d.sync += [wbank.eq(~wbank),
                         ibank.eq(Mux(ibank == self.inverse_banks - 1, 0, ibank + 1))]
        with m.If(done):
            for b in range(2):
                with m.If(nat_bank == b):
                    m.d.sync += natural_bank[b].eq(self.natural)
            for b in range(self.inverse_banks):
                with m.If(nat_ibank == b):
                    m.d.sync += natural_ibank[b].eq(self.natural)

        # Probes (plain wires) for the engine benches' invariants: units in, order out.
        self.probes = probe_wires(m, {
            "probe_in_fire": self.i.valid & self.i.ready, "probe_in_unit": self.i.payload.unit,
            "probe_in_last": self.i.payload.last, "probe_out_fire": out & real,
            "probe_out_unit": unit, "probe_out_done": complete, "probe_abort": self.abort,
            "probe_abort_replace": replace})

        # -- banks in use -----------------------------------------------------------------
        m.d.sync += avail.eq(avail + done - rel - replace)
        with m.If(rel):
            m.d.sync += rbank.eq(~rbank)
        m.d.comb += [self.avail.eq(avail), self.rbank.eq(rbank)]

        # -- read ports ---------------------------------------------------------------------
        # A natural bank answers with the address, registered like the memory's read data.
        for kind, ports, mem, flags, nbank in (
                ("ord", self.ord_rd, order, natural_bank, nat_bank),
                ("inv", self.inv_rd, inverse, natural_ibank, nat_ibank)):
            for n, port in enumerate(ports):
                # Keys: the last one is written in the cycle its order becomes available.
                rp = mem.read_port(transparent_for=(ow,) if kw and kind == "ord" else ())
                is_natural = Signal(name=f"{kind}{n}_natural")
                addr_d = Signal(uw, name=f"{kind}{n}_addr_d")
                # A read in the cycle of a ``natural`` pulse already sees its bank natural.
                m.d.sync += [is_natural.eq(flags.bit_select(port.bank, 1)
                                           | (self.natural & (port.bank == nbank))),
                             addr_d.eq(port.addr)]
                m.d.comb += [rp.addr.eq(Cat(port.addr, port.bank)),
                             port.data.eq(Mux(is_natural, addr_d, rp.data))]
                if kw and kind == "ord":
                    m.d.comb += port.natural.eq(is_natural)

        # A local synchronous reset: the scheduler restarts from the seed, no chunk in progress.
        return ResetInserter(self.start)(m)

