"""Stimulus and expected beats of ``block_attention`` (``kaleido_hw/engine/block_attention.py``)
from the interpreter's COMPUTE kind 2, shared by the Amaranth test
(``tests/engine/test_block_attention.py``) and the cocotb bench (``sim/engine/block``).
Plain Python and the block's payload layouts: no simulator imports.

A head on ``grid`` runs through ``kaleido_hw.engine.host_attention.run_attention`` (the
functional model, with every block's P @ V counters); each of its blocks, in program
order, becomes a :class:`BlockCase`: the ``first`` / ``last`` flags, the S rows as the
block's ``s`` beats (padding keys at the most negative score), the key box's V as
``v_in`` words, P @ V's counters and, after a query box's last block, the box's O as
``out`` beats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Const

from golden.engine.pv import pv_v_words
from golden.numerics import VideoGrid
from kaleido_hw.engine.host_attention import AttentionRun, run_attention
from kaleido_hw.engine.pv_layouts import pv_v_word_layout
from kaleido_hw.vector.layouts import output_beat_layout, score_beat_layout
from token_data import smooth_tokens


__all__ = ["BlockCase", "attention_blocks", "run_settings", "out_chunks"]


def _pack(layout, fields: dict) -> int:
    return Const.cast(layout.const(fields)).value


def out_chunks(cfg) -> int:
    """Output beats per row: ``ceil(engine_max_head_dim / vector_lanes)``."""
    return -(-cfg.engine_max_head_dim // cfg.vector_lanes)


@dataclass
class BlockCase:
    """One block: its flags, ``s`` beats, ``v_in`` words, P @ V's counters
    (``golden.engine.pv.PvCounters``) and the ``out`` beats it ends with (``[]`` but after
    a query box's last block)."""
    first: bool
    last: bool
    s_beats: list
    v_words: list
    pv: object
    out_beats: list


def attention_blocks(cfg, grid, groups, seed: int = 0, **plan_args) -> tuple:
    """``(run, cases)``: the head of smooth int8 Q, K, V (``seed``) on ``grid`` with
    ``groups``, run by the interpreter (``plan_args`` to ``plan_attention``), and its blocks
    as :class:`BlockCase` s."""
    rng = np.random.default_rng(seed)
    n, d = VideoGrid(*grid).n, groups.head_dim
    q, k, v = (smooth_tokens(rng, n, d) for _ in range(3))
    run = run_attention(cfg, q, k, v, grid, groups, engine=True, **plan_args)
    plan = run.plan
    nb, L, C = plan.box_tokens, cfg.vector_lanes, cfg.cols
    lowest = -(1 << (cfg.vector_score_bits - 1))
    s_layout, v_layout = score_beat_layout(cfg), pv_v_word_layout(cfg)
    o_layout, chunks = output_beat_layout(cfg), out_chunks(cfg)
    cases = []
    for st, blk in zip(plan.steps, run.result.blocks):
        tokens, real = plan.grid_tokens(st.ki)
        s = np.where(real[None, :], blk.s, lowest)
        beats = []
        for r in range(nb):
            for j in range(0, nb, L):
                chunk = [int(x) for x in s[r, j:j + L]]
                beats.append(_pack(s_layout, {"scores": chunk + [0] * (L - len(chunk)),
                                              "tail": len(chunk) - 1, "last": int(j + L >= nb),
                                              "mult": 0, "shift": 0}))
        vbox = np.zeros((nb, d), np.int64)
        vbox[real] = v[tokens]
        words = [_pack(v_layout, {"cb": cb, "key": key, "v": w})
                 for cb, key, w in pv_v_words(vbox, C)]
        out = []
        if blk.o is not None:
            o = np.zeros((nb, chunks * L), np.int64)
            o[:, :d] = blk.o
            out = [_pack(o_layout, {"values": [int(x) for x in o[r, c * L:(c + 1) * L]],
                                    "row": r, "chunk": c, "last": int(c == chunks - 1)})
                   for r in range(nb) for c in range(chunks)]
        cases.append(BlockCase(st.ki == 0, st.ki == plan.n_k - 1, beats, words, blk.pv, out))
    return run, cases


def run_settings(run: AttentionRun) -> dict:
    """The block's ``cfg`` port values for the blocks of ``run``."""
    p = run.plan
    return {"t": p.box[0], "h": p.box[1], "w": p.box[2], "channels": p.groups.head_dim,
            "axis": p.v_dir, "window": p.v_window, "reuse": int(p.v_reuse),
            "full_bits": p.full_bits, "half_bits": p.half_bits, "mult": p.scale.mult,
            "shift": p.scale.shift}
