"""``kaleido-hw dispatch-report``: what the data dispatcher buys on the synthetic workloads.

For each preset and operand (Q, K) of ``golden.workloads.make_qkv`` it takes the reuse codes
(``golden.numerics.reuse_masks``) and streams them through the golden dispatcher:

* Entries: for every batch of ``sched_pattern_width`` channels, the tokens that are followers
  on at least one of those channels, in token order (an entry stands for an anchor + follower
  pair and carries the follower's pattern); a final partial batch of fewer than
  ``sched_entries`` is left out.
* Hamming spread: the mean pairwise Hamming distance between the patterns of one cluster,
  averaged over all clusters, with the ClusterScheduler's clusters vs. clusters made of
  consecutive arrivals (no scheduler).
* Merge efficiency: MergeMatcher slots per non-empty channel (1.0 = no merge, 0.5 = every
  slot carries two channels) for each lookahead, on the scheduled order and on the arrival
  order; each cluster queue is fed C tokens at a time (``cols``), ``matcher_channels``
  channels per batch. Column use: the share of the column ports' 2 work units per slot that
  carry work (what the PE array's columns are busy with).
* Area (``--area``): ``kaleido_hw.flow.stdcell.synth_stdcell`` (the ``make synth`` method: OSU
  0.18 um standard cells, area in um2, OpenSTA path) of both blocks and of the reuse PE, in
  PE-equivalents.

Everything is exact and deterministic (golden model, fixed seeds).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from golden.dispatch.model import (MatcherParams, SchedulerParams, match, patterns_from_codes,
                                   popcount, schedule, work_units)
from kaleido_hw.config import KaleidoConfig


__all__ = ["entry_codes", "cluster_spread", "matcher_batches", "dispatch_stats", "run"]

DISPATCH_TOPS = ("cluster_scheduler", "merge_matcher")
#: Area reference: the reuse PE.
PE_TOP = "kaleido_pe"
#: Paper Table 2: 1.3 mm2 for 64 x 32 dispatchers, 25.1 mm2 for 128 x 128 arrays of 4 x 4 PEs.
PAPER_DISPATCHER_PE_EQUIV = (1.3 / (64 * 32)) / (25.1 / (128 * 128 * 16))
DEFAULT_PRESETS = ("hunyuanvideo", "wan2.1")
DEFAULT_LOOKAHEADS = (1, 2, 4, 8)


def entry_codes(codes: np.ndarray, followers: np.ndarray, width: int, entries: int) -> np.ndarray:
    """(B * entries, width) codes of the scheduler's entries, channel batch by channel batch
    (see the module docstring)."""
    d = codes.shape[1]
    out = []
    for g in range(d // width):
        chans = slice(g * width, (g + 1) * width)
        rows = codes[followers[:, chans].any(axis=1), chans]
        out.append(rows[:(len(rows) // entries) * entries])
    return np.concatenate(out) if out else np.zeros((0, width), dtype=np.uint8)


def cluster_spread(patterns: np.ndarray) -> float:
    """Mean pairwise Hamming distance within clusters; ``patterns`` is (..., Q) uint64."""
    q = patterns.shape[-1]
    if q < 2 or patterns.size == 0:
        return 0.0
    d = popcount(patterns[..., :, None] ^ patterns[..., None, :])
    return float(d.sum(axis=(-1, -2)).mean() / (q * (q - 1)))


def matcher_batches(codes: np.ndarray, capacity: int, cols: int, channels: int) -> np.ndarray:
    """Queue-ordered entry codes (B * E, W) -> matcher batches (n, cols, channels).

    Every ``capacity`` consecutive rows are one cluster queue; it is cut into groups of
    ``cols`` tokens (a short last group is padded with FULL tokens, which carry no work) and
    each group into ``channels``-wide slices.
    """
    total, width = codes.shape
    queues = codes.reshape(total // capacity, capacity, width)
    pad = (-capacity) % cols
    if pad:
        queues = np.concatenate(
            [queues, np.zeros((queues.shape[0], pad, width), dtype=codes.dtype)], axis=1)
    n, q, _ = queues.shape
    g = queues.reshape(n, q // cols, cols, width // channels, channels)
    return g.transpose(0, 1, 3, 2, 4).reshape(-1, cols, channels)


def dispatch_stats(codes: np.ndarray, followers: np.ndarray, config: KaleidoConfig,
                   lookaheads=DEFAULT_LOOKAHEADS) -> dict:
    """Spread and merge figures of one operand's reuse codes (N, d)."""
    sp = SchedulerParams.from_config(config)
    E, W, K, Q = sp.entries, sp.pattern_width, sp.clusters, sp.capacity
    ent = entry_codes(codes, followers, W, E)
    nb = len(ent) // E
    stats = {"entries": int(len(ent)), "batches": int(nb)}
    if nb == 0:
        return stats
    pats = patterns_from_codes(ent, W)[:, 0].reshape(nb, E)
    r = schedule(pats, sp)
    rows = np.arange(nb)[:, None]
    stats["spread_arrival"] = cluster_spread(pats.reshape(nb, K, Q))
    stats["spread_scheduled"] = cluster_spread(pats[rows, r.order].reshape(nb, K, Q))
    orders = {"arrival": ent, "scheduled": ent.reshape(nb, E, W)[rows, r.order].reshape(-1, W)}
    stats["matcher"] = {}
    for name, ordered in orders.items():
        batches = matcher_batches(ordered, Q, config.cols, config.matcher_channels)
        w = work_units(batches)
        nonempty = int(w.any(axis=1).sum())
        units = int(w.sum())
        per_l = {}
        for L in lookaheads:
            res = match(batches, MatcherParams(config.cols, config.matcher_channels, L,
                                               config.token_id_width))
            slots = int(res.slots.sum())
            per_l[int(L)] = {
                "slots": slots,
                "merged": int(res.merged.sum()),
                "slots_per_nonempty_channel": slots / max(nonempty, 1),
                "slots_per_channel": slots / max(w.shape[0] * w.shape[2], 1),
                "column_use": units / max(2 * config.cols * slots, 1),
            }
        stats["matcher"][name] = {"nonempty_channels": nonempty, "channels": int(w.shape[0] *
                                  w.shape[2]), "work_units": units, "lookahead": per_l}
    return stats


# -- CLI ----------------------------------------------------------------------------------------

def add_arguments(parser):
    """Options of ``kaleido-hw dispatch-report``."""
    parser.add_argument("--preset", action="append", metavar="NAME",
                        help=f"preset (repeatable; default: {', '.join(DEFAULT_PRESETS)})")
    parser.add_argument("--grid", default="hunyuanvideo-480p",
                        help="token grid: a golden.workloads.GRIDS name or TxHxW "
                             "(default: hunyuanvideo-480p, 33x30x45)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    parser.add_argument("--lookahead", type=int, action="append", metavar="L",
                        help="matcher lookahead (repeatable; default: 1 2 4 8)")
    parser.add_argument("--config", metavar="FILE", help="TOML KaleidoConfig (default: defaults)")
    parser.add_argument("--area", action="store_true",
                        help="also synthesize both blocks and the PE with yosys (about 40 s)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")


def run(args) -> int:
    """``kaleido-hw dispatch-report``: measure the dispatcher on synthetic heads, print tables."""
    from golden.numerics import ChannelGroups, follower_mask, reuse_masks
    from golden.workloads import grid_named, make_qkv

    config = KaleidoConfig.from_toml(args.config) if args.config else KaleidoConfig()
    presets = args.preset or list(DEFAULT_PRESETS)
    lookaheads = sorted(set(args.lookahead or DEFAULT_LOOKAHEADS))
    for L in lookaheads:
        if L < 1:
            raise ValueError(f"--lookahead must be at least 1, got {L}")
    grid = grid_named(args.grid)
    t0 = time.perf_counter()
    results = {"grid": str(grid), "seed": args.seed, "config": config.to_dict(),
               "workloads": {}}
    for preset in presets:
        qkv = make_qkv(preset, grid, seed=args.seed)
        groups = ChannelGroups.from_preset(preset)
        followers = follower_mask(grid, groups)
        for operand, x in (("q", qkv.q), ("k", qkv.k)):
            codes = reuse_masks(x, grid, groups, config.full_bits, config.half_bits)
            results["workloads"][f"{preset}/{operand}"] = dispatch_stats(
                codes, followers, config, lookaheads)
    if args.area:
        from kaleido_hw.flow.stdcell import synth_stdcell
        results["area"] = {}
        for top in (*DISPATCH_TOPS, PE_TOP):
            r = synth_stdcell(top, config)
            if r.area_um2 is None:
                raise ValueError(f"--area: synthesis of {top} failed: {'; '.join(r.notes)}")
            results["area"][top] = {"area_um2": r.area_um2, "cells": r.cells, "flipflops": r.ffs,
                                    "path_ns": r.path_ns, "power_mw": r.power_mw}
    results["seconds"] = round(time.perf_counter() - t0, 2)
    print(format_report(results, lookaheads))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def format_report(results: dict, lookaheads) -> str:
    """The dispatcher figures as readable tables."""
    cfg = results["config"]
    lines = [
        f"Data dispatcher on synthetic workloads: grid {results['grid']}, seed {results['seed']}, "
        f"batch {cfg['sched_entries']} x {cfg['sched_pattern_width']} bits -> "
        f"{cfg['sched_clusters']} clusters, matcher {cfg['cols']} tokens x "
        f"{cfg['matcher_channels']} channels",
        "",
        "Hamming spread within clusters (mean pairwise distance, bits)",
        f"{'workload':<20}{'entries':>9}{'no scheduler':>14}{'scheduler':>11}{'change':>9}",
    ]
    for name, s in results["workloads"].items():
        if not s.get("batches"):
            lines.append(f"{name:<20}{s['entries']:>9}   (fewer entries than one batch)")
            continue
        a, b = s["spread_arrival"], s["spread_scheduled"]
        lines.append(f"{name:<20}{s['entries']:>9}{a:>14.2f}{b:>11.2f}{(b - a) / a:>+9.1%}")
    ls = "".join(f"{'L=' + str(L):>9}" for L in lookaheads)
    lines += ["", "Merge efficiency: matcher slots per non-empty channel "
              "(1.000 = no merge, 0.500 = every slot merged)",
              f"{'workload':<20}{'order':<11}{ls}"]
    for name, s in results["workloads"].items():
        for order, m in s.get("matcher", {}).items():
            cells = "".join(f"{m['lookahead'][L]['slots_per_nonempty_channel']:>9.3f}"
                            for L in lookaheads)
            lines.append(f"{name:<20}{order:<11}{cells}")
    lines += ["", "Issue cycles per channel vs. dense (slots / all channels; all-FULL channels "
              "are skipped), and column-port use",
              f"{'workload':<20}{'order':<11}{'non-empty':>10}{ls}{'use@L=max':>11}"]
    for name, s in results["workloads"].items():
        for order, m in s.get("matcher", {}).items():
            cells = "".join(f"{m['lookahead'][L]['slots_per_channel']:>9.3f}"
                            for L in lookaheads)
            use = m["lookahead"][lookaheads[-1]]["column_use"]
            lines.append(f"{name:<20}{order:<11}{m['nonempty_channels'] / m['channels']:>10.1%}"
                         f"{cells}{use:>11.1%}")
    if "area" in results:
        area = results["area"]
        pe = area[PE_TOP]
        lines += ["", "Area (kaleido-hw synth method: OSU 0.18 um standard cells, OpenSTA path at "
                  "ports 0 ns from the clock edge, power at 100 MHz, activity 0.1)",
                  f"{'block':<20}{'area um2':>11}{'cells':>8}{'flip-flops':>12}{'path ns':>9}"
                  f"{'power mW':>10}{'PE-equiv':>10}"]
        for top, a in area.items():
            lines.append(f"{top:<20}{a['area_um2']:>11,.0f}{a['cells']:>8}{a['flipflops']:>12}"
                         f"{a['path_ns']:>9.2f}{a['power_mw']:>10.2f}"
                         f"{a['area_um2'] / pe['area_um2']:>10.2f}")
        lines.append(f"(PE-equiv: area / {PE_TOP} area. Paper Table 2: one "
                     f"dispatcher is {PAPER_DISPATCHER_PE_EQUIV:.1f} PE-equivalents; all 64 x 32 "
                     f"are 1.3 mm2 beside 25.1 mm2 of PE arrays, about 5%)")
    lines.append(f"\n({results['seconds']} s)")
    return "\n".join(lines)
