"""Stream beats of the units of long heads (``block_softmax``, ``block_output``;
``docs/vector.md``, "Long heads"), packed from the golden trace, shared by the Amaranth tests
(``tests/vector``) and the cocotb benches (``sim/vector/block``, ``sim/vector/output``). Plain
Python and the units' payload layouts: no simulator imports.

``steps`` is ``golden.vector.online_stages(..., trace=True)["blocks"]``; an order of block
rows is a list of ``(block index, query row)``.
"""

from __future__ import annotations

from amaranth.hdl import Const

from kaleido_hw.vector.layouts import (block_prob_beat_layout, block_score_beat_layout,
                                       finish_layout, output_beat_layout, partial_beat_layout)


__all__ = ["score_beats", "prob_beats", "row_partials", "partial_beats", "finish_requests",
           "output_beats"]


def _pack(layout, fields: dict) -> int:
    return Const.cast(layout.const(fields)).value


def _beats_of(values, lanes: int, fill=None):
    """``values`` in beats of ``lanes`` (ints): ``(chunk padded to lanes, valid lanes,
    last)``; the lanes past the end are 0, or ``fill(k)`` (k values that must be ignored)."""
    values = [int(x) for x in values]
    k = -(-len(values) // lanes)
    for j in range(k):
        chunk = values[j * lanes:(j + 1) * lanes]
        pad = lanes - len(chunk)
        yield chunk + (fill(pad) if fill and pad else [0] * pad), len(chunk), j == k - 1


def score_beats(cfg, s, blocks, mult: int, shift: int, order, fill=None) -> list[int]:
    """``block_softmax``'s input beats: the scores ``s[row, blocks[b]]`` of each block row
    of ``order``, its scale pair, ``row`` and ``first`` (block 0)."""
    layout = block_score_beat_layout(cfg)
    return [_pack(layout, {"scores": chunk, "tail": valid - 1, "last": int(last),
                           "mult": mult, "shift": shift, "row": int(r), "first": int(b == 0)})
            for b, r in order
            for chunk, valid, last in _beats_of(s[r, blocks[b]], cfg.vector_lanes, fill)]


def prob_beats(cfg, steps, order) -> list[int]:
    """``block_softmax``'s expected output beats: each block row's P, ``row``, the block's
    factor and, on the row's last beat, its weight after the block."""
    layout, L = block_prob_beat_layout(cfg), cfg.vector_lanes
    return [_pack(layout, {"p": chunk, "tail": valid - 1 if last else L - 1, "last": int(last),
                           "row": int(r), "factor": int(steps[b]["factor"][r]),
                           "weight": int(steps[b]["weight"][r]) if last else 0})
            for b, r in order
            for chunk, valid, last in _beats_of(steps[b]["p"][r], L)]


def _chunks(cfg) -> int:
    return -(-cfg.engine_max_head_dim // cfg.vector_lanes)


def _chunk(values, c: int, lanes: int) -> list[int]:
    """Channels ``c * lanes ..`` of ``values``, zero-padded to ``lanes`` (chunks past the
    row's channels are all 0)."""
    chunk = [int(x) for x in values[c * lanes:(c + 1) * lanes]]
    return chunk + [0] * (lanes - len(chunk))


def row_partials(cfg, values, row: int, first: bool, factor: int) -> list[int]:
    """``block_output``'s partial beats of one query row in one key block: ``values`` (the
    row's ``P @ V_eff`` of the block) in chunks of ``vector_lanes`` channels."""
    layout, L = partial_beat_layout(cfg), cfg.vector_lanes
    return [_pack(layout, {"values": _chunk(values, c, L), "row": int(row), "chunk": c, "first": int(first),
                           "factor": int(factor)})
            for c in range(_chunks(cfg))]


def partial_beats(cfg, steps, row_order=None) -> list[tuple[int, int | None]]:
    """Every block's partial beats, the rows of block b in ``row_order(b)`` (else in index
    order), each with the row it finishes (on the row's last chunk of the last block) or
    None."""
    rows = len(steps[0]["partial"])
    out = []
    for b, step in enumerate(steps):
        for r in (row_order(b) if row_order else range(rows)):
            beats = row_partials(cfg, step["partial"][r], r, b == 0, step["factor"][r])
            done = b == len(steps) - 1
            out += [(beat, int(r) if done and c == len(beats) - 1 else None)
                    for c, beat in enumerate(beats)]
    return out


def finish_requests(cfg, weights) -> dict[int, int]:
    """``block_output``'s finish request of each row with its final weight: ``weights`` per
    row in index order, or a dict {row: weight}."""
    layout = finish_layout(cfg)
    items = weights.items() if isinstance(weights, dict) else enumerate(weights)
    return {int(r): _pack(layout, {"row": int(r), "weight": int(w)}) for r, w in items}


def output_beats(cfg, out) -> dict[int, list[int]]:
    """``block_output``'s expected output beats of each row of the int16 ``out``."""
    layout, L, chunks = output_beat_layout(cfg), cfg.vector_lanes, _chunks(cfg)
    return {r: [_pack(layout, {"values": _chunk(row, c, L), "row": r, "chunk": c,
                               "last": int(c == chunks - 1)})
                for c in range(chunks)]
            for r, row in enumerate(out)}
