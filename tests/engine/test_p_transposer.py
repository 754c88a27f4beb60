"""``PTransposer`` in the Amaranth simulator: rows of P in vector-unit beats -> exactly the
words of ``golden.engine.pv.pv_p_words`` (``pv_engine``'s ``p_in``), runs back to back, lane
counts that divide the row and that do not (1, 3, 4, 5 lanes), short last row blocks,
random valid gaps on the input and random back-pressure on the output; the output rate;
bad rows and a bad configuration end with an error bit and never hang."""

from __future__ import annotations

import numpy as np
import pytest

from golden.engine.pv import pv_p_words
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.p_transposer import ERROR_BITS, PTransposer
from stream_harness import run_stream_runs, unpack


def beats(p, lanes):
    """The vector unit's beats of P's rows: dicts for ``prob_beat_layout``."""
    out = []
    q, n = p.shape
    k = -(-n // lanes)
    for r in range(q):
        for b in range(k):
            lane_vals = list(p[r, b * lanes:(b + 1) * lanes]) + [0] * lanes
            out.append({"p": [int(x) for x in lane_vals[:lanes]],
                        "tail": (n - 1 - b * lanes) if b == k - 1 else 0,
                        "last": int(b == k - 1)})
    return out


def run(config, jobs, seed=0, gap=0.3, stall=0.4):
    """Each job: (p, keys, queries, beats or None): returns per job (words, error, cycles
    from start to done, beats accepted)."""
    dut = PTransposer(config)
    layout = dut.o.payload.shape()
    runs = [({"keys": keys, "queries": queries},
             beats(p, config.vector_lanes) if items is None else items)
            for p, keys, queries, items in jobs]
    return [([unpack(w, layout, "rb", "key", "p") for w in words], error, cycles, k)
            for words, error, cycles, k in run_stream_runs(dut, runs, gap=gap, stall=stall,
                                                           seed=seed, ports=("p", "o"))]


@pytest.mark.parametrize("rows,lanes", [(4, 4), (3, 5), (2, 1), (4, 3)])
def test_words_equal_the_model(rows, lanes):
    config = KaleidoConfig(rows=rows, cols=4, vector_lanes=lanes, vector_max_row=lanes * 8,
                           engine_max_tokens=24)
    rng = np.random.default_rng(rows * 10 + lanes)
    jobs = []
    for q, n in [(24, 24), (7, 13), (1, 1), (rows, 5), (rows + 1, lanes), (11, 24), (5, 2),
                 (3 * rows + 1, lanes), (4 * rows, 1)]:
        p = rng.integers(0, 256, (q, n))
        p[rng.random((q, n)) < 0.2] = 255
        jobs.append((p, n, q, None))
    for (p, n, q, _), (words, error, _, _) in zip(jobs, run(config, jobs, seed=lanes)):
        assert error == 0
        assert words == pv_p_words(p, rows), f"{q}x{n}"


def test_rate_one_word_per_cycle():
    """Without gaps or back-pressure, and with rows that come in faster than their words
    leave (R*k beats < n keys, as at the defaults: 16 beats against 64 keys), the output
    gives one word per cycle after the first block: B row blocks of n keys take the first
    block's R*k beats, B*n output cycles and the pipeline's few cycles."""
    config = KaleidoConfig(rows=4, cols=4, vector_lanes=8, vector_max_row=32,
                           engine_max_tokens=32)
    p = np.arange(30 * 32).reshape(30, 32) % 256
    (words, error, cycles, _), = run(config, [(p, 32, 30, None)], gap=0, stall=0)
    assert error == 0 and words == pv_p_words(p, 4)
    assert 4 * 4 + 8 * 32 <= cycles <= 4 * 4 + 8 * 32 + 4, cycles


def test_bad_rows_and_cfg_end_with_an_error():
    config = KaleidoConfig(rows=2, cols=4, vector_lanes=4, vector_max_row=32,
                           engine_max_tokens=16)
    p = np.arange(3 * 10).reshape(3, 10) % 256
    good = beats(p, 4)
    short = [b for i, b in enumerate(good) if i != 1]                   # row 0 misses a beat
    short[1] = dict(short[1], last=1, tail=1)
    long = good[:2] + [dict(good[2], last=0), dict(good[2], last=1)] + good[3:]  # row 0 +1
    bad_tail = [dict(b, tail=3) if b["last"] else b for b in good]
    jobs = [(p, 10, 3, short), (p, 10, 3, long), (p, 10, 3, bad_tail), (p, 0, 3, []),
            (p, 10, 17, []), (p, 10, 3, None)]
    res = run(config, jobs, seed=3)
    row_length = 1 << ERROR_BITS["row_length"]
    for words, error, _, k in res[:3]:
        assert error == row_length
        assert len(words) == 2 * 10           # both row blocks still leave: no hang
    assert res[3][1] == res[4][1] == 1 << ERROR_BITS["cfg"]
    assert res[3][0] == res[4][0] == []
    words, error, _, _ = res[5]               # a clean run after the bad ones
    assert error == 0 and words == pv_p_words(p, 2)


def test_rejects_other_configs():
    with pytest.raises(TypeError, match="KaleidoConfig"):
        PTransposer({"rows": 4})
