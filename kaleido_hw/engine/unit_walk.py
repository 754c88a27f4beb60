"""Unit coordinates by counting, not dividing (``docs/engine.md``, section "RTL").

A group's units are the points of the grid whose extent along the group's direction is halved
(rounded up): ``(t2, y2, x2)`` in ``t2 x h2 x w2``, numbered row-major, ``u = t2*hw2 + y2*w2 +
x2``. A unit's anchor token doubles its coordinate on the direction, so the anchor is linear
in the coordinates::

    anchor(t2, y2, x2) = t2*Tt + y2*Ty + x2*Tx,
    Tx = 1 or 2, Ty = w or 2w, Tt = h*w or 2*h*w   (2 on the direction)

Finding the coordinates of an index takes three divisions and the anchor two multiplications;
on the standard cells that was 8 ns of adder chains in front of the operand memory's address
(the critical path of every engine build). The loaders and the scheduler's pre-pass never need
an arbitrary index, though: they walk units one by one, jump by a constant number of units
(``P*C``: the next column block of an array), or start at a constant one (``a*C``). So the
hardware keeps a :func:`walk_layout` position (coordinates and anchor) and moves it with
:func:`walk_add`, a mixed-radix addition of a constant given as coordinates too
(``k = kt*hw2 + ky*w2 + kx``, ``kx < w2``, ``ky < h2``). With the carries ``cx`` (x wrapped)
and ``cy`` (y wrapped)::

    anchor' = anchor + k.tok + cx*(Ty - w2*Tx) + cy*(Tt - h2*Ty)      (mod 2^tok_width)

where ``k.tok = kt*Tt + ky*Ty + kx*Tx`` and both carry terms are per-group constants of the
run (:func:`walk_constants`, latched with the run's configuration). A constant's coordinates
are found once per run (:func:`const_position`): a division of a small constant, registered,
then its anchor, registered.
"""

from __future__ import annotations

from amaranth.hdl import Const, Mux, Signal, unsigned
from amaranth.lib import data

from kaleido_hw.engine.engine_layouts import (AXIS_T, AXIS_X, AXIS_Y, KaleidoGeometry,
                                              walk_constants_layout, walk_layout)

__all__ = ["walk_constants", "walk_add", "walk_inc", "walk_has_follower", "walk_members3",
           "direction_stride", "unit_tokens",
           "order_key_layout", "const_coords", "const_position"]

def _strides(d, w, hw, window3=None):
    """``(Tx, Ty, Tt)`` of direction ``d`` (values) for frames of ``hw`` tokens, ``w`` wide;
    with ``window3`` (a value, or None in a build without windows of 3) set, units of three
    tokens along the direction instead of two."""
    if window3 is None:
        return Mux(d == AXIS_X, 2, 1), Mux(d == AXIS_Y, w << 1, w), Mux(d == AXIS_T, hw << 1, hw)
    tx = Mux(d == AXIS_X, Mux(window3, 3, 2), 1)
    ty = Mux(d == AXIS_Y, (w << 1) + Mux(window3, w, 0), w)
    tt = Mux(d == AXIS_T, (hw << 1) + Mux(window3, hw, 0), hw)
    return tx, ty, tt


def walk_constants(geo: KaleidoGeometry, target, d, w, hw, w2, h2, window3=None):
    """Statements that set ``target`` (a :func:`walk_constants_layout` value, usually a
    register) to the constants of direction ``d`` on frames of ``hw`` tokens, ``w`` wide,
    whose halved extents are ``w2`` and ``h2`` (``window3``: units of three tokens, the
    extents in thirds)."""
    tw = geo.tile.tok_width
    tx, ty, tt = _strides(d, w, hw, window3)
    return [target.w2.eq(w2), target.h2.eq(h2), target.tx.eq(tx),
            target.ex.eq((ty - w2 * tx)[:tw]), target.ey.eq((tt - h2 * ty)[:tw])]


def walk_add(m, geo: KaleidoGeometry, pos, k, consts, name: str):
    """``pos + k`` (both :func:`walk_layout` values; ``k.x < w2`` and ``k.y < h2``, or ``k.x
    <= w2`` with ``k.y = 0``) as a new :func:`walk_layout` signal: one carry per axis."""
    t = geo.tile
    sw, tw = t.size_width, t.tok_width
    out = Signal(walk_layout(geo), name=name)
    x1 = Signal(sw + 1, name=f"{name}_x1")
    y1 = Signal(sw + 1, name=f"{name}_y1")
    cx = Signal(name=f"{name}_cx")
    cy = Signal(name=f"{name}_cy")
    m.d.comb += [
        x1.eq(pos.x + k.x), cx.eq(x1 >= consts.w2),
        y1.eq(pos.y + k.y + cx), cy.eq(y1 >= consts.h2),
        out.x.eq(Mux(cx, x1 - consts.w2, x1)),
        out.y.eq(Mux(cy, y1 - consts.h2, y1)),
        out.t.eq(pos.t + k.t + cy),
        out.tok.eq((pos.tok + k.tok + Mux(cx, consts.ex, 0) + Mux(cy, consts.ey, 0))[:tw]),
    ]
    return out


def walk_inc(m, geo: KaleidoGeometry, pos, consts, name: str):
    """The next unit after ``pos``."""
    one = Signal(walk_layout(geo), name=f"{name}_one")
    m.d.comb += [one.x.eq(1), one.tok.eq(consts.tx)]
    return walk_add(m, geo, pos, one, consts, name)


def walk_has_follower(run, d, pos):
    """The unit at ``pos`` (direction ``d`` of ``run``'s grid) has a follower: its anchor's
    coordinate on the direction, ``2*c``, is not the last."""
    return Mux(d == AXIS_X, (pos.x << 1) + 1 < run.w,
               Mux(d == AXIS_Y, (pos.y << 1) + 1 < run.h, (pos.t << 1) + 1 < run.t))


def walk_members3(run, d, pos):
    """``(has follower 1, has follower 2)`` of the window-3 unit at ``pos`` (direction ``d``
    of ``run``'s grid, units of three tokens): its anchor's coordinate ``3*c`` plus 1, plus 2
    lie inside the grid."""
    c = Mux(d == AXIS_X, pos.x, Mux(d == AXIS_Y, pos.y, pos.t))
    extent = Mux(d == AXIS_X, run.w, Mux(d == AXIS_Y, run.h, run.t))
    base = (c << 1) + c
    return base + 1 < extent, base + 2 < extent


def direction_stride(run, d):
    """Tokens between neighbours along direction ``d`` of ``run``'s grid (1, ``w`` or
    ``h*w``): a unit's follower is its anchor plus this."""
    return Mux(d == AXIS_X, 1, Mux(d == AXIS_Y, run.w, run.hw))


def unit_tokens(m, geo: KaleidoGeometry, run, d, tok, hasf, valid, name: str):
    """``(anchor, follower, has_follower)`` of a unit of direction ``d`` whose anchor token
    is ``tok`` and that has a follower if ``hasf``; all 0 unless ``valid`` (a harmless
    in-range read for a padding unit)."""
    tw = geo.tile.tok_width
    anchor = Signal(tw, name=f"{name}_anchor")
    follower = Signal(tw, name=f"{name}_follower")
    has = Signal(name=f"{name}_hasf")
    stride = direction_stride(run, d)
    m.d.comb += [
        anchor.eq(Mux(valid, tok, 0)),
        has.eq(valid & hasf),
        follower.eq(Mux(has, (tok + stride)[:tw], 0)),
    ]
    return anchor, follower, has


def order_key_layout(geo: KaleidoGeometry) -> data.StructLayout:
    """What a scheduled order holds per position for the loaders: the unit's anchor token and
    whether it has a follower (so that no index is converted on the read path)."""
    return data.StructLayout({"tok": unsigned(geo.tile.tok_width), "hasf": unsigned(1)})


def const_coords(k: int, w2, h2, target):
    """Statements that set ``target``'s coordinates to those of the constant ``k`` units
    (``k // w2 // h2``, ``k // w2 mod h2``, ``k mod w2``; a division of a constant, small)."""
    kk = Const(k, max(1, k.bit_length()))
    q1 = kk // w2
    return [target.x.eq(kk % w2), target.y.eq(q1 % h2), target.t.eq(q1 // h2)]


def const_position(geo: KaleidoGeometry, target, d, run):
    """Statement that sets ``target.tok`` from its coordinates (``t*Tt + y*Ty + x*Tx``) in
    direction ``d`` of ``run``'s grid (register it one cycle after the coordinates); the
    coordinates are those of a small constant, so the products are narrow."""
    tw = geo.tile.tok_width
    tx, ty, tt = _strides(d, run.w, run.hw)
    return [target.tok.eq((target.t * tt + target.y * ty + target.x * tx)[:tw])]
