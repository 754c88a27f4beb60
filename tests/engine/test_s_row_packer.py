"""``SRowPacker`` in the Amaranth simulator: the engine's two-value S beats -> the vector
unit's row beats, exactly (lanes, tail, last, scale), runs back to back, even and odd
``n*n``, rows shorter than, equal to and longer than a beat, random valid gaps and random
back-pressure; a score past the lanes' width sets the error bit and the run still ends."""

from __future__ import annotations

import numpy as np
import pytest

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.s_row_packer import ERROR_BITS, S_VALUE_BITS, SRowPacker
from stream_harness import run_stream_runs, unpack

MASK = (1 << S_VALUE_BITS) - 1


def s_beats(s):
    """The engine's read-out beats of S (row-major, two values per beat, zero pad)."""
    flat = [int(x) & MASK for x in np.asarray(s).reshape(-1)]
    if len(flat) % 2:
        flat.append(0)
    return [flat[i] | flat[i + 1] << S_VALUE_BITS for i in range(0, len(flat), 2)]


def expected(s, lanes, bits, mult, shift):
    """(scores as signed ints, tail, last, mult, shift) per beat."""
    out = []
    for row in np.asarray(s):
        n = row.size
        for b in range(-(-n // lanes)):
            chunk = [int(x) for x in row[b * lanes:(b + 1) * lanes]]
            last = b == -(-n // lanes) - 1
            out.append((chunk + [0] * (lanes - len(chunk)), len(chunk) - 1 if last else
                        lanes - 1, int(last), mult, shift))
    return out


def decoded(word, config, layout):
    L, B = config.vector_lanes, config.vector_score_bits
    scores = [(word >> (B * j)) & ((1 << B) - 1) for j in range(L)]
    scores = [x - (1 << B) if x >> (B - 1) else x for x in scores]
    tail, last, mult, shift = unpack(word, layout, "tail", "last", "mult", "shift")
    return (scores, tail, last, mult, shift)


@pytest.mark.parametrize("lanes,bits", [(4, 24), (5, 16), (1, 20), (2, 24)])
def test_beats_equal_the_rows(lanes, bits):
    config = KaleidoConfig(vector_lanes=lanes, vector_max_row=lanes * 16,
                           vector_score_bits=bits, engine_max_tokens=16)
    rng = np.random.default_rng(lanes)
    lim = 1 << (bits - 1)
    runs, wants = [], []
    for n in (16, 7, 1, lanes, lanes + 1, 3, 2):
        s = rng.integers(-lim, lim, (n, n))
        s[0, 0], s[-1, -1] = -lim, lim - 1                    # the range's ends
        mult, shift = int(rng.integers(1 << 15, 1 << 16)), int(rng.integers(1, 48))
        runs.append(({"keys": n, "mult": mult, "shift": shift}, s_beats(s)))
        wants.append(expected(s, lanes, bits, mult, shift))
    dut = SRowPacker(config)
    layout = dut.o.payload.shape()
    for (outs, error, _, k), (cfg, items), want in zip(
            run_stream_runs(dut, runs, gap=0.3, stall=0.4, seed=lanes, ports=("s", "o")),
            runs, wants):
        assert error == 0
        assert k == len(items)
        assert [decoded(w, config, layout) for w in outs] == want, cfg


def test_rate_and_range_error():
    """Two scores per cycle without gaps (rows of 8 scores in beats of 4 lanes); a score
    outside the lanes sets the error bit and the run still ends with every row."""
    config = KaleidoConfig(vector_lanes=4, vector_max_row=32, vector_score_bits=16,
                           engine_max_tokens=8)
    s = np.arange(64).reshape(8, 8) - 32
    bad = s.copy()
    bad[3, 5] = 1 << 15
    runs = [({"keys": 8, "mult": 1 << 15, "shift": 8}, s_beats(s)),
            ({"keys": 8, "mult": 1 << 15, "shift": 8}, s_beats(bad))]
    res = run_stream_runs(SRowPacker(config), runs, ports=("s", "o"))
    outs, error, cycles, _ = res[0]
    assert error == 0 and len(outs) == 16
    assert 32 <= cycles <= 32 + 4, cycles
    outs, error, _, _ = res[1]
    assert error == 1 << ERROR_BITS["score_range"] and len(outs) == 16


def test_key_mask():
    """Built with ``key_mask``: a key whose bit of ``cfg.real`` is clear gives the lanes' most
    negative score in every row (a padding token of an edge K box), the others their S; a
    masked key's S out of range sets no error."""
    config = KaleidoConfig(vector_lanes=4, vector_max_row=32, vector_score_bits=16,
                           engine_max_tokens=8)
    rng = np.random.default_rng(9)
    runs, wants = [], []
    for n, real in ((7, 0b1011011), (8, 0b11110000), (3, 0b111), (5, 0b00001)):
        s = rng.integers(-(1 << 15), 1 << 15, (n, n))
        masked = np.array([not (real >> j) & 1 for j in range(n)])
        s[:, masked] = 1 << 20                      # never seen: masked
        want = s.copy()
        want[:, masked] = -(1 << 15)
        runs.append(({"keys": n, "mult": 1 << 15, "shift": 8, "real": real}, s_beats(s)))
        wants.append(expected(want, 4, 16, 1 << 15, 8))
    dut = SRowPacker(config, key_mask=True)
    layout = dut.o.payload.shape()
    for (outs, error, _, _), want in zip(
            run_stream_runs(dut, runs, gap=0.2, stall=0.3, seed=4, ports=("s", "o")), wants):
        assert error == 0
        assert [decoded(w, config, layout) for w in outs] == want
