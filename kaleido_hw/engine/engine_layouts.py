"""Geometry and data layouts of the multi-array engine (``docs/engine.md``, section "RTL"):
shared by :class:`~kaleido_hw.engine.array_sequencer.ArraySequencer`,
:class:`~kaleido_hw.engine.engine_buffer.EngineBuffer` and
:class:`~kaleido_hw.engine.kaleido_engine.KaleidoEngine`.

The single-array blocks' layouts (step rows and columns, the drain port) are reused from
:mod:`kaleido_hw.engine.tile_layouts`; what changes is that a run is cut into *chunks* (W channels
of one group), each with its own accumulation plane, and that the accumulation buffer has
``P*C`` banks per plane.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import unsigned
from amaranth.lib import data

from kaleido_hw.bitops import bits_for
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.tile_layouts import EngineGeometry


__all__ = ["AXIS_T", "AXIS_Y", "AXIS_X", "KaleidoGeometry", "walk_layout",
           "walk_constants_layout", "max_chunks", "engine_run_layout", "chunk_layout",
           "engine_tag_layout", "plane_info_layout"]


#: Axis codes of a group's pairing direction (``cfg__directions``).
AXIS_T, AXIS_Y, AXIS_X = 0, 1, 2


def max_chunks(head_dim: int, width: int) -> int:
    """Largest number of chunks a head of at most ``head_dim`` channels can have: the sum
    over the three groups of ``ceil(size / width)``, maximized over the group sizes (a
    larger group never has fewer chunks, so the three sizes sum to ``head_dim``)."""
    best = 0
    for s0 in range(head_dim + 1):
        for s1 in range(head_dim + 1 - s0):
            s2 = head_dim - s0 - s1
            best = max(best, sum(-(-s // width) for s in (s0, s1, s2)))
    return best


@dataclass(frozen=True)
class KaleidoGeometry:
    """Sizes of the multi-array engine derived from a :class:`KaleidoConfig`.

    ``tile`` holds the per-array sizes (R, C, N_max, D_max, acc_width); ``arrays`` is P and
    ``chunk_width`` W (``sched_pattern_width``). A plane has ``banks = P*C`` banks; the
    score of (Q token i, column position pos, follower bit f) is in bank ``pos mod banks``,
    word ``(i // 2)*KB + 2*(pos // banks) + f``, lane ``i mod 2`` (``docs/engine.md``,
    "Accumulation buffer: banking"). ``chunks``: the most chunks a run can have
    (:func:`max_chunks`). ``k_ordered``: the build's scheduler orders the K side too
    (``sched_sides = "qk"``), so every chunk has a plane of its own; otherwise a K token's
    bank and word depend only on its group, and a plane per group accumulates that group's
    chunks (at most 3 planes). A plain build (``engine_pe = "plain"``) walks all channels as
    one group along the x axis, so a K token has one bank and word for the whole run and every
    chunk accumulates into a single plane. ``window3``: the build runs linear blocks with
    windows of 3 too (``engine_window3``): a window-3 quad's columns are single weight rows,
    so its local column block ``cbp`` takes one word per block (``2*(cbp >> 1) + (cbp & 1)``,
    the follower bit's place holding the block's low bit).
    """
    tile: EngineGeometry
    arrays: int
    chunk_width: int
    planes: int
    chunks: int
    k_ordered: bool = False
    window3: bool = False

    @classmethod
    def from_config(cls, config: KaleidoConfig) -> "KaleidoGeometry":
        """The engine geometry of ``config`` (rows and cols must be powers of two)."""
        tile = EngineGeometry.from_config(config)
        w = config.sched_pattern_width
        k_ordered = (config.engine_dispatcher in ("scheduler", "full")
                     and config.sched_sides == "qk")
        chunks = max_chunks(config.engine_max_head_dim, w)
        if config.engine_pe == "plain":
            planes = 1
        else:
            planes = chunks if k_ordered else min(3, chunks)
        return cls(tile, config.engine_arrays, w, planes, chunks, k_ordered,
                   config.engine_window3)

    @property
    def banks(self) -> int:
        """Banks per plane: ``P*C``."""
        return self.arrays * self.tile.cols

    @property
    def plane_width(self) -> int:
        """Bits of a plane index."""
        return bits_for(self.planes - 1)

    @property
    def local_blocks(self) -> int:
        """Column blocks one array takes per chunk at most (``ceil(N_max / (P*C))``)."""
        return -(-self.tile.max_tokens // self.banks)

    @property
    def kb_width(self) -> int:
        """``log2(KB)``: words per Q token in a bank, two per local column block."""
        return max(1, (2 * self.local_blocks - 1).bit_length())

    @property
    def cbp_width(self) -> int:
        """Bits of an array's local column-block index ``cb // P`` in a tag."""
        return max(1, self.kb_width - 1)

    @property
    def local_block_width(self) -> int:
        """Bits of the sequencers' local column-block counter: the tag's ``cbp``, and with
        ``window3`` the tag's follower bit too (a weight-row block takes one word)."""
        return self.kb_width if self.window3 else self.cbp_width

    @property
    def row_pairs(self) -> int:
        """Q row pairs ``(2r, 2r+1)`` a bank holds: ``ceil(N_max / 2)``; a bank word keeps
        both rows of a pair (two ``acc_width`` lanes), so the read-out gets two S values per
        read."""
        return -(-self.tile.max_tokens // 2)

    @property
    def bank_depth(self) -> int:
        """Words per bank: ``ceil(N_max / 2) * KB`` (each word two lanes of ``acc_width``)."""
        return self.row_pairs << self.kb_width

    @property
    def bank_depth_width(self) -> int:
        """Bits of a bank word address."""
        return bits_for(self.bank_depth - 1)

    @property
    def unit_width(self) -> int:
        """A unit index or position, with room for one step of ``P*C`` past ``N_max``."""
        return bits_for(self.tile.max_tokens + self.banks)


def walk_layout(geo: KaleidoGeometry) -> data.StructLayout:
    """A unit position (:mod:`kaleido_hw.engine.unit_walk`): halved-grid coordinates and the
    anchor token (or a constant number of units in the same form)."""
    t = geo.tile
    sw = t.size_width
    return data.StructLayout({"t": unsigned(sw), "y": unsigned(sw), "x": unsigned(sw),
                              "tok": unsigned(t.tok_width)})


def walk_constants_layout(geo: KaleidoGeometry) -> data.StructLayout:
    """Per group, what :func:`~kaleido_hw.engine.unit_walk.walk_add` needs besides the two
    positions: the halved extents ``w2``, ``h2``, the anchor step of one x unit ``tx`` and the
    carry terms ``ex = Ty - w2*Tx``, ``ey = Tt - h2*Ty`` (modulo ``2^tok_width``)."""
    t = geo.tile
    sw, tw = t.size_width, t.tok_width
    return data.StructLayout({"w2": unsigned(sw), "h2": unsigned(sw), "tx": unsigned(2),
                              "ex": unsigned(tw), "ey": unsigned(tw)})


def engine_run_layout(geo: KaleidoGeometry) -> data.StructLayout:
    """The configuration of one run, latched at ``start``, with what the unit arithmetic
    needs per group: the group's unit count ``units`` (in the grid with the group's direction
    halved) and the constants of the unit walk (``walk``: the halved extents among them)."""
    t = geo.tile
    sw = t.size_width
    return data.StructLayout({
        "t": unsigned(sw), "h": unsigned(sw), "w": unsigned(sw),
        "hw": unsigned(sw), "n": unsigned(sw),
        "dirs": data.ArrayLayout(unsigned(2), 3),
        "gmask": data.ArrayLayout(unsigned(t.max_dim), 3),
        "gsize": data.ArrayLayout(unsigned(t.dim_width), 3),
        "units": data.ArrayLayout(unsigned(sw), 3),
        "walk": data.ArrayLayout(walk_constants_layout(geo), 3),
        "full_mask": unsigned(8),
        "half_mask": unsigned(8),
        "reuse": unsigned(1),
        "linear": unsigned(1),
        "schedule": unsigned(1),
        "match": unsigned(1),
        # a linear block with windows of 3 (engine_window3 builds only): per group the units
        # are the grid with the direction's extent in thirds, and the K units the block's
        # weight rows themselves; full_limit3 the window rule's FULL bound (WindowCodeUnit)
        **({"window3": unsigned(1), "full_limit3": unsigned(10)} if geo.window3 else {}),
    })


def chunk_layout(geo: KaleidoGeometry) -> data.StructLayout:
    """One chunk as the controller hands it to the arrays: its group, its channels
    (``chan[j]``: the j-th lowest channel of the chunk, 0 past ``size``, found once by the
    controller rather than by every array), their number, the parity of its index in the
    run (the bank of the double-buffered orders), its accumulation plane, ``add`` (an
    earlier chunk of the run wrote that plane: accumulate onto it), and whether it is the
    run's last chunk."""
    t = geo.tile
    return data.StructLayout({
        "group": unsigned(2),
        "chan": data.ArrayLayout(unsigned(bits_for(t.max_dim - 1)), geo.chunk_width),
        "size": unsigned(t.dim_width),
        "parity": unsigned(1),
        "plane": unsigned(geo.plane_width),
        "add": unsigned(1),
        "last": unsigned(1),
    })


def engine_tag_layout(geo: KaleidoGeometry) -> data.StructLayout:
    """Where a drained tile goes: ``plane``, ``add`` (accumulate onto the plane's word
    rather than overwrite it), ``cbp`` (the array's local column block ``cb // P``), ``kf``
    (columns are K followers), ``rtok[i]`` (Q token of row i), ``rwe``/``cwe`` (real rows /
    columns)."""
    t = geo.tile
    return data.StructLayout({
        "plane": unsigned(geo.plane_width),
        "add": unsigned(1),
        "cbp": unsigned(geo.cbp_width),
        "kf": unsigned(1),
        "rtok": data.ArrayLayout(unsigned(t.tok_width), t.rows),
        "rwe": unsigned(t.rows),
        "cwe": unsigned(t.cols),
    })


def plane_info_layout() -> data.StructLayout:
    """Per plane: written in this run (``on``) and the group of its chunk."""
    return data.StructLayout({"on": unsigned(1), "group": unsigned(2)})
