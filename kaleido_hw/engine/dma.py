"""AXI4 master DMA of the engine core (``docs/engine.md``, "Memory port (AXI4 DMA)").

A read request (byte address, beat count) becomes INCR bursts of full-width beats that never
exceed ``axi_max_burst`` beats and never cross a 4 KiB boundary (the AXI rule); at most
``axi_max_outstanding`` read bursts are in flight, and their beats come back in order on the
read data stream, the request's last beat flagged. ``R`` is passed through without a buffer:
``rready`` is the consumer's ``ready``, so back-pressure reaches the memory and nothing is
dropped or duplicated. A write request is split the same way; the write data stream feeds
``W`` burst by burst (``wlast`` at each burst's end, all strobes set), the next burst's
``AW`` issued while the current burst's beats flow, so a write moves a beat per cycle across
bursts; up to ``axi_max_outstanding`` bursts may be addressed and not yet answered.

Errors are sticky on ``error`` until ``error_clear``: 1 a request whose address is not a
multiple of the beat size (the request is dropped, nothing is issued), 2 SLVERR, 3 DECERR
(on any read beat or write response). From an error on, the DMA issues no new burst and
drops the rest of its requests, but completes what the bus already holds: read beats are
taken and dropped, the write bursts already addressed are finished with empty strobes, and
the write responses are awaited; ``rd_idle``/``wr_idle`` rise once nothing is in flight, so the
bus is never left hanging and neither is the DMA. A synchronous reset returns it to idle at
once (the bus must be reset with it, as AXI requires).
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, ResetSignal, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from kaleido_hw.config import KaleidoConfig

__all__ = ["AxiDma", "axi_signature", "bursts", "BEATS_WIDTH", "DMA_ERRORS", "AXI_PORT_DOCS",
           "request_layout"]

#: Beats of one request are counted in 16 bits.
BEATS_WIDTH = 16
#: ``error`` codes.
DMA_ERRORS = {0: "none", 1: "misaligned", 2: "SLVERR", 3: "DECERR"}
#: AXI burst type INCR, cacheable-bufferable normal access, unprivileged secure data.
_INCR, _CACHE, _PROT = 0b01, 0b0011, 0b000


def axi_signature(addr_width: int, data_width: int) -> wiring.Signature:
    """An AXI4 master's ports (manager's view: ``Out`` drives, ``In`` receives); one ID."""
    nbytes = data_width // 8
    return wiring.Signature({
        "arid": Out(1), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
        "arburst": Out(2), "arcache": Out(4), "arprot": Out(3), "arvalid": Out(1),
        "arready": In(1),
        "rid": In(1), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
        "rvalid": In(1), "rready": Out(1),
        "awid": Out(1), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
        "awburst": Out(2), "awcache": Out(4), "awprot": Out(3), "awvalid": Out(1),
        "awready": In(1),
        "wdata": Out(data_width), "wstrb": Out(nbytes), "wlast": Out(1), "wvalid": Out(1),
        "wready": In(1),
        "bid": In(1), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
    })


#: One line per AXI port (``axi__<name>``).
AXI_PORT_DOCS = {
    "arid": "AXI read address ID (always 0: bursts return in order)",
    "araddr": "AXI read burst address (a multiple of the beat size)",
    "arlen": "AXI read burst length minus one (at most axi_max_burst - 1; no 4 KiB crossing)",
    "arsize": "AXI read beat size, log2 of bytes (full-width beats)",
    "arburst": "AXI read burst type: INCR (1)",
    "arcache": "AXI read cache attributes: 0b0011 (normal, non-cacheable, bufferable)",
    "arprot": "AXI read protection: 0 (unprivileged, secure, data)",
    "arvalid": "AXI read address valid",
    "arready": "AXI read address ready",
    "rid": "AXI read data ID (ignored: one ID)",
    "rdata": "AXI read data beat",
    "rresp": "AXI read response: OKAY/EXOKAY, or SLVERR (2) / DECERR (3): error 2 / 3",
    "rlast": "AXI read data: last beat of the burst",
    "rvalid": "AXI read data valid",
    "rready": "AXI read data ready (the consumer's ready: no buffer)",
    "awid": "AXI write address ID (always 0)",
    "awaddr": "AXI write burst address (a multiple of the beat size)",
    "awlen": "AXI write burst length minus one (at most axi_max_burst - 1; no 4 KiB crossing)",
    "awsize": "AXI write beat size, log2 of bytes",
    "awburst": "AXI write burst type: INCR (1)",
    "awcache": "AXI write cache attributes: 0b0011",
    "awprot": "AXI write protection: 0",
    "awvalid": "AXI write address valid",
    "awready": "AXI write address ready",
    "wdata": "AXI write data beat",
    "wstrb": "AXI write strobes: all set (all clear for the rest of a burst after an error)",
    "wlast": "AXI write data: last beat of the burst",
    "wvalid": "AXI write data valid",
    "wready": "AXI write data ready",
    "bid": "AXI write response ID (ignored)",
    "bresp": "AXI write response: SLVERR (2) / DECERR (3) set error 2 / 3",
    "bvalid": "AXI write response valid",
    "bready": "AXI write response ready (always 1)",
}


def bursts(addr: int, beats: int, config: KaleidoConfig) -> list[tuple[int, int]]:
    """The ``(address, beats)`` bursts the DMA issues for one request (reference rule):
    greedy from ``addr``, each at most ``axi_max_burst`` beats and inside one 4 KiB page."""
    nbytes = config.axi_data_width // 8
    if addr % nbytes:
        raise ValueError(f"addr must be a multiple of {nbytes} bytes, got {addr}")
    out = []
    while beats:
        page = (4096 - addr % 4096) // nbytes
        n = min(beats, config.axi_max_burst, page)
        out.append((addr, n))
        addr += n * nbytes
        beats -= n
    return out


def request_layout(addr_width: int) -> data.StructLayout:
    """Payload of a read or write request: byte address and beat count."""
    return data.StructLayout({"addr": unsigned(addr_width), "beats": unsigned(BEATS_WIDTH)})


class _Splitter:
    """Splits the current request into bursts (registers and logic in the caller's module):
    ``addr``/``left`` of the rest of the request, ``len`` beats of its next burst."""

    def __init__(self, m: Module, name: str, config: KaleidoConfig):
        aw = config.axi_addr_width
        self.shift = (config.axi_data_width // 8).bit_length() - 1
        self.addr = Signal(aw, name=f"{name}_addr")
        self.left = Signal(BEATS_WIDTH, name=f"{name}_left")
        self.len = Signal(range(max(config.axi_max_burst, 1) + 1), name=f"{name}_len")
        page = Signal(range((4096 >> self.shift) + 1), name=f"{name}_page")
        m.d.comb += page.eq((4096 - self.addr[:12]) >> self.shift)
        cap = Mux(self.left < config.axi_max_burst, self.left, config.axi_max_burst)
        m.d.comb += self.len.eq(Mux(page < cap, page, cap))
        self.m = m

    def load(self, req):
        return [self.addr.eq(req.addr), self.left.eq(req.beats)]

    def issued(self):
        """Statements after the next burst is issued."""
        return [self.addr.eq(self.addr + (self.len << self.shift)),
                self.left.eq(self.left - self.len)]


class AxiDma(wiring.Component):
    """AXI4 master with a read and a write request/data stream pair.

    Parameters
    ----------
    config : KaleidoConfig
        ``axi_addr_width``, ``axi_data_width``, ``axi_max_burst``, ``axi_max_outstanding``.

    Ports: ``axi`` (:func:`axi_signature`), ``rd_req`` / ``wr_req`` (address, ``beats``),
    ``rd_data`` (``data``, ``last``: the request's last beat), ``wr_data``, ``rd_idle``,
    ``wr_idle``, ``error`` (:data:`DMA_ERRORS`), ``error_clear``.
    """

    PORT_DOCS = {
        **{f"axi__{k}": v for k, v in AXI_PORT_DOCS.items()},
        "rd_req__valid": "read request valid", "rd_req__ready": "read request taken",
        "rd_req__payload": "read request: byte address (low bits), beat count (high 16 bits)",
        "rd_data__valid": "read data valid", "rd_data__ready": "read data taken (rready)",
        "rd_data__payload": "read data: beat (low bits), last beat of the request (top bit)",
        "wr_req__valid": "write request valid", "wr_req__ready": "write request taken",
        "wr_req__payload": "write request: byte address (low bits), beat count (high 16 bits)",
        "wr_data__valid": "write data valid", "wr_data__ready": "write data taken (wready)",
        "wr_data__payload": "write data beat",
        "rd_idle": "no read request or burst in flight",
        "wr_idle": "no write request, burst or response in flight",
        "error": "sticky: 0 none, 1 misaligned request, 2 SLVERR, 3 DECERR",
        "error_clear": "clear error",
    }

    def __init__(self, config: KaleidoConfig):
        self.config = config
        aw, dw = config.axi_addr_width, config.axi_data_width
        super().__init__({
            "axi": Out(axi_signature(aw, dw)),
            "rd_req": In(stream.Signature(request_layout(aw))),
            "rd_data": Out(stream.Signature(data.StructLayout({"data": dw, "last": 1}))),
            "wr_req": In(stream.Signature(request_layout(aw))),
            "wr_data": In(stream.Signature(dw)),
            "rd_idle": Out(1),
            "wr_idle": Out(1),
            "error": Out(2),
            "error_clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        axi = self.axi
        nbytes = cfg.axi_data_width // 8
        size = nbytes.bit_length() - 1
        K = cfg.axi_max_outstanding
        failed = self.error != 0
        set_error = Signal(2)                     # an error seen this cycle (0: none)
        with m.If(self.error_clear):
            m.d.sync += self.error.eq(0)
        with m.Elif(~failed & (set_error != 0)):
            m.d.sync += self.error.eq(set_error)

        def misaligned(addr):
            return addr[:size] != 0 if size else Const(0)

        m.d.comb += [axi.arid.eq(0), axi.arsize.eq(size), axi.arburst.eq(_INCR),
                     axi.arcache.eq(_CACHE), axi.arprot.eq(_PROT),
                     axi.awid.eq(0), axi.awsize.eq(size), axi.awburst.eq(_INCR),
                     axi.awcache.eq(_CACHE), axi.awprot.eq(_PROT)]

        # -- read: requests -> AR bursts; R -> rd_data ------------------------------------------
        rs = _Splitter(m, "rd", cfg)
        r_busy = Signal()                         # a request is being split
        r_out = Signal(range(K + 1))              # bursts in flight
        # Per burst in flight: is it its request's last? (in issue order; R returns in order)
        m.submodules.r_final = r_final = SyncFIFO(width=1, depth=K)
        ar_fire = axi.arvalid & axi.arready
        r_fire = axi.rvalid & axi.rready
        r_done = r_fire & axi.rlast
        m.d.sync += r_out.eq(r_out + ar_fire - r_done)
        # Requests are refused during reset (which also makes Icarus evaluate the ready at
        # reset: a ready computed only from registers whose reset value is their initial
        # value can stay X there).
        in_reset = ResetSignal()
        with m.If(~r_busy):
            m.d.comb += self.rd_req.ready.eq(~in_reset)
            with m.If(self.rd_req.valid & self.rd_req.ready):
                with m.If(misaligned(self.rd_req.payload.addr)):
                    m.d.comb += set_error.eq(1)
                with m.Elif(~failed & (self.rd_req.payload.beats != 0)):
                    m.d.sync += [*rs.load(self.rd_req.payload), r_busy.eq(1)]
        with m.Else():
            with m.If(failed):
                m.d.sync += r_busy.eq(0)          # drop the rest of the request
            with m.Elif(r_out < K):
                m.d.comb += [axi.arvalid.eq(1), axi.araddr.eq(rs.addr),
                             axi.arlen.eq(rs.len - 1)]
                with m.If(axi.arready):
                    m.d.sync += rs.issued()
                    with m.If(rs.left == rs.len):
                        m.d.sync += r_busy.eq(0)
        m.d.comb += [r_final.w_en.eq(ar_fire), r_final.w_data.eq(rs.left == rs.len),
                     r_final.r_en.eq(r_done)]
        m.d.comb += [self.rd_data.payload.data.eq(axi.rdata),
                     self.rd_data.payload.last.eq(axi.rlast & r_final.r_data)]
        with m.If(failed):
            m.d.comb += axi.rready.eq(1)          # drain, drop
        with m.Else():
            # rresp only counts with rvalid (it may be undriven between beats).
            m.d.comb += [self.rd_data.valid.eq(axi.rvalid & (axi.rresp[1] == 0)),
                         axi.rready.eq(self.rd_data.ready | (axi.rvalid & axi.rresp[1]))]
            with m.If(axi.rvalid & axi.rresp[1]):
                m.d.comb += set_error.eq(Mux(axi.rresp[0], 3, 2))
        m.d.comb += self.rd_idle.eq(~r_busy & (r_out == 0))

        # -- write: requests -> AW bursts and W beats; B -> error -------------------------------
        # The next burst is addressed while the current one's W beats flow (one burst ahead),
        # so a stream of beats crosses burst boundaries without a bubble.
        ws = _Splitter(m, "wr", cfg)
        w_busy = Signal()                         # a request is being split
        w_beats = Signal(range(cfg.axi_max_burst + 1))   # W beats left of the current burst
        w_next = Signal(range(cfg.axi_max_burst + 1))    # beats of the burst addressed next
        b_out = Signal(range(K + 1))              # write responses pending
        aw_fire = axi.awvalid & axi.awready
        b_fire = axi.bvalid & axi.bready
        w_fire = axi.wvalid & axi.wready
        burst_ends = w_fire & (w_beats == 1)
        m.d.sync += b_out.eq(b_out + aw_fire - b_fire)
        m.d.comb += axi.bready.eq(1)
        with m.If(b_fire & axi.bresp[1]):
            m.d.comb += set_error.eq(Mux(axi.bresp[0], 3, 2))
        with m.If(~w_busy):
            m.d.comb += self.wr_req.ready.eq(~in_reset)
            with m.If(self.wr_req.valid & self.wr_req.ready):
                with m.If(misaligned(self.wr_req.payload.addr)):
                    m.d.comb += set_error.eq(1)
                with m.Elif(~failed & (self.wr_req.payload.beats != 0)):
                    m.d.sync += [*ws.load(self.wr_req.payload), w_busy.eq(1)]
        with m.Elif(failed | (ws.left == 0)):
            with m.If(w_beats == 0):
                m.d.sync += w_busy.eq(0)
        with m.Elif((b_out < K) & (w_next == 0)):
            m.d.comb += [axi.awvalid.eq(1), axi.awaddr.eq(ws.addr),
                         axi.awlen.eq(ws.len - 1)]
            with m.If(axi.awready):
                m.d.sync += ws.issued()
        # The current burst's beats: from wr_data, or (after an error) empty ones. When it
        # ends, the burst addressed next (or one addressed in this very cycle) follows.
        with m.If(w_beats != 0):
            m.d.comb += [axi.wlast.eq(w_beats == 1), axi.wdata.eq(self.wr_data.payload)]
            with m.If(failed):
                m.d.comb += [axi.wvalid.eq(1), axi.wstrb.eq(0)]
            with m.Else():
                m.d.comb += [axi.wvalid.eq(self.wr_data.valid), axi.wstrb.eq((1 << nbytes) - 1),
                             self.wr_data.ready.eq(axi.wready)]
        # (An AW fires only with w_next empty, and w_next is never full without a current
        # burst.)
        with m.If(burst_ends):
            m.d.sync += [w_beats.eq(Mux(aw_fire, ws.len, w_next)), w_next.eq(0)]
        with m.Elif(aw_fire & (w_beats == 0)):
            m.d.sync += w_beats.eq(ws.len)
        with m.Else():
            with m.If(w_fire):
                m.d.sync += w_beats.eq(w_beats - 1)
            with m.If(aw_fire):
                m.d.sync += w_next.eq(ws.len)
        m.d.comb += self.wr_idle.eq(~w_busy & (b_out == 0))
        return m
