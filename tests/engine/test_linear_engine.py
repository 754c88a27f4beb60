"""Linear layers on the PE arrays (docs/linear.md): the per-PE decode table through the
ReusePE's term rules, the functional model against golden.linear, and the vectorized cycle
model against a step-by-step per-block reference."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden import FULL, HALF, NONE, VideoGrid, linear, linear_ops, window_masks
from golden.engine.linear import (ABSENT, ANCHOR, DECODE, FOLLOWER1, FOLLOWER2, WORK, LinearTiming,
                                  block_steps, decode, linear_counters, linear_engine,
                                  linear_plans, linear_units)
from golden.pe.model import Op, ReusePEModel, pe_contributions, step_contributions
from golden.pe.modes import linear_words


CODES = (FULL, HALF, NONE, ABSENT)
COST = {FULL: 0.0, HALF: 0.5, NONE: 1.0, ABSENT: 0.0}


# -- the decode table, exhaustively over the codes of a window -------------------------------

def follower_values(rng, anchor, code, size):
    """Values a follower with ``code`` may hold next to ``anchor`` (the PE relies only on:
    HALF has the anchor's high nibble; FULL multiplies the anchor's value)."""
    if code == HALF:
        return ((anchor >> 4) << 4) + rng.integers(0, 16, size)
    if code in (NONE, FULL):
        return rng.integers(-128, 128, size)
    return np.zeros(size, np.int64)


def same(x, y):
    return np.array_equal(np.broadcast_to(x, np.shape(y)), y)


def effective(anchor, value, code):
    return {FULL: anchor, HALF: value, NONE: value, ABSENT: 0 * value}[code]


@pytest.mark.parametrize("window", [2, 3])
def test_decode_exact_for_every_code_pair(window):
    """For every (c1, c2), A + F1 + F2 through the PE model give R0 = a*b, R1 = f1*b,
    R2 = f2*b with the effective follower values, and each PE spends the minimum number of
    follower steps: ceil(cost(c1) + cost(c2)) (HALF 1/2, NONE 1)."""
    rng = np.random.default_rng(window)
    size = 4096
    c2_codes = CODES if window == 3 else (ABSENT,)
    for c1, c2 in itertools.product(CODES, c2_codes):
        a = rng.integers(-128, 128, size)
        a[:256] = np.arange(-128, 128)                        # every anchor value
        b = rng.integers(-128, 128, size)
        f1 = follower_values(rng, a, c1, size)
        f2 = follower_values(rng, a, c2, size)
        lanes = {ANCHOR: (a, 0), FOLLOWER1: (f1, f2), FOLLOWER2: (f2, 0)}
        regs = [0, 0, 0]
        steps = 0
        for kind in range(window):
            word = decode(kind, c1, c2)
            a0, a1 = lanes[kind]
            contrib, busy = pe_contributions(word, a0, a1, b)
            assert np.all(busy == (word.op != Op.IDLE)), (kind, c1, c2)
            assert bool(WORK[kind, c1, c2]) == (word.op != Op.IDLE)
            regs = [r + c for r, c in zip(regs, contrib)]
            steps += kind > 0 and word.op != Op.IDLE
        assert same(regs[0], a * b), (c1, c2)
        assert same(regs[1], effective(a, f1, c1) * b), (c1, c2)
        assert same(regs[2], effective(a, f2, c2) * b), (c1, c2)
        assert steps == math.ceil(COST[c1] + COST[c2]), (c1, c2)


def test_decode_anchor_matches_uniform_word():
    """The per-PE anchor word equals docs/pe.md's uniform linear-mode anchor word driven with
    the follower codes (the PE's code 3 acts as NONE, like ABSENT)."""
    rng = np.random.default_rng(3)
    a, b = rng.integers(-128, 128, 2048), rng.integers(-128, 128, 2048)
    uniform = linear_words(3).anchor
    for c1, c2 in itertools.product(CODES, CODES):
        mine, _ = pe_contributions(decode(ANCHOR, c1, c2), a, 0, b)
        theirs, _ = step_contributions(uniform, a, 0, b, c1, c2, 2, 2)
        for r in range(3):
            assert np.array_equal(np.broadcast_to(mine[r], a.shape),
                                  np.broadcast_to(theirs[r], a.shape)), (c1, c2, r)


def test_decode_table_matches_function_and_rejects_bad_kind():
    for k, c1, c2 in itertools.product(range(3), range(4), range(4)):
        word = decode(k, c1, c2)
        assert DECODE[0][k, c1, c2] == word.op and DECODE[1][k, c1, c2] == word.split
        assert list(DECODE[2][k, c1, c2]) == list(word.parts)
        assert word.op == Op.IDLE or word.split == 1      # always split on the activation
    with pytest.raises(ValueError, match="kind must be"):
        decode(3, FULL, FULL)


@pytest.mark.parametrize("window", [2, 3])
def test_pe_cycle_model_runs_blocks_and_drains(window):
    """One PE (rows = 2) through ReusePEModel, the RTL's reference: several blocks back to
    back, random codes per channel, the decoded words; R0 drains at step d0, R1 at d1
    (window 3), the last register with the next block's first step (which clears all three),
    bubbles up to block_steps. Every drained value and every busy flag is as predicted."""
    rng = np.random.default_rng(window)
    rows, n, acc = 2, 5, 24
    pe = ReusePEModel(acc_width=acc)
    last = 3 if window == 3 else 2               # Drain code of the last register
    c2_codes = CODES if window == 3 else (ABSENT,)
    expected, drained = [], []
    for block in range(6):
        c1 = rng.choice(CODES, n)
        c2 = rng.choice(c2_codes, n)
        a = rng.integers(-128, 128, n)
        f1 = np.array([follower_values(rng, a[i:i + 1], c1[i], 1)[0] for i in range(n)])
        f2 = np.array([follower_values(rng, a[i:i + 1], c2[i], 1)[0] for i in range(n)])
        b = rng.integers(-128, 128, n)
        zero = np.zeros(n, int)
        lanes = {ANCHOR: (a, zero), FOLLOWER1: (f1, f2), FOLLOWER2: (f2, zero)}
        steps = [(kind, i) for kind in range(window) for i in range(n)
                 if kind == ANCHOR or WORK[kind, c1[i], c2[i]]]
        nf1 = sum(1 for k, _ in steps if k == FOLLOWER1)
        nf2 = sum(1 for k, _ in steps if k == FOLLOWER2)
        total = int(block_steps(n, nf1, nf2, rows, window))
        d0 = max(n, rows)
        d1 = max(n + nf1, d0 + rows)
        drains = {d0: 1, d1: 2} if window == 3 else {d0: 1}
        for s in range(total):
            if s < len(steps):
                kind, i = steps[s]
                word = decode(kind, c1[i], c2[i])
                a0, a1, bv = int(lanes[kind][0][i]), int(lanes[kind][1][i]), int(b[i])
            else:
                word, a0, a1, bv = decode(ANCHOR, FULL, FULL).with_(op=Op.IDLE), 0, 0, 0
            if s == 0:
                word = word.with_(clear=0b111, drain=last if block else 0)
            elif s in drains:
                word = word.with_(drain=drains[s])
            out = pe.step(a0=a0, a1=a1, ctrl=word.pack(), b=bv)
            assert out["busy"] == (word.op != Op.IDLE)
            if word.drain:
                drained.append(out["drain_out__data"])
        eff1 = np.array([effective(a[i], f1[i], c1[i]) for i in range(n)])
        eff2 = np.array([effective(a[i], f2[i], c2[i]) for i in range(n)])
        regs = [int(a @ b), int(eff1 @ b), int(eff2 @ b)]
        expected += [regs[0], regs[1]] + ([regs[2]] if window == 3 else [])
    out = pe.step(ctrl=decode(ANCHOR, FULL, FULL).with_(op=Op.IDLE, drain=last).pack())
    drained.append(out["drain_out__data"])
    assert drained == expected


# -- units -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 4), (5, 2, 7), (4, 3, 3)])
@pytest.mark.parametrize("window", [2, 3])
def test_units_cover_every_token_once(shape, window):
    grid = VideoGrid(*shape)
    coords = np.indices(shape).reshape(3, -1)
    for axis in range(3):
        m = linear_units(grid, axis, window)
        assert np.array_equal(np.sort(m[m >= 0]), np.arange(grid.n))
        assert np.all(m[:, 0] >= 0) and np.all(np.diff(m[:, 0]) > 0)    # token order
        for j in range(1, window):
            ok = m[:, j] >= 0
            assert np.array_equal(m[ok, j], m[ok, 0] + j * grid.stride(axis))
            # present exactly when the coordinate exists
            want = coords[axis][m[:, 0]] + j < shape[axis]
            assert np.array_equal(ok, want)
        assert np.all(coords[axis][m[:, 0]] % window == 0)


# -- functional model vs golden.linear -------------------------------------------------------

def styled(rng, style, n, c):
    if style == "random":
        return rng.integers(-128, 128, (n, c))
    if style == "smooth":
        base = rng.integers(-100, 100, c)
        return (base + rng.integers(-6, 7, (n, c))).clip(-128, 127)
    if style == "equal":            # every window FULL
        return np.broadcast_to(rng.integers(-128, 128, c), (n, c))
    if style == "alternating":      # every follower NONE (sign flips)
        return np.where(np.arange(n)[:, None] % 2 == 0, 100, -100) + 0 * np.arange(c)
    # nibble edges: values around multiples of 16 (HALF/NONE and FULL thresholds)
    return (16 * rng.integers(-8, 8, (n, c)) + rng.choice([-1, 0, 1, 15], (n, c))).clip(-128, 127)


STYLES = ("random", "smooth", "equal", "alternating", "edges")


@st.composite
def linear_cases(draw):
    grid = VideoGrid(*(draw(st.integers(1, 5)) for _ in range(3)))
    cin = draw(st.integers(1, 6))
    directions = draw(st.one_of(st.integers(0, 2),
                                st.lists(st.integers(0, 2), min_size=cin, max_size=cin)))
    window = draw(st.integers(2, 3))
    full_bits = draw(st.integers(4, 7))
    half_bits = draw(st.integers(3, full_bits - 1))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = styled(rng, draw(st.sampled_from(STYLES)), grid.n, cin).astype(np.int8)
    w = rng.integers(-128, 128, (cin, draw(st.integers(1, 5)))).astype(np.int8)
    return grid, x, w, directions, window, full_bits, half_bits


@settings(max_examples=60, deadline=None)
@given(linear_cases())
def test_engine_equals_golden_linear(case):
    grid, x, w, directions, window, full_bits, half_bits = case
    y = linear_engine(x, w, grid, directions, window, full_bits, half_bits)
    assert np.array_equal(y, linear(x, w, grid, directions, window, full_bits, half_bits))
    dense = linear_engine(x, w, grid, directions, window, full_bits, half_bits, reuse=False)
    assert np.array_equal(dense, x.astype(np.int64) @ w.astype(np.int64))


# -- cycle model vs a per-block, step-by-step reference --------------------------------------

def ref_block(n, f1, f2, rows, window):
    """Walk a block step by step: A, F1, F2 channel steps, then bubbles; a drain wave takes
    the column port for R steps; R0 / R1 may drain once final, the last register drains on
    the next block's first step (whose port must be free)."""
    finals = [n, n + f1][:window - 1]           # step index from which R_k no longer changes
    port_free = rows                            # the previous block's last wave
    drained = 0
    step = 0
    while True:
        if drained < len(finals) and step >= finals[drained] and step >= port_free:
            port_free = step + rows
            drained += 1
        if step >= n + f1 + f2 and drained == len(finals) and step >= port_free:
            return step                         # = the next block's first step
        step += 1


def reference_counters(x, w, grid, directions, window, rows, cols, arrays, full_bits,
                       half_bits, reuse, timing=LinearTiming()):
    plans = linear_plans(x, grid, directions, window, full_bits, half_bits, reuse)
    c_out = w.shape[1]
    ncb = -(-c_out // cols)
    gap = window * rows + 2
    res = {"cycles": 0, "busy": 0, "issued": [0, 0, 0], "skipped": [0, 0, 0], "bubbles": 0,
           "blocks": 0, "array_busy": [0] * arrays}
    end = timing.load_base - timing.barrier
    for pl in plans:
        n = pl.channels.size
        U = pl.members.shape[0]
        nrb = -(-U // rows)
        start = end + timing.barrier
        array_end = []
        for a in range(arrays):
            t = start + gap
            last_end = None
            for cb in range(a, ncb, arrays):
                jcols = [j for j in range(cb * cols, cb * cols + cols) if j < c_out]
                for rb in range(nrb):
                    units = [u for u in range(rb * rows, rb * rows + rows) if u < U]
                    issued = [0, 0, 0]
                    for kind in range(3 if window == 3 else 2):
                        for i in range(n):
                            need = [decode(kind, int(pl.c1[u, i]), int(pl.c2[u, i])).op
                                    != Op.IDLE for u in units]
                            if kind == 0 or any(need):
                                issued[kind] += 1
                                res["busy"] += sum(need) * len(jcols)
                                res["array_busy"][a] += sum(need) * len(jcols)
                            else:
                                res["skipped"][kind] += 1
                    s = ref_block(n, issued[1], issued[2], rows, window)
                    res["bubbles"] += s - sum(issued)
                    res["issued"] = [p + q for p, q in zip(res["issued"], issued)]
                    res["blocks"] += 1
                    last_end = t + s
                    t += max(s, gap)
            if last_end is not None:
                array_end.append(last_end)
        end = max(array_end)
    res["cycles"] = end + 1 + timing.tail_base + rows + cols
    return res


def check_counters(x, w, grid, directions, window, rows, cols, arrays, full_bits=5,
                   half_bits=3, reuse=True):
    got = linear_counters(x, w, grid, directions, window, rows, cols, arrays, full_bits,
                          half_bits, reuse)
    want = reference_counters(x, w, grid, directions, window, rows, cols, arrays, full_bits,
                              half_bits, reuse)
    assert got.cycles == want["cycles"]
    assert got.busy_pe_cycles == want["busy"] == sum(got.array_busy)
    assert got.array_busy == want["array_busy"]
    assert got.issued == want["issued"] and got.skipped == want["skipped"]
    assert got.bubbles == want["bubbles"] and got.blocks == want["blocks"]
    return got


@pytest.mark.parametrize("window", [2, 3])
def test_counters_every_pair_of_window_codes_in_a_block(window):
    """Units realizing every code combination a window can have (FULL is per window), in
    every ordered pair within a 2-row block, plus trailing partial windows (T = w + 1 and
    w + 2: ABSENT followers, and a NONE follower of a short window)."""
    combos = [(FULL, FULL), (HALF, HALF), (HALF, NONE), (NONE, HALF), (NONE, NONE)]
    if window == 2:
        combos = [(FULL,), (HALF,), (NONE,)]
    pairs = list(itertools.product(combos, repeat=2))
    rng = np.random.default_rng(7)
    cin = 3
    for t in (window, window + 1, window + 2):
        grid = VideoGrid(t, 1, 2 * len(pairs))
        x = rng.integers(-128, 128, grid.shape + (cin,))
        for p, pair in enumerate(pairs):
            for side, combo in enumerate(pair):
                h = rng.integers(-5, 5, cin)
                anchor = 16 * h
                x[0, 0, 2 * p + side] = anchor
                for j, code in enumerate(combo, start=1):
                    # HALF: same high nibble, spread above theta1; NONE: another nibble
                    x[j, 0, 2 * p + side] = {FULL: anchor, HALF: anchor + (15 if j == 1 else 8),
                                             NONE: anchor + (40 if j == 1 else -40)}[code]
        x = x.reshape(grid.n, cin).astype(np.int8)
        masks = window_masks(x, grid, 0, window)
        for p, pair in enumerate(pairs):
            for side, combo in enumerate(pair):
                for j, code in enumerate(combo, start=1):
                    assert (masks[j * grid.stride(0) + 2 * p + side] == code).all()
        w = rng.integers(-128, 128, (cin, 3)).astype(np.int8)
        assert np.array_equal(linear_engine(x, w, grid, 0, window), linear(x, w, grid, 0, window))
        for rows, cols, arrays in [(2, 2, 1), (2, 1, 2), (4, 2, 3), (1, 4, 1)]:
            check_counters(x, w, grid, 0, window, rows, cols, arrays)


@settings(max_examples=25, deadline=None)
@given(linear_cases(), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]),
       st.integers(1, 3), st.booleans())
def test_counters_equal_reference(case, rows, cols, arrays, reuse):
    grid, x, w, directions, window, full_bits, half_bits = case
    check_counters(x, w, grid, directions, window, rows, cols, arrays, full_bits, half_bits,
                   reuse)


def test_block_steps_formula():
    for window in (2, 3):
        for n, f1, f2, rows in itertools.product(range(0, 7), range(0, 7), range(0, 7),
                                                 (1, 2, 3, 4, 8)):
            if f1 > n or f2 > n or (window == 2 and f2):
                continue
            assert block_steps(n, f1, f2, rows, window) == ref_block(n, f1, f2, rows, window)
    # n >= R: a window-3 block needs n + max(f1, R) + max(f2, R) ... at least n + 2R steps
    assert block_steps(16, 0, 0, 4, 3) == 24 and block_steps(16, 16, 16, 4, 3) == 48
    assert block_steps(16, 0, 0, 4, 2) == 20 and block_steps(16, 16, 0, 4, 2) == 32


def test_dense_counts_every_mac_and_reuse_busy_matches_codes():
    rng = np.random.default_rng(11)
    grid = VideoGrid(5, 3, 4)
    base = rng.integers(-90, 90, 7)
    x = (base + rng.integers(-9, 10, (grid.n, 7))).astype(np.int8)
    w = rng.integers(-128, 128, (7, 9)).astype(np.int8)
    for window in (2, 3):
        dense = check_counters(x, w, grid, 0, window, 4, 4, 2, reuse=False)
        assert dense.busy_pe_cycles == grid.n * 7 * 9             # one busy PE-cycle per MAC
        reuse = check_counters(x, w, grid, 0, window, 4, 4, 2)
        masks = window_masks(x, grid, 0, window)
        # busy = C_out * sum over (unit, channel) of 1 + ceil(cost(f1) + cost(f2))
        plans = linear_plans(x, grid, 0, window)
        cost = np.vectorize(COST.get)
        pl = plans[0]
        want = 9 * int((1 + np.ceil(cost(pl.c1) + cost(pl.c2))).sum())
        assert reuse.busy_pe_cycles == want
        oracle = linear_ops(masks, 9)
        assert oracle["cost"] <= reuse.busy_pe_cycles <= dense.busy_pe_cycles
        assert reuse.cycles <= dense.cycles


def test_more_arrays_split_column_blocks():
    rng = np.random.default_rng(2)
    grid = VideoGrid(4, 4, 4)
    x = rng.integers(-20, 20, (grid.n, 8)).astype(np.int8)
    w = rng.integers(-128, 128, (8, 16)).astype(np.int8)
    one = check_counters(x, w, grid, 0, 2, 4, 4, 1)
    four = check_counters(x, w, grid, 0, 2, 4, 4, 4)
    five = check_counters(x, w, grid, 0, 2, 4, 4, 5)       # one array idles
    assert one.busy_pe_cycles == four.busy_pe_cycles == five.busy_pe_cycles
    assert four.cycles < one.cycles / 3 and five.cycles == four.cycles
    assert five.array_busy[4] == 0 and five.array_steps[4] == 0


def test_errors_name_the_parameter():
    grid = VideoGrid(2, 2, 2)
    x = np.zeros((8, 4), np.int8)
    w = np.zeros((4, 3), np.int8)
    with pytest.raises(ValueError, match="half_bits must be at least 3"):
        linear_engine(x, w, grid, half_bits=2)
    with pytest.raises(ValueError, match="w must have shape"):
        linear_counters(x, np.zeros((5, 3), np.int8), grid)
    with pytest.raises(ValueError, match="window"):
        linear_counters(x, w, grid, window=4)
    with pytest.raises(ValueError, match="rows"):
        linear_counters(x, w, grid, rows=0)
    with pytest.raises(ValueError, match="arrays"):
        linear_counters(x, w, grid, arrays=0)
    with pytest.raises(ValueError, match="x must"):
        linear_engine(x.astype(np.float32), w, grid)


def test_timing_barrier_separates_groups():
    """Three direction groups: the barrier is paid twice (between groups)."""
    rng = np.random.default_rng(4)
    grid = VideoGrid(3, 3, 4)
    x = rng.integers(-128, 128, (grid.n, 3)).astype(np.int8)
    w = rng.integers(-128, 128, (3, 5)).astype(np.int8)
    base = linear_counters(x, w, grid, [0, 1, 2], timing=LinearTiming(2, 1, 0)).cycles
    for barrier in (1, 2, 5):
        got = linear_counters(x, w, grid, [0, 1, 2], timing=LinearTiming(2, 1, barrier))
        assert got.cycles == base + 2 * barrier


# -- the Fig. 20 analogue (kaleido-hw linear-report) -----------------------------------------

def test_linear_report_small(tmp_path):
    import json

    from golden.array.window3 import window3_issued
    from golden.engine.model import EngineParams, engine_counters
    from golden.numerics import ChannelGroups
    from kaleido_hw.reports.linear_report import LAYERS, block_layers, linear_figures

    grid = VideoGrid(3, 4, 4)
    res = linear_figures(tmp_path, ["cogvideox-5b"], grid, heads=1, arrays=2, window=3,
                         seed=1)
    for name in ("linear_report.png", "linear_report.json", "linear_report.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert json.loads((tmp_path / "linear_report.json").read_text())["summary"] == \
        json.loads(json.dumps(res["summary"]))
    s = res["summary"]["cogvideox-5b"]
    layers, qkvs, dims = block_layers("cogvideox-5b", grid, 1, seed=1)
    assert dims == {"d_model": 64, "mlp": 256} and s["d_model"] == 64
    dense = reuse = 0
    for row, name in zip(res["layers"], LAYERS):
        x, w = layers[name]
        assert row["layer"] == name and (row["c_in"], row["c_out"]) == w.shape
        d = linear_counters(x, w, grid, 0, 3, 4, 4, 2, reuse=False).cycles
        r = linear_counters(x, w, grid, 0, 3, 4, 4, 2).cycles
        assert (row["dense_cycles"], row["reuse_cycles"]) == (d, r)
        core = [window3_issued(x, grid, w.shape[1], 0, win, 4, 4, 16, reuse=re).steps
                for win, re in ((2, False), (2, True), (3, True))]
        assert [row[f"core_{key}_steps"] for key in ("dense", "w2", "w3")] == core
        assert row["core_w3_gain"] == core[1] / core[2]
        dense, reuse = dense + d, reuse + r
    assert (s["linear_dense_cycles"], s["linear_reuse_cycles"]) == (dense, reuse)
    q, k, _ = qkvs[0]
    groups = ChannelGroups.from_preset("cogvideox-5b")
    params = EngineParams(rows=4, cols=4, arrays=2)
    ad = engine_counters(q, k, grid, groups, params, "dense").cycles
    ar = engine_counters(q, k, grid, groups, params, "full").cycles
    assert (s["attention_dense_cycles"], s["attention_reuse_cycles"]) == (ad, ar)
    assert s["combined_speedup"] == pytest.approx((dense + ad) / (reuse + ar))
    assert s["attention_only_speedup"] == pytest.approx((dense + ad) / (dense + ar))
    lo, hi = sorted((s["linear_speedup"], s["attention_speedup"]))
    assert lo <= s["mix_speedup"] <= hi


def test_linear_report_cli_rejects_bad_input(capsys):
    from kaleido_hw.cli import main
    assert main(["linear-report", "--presets", "sora"]) == 2
    assert "--presets must name presets" in capsys.readouterr().err
    assert main(["linear-report", "--arrays", "0"]) == 2


def test_doc_decode_tables_match_decode():
    """The three per-PE tables of docs/linear.md are the ones :func:`decode` implements."""
    import re
    from pathlib import Path

    from golden.pe.model import Part

    text = (Path(__file__).resolve().parents[2] / "docs" / "linear.md").read_text()
    order = (FULL, HALF, NONE, ABSENT)
    letters_mul = {Part.PROD: "P", Part.HIGH: "H", Part.LOW: "L", Part.NONE: "-"}
    letters_low = {Part.LOW: "0", Part.HIGH: "1", Part.NONE: "-"}
    for kind, name in enumerate(("A", "F1", "F2")):
        head = text.index(f"| {name}: c1 \\ c2 |")
        lines = text[head:].splitlines()[2:6]
        for c1, line in zip(order, lines):
            cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")][1:]
            assert len(cells) == 4, line
            for c2, cell in zip(order, cells):
                word = decode(kind, c1, c2)
                if word.op == Op.IDLE:
                    want = "idle"
                elif word.op == Op.MUL:
                    want = "MUL/r " + "".join(letters_mul[p] for p in word.parts)
                else:
                    want = "LOWr " + "".join(letters_low[p] for p in word.parts)
                assert re.sub(r"\s+", " ", cell) == want, (name, c1, c2, cell)


def test_linear_report_rejects_per_channel_directions(tmp_path):
    from kaleido_hw.reports.linear_report import linear_figures
    with pytest.raises(ValueError, match="directions must be one axis"):
        linear_figures(tmp_path, ["wan2.1"], "2x2x2", heads=1, directions=[0, 1])
    with pytest.raises(ValueError, match="presets must be among"):
        linear_figures(tmp_path, ["sora"], "2x2x2", heads=1)
    assert not any(tmp_path.iterdir())            # nothing written before the checks
