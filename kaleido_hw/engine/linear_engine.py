"""LinearEngine: ``Y = X_eff @ W`` (a linear layer with the window rule of
``docs/numerics.md`` section 8) on P = ``engine_arrays`` R x C arrays of ReusePEs in the PE's
linear mode, with its host interface and counters (``docs/linear.md``, "RTL").

Blocks: X memory (one word of ``linear_max_in`` int8 per token) and W memory (one word of
``linear_max_out`` int8 per input channel), byte-granular host writes, one read port per
array; per array a :class:`~kaleido_hw.engine.linear_sequencer.LinearSequencer` (loader with the
:class:`~kaleido_hw.engine.window_code_unit.WindowCodeUnit`, A/F1/F2 stepper, drain waves), a
register stage (so the weights read in a step's cycle meet the multipliers a cycle later) and a
:class:`~kaleido_hw.array.array.PEArray` of :class:`~kaleido_hw.array.linear_cell.LinearCell`;
:class:`~kaleido_hw.engine.linear_buffer.LinearBuffer` (P x C banks per plane).

Arrays: column block cb runs on array ``cb mod P``; each array walks its column blocks in
increasing cb, every row block of each, on its own. The engine joins them at two points: a
group barrier (the next group's loads start two cycles after the last array's last step of
the group) and the end of the run (the last drain wave leaves after the last array's final
drain step). Arrays without a column block are not started.

Host protocol (:mod:`kaleido_hw.engine.host_port`): write X and W (``wr``) while idle; drive ``cfg`` and
pulse ``start``; the configuration is checked and latched in that cycle. If the hardware
cannot run it, ``done`` rises at once with a non-zero ``error`` mask (:data:`ERROR_BITS`);
otherwise ``busy`` stays high until ``done``. Then the counters (``cnt``) are valid
(``golden.engine.linear.linear_counters`` with ``arrays=P`` predicts every one, cycles and
per-array counters included), and a ``read`` pulse streams Y (row-major, signed 32 bits)
on ``y`` with valid/ready. With ``cfg.reuse = 0`` the same hardware computes the exact
``X @ W`` (dense).

The Python helpers at the end (:func:`linear_ports`, :func:`check_linear_run`, and
``host_port.operand_writes`` for X and W) encode a run for the benches and reject
what the hardware cannot do before any simulation starts.
"""

from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.array import PEArray
from kaleido_hw.array.layouts import linear_col_layout, linear_row_layout
from kaleido_hw.array.linear_cell import LinearCell
from kaleido_hw.bitops import bits_for, popcount
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.linear_buffer import Y_WIDTH, LinearBuffer
from kaleido_hw.engine.linear_layouts import LinearGeometry, linear_run_layout, linear_tag_layout
from kaleido_hw.engine.linear_sequencer import LinearSequencer, linear_counters_layout
from kaleido_hw.engine.host_port import (ARRAY_COUNTER_NAMES, WRITE_BYTES, array_counter_names,
                                         array_counter_values, operand_writes)
from kaleido_hw.engine.tile_layouts import COUNTER_WIDTH


__all__ = ["LinearEngine", "ERROR_BITS", "COUNTER_NAMES", "ARRAY_COUNTER_NAMES", "counter_names",
           "linear_ports", "check_linear_run",
           "operand_writes", "counters_from_model"]

#: Bits of the ``error`` mask, in order (bit 0 first), and what each rejects.
ERROR_BITS = (
    ("grid", "T, H or W is 0, or T*H*W exceeds engine_max_tokens"),
    ("c_in", "c_in is 0 or exceeds linear_max_in"),
    ("c_out", "c_out is 0 or exceeds linear_max_out"),
    ("directions", "an input channel below c_in has direction 3 (axes are 0 t, 1 y, 2 x)"),
    ("window", "window is not 2 or 3"),
    ("bits", "not 3 <= half_bits < full_bits <= 7 with full_bits >= 4"),
    ("group_size", "a direction group has more channels than acc_width sums exactly"),
)

#: Counter ports (``cnt__<name>``), in manifest order.
COUNTER_NAMES = ("cycles", "busy_pe_cycles", "issued0", "issued1", "issued2",
                 "skipped0", "skipped1", "skipped2", "bubbles", "blocks", "groups")
_ARRAY_COUNTER_DOCS = {
    "busy_pe_cycles": "PE-cycles of array {a} with a non-idle decode entry in the last run",
    "steps": "channel steps (issued + bubbles) of array {a} in the last run",
}
#: Arrays whose counter ports PORT_DOCS describes (``engine_arrays`` is at most 64).
_MAX_ARRAYS = 64


def counter_names(arrays: int) -> tuple:
    """Every counter port of a build with ``arrays`` arrays, without the ``cnt__`` prefix:
    :data:`COUNTER_NAMES`, then ``a<k>__<name>`` per array."""
    return array_counter_names(COUNTER_NAMES, arrays)


def _counter_signature(arrays: int) -> wiring.Signature:
    members = {name: Out(COUNTER_WIDTH) for name in COUNTER_NAMES}
    per_array = wiring.Signature({name: Out(COUNTER_WIDTH) for name in ARRAY_COUNTER_NAMES})
    for a in range(arrays):
        members[f"a{a}"] = Out(per_array)
    return wiring.Signature(members)


def _write_signature(geo: LinearGeometry) -> wiring.Signature:
    lanes = max(geo.max_in, geo.max_out) // WRITE_BYTES
    return wiring.Signature({
        "en": Out(1), "sel": Out(1),
        "index": Out(bits_for(max(geo.max_tokens, geo.max_in) - 1)),
        "lane": Out(bits_for(lanes - 1)),
        "data": Out(8 * WRITE_BYTES),
    })


def _config_signature(geo: LinearGeometry) -> wiring.Signature:
    sw = geo.size_width
    return wiring.Signature({
        "t": Out(sw), "h": Out(sw), "w": Out(sw),
        "c_in": Out(geo.in_width), "c_out": Out(geo.out_width),
        "directions": Out(2 * geo.max_in),
        "window": Out(2),
        "full_bits": Out(3), "half_bits": Out(3),
        "reuse": Out(1),
    })


class LinearEngine(wiring.Component):
    """P R x C arrays of ReusePEs computing ``Y = X_eff @ W``, with their sequencers, X/W
    memories, Y buffer, host interface and counters.

    Parameters
    ----------
    config : KaleidoConfig
        ``engine_arrays`` (P), ``rows``/``cols`` (C a power of two), ``acc_width``,
        ``engine_max_tokens`` (N_max), ``linear_max_in`` (C_in max), ``linear_max_out``
        (C_out max).

    See the module docstring for the protocol and ``PORT_DOCS`` for every port.
    """

    PORT_DOCS = {
        "wr__en": "host write strobe: write the 8 bytes of wr__data (ignored while busy)",
        "wr__sel": "operand of the write: 0 X (activation), 1 W (weight)",
        "wr__index": "X: token index (0..engine_max_tokens-1); W: input channel (0..linear_max_in-1)",
        "wr__lane": ("8-value lane of the write: X channels / W output features "
                     "8*lane .. 8*lane+7"),
        "wr__data": "8 int8 values, value 8*lane+b at bits [8b, 8b+8)",
        "cfg__t": "grid frames T (sampled at start)",
        "cfg__h": "grid rows H (sampled at start)",
        "cfg__w": "grid columns W (sampled at start); T*H*W <= engine_max_tokens",
        "cfg__c_in": "input channels C_in (1..linear_max_in)",
        "cfg__c_out": "output features C_out (1..linear_max_out)",
        "cfg__directions": ("reuse axis per input channel, 2 bits each (channel c at [2c, 2c+2)): "
                            "0 t, 1 y, 2 x; channels of one axis form a group"),
        "cfg__window": "window of the activation-side rule: 2 or 3 tokens",
        "cfg__full_bits": "FULL threshold theta1 = 2**(7-full_bits) on the window's spread (4..7)",
        "cfg__half_bits": "HALF threshold: the top 1+half_bits bits agree (3..6, < full_bits)",
        "cfg__reuse": "1: window reuse; 0: dense, exact X @ W (the baseline)",
        "start": "pulse (when not busy and not reading): check and latch cfg, start a run",
        "read": "pulse (after a successful run): stream Y on y, row-major",
        "busy": "a run is in progress",
        "done": "the last run finished (or was rejected: error != 0); cleared by start",
        "error": ("reasons the last start was rejected, one bit each (ERROR_BITS: grid, c_in, "
                  "c_out, directions, window, bits, group_size)"),
        "y__valid": "Y read-out stream: payload holds Y[i][f]",
        "y__ready": "Y read-out stream: the host takes the payload",
        "y__payload": "Y[i][f], signed 32 bits; token i major, output feature f minor",
        "cnt__cycles": "cycles from start to done of the last run",
        "cnt__busy_pe_cycles": "PE-cycles with a non-idle decode entry in the last run",
        "cnt__issued0": "A (anchor) channel steps issued, summed over blocks",
        "cnt__issued1": "F1 channel steps issued",
        "cnt__issued2": "F2 channel steps issued (window 3)",
        "cnt__skipped0": "A channel steps skipped (always 0)",
        "cnt__skipped1": "F1 channel steps skipped (no row of the block had F1 work there)",
        "cnt__skipped2": "F2 channel steps skipped (0 for window 2)",
        "cnt__bubbles": "bubble steps (a block waits for its drain waves)",
        "cnt__blocks": "blocks (R units x C output features) computed",
        "cnt__groups": "non-empty direction groups computed",
        **{f"cnt__a{a}__{name}": text.format(a=a) for a in range(_MAX_ARRAYS)
           for name, text in _ARRAY_COUNTER_DOCS.items()},
    }

    def __init__(self, config: KaleidoConfig):
        self.geo = geo = LinearGeometry.from_config(config)
        self.config = config
        super().__init__({
            "wr": In(_write_signature(geo)),
            "cfg": In(_config_signature(geo)),
            "start": In(1),
            "read": In(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(len(ERROR_BITS)),
            "y": Out(stream.Signature(signed(Y_WIDTH))),
            "cnt": Out(_counter_signature(geo.arrays)),
        })

    def elaborate(self, platform):
        m = Module()
        geo, cfg = self.geo, self.cfg
        D, O, N, C = geo.max_in, geo.max_out, geo.max_tokens, geo.cols

        # -- operand memories --------------------------------------------------------------
        xmem = memory.Memory(shape=8 * D, depth=N, init=[])
        wmem = memory.Memory(shape=8 * O, depth=D, init=[])
        m.submodules.x_mem, m.submodules.w_mem = xmem, wmem
        for sel, mem, width in ((0, xmem, D), (1, wmem, O)):
            lanes = width // WRITE_BYTES
            lane_en = Cat(*(self.wr.lane == lane for lane in range(lanes)))
            port = mem.write_port(granularity=8 * WRITE_BYTES)   # whole lanes, as the engine
            depth_ok = self.wr.index < mem.depth
            m.d.comb += [port.addr.eq(self.wr.index),
                         port.data.eq(Cat(*[self.wr.data] * lanes)),
                         port.en.eq(Mux(self.wr.en & ~self.busy & (self.wr.sel == sel)
                                        & depth_ok, lane_en, 0))]

        # -- configuration check -------------------------------------------------------------
        hw = Signal(2 * geo.size_width)
        n = Signal(3 * geo.size_width)
        m.d.comb += [hw.eq(cfg.h * cfg.w), n.eq(hw * cfg.t)]
        in_layer = [cfg.c_in > c for c in range(D)]
        dirs = [cfg.directions[2 * c:2 * c + 2] for c in range(D)]
        gmask = [Signal(D, name=f"gmask{g}") for g in range(3)]
        gsize = [Signal(geo.in_width, name=f"gsize{g}") for g in range(3)]
        for g in range(3):
            m.d.comb += [gmask[g].eq(Cat(*(in_layer[c] & (dirs[c] == g) for c in range(D)))),
                         gsize[g].eq(popcount(gmask[g]))]
        err = Signal(len(ERROR_BITS))
        m.d.comb += err.eq(Cat(
            (cfg.t == 0) | (cfg.h == 0) | (cfg.w == 0) | (n > N),
            (cfg.c_in == 0) | (cfg.c_in > D),
            (cfg.c_out == 0) | (cfg.c_out > O),
            Cat(*(in_layer[c] & (dirs[c] == 3) for c in range(D))).any(),
            (cfg.window != 2) & (cfg.window != 3),
            (cfg.half_bits < 3) | (cfg.full_bits < 4) | (cfg.half_bits >= cfg.full_bits),
            Cat(*(gs > geo.max_group_channels for gs in gsize)).any(),
        ))

        run = Signal(linear_run_layout(geo))
        P = geo.arrays
        seqs, arrs = [], []
        for a in range(P):
            seqs.append(LinearSequencer(self.config, a))
            arrs.append(PEArray(self.config, tag_width=linear_tag_layout(geo).size,
                                cell=LinearCell, row_layout=linear_row_layout(),
                                col_layout=linear_col_layout()))
            m.submodules[f"sequencer{a}"] = seqs[a]
            m.submodules[f"array{a}"] = arrs[a]
        m.submodules.buffer = buf = LinearBuffer(self.config)

        cbits = (C - 1).bit_length()
        # theta1**2 = 2**(14 - 2*full_bits); the FULL bound is (w*theta1)**2.
        shift = Signal(4)
        m.d.comb += shift.eq(14 - (cfg.full_bits << 1))
        seq_start = Signal()
        tail = Signal(range(geo.rows + C + 2))
        tailing = Signal()
        # Array a has work iff the layer has more than a column blocks (then in every group).
        active = Signal(P)
        gfin = Signal(P)             # array a has ended its share of the current group
        fin = Signal(P)              # array a has made its final drain step
        m.d.sync += seq_start.eq(0)
        accept = self.start & ~self.busy & ~buf.reading
        cnt = self.cnt
        ncb = (cfg.c_out + (C - 1)) >> cbits
        with m.If(accept):
            m.d.sync += [cnt.cycles.eq(0), cnt.busy_pe_cycles.eq(0), gfin.eq(0), fin.eq(0)]
            m.d.sync += [getattr(cnt, f"a{a}").busy_pe_cycles.eq(0) for a in range(P)]
            with m.If(err != 0):
                m.d.sync += [self.error.eq(err), self.done.eq(1)]
            with m.Else():
                m.d.sync += [
                    self.error.eq(0), self.done.eq(0), self.busy.eq(1), seq_start.eq(1),
                    run.t.eq(cfg.t), run.h.eq(cfg.h), run.w.eq(cfg.w), run.hw.eq(hw),
                    run.n.eq(n), run.c_out.eq(cfg.c_out), run.ncb.eq(ncb),
                    active.eq(Cat(*(ncb > a for a in range(P)))),
                    run.w3.eq(cfg.window == 3), run.reuse.eq(cfg.reuse),
                    run.full_limit.eq(Mux(cfg.window == 3, Const(9, 4), Const(4, 4)) << shift),
                    # 0xFF << (7 - bits), as the complement of 0xFF >> (1 + bits)
                    run.half_mask.eq(~(Const(0xFF, 8) >> (cfg.half_bits + 1))),
                ]
                for g in range(3):
                    m.d.sync += [run.gmask[g].eq(gmask[g]), run.gsize[g].eq(gsize[g])]
        # Group barrier: the cycle after the last active array ends its share of the group.
        group_end = Cat(*(s.group_end for s in seqs))
        finished = Cat(*(s.finished for s in seqs))
        barrier = Signal()
        m.d.sync += barrier.eq(0)
        with m.If(self.busy & (~active | gfin | group_end).all()):
            m.d.sync += [barrier.eq(1), gfin.eq(0)]
        with m.Else():
            m.d.sync += gfin.eq(gfin | group_end)
        m.d.comb += [s.barrier.eq(barrier) for s in seqs]
        # After the last array's final drain step: the register stage and R + C cycles until
        # its last value is in the buffer (arrays that finish earlier drain earlier, into
        # their own banks).
        all_fin = self.busy & ~tailing & (~active | fin | finished).all()
        with m.If(all_fin):
            m.d.sync += fin.eq(0)
        with m.Else():
            m.d.sync += fin.eq(fin | finished)
        with m.If(all_fin):
            m.d.sync += [tailing.eq(1), tail.eq(geo.rows + C + 1)]
        with m.Elif(tailing):
            m.d.sync += tail.eq(tail - 1)
            with m.If(tail == 1):
                m.d.sync += [tailing.eq(0), self.busy.eq(0), self.done.eq(1)]
        with m.If(self.busy):
            total_busy = sum(arr.busy_count for arr in arrs)
            m.d.sync += [cnt.cycles.eq(cnt.cycles + 1),
                         cnt.busy_pe_cycles.eq(cnt.busy_pe_cycles + total_busy)]
            for a in range(P):
                ac = getattr(cnt, f"a{a}")
                m.d.sync += ac.busy_pe_cycles.eq(ac.busy_pe_cycles + arrs[a].busy_count)

        # -- datapath ---------------------------------------------------------------------------
        # Each array has its own read ports on X and W (its loads and weight reads are its own).
        for a, (seq, arr) in enumerate(zip(seqs, arrs)):
            x_rd = xmem.read_port(domain="sync", transparent_for=())
            w_rd = wmem.read_port(domain="sync", transparent_for=())
            m.d.comb += [
                seq.start.eq(seq_start & active[a]), seq.cfg.eq(run),
                x_rd.addr.eq(seq.x_addr), x_rd.en.eq(seq.x_en), seq.x_data.eq(x_rd.data),
                w_rd.addr.eq(seq.w_addr), w_rd.en.eq(seq.w_en), seq.w_data.eq(w_rd.data),
            ]
            # A register stage in front of the array: the W macro's read (the step's weights)
            # reaches the PEs' multipliers a cycle later, not in the cycle it is read.
            m.d.sync += [arr.row.eq(seq.row), arr.col.eq(seq.col), arr.tag.eq(seq.tag)]
            m.d.comb += [buf.wr[a * C + j].eq(arr.drain[j]) for j in range(C)]
        m.d.comb += [buf.cfg.eq(run),
                     buf.read.eq(self.read & self.done & ~self.busy & (self.error == 0))]
        wiring.connect(m, wiring.flipped(self.y), buf.y)
        # Totals over the arrays that ran (an idle array keeps its previous run's counts).
        scs = [Mux(active[a], seqs[a].counters.as_value(), 0) for a in range(P)]
        scs = [data.View(linear_counters_layout(), v) for v in scs]
        m.d.comb += [cnt.bubbles.eq(sum(sc.bubbles for sc in scs)),
                     cnt.blocks.eq(sum(sc.blocks for sc in scs)),
                     cnt.groups.eq(seqs[0].counters.groups)]     # array 0 runs every group
        for k in range(3):
            m.d.comb += [getattr(cnt, f"issued{k}").eq(sum(sc.issued[k] for sc in scs)),
                         getattr(cnt, f"skipped{k}").eq(sum(sc.skipped[k] for sc in scs))]
        for a, sc in enumerate(scs):
            m.d.comb += getattr(cnt, f"a{a}").steps.eq(sum(sc.issued[k] for k in range(3))
                                                      + sc.bubbles)
        return m


# -- host-side helpers (plain Python) ---------------------------------------------------------

def check_linear_run(config: KaleidoConfig, grid, c_in: int, c_out: int, directions=0,
                     window: int = 2, full_bits: int = 5, half_bits: int = 3):
    """Raise ``ValueError`` naming the parameter if the LinearEngine built from ``config``
    cannot run this layer (the conditions of the RTL's ``error`` bits). Returns
    ``(grid, axes)`` with ``axes`` the (c_in,) direction of every input channel."""
    from golden.checks import check_axes
    from golden.numerics import as_grid
    geo = LinearGeometry.from_config(config)
    grid = as_grid(grid)
    if grid.n > geo.max_tokens:
        raise ValueError(f"grid {grid} has {grid.n} tokens; this LinearEngine holds at most "
                         f"engine_max_tokens = {geo.max_tokens}")
    if not 1 <= c_in <= geo.max_in:
        raise ValueError(f"c_in must be in [1, linear_max_in = {geo.max_in}], got {c_in}")
    if not 1 <= c_out <= geo.max_out:
        raise ValueError(f"c_out must be in [1, linear_max_out = {geo.max_out}], got {c_out}")
    if window not in (2, 3):
        raise ValueError(f"window must be 2 or 3, got {window!r}")
    if not (3 <= half_bits < full_bits <= 7 and full_bits >= 4):
        raise ValueError(f"full_bits/half_bits must satisfy 3 <= half_bits < full_bits <= 7, "
                         f"full_bits >= 4; got {full_bits}/{half_bits}")
    axes = np.asarray(check_axes(directions, c_in))
    for g in range(3):
        size = int(np.count_nonzero(axes == g))
        if size > geo.max_group_channels:
            raise ValueError(f"the direction group {'tyx'[g]} has {size} channels, more than the "
                             f"{geo.max_group_channels} that acc_width = {geo.acc_width} sums "
                             f"exactly")
    return grid, axes


def linear_ports(config: KaleidoConfig, grid, c_in: int, c_out: int, directions=0,
                 window: int = 2, full_bits: int = 5, half_bits: int = 3,
                 reuse: bool = True) -> dict:
    """Values of the ``cfg__*`` ports for one run (after :func:`check_linear_run`)."""
    grid, axes = check_linear_run(config, grid, c_in, c_out, directions, window, full_bits,
                                  half_bits)
    dirs = sum(int(a) << (2 * c) for c, a in enumerate(axes))
    return {"cfg__t": grid.t, "cfg__h": grid.h, "cfg__w": grid.w, "cfg__c_in": c_in,
            "cfg__c_out": c_out, "cfg__directions": dirs, "cfg__window": window,
            "cfg__full_bits": full_bits, "cfg__half_bits": half_bits,
            "cfg__reuse": int(bool(reuse))}


def counters_from_model(model) -> dict:
    """``{counter port name: value}`` of a ``golden.engine.linear.LinearCounters`` computed
    with ``arrays`` = the build's ``engine_arrays``, in :func:`counter_names` order: what the
    RTL's ``cnt__*`` ports must show."""
    out = {"cycles": model.cycles, "busy_pe_cycles": model.busy_pe_cycles}
    for k in range(3):
        out[f"issued{k}"] = model.issued[k]
    for k in range(3):
        out[f"skipped{k}"] = model.skipped[k]
    out.update(bubbles=model.bubbles, blocks=model.blocks, groups=model.groups)
    out.update(array_counter_values(model))
    return out
