"""TileEngine: one reuse-aware PE array computing ``S = Q_eff K_eff^T`` of a small latent
video, with its host interface and performance counters (``docs/array.md``, "RTL: the
single-array engine").

Blocks: Q and K memories (one word of ``engine_max_head_dim`` int8 per token, byte-granular
host writes), :class:`~kaleido_hw.engine.tile_sequencer.TileSequencer`, :class:`~kaleido_hw.array.array.PEArray`,
:class:`~kaleido_hw.engine.acc_buffer.AccumulationBuffer`.

Host protocol: write Q and K (``wr``) while the engine is idle; drive the configuration
ports (``cfg``) and pulse ``start``; the configuration is checked and latched in that
cycle. If the hardware cannot run it, ``done`` rises at once with a non-zero ``error`` mask;
otherwise ``busy`` stays high until ``done``. Then the counters (``cnt``) are valid, and a
``read`` pulse streams S (row-major, signed 32 bits) on ``s`` with valid/ready. With
``cfg.reuse = 0`` the same hardware computes the exact ``Q @ K^T`` (the dense baseline).

The Python helpers at the end (:func:`engine_ports`, :func:`operand_writes`) encode a run
for the benches and reject what the hardware cannot do before any simulation starts.
"""

from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from kaleido_hw.array.array import BaselineArray, PEArray
from kaleido_hw.bitops import popcount
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.acc_buffer import S_WIDTH, AccumulationBuffer
from kaleido_hw.engine.tile_layouts import EngineGeometry, drain_tag_layout, run_config_layout
from kaleido_hw.engine.tile_sequencer import COUNTER_WIDTH, TileSequencer


__all__ = ["TileEngine", "ERROR_BITS", "WRITE_BYTES", "COUNTER_NAMES", "engine_ports",
           "operand_writes", "check_run"]

#: Bytes per host write (one lane of the token word).
WRITE_BYTES = 8

#: Bits of the ``error`` mask, in order (bit 0 first), and what each rejects.
ERROR_BITS = (
    ("grid", "T, H or W is 0, or T*H*W exceeds engine_max_tokens"),
    ("head_dim", "head_dim is 0 or exceeds engine_max_head_dim"),
    ("group_map", "a channel below head_dim maps to group 3 (groups are 0 t, 1 y, 2 x)"),
    ("bits", "not 3 <= half_bits < full_bits <= 7 with full_bits >= 4"),
    ("directions", "a group's direction is 3 (axes are 0 t, 1 y, 2 x)"),
    ("group_size", "a group has more channels than acc_width sums exactly"),
)

#: Counter ports (``cnt__<name>``), in manifest order.
COUNTER_NAMES = ("cycles", "busy_pe_cycles", "issued0", "issued1", "issued2", "issued3",
                 "skipped0", "skipped1", "skipped2", "skipped3", "bubbles", "quads")


def _write_signature(geo: EngineGeometry) -> wiring.Signature:
    return wiring.Signature({
        "en": Out(1), "sel": Out(1), "token": Out(geo.tok_width),
        "lane": Out(max(1, (geo.max_dim // WRITE_BYTES - 1).bit_length())),
        "data": Out(8 * WRITE_BYTES), "strobe": Out(WRITE_BYTES),
    })


def _config_signature(geo: EngineGeometry) -> wiring.Signature:
    sw = geo.size_width
    return wiring.Signature({
        "t": Out(sw), "h": Out(sw), "w": Out(sw),
        "head_dim": Out(geo.dim_width),
        "group_map": Out(2 * geo.max_dim),
        "directions": Out(6),
        "full_bits": Out(3), "half_bits": Out(3),
        "reuse": Out(1),
    })


def _counter_signature() -> wiring.Signature:
    return wiring.Signature({name: Out(COUNTER_WIDTH) for name in COUNTER_NAMES})


class TileEngine(wiring.Component):
    """One R x C reuse-aware PE array with its sequencer, operand memories, accumulation
    buffer, host interface and counters.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``/``cols`` (powers of two), ``acc_width``, ``engine_max_tokens`` (N_max),
        ``engine_max_head_dim`` (D_max).
    baseline : bool
        Build the array of :class:`~kaleido_hw.pe.pe.BaselinePE` (:class:`BaselineArray`)
        instead: a dense-only engine with the same ports and timing (``cfg.reuse`` is
        ignored and taken as 0), the area reference of the reuse engine.

    See the module docstring for the protocol and ``PORT_DOCS`` for every port.
    """

    PORT_DOCS = {
        "wr__en": ("host write strobe: write the bytes of wr__data selected by wr__strobe "
                   "(ignored while busy)"),
        "wr__sel": "operand of the write: 0 Q, 1 K",
        "wr__token": "token index of the write (0..engine_max_tokens-1)",
        "wr__lane": "8-channel lane of the write: channels 8*lane .. 8*lane+7",
        "wr__data": "8 int8 values, channel 8*lane+b at bits [8b, 8b+8)",
        "wr__strobe": "byte enables of wr__data (bit b writes channel 8*lane+b)",
        "cfg__t": "grid frames T (sampled at start)",
        "cfg__h": "grid rows H (sampled at start)",
        "cfg__w": "grid columns W (sampled at start); T*H*W <= engine_max_tokens",
        "cfg__head_dim": "channels per token d (1..engine_max_head_dim)",
        "cfg__group_map": ("channel group per channel, 2 bits each (channel c at [2c, 2c+2)): "
                           "0 t, 1 y, 2 x"),
        "cfg__directions": ("reuse axis per group, 2 bits each (group g at [2g, 2g+2)): "
                            "0 t, 1 y, 2 x"),
        "cfg__full_bits": "FULL threshold: the top 1+full_bits bits agree (4..7)",
        "cfg__half_bits": "HALF threshold: the top 1+half_bits bits agree (3..6, < full_bits)",
        "cfg__reuse": "1: channel-wise reuse; 0: dense, exact Q @ K^T (the baseline)",
        "start": "pulse (when not busy and not reading): check and latch cfg, start a run",
        "read": "pulse (after a successful run): stream S on s, row-major",
        "busy": "a run is in progress",
        "done": "the last run finished (or was rejected: error != 0); cleared by start",
        "error": "reasons the last start was rejected, one bit each (ERROR_BITS: grid, head_dim, "
                 "group_map, bits, directions, group_size)",
        "s__valid": "S read-out stream: payload holds S[i][k]",
        "s__ready": "S read-out stream: the host takes the payload",
        "s__payload": "S[i][k], signed 32 bits; i major, k minor",
        "cnt__cycles": "cycles from start to done of the last run",
        "cnt__busy_pe_cycles": "PE-cycles with a useful multiply in the last run",
        "cnt__issued0": "channel steps issued in pass 0 (tile 0), summed over quads",
        "cnt__issued1": "channel steps issued in pass 1 (tile 1)",
        "cnt__issued2": "channel steps issued in pass 2 (tile 2)",
        "cnt__issued3": "channel steps issued in pass 3 (tile 3)",
        "cnt__skipped0": "channel steps skipped in pass 0 (always 0)",
        "cnt__skipped1": "channel steps skipped in pass 1 (no PE had work in the channel)",
        "cnt__skipped2": "channel steps skipped in pass 2",
        "cnt__skipped3": "channel steps skipped in pass 3",
        "cnt__bubbles": "bubble steps (a pass lasts at least rows steps, for the drain read-out)",
        "cnt__quads": "tile quads computed",
    }

    def __init__(self, config: KaleidoConfig, baseline: bool = False):
        self.geo = geo = EngineGeometry.from_config(config)
        self.config = config
        self.baseline = bool(baseline)
        super().__init__({
            "wr": In(_write_signature(geo)),
            "cfg": In(_config_signature(geo)),
            "start": In(1),
            "read": In(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(len(ERROR_BITS)),
            "s": Out(stream.Signature(signed(S_WIDTH))),
            "cnt": Out(_counter_signature()),
        })

    def elaborate(self, platform):
        m = Module()
        geo, cfg = self.geo, self.cfg
        D, N = geo.max_dim, geo.max_tokens

        # -- operand memories --------------------------------------------------------------
        qmem = memory.Memory(shape=8 * D, depth=N, init=[])
        kmem = memory.Memory(shape=8 * D, depth=N, init=[])
        m.submodules.q_mem, m.submodules.k_mem = qmem, kmem
        lanes = D // WRITE_BYTES
        byte_en = Cat(*(Mux(self.wr.lane == lane, self.wr.strobe, 0) for lane in range(lanes)))
        for sel, mem in ((0, qmem), (1, kmem)):
            port = mem.write_port(granularity=8)
            m.d.comb += [port.addr.eq(self.wr.token), port.data.eq(Cat(*[self.wr.data] * lanes)),
                         port.en.eq(Mux(self.wr.en & ~self.busy & (self.wr.sel == sel),
                                        byte_en, 0))]

        # -- configuration check -------------------------------------------------------------
        hw = Signal(2 * geo.size_width)
        n = Signal(3 * geo.size_width)
        m.d.comb += [hw.eq(cfg.h * cfg.w), n.eq(hw * cfg.t)]
        chan = range(D)
        in_head = Signal(D)
        m.d.comb += in_head.eq(Cat(*(cfg.head_dim > c for c in chan)))
        gmap = [cfg.group_map[2 * c:2 * c + 2] for c in chan]
        gmask = [Signal(D, name=f"gmask{g}") for g in range(3)]
        m.d.comb += [gmask[g].eq(Cat(*(in_head[c] & (gmap[c] == g) for c in chan)))
                     for g in range(3)]
        gsize = [Signal(geo.dim_width, name=f"gsize{g}") for g in range(3)]
        m.d.comb += [gsize[g].eq(popcount(gmask[g])) for g in range(3)]
        dirs = [cfg.directions[2 * g:2 * g + 2] for g in range(3)]
        err = Signal(len(ERROR_BITS))
        big = geo.max_group_channels
        m.d.comb += err.eq(Cat(
            (cfg.t == 0) | (cfg.h == 0) | (cfg.w == 0) | (n > N),
            (cfg.head_dim == 0) | (cfg.head_dim > D),
            Cat(*(in_head[c] & (gmap[c] == 3) for c in chan)).any(),
            (cfg.half_bits < 3) | (cfg.full_bits < 4) | (cfg.half_bits >= cfg.full_bits),
            Cat(*(d == 3 for d in dirs)).any(),
            Cat(*(gs > big for gs in gsize)).any(),
        ))

        run = Signal(run_config_layout(geo))
        m.submodules.sequencer = seq = TileSequencer(self.config)
        array_class = BaselineArray if self.baseline else PEArray
        m.submodules.array = arr = array_class(self.config, tag_width=drain_tag_layout(geo).size)
        m.submodules.acc = acc = AccumulationBuffer(self.config)

        seq_start = Signal()
        tail = Signal(range(geo.rows + geo.cols + 1))
        tailing = Signal()
        m.d.sync += seq_start.eq(0)
        accept = self.start & ~self.busy & ~acc.reading
        cnt = self.cnt
        with m.If(accept):
            m.d.sync += [getattr(cnt, name).eq(0) for name in ("cycles", "busy_pe_cycles")]
            with m.If(err != 0):
                m.d.sync += [self.error.eq(err), self.done.eq(1)]
            with m.Else():
                m.d.sync += [
                    self.error.eq(0), self.done.eq(0), self.busy.eq(1), seq_start.eq(1),
                    run.t.eq(cfg.t), run.h.eq(cfg.h), run.w.eq(cfg.w), run.hw.eq(hw),
                    run.n.eq(n), run.reuse.eq(cfg.reuse & (not self.baseline)),
                    # 0xFF << (7 - bits), as the complement of 0xFF >> (1 + bits)
                    run.full_mask.eq(~(Const(0xFF, 8) >> (cfg.full_bits + 1))),
                    run.half_mask.eq(~(Const(0xFF, 8) >> (cfg.half_bits + 1))),
                ]
                for g in range(3):
                    m.d.sync += [run.dirs[g].eq(dirs[g]), run.gmask[g].eq(gmask[g]),
                                 run.gsize[g].eq(gsize[g])]
        with m.If(seq.finished):
            m.d.sync += [tailing.eq(1), tail.eq(geo.rows + geo.cols)]
        with m.Elif(tailing):
            m.d.sync += tail.eq(tail - 1)
            with m.If(tail == 1):
                m.d.sync += [tailing.eq(0), self.busy.eq(0), self.done.eq(1)]
        with m.If(self.busy):
            m.d.sync += [cnt.cycles.eq(cnt.cycles + 1),
                         cnt.busy_pe_cycles.eq(cnt.busy_pe_cycles + arr.busy_count)]

        # -- datapath ---------------------------------------------------------------------------
        q_rd = qmem.read_port(domain="sync", transparent_for=())
        k_rd = kmem.read_port(domain="sync", transparent_for=())
        m.d.comb += [
            seq.start.eq(seq_start), seq.cfg.eq(run),
            q_rd.addr.eq(seq.q_addr), q_rd.en.eq(seq.q_en), seq.q_data.eq(q_rd.data),
            k_rd.addr.eq(seq.k_addr), k_rd.en.eq(seq.k_en), seq.k_data.eq(k_rd.data),
            arr.row.eq(seq.row), arr.col.eq(seq.col), arr.tag.eq(seq.tag),
            acc.wr.eq(arr.drain), acc.cfg.eq(run),
            acc.read.eq(self.read & self.done & ~self.busy & (self.error == 0)),
        ]
        wiring.connect(m, wiring.flipped(self.s), acc.s)
        sc = seq.counters
        m.d.comb += [cnt.bubbles.eq(sc.bubbles), cnt.quads.eq(sc.quads)]
        for p in range(4):
            m.d.comb += [getattr(cnt, f"issued{p}").eq(sc.issued[p]),
                         getattr(cnt, f"skipped{p}").eq(sc.skipped[p])]
        return m


# -- host-side helpers (plain Python) ---------------------------------------------------------

def check_run(config: KaleidoConfig, grid, groups, full_bits: int = 5, half_bits: int = 3):
    """Raise ``ValueError`` naming the parameter if the TileEngine built from ``config``
    cannot run this job (the same conditions as the RTL's ``error`` bits)."""
    from golden.numerics import _as_groups, as_grid
    geo = EngineGeometry.from_config(config)
    grid, groups = as_grid(grid), _as_groups(groups)
    if grid.n > geo.max_tokens:
        raise ValueError(f"grid {grid} has {grid.n} tokens; this TileEngine holds at most "
                         f"engine_max_tokens = {geo.max_tokens}")
    if max(grid.shape) >= 1 << geo.size_width:
        raise ValueError(f"grid {grid}: every length must be below {1 << geo.size_width}")
    if groups.head_dim > geo.max_dim:
        raise ValueError(f"head_dim {groups.head_dim} exceeds engine_max_head_dim = {geo.max_dim}")
    if not (3 <= half_bits < full_bits <= 7 and full_bits >= 4):
        raise ValueError(f"full_bits/half_bits must satisfy 3 <= half_bits < full_bits <= 7, "
                         f"full_bits >= 4; got {full_bits}/{half_bits}")
    too_big = [s for s in groups.sizes if s > geo.max_group_channels]
    if too_big:
        raise ValueError(f"a channel group of {max(too_big)} channels exceeds the "
                         f"{geo.max_group_channels} that acc_width = {geo.acc_width} sums exactly")
    return grid, groups


def engine_ports(config: KaleidoConfig, grid, groups, full_bits: int = 5, half_bits: int = 3,
                 reuse: bool = True) -> dict:
    """Values of the ``cfg__*`` ports for one run (after :func:`check_run`)."""
    grid, groups = check_run(config, grid, groups, full_bits, half_bits)
    gmap = sum(int(g) << (2 * c) for c, g in enumerate(groups.group_of))
    dirs = sum(int(d) << (2 * g) for g, d in enumerate(groups.directions))
    return {"cfg__t": grid.t, "cfg__h": grid.h, "cfg__w": grid.w,
            "cfg__head_dim": groups.head_dim, "cfg__group_map": gmap,
            "cfg__directions": dirs, "cfg__full_bits": full_bits,
            "cfg__half_bits": half_bits, "cfg__reuse": int(bool(reuse))}


def operand_writes(x) -> list[tuple[int, int, int, int]]:
    """Host writes of one int8 operand (N x d): ``(token, lane, data, strobe)`` tuples."""
    x = np.asarray(x)
    if x.dtype != np.int8 or x.ndim != 2:
        raise ValueError(f"operand must be an (N, d) int8 array, got {x.dtype} {x.shape}")
    out = []
    u = x.view(np.uint8)
    for tok in range(x.shape[0]):
        for lane in range(-(-x.shape[1] // WRITE_BYTES)):
            chunk = u[tok, lane * WRITE_BYTES:(lane + 1) * WRITE_BYTES]
            value = int.from_bytes(bytes(chunk), "little")
            out.append((tok, lane, value, (1 << len(chunk)) - 1))
    return out
