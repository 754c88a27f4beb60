"""Host library for whole attention heads on the engine core (``docs/engine.md``, "Attention
commands"): "compute ``O = attention(Q, K, V)`` of this head at these addresses" as a
command program, and O read back.

The program: CONFIG, GROUPS, ATTENTION (the softmax scale, V's reuse axis, window and
switch), the STRIDES of Q, K and V; then per query box (the rows of O) every key box in
order, each a LOAD of its K box and of its V box into the same bank index of their sides
and one COMPUTE kind 2 (``first`` on the first key box, ``last`` on the last), and after
the last one STORE of the query box's O (``box_tokens x head_dim`` int16, row-major). The
key boxes go forward for every query box (:func:`~kaleido_hw.engine.host.command_order`
with ``serpentine=False``): the running softmax rounds its rescales, so O depends on the
order of the key blocks, and one order for all rows keeps O equal to
:func:`whole_grid_o`, section 15 of ``docs/numerics.md`` over the grid's boxes. With two
banks the next step's new operands load while a block computes, as for S.

The box (:func:`~kaleido_hw.engine.host.choose_box`) keeps S's reuse pairs whole and, with
V reuse, V's windows (extent along ``v_dir`` a multiple of the window, or the whole axis),
so that each box's codes are the grid's. No RTL core runs these commands yet: the plans
run on the functional model (``golden.engine.program.run_program`` with
``CoreLimits.attention``); the core's RTL answers them with error 11.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from golden.checks import check_axes, check_window
from golden.engine.commands import KIND_PV, SIDE_K, SIDE_V, Attention, Compute, Store
from golden.engine.program import (CoreLimits, Memory, ProgramResult, box_counts, box_on_grid,
                                   run_program)
from golden.numerics import ChannelGroups, VideoGrid, as_grid
from golden.vector.online import box_blocks, online_stages
from golden.vector.softmax import SoftmaxScale, softmax_scale
from golden.window import window_operand
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host import (_AXES, _BoxPlan, _align, _check_tensor, _commands,
                                    _head_core, _place, _plan_box,
                                    _tensor_layout, _TokenStrides, choose_box, command_order,
                                    whole_grid_s)


__all__ = ["AttentionAddrs", "AttentionPlan", "plan_attention", "write_attention_operands",
           "read_o", "AttentionRun", "run_attention", "whole_grid_o"]


@dataclass(frozen=True)
class AttentionAddrs(_TokenStrides):
    """Byte addresses of one attention head in memory: the Q, K and V tensors (token (0, 0,
    0)) with their byte strides (token, y, t; the same for all three), and the O region,
    where query box ``qi``'s output is at ``o + qi * pitch`` (:attr:`AttentionPlan.o_pitch`)."""
    q: int
    k: int
    v: int
    o: int
    token_stride: int
    y_stride: int
    t_stride: int

    @classmethod
    def packed(cls, grid, head_dim: int, base: int = 0) -> "AttentionAddrs":
        """Q, K, V and O back to back from ``base`` (aligned), tokens ``head_dim`` bytes
        rounded up to the 16-byte beat, rows and frames without gaps."""
        strides, nbytes = _tensor_layout(as_grid(grid), head_dim)
        q = _align(base)
        return cls(q, q + nbytes, q + 2 * nbytes, q + 3 * nbytes, *strides)


@dataclass
class AttentionPlan(_BoxPlan):
    """An attention head's program: grid, channel groups (S's reuse), box, boxes per axis,
    the steps (query boxes x key boxes, forward), the addresses, the core limits and
    variant (S), the thresholds (S and V), the softmax ``scale`` pair, V's reuse
    (``v_dir``, ``v_window``, ``v_reuse``) and the commands."""
    KIND = KIND_PV
    OPERANDS = ("q", "k", "v")
    RESULT = "o"
    grid: VideoGrid
    groups: ChannelGroups
    box: tuple
    boxes: tuple
    steps: list
    addrs: AttentionAddrs
    limits: CoreLimits
    variant: str
    full_bits: int
    half_bits: int
    scale: SoftmaxScale
    v_dir: int
    v_window: int
    v_reuse: bool
    commands: list

    @property
    def o_bytes(self) -> int:
        """Bytes of one query box's O (box_tokens x head_dim int16)."""
        return self.box_tokens * self.groups.head_dim * 2

    @property
    def o_pitch(self) -> int:
        """Bytes from one query box's O to the next (:attr:`o_bytes` aligned to 16)."""
        return _align(self.o_bytes)

    def o_address(self, qi: int) -> int:
        """Address of query box ``qi``'s O."""
        return self.addrs.o + qi * self.o_pitch

    @property
    def _result_end(self) -> int:
        """First byte after every query box's O."""
        return self.o_address(self.n_q)

    @property
    def _blocks(self) -> int:
        return self.addrs.o

    def _preamble(self) -> list:
        return [Attention(self.scale.mult, self.scale.shift, self.v_dir,
                          int(self.v_window == 3), int(self.v_reuse))]

    def _tensors(self) -> tuple:
        return (self.addrs.q, self.addrs.k, self.addrs.v)

    def _k_loads(self, step) -> list:
        """A new key box: its K and its V, into the same bank index of their sides."""
        return [self._load(SIDE_K, step.k_bank, step.ki), self._load(SIDE_V, step.k_bank,
                                                                      step.ki)]

    def _compute_store(self, i: int) -> list:
        st = self.steps[i]
        first, last = st.ki == 0, st.ki == self.n_k - 1
        out = [Compute(st.q_bank, st.k_bank, KIND_PV, 0, st.k_bank, int(first), int(last))]
        if last:
            out.append(Store(self.o_address(st.qi)))
        return out



def _v_axis(v_dir) -> int:
    return int(check_axes(v_dir, 1, "v_dir")[0])


def plan_attention(cfg: KaleidoConfig, grid, head_dim: int, groups=None, scale=None,
                   v_dir=0, v_window: int = 2, v_reuse: bool = True, box=None, addrs=None,
                   variant: str | None = None, full_bits: int | None = None,
                   half_bits: int | None = None, banks: int | None = None,
                   base: int = 0) -> AttentionPlan:
    """The program that computes the int16 attention output O of one head on ``grid`` on
    the core built from ``cfg``, with the attention path (module docstring).

    ``scale``: the float softmax scale (default ``1 / sqrt(head_dim)``), turned into the
    fixed-point pair of :func:`golden.vector.softmax_scale`. ``v_dir`` (0 t, 1 y, 2 x or
    't', 'y', 'x'), ``v_window`` (2 or 3), ``v_reuse``: V's window rule. ``groups``,
    ``variant``, the thresholds, ``banks``, ``base``, ``addrs`` (default
    :meth:`AttentionAddrs.packed`) as for :func:`~kaleido_hw.engine.host.plan_head`; an
    explicit ``box`` must keep S's pairs and (with ``v_reuse``) V's windows whole.
    """
    grid, groups, limits, variant, fb, hb = _head_core(cfg, grid, groups, head_dim, banks,
                                                       variant, full_bits, half_bits)
    limits = dataclasses.replace(limits, attention=True)
    v_axis, v_window = _v_axis(v_dir), check_window(v_window)
    if not isinstance(v_reuse, (bool, np.bool_)):
        raise ValueError(f"v_reuse must be True or False, got {v_reuse!r}")
    if v_reuse and limits.plain:
        raise ValueError("v_reuse needs reuse PEs; the core of this configuration is a plain "
                         "build (engine_pe = 'plain'): pass v_reuse=False")
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    pair = softmax_scale(scale)
    windows = ((v_axis, v_window),) if v_reuse else ()
    if box is None:
        box = choose_box(grid, groups, limits.max_box_tokens, windows)
    else:
        box = _plan_box(grid, groups, box, limits, "pairs")
        if v_reuse and box[v_axis] % v_window and box[v_axis] < grid.shape[v_axis]:
            raise ValueError(f"box {box} cuts V's windows of {v_window} along "
                             f"{_AXES[v_axis]}: its extent there must be a multiple of "
                             f"{v_window} or the grid's {grid.shape[v_axis]}")
    n = int(np.prod(box))
    if n > limits.pv_keys:
        raise ValueError(f"box {box} has {n} keys; an attention block's P @ V fits acc_width "
                         f"for at most {limits.pv_keys} keys")
    boxes = box_counts(grid, box)
    if addrs is None:
        addrs = AttentionAddrs.packed(grid, head_dim, base)
    steps = command_order(int(np.prod(boxes)), limits.banks, serpentine=False)
    plan = AttentionPlan(grid, groups, box, boxes, steps, addrs, limits, variant, fb, hb, pair,
                         v_axis, v_window, bool(v_reuse), [])
    plan.commands = _commands(plan)
    return plan


def write_attention_operands(memory: Memory, q, k, v, addrs: AttentionAddrs, grid) -> None:
    """Write the (N, d) int8 Q, K and V of ``grid`` into ``memory`` at ``addrs``."""
    grid = as_grid(grid)
    for name, x, at in (("q", q, addrs.q), ("k", k, addrs.k), ("v", v, addrs.v)):
        x = _check_tensor(name, x, grid, "d", addrs.token_stride)
        memory.write_tensor(at, x, grid, addrs.strides)


def read_o(memory: Memory, plan: AttentionPlan) -> np.ndarray:
    """The (N, d) int64 O (int16 values, 8 fractional bits, V's units) as the host sees it:
    every query box's stored O read back from ``memory``, its rows on the grid tokens of
    the box (padding rows dropped)."""
    n, d = plan.box_tokens, plan.groups.head_dim
    cols = (np.arange(d), np.ones(d, bool))
    blocks = [(box_on_grid(plan.origin(qi), plan.box, plan.grid), cols,
               memory.read(plan.o_address(qi), n * d, np.int16).reshape(n, d).astype(np.int64))
              for qi in range(plan.n_q)]
    return _place(blocks, (plan.grid.n, d), f"(token, channel) pairs of grid {plan.grid}")


@dataclass
class AttentionRun:
    """One attention head run end to end: O read back from memory, the plan, the program's
    result (blocks with their S, P and counters) and the memory."""
    o: np.ndarray
    plan: AttentionPlan
    result: ProgramResult
    memory: Memory


def run_attention(cfg: KaleidoConfig, q, k, v, grid, groups=None, engine: bool = False,
                  **plan_args) -> AttentionRun:
    """Plan the head (:func:`plan_attention`, ``plan_args`` passed on), write Q, K and V to a
    fresh memory, run the program on the functional model of a core with the attention
    path (``engine=True``: every block's S through the engine model and its P @ V through
    ``golden.engine.pv.pv_counters``, with their counters) and read O back."""
    grid = as_grid(grid)
    q = np.asarray(q)
    if q.ndim != 2:
        raise ValueError(f"q must be an (N, d) int8 array, got shape {q.shape}")
    plan = plan_attention(cfg, grid, q.shape[1], groups, **plan_args)
    memory = Memory(plan.memory_size)
    write_attention_operands(memory, q, k, v, plan.addrs, grid)
    result = run_program(plan.commands, memory, plan.limits, engine=engine)
    return AttentionRun(read_o(memory, plan), plan, result, memory)


def whole_grid_o(q, k, v, grid, groups, full_bits: int, half_bits: int, variant: str, scale,
                 box, v_dir=0, v_window: int = 2, v_reuse: bool = True) -> np.ndarray:
    """The whole-grid golden O an attention run must equal: S of the grid
    (:func:`~kaleido_hw.engine.host.whole_grid_s`), V effective under the window rule along
    ``v_dir`` over the grid (``v_reuse``), and section 15 with the key blocks the grid's
    boxes in order (``golden.vector.online.box_blocks``); ``scale`` a ``SoftmaxScale`` pair
    (:attr:`AttentionPlan.scale`)."""
    grid = as_grid(grid)
    s = whole_grid_s(q, k, grid, groups, full_bits, half_bits, variant)
    v = np.asarray(v)
    if v_reuse:
        v = window_operand(v, grid, _v_axis(v_dir), v_window, full_bits, half_bits)
    mult, shift = scale
    return online_stages(s, v, mult, shift, box_blocks(grid, box))["out"]
