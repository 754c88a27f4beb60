"""Verification-only stall injection on the KaleidoEngine's internal streams
(``docs/engine.md``, "Back-pressure").

With ``engine_stall_seed`` = 0 (the default) :func:`stall_gate` returns the constant 1 and
adds no logic, so product builds are unaffected. With a non-zero seed each gated stream gets
its own 16-bit LFSR; in a cycle where the gate is 0 the stream's consumer sees ``valid`` = 0
and its producer sees ``ready`` = 0, so nothing can be handed over. That is random valid gaps
and random back-pressure at once: a producer that does not hold its payload until ``ready``,
or a consumer that assumes an item is there, loses or invents tokens, which the benches see
as a wrong S or wrong work counters.

Stream ids (each gate's LFSR starts from a different state):
``STREAM_IDS`` names the engine-level ones; array ``a``'s are ``ARRAY_BASE + ARRAY_STRIDE*a
+ offset`` (offsets in ``ARRAY_STREAMS``).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Signal

from kaleido_hw.config import KaleidoConfig


__all__ = ["stall_gate", "probe_wires", "gate_state", "STREAM_IDS", "ARRAY_STREAMS", "array_stream"]

#: Engine-level streams: the two pre-pass feeds and each OrderUnit's scheduler in/out.
STREAM_IDS = {"pre_q": 0, "pre_k": 1, "q_sched_i": 2, "q_sched_o": 3, "k_sched_i": 4,
              "k_sched_o": 5}
#: Per-array streams: SlotUnit quad/o as the sequencer sees them, the matcher's in (a block's
#: start) and out. (Offset 0 was the SlotUnit's block stream, which now waits for nothing.)
ARRAY_STREAMS = {"quad": 1, "o": 2, "match_i": 3, "match_o": 4}
ARRAY_BASE, ARRAY_STRIDE = 8, 8

_TAPS = (15, 13, 12, 10)          # x^16 + x^14 + x^13 + x^11 + 1, maximal length


def array_stream(index: int, name: str) -> int:
    """Stream id of array ``index``'s stream ``name`` (a key of ``ARRAY_STREAMS``)."""
    return ARRAY_BASE + ARRAY_STRIDE * index + ARRAY_STREAMS[name]


def gate_state(seed: int, stream_id: int) -> int:
    """Initial (non-zero) LFSR state of stream ``stream_id`` for ``engine_stall_seed``."""
    x = (seed * 0x9E37 + (stream_id + 1) * 0x7F4B) & 0xFFFF
    x ^= x >> 7
    x = (x * 0x2C1B + seed) & 0xFFFF
    return x or 1


def stall_gate(m, config: KaleidoConfig, stream_id: int, name: str):
    """1 in the cycles in which stream ``stream_id`` may hand over an item.

    Constant 1 when ``config.engine_stall_seed`` is 0; otherwise a 16-bit Fibonacci LFSR
    (reset to :func:`gate_state`, shifted every cycle) withholds the handshake in about half
    of the cycles, in runs of random length."""
    seed = config.engine_stall_seed
    if not seed:
        return Const(1, 1)
    lfsr = Signal(16, init=gate_state(seed, stream_id), name=f"{name}_stall_lfsr")
    feedback = lfsr[_TAPS[0]] ^ lfsr[_TAPS[1]] ^ lfsr[_TAPS[2]] ^ lfsr[_TAPS[3]]
    m.d.sync += lfsr.eq(Cat(feedback, lfsr[:15]))
    gate = Signal(name=f"{name}_gate")
    m.d.comb += gate.eq(~lfsr[0])
    return gate


def probe_wires(m, values: dict) -> dict:
    """Named comb copies of ``values`` (name -> Signal): plain wires the engine benches read
    through the hierarchy (the Amaranth simulator through these objects, cocotb by name in
    the submodule's Verilog module). They drive nothing, so synthesis removes them."""
    out = {}
    for name, value in values.items():
        sig = Signal(len(value), name=name)
        m.d.comb += sig.eq(value)
        out[name] = sig
    return out
