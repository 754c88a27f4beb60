"""Rows of P from the vector unit -> the row-block words ``pv_engine`` is written with.

The softmax unit (``docs/vector.md``) gives P one query row at a time, ``L = vector_lanes``
keys per beat. ``pv_engine`` (``docs/linear.md``, "RTL of P @ V") stores P by row block: its
word ``(rb, key)`` holds the ``R = rows`` queries ``rb*R .. rb*R + R - 1`` at one key, because
a PE row of the array takes one query. Between the two, P must be transposed in blocks of R
rows, which is what :class:`PTransposer` does.

Algorithm. The block's R rows are written into R banks (row ``rb*R + i`` into bank i, one
beat per word, so a beat is one write) of a double-buffered ``amaranth.lib.memory``: while
one half is read out, the next row block fills the other. Reading walks the keys of the
half in order; every L keys all R banks read the same word (one read, R beats' worth of
lanes), and each key takes lane ``key mod L`` of every bank. The next word is read while
the current one is walked, so the output gives one word per cycle (the rate at which
``pv_engine``'s single P write port takes them); a row block of ``k = ceil(n / L)`` beats
per row comes in ``R*k`` cycles and leaves in ``n`` cycles. Queries past the last row in a
last, short row block read as zeros (``pv_engine`` never writes their O, and zero P adds
nothing).

A run is ``cfg.queries`` rows of ``cfg.keys`` keys; ``start`` (a one-cycle pulse) begins it,
``done`` is high once its last word has left. Rows are delimited by the beats' ``last``
bits, so a row of the wrong length cannot hang the block: it sets an error bit and its
missing beats read as stale lanes, its extra beats are dropped.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.bitops import bits_for
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host_port import run_control_members
from kaleido_hw.engine.pv_layouts import pv_p_word_layout
from kaleido_hw.vector.layouts import prob_beat_layout


__all__ = ["PTransposer", "ERROR_BITS", "p_blocks_written"]

#: ``error`` bits, sticky until the next ``start``.
ERROR_BITS = {
    "row_length": 0,     # a row's beats did not match cfg.keys (too few, too many, bad tail)
    "cfg": 1,            # cfg.keys or cfg.queries is 0 or above engine_max_tokens
}


class PTransposer(wiring.Component):
    """Transposes rows of P (vector-unit beats) into ``pv_engine`` P words, R rows at a time.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows`` (R, the queries of a row block), ``vector_lanes`` (L, keys per beat),
        ``engine_max_tokens`` (the most keys per row and queries per run).

    Ports
    -----
    ``p`` (in stream, ``prob_beat_layout``): rows of P, ``ceil(keys / L)`` beats each, the
    last one with ``last`` set and ``tail = (keys - 1) mod L``. Not ready outside a run and
    once the run's rows are in (the next run's rows wait for its ``start``).
    ``o`` (out stream, ``pv_p_word_layout``): the words ``(rb, key, p)`` in row-block order,
    keys in order within a block: exactly ``pv_engine``'s ``p_in``.
    ``cfg`` (in): ``keys`` and ``queries`` of the run, sampled at ``start``.
    ``start`` (in): one-cycle pulse that begins a run (ignored while ``busy``).
    ``busy`` (out): a run is going. ``done`` (out): high from the cycle after the run's last
    word left (or after a ``start`` with a bad ``cfg``) to the next ``start``.
    ``error`` (out): ``ERROR_BITS``, cleared by ``start``.
    """

    def __init__(self, config: KaleidoConfig):
        if not isinstance(config, KaleidoConfig):
            raise TypeError(f"PTransposer takes a KaleidoConfig, got {type(config).__name__}")
        self.config = config
        self.rows, self.lanes = config.rows, config.vector_lanes
        self.max_tokens = config.engine_max_tokens
        #: Beats of the longest row: the depth of one half of a bank.
        self.row_words = -(-self.max_tokens // self.lanes)
        tw = bits_for(self.max_tokens)
        super().__init__({
            "p": In(stream.Signature(prob_beat_layout(config))),
            "o": Out(stream.Signature(pv_p_word_layout(config))),
            "cfg": In(wiring.Signature({"keys": Out(tw), "queries": Out(tw)})),
            **run_control_members(len(ERROR_BITS)),
        })

    def elaborate(self, platform):
        m = Module()
        R, L, W = self.rows, self.lanes, self.row_words
        n_max = self.max_tokens
        tw = bits_for(n_max)
        lw = bits_for(L - 1)
        ww = bits_for(W - 1)
        qw = bits_for(R)
        busy, err = self.busy, self.error

        keys = Signal(tw)
        queries = Signal(tw)
        banks = []
        for i in range(R):
            mem = memory.Memory(shape=8 * L, depth=2 * W, init=[])
            m.submodules[f"bank{i}"] = mem
            banks.append((mem.write_port(), mem.read_port(transparent_for=())))
        full = [Signal(name=f"full{h}") for h in range(2)]      # half h holds a row block
        half_rows = [Signal(qw, name=f"half{h}_rows") for h in range(2)]

        # -- write side: row r's beats into bank r mod R, half (r // R) mod 2 ---------------
        wr_half = Signal()
        wr_q = Signal(qw)                          # row within its block
        wr_word = Signal(ww + 1)                   # beat within the row
        wr_base = Signal(tw + lw + 1)              # keys before this beat: wr_word * L
        wr_rows = Signal(tw)                       # rows complete
        left = Signal(tw)                          # rows of the run from the block's first on
        block_rows = Signal(qw)
        m.d.comb += [left.eq(queries - (wr_rows - wr_q)),
                     block_rows.eq(Mux(left < R, left, R))]
        wr_full = Mux(wr_half, full[1], full[0])
        writing = busy & (wr_rows < queries) & ~wr_full
        m.d.comb += self.p.ready.eq(writing)
        take = self.p.valid & writing
        beat = self.p.payload
        in_row = wr_base < keys                    # not past the row's length
        for i, (wp, _) in enumerate(banks):
            m.d.comb += [wp.addr.eq(Mux(wr_half, wr_word + W, wr_word)),
                         wp.data.eq(beat.p.as_value()),
                         wp.en.eq(Mux(take & in_row & (wr_q == i), -1, 0))]
        expected_last = wr_base + L >= keys
        with m.If(take):
            with m.If(beat.last):
                with m.If(~expected_last | (beat.tail != (keys - 1 - wr_base)[:lw])):
                    m.d.sync += err[ERROR_BITS["row_length"]].eq(1)
                m.d.sync += [wr_word.eq(0), wr_base.eq(0), wr_rows.eq(wr_rows + 1)]
                with m.If(wr_q + 1 == block_rows):
                    m.d.sync += [wr_q.eq(0), wr_half.eq(~wr_half)]
                    for h in range(2):
                        with m.If(wr_half == h):
                            m.d.sync += [full[h].eq(1), half_rows[h].eq(block_rows)]
                with m.Else():
                    m.d.sync += wr_q.eq(wr_q + 1)
            with m.Else():
                with m.If(expected_last):
                    m.d.sync += err[ERROR_BITS["row_length"]].eq(1)
                with m.If(in_row):
                    m.d.sync += [wr_word.eq(wr_word + 1), wr_base.eq(wr_base + L)]

        # -- read side: the keys of the full halves, one word per cycle --------------------
        # Reads run ahead of the output: `iss_*` walks the words of the full halves (and
        # moves on to the other half after a half's last word), `out_half`/`key` the keys
        # leaving, so a block's first word is read while the block before it leaves.
        iss_half = Signal()
        iss_word = Signal(ww + 1)                  # next word to read
        iss_base = Signal(tw + lw + 1)             # iss_word * L
        out_half = Signal()
        port_v = Signal()                          # the read ports hold an untaken word
        cur = [Signal(8 * L, name=f"cur{i}") for i in range(R)]
        cur_v = Signal()
        lane = Signal(lw)
        key = Signal(tw)
        out_rb = Signal(len(self.o.payload.rb) + 1)
        rows_now = Mux(out_half, half_rows[1], half_rows[0])
        last_key = key == keys - 1
        send = cur_v & self.o.ready
        consumed = ~cur_v | (send & ((lane == L - 1) | last_key))  # cur free after this cycle
        taking = port_v & consumed
        # A half's words are read once per fill (a one-word block must not be read again
        # while its word is still leaving).
        read_all = [Signal(name=f"read_all{h}") for h in range(2)]
        iss_fresh = Mux(iss_half, full[1] & ~read_all[1], full[0] & ~read_all[0])
        issue = busy & iss_fresh & (~port_v | taking)
        for _, rp in banks:
            m.d.comb += [rp.addr.eq(Mux(iss_half, iss_word + W, iss_word)), rp.en.eq(issue)]
        with m.If(issue):
            with m.If(iss_base + L >= keys):
                m.d.sync += [iss_word.eq(0), iss_base.eq(0), iss_half.eq(~iss_half)]
                for h in range(2):
                    with m.If(iss_half == h):
                        m.d.sync += read_all[h].eq(1)
            with m.Else():
                m.d.sync += [iss_word.eq(iss_word + 1), iss_base.eq(iss_base + L)]
        m.d.sync += port_v.eq(issue | (port_v & ~taking))
        with m.If(taking):
            m.d.sync += [c.eq(rp.data) for c, (_, rp) in zip(cur, banks)]
            m.d.sync += [cur_v.eq(1), lane.eq(0)]
        with m.Else():
            with m.If(consumed):
                m.d.sync += cur_v.eq(0)
            with m.If(send):
                m.d.sync += lane.eq(lane + 1)
        m.d.comb += [self.o.valid.eq(cur_v),
                     self.o.payload.rb.eq(out_rb),
                     self.o.payload.key.eq(key),
                     self.o.payload.p.eq(Cat(*(Mux(i < rows_now, c.word_select(lane, 8), 0)
                                               for i, c in enumerate(cur))))]
        for h in range(2):
            with m.If(take & beat.last & (wr_q + 1 == block_rows) & (wr_half == h)):
                m.d.sync += read_all[h].eq(0)
        out_rows = Signal(tw + qw)                 # out_rb * R
        with m.If(send):
            m.d.sync += key.eq(key + 1)
            with m.If(last_key):
                # The half is read out: hand it back to the writer, go to the other one.
                m.d.sync += [key.eq(0), out_half.eq(~out_half), out_rb.eq(out_rb + 1),
                             out_rows.eq(out_rows + R)]
                for h in range(2):
                    with m.If(out_half == h):
                        m.d.sync += full[h].eq(0)
                with m.If(out_rows + R >= queries):
                    m.d.sync += [busy.eq(0), self.done.eq(1)]

        # -- run start (last: it overrides the rest) -----------------------------------------
        bad_cfg = ((self.cfg.keys == 0) | (self.cfg.keys > n_max)
                   | (self.cfg.queries == 0) | (self.cfg.queries > n_max))
        with m.If(self.start & ~busy):
            m.d.sync += [keys.eq(self.cfg.keys), queries.eq(self.cfg.queries), err.eq(0),
                         self.done.eq(0), wr_half.eq(0), wr_q.eq(0), wr_word.eq(0),
                         wr_base.eq(0), wr_rows.eq(0), iss_half.eq(0), iss_word.eq(0),
                         iss_base.eq(0), out_half.eq(0), key.eq(0), out_rb.eq(0), out_rows.eq(0), port_v.eq(0), cur_v.eq(0),
                         full[0].eq(0), full[1].eq(0), read_all[0].eq(0),
                         read_all[1].eq(0)]
            with m.If(bad_cfg):
                m.d.sync += [err[ERROR_BITS["cfg"]].eq(1), self.done.eq(1)]
            with m.Else():
                m.d.sync += busy.eq(1)
        return m


def p_blocks_written(m: Module, pv, transposer_done, keys) -> Signal:
    """Drive ``pv.p_blocks`` (a streamed-P ``PvEngine``) from its P writes: a row block
    counts once its last key's word is written (the transposer writes a row block's words
    in key order); once the transposer is done (also after an error) every row block is
    open, so that P @ V always ends. Returns the count register, which the caller clears
    when a run starts."""
    p_rows = Signal(len(pv.p_blocks), name="p_rows")
    with m.If(pv.p_in.valid & pv.p_in.ready & (pv.p_in.payload.key == keys - 1)):
        m.d.sync += p_rows.eq(pv.p_in.payload.rb + 1)
    m.d.comb += pv.p_blocks.eq(Mux(transposer_done, (1 << len(pv.p_blocks)) - 1, p_rows))
    return p_rows
