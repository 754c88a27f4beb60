"""KaleidoEngine: P reuse-aware PE arrays computing ``S = Q_eff K_eff^T`` chunk by chunk
(``docs/engine.md``; its section "RTL" documents this file).

Blocks: per array a copy of the Q and K memories (host writes go to every copy), an
:class:`~kaleido_hw.engine_sequencer.ArraySequencer` and a :class:`~kaleido_hw.array.PEArray`;
a chunk controller (cuts each group's channels into chunks of W = ``sched_pattern_width``,
hands them to the arrays, and waits at the barrier between chunks); the
:class:`~kaleido_hw.engine_buffer.EngineBuffer` (one plane per chunk, ``P*C`` banks); the
host interface and the counters.

Host protocol (as the TileEngine's): write Q and K (``wr``) while idle; drive ``cfg`` and
pulse ``start``; the configuration is checked and latched in that cycle. If it cannot run,
``done`` rises at once with a non-zero ``error`` mask; otherwise ``busy`` stays high until
``done``. Then the counters (``cnt``) are valid and a ``read`` pulse streams S (row-major,
signed 32 bits) on ``s``.

Variants (``cfg.reuse``, ``cfg.schedule``, ``cfg.match``): dense (reuse 0) and pe (1, 0, 0)
run on this hardware. The scheduler and the matcher are not built into this version: a
``start`` with reuse and ``schedule`` or ``match`` is rejected (error bit ``dispatcher``).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .acc_buffer import S_WIDTH
from .array import PEArray
from .bitops import popcount
from .config import KaleidoConfig
from .engine_buffer import EngineBuffer
from .engine_layouts import (KaleidoGeometry, chunk_layout, engine_run_layout,
                             engine_tag_layout, plane_info_layout)
from .engine_sequencer import ArraySequencer
from .sequencer import COUNTER_WIDTH
from .tile_engine import WRITE_BYTES, check_run, operand_writes


__all__ = ["KaleidoEngine", "ERROR_BITS", "ENGINE_COUNTERS", "ARRAY_COUNTERS",
           "engine_ports", "operand_writes", "check_engine_run", "VARIANTS"]

#: Bits of the ``error`` mask, in order (bit 0 first), and what each rejects.
ERROR_BITS = (
    ("grid", "T, H or W is 0, or T*H*W exceeds engine_max_tokens"),
    ("head_dim", "head_dim is 0 or exceeds engine_max_head_dim"),
    ("group_map", "a channel below head_dim maps to group 3 (groups are 0 t, 1 y, 2 x)"),
    ("bits", "not 3 <= half_bits < full_bits <= 7 with full_bits >= 4"),
    ("directions", "a group's direction is 3 (axes are 0 t, 1 y, 2 x)"),
    ("group_size", "a group has more channels than acc_width sums exactly"),
    ("dispatcher", "reuse with schedule or match asked for a dispatcher block this engine "
                   "does not have"),
)

#: Run-time variants: name -> (reuse, schedule, match) (``docs/engine.md``, "Variants").
VARIANTS = {"dense": (0, 0, 0), "pe": (1, 0, 0), "pe-sh": (1, 1, 0), "pe-m": (1, 0, 1),
            "full": (1, 1, 1)}
#: Variants this RTL runs (the dispatcher blocks are not integrated yet).
BUILT_VARIANTS = ("dense", "pe")

#: Engine counters (``cnt__<name>``).
ENGINE_COUNTERS = ("cycles", "chunks")
#: Per-array counters (``cnt__a<k>__<name>``).
ARRAY_COUNTERS = ("busy_pe_cycles", "issued0", "issued1", "issued2", "issued3", "skipped0",
                  "skipped1", "skipped2", "skipped3", "merged", "bubbles", "quads", "idle")

_ARRAY_COUNTER_DOCS = {
    "busy_pe_cycles": "PE-cycles of array {a} in which some register took a term",
    "issued0": "channel steps issued by array {a} in pass 0, summed over its quads",
    "issued1": "channel steps issued by array {a} in pass 1",
    "issued2": "channel steps issued by array {a} in pass 2",
    "issued3": "channel steps issued by array {a} in pass 3",
    "skipped0": "channel steps of array {a} skipped in pass 0 (always 0)",
    "skipped1": "channel steps of array {a} skipped in pass 1 (no PE had work in the channel)",
    "skipped2": "channel steps of array {a} skipped in pass 2",
    "skipped3": "channel steps of array {a} skipped in pass 3",
    "merged": "issued slots of array {a} with two channels (0: no matcher in this engine)",
    "bubbles": "bubble steps of array {a} (a pass lasts at least rows steps)",
    "quads": "tile quads computed by array {a}",
    "idle": "cycles of the run in which array {a} issued no step (loads, barrier, final drain)",
}
#: Arrays whose counter ports PORT_DOCS describes (``engine_arrays`` is at most 64).
_MAX_ARRAYS = 64


def _write_signature(geo: KaleidoGeometry) -> wiring.Signature:
    t = geo.tile
    return wiring.Signature({
        "en": Out(1), "sel": Out(1), "token": Out(t.tok_width),
        "lane": Out(max(1, (t.max_dim // WRITE_BYTES - 1).bit_length())),
        "data": Out(8 * WRITE_BYTES), "strobe": Out(WRITE_BYTES),
    })


def _config_signature(geo: KaleidoGeometry) -> wiring.Signature:
    t = geo.tile
    sw = t.size_width
    return wiring.Signature({
        "t": Out(sw), "h": Out(sw), "w": Out(sw),
        "head_dim": Out(t.dim_width),
        "group_map": Out(2 * t.max_dim),
        "directions": Out(6),
        "full_bits": Out(3), "half_bits": Out(3),
        "reuse": Out(1), "schedule": Out(1), "match": Out(1),
    })


def _counter_signature(arrays: int) -> wiring.Signature:
    members = {name: Out(COUNTER_WIDTH) for name in ENGINE_COUNTERS}
    per_array = wiring.Signature({name: Out(COUNTER_WIDTH) for name in ARRAY_COUNTERS})
    for a in range(arrays):
        members[f"a{a}"] = Out(per_array)
    return wiring.Signature(members)


def _port_docs() -> dict:
    docs = {
        "wr__en": ("host write strobe: write the bytes of wr__data selected by wr__strobe into "
                   "every array's copy (ignored while busy)"),
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
        "cfg__schedule": ("1: cluster units with the scheduler (not built in this version: "
                          "rejected with reuse)"),
        "cfg__match": ("1: merge pass-3 channels with the matcher (not built in this version: "
                       "rejected with reuse)"),
        "start": "pulse (when not busy and not reading): check and latch cfg, start a run",
        "read": "pulse (after a successful run): stream S on s, row-major",
        "busy": "a run is in progress",
        "done": "the last run finished (or was rejected: error != 0); cleared by start",
        "error": ("reasons the last start was rejected, one bit each (ERROR_BITS: grid, "
                  "head_dim, group_map, bits, directions, group_size, dispatcher)"),
        "s__valid": "S read-out stream: payload holds S[i][k]",
        "s__ready": "S read-out stream: the host takes the payload",
        "s__payload": "S[i][k], signed 32 bits; i major, k minor",
        "cnt__cycles": "cycles from start to done of the last run",
        "cnt__chunks": "chunks (W-channel pieces of the groups) of the last run",
    }
    for a in range(_MAX_ARRAYS):
        for name, text in _ARRAY_COUNTER_DOCS.items():
            docs[f"cnt__a{a}__{name}"] = text.format(a=a)
    return docs


class KaleidoEngine(wiring.Component):
    """P arrays of R x C reuse-aware PEs with their sequencers, Q/K memory copies, a chunk
    controller with a barrier, a banked accumulation buffer, host interface and counters.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``/``cols`` (R, C), ``engine_arrays`` (P), ``sched_pattern_width`` (W, the
        chunk width), ``acc_width``, ``engine_max_tokens``, ``engine_max_head_dim``.

    The chunk controller keeps the channels of the current group not yet handed out; the
    next chunk is the lowest W of them (``x & (x - 1)`` applied W times), else the first
    channels of the next non-empty group. It hands a chunk to every array with ``go`` and
    waits until every array reports ``chunk_done`` (the barrier, ``docs/engine.md``); the
    next ``go`` follows two cycles after the slowest array's last step.
    """

    PORT_DOCS = _port_docs()

    def __init__(self, config: KaleidoConfig):
        self.geo = geo = KaleidoGeometry.from_config(config)
        self.config = config
        super().__init__({
            "wr": In(_write_signature(geo)),
            "cfg": In(_config_signature(geo)),
            "start": In(1),
            "read": In(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(len(ERROR_BITS)),
            "s": Out(stream.Signature(signed(S_WIDTH))),
            "cnt": Out(_counter_signature(geo.arrays)),
        })

    def elaborate(self, platform):
        m = Module()
        geo, cfg = self.geo, self.cfg
        t = geo.tile
        D, N, P = t.max_dim, t.max_tokens, geo.arrays
        R, C = t.rows, t.cols
        W = geo.chunk_width

        # -- configuration check -------------------------------------------------------------
        hw = Signal(2 * t.size_width)
        n = Signal(3 * t.size_width)
        m.d.comb += [hw.eq(cfg.h * cfg.w), n.eq(hw * cfg.t)]
        chan = range(D)
        in_head = Signal(D)
        m.d.comb += in_head.eq(Cat(*(cfg.head_dim > c for c in chan)))
        gmap = [cfg.group_map[2 * c:2 * c + 2] for c in chan]
        gmask = [Signal(D, name=f"gmask{g}") for g in range(3)]
        m.d.comb += [gmask[g].eq(Cat(*(in_head[c] & (gmap[c] == g) for c in chan)))
                     for g in range(3)]
        gsize = [Signal(t.dim_width, name=f"gsize{g}") for g in range(3)]
        m.d.comb += [gsize[g].eq(popcount(gmask[g])) for g in range(3)]
        dirs = [cfg.directions[2 * g:2 * g + 2] for g in range(3)]
        err = Signal(len(ERROR_BITS))
        big = t.max_group_channels
        m.d.comb += err.eq(Cat(
            (cfg.t == 0) | (cfg.h == 0) | (cfg.w == 0) | (n > N),
            (cfg.head_dim == 0) | (cfg.head_dim > D),
            Cat(*(in_head[c] & (gmap[c] == 3) for c in chan)).any(),
            (cfg.half_bits < 3) | (cfg.full_bits < 4) | (cfg.half_bits >= cfg.full_bits),
            Cat(*(d == 3 for d in dirs)).any(),
            Cat(*(gs > big for gs in gsize)).any(),
            cfg.reuse & (cfg.schedule | cfg.match),
        ))

        # Halved grid per group (the group's direction halved, rounded up) and unit count.
        def halve(v):
            return (v + 1) >> 1

        run = Signal(engine_run_layout(geo))
        ext = []
        for g in range(3):
            d = dirs[g]
            t2 = Mux(d == 0, halve(cfg.t), cfg.t)
            h2 = Mux(d == 1, halve(cfg.h), cfg.h)
            w2 = Mux(d == 2, halve(cfg.w), cfg.w)
            hw2 = Signal(2 * t.size_width, name=f"hw2_{g}")
            units = Signal(3 * t.size_width, name=f"units{g}")
            m.d.comb += [hw2.eq(h2 * w2), units.eq(hw2 * t2)]
            ext.append((w2, hw2, units))

        # -- control -------------------------------------------------------------------------
        kick = Signal()                       # cycle 1 of a run: sequencers reset, chunk 0
        tail = Signal(range(R + C + 1))
        tailing = Signal()
        m.d.sync += kick.eq(0)
        accept = Signal()
        m.submodules.acc = acc = EngineBuffer(self.config)
        m.d.comb += accept.eq(self.start & ~self.busy & ~acc.reading)
        cnt = self.cnt
        with m.If(accept):
            m.d.sync += [cnt.cycles.eq(0)]
            with m.If(err != 0):
                m.d.sync += [self.error.eq(err), self.done.eq(1)]
            with m.Else():
                m.d.sync += [
                    self.error.eq(0), self.done.eq(0), self.busy.eq(1), kick.eq(1),
                    run.t.eq(cfg.t), run.h.eq(cfg.h), run.w.eq(cfg.w), run.hw.eq(hw),
                    run.n.eq(n), run.reuse.eq(cfg.reuse),
                    run.full_mask.eq(~(Const(0xFF, 8) >> (cfg.full_bits + 1))),
                    run.half_mask.eq(~(Const(0xFF, 8) >> (cfg.half_bits + 1))),
                ]
                for g in range(3):
                    w2, hw2, units = ext[g]
                    m.d.sync += [run.dirs[g].eq(dirs[g]), run.gmask[g].eq(gmask[g]),
                                 run.gsize[g].eq(gsize[g]), run.w2[g].eq(w2),
                                 run.hw2[g].eq(hw2), run.units[g].eq(units)]

        # -- chunk controller ----------------------------------------------------------------
        chunk = Signal(chunk_layout(geo))
        go = Signal()
        waiting = Signal()                    # chunk handed out; barrier not yet passed
        fresh = Signal()                      # no group started yet in this run
        grp = Signal(2)
        rem = Signal(D)                       # channels of group grp not yet in a chunk
        plane_ctr = Signal(range(geo.planes + 1))
        planes = Signal(data.ArrayLayout(plane_info_layout(), geo.planes))
        nonempty = [run.gsize[g] != 0 for g in range(3)]
        later = [Signal(name=f"later{g}") for g in range(3)]   # group g may start next
        for g in range(3):
            m.d.comb += later[g].eq(nonempty[g] & (fresh | (grp < g) if g else fresh))
        use_rem = rem != 0
        src_g = Signal(2)
        m.d.comb += src_g.eq(Mux(use_rem, grp, Mux(later[0], 0, Mux(later[1], 1, 2))))
        src_bits = Signal(D)
        m.d.comb += src_bits.eq(Mux(use_rem, rem, run.gmask[src_g]))
        chainv = src_bits
        for s in range(W):
            nxt = Signal(D, name=f"chunk_chain{s}")
            m.d.comb += nxt.eq(chainv & (chainv - 1))
            chainv = nxt
        after = chainv                        # what is left of the group after this chunk
        more = Signal()
        m.d.comb += more.eq(Mux(src_g == 0, nonempty[1] | nonempty[2],
                                Mux(src_g == 1, nonempty[2], 0)))
        mask = Signal(D)
        m.d.comb += mask.eq(src_bits & ~after)

        all_done = Signal()
        issue_chunk = Signal()
        m.d.sync += go.eq(0)
        m.d.comb += issue_chunk.eq(kick | (waiting & ~go & all_done & ~chunk.last))
        with m.If(issue_chunk):
            m.d.sync += [
                go.eq(1), waiting.eq(1), fresh.eq(0), grp.eq(src_g), rem.eq(after),
                chunk.group.eq(src_g), chunk.mask.eq(mask), chunk.size.eq(popcount(mask)),
                chunk.plane.eq(plane_ctr), chunk.last.eq((after == 0) & ~more),
                plane_ctr.eq(plane_ctr + 1),
            ]
            for k in range(geo.planes):
                with m.If(plane_ctr == k):
                    m.d.sync += [planes[k].on.eq(1), planes[k].group.eq(src_g)]
        with m.If(accept & (err == 0)):
            m.d.sync += [fresh.eq(1), rem.eq(0), grp.eq(0), plane_ctr.eq(0), waiting.eq(0),
                         chunk.last.eq(0), planes.eq(0)]
        m.d.comb += [cnt.chunks.eq(plane_ctr)]

        # -- arrays ----------------------------------------------------------------------------
        tag_width = engine_tag_layout(geo).size
        lanes = D // WRITE_BYTES
        byte_en = Cat(*(Mux(self.wr.lane == lane, self.wr.strobe, 0) for lane in range(lanes)))
        done_bits, fin_now, fin_seen = [], [], []
        for a in range(P):
            qmem = memory.Memory(shape=8 * D, depth=N, init=[])
            kmem = memory.Memory(shape=8 * D, depth=N, init=[])
            m.submodules[f"q_mem{a}"], m.submodules[f"k_mem{a}"] = qmem, kmem
            for sel, mem in ((0, qmem), (1, kmem)):
                port = mem.write_port(granularity=8)
                m.d.comb += [port.addr.eq(self.wr.token),
                             port.data.eq(Cat(*[self.wr.data] * lanes)),
                             port.en.eq(Mux(self.wr.en & ~self.busy & (self.wr.sel == sel),
                                            byte_en, 0))]
            seq = ArraySequencer(self.config, a)
            arr = PEArray(self.config, tag_width=tag_width)
            m.submodules[f"seq{a}"], m.submodules[f"array{a}"] = seq, arr
            q_rd = qmem.read_port(domain="sync", transparent_for=())
            k_rd = kmem.read_port(domain="sync", transparent_for=())
            m.d.comb += [
                seq.start.eq(kick), seq.cfg.eq(run), seq.go.eq(go), seq.chunk.eq(chunk),
                q_rd.addr.eq(seq.q_addr), q_rd.en.eq(seq.q_en), seq.q_data.eq(q_rd.data),
                k_rd.addr.eq(seq.k_addr), k_rd.en.eq(seq.k_en), seq.k_data.eq(k_rd.data),
                arr.row.eq(seq.row), arr.col.eq(seq.col), arr.tag.eq(seq.tag),
                acc.wr[a].eq(arr.drain),
            ]
            done_bits.append(seq.chunk_done)
            seen = Signal(name=f"fin_seen{a}")
            with m.If(seq.finished):
                m.d.sync += seen.eq(1)
            with m.If(kick):
                m.d.sync += seen.eq(0)
            fin_now.append(seen | seq.finished)
            fin_seen.append(seen)

            ac = getattr(cnt, f"a{a}")
            sc = seq.counters
            m.d.comb += [ac.bubbles.eq(sc.bubbles), ac.quads.eq(sc.quads), ac.merged.eq(0)]
            for p in range(4):
                m.d.comb += [getattr(ac, f"issued{p}").eq(sc.issued[p]),
                             getattr(ac, f"skipped{p}").eq(sc.skipped[p])]
            with m.If(accept):
                m.d.sync += [ac.busy_pe_cycles.eq(0), ac.idle.eq(0)]
            with m.If(self.busy):
                m.d.sync += [ac.busy_pe_cycles.eq(ac.busy_pe_cycles + arr.busy_count),
                             ac.idle.eq(ac.idle + ~seq.stepping)]
        m.d.comb += all_done.eq(Cat(*done_bits).all())

        # -- end of the run: every array's final step, then the drain wave -----------------------
        all_fin = Cat(*fin_now).all() & ~Cat(*fin_seen).all()
        with m.If(self.busy & ~tailing & all_fin):
            m.d.sync += [tailing.eq(1), tail.eq(R + C)]
        with m.Elif(tailing):
            m.d.sync += tail.eq(tail - 1)
            with m.If(tail == 1):
                m.d.sync += [tailing.eq(0), self.busy.eq(0), self.done.eq(1)]
        with m.If(self.busy):
            m.d.sync += cnt.cycles.eq(cnt.cycles + 1)

        m.d.comb += [
            acc.cfg.eq(run), acc.planes.eq(planes),
            acc.read.eq(self.read & self.done & ~self.busy & (self.error == 0)),
        ]
        wiring.connect(m, wiring.flipped(self.s), acc.s)
        return m


# -- host-side helpers (plain Python) ---------------------------------------------------------

def check_engine_run(config: KaleidoConfig, grid, groups, full_bits: int = 5,
                     half_bits: int = 3, variant: str = "pe"):
    """Raise ``ValueError`` naming the parameter if the KaleidoEngine built from ``config``
    cannot run this job (the RTL's ``error`` bits, checked before any simulation)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if variant not in BUILT_VARIANTS:
        raise ValueError(f"variant {variant!r} needs the scheduler or matcher, which this "
                         f"KaleidoEngine does not have yet; built variants: "
                         f"{', '.join(BUILT_VARIANTS)}")
    return check_run(config, grid, groups, full_bits, half_bits)


def engine_ports(config: KaleidoConfig, grid, groups, full_bits: int = 5, half_bits: int = 3,
                 variant: str = "pe") -> dict:
    """Values of the ``cfg__*`` ports for one run (after :func:`check_engine_run`)."""
    grid, groups = check_engine_run(config, grid, groups, full_bits, half_bits, variant)
    reuse, schedule, match = VARIANTS[variant]
    gmap = sum(int(g) << (2 * c) for c, g in enumerate(groups.group_of))
    dirs = sum(int(d) << (2 * g) for g, d in enumerate(groups.directions))
    return {"cfg__t": grid.t, "cfg__h": grid.h, "cfg__w": grid.w,
            "cfg__head_dim": groups.head_dim, "cfg__group_map": gmap,
            "cfg__directions": dirs, "cfg__full_bits": full_bits,
            "cfg__half_bits": half_bits, "cfg__reuse": reuse, "cfg__schedule": schedule,
            "cfg__match": match}
