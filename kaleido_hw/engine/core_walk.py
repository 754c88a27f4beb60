"""Box walkers of the engine core's loads: the tokens of one box in box order (t, then y, then
x fastest), with the flag "inside the tensor's grid" and, for the request side, the byte
address of the token in memory.

A box is ``bt x bh x bw`` tokens whose origin ``(t0, y0, x0)`` lies in a grid of
``T x H x W`` tokens; edge boxes stick out of the grid, and their outside tokens are padding
(written as zeros, never read from memory). Whether a token is inside is decided from its
box-local coordinates against the limits ``min(bt, T - t0)`` etc., computed once per load,
so that no per-token comparison needs the global coordinates. Addresses advance by adding
strides (no multiplier per token): ``x`` adds the token stride, a new row restarts from the
row's first token plus the y stride, a new plane from the plane's first token plus the t
stride. A ``rows`` walk (the weight rows of a linear block) reads the bank's tokens as
consecutive rows: every token is inside and every step adds the token stride.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal

__all__ = ["BoxWalker"]


class BoxWalker:
    """Box-local coordinates ``lt, ly, lx``, token index ``tok`` and (with ``addr_width``) the
    token's byte address; a helper that adds its registers and logic to the caller's
    module (it is not a component: the caller decides when it starts and advances).

    Parameters
    ----------
    m : Module
        The module the registers are added to.
    name : str
        Prefix of the signal names.
    size_width : int
        Bits of one box extent.
    tok_width : int
        Bits of a box-local token index.
    addr_width : int
        Bits of a byte address; 0 builds no address registers.
    """

    def __init__(self, m: Module, name: str, size_width: int, tok_width: int,
                 addr_width: int = 0):
        self.m = m
        self.lt = Signal(size_width, name=f"{name}_lt")
        self.ly = Signal(size_width, name=f"{name}_ly")
        self.lx = Signal(size_width, name=f"{name}_lx")
        self.tok = Signal(tok_width, name=f"{name}_tok")
        self.done = Signal(name=f"{name}_done", init=1)
        self.inside = Signal(name=f"{name}_inside")
        self.addr_width = addr_width
        if addr_width:
            self.addr = Signal(addr_width, name=f"{name}_addr")
            self.row = Signal(addr_width, name=f"{name}_row")
            self.plane = Signal(addr_width, name=f"{name}_plane")

    def connect(self, box, lim):
        """Drive ``inside`` from the limits ``lim = (lim_t, lim_y, lim_x)``; keep ``box``
        (the extents) for :meth:`advance`."""
        self.box = box
        lt, ly, lx = lim
        self.m.d.comb += self.inside.eq((self.lt < lt) & (self.ly < ly) & (self.lx < lx))

    def start(self, origin_addr=None):
        """Statements that restart the walk at token 0 (``origin_addr``: its address)."""
        out = [self.lt.eq(0), self.ly.eq(0), self.lx.eq(0), self.tok.eq(0), self.done.eq(0)]
        if self.addr_width:
            out += [self.addr.eq(origin_addr), self.row.eq(origin_addr),
                    self.plane.eq(origin_addr)]
        return out

    def advance(self, strides=None, rows=None):
        """Add, under the caller's ``If``, the step to the next token (``strides``: the
        token, y and t strides in bytes; ``rows``: a signal, 1 for a walk of consecutive rows,
        each one token stride after the one before); ``done`` after the last."""
        m = self.m
        bt, bh, bw = self.box
        m.d.sync += self.tok.eq(self.tok + 1)
        if self.addr_width:
            step = Signal(self.addr_width, name=f"{self.addr.name}_step")
            m.d.comb += step.eq(self.addr + strides[0])
        with m.If(self.lx + 1 < bw):
            m.d.sync += self.lx.eq(self.lx + 1)
            if self.addr_width:
                m.d.sync += self.addr.eq(step)
        with m.Elif(self.ly + 1 < bh):
            m.d.sync += [self.lx.eq(0), self.ly.eq(self.ly + 1)]
            if self.addr_width:
                nxt = Mux(rows, step, self.row + strides[1])
                m.d.sync += [self.row.eq(nxt), self.addr.eq(nxt)]
        with m.Elif(self.lt + 1 < bt):
            m.d.sync += [self.lx.eq(0), self.ly.eq(0), self.lt.eq(self.lt + 1)]
            if self.addr_width:
                nxt = Mux(rows, step, self.plane + strides[2])
                m.d.sync += [self.plane.eq(nxt), self.row.eq(nxt), self.addr.eq(nxt)]
        with m.Else():
            m.d.sync += self.done.eq(1)
