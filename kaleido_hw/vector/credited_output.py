"""An output FIFO whose free space is credited against the reads in flight.

The vector unit's passes read a word from a buffer and need several pipeline stages before
the result can go out; a stalled pipeline would need every stage to hold. Instead each pass
issues a read only while the output FIFO has room for it and for every read already in
flight (``room``), so the pipeline never stalls and back-pressure on the output stream loses
nothing. Used by :class:`~kaleido_hw.vector.softmax_unit.SoftmaxUnit`,
:class:`~kaleido_hw.vector.block_softmax.BlockSoftmaxUnit` and
:class:`~kaleido_hw.vector.block_output.BlockOutputUnit`.
"""

from __future__ import annotations

from amaranth.hdl import Shape, Signal
from amaranth.lib import fifo


__all__ = ["CreditedOutput"]


class CreditedOutput:
    """A ``depth``-entry FIFO (submodule ``name`` of ``m``) driving the stream ``port``.

    ``room``: a new read may be issued this cycle. :meth:`track` names, each cycle, whether a
    read was issued that will give an entry (``issued``), and the entry that arrives at the
    FIFO (``arrived`` with ``data``). ``depth`` must exceed the reads the pipeline holds at
    once, plus the FIFO's own output stages, for one entry per cycle.
    """

    def __init__(self, m, name: str, port, depth: int):
        self.m, self.port, self.depth = m, port, depth
        self.fifo = fifo.SyncFIFOBuffered(width=Shape.cast(port.payload.shape()).width,
                                          depth=depth)
        m.submodules[name] = self.fifo
        self.in_flight = Signal(range(depth + 1), name="in_flight")
        self.room = Signal(name="room")
        m.d.comb += self.room.eq(self.fifo.level + self.in_flight < depth)

    def track(self, issued, arrived, data) -> None:
        """Count ``issued`` reads in and ``arrived`` entries out; write ``data`` when one
        arrives; the FIFO's head drives the stream."""
        m, f, port = self.m, self.fifo, self.port
        m.d.comb += [f.w_data.eq(data), f.w_en.eq(arrived)]
        m.d.sync += self.in_flight.eq(self.in_flight + issued - arrived)
        m.d.comb += [port.payload.eq(f.r_data), port.valid.eq(f.r_rdy), f.r_en.eq(port.ready)]
