"""``kaleido-hw report`` (``make report``): plots and tables that reproduce the paper's figures.

Every report writes ``<name>.png`` (matplotlib, Agg), ``<name>.json`` (settings, rows, summary,
notes) and ``<name>.csv`` (the rows behind the plot) into the report folder, and a section of
``summary.md``. The numbers come from the golden model, never from guesses:

======================  ==========  ====================================================================
report                  paper       what
======================  ==========  ====================================================================
``reuse-vs-skip``       Fig. 9      attention-output MSE of channel-wise reuse and of the two skip
                                    baselines at the same saving ratio (``golden.quality``), per seed
                                    and preset
``thresholds``          Fig. 23     speedup (single-array cycle model) and attention-output PSNR for
                                    every (full_bits, half_bits)
``patterns``            Fig. 5      S of one head as a heat map; where each channel group reuses
                                    (FULL/HALF/NONE per token, frames side by side)
``motion``              Fig. 24     speedup and quality for low- and high-motion workloads
``array-size``          Fig. 21     speedup and PE utilization of one R x C array, 2x2 to 8x8
``area``                Table 2     standard-cell area (um2), path and power of ReusePE, BaselinePE and
                                    the dispatcher blocks (``kaleido_hw.flow.stdcell``; only with ``--area``
                                    or ``--only area``), plus the whole engine's breakdown when
                                    ``make synth-engine`` ran
``ablation``            Fig. 19     the multi-array engine's variants dense, pe, pe-sh, pe-m, full
                                    (``golden.engine.model``; same rows as ``kaleido-hw engine-report``)
``scaling``             Fig. 21/22  the engine on 1..64 arrays, and 2x2/4x4/8x8 arrays at 256 PEs
``dataflow``            issue 15    dataflow candidates of the engine (per-quad matcher in passes 1-3,
                                    per-row FIFOs, shapes, ...) against the ceiling of step-synchronous
                                    arrays (``golden.engine.dataflow``, ``docs/dataflow.md``)
``linear``              Fig. 20     linear layers with window reuse, alone and with attention
``attention``           Sec. 5.1    attention-output PSNR and cosine of the integer pipeline (vector
                                    unit softmax, ``P_q @ V_eff``) against float64, V reuse off/on,
                                    per preset (``kaleido_hw.reports.attention_report``)
``attention-length``    Sec. 5.1    the same against the head's length (256 to 16,384 tokens):
                                    section 14's P normalised per row against section 15's key
                                    blocks with a running maximum (``golden.vector.online``)
``head``                Fig. 18a    a whole head (S, softmax, P @ V) dense vs reuse on the same arrays:
                                    cycles per stage and the head's speedup
                                    (``kaleido_hw.reports.head_report``, ``golden.engine.head``)
``energy``              Fig. 19/18b energy per head of dense on plain arrays, dense, pe, pe-sh, pe-m,
                                    full (paper scale from stored counters, one head per preset, a
                                    linear layer): gate-level per-event PE energies x cycle-model
                                    counters + dispatcher, SRAM, DRAM (``golden.energy``,
                                    ``kaleido_hw.reports.energy_report``, ``docs/energy.md``)
``iso-area``            Sec. 7      S elements (and linear output elements) per ns per mm2 of dense on
                                    plain arrays (= 1), pe, pe-sh, pe-m, full, from the cycle models
                                    and the standard-cell area and period (``kaleido_hw.reports.iso_area``;
                                    only with ``--area`` or ``--only iso-area``; skipped when the
                                    flow is not installed)
======================  ==========  ====================================================================

Speedup is ``cycles(dense) / cycles(reuse)`` of the engine's cycle model on one R x C array
without the dispatcher (``golden.engine.model.engine_counters`` with one array, variants
``dense`` and ``pe``: the paper's Kaleido-pe) on the same data; PE utilization is
``busy PE-cycles / (R * C * cycles)``; hardware op reduction is ``1 - busy(reuse) /
busy(dense)``. The multi-array engine with the dispatcher is in ``ablation`` and ``scaling``.

``--workload FILE.npz`` (int8 ``q``, ``k``, optional ``v`` and ``scale``; shape (N, d) with
N = T*H*W of ``--grid`` and d the head_dim of ``--model``) runs every report that applies to one
head of the user's data. Sweeps are spread over ``--jobs`` processes, with a progress bar on
stderr.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from golden.checks import as_int8, check_tokens
from golden.engine.model import EngineParams, engine_counters
from golden.numerics import (AXES, FULL, GROUP_NAMES, HALF, NONE, PRESETS, ChannelGroups,
                             VideoGrid, follower_mask, reuse_masks)
from golden.quality import attention_quality
from golden.workloads import DEFAULTS, grid_named, make_qkv
from kaleido_hw.config import KaleidoConfig


__all__ = ["REPORTS", "Settings", "Source", "load_workload", "run_reports", "add_arguments",
           "run"]

#: The per-preset reports' presets (the issue's synthetic workloads).
DEFAULT_PRESETS = ("hunyuanvideo", "wan2.1", "cogvideox-5b")
#: Low and high motion of the ``motion`` report, tokens per frame along x (workload default 1).
MOTIONS = {"low": 0.5, "high": 4.0}
#: Square array sizes of the ``array-size`` report.
ARRAY_SIZES = (2, 4, 8)
#: Tops of the ``area`` report; ratios are taken against the plain MAC PE.
AREA_TOPS = ("kaleido_pe", "baseline_pe", "cluster_scheduler", "merge_matcher")
#: Quality budget: score elements evaluated per head (all query rows while N*N fits).
QUALITY_SCORES = 1 << 24
#: Tokens of S shown in the ``patterns`` heat map (the first ones, whole frames where possible).
S_TOKENS = 2048
#: Frames shown side by side in the ``patterns`` group maps.
MAP_FRAMES = 8
ENGINE_NOTE = ("This report measures one R x C array of the engine without the dispatcher "
               "(cycle model golden.engine.model.engine_counters, one array, variants dense and "
               "pe), dense and reuse on the same array "
               "and data; the multi-array engine with the dispatcher is in the ablation and "
               "scaling reports (Fig. 19, 21/22).")


# -- settings and workload sources ----------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """What the reports sweep.

    ``grid``: token grid of the synthetic workloads; ``presets``: presets of the per-preset
    reports; ``model``: preset of the single-head reports (thresholds, patterns); ``seeds``:
    seeds of ``reuse-vs-skip``; ``motion_seeds``: seeds per point of ``motion``; ``full_bits``,
    ``half_bits``, ``rows``, ``cols``: the operating point (KaleidoConfig defaults);
    ``max_tokens``: the cycle model runs on at most this many tokens (the first frames of a
    larger workload); ``jobs``: worker processes.
    """
    grid: VideoGrid
    presets: tuple[str, ...] = DEFAULT_PRESETS
    model: str = "hunyuanvideo"
    seeds: int = 20
    motion_seeds: int = 3
    full_bits: int = 5
    half_bits: int = 3
    rows: int = 4
    cols: int = 4
    max_tokens: int = 8192
    jobs: int = 2
    quick: bool = False

    @classmethod
    def make(cls, quick: bool = False, **changes) -> "Settings":
        """The default settings (``quick``: a smaller grid and fewer seeds, for tests and
        previews), with ``changes`` applied."""
        cfg = KaleidoConfig()
        base = cls(grid=grid_named("4x8x8" if quick else "8x16x16"), seeds=3 if quick else 20,
                   motion_seeds=1 if quick else 3, full_bits=cfg.full_bits,
                   half_bits=cfg.half_bits, rows=cfg.rows, cols=cfg.cols, quick=quick)
        return replace(base, **{k: v for k, v in changes.items() if v is not None})

    def as_dict(self) -> dict:
        """The settings as JSON-ready values (written into each report's JSON)."""
        return {"grid": str(self.grid), "presets": list(self.presets), "model": self.model,
                "seeds": self.seeds, "motion_seeds": self.motion_seeds,
                "full_bits": self.full_bits, "half_bits": self.half_bits, "rows": self.rows,
                "cols": self.cols, "max_tokens": self.max_tokens, "quick": self.quick}


@dataclass(frozen=True)
class Source:
    """One attention head: a synthetic workload (``golden.workloads.make_qkv(preset, grid,
    seed, motion=...)``) or the user's arrays (``arrays = (q, k, v or None, scale or None)``)."""
    preset: str
    grid: VideoGrid
    seed: int = 0
    motion: float = DEFAULTS["motion"]
    arrays: tuple | None = field(default=None, compare=False, repr=False)
    label: str = ""

    def load(self):
        """(q, k, v or None, scale or None)."""
        if self.arrays is not None:
            return self.arrays
        return _synthetic(self.preset, self.grid, self.seed, self.motion)

    def first_frames(self, max_tokens: int) -> "Source":
        """The head restricted to its first frames, at most ``max_tokens`` tokens (the cycle
        model's cost grows with N^2)."""
        if self.grid.n <= max_tokens:
            return self
        frame = self.grid.h * self.grid.w
        if frame > max_tokens:
            raise ValueError(f"--max-tokens must be at least one frame ({frame} tokens of grid "
                             f"{self.grid}) for the cycle model, got {max_tokens}")
        grid = VideoGrid(max_tokens // frame, self.grid.h, self.grid.w)
        q, k, v, scale = self.load()   # the first frames of this very head
        n = grid.n
        return replace(self, grid=grid, arrays=(q[:n], k[:n], None if v is None else v[:n],
                                                 scale))


@lru_cache(maxsize=4)
def _synthetic(preset: str, grid: VideoGrid, seed: int, motion: float):
    """A sweep asks for one workload many times in a row (one per threshold pair)."""
    w = make_qkv(preset, grid, seed=seed, motion=motion)
    return w.q, w.k, w.v, w.scale


def _calibrated_scale(q, k, logit_std: float = DEFAULTS["logit_std"]) -> float:
    """Softmax scale that gives the int8 scores of a sample of tokens a logit std of
    ``logit_std`` (as the synthetic workloads have), for a workload without ``scale``."""
    sample = np.linspace(0, q.shape[0] - 1, min(q.shape[0], 512)).astype(np.int64)
    s = q[sample].astype(np.float64) @ k[sample].astype(np.float64).T
    return logit_std / max(float(s.std()), 1e-12)


def load_workload(path, grid, preset: str) -> Source:
    """The user's head from ``path`` (.npz with int8 ``q``, ``k``, optional ``v``, ``scale``),
    checked against ``grid`` and the head_dim of ``preset``; ValueError names what is wrong."""
    if preset not in PRESETS:
        raise ValueError(f"--model must be one of {', '.join(sorted(PRESETS))}, got {preset!r}")
    grid = grid_named(grid)
    d = PRESETS[preset].head_dim
    what = "an .npz file with int8 arrays q and k of shape (N, d) (optionally v and scale)"
    try:
        data = np.load(path, allow_pickle=False)
        names = set(data.files)
    except (OSError, ValueError, AttributeError) as e:
        raise ValueError(f"--workload must be {what}; cannot read {path}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    missing = {"q", "k"} - names
    if missing:
        raise ValueError(f"--workload must be {what}; {path} lacks {', '.join(sorted(missing))} "
                         f"(has {', '.join(sorted(names)) or 'nothing'})")
    try:
        q, k = as_int8(data["q"], "q"), as_int8(data["k"], "k")
        for name, x in (("q", q), ("k", k)):
            check_tokens(x, name, grid.n, str(grid), d, f"head_dim of {preset}")
        v = None
        if "v" in names:
            v = as_int8(data["v"], "v")
            check_tokens(v, "v", grid.n, str(grid))
        scale = None
        if "scale" in names:
            scale = np.asarray(data["scale"])
            if scale.size != 1 or not np.issubdtype(scale.dtype, np.number):
                raise ValueError(f"scale must be one positive number, got {scale.dtype} "
                                 f"{scale.shape}")
            scale = float(scale.ravel()[0])
            if not math.isfinite(scale) or scale <= 0:
                raise ValueError(f"scale must be a positive finite number, got {scale}")
    except ValueError as e:
        raise ValueError(f"--workload {path}: {e}") from None
    if v is not None and scale is None:
        scale = _calibrated_scale(q, k)
    return Source(preset, grid, arrays=(q, k, v, scale), label=Path(path).name)


# -- tasks (module level, so that worker processes can run them) -----------------------------------

def cycles_task(source: Source, rows: int, cols: int, full_bits: int, half_bits: int,
                reuse: bool) -> dict:
    """Counters of one engine run on one R x C array without the dispatcher
    (``golden.engine.model.engine_counters``, variant ``pe``, or ``dense`` without reuse)."""
    q, k, _, _ = source.load()
    c = engine_counters(q, k, source.grid, ChannelGroups.from_preset(source.preset),
                        EngineParams(rows=rows, cols=cols, arrays=1),
                        "pe" if reuse else "dense", full_bits, half_bits)
    return {"cycles": int(c.cycles), "busy": int(c.busy_pe_cycles.sum())}


def quality_task(source: Source, full_bits: int, half_bits: int) -> dict:
    """``golden.attention_quality`` of one head (an even subset of the queries when large)."""
    q, k, v, scale = source.load()
    n = source.grid.n
    queries = n if n * n <= QUALITY_SCORES else max(1, QUALITY_SCORES // n)
    r = attention_quality(q, k, v, source.grid, ChannelGroups.from_preset(source.preset), scale,
                          full_bits, half_bits, queries=queries)
    return {"saving": r["saving"], "queries": r["queries"],
            **{f"{m}_{key}": r[m][key] for m in ("reuse", "skip_smallest", "skip_masks")
               for key in ("mse", "psnr", "cosine")}}


def _call(task):
    fn, args = task
    return fn(*args)


# -- progress and the process pool ---------------------------------------------------------------

class Progress:
    """A text progress bar on stderr: redrawn in place on a terminal, else a line every 5 s."""

    def __init__(self, label: str, total: int, stream=None):
        self.label, self.total, self.done = label, total, 0
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.start = self.last = time.monotonic()
        self._draw()

    def _draw(self, final: bool = False):
        elapsed = time.monotonic() - self.start
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(24 * frac) + "." * (24 - int(24 * frac))
        eta = f", ~{elapsed / frac - elapsed:.0f} s left" if 0 < frac < 1 and elapsed > 2 else ""
        text = f"  {self.label:<14} [{bar}] {self.done}/{self.total}  {elapsed:.0f} s{eta}"
        if self.tty:
            self.stream.write("\r" + text.ljust(78) + ("\n" if final else ""))
        else:   # a log file: a line every 5 s and the final one
            now = time.monotonic()
            if not final and now - self.last < 5:
                return
            self.last = now
            self.stream.write(text + "\n")
        self.stream.flush()

    def advance(self):
        """Count one finished task and redraw."""
        self.done += 1
        if self.done < self.total:
            self._draw()

    def close(self):
        """Draw the final state (100 %) and end the line."""
        self._draw(final=True)


#: Worker processes use one BLAS thread each: the tasks are many and mostly small, and
#: ``jobs`` processes already fill the cores (measured 1.4x to 3x faster on 2 cores).
_WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class Pool:
    """Runs tasks ``(fn, args)`` on ``jobs`` processes (in this process when 1), in order.

    Workers are spawned (not forked) with :data:`_WORKER_ENV`, which numpy reads when a
    worker imports it; this process's own BLAS is untouched.
    """

    def __init__(self, jobs: int):
        self.jobs = jobs
        self._executor = None

    def map(self, tasks: list, label: str) -> list:
        """Run every ``(fn, args)`` of ``tasks`` with a progress bar named ``label``; the
        results in task order."""
        progress = Progress(label, len(tasks))
        results = [None] * len(tasks)
        if self.jobs <= 1 or len(tasks) <= 1:
            for i, t in enumerate(tasks):
                results[i] = _call(t)
                progress.advance()
        else:
            if self._executor is None:
                import multiprocessing
                self._executor = ProcessPoolExecutor(
                    max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"))
            saved = {k: os.environ.get(k) for k in _WORKER_ENV}
            os.environ.update(_WORKER_ENV)   # workers start during submit()
            try:
                futures = {self._executor.submit(_call, t): i for i, t in enumerate(tasks)}
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            for f in as_completed(futures):
                results[futures[f]] = f.result()
                progress.advance()
        progress.close()
        return results

    def close(self):
        """Stop the worker processes (pending tasks are cancelled)."""
        if self._executor is not None:
            self._executor.shutdown(cancel_futures=True)


class Context:
    """Settings, the pool, and the dense-run cache shared by the reports (a dense run depends
    only on the grid, the channel groups and the array size)."""

    def __init__(self, settings: Settings, pool: Pool, workload: Source | None = None):
        self.settings, self.pool, self.workload = settings, pool, workload
        self._dense: dict = {}
        self.notes: list[str] = []   # moved into the current report's notes
        self.memo: dict = {}         # results one report leaves for a later one (iso-area)

    def speedups(self, points: list, label: str) -> list[dict]:
        """Cycle-model figures of ``points`` = [(source, rows, cols, full_bits, half_bits)]."""
        cropped = {}
        for s, *_ in points:
            if s.grid.n > self.settings.max_tokens and s.grid not in cropped:
                cropped[s.grid] = s.first_frames(self.settings.max_tokens).grid
        for full, part in cropped.items():
            note = (f"The cycle model ran on the first {part.t} frames ({part}) of {full} "
                    f"(--max-tokens {self.settings.max_tokens}; its cost grows with N^2).")
            if note not in self.notes:
                self.notes.append(note)
        points = [(s.first_frames(self.settings.max_tokens), r, c, fb, hb)
                  for s, r, c, fb, hb in points]
        keys = {}
        for s, r, c, _, _ in points:
            key = (s.preset, str(s.grid), r, c)
            if key not in self._dense and key not in keys:
                keys[key] = (cycles_task, (s, r, c, self.settings.full_bits,
                                           self.settings.half_bits, False))
        tasks = list(keys.values()) + [(cycles_task, (s, r, c, fb, hb, True))
                                       for s, r, c, fb, hb in points]
        results = self.pool.map(tasks, label)
        self._dense.update(zip(keys, results[:len(keys)]))
        out = []
        for (s, r, c, _, _), reuse in zip(points, results[len(keys):]):
            dense = self._dense[(s.preset, str(s.grid), r, c)]
            out.append({
                "cycle_grid": str(s.grid),
                "cycles_dense": dense["cycles"], "cycles_reuse": reuse["cycles"],
                "speedup": dense["cycles"] / reuse["cycles"],
                "utilization_reuse": reuse["busy"] / (r * c * reuse["cycles"]),
                "utilization_dense": dense["busy"] / (r * c * dense["cycles"]),
                "hw_op_reduction": 1.0 - reuse["busy"] / dense["busy"],
            })
        return out

    def qualities(self, points: list, label: str) -> list[dict]:
        """Quality figures of ``points`` = [(source, full_bits, half_bits)]."""
        return self.pool.map([(quality_task, p) for p in points], label)


# -- results and files ---------------------------------------------------------------------------

@dataclass
class Result:
    """What one report produced: rows (CSV), a summary, figures, notes and a markdown table."""
    name: str
    rows: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)      # file suffix ("" or "-x") -> figure
    notes: list[str] = field(default_factory=list)
    table: str = ""
    lines: list[str] = field(default_factory=list)   # printed on stdout
    extra_files: dict = field(default_factory=dict)  # file name -> writer(path)
    skipped: str | None = None


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def _fmt(x, spec=".3g"):
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "exact" if x > 0 else "-inf"
    return format(x, spec)


def _md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


# -- the reports ---------------------------------------------------------------------------------

def _workload_sources(ctx: Context, presets=None, seeds: int = 1, motion=None) -> list[Source]:
    if ctx.workload is not None:
        return [ctx.workload]
    m = DEFAULTS["motion"] if motion is None else motion
    return [Source(p, ctx.settings.grid, seed, m, label=f"{p} seed {seed}")
            for p in (presets or ctx.settings.presets) for seed in range(seeds)]


def report_reuse_vs_skip(ctx: Context, plt) -> Result:
    """Fig. 9: attention-output MSE of channel-wise reuse against the two skip baselines at
    the same saving ratio, over the seeds."""
    s = ctx.settings
    r = Result("reuse-vs-skip")
    if ctx.workload is not None and ctx.workload.arrays[2] is None:
        r.skipped = "the workload has no v (the attention output needs V)"
        return r
    sources = _workload_sources(ctx, seeds=s.seeds)
    quality = ctx.qualities([(src, s.full_bits, s.half_bits) for src in sources], r.name)
    for src, qa in zip(sources, quality):
        r.rows.append({"preset": src.preset, "workload": src.label, "seed": src.seed,
                       "grid": str(src.grid), **qa})
    presets = list(dict.fromkeys(row["preset"] for row in r.rows))
    table = []
    for p in presets:
        rows = [row for row in r.rows if row["preset"] == p]
        mse = {m: float(np.mean([row[f"{m}_mse"] for row in rows]))
               for m in ("reuse", "skip_smallest", "skip_masks")}
        ratio = {}
        for m in ("skip_smallest", "skip_masks"):
            logs = [math.log(max(row[f"{m}_mse"] / row["reuse_mse"], 1e-300))
                    for row in rows if row["reuse_mse"] > 0]
            ratio[m] = math.exp(float(np.mean(logs))) if logs else math.inf
        wins = sum(row["reuse_mse"] < min(row["skip_smallest_mse"], row["skip_masks_mse"])
                   for row in rows)
        saving = float(np.mean([row["saving"] for row in rows]))
        r.summary[p] = {"heads": len(rows), "saving": saving, "mean_mse": mse,
                        "geomean_mse_ratio": ratio, "reuse_best": wins}
        table.append([p, len(rows), f"{100 * saving:.1f}%", _fmt(mse["reuse"]),
                      _fmt(mse["skip_smallest"]), _fmt(mse["skip_masks"]),
                      f"{_fmt(ratio['skip_smallest'], '.1f')}x / "
                      f"{_fmt(ratio['skip_masks'], '.1f')}x",
                      f"{wins}/{len(rows)}"])
        r.lines.append(f"{p}: mean MSE reuse {_fmt(mse['reuse'])}, skip-smallest "
                       f"{_fmt(mse['skip_smallest'])}, skip-masks {_fmt(mse['skip_masks'])} at "
                       f"{100 * saving:.1f}% saving; reuse best on {wins}/{len(rows)} heads")
    r.table = _md_table(["preset", "heads", "saving", "MSE reuse", "MSE skip smallest",
                         "MSE skip masks", "MSE ratio (geomean)", "reuse best"], table)
    fig, axes = plt.subplots(1, len(presets), figsize=(4.2 * len(presets) + 0.6, 3.8),
                             squeeze=False, sharey=True)
    styles = (("reuse", "channel-wise reuse", "tab:green", "o"),
              ("skip_smallest", "skip smallest |S|", "tab:orange", "s"),
              ("skip_masks", "skip with the same masks", "tab:red", "^"))
    for ax, p in zip(axes[0], presets):
        rows = [row for row in r.rows if row["preset"] == p]
        x = np.arange(len(rows))
        for key, label, color, marker in styles:
            ax.semilogy(x, [row[f"{key}_mse"] for row in rows], marker, color=color,
                        label=label, ms=5)
        ax.set_title(f"{p}: saving {100 * r.summary[p]['saving']:.0f}%", fontsize=10)
        ax.set_xlabel("workload seed" if ctx.workload is None else ctx.workload.label)
        ax.set_xticks(x if len(x) <= 10 else x[::max(1, len(x) // 10)])
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("attention-output MSE (V LSB^2)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Reuse vs skipping at the same saving ratio (Fig. 9), grid "
                 f"{sources[0].grid}, full/half bits {s.full_bits}/{s.half_bits}", fontsize=10)
    fig.tight_layout()
    r.figures[""] = fig
    return r


def report_thresholds(ctx: Context, plt) -> Result:
    """Fig. 23: speedup (cycle model) and attention-output PSNR versus full_bits and
    half_bits."""
    s = ctx.settings
    r = Result("thresholds")
    src = ctx.workload or Source(s.model, s.grid, 0, label=f"{s.model} seed 0")
    pairs = [(fb, hb) for fb in range(1, 8) for hb in range(fb)]
    speed = ctx.speedups([(src, s.rows, s.cols, fb, hb) for fb, hb in pairs],
                         f"{r.name}: cycles")
    has_v = src.load()[2] is not None
    quality = (ctx.qualities([(src, fb, hb) for fb, hb in pairs], f"{r.name}: quality")
               if has_v else [{} for _ in pairs])
    if not has_v:
        r.notes.append("The workload has no v: PSNR is not computed.")
    for (fb, hb), sp, qa in zip(pairs, speed, quality):
        r.rows.append({"full_bits": fb, "half_bits": hb, "rows": s.rows, "cols": s.cols, **sp,
                       "oracle_reduction": qa.get("saving"), "psnr": qa.get("reuse_psnr"),
                       "mse": qa.get("reuse_mse")})
    default = next(row for row in r.rows
                   if (row["full_bits"], row["half_bits"]) == (s.full_bits, s.half_bits))
    r.summary = {"default": default, "cycle_grid": default["cycle_grid"],
                 "max_speedup": max(row["speedup"] for row in r.rows)}
    psnr = ("n/a (no v)" if default["mse"] is None else
            "exact" if default["mse"] == 0 else f"{default['psnr']:.1f} dB")
    r.lines.append(f"default full/half bits {s.full_bits}/{s.half_bits}: speedup "
                   f"{default['speedup']:.3f}x on {s.rows}x{s.cols}, PSNR {psnr}; best "
                   f"speedup {r.summary['max_speedup']:.3f}x")
    r.table = _md_table(
        ["full_bits \\ half_bits"] + [str(h) for h in range(7)],
        [[fb] + [next((f"{row['speedup']:.2f}x" + ("" if row["mse"] is None else
                                                   ", exact" if row["mse"] == 0 else
                                                   f", {row['psnr']:.0f} dB")
                       for row in r.rows if row["full_bits"] == fb and row["half_bits"] == hb),
                      "") for hb in range(7)] for fb in range(1, 8)])
    panels = [("speedup", f"speedup over dense, {s.rows}x{s.cols} array (x)", "viridis",
               "{:.2f}")]
    if has_v:
        panels += [("oracle_reduction", "oracle QK^T op reduction", "cividis", "{:.0%}"),
                   ("psnr", "attention-output PSNR (dB)", "magma", "{:.0f}")]
    flat = all(len({round(row["speedup"], 9) for row in r.rows if row["full_bits"] == fb}) == 1
               for fb in range(1, 8))
    if flat:
        what = ("changes neither the cycles nor the PSNR" if has_v else
                "does not change the cycles")
        r.notes.append(f"half_bits {what} here: a HALF product is exact and still takes its PE "
                       "step in the array's schedule; it saves multiplier work (the oracle's "
                       "half-cost ops), not cycles.")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 4.4), squeeze=False)
    for ax, (key, label, cmap, text) in zip(axes[0], panels):
        grid = np.full((7, 7), np.nan)
        for row in r.rows:
            v = row[key]
            grid[row["half_bits"], row["full_bits"] - 1] = np.nan if v is None or \
                not math.isfinite(v) else v
        im = ax.imshow(grid, origin="lower", cmap=cmap, aspect="auto")
        for row in r.rows:
            v = row[key]
            exact = v is not None and math.isinf(v)
            light = exact or im.norm(v) > 0.6
            ax.text(row["full_bits"] - 1, row["half_bits"], "exact" if exact else text.format(v),
                    ha="center", va="center", fontsize=7, color="black" if light else "white")
        ax.add_patch(plt.Rectangle((s.full_bits - 1.5, s.half_bits - 0.5), 1, 1, fill=False,
                                   edgecolor="red", linewidth=2))
        ax.set_xticks(range(7), [str(f) for f in range(1, 8)])
        ax.set_yticks(range(7), [str(h) for h in range(7)])
        ax.set_xlabel("full_bits (FULL: top 1+full_bits bits equal)", fontsize=8)
        ax.set_ylabel("half_bits (HALF: top 1+half_bits bits equal)", fontsize=8)
        ax.set_title(label, fontsize=10)
        fig.colorbar(im, ax=ax, shrink=0.85)
    fig.suptitle(f"Threshold sensitivity (Fig. 23): {src.label or src.preset}, cycle grid "
                 f"{default['cycle_grid']}, {s.rows}x{s.cols} array (red: default)", fontsize=10)
    fig.tight_layout()
    r.figures[""] = fig
    return r


def _group_shares(masks: np.ndarray, fol: np.ndarray, chans: np.ndarray) -> np.ndarray:
    """(N, 3) shares of FULL, HALF, NONE over a group's channels per token (NaN where the token
    is not a follower in this group)."""
    m, f = masks[:, chans], fol[:, chans]
    nf = f.sum(axis=1)
    out = np.full((masks.shape[0], 3), np.nan)
    ok = nf > 0
    for i, code in enumerate((FULL, HALF, NONE)):
        out[ok, i] = ((m == code) & f).sum(axis=1)[ok] / nf[ok]
    return out


def report_patterns(ctx: Context, plt) -> Result:
    """Fig. 5: the scores S of one head as a heat map, and per channel group where tokens
    reuse (FULL/HALF/NONE maps over the token grid)."""
    s = ctx.settings
    r = Result("patterns")
    src = ctx.workload or Source(s.model, s.grid, 0, label=f"{s.model} seed 0")
    q, k, _, _ = src.load()
    grid, groups = src.grid, ChannelGroups.from_preset(src.preset)
    frame = grid.h * grid.w
    # Whole frames where one fits, so that the frame blocks of S show.
    n_s = min(grid.n, (S_TOKENS // frame) * frame if frame <= S_TOKENS else S_TOKENS)
    scores = q[:n_s].astype(np.int64) @ k[:n_s].astype(np.int64).T
    fol = follower_mask(grid, groups)
    shares = {}
    for name, x in (("q", q), ("k", k)):
        masks = reuse_masks(x, grid, groups, s.full_bits, s.half_bits)
        for g in range(3):
            ch = groups.channels(g)
            if ch.size:
                shares[(name, g)] = _group_shares(masks, fol, ch)
    frames = min(grid.t, MAP_FRAMES)
    coords = grid.coords()
    for (name, g), sh in shares.items():   # the rows behind the maps: the frames shown
        for n in np.flatnonzero(~np.isnan(sh[:, 0]) & (coords[:, 0] < frames)):
            r.rows.append({"operand": name, "group": GROUP_NAMES[g],
                           "direction": AXES[groups.directions[g]], "token": int(n),
                           "t": int(coords[n, 0]), "y": int(coords[n, 1]),
                           "x": int(coords[n, 2]), "full": sh[n, 0], "half": sh[n, 1],
                           "none": sh[n, 2]})
    table = []
    for (name, g), sh in shares.items():
        ok = ~np.isnan(sh[:, 0])
        mean = sh[ok].mean(axis=0) if ok.any() else np.zeros(3)
        r.summary[f"{name}/{GROUP_NAMES[g]}"] = {
            "channels": int(groups.channels(g).size), "direction": AXES[groups.directions[g]],
            "follower_tokens": int(ok.sum()), "full": mean[0], "half": mean[1], "none": mean[2]}
        table.append([name.upper(), GROUP_NAMES[g], AXES[groups.directions[g]],
                      int(groups.channels(g).size), f"{100 * mean[0]:.1f}%",
                      f"{100 * mean[1]:.1f}%", f"{100 * mean[2]:.1f}%"])
    r.summary["S"] = {"tokens": n_s, "min": int(scores.min()), "max": int(scores.max()),
                      "file": "patterns-S.npz"}
    r.table = _md_table(["operand", "group", "reuses along", "channels", "FULL", "HALF", "NONE"],
                        table)
    r.lines.append(f"{src.label or src.preset}: S of the first {n_s} tokens; follower shares "
                   + ", ".join(f"{k} FULL {100 * v['full']:.0f}%" for k, v in r.summary.items()
                               if k != "S"))
    r.extra_files["patterns-S.npz"] = lambda path: np.savez_compressed(
        path, S=scores.astype(np.int32), tokens=np.arange(n_s), grid=np.array(grid.shape))

    fig, ax = plt.subplots(figsize=(9, 7.8))
    peak = max(1, int(np.abs(scores).max()))
    im = ax.imshow(scores, cmap="RdBu_r", vmin=-peak, vmax=peak,
                   interpolation="antialiased" if n_s > 600 else "nearest")
    if frame < n_s:
        ticks = np.arange(0, n_s, frame)
        ax.set_xticks(ticks, [f"t{i}" for i in range(len(ticks))], fontsize=7)
        ax.set_yticks(ticks, [f"t{i}" for i in range(len(ticks))], fontsize=7)
    ax.set_xlabel("key token (frame starts marked)")
    ax.set_ylabel("query token")
    ax.set_title(f"S = Q K^T of one head (Fig. 5): {src.label or src.preset}, grid {grid}, "
                 f"first {n_s} tokens", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8, label="int8 score")
    fig.tight_layout()
    r.figures[""] = fig

    # One panel per group (rows) and operand (columns): three strips (FULL, HALF, NONE), each
    # the share of the group's channels with that code, over the group's follower tokens only
    # (every second token along the pairing axis), frames side by side.
    h, w = grid.h, grid.w
    fig, axes = plt.subplots(3, 2, squeeze=False, layout="constrained",
                             figsize=(min(16.0, max(9.0, 0.06 * 2 * frames * (w + 1) + 3)),
                                      1.2 + 3 * (0.7 + 0.06 * (3 * h + 2))))
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    im = None
    for (name, g), sh in shares.items():
        ax = axes[g, 0 if name == "q" else 1]
        axis = groups.directions[g]
        maps = sh.reshape(grid.t, h, w, 3)
        idx = [slice(None)] * 3
        idx[axis] = slice(1, 2 * (grid.shape[axis] // 2), 2)
        maps = maps[tuple(idx)]
        times = np.arange(grid.t)[idx[0]][:frames if axis else max(1, frames // 2)]
        fh, fw = maps.shape[1], maps.shape[2]
        width = len(times) * (fw + 1) - 1
        img = np.full((3 * fh + 2, max(width, 1)), np.nan)
        for c in range(3):
            for i in range(len(times)):
                y0, x0 = c * (fh + 1), i * (fw + 1)
                img[y0:y0 + fh, x0:x0 + fw] = maps[i, :, :, c]
        im = ax.imshow(img, cmap=cmap, vmin=0, vmax=1, interpolation="nearest", aspect="equal")
        ax.set_xticks([i * (fw + 1) + fw / 2 - 0.5 for i in range(len(times))],
                      [f"t={t}" for t in times], fontsize=7)
        ax.set_yticks([c * (fh + 1) + fh / 2 - 0.5 for c in range(3)], ["FULL", "HALF", "NONE"],
                      fontsize=7)
        half = {0: "odd frames", 1: "odd rows", 2: "odd columns"}[axis]
        ax.set_title(f"{name.upper()}, {GROUP_NAMES[g]}-group ({groups.channels(g).size} ch.), "
                     f"pairs along {AXES[axis]}: followers = {half}", fontsize=8, loc="left")
    for g in range(3):
        for col in range(2):
            if not axes[g, col].images:
                axes[g, col].set_visible(False)
    if im is not None:
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.5, pad=0.01,
                     label="share of the group's channels")
    fig.suptitle(f"Where each channel group reuses (Fig. 5): {src.label or src.preset}, grid "
                 f"{grid}, full/half bits {s.full_bits}/{s.half_bits}", fontsize=9)
    r.figures["-groups"] = fig
    return r


def report_motion(ctx: Context, plt) -> Result:
    """Fig. 24: speedup and quality for low- and high-motion workloads."""
    s = ctx.settings
    r = Result("motion")
    if ctx.workload is not None:
        r.skipped = ("needs synthetic workloads of known motion (a user workload has one, "
                     "unknown motion)")
        return r
    sources = [Source(p, s.grid, seed, m, label=f"{p} {cls} motion seed {seed}")
               for p in s.presets for cls, m in MOTIONS.items() for seed in range(s.motion_seeds)]
    speed = ctx.speedups([(src, s.rows, s.cols, s.full_bits, s.half_bits) for src in sources],
                         f"{r.name}: cycles")
    quality = ctx.qualities([(src, s.full_bits, s.half_bits) for src in sources],
                            f"{r.name}: quality")
    for src, sp, qa in zip(sources, speed, quality):
        cls = next(c for c, m in MOTIONS.items() if m == src.motion)
        r.rows.append({"preset": src.preset, "motion": cls, "tokens_per_frame": src.motion,
                       "seed": src.seed, **sp, "oracle_reduction": qa["saving"],
                       "psnr": qa["reuse_psnr"], "mse": qa["reuse_mse"]})
    table = []
    for p in s.presets:
        for cls in MOTIONS:
            rows = [row for row in r.rows if row["preset"] == p and row["motion"] == cls]
            agg = {key: float(np.mean([row[key] for row in rows]))
                   for key in ("speedup", "psnr", "oracle_reduction", "utilization_reuse")}
            agg["speedup_std"] = float(np.std([row["speedup"] for row in rows]))
            agg["psnr_std"] = float(np.std([row["psnr"] for row in rows]))
            r.summary.setdefault(p, {})[cls] = agg
            table.append([p, f"{cls} ({MOTIONS[cls]} tok/frame)", f"{agg['speedup']:.3f}x",
                          f"{agg['psnr']:.1f}", f"{100 * agg['oracle_reduction']:.1f}%",
                          f"{100 * agg['utilization_reuse']:.1f}%"])
        lo, hi = r.summary[p]["low"], r.summary[p]["high"]
        r.lines.append(f"{p}: speedup {lo['speedup']:.3f}x (low) vs {hi['speedup']:.3f}x (high), "
                       f"PSNR {lo['psnr']:.1f} vs {hi['psnr']:.1f} dB")
    r.table = _md_table(["preset", "motion", "speedup", "PSNR dB", "oracle reduction",
                         "PE utilization"], table)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    x = np.arange(len(s.presets))
    for i, (cls, color) in enumerate(zip(MOTIONS, ("tab:blue", "tab:orange"))):
        for ax, key in zip(axes, ("speedup", "psnr")):
            vals = [r.summary[p][cls][key] for p in s.presets]
            err = [r.summary[p][cls][f"{key}_std"] for p in s.presets]
            ax.bar(x + (i - 0.5) * 0.38, vals, 0.38, yerr=err if s.motion_seeds > 1 else None,
                   color=color, label=f"{cls} motion ({MOTIONS[cls]} tokens/frame)", capsize=3)
    axes[0].set_ylabel(f"speedup over dense, {s.rows}x{s.cols} array (x)")
    axes[0].axhline(1.0, color="gray", lw=0.8)
    lo = min(r.summary[p][c]["speedup"] for p in s.presets for c in MOTIONS)
    axes[0].set_ylim(min(1.0, lo) - 0.02, None)
    axes[1].set_ylabel("attention-output PSNR (dB)")
    for ax in axes:
        ax.set_xticks(x, s.presets)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Fast vs slow motion (Fig. 24): grid {s.grid}, {s.motion_seeds} seed(s) per "
                 f"bar, full/half bits {s.full_bits}/{s.half_bits}", fontsize=10)
    fig.tight_layout()
    r.figures[""] = fig
    return r


def report_array_size(ctx: Context, plt) -> Result:
    """Fig. 21 for one array: speedup of the engine's cycle model on one array without the
    dispatcher versus the array's size (2x2, 4x4, 8x8)."""
    s = ctx.settings
    r = Result("array-size")
    sources = ([ctx.workload] if ctx.workload is not None else
               [Source(p, s.grid, 0, label=f"{p} seed 0") for p in s.presets])
    points = [(src, n, n, s.full_bits, s.half_bits) for src in sources for n in ARRAY_SIZES]
    speed = ctx.speedups(points, r.name)
    for (src, n, _, _, _), sp in zip(points, speed):
        r.rows.append({"preset": src.preset, "workload": src.label, "rows": n, "cols": n, **sp,
                       "pe_cycles_reuse": n * n * sp["cycles_reuse"]})
    r.notes.append(ENGINE_NOTE)
    table = []
    for src in sources:
        rows = [row for row in r.rows if row["workload"] == src.label]
        r.summary[src.label] = {f"{row['rows']}x{row['cols']}": {
            k: row[k] for k in ("speedup", "utilization_reuse", "utilization_dense",
                                "hw_op_reduction")} for row in rows}
        for row in rows:
            table.append([src.label, f"{row['rows']}x{row['cols']}", row["cycles_dense"],
                          row["cycles_reuse"], f"{row['speedup']:.3f}x",
                          f"{100 * row['utilization_reuse']:.1f}%",
                          f"{100 * row['utilization_dense']:.1f}%",
                          f"{100 * row['hw_op_reduction']:.1f}%"])
        r.lines.append(f"{src.label}: speedup " + ", ".join(
            f"{row['rows']}x{row['cols']} {row['speedup']:.3f}x "
            f"(util {100 * row['utilization_reuse']:.0f}%)" for row in rows))
    r.table = _md_table(["workload", "array", "cycles dense", "cycles reuse", "speedup",
                         "PE util. reuse", "PE util. dense", "hw op reduction"], table)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for src in sources:
        rows = [row for row in r.rows if row["workload"] == src.label]
        sizes = [row["rows"] for row in rows]
        line, = axes[0].plot(sizes, [row["speedup"] for row in rows], "o-", label=src.preset)
        axes[1].plot(sizes, [100 * row["utilization_reuse"] for row in rows], "o-",
                     color=line.get_color(), label=src.preset)
    axes[0].set_ylabel("speedup over dense on the same array (x)")
    axes[1].set_ylabel("PE utilization with reuse (%)")
    reductions = sorted({f"{100 * row['hw_op_reduction']:.1f}%" for row in r.rows})
    axes[1].set_title(f"busy / (R*C*cycles); hardware op reduction {', '.join(reductions)} "
                      f"at every size", fontsize=8)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ARRAY_SIZES, [f"{n}x{n}" for n in ARRAY_SIZES])
        ax.set_xlabel("PEs per array (one array)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Per-array size, one array (Fig. 21): cycle grid {speed[0]['cycle_grid']}; "
                 f"multi-array scaling and the ablation come with the engine issue", fontsize=9)
    fig.tight_layout()
    r.figures[""] = fig
    return r


def _engine_heads(ctx: Context):
    """Heads of the engine reports: the user's workload or one synthetic head per preset,
    limited to ``--max-tokens`` like the other cycle-model reports (built once per run; the
    note on cropped heads goes to every report that uses them, once)."""
    from kaleido_hw.reports.engine_report import Head
    if "heads" not in ctx.memo:
        s = ctx.settings
        srcs = ([ctx.workload] if ctx.workload is not None else
                [Source(p, s.grid, 0, label=f"{p} seed 0") for p in s.presets])
        heads, notes = [], []
        for src in srcs:
            part = src.first_frames(s.max_tokens)
            if part.grid != src.grid:
                notes.append(f"The engine model ran on the first {part.grid.t} frames "
                             f"({part.grid}) of {src.grid} (--max-tokens {s.max_tokens}).")
            q, k = part.load()[:2]
            heads.append(Head(part.preset, part.grid, q, k))
        ctx.memo["heads"] = heads, notes
    heads, notes = ctx.memo["heads"]
    for note in notes:
        if note not in ctx.notes:       # one note per cropped grid, not per head or call
            ctx.notes.append(note)
    return heads


def _engine_config(ctx: Context) -> KaleidoConfig:
    s = ctx.settings
    return replace(KaleidoConfig(), rows=s.rows, cols=s.cols, full_bits=s.full_bits,
                   half_bits=s.half_bits)


def _ablation_rows(ctx: Context, cfg: KaleidoConfig) -> list[dict]:
    """The ablation rows of the report's heads (computed once per run)."""
    from kaleido_hw.reports.engine_report import ablation
    if "ablation" not in ctx.memo:
        ctx.memo["ablation"] = ablation(_engine_heads(ctx), cfg.engine_arrays, cfg)
    return ctx.memo["ablation"]


def _plain_cycles(ctx: Context, cfg: KaleidoConfig) -> dict:
    """``{(preset, grid): cycles}`` of the plain build on the report's heads: the dense
    schedule over all channels as one group walked along x (``golden.engine.model.plain_walk``,
    the schedule the ``engine_pe = "plain"`` engine runs), not the grouped walk of the
    ablation's dense row (computed once per run)."""
    from golden.engine.model import plain_walk
    from kaleido_hw.engine.kaleido_engine import plain_config
    from kaleido_hw.reports.engine_report import base_params
    if "plain" not in ctx.memo:
        params = base_params(plain_config(cfg), arrays=cfg.engine_arrays)
        ctx.memo["plain"] = {
            (h.preset, str(h.grid)): int(engine_counters(
                h.q, h.k, h.grid, plain_walk(h.groups), params, "dense").cycles)
            for h in _engine_heads(ctx)}
    return ctx.memo["plain"]


def _linear_result(ctx: Context) -> dict:
    """``linear_figures`` at the report's settings (computed once per run)."""
    from kaleido_hw.reports.linear_report import linear_figures
    st = ctx.settings
    if "linear" not in ctx.memo:
        ctx.memo["linear"] = linear_figures(
            None, grid=st.grid, heads=2 if st.quick else 4, rows=st.rows, cols=st.cols,
            full_bits=st.full_bits, half_bits=st.half_bits)
    return ctx.memo["linear"]


def report_ablation(ctx: Context, plt) -> Result:
    """Fig. 19: every engine variant per preset on the configured P arrays."""
    from golden.engine.model import VARIANTS
    from kaleido_hw.reports.engine_report import format_table, targets
    cfg = _engine_config(ctx)
    r = Result("ablation")
    r.rows = ablation_rows = _ablation_rows(ctx, cfg)
    r.table = format_table(ablation_rows)
    r.lines = targets(ablation_rows)
    r.notes.append(f"KaleidoEngine cycle model (golden.engine.model.engine_counters), "
                   f"{cfg.engine_arrays} arrays of {cfg.rows}x{cfg.cols}; speedup = dense "
                   f"cycles / cycles on the same hardware; kaleido-hw engine-report prints "
                   f"the same table (and --paper the 720p head on 16,384 arrays).")
    for row in ablation_rows:
        r.summary.setdefault(row["preset"], {})[row["variant"]] = {
            k: row[k] for k in ("speedup", "utilization", "hw_op_reduction", "hw_of_oracle")}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    heads = list(dict.fromkeys(row["preset"] for row in ablation_rows))
    width = 0.8 / max(len(heads), 1)
    x = np.arange(len(VARIANTS))
    for i, preset in enumerate(heads):
        rows = {row["variant"]: row for row in ablation_rows if row["preset"] == preset}
        axes[0].bar(x + i * width, [rows[v]["speedup"] for v in VARIANTS], width, label=preset)
        axes[1].bar(x + i * width, [100 * rows[v]["utilization"] for v in VARIANTS], width,
                    label=preset)
    axes[0].set_ylabel("speedup over dense (x)")
    axes[1].set_ylabel("PE utilization (%)")
    for ax in axes:
        ax.set_xticks(x + 0.4 - width / 2, VARIANTS)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Ablation (Fig. 19): {cfg.engine_arrays} x {cfg.rows}x{cfg.cols} arrays, "
                 f"grid {ablation_rows[0]['grid']}", fontsize=10)
    fig.tight_layout()
    r.figures[""] = fig
    return r


def report_scaling(ctx: Context, plt) -> Result:
    """Fig. 21/22: the engine on 1..64 arrays, and 2x2/4x4/8x8 arrays at 256 PEs."""
    from kaleido_hw.reports.engine_report import format_table, scaling
    cfg = _engine_config(ctx)
    r = Result("scaling")
    head = _engine_heads(ctx)[0]
    r.rows = scaling(head, cfg)
    r.table = format_table(r.rows)
    r.notes.append("KaleidoEngine cycle model: arrays 1..64 of 4x4, and 2x2/4x4/8x8 arrays at "
                   "256 PEs in all; speedup over dense on the same hardware.")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for variant in ("pe", "full"):
        rows = [row for row in r.rows if row["variant"] == variant and row["sweep"] == "arrays"]
        axes[0].plot([row["arrays"] for row in rows], [row["speedup"] for row in rows], "o-",
                     label=variant)
        size = [row for row in r.rows if row["variant"] == variant and row["sweep"] == "size"]
        axes[1].plot([row["array"] for row in size], [100 * row["utilization"] for row in size],
                     "o-", label=variant)
        r.summary[variant] = {f"{row['arrays']}x{row['array']}": row["speedup"]
                              for row in rows + size}
    axes[0].set_xscale("log", base=2)
    axes[0].set_xlabel("arrays (4x4 each)")
    axes[0].set_ylabel("speedup over dense on the same arrays (x)")
    axes[1].set_xlabel("array size (256 PEs in all)")
    axes[1].set_ylabel("PE utilization (%)")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Scaling (Fig. 21/22): {head.preset}, grid {head.grid}", fontsize=10)
    fig.tight_layout()
    r.figures[""] = fig
    return r


def report_dataflow(ctx: Context, plt) -> Result:
    """Issue 15: dataflow candidates of the engine against the ceiling (``docs/dataflow.md``)."""
    from golden.engine.dataflow import DEFAULT_CANDIDATES, REGIMES, Head, regime_head
    from kaleido_hw.reports import dataflow_report as dr
    s = ctx.settings
    r = Result("dataflow")
    if ctx.workload is not None:
        part = ctx.workload.first_frames(s.max_tokens)
        if part.grid != ctx.workload.grid:
            ctx.notes.append(f"The dataflow study ran on the first {part.grid.t} frames "
                             f"({part.grid}) of {ctx.workload.grid} (--max-tokens "
                             f"{s.max_tokens}).")
        q, k = part.load()[:2]
        heads = [Head(part.label, part.preset, "user", part.grid, q, k)]
    else:
        heads = [regime_head(s.model, s.grid, regime) for regime in REGIMES]
    r.rows = dr.run_study(heads, dr.candidate_names(",".join(DEFAULT_CANDIDATES)))
    r.table = dr.format_table(r.rows)
    r.lines = dr.targets(r.rows, "m123")
    for row in r.rows:
        r.summary.setdefault(row["label"], {})[row["candidate"]] = {
            k: row[k] for k in ("speedup", "over_pe", "utilization", "hw_of_oracle",
                                "gap_closed")}
    r.notes.append("golden.engine.dataflow (cycle models of the candidates, composed like "
                   "golden.engine.model.engine_counters; today's variants straight from it), "
                   "4 arrays of 4x4 unless the candidate says; regimes: default, smooth "
                   "(noise 0.02, smooth 5), fast (motion 3); 'ceiling' is the quad-stationary "
                   "bound with low-nibble pairs, 'ceiling-free' work / PEs (docs/dataflow.md). "
                   "kaleido-hw dataflow --presets all --candidates all runs the full sweep.")
    r.figures[""] = dr.plot(r.rows, plt)
    return r


def report_linear(ctx: Context, plt) -> Result:
    """Fig. 20: linear layers with window reuse, alone and together with attention."""
    from kaleido_hw.reports.linear_report import COLUMNS, plot_linear
    r = Result("linear")
    if ctx.workload is not None:
        r.skipped = ("the linear layers need activations and weights of a whole block, which a "
                     "--workload file (Q/K/V of one head) does not hold")
        return r
    res = _linear_result(ctx)
    r.rows = [{k: row[k] for k in COLUMNS} for row in res["layers"]]
    r.summary = res["summary"]
    keys = ("linear_speedup", "attention_speedup", "attention_only_speedup", "combined_speedup")
    r.table = "| preset | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys) + "\n" + "".join(
        f"| {p} | " + " | ".join(f"{v[k]:.3f}x" for k in keys) + " |\n" for p, v in r.summary.items())
    r.notes.append("Linear layers: the engine core's compute cycles (kaleido_hw.engine.host."
                   "linear_counters, exact to the program's interpreter: variant pe with "
                   "windows of 2 against dense on the plain build; docs/linear.md), one "
                   "transformer block at reduced width (QKV, output projection, MLP up/down), "
                   "window 2 along t; attention: golden.engine.model.engine_counters, full vs dense; "
                   "kaleido-hw linear-report has the options.")
    r.figures[""] = plot_linear(res, plt)
    return r


def report_iso_area(ctx: Context, plt) -> Result:
    """Iso-area throughput: S elements (and linear-layer output elements) per ns per mm2 of
    every variant relative to the dense schedule on plain arrays (``kaleido_hw.reports.iso_area``)."""
    from kaleido_hw.reports import iso_area as ia
    r = Result("iso-area")
    try:
        from kaleido_hw.flow.stdcell import stdcell_available, synth_stdcell
    except ImportError as e:
        r.skipped = (f"the standard-cell flow (kaleido_hw.flow.stdcell) is not available in this "
                     f"checkout ({e})")
        return r
    why = stdcell_available()
    if why is not None:
        r.skipped = str(why)
        return r
    cfg = _engine_config(ctx)
    P = cfg.engine_arrays
    linear = ctx.workload is None
    sides = len(cfg.ordered_sides)            # ClusterSchedulers of a scheduling variant
    tops = [t for v in ia.VARIANTS for t, _ in ia.level1_blocks(v, P, sides)]
    results, fresh = ia.stdcell_results(tops, cfg, synth_stdcell,
                                        log=lambda msg: print(f"  {msg}", flush=True))
    failed = [f"{t}: {'; '.join(x.get('notes') or []) or 'no area'}"
              for t, x in results.items() if x.get("area_um2") is None or x.get("path_ns") is None]
    if failed:
        r.skipped = "standard-cell synthesis failed: " + " | ".join(failed)
        return r
    areas = {v: ia.variant_area(ia.level1_blocks(v, P, sides), results) for v in ia.VARIANTS}
    lin_areas = {v: ia.variant_area(ia.linear_blocks(v, P), results)
                 for v in ia.LINEAR_VARIANTS}
    level2, why2 = ia.read_engine_cache(arrays=P)
    # Whole engines of the same PEs in another array shape or with another chunk width
    # (make synth-engine-compare's 16 arrays of 2x2 and chunks of 8): their cycles from the
    # same model on that shape and width.
    alternatives = ia.read_alternative_builds(P, cfg.rows, cfg.cols) if level2 else {}
    alternative_cycles = _alternative_cycles(ctx, cfg, alternatives)
    level2_builds = {**level2, **alternatives}
    # Attention: the ablation's cycles of every reuse variant per head; the reference's are
    # the plain build's own schedule (one group along x), which it runs in a few cycles less
    # than the grouped dense walk.
    heads = {}
    for row in _ablation_rows(ctx, cfg):
        heads.setdefault((row["preset"], row["grid"]), {})[row["variant"]] = row["cycles"]
    plain = _plain_cycles(ctx, cfg)
    for (preset, grid), cycles in heads.items():
        n = grid_named(grid).n
        cycles = {v: cycles[v] for v in ia.VARIANTS}
        cycles["dense"] = plain[(preset, grid)]
        r.rows += ia.throughput_rows("attention", preset, n * n, cycles, areas, 1)
        if level2:
            r.rows += ia.throughput_rows("attention", preset, n * n,
                                         {**cycles, **alternative_cycles[(preset, grid)]},
                                         level2_builds, 2)
    if linear:
        res = _linear_result(ctx)
        n = ctx.settings.grid.n
        for preset in res["summary"]:
            layers = [x for x in res["layers"] if x["preset"] == preset]
            elements = n * sum(x["c_out"] for x in layers)
            cycles = {"dense": sum(x["dense_cycles"] for x in layers),
                      "reuse": sum(x["reuse_cycles"] for x in layers)}
            r.rows += ia.throughput_rows("linear", preset, elements, cycles, lin_areas, 1)
    else:
        r.notes.append("Linear layers left out: a --workload file holds one head's Q/K/V, not "
                       "a block's activations and weights.")
    for row in r.rows:
        r.summary.setdefault(row["kind"], {}).setdefault(row["preset"], {})[
            f"{row['variant']} (level {row['level']})"] = {
                k: row[k] for k in ("relative", "cycle_speedup", "area_ratio", "period_ratio",
                                    "elements_per_ns_mm2")}
    r.summary["level1"] = {
        "what": ia.LEVEL1_NOTE,
        "variants": {v: areas[v] for v in ia.VARIANTS},
        "linear": {v: lin_areas[v] for v in ia.LINEAR_VARIANTS},
        "blocks": {t: {k: x[k] for k in ("area_um2", "path_ns", "cells", "ffs", "fmax_mhz",
                                         "power_mw", "startpoint", "endpoint", "units")}
                   for t, x in results.items()},
        "synthesized_now": fresh, "cache": str(ia.CACHE)}
    r.summary["level2"] = level2_builds if level2 else {"missing": why2}
    r.summary["paper"] = dict(ia.PAPER)
    r.summary["config"] = cfg.to_dict()
    r.notes.append(f"Throughput = elements / (cycles x clock period) / area, relative to the "
                   f"dense schedule on plain (BaselinePE) arrays. Cycles: golden.engine.model."
                   f"engine_counters on {P} arrays of {cfg.rows}x{cfg.cols} (attention; the "
                   f"reference on the plain build's walk, all channels as one group along x, "
                   f"golden.engine.model.plain_walk; the RTL matches it: plain_engine for the "
                   f"reference, kaleido_engine for the others) and "
                   f"kaleido_hw.engine.host.linear_counters (linear layers: the engine core's "
                   f"compute cycles, variant pe against dense on the plain build). Area and "
                   f"period: "
                   f"kaleido_hw.flow.stdcell.")
    r.notes.append(ia.LEVEL1_NOTE + " Linear layers: P x baseline_array vs P x pe_array (the "
                   "engine core runs linear blocks on the tile cells of its S arrays; "
                   "P x pe_array is the variant pe build's).")
    r.notes.append("Level 2 (whole engine, build/engine_area.json): "
                   + ("; ".join(f"{v}: {x['build']}" for v, x in level2_builds.items())
                      if level2 else f"not included: {why2}."))
    if alternatives:
        r.notes.append("Level 2 also has the same PEs in another array shape or with another "
                       "chunk width (" + ", ".join(alternatives) + "): whole-engine builds of "
                       "kaleido-hw synth --engine --engine-shape RxC / --engine-chunk-width W "
                       "(make synth-engine-compare), their cycles from engine_counters on that "
                       "shape and width.")
    r.notes.append(f"Paper: about {ia.PAPER['cycle_speedup']:g}x fewer cycles at about "
                   f"{ia.PAPER['area_ratio']:g}x the PE-array area on the same 1 GHz clock, "
                   f"i.e. about {ia.PAPER['iso_area_time']:.2f}x the elements per ns per mm2.")
    table = []
    for row in r.rows:
        table.append([row["kind"], row["preset"], row["variant"], row["level"],
                      f"{row['cycles']:,}", f"{row['area_um2']:,.0f}", f"{row['period_ns']:.3f}",
                      _fmt(row["cycle_speedup"], ".3f"), _fmt(row["area_ratio"], ".3f"),
                      _fmt(row["period_ratio"], ".3f"), _fmt(row["relative"], ".3f")])
    r.table = _md_table(["layer", "preset", "variant", "level", "cycles", "area um2",
                         "period ns", "cycle speedup", "area ratio", "period ratio",
                         "elements/ns/mm2 vs plain"], table)
    for kind in ("attention", "linear"):
        for preset, vals in r.summary.get(kind, {}).items():
            r.lines.append(f"{kind} {preset}: " + ", ".join(
                f"{k.replace(' (level 1)', '')} {_fmt(v['relative'], '.3f')}x"
                for k, v in vals.items() if k.endswith("(level 1)")))
    r.figures[""] = _plot_iso_area(r.rows, P, cfg, plt)
    return r


def _alternative_cycles(ctx: Context, cfg: KaleidoConfig, builds: dict) -> dict:
    """``{(preset, grid): {name: cycles}}`` of every build of ``builds``
    (``iso_area.read_alternative_builds``) on the report's heads: ``engine_counters`` of the
    build's variant on its arrays, shape and chunk width (empty dicts when there are none)."""
    from kaleido_hw.reports.engine_report import base_params
    out = {(h.preset, str(h.grid)): {} for h in _engine_heads(ctx)}
    for name, b in builds.items():
        params = base_params(cfg.replace(rows=b["rows"], cols=b["cols"],
                                         sched_pattern_width=b["width"],
                                         matcher_channels=b["matcher_channels"]),
                             arrays=b["arrays"])
        for h in _engine_heads(ctx):
            out[(h.preset, str(h.grid))][name] = int(h.run(params, b["variant"])[0].cycles)
    return out


def _plot_iso_area(rows: list[dict], arrays: int, cfg: KaleidoConfig, plt):
    from kaleido_hw.reports import iso_area as ia
    kinds = [k for k in ("attention", "linear") if any(r["kind"] == k for r in rows)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(6.2 * len(kinds), 5.2), squeeze=False,
                             gridspec_kw={"width_ratios": [2.2, 1][:len(kinds)]})
    for ax, kind in zip(axes[0], kinds):
        variants = ia.VARIANTS if kind == "attention" else ia.LINEAR_VARIANTS
        presets = list(dict.fromkeys(r["preset"] for r in rows if r["kind"] == kind))
        width = 0.8 / len(variants)
        x = np.arange(len(presets))
        for i, v in enumerate(variants):
            l1 = [next((r["relative"] for r in rows if (r["kind"], r["preset"], r["variant"],
                                                        r["level"]) == (kind, p, v, 1)), np.nan)
                  for p in presets]
            label = "dense, plain arrays" if v == "dense" else v
            bars = ax.bar(x + i * width, l1, width, label=label)
            for b, val in zip(bars, l1):
                if np.isfinite(val):
                    ax.text(b.get_x() + b.get_width() / 2, val, f"{val:.2f}", ha="center",
                            va="bottom", fontsize=6)
            l2 = [next((r["relative"] for r in rows if (r["kind"], r["preset"], r["variant"],
                                                        r["level"]) == (kind, p, v, 2)), np.nan)
                  for p in presets]
            if np.isfinite(l2).any():
                ax.plot(x + i * width, l2, "kD", ms=4,
                        label="whole engine (level 2)" if i == 0 else None)
            # The same PEs in another array shape or chunk width, beside the variant's bar.
            others = dict.fromkeys(r["variant"] for r in rows if r["kind"] == kind
                                   and r["level"] == 2 and r["variant"] not in variants
                                   and r["variant"].rsplit("-", 1)[0] == v)
            for name in others:
                # Marker by what differs: the shape (red), the chunk width (green), both (magenta).
                tag = name.rsplit("-", 1)[1]
                marker = ("ms" if "x" in tag and "w" in tag else "gv" if tag.startswith("w")
                          else "r^")
                l2s = [next((r["relative"] for r in rows if (r["kind"], r["preset"],
                             r["variant"], r["level"]) == (kind, p, name, 2)), np.nan)
                       for p in presets]
                build = next(r["blocks"] for r in rows if r["variant"] == name)
                ax.plot(x + i * width, l2s, marker, ms=5,
                        label=f"whole engine as {build}, same PEs (level 2)")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.axhline(ia.PAPER["iso_area_time"], color="tab:red", ls="--", lw=1,
                   label=f"paper: ~{ia.PAPER['cycle_speedup']:g}x cycles / "
                         f"~{ia.PAPER['area_ratio']:g}x PE-array area = "
                         f"{ia.PAPER['iso_area_time']:.2f}")
        ax.set_xticks(x + 0.4 - width / 2, presets)
        ax.set_ylabel("elements / ns / mm2, relative to dense on plain arrays")
        ax.set_title(("S = Q K^T" if kind == "attention" else "linear layers (one block)")
                     + f", {arrays} arrays of {cfg.rows}x{cfg.cols}", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3)
    fig.suptitle("Iso-area throughput (standard cells, level 1: PE arrays + dispatcher blocks; "
                 "sequencers, buffers and memories, common to all variants, left out)",
                 fontsize=8)
    fig.tight_layout()
    return fig


def area_task(top: str):
    """Standard-cell figures of one top (``kaleido_hw.flow.stdcell.synth_stdcell``, default
    configuration)."""
    from kaleido_hw.flow.stdcell import synth_stdcell
    return synth_stdcell(top, KaleidoConfig())


def report_area(ctx: Context, plt) -> Result:
    """Table 2 analogue: standard-cell area (OSU 0.18 um, um2), critical path and power of
    the PEs and dispatcher units (``kaleido_hw.flow.stdcell``), and the ReusePE / BaselinePE ratio."""
    from kaleido_hw.flow import stdcell

    r = Result("area")
    why = stdcell.stdcell_available()
    if why:
        r.skipped = why
        return r
    cfg = KaleidoConfig()
    results = ctx.pool.map([(area_task, (top,)) for top in AREA_TOPS], r.name)
    failed = [f"{x.top}: {'; '.join(x.notes)}" for x in results if x.area_um2 is None]
    if failed:
        r.skipped = "synthesis failed: " + " | ".join(failed)
        return r
    base = next(x for x in results if x.top == "baseline_pe")
    for x in results:
        r.rows.append({"top": x.top, "area_um2": x.area_um2, "cells": x.cells,
                       "flipflops": x.ffs, "path_ns": x.path_ns, "fmax_mhz": x.fmax_mhz,
                       "power_mw": x.power_mw,
                       "baseline_pe_equivalents": x.area_um2 / base.area_um2})
    reuse = next(x for x in results if x.top == "kaleido_pe")
    r.summary = {"reuse_pe_over_baseline_pe": {
        "area": reuse.area_um2 / base.area_um2, "cells": reuse.cells / base.cells,
        "flipflops": reuse.ffs / base.ffs, "path": reuse.path_ns / base.path_ns,
        "power": reuse.power_mw / base.power_mw},
        "config": cfg.to_dict()}
    r.notes.append(f"Standard cells: OSU 0.18 um ({stdcell.liberty_path()}), yosys synth "
                   f"-flatten + dfflibmap + abc with buffering and sizing; path = OpenSTA worst "
                   f"arrival + endpoint setup with ports 0 ns from the clock edge; power at "
                   f"{1000 / stdcell.CLOCK_PERIOD_NS:g} MHz, activity "
                   f"{stdcell.SWITCHING_ACTIVITY:g} (docs/integration.md).")
    r.notes += [f"{x.top}: {n}" for x in results for n in x.notes]
    ratio = r.summary["reuse_pe_over_baseline_pe"]
    r.lines.append(f"ReusePE / BaselinePE: area {ratio['area']:.2f}x, cells {ratio['cells']:.2f}x, "
                   f"flip-flops {ratio['flipflops']:.2f}x, path {ratio['path']:.2f}x, power "
                   f"{ratio['power']:.2f}x")
    r.table = _md_table(["block", "area (um2)", "cells", "flip-flops", "path (ns)", "power (mW)",
                         "BaselinePE-equiv."],
                        [[row["top"], f"{row['area_um2']:,.0f}", row["cells"], row["flipflops"],
                          f"{row['path_ns']:.2f}", f"{row['power_mw']:.2f}",
                          f"{row['baseline_pe_equivalents']:.2f}"] for row in r.rows])
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    y = np.arange(len(r.rows))
    ax.barh(y, [row["area_um2"] for row in r.rows], color="tab:blue")
    for i, row in enumerate(r.rows):
        ax.text(row["area_um2"], i, f"  {row['baseline_pe_equivalents']:.1f}x BaselinePE",
                va="center", fontsize=8)
    ax.set_yticks(y, [row["top"] for row in r.rows])
    ax.set_xscale("log")
    ax.set_xlim(1e4, 4 * max(row["area_um2"] for row in r.rows))
    ax.set_xlabel("area, um2 (OSU 0.18 um standard cells, log scale)")
    ax.set_title(f"Area (Table 2 analogue): ReusePE / BaselinePE = "
                 f"{ratio['area']:.2f}x", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    r.figures[""] = fig
    _engine_area(r, plt)
    return r


def _engine_area(r: Result, plt) -> None:
    """The whole engine's breakdown from ``kaleido-hw synth --engine``'s cache (no synthesis
    here): the comparison builds of ``engine_area.AREA_CONFIG`` and the default build
    (``--engine-default``), each where the cache has it."""
    from kaleido_hw.config import KaleidoConfig
    from kaleido_hw.flow import engine_area as ea

    default = KaleidoConfig()
    for base, name, label in ((ea.AREA_CONFIG, "engine", "engine"),
                              (default, "engine_default", "engine (defaults)")):
        builds, why = ea.load_cache(base)
        if builds is None:
            r.notes.append(f"Whole-engine breakdown at {base.engine_max_tokens} tokens, "
                           f"{base.engine_max_head_dim} channels not included: {why}.")
            continue
        r.rows += [{**row, "top": label + row["top"][len("engine"):]}
                   for row in ea.report_rows(builds)]
        ratios = ea.plain_ratios(builds)
        r.summary[name] = {f"P={b.arrays} {b.variant}": {
            "area_um2": b.area_um2, "area_mm2": b.area_um2 / 1e6,
            "sram_area_um2": b.sram_area_um2, "blocks": b.blocks(sram=True),
            "sram_bits": b.memory_bits(), "path_ns": b.path_ns, "fmax_mhz": b.fmax_mhz,
            "power_mw": b.power_mw, "over_plain": ratios.get(f"P={b.arrays} {b.variant}")}
            for b in builds}
        r.table += (f"\n\nWhole engine at {base.engine_max_tokens} tokens, "
                    f"{base.engine_max_head_dim} channels (standard cells + SRAM macros):\n\n"
                    + ea.report_table(builds))
        r.notes.append(f"Whole engine at {base.engine_max_tokens} tokens, "
                       f"{base.engine_max_head_dim} channels from {ea.ENGINE_CACHE} ('kaleido-hw "
                       f"synth --engine{' --engine-default' if base is default else ''}', make "
                       f"synth-engine{'' if base is default else '-compare'}; "
                       f"memories as SRAM macros at the GF180MCU density; docs/engine.md, "
                       f"'Area of the engine').")
        r.notes += [f"{label} P={b.arrays} {b.variant}: {n}" for b in builds for n in b.notes]
        r.figures["-" + name.replace("_", "-")] = ea.plot_engine_area(builds, plt)


def report_attention(ctx: Context, plt) -> Result:
    """Quality of the integer attention pipeline (vector unit softmax, P@V in integers)."""
    from kaleido_hw.reports import attention_report as ar

    s = ctx.settings
    r = Result("attention")
    if ctx.workload is not None:
        r.skipped = "runs on synthetic heads of every preset (golden.workloads)"
        return r
    r.rows = ar.attention_rows(grid=ar.ATTENTION_GRID, seeds=1 if s.quick else 3,
                               full_bits=s.full_bits, half_bits=s.half_bits)
    r.summary = ar.summarize(r.rows)
    r.table = _md_table(["preset", "V reuse", "int softmax, exact S: PSNR dB / cosine",
                         "int softmax, reuse S: PSNR / cosine", "float softmax, reuse S",
                         "int vs float, reuse S", "P@V saving"], ar.table_rows(r.summary))
    if not all(row["merged_equal"] for row in r.rows):
        r.notes.append("the merged V-reuse product differs from P_q @ V_eff (a golden bug)")
    r.notes.append(f"grid {ar.ATTENTION_GRID}, every query and key; reference: float64 "
                   f"softmax(S_exact * scale) @ V; outputs in units of V's int8 LSB")
    for p, by in r.summary.items():
        r.lines.append(f"{p}: int softmax exact S {by['off']['int_exact_psnr']:.1f} dB, "
                       f"reuse S + V reuse {by['on']['int_reuse_psnr']:.1f} dB "
                       f"(float reuse path {by['on']['float_reuse_psnr']:.1f} dB)")
    fig, ax = plt.subplots(figsize=(9, 3.8))
    presets = list(r.summary)
    x = np.arange(len(presets))
    bars = [("int_exact", "off", "int softmax, exact S"), ("int_reuse", "off", "int, reuse S"),
            ("int_reuse", "on", "int, reuse S + V"), ("float_reuse", "on", "float, reuse S + V")]
    for i, (path, v, label) in enumerate(bars):
        ax.bar(x + (i - 1.5) * 0.2, [r.summary[p][v][f"{path}_psnr"] for p in presets], 0.2,
               label=label)
    ax.set_xticks(x, presets, fontsize=8)
    ax.set_ylabel("attention-output PSNR (dB)")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"Integer attention (vector unit softmax, P@V) vs float64: grid "
                 f"{ar.ATTENTION_GRID}", fontsize=10)
    fig.tight_layout()
    r.figures[""] = fig
    return r


def report_attention_length(ctx: Context, plt) -> Result:
    """Integer attention against the head's length: section 14 against section 15."""
    from kaleido_hw.reports import attention_report as ar

    s = ctx.settings
    r = Result("attention-length")
    if ctx.workload is not None:
        q, k, v, scale = ctx.workload.load()
        if v is None:
            r.skipped = "the workload has no v (the attention output needs V)"
            return r
        r.rows = [{**ar.length_row(q, k, v, ctx.workload.grid, ctx.workload.preset, scale,
                                   s.full_bits, s.half_bits, ctx.workload.label), "seed": 0}]
    else:
        grids = ar.LENGTH_GRIDS[:3] if s.quick else ar.LENGTH_GRIDS
        r.rows = ar.length_rows(ar.LENGTH_PRESETS, grids, seeds=1 if s.quick else 2,
                                full_bits=s.full_bits, half_bits=s.half_bits)
    summary = ar.length_summary(r.rows)
    r.summary = {f"{p} {g}": a for (p, g), a in summary.items()}
    r.table = _md_table(["preset", "tokens", "section 14 (P / row sum): PSNR dB / cosine",
                         "section 15 (key blocks)", "section 15, P to the block's maximum",
                         "float softmax", "section 15, exact S and V", "P = 0 (14 / 15)",
                         "row sum of P (14)"], ar.length_table_rows(summary))
    r.notes.append(f"reuse S, V reused along t (window 2); keys in boxes of "
                   f"{'x'.join(map(str, ar.KEY_BOX))}; {ar.LENGTH_QUERIES} evenly spaced "
                   f"queries, every key; reference float64 softmax(S_exact * scale) @ V, "
                   f"outputs in units of V's int8 LSB")
    for (p, g), a in summary.items():
        r.lines.append(f"{p} {int(a['tokens'])} tokens: section 14 {a['row_softmax_psnr']:.1f} "
                       f"dB, section 15 {a['online_psnr']:.1f} dB (P to the block's maximum "
                       f"{a['online_block_psnr']:.1f} dB, float {a['float_reuse_psnr']:.1f} dB)")
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for preset in dict.fromkeys(p for p, _ in summary):
        pts = [(a["tokens"], a) for (p, _), a in summary.items() if p == preset]
        n = [t for t, _ in pts]
        line, = ax.plot(n, [a["online_psnr"] for _, a in pts], "o-",
                        label=f"{preset}: section 15")
        ax.plot(n, [a["row_softmax_psnr"] for _, a in pts], "s--", color=line.get_color(),
                label=f"{preset}: section 14")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens (keys per row)")
    ax.set_ylabel("attention-output PSNR (dB)")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    fig.suptitle("Integer attention against head length: P normalised per row (section 14) "
                 "vs key blocks (section 15)", fontsize=9)
    fig.tight_layout()
    r.figures[""] = fig
    return r


def _pv_mode_area_note(summary: dict) -> str:
    """Heads per unit of area with the P @ V mode against without, from the engine builds
    of ``kaleido-hw synth --engine --engine-default`` with ``engine_pe`` "reuse" and
    "reuse-pv" (cached in build/engine_area.json), or why not."""
    from kaleido_hw.flow import engine_area as ea

    base = KaleidoConfig()
    areas = {}
    for pe in ("reuse", "reuse-pv"):
        builds, why = ea.load_cache(base.replace(engine_pe=pe))
        if builds is None:
            return (f"area of the P @ V mode: no engine build with engine_pe = {pe!r} ({why}; "
                    f"kaleido-hw synth --engine --engine-default, with --config a TOML file "
                    f"of engine_pe = \"reuse-pv\" for the second)")
        areas[pe] = builds[0].total_area_um2
    ratio = areas["reuse-pv"] / areas["reuse"]
    gains = ", ".join(f"{p} {v['v_gain'] / ratio:.3f}x" for p, v in summary.items())
    return (f"area: the default engine with the P @ V mode (engine_pe = 'reuse-pv') "
            f"{areas['reuse-pv'] / 1e6:.3f} mm2 against {areas['reuse'] / 1e6:.3f} "
            f"({ratio:.3f}x): heads per unit of area, reuse over s-reuse: {gains}")


def report_head(ctx: Context, plt) -> Result:
    """Fig. 18a at head level: S, softmax and P @ V of a whole head, dense vs reuse."""
    from kaleido_hw.reports import head_report as hr

    s = ctx.settings
    r = Result("head")
    if ctx.workload is not None:
        r.skipped = "runs on synthetic heads (q, k and v of golden.workloads)"
        return r
    cfg = KaleidoConfig()
    presets = list(s.presets)
    r.rows = hr.head_rows(presets, s.grid, EngineParams.from_config(cfg), full_bits=s.full_bits,
                          half_bits=s.half_bits, lanes=cfg.vector_lanes,
                          buffers=cfg.vector_row_buffers)
    r.table = _md_table(["preset", "run", "S cycles", "softmax cycles", "P @ V cycles",
                         "softmax exposed", "head cycles", "speedup S / P @ V / head",
                         "V reuse gain"], hr.table_rows(r.rows))
    for row in r.rows:
        if "v_gain" in row:
            r.summary[row["preset"]] = {k: row[k] for k in ("s_speedup", "pv_speedup",
                                                            "head_speedup", "v_gain")}
            r.lines.append(f"{row['preset']}: head {row['head_speedup']:.3f}x (S "
                           f"{row['s_speedup']:.3f}x, P @ V {row['pv_speedup']:.3f}x); V "
                           f"reuse {row['v_gain']:.3f}x over S reuse only")
    r.notes.append(f"grid {s.grid}, {cfg.engine_arrays} arrays of {cfg.rows}x{cfg.cols}, vector "
                   f"unit of {cfg.vector_lanes} lanes; dense: S dense, P @ V dense; s-reuse: S "
                   f"variant full, P @ V dense; reuse: S variant full, P @ V with V reused in "
                   f"windows of 2 along t (the arrays' P @ V mode); row blocks of 64 queries, S "
                   f"of the next block under the softmax of this one (golden.engine.head); a "
                   f"model of a schedule the RTL does not run yet")
    r.notes.append(_pv_mode_area_note(r.summary))
    r.figures[""] = hr.plot_head(r.rows, plt)
    return r


def report_energy(ctx: Context, plt) -> Result:
    """Fig. 19 (energy) and Fig. 18b analogues: energy per head of every variant from the
    engine counters and the gate-level per-event energies (``docs/energy.md``)."""
    from golden.energy.model import CALIBRATIONS, COMPONENTS
    from kaleido_hw.reports import energy_report as er

    r = Result("energy")
    if ctx.workload is not None:
        r.skipped = "runs on the stored paper-scale counters and synthetic heads"
        return r
    cfg = _engine_config(ctx)
    e = er.default_energies()
    paper = er.all_paper_rows()
    abl = er.ablation_rows(e, cfg.engine_arrays, grid=ctx.settings.grid,
                           presets=er.PRESETS[:1] if ctx.settings.quick else er.PRESETS)
    lin = er.linear_rows(e, cfg.engine_arrays)
    r.rows = paper + abl + lin
    r.table = _md_table(["scope", "calibration", "preset", "variant", "cycles", "energy uJ",
                         "PE", "dispatcher", "SRAM", "DRAM", "energy / pe",
                         "saving vs dense (plain)"], er.table_rows(r.rows))
    by = {(row["scope"], row["calibration"], row["preset"], row["variant"]): row
          for row in r.rows}
    heads = list(dict.fromkeys((row["scope"], row["calibration"], row["preset"])
                               for row in paper + abl))
    for scope, cal, preset in heads:
        full, pe = by[(scope, cal, preset, "full")], by[(scope, cal, preset, "pe")]
        plain = by[(scope, cal, preset, "dense-plain")]
        r.summary.setdefault(scope, {}).setdefault(cal, {})[preset] = {
            "dispatcher_saving": 1 - full["total_pj"] / pe["total_pj"],
            "full_saving_vs_dense_plain": full["saving_vs_dense_plain"],
            "full_pe_energy_vs_dense_plain": full["pe_pj"] / plain["pe_pj"]}
        r.lines.append(f"{scope} {preset} ({cal}): full vs pe "
                       f"{100 * (1 - full['total_pj'] / pe['total_pj']):+.1f}% saved (paper "
                       f"Fig. 19: {100 * er.PAPER_FIG19_DISPATCHER_SAVING:.1f}%), full vs dense "
                       f"on plain arrays {full['saving_vs_dense_plain']:.3f}x")
    r.notes.append("per-event PE energies: gate-level toggle counts (Icarus, zero delay) priced "
                   "with OpenSTA on the OSU 0.18 um cells at 100 MHz (golden/energy/data/"
                   "pe_events.json, make energy); calibration 'pe': as measured on the "
                   "stand-alone PEs, 'array': rescaled to the measured 4x4 arrays, "
                   "'array-step': whole array steps as measured; MergeMatcher: gate-level "
                   "(slot-issuing and idle cycles), ClusterScheduler: OpenSTA vectorless per "
                   "cycle; SRAM/DRAM: Horowitz ISSCC 2014, SRAM scaled 45 -> "
                   "180 nm by 16x (golden.energy.memory)")
    r.notes.append(er.NODE_NOTE)
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    main = [(s_, c, p) for s_, c, p in heads if c == er.PRIMARY]
    norm = ["pe", "pe-sh", "pe-m", "full"]
    width = 0.8 / len(main)
    x = np.arange(len(norm))
    for i, key in enumerate(main):
        axes[0].bar(x + i * width, [by[key + (v,)]["vs_pe"] for v in norm], width,
                    label=f"{key[2]} ({key[0]})")
    axes[0].axhline(1 - er.PAPER_FIG19_DISPATCHER_SAVING, color="k", ls="--", lw=0.8,
                    label="paper: full")
    axes[0].set_xticks(x + 0.4 - width / 2, norm)
    axes[0].set_ylim(0.85, 1.05)
    axes[0].set_ylabel("energy / energy of pe")
    axes[0].set_title(f"Fig. 19 analogue (energy; {er.PRIMARY} calibration)", fontsize=9)
    variants = ["dense-plain", "dense", "pe", "pe-sh", "pe-m", "full"]
    x2 = np.arange(len(variants))
    for i, key in enumerate(main):
        axes[1].bar(x2 + i * width, [by[key + (v,)]["saving_vs_dense_plain"]
                                     for v in variants], width, label=f"{key[2]} ({key[0]})")
    axes[1].axhline(1.0, color="k", lw=0.6)
    axes[1].set_xticks(x2 + 0.4 - width / 2, variants, fontsize=7)
    axes[1].set_ylabel("energy of dense on plain arrays / energy")
    axes[1].set_title("saving vs dense on plain BaselinePE arrays", fontsize=9)
    bottom = np.zeros(len(variants))
    preset = paper[0]["preset"]
    for comp in COMPONENTS:
        vals = np.array([by[("paper", er.PRIMARY, preset, v)][f"{comp}_pj"] * 1e-12
                         for v in variants])
        axes[2].bar(x2, vals, 0.6, bottom=bottom, label=comp)
        bottom += vals
    axes[2].set_ylim(0, 1.08 * bottom.max())
    axes[2].set_xticks(x2, variants, fontsize=7)
    axes[2].set_ylabel("J per head (180 nm)")
    axes[2].set_title("paper scale: breakdown by component", fontsize=9)
    w3 = 0.8 / len(CALIBRATIONS)
    for i, cal in enumerate(CALIBRATIONS):
        axes[3].bar(x2 + i * w3, [by[("paper", cal, preset, v)]["saving_vs_dense_plain"]
                                  for v in variants], w3, label=cal)
    axes[3].axhline(1.0, color="k", lw=0.6)
    axes[3].set_xticks(x2 + 0.4 - w3 / 2, variants, fontsize=7)
    axes[3].set_ylabel("energy of dense on plain arrays / energy")
    axes[3].set_title("paper scale under each calibration", fontsize=9)
    for ax in axes:
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle("Energy per attention head, OSU 0.18 um per-event energies x cycle-model "
                 "counters", fontsize=10)
    fig.tight_layout()
    r.figures[""] = fig
    return r


@dataclass(frozen=True)
class Report:
    """One report: its name (for ``--only``), the paper figure it reproduces, its title and the
    function that builds it."""
    name: str
    paper: str
    title: str
    build: object


#: Every report, in run order.
REPORTS: dict[str, Report] = {rep.name: rep for rep in (
    Report("reuse-vs-skip", "Fig. 9", "Reuse vs skipping at the same saving ratio",
           report_reuse_vs_skip),
    Report("thresholds", "Fig. 23", "Threshold sensitivity: speedup and quality",
           report_thresholds),
    Report("patterns", "Fig. 5", "Attention scores and where each channel group reuses",
           report_patterns),
    Report("motion", "Fig. 24", "Fast vs slow motion", report_motion),
    Report("array-size", "Fig. 21 (one array)", "Per-array PE size", report_array_size),
    Report("area", "Table 2 (analogue)", "Area of the PEs and the dispatcher", report_area),
    Report("ablation", "Fig. 19", "Engine ablation: dense, pe, pe-sh, pe-m, full", report_ablation),
    Report("scaling", "Fig. 21/22", "Engine scaling: arrays and array size", report_scaling),
    Report("dataflow", "issue 15", "Dataflow candidates against the ceiling", report_dataflow),
    Report("linear", "Fig. 20", "Linear layers: alone and with attention", report_linear),
    Report("attention", "Sec. 5.1 (vector unit)",
           "Integer attention: softmax of the vector unit and P@V against float64",
           report_attention),
    Report("attention-length", "Sec. 5.1 (long heads)",
           "Integer attention against head length: row softmax vs key blocks",
           report_attention_length),
    Report("head", "Fig. 18a (head)", "A whole head: S, softmax and P @ V, dense vs reuse",
           report_head),
    Report("energy", "Fig. 19 / 18b (energy)",
           "Energy per head: variants, dense on plain arrays, breakdown by component",
           report_energy),
    Report("iso-area", "Sec. 7 (iso-area)",
           "Iso-area throughput: elements per ns per mm2 against plain arrays", report_iso_area),
)}
#: Reports that only run when asked for (``--area`` or ``--only``).
ON_REQUEST = ("area", "iso-area")


# -- driver --------------------------------------------------------------------------------------

def _write(result: Result, report: Report, out: Path, settings: Settings,
           workload: Source | None) -> list[Path]:
    files = []
    for suffix, fig in result.figures.items():
        path = out / f"{result.name}{suffix}.png"
        fig.savefig(path, dpi=120)
        files.append(path)
    for name, writer in result.extra_files.items():
        writer(out / name)
        files.append(out / name)
    doc = {"report": result.name, "paper": report.paper, "title": report.title,
           "settings": settings.as_dict(),
           "workload": None if workload is None else {
               "file": workload.label, "grid": str(workload.grid), "model": workload.preset},
           "summary": result.summary, "notes": result.notes, "rows": result.rows,
           "files": [p.name for p in files] + [f"{result.name}.csv"]}
    path = out / f"{result.name}.json"
    path.write_text(json.dumps(_jsonable(doc), indent=1) + "\n")
    files.append(path)
    path = out / f"{result.name}.csv"
    columns = list(dict.fromkeys(k for row in result.rows for k in row))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        for row in result.rows:
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    files.append(path)
    return files


def _summary_md(done: list, skipped: dict, settings: Settings, workload: Source | None) -> str:
    src = (f"workload `{workload.label}` (grid {workload.grid}, model {workload.preset})"
           if workload else f"synthetic workloads (golden.workloads, grid {settings.grid})")
    lines = ["# kaleido-hw report", "",
             f"Generated by `kaleido-hw report` from {src}; operating point full/half bits "
             f"{settings.full_bits}/{settings.half_bits}, {settings.rows}x{settings.cols} array"
             f"{' (--quick)' if settings.quick else ''}. Numbers: `<name>.json`, `<name>.csv`.",
             ""]
    for report, result in done:
        lines += [f"## {report.title} ({report.paper}): `{result.name}`", ""]
        lines += [f"![{result.name}]({result.name}{suffix}.png)" for suffix in result.figures]
        lines += ["", result.table, ""]
        lines += [f"Note: {n}" for n in result.notes]
        lines.append("")
    for name, why in skipped.items():
        lines += [f"## `{name}`: skipped", "", why, ""]
    return "\n".join(lines)


def run_reports(names: list[str], settings: Settings, out: Path,
                workload: Source | None = None, stream=None) -> dict:
    """Run the reports ``names`` and write their files into ``out``; returns
    ``{"done": [names], "skipped": {name: reason}, "files": [paths]}``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stream = stream or sys.stdout
    out.mkdir(parents=True, exist_ok=True)
    pool = Pool(settings.jobs)
    ctx = Context(settings, pool, workload)
    done, skipped, files = [], {}, []
    try:
        for name in names:
            report = REPORTS[name]
            t0 = time.monotonic()
            print(f"{name} ({report.paper}): {report.title}", file=stream, flush=True)
            result = report.build(ctx, plt)
            result.notes += ctx.notes
            ctx.notes = []
            if result.skipped:
                skipped[name] = result.skipped
                print(f"  skipped: {result.skipped}", file=stream, flush=True)
                continue
            files += _write(result, report, out, settings, workload)
            for fig in result.figures.values():
                plt.close(fig)
            for line in result.lines:
                print(f"  {line}", file=stream)
            print(f"  -> {out / (name + '.png')} ({time.monotonic() - t0:.0f} s)", file=stream,
                  flush=True)
            done.append((report, result))
    finally:
        pool.close()
    path = out / "summary.md"
    path.write_text(_summary_md(done, skipped, settings, workload))
    files.append(path)
    return {"done": [r.name for _, r in done], "skipped": skipped, "files": files}


# -- CLI -------------------------------------------------------------------------------------------

def add_arguments(parser):
    """The ``kaleido-hw report`` options."""
    names = ", ".join(REPORTS)
    parser.add_argument("--out", default="report", metavar="DIR",
                        help="report folder (PNG + JSON + CSV per report, summary.md); "
                             "default report/")
    parser.add_argument("--only", metavar="NAME[,NAME]",
                        help=f"run only these reports: {names}")
    parser.add_argument("--quick", action="store_true",
                        help="small grid (4x8x8) and few seeds: the whole run in seconds")
    parser.add_argument("--area", action="store_true",
                        help="also run the area reports on standard cells (yosys + OpenSTA): "
                             "area (a few minutes) and iso-area (cached under build/)")
    parser.add_argument("--workload", metavar="FILE.npz",
                        help="run the applicable reports on one head of your own data: int8 "
                             "arrays q, k (N, d), optional v (N, dv) and scale (softmax scale "
                             "of the int8 scores; default: calibrated to a logit std of 2); "
                             "needs --grid")
    parser.add_argument("--grid", metavar="TxHxW",
                        help="token grid of --workload (N = T*H*W), or of the synthetic "
                             "workloads (default 8x16x16, --quick 4x8x8); a golden GRIDS name "
                             "also works")
    parser.add_argument("--model", metavar="PRESET",
                        help=f"preset ({', '.join(sorted(PRESETS))}): the channel groups of "
                             "--workload, or the only preset of the synthetic reports (default: "
                             f"{', '.join(DEFAULT_PRESETS)}; thresholds and patterns use "
                             "hunyuanvideo)")
    parser.add_argument("--seeds", type=int, metavar="N",
                        help="workload seeds of reuse-vs-skip (default 20, --quick 3)")
    parser.add_argument("--max-tokens", type=int, default=8192, metavar="N",
                        help="the cycle model runs on the first frames of a head, at most N "
                             "tokens (its cost grows with N^2); default 8192")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), metavar="N",
                        help="worker processes for the sweeps; default min(2, cores)")


def _selected(args) -> list[str]:
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in REPORTS]
        if unknown or not names:
            raise ValueError(f"--only must name reports from {', '.join(REPORTS)}, "
                             f"got {args.only!r}")
        return [n for n in REPORTS if n in names]
    return [n for n in REPORTS if n not in ON_REQUEST or args.area]


def run(args) -> int:
    """Run the selected reports into ``args.out``; 0 on success."""
    names = _selected(args)
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    if args.seeds is not None and args.seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {args.seeds}")
    if args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    if args.model is not None and args.model not in PRESETS:
        raise ValueError(f"--model must be one of {', '.join(sorted(PRESETS))}, "
                         f"got {args.model!r}")
    workload = None
    if args.workload:
        if not args.grid:
            raise ValueError("--workload needs --grid TxHxW (the token grid of its N rows)")
        workload = load_workload(args.workload, args.grid, args.model or "hunyuanvideo")
    settings = Settings.make(
        args.quick, grid=grid_named(args.grid) if args.grid and not workload else None,
        presets=(args.model,) if args.model else None, model=args.model, seeds=args.seeds,
        max_tokens=args.max_tokens, jobs=args.jobs)
    if workload is not None:
        settings = replace(settings, grid=workload.grid, presets=(workload.preset,),
                           model=workload.preset)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("kaleido-hw report: error: matplotlib is needed: pip install -e '.[report]' "
              "(make install does it)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    out = Path(args.out)
    result = run_reports(names, settings, out, workload)
    print(f"wrote {len(result['files'])} files to {out}/ (summary.md) in "
          f"{time.monotonic() - t0:.0f} s"
          + (f"; skipped: {', '.join(result['skipped'])}" if result["skipped"] else ""))
    return 0
