"""Host library of the streaming engine core (``docs/engine.md``, "Command stream"): turns
"compute S of this head at these addresses" into a command program.

- :func:`choose_box`: the box (``box_t x box_h x box_w`` tokens) the head is cut into: at
  most the core's ``engine_max_tokens``, and along every reuse axis even (or the whole axis)
  so that no reuse pair of the grid is cut by a box border; then S assembled from the boxes
  equals the whole-grid S bit for bit. Edge boxes are zero-padded by the core.
- :func:`command_order`: (Q box, K box) pairs, Q boxes outer and K boxes inner in serpentine
  order (the K box at the end of one Q row starts the next, so it is not loaded again), new
  boxes alternating between the banks so each load can overlap the compute before it.
- :func:`plan_head` -> :class:`HeadPlan` (box, addresses, program); :func:`plan_counts`;
  :func:`write_operands`; :func:`assemble_s` / :func:`read_s`; :func:`run_head` end to end
  through ``golden.engine.program.run_program``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from golden.engine.commands import (ALIGN, SIDE_K, SIDE_Q, Compute, Config, Fence, Load, Store,
                                    Strides, groups_commands)
from golden.engine.program import (CoreLimits, Memory, ProgramResult, box_coords, box_tokens,
                                   run_program)
from golden.numerics import ChannelGroups, VideoGrid, _as_groups, as_grid, attention_scores
from golden.engine.model import variant_flags
from kaleido_hw.config import ConfigError, KaleidoConfig


__all__ = ["reuse_axes", "split_axes", "choose_box", "box_counts", "Step", "command_order",
           "HeadAddrs", "HeadPlan", "plan_head", "plan_counts", "write_operands",
           "assemble_s", "read_s", "HeadRun", "run_head", "whole_grid_s"]


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def reuse_axes(groups) -> tuple:
    """Grid axes (0 t, 1 y, 2 x) some non-empty channel group reuses along."""
    groups = _as_groups(groups)
    return tuple(sorted({groups.directions[g] for g in range(3) if groups.sizes[g]}))


def split_axes(grid, groups, box) -> tuple:
    """Reuse axes along which ``box`` cuts pairs of the grid: the box extent is odd and
    smaller than the grid's (a pair (2i, 2i+1) then straddles some box border, and inside
    the box the pairing differs from the grid's). Empty: S from boxes equals the grid's."""
    grid = as_grid(grid)
    return tuple(a for a in reuse_axes(groups)
                 if box[a] % 2 and box[a] < grid.shape[a])


def box_counts(grid, box) -> tuple:
    """Boxes along t, y and x: ``ceil(grid / box)`` per axis."""
    grid = as_grid(grid)
    return tuple(-(-g // b) for g, b in zip(grid.shape, box))


def choose_box(grid, groups, max_tokens: int) -> tuple:
    """The box a head on ``grid`` is cut into, within ``max_tokens`` tokens.

    Along each reuse axis an extent is even or the whole axis (no pair cut, see
    :func:`split_axes`); other axes take any extent up to the grid's. Among those, the box
    with the fewest boxes per side (K traffic grows with boxes x padded tokens, blocks and
    their fixed costs with boxes^2), then the fewest padded tokens (boxes x box tokens: the
    engine's work grows with its square), then the longest x, then y extent (longer
    contiguous memory bursts).
    """
    grid, groups = as_grid(grid), _as_groups(groups)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) \
            or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    axes = reuse_axes(groups)
    options = []
    for a, g in enumerate(grid.shape):
        ext = range(1, min(g, max_tokens) + 1)
        options.append([b for b in ext if a not in axes or b % 2 == 0 or b == g])
    best = None
    for box in itertools.product(*options):
        n = box_tokens(box)
        if n > max_tokens:
            continue
        nb = int(np.prod(box_counts(grid, box)))
        key = (nb, nb * n, -box[2], -box[1], -box[0])
        if best is None or key < best[0]:
            best = (key, box)
    if best is None:
        need = [2 if a in axes and grid.shape[a] > 1 else 1 for a in range(3)]
        raise ValueError(
            f"no box of at most max_tokens = {max_tokens} tokens keeps the reuse pairs of grid "
            f"{grid} whole (reuse axes {[('t', 'y', 'x')[a] for a in axes]} need even extents: "
            f"at least {need[0]}x{need[1]}x{need[2]} = {int(np.prod(need))} tokens)")
    return best[1]


@dataclass(frozen=True)
class Step:
    """One (Q box, K box) block of the order: box indices ``qi``, ``ki``, the banks they are
    in, and whether this step's boxes are new (to be loaded) or already in their bank."""
    qi: int
    ki: int
    q_bank: int
    k_bank: int
    load_q: bool
    load_k: bool


def command_order(n_boxes: int, banks: int = 2) -> list:
    """The :class:`Step` s of an ``n_boxes x n_boxes`` head: Q boxes outer; K boxes inner in
    serpentine order (forward for even Q rows, backward for odd ones), so the K box that ends
    one row starts the next and stays in its bank; every new box goes to the next bank of
    its side (round robin), so it never overwrites the box the step before it reads."""
    if isinstance(n_boxes, bool) or not isinstance(n_boxes, (int, np.integer)) or n_boxes < 1:
        raise ValueError(f"n_boxes must be a positive integer, got {n_boxes!r}")
    if isinstance(banks, bool) or not isinstance(banks, (int, np.integer)) or banks < 1:
        raise ValueError(f"banks must be a positive integer, got {banks!r}")
    steps = []
    held = {SIDE_Q: None, SIDE_K: None}       # box in the side's current bank
    bank = {SIDE_Q: banks - 1, SIDE_K: banks - 1}
    for qi in range(n_boxes):
        ks = range(n_boxes) if qi % 2 == 0 else range(n_boxes - 1, -1, -1)
        for ki in ks:
            new = {}
            for side, box in ((SIDE_Q, qi), (SIDE_K, ki)):
                new[side] = held[side] != box
                if new[side]:
                    bank[side] = (bank[side] + 1) % banks
                    held[side] = box
            steps.append(Step(qi, ki, bank[SIDE_Q], bank[SIDE_K], new[SIDE_Q], new[SIDE_K]))
    return steps


@dataclass(frozen=True)
class HeadAddrs:
    """Byte addresses of one head in memory: Q and K tensors (token (0, 0, 0)) with their
    byte strides (token, y, t; the same for both), and the S region, where block (qi, ki) is
    at ``s + (qi * n_boxes + ki) * pitch``, ``pitch`` the block's ``box_tokens**2 * 4`` bytes
    rounded up to the 16-byte alignment of STORE (:attr:`HeadPlan.block_pitch`)."""
    q: int
    k: int
    s: int
    token_stride: int
    y_stride: int
    t_stride: int

    @property
    def strides(self) -> tuple:
        """``(token_stride, y_stride, t_stride)``."""
        return (self.token_stride, self.y_stride, self.t_stride)

    @classmethod
    def packed(cls, grid, head_dim: int, base: int = 0) -> "HeadAddrs":
        """Q, K and S back to back from ``base`` (aligned), tokens ``head_dim`` bytes rounded
        up to the 16-byte beat, rows and frames without gaps."""
        grid = as_grid(grid)
        ts = _align(head_dim)
        ys, tt = grid.w * ts, grid.h * grid.w * ts
        q = _align(base)
        k = q + _align(grid.n * ts)
        s = k + _align(grid.n * ts)
        return cls(q, k, s, ts, ys, tt)

    def s_end(self, n_blocks: int, block_bytes: int) -> int:
        """First byte after the S region."""
        return self.s + n_blocks * block_bytes


@dataclass
class HeadPlan:
    """A head's program: grid, groups, box, boxes per axis, the steps, the addresses, the
    core limits and variant, and the commands."""
    grid: VideoGrid
    groups: ChannelGroups
    box: tuple
    boxes: tuple
    steps: list
    addrs: HeadAddrs
    limits: CoreLimits
    variant: str
    full_bits: int
    half_bits: int
    commands: list

    @property
    def n_boxes(self) -> int:
        """Boxes of one side."""
        return int(np.prod(self.boxes))

    @property
    def box_tokens(self) -> int:
        """Tokens per box."""
        return box_tokens(self.box)

    @property
    def block_bytes(self) -> int:
        """Bytes of one stored S block (box_tokens^2 int32)."""
        return self.box_tokens ** 2 * 4

    @property
    def block_pitch(self) -> int:
        """Bytes from one S block's address to the next: :attr:`block_bytes` rounded up to
        the 16-byte alignment a STORE address needs (an odd ``box_tokens**2`` also ends with
        a half-empty 64-bit beat, which the pitch covers)."""
        return _align(self.block_bytes)

    @property
    def memory_size(self) -> int:
        """Bytes of memory the plan touches (end of the S region)."""
        return self.addrs.s_end(self.n_boxes ** 2, self.block_pitch)

    def origin(self, i: int) -> tuple:
        """Grid origin of box ``i`` (boxes in t-major, x-fastest order)."""
        it, ih, iw = np.unravel_index(i, self.boxes)
        return (int(it) * self.box[0], int(ih) * self.box[1], int(iw) * self.box[2])

    def s_address(self, qi: int, ki: int) -> int:
        """Address of S block (qi, ki)."""
        return self.addrs.s + (qi * self.n_boxes + ki) * self.block_pitch


def _variant(limits: CoreLimits, variant):
    if variant is None:
        return limits.variants[-1]        # the most capable variant the core was built for
    variant_flags(variant)                # names the allowed variants if unknown
    if variant not in limits.variants:
        raise ValueError(f"variant must be one the core runs ({', '.join(limits.variants)}), "
                         f"got {variant!r}")
    return variant


def plan_head(cfg: KaleidoConfig, grid, head_dim: int, groups=None, box=None, addrs=None,
              variant: str | None = None, full_bits: int | None = None,
              half_bits: int | None = None, banks: int | None = None, base: int = 0,
              split_pairs: bool = False) -> HeadPlan:
    """The program that computes S of one head on ``grid`` on the core built from ``cfg``.

    ``groups``: a ``ChannelGroups`` or preset name (default: ``cfg.preset``, whose head_dim
    must then be ``head_dim``). ``box``: default :func:`choose_box`; an explicit box that cuts
    reuse pairs (:func:`split_axes`) is refused unless ``split_pairs`` (S then differs from
    the whole grid's wherever a cut pair was reused). ``addrs``: default
    :meth:`HeadAddrs.packed` from ``base``. ``variant``: default the core's most capable;
    thresholds default to ``cfg``'s; ``banks``: scratchpad banks per side, default the
    core's ``core_banks`` (1 gives a program without prefetch).
    """
    if not isinstance(cfg, KaleidoConfig):
        raise ConfigError(f"cfg must be a KaleidoConfig, got {type(cfg).__name__}")
    grid = as_grid(grid)
    groups = _as_groups(groups if groups is not None else cfg.preset)
    if groups.head_dim != head_dim:
        raise ValueError(f"head_dim {head_dim} does not match the channel groups "
                         f"{groups.name!r} ({groups.head_dim} channels); pass groups=")
    limits = CoreLimits.from_config(cfg, banks)
    if head_dim > limits.max_head_dim:
        raise ValueError(f"head_dim must be at most engine_max_head_dim = "
                         f"{limits.max_head_dim}, got {head_dim}")
    variant = _variant(limits, variant)
    fb = cfg.full_bits if full_bits is None else full_bits
    hb = cfg.half_bits if half_bits is None else half_bits
    if box is None:
        box = choose_box(grid, groups, limits.max_box_tokens)
    else:
        box = tuple(int(b) for b in box)
        if len(box) != 3 or min(box) < 1 or max(box) > 255:
            raise ValueError(f"box must be three extents in [1, 255], got {box!r}")
        if box_tokens(box) > limits.max_box_tokens:
            raise ValueError(f"box {box} has {box_tokens(box)} tokens; engine_max_tokens is "
                             f"{limits.max_box_tokens}")
        cut = split_axes(grid, groups, box)
        if cut and not split_pairs:
            raise ValueError(
                f"box {box} cuts reuse pairs along {[('t', 'y', 'x')[a] for a in cut]} (odd "
                f"extent below the grid's); use even extents there, or split_pairs=True")
    boxes = box_counts(grid, box)
    nb = int(np.prod(boxes))
    if addrs is None:
        addrs = HeadAddrs.packed(grid, head_dim, base)
    steps = command_order(nb, limits.banks)
    plan = HeadPlan(grid, groups, box, boxes, steps, addrs, limits, variant, fb, hb, [])
    plan.commands = _commands(plan)
    return plan


def _commands(plan: HeadPlan) -> list:
    reuse, sched, match = variant_flags(plan.variant)
    g, a = plan.grid, plan.addrs
    out = [Config(*plan.box, plan.groups.head_dim, *plan.groups.directions, plan.full_bits,
                  plan.half_bits, int(reuse), int(sched), int(match), g.t, g.h, g.w)]
    out += groups_commands(plan.groups.group_of)
    out += [Strides(side, *a.strides) for side in (SIDE_Q, SIDE_K)]

    def loads(step):
        cmds = []
        if step.load_q:
            cmds.append(Load(SIDE_Q, step.q_bank, *plan.origin(step.qi), a.q))
        if step.load_k:
            cmds.append(Load(SIDE_K, step.k_bank, *plan.origin(step.ki), a.k))
        return cmds

    prefetch = plan.limits.banks >= 2
    steps = plan.steps
    out += loads(steps[0])
    for i, step in enumerate(steps):
        if not prefetch and i:
            out += loads(step)
        if prefetch and i + 1 < len(steps):
            # The next step's new box goes to the other bank, so it can load while this
            # step computes (issued first so an in-order core starts the DMA early).
            nxt = steps[i + 1]
            assert not (nxt.load_q and nxt.q_bank == step.q_bank)
            assert not (nxt.load_k and nxt.k_bank == step.k_bank)
            out += loads(nxt)
        out.append(Compute(step.q_bank, step.k_bank))
        out.append(Store(plan.s_address(step.qi, step.ki)))
    out.append(Fence())
    return out


def plan_counts(plan: HeadPlan) -> dict:
    """What the plan's program does, without running it: ``commands`` (total) and
    ``per_opcode``, ``loads`` per side, ``loads_saved`` (K loads the serpentine order
    saves over reloading each row), ``bytes_loaded`` (grid tokens x head_dim per load;
    padding is not read), ``bytes_stored``, ``bytes_moved`` (both), ``blocks``."""
    per = {}
    for c in plan.commands:
        per[c.NAME] = per.get(c.NAME, 0) + 1
    real = [int(_real(plan, i).sum()) for i in range(plan.n_boxes)]
    d = plan.groups.head_dim
    lq = [s.qi for s in plan.steps if s.load_q]
    lk = [s.ki for s in plan.steps if s.load_k]
    loaded = (sum(real[i] for i in lq) + sum(real[i] for i in lk)) * d
    blocks = len(plan.steps)
    stored = blocks * plan.block_bytes
    return {"commands": len(plan.commands), "per_opcode": per,
            "loads": {"Q": len(lq), "K": len(lk)},
            "loads_saved": plan.n_boxes * plan.n_boxes - len(lk),
            "bytes_loaded": loaded, "bytes_stored": stored, "bytes_moved": loaded + stored,
            "blocks": blocks}


def _real(plan: HeadPlan, i: int) -> np.ndarray:
    coords = box_coords(plan.origin(i), plan.box)
    return (coords < np.asarray(plan.grid.shape)[None, :]).all(axis=1)


def write_operands(memory: Memory, q, k, addrs: HeadAddrs, grid) -> None:
    """Write the (N, d) int8 Q and K of ``grid`` into ``memory`` at ``addrs``."""
    grid = as_grid(grid)
    for name, x, at in (("q", q, addrs.q), ("k", k, addrs.k)):
        x = np.asarray(x)
        if x.dtype != np.int8 or x.ndim != 2 or x.shape[0] != grid.n:
            raise ValueError(f"{name} must be an int8 array of shape ({grid.n}, d) for grid "
                             f"{grid}, got {x.dtype} {x.shape}")
        if x.shape[1] > addrs.token_stride:
            raise ValueError(f"{name} has {x.shape[1]} channels; token_stride is "
                             f"{addrs.token_stride} bytes")
        memory.write_tensor(at, x, grid, addrs.strides)


def _assemble(blocks, grid: VideoGrid, box) -> np.ndarray:
    """S (N, N) int64 from ``[(q_origin, k_origin, block)]``; every grid pair exactly once."""
    N = grid.n
    s = np.zeros((N, N), np.int64)
    hits = np.zeros((N, N), np.int16)
    gshape = np.asarray(grid.shape)
    for qo, ko, blk in blocks:
        idx = []
        for o in (qo, ko):
            c = box_coords(o, box)
            real = (c < gshape[None, :]).all(axis=1)
            idx.append((np.ravel_multi_index(c[real].T, grid.shape), real))
        (gq, rq), (gk, rk) = idx
        s[np.ix_(gq, gk)] = blk[np.ix_(rq, rk)]
        hits[np.ix_(gq, gk)] += 1
    if hits.min() != 1 or hits.max() != 1:
        raise ValueError(f"the blocks cover {int((hits == 0).sum())} token pairs of grid "
                         f"{grid} never and {int((hits > 1).sum())} more than once")
    return s


def assemble_s(result: ProgramResult) -> np.ndarray:
    """The (N, N) int64 S of the grid from a program's blocks (as computed, before STORE):
    each block's rows and columns on grid tokens, padding dropped; every token pair must be
    covered exactly once (else ``ValueError``)."""
    return _assemble([(b.q_origin, b.k_origin, b.s) for b in result.blocks], result.grid,
                     result.box)


def read_s(memory: Memory, plan: HeadPlan) -> np.ndarray:
    """The (N, N) int64 S as the host sees it: the plan's stored int32 blocks read back from
    ``memory`` and assembled."""
    n = plan.box_tokens
    blocks = []
    for st in plan.steps:
        blk = memory.read(plan.s_address(st.qi, st.ki), n * n, np.int32).reshape(n, n)
        blocks.append((plan.origin(st.qi), plan.origin(st.ki), blk.astype(np.int64)))
    return _assemble(blocks, plan.grid, plan.box)


@dataclass
class HeadRun:
    """One head run end to end: S read back from memory, the plan, the program's result
    (blocks and counters) and the memory."""
    s: np.ndarray
    plan: HeadPlan
    result: ProgramResult
    memory: Memory


def run_head(cfg: KaleidoConfig, q, k, grid, groups=None, engine: bool = False,
             **plan_args) -> HeadRun:
    """Plan the head (:func:`plan_head`, ``plan_args`` passed on), write Q and K to a fresh
    memory, run the program (``golden.engine.program.run_program``; ``engine=True``: every
    block through the engine model, with its counters) and read S back."""
    grid = as_grid(grid)
    q, k = np.asarray(q), np.asarray(k)
    if q.ndim != 2:
        raise ValueError(f"q must be an (N, d) int8 array, got shape {q.shape}")
    plan = plan_head(cfg, grid, q.shape[1], groups, **plan_args)
    memory = Memory(plan.memory_size)
    write_operands(memory, q, k, plan.addrs, grid)
    result = run_program(plan.commands, memory, plan.limits, engine=engine)
    return HeadRun(read_s(memory, plan), plan, result, memory)


def whole_grid_s(q, k, grid, groups, full_bits: int, half_bits: int, variant: str):
    """The whole-grid golden S a head run must equal (dense: ``q @ k.T``)."""
    if not variant_flags(variant)[0]:
        return np.asarray(q, np.int64) @ np.asarray(k, np.int64).T
    return attention_scores(q, k, grid, groups, full_bits, half_bits)

