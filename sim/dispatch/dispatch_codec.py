"""Bit packing of the dispatcher's stream payloads (``docs/dispatch.md``), in plain Python.

Shared by the cocotb benches (``sim/dispatch/scheduler``, ``sim/dispatch/matcher``, later the engine's) and the
Amaranth-simulator tests. Mirrors ``kaleido_hw/dispatch/layouts.py``: fields packed from bit 0
in declaration order. ``cfg`` is any mapping/object with the KaleidoConfig keys (e.g. the
``config`` dict of ``rtl_out/manifest.json``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


__all__ = ["DispatchCodec", "load_config"]

REPO = Path(__file__).resolve().parents[2]


def load_config() -> dict:
    """The configuration the Verilog under test was generated with.

    ``KALEIDO_MANIFEST`` (path of a manifest.json) selects a non-default variant; otherwise
    ``rtl_out/manifest.json``; without a manifest, the KaleidoConfig defaults.
    """
    path = Path(os.environ.get("KALEIDO_MANIFEST", REPO / "rtl_out" / "manifest.json"))
    if path.exists():
        return dict(json.loads(path.read_text())["config"])
    from kaleido_hw.config import KaleidoConfig
    return KaleidoConfig().to_dict()


def _index_width(n: int) -> int:
    return max(1, (n - 1).bit_length())


class DispatchCodec:
    """Pack/unpack scheduler entries and matcher batches/slots for one configuration."""

    def __init__(self, cfg):
        get = cfg.get if isinstance(cfg, dict) else (lambda k: getattr(cfg, k))
        self.T = get("token_id_width")
        self.E = get("sched_entries")
        self.W = get("sched_pattern_width")
        self.K = get("sched_clusters")
        self.Q = self.E // self.K
        self.seed = get("sched_lfsr_seed")
        self.C = get("cols")
        self.M = get("matcher_channels")
        self.L = get("matcher_lookahead")
        self.KW = _index_width(self.K)
        self.IW = _index_width(self.M)

    # -- scheduler ----------------------------------------------------------------------------
    def sched_in(self, token_id: int, pattern: int) -> int:
        return int(token_id) | (int(pattern) << self.T)

    def sched_out(self, v: int) -> tuple[int, int, int, bool]:
        """-> (token_id, pattern, cluster, last)."""
        T, W, KW = self.T, self.W, self.KW
        return (v & ((1 << T) - 1), (v >> T) & ((1 << W) - 1),
                (v >> (T + W)) & ((1 << KW) - 1), bool((v >> (T + W + KW)) & 1))

    # -- matcher ------------------------------------------------------------------------------
    def matcher_in(self, tokens, codes) -> int:
        """tokens: C ids; codes[c][m]: 2-bit code of token c, channel m."""
        T, C, M = self.T, self.C, self.M
        v = 0
        for c in range(C):
            v |= int(tokens[c]) << (T * c)
        base = T * C
        for c in range(C):
            for j in range(M):
                v |= int(codes[c][j]) << (base + 2 * (c * M + j))
        return v

    def matcher_slot(self, v: int) -> tuple:
        """-> (a, b, merged, sel tuple, tokens tuple, first, last)."""
        T, C, IW = self.T, self.C, self.IW
        a = v & ((1 << IW) - 1)
        b = (v >> IW) & ((1 << IW) - 1)
        pos = 2 * IW
        merged = bool((v >> pos) & 1)
        pos += 1
        sel = tuple((v >> (pos + 3 * c)) & 7 for c in range(C))
        pos += 3 * C
        tokens = tuple((v >> (pos + T * c)) & ((1 << T) - 1) for c in range(C))
        pos += T * C
        return a, b, merged, sel, tokens, bool((v >> pos) & 1), bool((v >> (pos + 1)) & 1)
