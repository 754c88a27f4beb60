"""The AXI4 master DMA (``kaleido_hw/engine/dma.py``) in the Amaranth simulator against a
behavioural AXI slave (random AR/AW/W ready, random R/B latency and gaps, an error region):
the bursts on AR and AW equal the reference rule ``bursts()`` (at most ``axi_max_burst``
beats, no 4 KiB crossing), at most ``axi_max_outstanding`` bursts in flight, every beat
read and written exactly once with its data, the request's last beat flagged, random
consumer and producer back-pressure; SLVERR / DECERR / misaligned requests set the sticky
error, the bus is drained (no hang) and a clean transfer follows ``error_clear``; the
configuration keys' errors. The core's bench (``sim/engine/core``) runs it on Verilator and
Icarus with cocotbext-axi's AxiRam."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator

from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.dma import AxiDma, bursts

CFG = KaleidoConfig(axi_max_burst=8, axi_max_outstanding=3)


def test_bursts_rule():
    c = KaleidoConfig()
    assert bursts(0, 16, c) == [(0, 16)]
    assert bursts(0, 40, c) == [(0, 16), (128, 16), (256, 8)]
    # 4 KiB page: 4064 + 4*8 = 4096
    assert bursts(4064, 10, c) == [(4064, 4), (4096, 6)]
    for addr in range(0, 8192, 200 * 8):
        for n in (1, 7, 33, 600):
            out = bursts(addr, n, CFG)
            assert sum(b for _, b in out) == n
            assert all(b <= CFG.axi_max_burst and a // 4096 == (a + 8 * b - 1) // 4096
                       for a, b in out)
    with pytest.raises(ValueError, match="multiple of 8 bytes"):
        bursts(4, 1, c)


@pytest.mark.parametrize("key, value, msg", [
    ("axi_addr_width", 16, r"axi_addr_width must be in \[32, 64\]"),
    ("axi_data_width", 48, "axi_data_width must be one of 32, 64, 128"),
    ("axi_max_burst", 12, "axi_max_burst must be a power of two"),
    ("axi_max_outstanding", 0, r"axi_max_outstanding must be in \[1, 16\]"),
])
def test_config_errors(key, value, msg):
    with pytest.raises(ConfigError, match=msg):
        KaleidoConfig(**{key: value})


def run_dma(cfg, reads, writes, memory: dict, *, seed=0, stall=0.3, latency=4, fault=None,
            max_cycles=50_000):
    """Issue ``reads`` / ``writes`` ((addr, beats), write data from ``memory`` offsets + 1)
    and return (read beats with last flags, AR and AW bursts, peak outstanding, error)."""
    dut = AxiDma(cfg)
    rng = random.Random(seed)
    axi = dut.axi
    out = {"rd": [], "ar": [], "aw": [], "w_cycles": [], "peak_r": 0, "peak_b": 0, "error": 0}
    nb = cfg.axi_data_width // 8
    written = {}

    async def bench(ctx):
        rq, wq = list(reads), list(writes)
        wdata = [((a + 8 * i) * 3 + 1) & ((1 << cfg.axi_data_width) - 1)
                 for a, n in writes for i in range(n)]
        r_inflight, b_pending, w_bursts = [], [], []
        cycle = 0
        while cycle < max_cycles:
            ctx.set(dut.rd_req.valid, bool(rq))
            if rq:
                ctx.set(dut.rd_req.payload, {"addr": rq[0][0], "beats": rq[0][1]})
            ctx.set(dut.wr_req.valid, bool(wq))
            if wq:
                ctx.set(dut.wr_req.payload, {"addr": wq[0][0], "beats": wq[0][1]})
            ctx.set(dut.rd_data.ready, rng.random() >= stall)
            ctx.set(dut.wr_data.valid, bool(wdata) and rng.random() >= stall)
            if wdata:
                ctx.set(dut.wr_data.payload, wdata[0])
            ctx.set(axi.arready, rng.random() >= stall)
            ctx.set(axi.awready, rng.random() >= stall)
            ctx.set(axi.wready, rng.random() >= stall)
            head = r_inflight[0] if r_inflight else None
            rv = bool(head and head[2] <= cycle and rng.random() >= stall)
            ctx.set(axi.rvalid, rv)
            if rv:
                addr = head[0]
                bad = fault is not None and addr >= fault[0]
                ctx.set(axi.rdata, memory.get(addr, addr * 7))
                ctx.set(axi.rresp, fault[1] if bad else 0)
                ctx.set(axi.rlast, head[1] == 1)
            bv = bool(b_pending and b_pending[0][1] <= cycle and rng.random() >= stall)
            ctx.set(axi.bvalid, bv)
            if bv:
                ctx.set(axi.bresp, b_pending[0][2])
            (_, _, qv, qr, pv, pr, av, ar, aa, al, rr, dv, dr, dd, wv, wr, ww, wl, wsb, awv,
             awr, awa, awl, bvv, brr, err) = await ctx.tick().sample(
                dut.rd_req.valid, dut.rd_req.ready, dut.wr_req.valid, dut.wr_req.ready,
                axi.arvalid, axi.arready, axi.araddr, axi.arlen, axi.rready, dut.rd_data.valid,
                dut.rd_data.ready, Value.cast(dut.rd_data.payload), axi.wvalid, axi.wready,
                axi.wdata, axi.wlast, axi.wstrb, axi.awvalid, axi.awready, axi.awaddr,
                axi.awlen, axi.bvalid, axi.bready, dut.error)
            cycle += 1
            if qv and qr:
                rq.pop(0)
            if pv and pr:
                wq.pop(0)
            if av and ar:
                out["ar"].append((aa, al + 1))
                r_inflight.append([aa, al + 1, cycle + latency])
            out["peak_r"] = max(out["peak_r"], len(r_inflight))
            if rv and rr:
                head[0] += nb
                head[1] -= 1
                if head[1] == 0:
                    r_inflight.pop(0)
                    head[2] = 0
                elif r_inflight:
                    head[2] = cycle
            if dv and dr:
                out["rd"].append((dd & ((1 << cfg.axi_data_width) - 1), dd >> cfg.axi_data_width))
            if awv and awr:
                out["aw"].append((awa, awl + 1))
                w_bursts.append([awa, awl + 1, 0])
            if wv and wr:
                out["w_cycles"].append(cycle)
                wb = w_bursts[0]
                if wsb:
                    assert wsb == (1 << nb) - 1
                    written[wb[0]] = ww
                    wdata.pop(0)
                wb[0] += nb
                wb[1] -= 1
                assert bool(wl) == (wb[1] == 0), "wlast not on the burst's last beat"
                if wb[1] == 0:
                    w_bursts.pop(0)
                    bad = fault is not None and wb[0] - nb >= fault[0]
                    b_pending.append([0, cycle + latency, fault[1] if bad else 0])
            out["peak_b"] = max(out["peak_b"], len(b_pending) + len(w_bursts))
            if bvv and brr:
                b_pending.pop(0)
            out["error"] = err
            idle = ctx.get(dut.rd_idle) and ctx.get(dut.wr_idle)
            if not rq and not wq and idle and not r_inflight and not b_pending and \
                    not w_bursts and (not wdata or err):
                break
        else:
            raise AssertionError(f"DMA did not finish within {max_cycles} cycles")
        out["written"] = written
        out["error"] = ctx.get(dut.error)     # after the last edge

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_dma_random_transfers(seed):
    rng = random.Random(seed)
    reads = [(8 * rng.randrange(0, 1200), rng.randrange(1, 40)) for _ in range(6)]
    reads.append((4096 - 16, 9))                      # crosses a 4 KiB page
    writes = [(8 * rng.randrange(0, 1200), rng.randrange(1, 30)) for _ in range(4)]
    writes.append((8192 - 8, 3))
    out = run_dma(CFG, reads, writes, {}, seed=seed)
    assert out["error"] == 0
    assert out["ar"] == [b for a, n in reads for b in bursts(a, n, CFG)]
    assert out["aw"] == [b for a, n in writes for b in bursts(a, n, CFG)]
    assert out["peak_r"] <= CFG.axi_max_outstanding and out["peak_b"] <= CFG.axi_max_outstanding
    want = [((a + 8 * i) * 7, int(i == n - 1)) for a, n in reads for i in range(n)]
    assert out["rd"] == want
    wrote = {a + 8 * i: ((a + 8 * i) * 3 + 1) for a, n in writes for i in range(n)}
    assert out["written"] == wrote


def test_dma_writes_one_beat_per_cycle_across_bursts():
    """Without stalls a write moves a beat every cycle, also across bursts and a 4 KiB page
    (the next burst is addressed while the current one's beats flow), and never has more than
    axi_max_outstanding bursts addressed and unanswered."""
    beats = 3 * CFG.axi_max_burst + 5
    out = run_dma(CFG, [], [(4096 - 8 * 7, beats)], {}, stall=0)
    assert len(out["aw"]) == len(bursts(4096 - 8 * 7, beats, CFG)) >= 4
    first = out["w_cycles"][0]
    assert out["w_cycles"] == list(range(first, first + beats))
    assert out["peak_b"] <= CFG.axi_max_outstanding


@pytest.mark.parametrize("resp, code", [(2, 2), (3, 3)])
def test_dma_bus_errors_drain(resp, code):
    """A read and a write meet an error region: sticky code, no beat past the error handed
    on, the bus drained, and nothing hangs."""
    out = run_dma(CFG, [(0, 30), (1024, 20)], [(0, 4), (2048, 24)], {}, fault=(512, resp),
                  seed=3)
    assert out["error"] == code
    assert all(a < 512 for a, _ in [(v // 7, 0) for v, _ in out["rd"]])


def test_dma_misaligned():
    out = run_dma(CFG, [(4, 3)], [], {})
    assert out["error"] == 1 and out["ar"] == [] and out["rd"] == []
