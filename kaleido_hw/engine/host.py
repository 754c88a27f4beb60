"""Host library of the streaming engine core (``docs/engine.md``, "Command stream"): turns
"compute S of this head" or "compute this linear layer" at these addresses into a command
program.

- :func:`choose_box`: the box (``box_t x box_h x box_w`` tokens) the grid is cut into: at
  most the core's ``engine_max_tokens``, and along every reuse axis even (or the whole axis)
  so that no reuse pair (window of 2) of the grid is cut by a box border; then the blocks
  assembled from the boxes equal the whole-grid result bit for bit. Edge boxes are
  zero-padded by the core.
- :func:`command_order`: (Q box, K operand) pairs, Q boxes outer and K operands inner in
  serpentine order (the K operand that ends one Q row starts the next, so it is not loaded
  again), new operands alternating between the banks so each load can overlap the compute
  before it; with ``slices`` each pair's input-channel slices back to back.
- Attention scores: :func:`plan_head` -> :class:`HeadPlan` (box, addresses, program);
  :func:`write_operands`; :func:`assemble_s` / :func:`read_s`; :func:`run_head` end to end
  through ``golden.engine.program.run_program``; :func:`whole_grid_s`.
- Linear layers ``Y = X_eff W`` (COMPUTE kind 1): :func:`plan_linear` -> :class:`LinearPlan`,
  the Q side boxes of the activation X (codes by the window rule), the K side blocks of
  ``box_tokens`` weight rows (rows of W^T, read by ``rows`` LOADs); ``c_in`` above
  ``engine_max_head_dim`` in :func:`linear_slices` of ``head_dim`` channels, one COMPUTE per
  slice adding onto the one before (``acc``), one STORE per block;
  :func:`write_linear_operands`; :func:`read_y`; :func:`run_linear`; :func:`whole_grid_y`.
- :func:`plan_counts` of either plan.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from golden.engine.commands import (ALIGN, KIND_LINEAR, KIND_S, SIDE_K, SIDE_Q, Compute,
                                    Config, Fence, Load, Store, Strides, groups_commands)
from golden.engine.program import (CoreLimits, Memory, ProgramResult, box_counts, box_on_grid,
                                   box_origin, box_tokens, run_program)
from golden.numerics import (RESULT_CHANNELS, ChannelGroups, VideoGrid, _as_groups, as_grid,
                             attention_scores, group_channels)
from golden.engine.linear_layer import linear_layer_counters
from golden.engine.model import plain_walk, variant_flags
from golden.window import linear
from kaleido_hw.config import ConfigError, KaleidoConfig


__all__ = ["reuse_axes", "split_axes", "window3_box_cost", "choose_box", "Step",
           "command_order", "HeadAddrs", "HeadPlan", "plan_head", "plan_counts", "write_operands",
           "assemble_s", "read_s", "HeadRun", "run_head", "whole_grid_s",
           "LinearAddrs", "LinearPlan", "linear_slices", "plan_linear", "write_linear_operands",
           "linear_counters", "read_y", "LinearRun", "run_linear", "whole_grid_y"]

_AXES = ("t", "y", "x")


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def reuse_axes(groups) -> tuple:
    """Grid axes (0 t, 1 y, 2 x) some non-empty channel group reuses along."""
    groups = _as_groups(groups)
    return tuple(sorted({groups.directions[g] for g in range(3) if groups.sizes[g]}))


def split_axes(grid, groups, box, window: int = 2) -> tuple:
    """Reuse axes along which ``box`` cuts pairs of the grid: the box extent is odd and
    smaller than the grid's (a pair (2i, 2i+1) then straddles some box border, and inside
    the box the pairing differs from the grid's). Empty: S from boxes equals the grid's.
    The windows of 2 of a linear layer's activation are these pairs too; ``window=3``: its
    windows of 3, which an extent not a multiple of 3 cuts, and so does a padded last box
    whose last window has two real tokens (padding completes it, and the window rule over
    three tokens then differs from the grid's, where those two are NONE): see
    :func:`_window3_cut`."""
    grid = as_grid(grid)
    if window == 3:
        return tuple(a for a in reuse_axes(groups) if _window3_cut(box[a], grid.shape[a]))
    return tuple(a for a in reuse_axes(groups)
                 if box[a] % window and box[a] < grid.shape[a])


def _window3_cut(extent: int, length: int) -> bool:
    """A box ``extent`` cuts the windows of 3 of an axis of ``length`` tokens: it is below
    the length and not a multiple of 3, or the last box's real tokens end in a window of
    two (which the box's padding would complete)."""
    if extent >= length:
        return False
    return extent % 3 != 0 or (length % extent) % 3 == 2


def window3_box_cost(grid, box, axes, c_out: int, params) -> float:
    """Estimated cycles per chunk of a linear layer with windows of 3 in boxes of ``box``
    (``c_out`` features, ``params``' P arrays of R x C, chunks of W channels), by which the
    host picks a window-3 box. ``axes``: ``{axis: share}``, the share of the channels whose
    windows run along each grid axis. A chunk along axis a runs tile quads (boxes x row
    blocks of the box's window units along a x weight blocks x column blocks of their
    ``box_tokens`` rows, one per column) of at least ``W + 2R`` steps each over P arrays;
    every COMPUTE adds the first quad's loads and the chunk barrier (``3M + 4``, M = max(R,
    C)). The head rule (fewest boxes) would take a 63-token box on a 21-frame grid: 9
    weight blocks of 512 features where 48 tokens take 11 with 3% padding, and 1.36x the
    cycles."""
    n = box_tokens(box)
    R, C, P = params.rows, params.cols, params.arrays
    boxes = int(np.prod(box_counts(grid, box)))
    n_k = -(-c_out // n)
    quads = sum(share * -(-(n // box[a] * -(-box[a] // 3)) // R) for a, share in axes.items())
    quads *= boxes * n_k * -(-n // C)
    return quads * (params.width + 2 * R) / P + boxes * n_k * (3 * max(R, C) + 4)


def choose_box(grid, groups, max_tokens: int, windows=(), pairs: bool = True,
               cost=None) -> tuple:
    """The box a head on ``grid`` is cut into, within ``max_tokens`` tokens.

    Along each reuse axis an extent is even or the whole axis (no pair cut, see
    :func:`split_axes`); other axes take any extent up to the grid's. ``windows``: more
    ``(axis, window)`` pairs whose windows no box may cut (an attention head's V: extent a
    multiple of the window, or the whole axis). Among those, the box
    with the fewest boxes per side (K traffic grows with boxes x padded tokens, blocks and
    their fixed costs with boxes^2), then the fewest padded tokens (boxes x box tokens: the
    engine's work grows with its square), then the longest x, then y extent (longer
    contiguous memory bursts). ``pairs=False``: the reuse axes need no even extent (a linear
    layer's windows of 3, given in ``windows``). ``cost``: a function of the box ranked
    before all of these (a linear layer's windows of 3: :func:`window3_box_cost`).
    """
    grid, groups = as_grid(grid), _as_groups(groups)
    max_tokens = _positive("max_tokens", max_tokens)
    axes = reuse_axes(groups)
    multiple = [2 if pairs and a in axes else 1 for a in range(3)]
    for a, w in windows:
        multiple[a] = int(np.lcm(multiple[a], w))
    # a linear layer's windows of 3 (pairs False): no padded window of two real tokens either
    thirds = {a for a, w in windows if w == 3} if not pairs else set()
    options = []
    for a, g in enumerate(grid.shape):
        ext = range(1, min(g, max_tokens) + 1)
        options.append([b for b in ext if (b % multiple[a] == 0 or b == g)
                        and not (a in thirds and _window3_cut(b, g))])
    best = None
    for box in itertools.product(*options):
        n = box_tokens(box)
        if n > max_tokens:
            continue
        nb = int(np.prod(box_counts(grid, box)))
        key = (cost(box) if cost else 0, nb, nb * n, -box[2], -box[1], -box[0])
        if best is None or key < best[0]:
            best = (key, box)
    if best is None:
        need = [min(multiple[a], grid.shape[a]) for a in range(3)]
        raise ValueError(
            f"no box of at most max_tokens = {max_tokens} tokens keeps the reuse "
            f"{'pairs' if pairs else 'windows'} of grid {grid} whole ("
            + (f"reuse axes {[_AXES[a] for a in axes]} need even extents" if pairs else "")
            + (", " if pairs and windows else "")
            + (f"windows {[(_AXES[a], w) for a, w in windows]} multiples" if windows else "")
            + f": at least {need[0]}x{need[1]}x{need[2]} = {int(np.prod(need))} tokens)")
    return best[1]


@dataclass(frozen=True)
class Step:
    """One COMPUTE of the order: block (Q box, K operand) indices ``qi``, ``ki``, the banks
    its operands are in, whether they are new (to be loaded) or already in their bank, and
    the input-channel ``slice`` it computes (0 unless the order has slices: a block's slices
    are consecutive steps, each adding onto the one before)."""
    qi: int
    ki: int
    q_bank: int
    k_bank: int
    load_q: bool
    load_k: bool
    slice: int = 0


def command_order(n_boxes: int, banks: int = 2, n_k: int | None = None,
                  slices: int = 1, serpentine: bool = True) -> list:
    """The :class:`Step` s of an ``n_boxes x n_k`` block grid (``n_k`` default ``n_boxes``:
    a head's Q and K boxes; a linear layer has ``n_k`` weight blocks): Q boxes outer; K
    operands inner in serpentine order (forward for even Q rows, backward for odd ones), so
    the K operand that ends one row starts the next and stays in its bank; every new operand
    goes to the next bank of its side (round robin), so it never overwrites the one the step
    before it reads.

    ``slices`` > 1: every block is that many consecutive steps, one per input-channel slice
    (operands (qi, slice) and (ki, slice)), in serpentine order too (forward in even blocks,
    backward in odd ones), so the slice that ends one block starts the next and the operand
    the two blocks share (the Q slice within a row, the K slice at a row's turn) stays in its
    bank. ``slices`` 1 gives the steps of the plain order (``slice`` 0).

    ``serpentine=False``: every Q row walks its K operands forward (an attention head's
    key blocks, whose order the running softmax's rounding depends on, in one order for
    every query box); a row then starts by loading its first K operand again, unless it
    has only one."""
    n_q = _positive("n_boxes", n_boxes)
    banks = _positive("banks", banks)
    n_k = n_q if n_k is None else _positive("n_k", n_k)
    n_s = _positive("slices", slices)
    steps = []
    held = {SIDE_Q: None, SIDE_K: None}       # operand in the side's current bank
    bank = {SIDE_Q: banks - 1, SIDE_K: banks - 1}
    for qi in range(n_q):
        ks = range(n_k) if qi % 2 == 0 or not serpentine else range(n_k - 1, -1, -1)
        for ki in ks:
            forward = len(steps) // n_s % 2 == 0
            for s in (range(n_s) if forward else range(n_s - 1, -1, -1)):
                new = {}
                for side, operand in ((SIDE_Q, (qi, s)), (SIDE_K, (ki, s))):
                    new[side] = held[side] != operand
                    if new[side]:
                        bank[side] = (bank[side] + 1) % banks
                        held[side] = operand
                steps.append(Step(qi, ki, bank[SIDE_Q], bank[SIDE_K], new[SIDE_Q], new[SIDE_K],
                                  s))
    return steps


def _tensor_layout(grid: VideoGrid, channels: int) -> tuple:
    """Packed strides ``(token, y, t)`` of an (N, channels) tensor on ``grid`` (tokens
    rounded up to the 16-byte beat, rows and frames without gaps) and its bytes, aligned."""
    ts = _align(channels)
    return (ts, grid.w * ts, grid.h * grid.w * ts), _align(grid.n * ts)


def _tensor_end(address: int, grid: VideoGrid, strides, channels: int) -> int:
    """First byte after the last token of a tensor at ``address``."""
    last = sum((g - 1) * s for g, s in zip((grid.w, grid.h, grid.t), strides))
    return address + last + channels


class _TokenStrides:
    """The ``strides`` of an address record whose tensors have ``token_stride``,
    ``y_stride`` and ``t_stride`` fields (the order STRIDES and ``Memory.write_tensor`` take)."""

    @property
    def strides(self) -> tuple:
        """``(token_stride, y_stride, t_stride)``."""
        return (self.token_stride, self.y_stride, self.t_stride)


@dataclass(frozen=True)
class HeadAddrs(_TokenStrides):
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

    @classmethod
    def packed(cls, grid, head_dim: int, base: int = 0) -> "HeadAddrs":
        """Q, K and S back to back from ``base`` (aligned), tokens ``head_dim`` bytes rounded
        up to the 16-byte beat, rows and frames without gaps."""
        strides, nbytes = _tensor_layout(as_grid(grid), head_dim)
        q = _align(base)
        k = q + nbytes
        return cls(q, k, k + nbytes, *strides)

    def s_end(self, n_blocks: int, block_bytes: int) -> int:
        """First byte after the S region."""
        return self.s + n_blocks * block_bytes


@dataclass(frozen=True)
class LinearAddrs(_TokenStrides):
    """Byte addresses of one linear layer ``Y = X_eff W`` in memory.

    x : int            the activation X, token (0, 0, 0), with byte strides ``token_stride``,
                       ``y_stride``, ``t_stride`` (as a head's Q)
    w : int            the weight rows: row f (f = 0 .. rows - 1) is output feature f's
                       ``c_in`` weights (column f of W) at ``w + f * w_stride``; a plan reads
                       whole blocks of ``box_tokens`` rows, so rows past ``c_out`` must exist
                       (zeros: :func:`write_linear_operands`)
    y : int            the Y region: block (qi, ki) at ``y + (qi * n_k + ki) * pitch``
                       (:meth:`LinearPlan.y_address`)
    w_stride : int     bytes from one weight row to the next, a multiple of 16, >= c_in

    A plan in slices (``c_in`` above ``engine_max_head_dim``, :func:`linear_slices`) reads
    slice s of a token or weight row at its address + ``s * head_dim``: X tokens and weight
    rows hold :attr:`LinearPlan.c_padded` channels (c_in, then zeros up to whole slices), so
    ``token_stride`` and ``w_stride`` must be at least that.
    """
    x: int
    w: int
    y: int
    token_stride: int
    y_stride: int
    t_stride: int
    w_stride: int

    def w_strides(self, grid) -> tuple:
        """The K side's STRIDES for weight rows on ``grid``: token stride ``w_stride`` (the
        only one a ``rows`` LOAD uses); y and t strides the smallest the core's overlap check
        takes (``grid_w * w_stride``, ``grid_h * y_stride``)."""
        grid = as_grid(grid)
        return (self.w_stride, grid.w * self.w_stride, grid.h * grid.w * self.w_stride)

    @classmethod
    def packed(cls, grid, c_in: int, c_out_rows: int, base: int = 0) -> "LinearAddrs":
        """X, the weight rows and Y back to back from ``base`` (aligned): X packed as a
        head's Q (:meth:`HeadAddrs.packed`), then ``c_out_rows`` weight rows (c_out rounded up
        to whole blocks: :attr:`LinearPlan.w_rows`) of ``c_in`` bytes rounded up to 16.
        ``c_in``: the channels a token and a row are laid out with (a plan in slices passes
        :attr:`LinearPlan.c_padded`)."""
        strides, nbytes = _tensor_layout(as_grid(grid), c_in)
        x = _align(base)
        w = x + nbytes
        return cls(x, w, w + _align(c_out_rows * strides[0]), *strides, strides[0])


class _BlockPlan:
    """What the plans of heads and linear layers share: the Q side is the boxes of the grid
    (rows of every block), the K side ``n_k`` operands; one block per :class:`Step`, stored
    row-major as ``box_tokens**2`` int32 back to back, block (qi, ki) at
    ``blocks + (qi * n_k + ki) * block_pitch``. A plan defines ``KIND`` (COMPUTE kind),
    ``n_k``, ``_core_groups`` (the channel groups CONFIG and GROUPS give the core),
    ``_blocks`` (address of block (0, 0)), ``_strides`` (STRIDES of both sides), ``_load``
    (the LOAD of one operand slice), ``_loaded_tokens``, ``_operand_starts`` and
    ``_operand_ends``; a linear plan its activation's ``window`` (2 or 3: COMPUTE's
    ``window3``)."""
    KIND = KIND_S
    window = 2

    @property
    def block_steps(self) -> list:
        """The step that ends each block (its STORE follows), in program order: every step,
        unless blocks come in slices (:attr:`LinearPlan.slices`)."""
        st = self.steps
        return [s for i, s in enumerate(st)
                if i + 1 == len(st) or (st[i + 1].qi, st[i + 1].ki) != (s.qi, s.ki)]

    @property
    def n_q(self) -> int:
        """Q boxes: boxes of the grid."""
        return int(np.prod(self.boxes))

    @property
    def box_tokens(self) -> int:
        """Tokens per box."""
        return box_tokens(self.box)

    @property
    def block_bytes(self) -> int:
        """Bytes of one stored block (box_tokens^2 int32)."""
        return self.box_tokens ** 2 * 4

    @property
    def block_pitch(self) -> int:
        """Bytes from one block's address to the next: :attr:`block_bytes` rounded up to
        the 16-byte alignment a STORE address needs (an odd ``box_tokens**2`` also ends with
        a half-empty 64-bit beat, which the pitch covers)."""
        return _align(self.block_bytes)

    #: Names of the operand regions (``_operand_ends`` order) and of the result region.
    OPERANDS = ("q", "k")
    RESULT = "s"

    @property
    def _result_end(self) -> int:
        """First byte after the result region (every block)."""
        return self._blocks + self.n_q * self.n_k * self.block_pitch

    def regions(self) -> dict:
        """``{name: (address, bytes)}`` of every region the program reads or writes: its
        operands (:attr:`OPERANDS`, from each tensor's first byte to its last token's last
        channel) and its result (:attr:`RESULT`, every block or O with its padding to the
        16-byte pitch). What a bench preloads and what it checks after the FENCE."""
        out = {name: (start, end - start) for name, start, end in
               zip(self.OPERANDS, self._operand_starts(), self._operand_ends())}
        out[self.RESULT] = (self._blocks, self._result_end - self._blocks)
        return out

    @property
    def memory_size(self) -> int:
        """Bytes of memory the plan touches: the end of its last region (the result, with
        the packed addresses)."""
        return max(self._result_end, *self._operand_ends())

    def origin(self, i: int) -> tuple:
        """Grid origin of box ``i`` (boxes in t-major, x-fastest order)."""
        return box_origin(i, self.boxes, self.box)

    def block_address(self, qi: int, ki: int) -> int:
        """Address of block (qi, ki)."""
        return self._blocks + (qi * self.n_k + ki) * self.block_pitch

    def real_tokens(self, i: int) -> np.ndarray:
        """Which tokens of box ``i`` (box-local order) lie inside the grid."""
        return box_on_grid(self.origin(i), self.box, self.grid)[1]

    def grid_tokens(self, i: int) -> tuple:
        """``(tokens, real)``: the grid token indices of box ``i``'s tokens inside the grid
        (box-local order) and :meth:`real_tokens`."""
        return box_on_grid(self.origin(i), self.box, self.grid)

    def _box_load(self, side: int, bank: int, i: int, address: int) -> Load:
        return Load(side, bank, *self.origin(i), address)

    def _preamble(self) -> list:
        """Commands between GROUPS and STRIDES (none)."""
        return []

    def _k_loads(self, step) -> list:
        """The LOADs of a step's new K operand."""
        return [self._load(SIDE_K, step.k_bank, step.ki, step.slice)]

    def _compute_store(self, i: int) -> list:
        """Step ``i``'s COMPUTE of the plan's kind (``acc`` when the step before computed a
        slice of the same block) and, after a block's last step, its STORE."""
        steps = self.steps
        step = steps[i]

        def same_block(a, b):
            return (a.qi, a.ki) == (b.qi, b.ki)
        acc = i > 0 and same_block(steps[i - 1], step)
        out = [Compute(step.q_bank, step.k_bank, self.KIND, int(acc),
                       window3=int(self.window == 3))]
        if i + 1 == len(steps) or not same_block(steps[i + 1], step):
            out.append(Store(self.block_address(step.qi, step.ki)))
        return out

    @property
    def _core_groups(self) -> ChannelGroups:
        return self.groups


class _BoxPlan(_BlockPlan):
    """Plans whose every side is the grid's boxes (a head's S, an attention head): as many
    K (and V) boxes as Q boxes, every side's tensor with the addresses' strides.
    ``_tensors`` gives the sides' tensor addresses in side order (Q, K, then V)."""

    @property
    def n_boxes(self) -> int:
        """Boxes of one side."""
        return self.n_q

    @property
    def n_k(self) -> int:
        """K boxes: :attr:`n_boxes`."""
        return self.n_q

    def _strides(self) -> list:
        return [Strides(side, *self.addrs.strides) for side in range(len(self._tensors()))]

    def _load(self, side: int, bank: int, i: int, s: int = 0) -> Load:
        return self._box_load(side, bank, i, self._tensors()[side])

    def _loaded_tokens(self, side: int, i: int) -> int:
        return int(self.real_tokens(i).sum())

    def _operand_starts(self) -> tuple:
        return self._tensors()

    def _operand_ends(self) -> tuple:
        d = self.groups.head_dim
        return tuple(_tensor_end(a, self.grid, self.addrs.strides, d) for a in self._tensors())


@dataclass
class HeadPlan(_BoxPlan):
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

    def s_address(self, qi: int, ki: int) -> int:
        """Address of S block (qi, ki)."""
        return self.block_address(qi, ki)

    @property
    def _blocks(self) -> int:
        return self.addrs.s

    def _tensors(self) -> tuple:
        return (self.addrs.q, self.addrs.k)


@dataclass
class LinearPlan(_BlockPlan):
    """A linear layer's program ``Y = X_eff W`` (X (N, c_in) on ``grid``, W (c_in, c_out)):
    grid, channel groups of X (each channel's window direction), box, boxes per axis,
    ``c_in``, ``c_out``, the steps (Q boxes x weight blocks), the addresses, the core limits
    and variant, the thresholds and the commands. Block (qi, ki) is Y on the tokens of Q box
    ``qi`` (rows) and features ``ki * box_tokens + j`` (columns j).

    ``slice_groups``: the groups of one input-channel slice (:attr:`head_dim` channels, what
    CONFIG and GROUPS give the core; None: ``groups``, the layer in one slice). With
    :attr:`slices` > 1 every block is that many COMPUTEs (one per slice, the steps' ``slice``,
    each after the first adding onto the one before) and one STORE."""
    KIND = KIND_LINEAR
    OPERANDS = ("x", "w")
    RESULT = "y"
    grid: VideoGrid
    groups: ChannelGroups
    box: tuple
    boxes: tuple
    c_in: int
    c_out: int
    steps: list
    addrs: LinearAddrs
    limits: CoreLimits
    variant: str
    full_bits: int
    half_bits: int
    commands: list
    slice_groups: ChannelGroups | None = None
    window: int = 2

    @property
    def _core_groups(self) -> ChannelGroups:
        return self.groups if self.slice_groups is None else self.slice_groups

    @property
    def head_dim(self) -> int:
        """Channels of one slice (CONFIG's head_dim): c_in in one slice."""
        return self._core_groups.head_dim

    @property
    def slices(self) -> int:
        """Input-channel slices: ``ceil(c_in / head_dim)``."""
        return -(-self.c_in // self.head_dim)

    @property
    def c_padded(self) -> int:
        """Channels X's tokens and the weight rows are laid out with: ``slices * head_dim``
        (c_in, then zeros)."""
        return self.slices * self.head_dim

    @property
    def n_k(self) -> int:
        """Weight blocks: ``ceil(c_out / box_tokens)``."""
        return -(-self.c_out // self.box_tokens)

    @property
    def w_rows(self) -> int:
        """Weight rows the program reads: c_out rounded up to whole blocks (the rows past
        c_out give columns :func:`read_y` drops)."""
        return self.n_k * self.box_tokens

    def y_address(self, qi: int, ki: int) -> int:
        """Address of Y block (qi, ki)."""
        return self.block_address(qi, ki)

    @property
    def _blocks(self) -> int:
        return self.addrs.y

    def _strides(self) -> list:
        return [Strides(SIDE_Q, *self.addrs.strides),
                Strides(SIDE_K, *self.addrs.w_strides(self.grid))]

    def _load(self, side: int, bank: int, i: int, s: int = 0) -> Load:
        offset = s * self.head_dim
        if side == SIDE_Q:
            return self._box_load(side, bank, i, self.addrs.x + offset)
        rows = self.addrs.w + i * self.box_tokens * self.addrs.w_stride + offset
        return Load(SIDE_K, bank, 0, 0, 0, rows, rows=1)

    def _loaded_tokens(self, side: int, i: int) -> int:
        return int(self.real_tokens(i).sum()) if side == SIDE_Q else self.box_tokens

    def _operand_starts(self) -> tuple:
        return (self.addrs.x, self.addrs.w)

    def _operand_ends(self) -> tuple:
        a = self.addrs
        return (_tensor_end(a.x, self.grid, a.strides, self.c_padded),
                a.w + (self.w_rows - 1) * a.w_stride + self.c_padded)


def _variant(limits: CoreLimits, variant):
    if variant is None:
        return limits.variants[-1]        # the most capable variant the core was built for
    variant_flags(variant)                # names the allowed variants if unknown
    if variant not in limits.variants:
        raise ValueError(f"variant must be one the core runs ({', '.join(limits.variants)}), "
                         f"got {variant!r}")
    return variant


def _check_cfg(cfg) -> None:
    if not isinstance(cfg, KaleidoConfig):
        raise ConfigError(f"cfg must be a KaleidoConfig, got {type(cfg).__name__}")


def _core(cfg: KaleidoConfig, channels: int, name: str, banks, variant, full_bits,
          half_bits) -> tuple:
    """``(limits, variant, full_bits, half_bits)`` of a program on the core of ``cfg`` whose
    tokens have ``channels`` channels (``name`` in the error if the core holds fewer);
    ``banks`` at most the core's ``core_banks`` (a program for more would name banks the
    core rejects)."""
    if banks is not None and (isinstance(banks, bool) or not isinstance(banks, (int, np.integer))
                              or not 1 <= banks <= cfg.core_banks):
        raise ValueError(f"banks must be in [1, core_banks] = [1, {cfg.core_banks}] (the "
                         f"scratchpad banks per side the core was built with), got {banks!r}")
    limits = CoreLimits.from_config(cfg, banks)
    if channels > limits.max_head_dim:
        raise ValueError(f"{name} must be at most engine_max_head_dim = "
                         f"{limits.max_head_dim}, got {channels}")
    variant = _variant(limits, variant)
    fb = cfg.full_bits if full_bits is None else full_bits
    hb = cfg.half_bits if half_bits is None else half_bits
    return limits, variant, fb, hb


def _head_core(cfg: KaleidoConfig, grid, groups, head_dim: int, banks, variant, full_bits,
               half_bits) -> tuple:
    """``(grid, groups, limits, variant, full_bits, half_bits)`` of a head of ``head_dim``
    channels on the core of ``cfg`` (``groups`` default: ``cfg.preset``'s, and they must
    have ``head_dim`` channels): what :func:`plan_head` and ``plan_attention`` both start
    from."""
    _check_cfg(cfg)
    grid = as_grid(grid)
    groups = _as_groups(groups if groups is not None else cfg.preset)
    if groups.head_dim != head_dim:
        raise ValueError(f"head_dim {head_dim} does not match the channel groups "
                         f"{groups.name!r} ({groups.head_dim} channels); pass groups=")
    return (grid, groups) + _core(cfg, head_dim, "head_dim", banks, variant, full_bits,
                                  half_bits)


def _plan_box(grid: VideoGrid, groups: ChannelGroups, box, limits: CoreLimits, unit: str,
              allow_cut: bool = False, hint: str = "", window: int = 2,
              c_out: int = 1) -> tuple:
    """``box`` checked against the core (default :func:`choose_box`); a box that cuts reuse
    ``unit`` (pairs, windows of ``window``) is refused unless ``allow_cut`` (``hint`` names
    how). Windows of 3 (``c_out`` features): the default box is the one of least
    :func:`window3_box_cost`."""
    if box is None:
        if window == 3:
            dirs = groups.channel_directions()
            shares = {a: float((dirs == a).mean()) for a in reuse_axes(groups)}
            return choose_box(grid, groups, limits.max_box_tokens,
                              windows=[(a, 3) for a in shares], pairs=False,
                              cost=lambda b: window3_box_cost(grid, b, shares, c_out,
                                                              limits.params))
        return choose_box(grid, groups, limits.max_box_tokens)
    box = tuple(int(b) for b in box)
    if len(box) != 3 or min(box) < 1 or max(box) > 255:
        raise ValueError(f"box must be three extents in [1, 255], got {box!r}")
    if box_tokens(box) > limits.max_box_tokens:
        raise ValueError(f"box {box} has {box_tokens(box)} tokens; engine_max_tokens is "
                         f"{limits.max_box_tokens}")
    cut = split_axes(grid, groups, box, window)
    if cut and not allow_cut:
        if window == 3:
            raise ValueError(f"box {box} cuts reuse {unit} of 3 along {[_AXES[a] for a in cut]}"
                             f" (an extent below the grid's that is not a multiple of 3, or "
                             f"whose last box ends in a window of two tokens its padding "
                             f"would complete); use multiples of 3 there that leave no such "
                             f"window{hint}")
        raise ValueError(f"box {box} cuts reuse {unit} along {[_AXES[a] for a in cut]} (odd "
                         f"extent below the grid's); use even extents there{hint}")
    return box


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
    grid, groups, limits, variant, fb, hb = _head_core(cfg, grid, groups, head_dim, banks,
                                                       variant, full_bits, half_bits)
    box = _plan_box(grid, groups, box, limits, "pairs", split_pairs, ", or split_pairs=True")
    boxes = box_counts(grid, box)
    if addrs is None:
        addrs = HeadAddrs.packed(grid, head_dim, base)
    steps = command_order(int(np.prod(boxes)), limits.banks)
    plan = HeadPlan(grid, groups, box, boxes, steps, addrs, limits, variant, fb, hb, [])
    plan.commands = _commands(plan)
    return plan


def _linear_groups(c_in: int) -> ChannelGroups:
    """The window rule's default: every channel in group t, reused along t."""
    return ChannelGroups((0,) * c_in, (0, 1, 2), f"all-t-{c_in}")


def linear_slices(c_in: int, max_head_dim: int) -> tuple:
    """``(slices, head_dim)``: how a linear layer's ``c_in`` input channels are cut for a
    core of ``max_head_dim`` (``engine_max_head_dim``) channels per token. ``c_in`` up to
    ``max_head_dim``: one slice of ``c_in``. Above: ``ceil(c_in / max_head_dim)`` slices of
    equal ``head_dim`` (CONFIG's, one for the whole program) = ``ceil(c_in / slices)`` rounded
    up to a multiple of 16, so that slice s at ``address + s * head_dim`` keeps the LOAD
    addresses 16-byte aligned (if that exceeds ``max_head_dim``: the largest multiple of 16
    within it, and more slices); the last slice is padded with zero channels."""
    c_in, max_head_dim = _positive("c_in", c_in), _positive("max_head_dim", max_head_dim)
    if c_in <= max_head_dim:
        return 1, c_in
    n_s = -(-c_in // max_head_dim)
    head_dim = _align(-(-c_in // n_s))
    if head_dim > max_head_dim:
        head_dim = max_head_dim // ALIGN * ALIGN
        if not head_dim:
            raise ValueError(
                f"c_in = {c_in} exceeds engine_max_head_dim = {max_head_dim}, so it is cut into "
                f"slices of head_dim channels at offsets s * head_dim, and LOAD addresses must "
                f"stay {ALIGN}-byte aligned: head_dim must be a multiple of {ALIGN} in "
                f"[{ALIGN}, engine_max_head_dim], and engine_max_head_dim = {max_head_dim} has "
                f"none (c_in must be at most {max_head_dim}, or engine_max_head_dim at least "
                f"{ALIGN})")
        n_s = -(-c_in // head_dim)
        head_dim = _align(-(-c_in // n_s))
    return n_s, head_dim


def _slice_groups(groups: ChannelGroups, n_s: int, head_dim: int) -> ChannelGroups:
    """The groups of one slice of ``head_dim`` channels, which every slice of ``groups``
    must share (GROUPS may not change between the COMPUTEs a block adds up); the last
    slice's padding channels take the groups of slice 0's channels at their positions."""
    if n_s == 1:
        return groups
    g = groups.group_of
    first = g[:head_dim]
    for s in range(1, n_s):
        part = g[s * head_dim:(s + 1) * head_dim]
        diff = [j for j, (a, b) in enumerate(zip(part, first)) if a != b]
        if diff:
            j = diff[0]
            raise ValueError(
                f"every slice of head_dim = {head_dim} channels must have the same channel->"
                f"group map (c_in = {groups.head_dim} runs as {n_s} slices, whose COMPUTEs add "
                f"up under one GROUPS map): slice {s} (channels {s * head_dim}.."
                f"{s * head_dim + len(part) - 1}) differs from slice 0 in {len(diff)} "
                f"channel{'s' * (len(diff) > 1)}, "
                f"first channel {s * head_dim + j} (group {'tyx'[part[j]]}; channel {j} has "
                f"group {'tyx'[first[j]]}); permute the channels of x (and the rows of w the "
                f"same way) so that every slice repeats one map")
    return ChannelGroups(first, groups.directions, f"{groups.name}[{head_dim}]")


def _check_exact(cfg: KaleidoConfig, limits: CoreLimits, groups: ChannelGroups,
                 n_s: int, c_in: int) -> None:
    """The sums a block adds up over its ``n_s`` slices of ``groups`` must be exact: per
    channel group (as the core walks them: one group on a plain build) at most
    ``group_channels(acc_width)`` channels, over all groups an int32 result."""
    walk = plain_walk(groups) if limits.plain else groups
    sizes = [n_s * n for n in walk.sizes]
    what = (f"c_in = {c_in} as {n_s} slice{'s' * (n_s > 1)} of head_dim = {groups.head_dim} "
            f"channels")
    bound = RESULT_CHANNELS
    if sum(sizes) > bound:
        raise ValueError(f"{what} sums {sum(sizes)} channels into every result, which may "
                         f"overflow its int32 (at most {bound} channels at any acc_width); "
                         f"split the layer's input channels over several runs")
    g = int(np.argmax(sizes))
    if sizes[g] > limits.group_channels:
        need = next(w for w in range(cfg.acc_width + 1, 49) if group_channels(w) >= sizes[g])
        group = ("its one channel group (a plain build walks all channels as one)"
                 if limits.plain else f"group {'tyx'[g]}")
        raise ValueError(f"{what} sums {sizes[g]} channels of {group} into every "
                         f"result; acc_width = {cfg.acc_width} sums at most "
                         f"{limits.group_channels} exactly: it needs acc_width >= {need} "
                         f"(KaleidoConfig(acc_width={need}); at most 48)")


def plan_linear(cfg: KaleidoConfig, grid, c_in: int, c_out: int, groups=None, box=None,
                addrs=None, variant: str | None = None, full_bits: int | None = None,
                half_bits: int | None = None, banks: int | None = None,
                base: int = 0, window: int = 2) -> LinearPlan:
    """The program that computes the linear layer ``Y = X_eff W`` of an activation X
    ((N, c_in) int8 on ``grid``) and weights W ((c_in, c_out) int8) on the core of ``cfg``.

    X is cut into boxes as a head's Q (the Q side; reuse codes by the window rule, windows
    of 2 along each channel's group direction, ``golden.window.linear``); W^T into
    ``ceil(c_out / box_tokens)`` blocks of ``box_tokens`` weight rows (the K side, ``rows``
    LOADs, never reused). Each (Q box, weight block) step is one COMPUTE of kind linear and
    one STORE; Q boxes outer, weight blocks inner in serpentine order (:func:`command_order`).

    ``c_in`` above ``engine_max_head_dim``: the input channels in :func:`linear_slices`
    (``Y = sum_s X[:, slice s] W[slice s, :]``, exact as the window codes are per channel);
    every block is one COMPUTE per slice (slice s of X's tokens and of the weight rows at
    their addresses + ``s * head_dim``), each after the first adding onto the one before
    (``acc``), then one STORE; the slices of consecutive blocks run in serpentine order, so
    the operand two blocks share is loaded once. Every slice must have the same channel ->
    group map (CONFIG and GROUPS describe one slice), and the channels a block sums must stay
    exact at ``cfg.acc_width`` (per group at most ``group_channels(acc_width)``, over all an
    int32; else ``ValueError`` naming the acc_width needed).

    ``groups``: a ``ChannelGroups`` (or preset name) with ``c_in`` channels; default every
    channel in group t reused along t (the window rule's default direction). ``box``:
    default :func:`choose_box`; an explicit box must not cut windows (:func:`split_axes`).
    ``addrs``: default :meth:`LinearAddrs.packed` from ``base`` (with
    :attr:`LinearPlan.c_padded` channels per token and row). ``variant``, thresholds and
    ``banks`` as in :func:`plan_head`.

    ``window=3``: windows of 3 tokens (``golden.linear(..., window=3)``; a core built with
    ``engine_window3``, every COMPUTE with ``window3``): variant ``pe`` (default) or
    ``dense``, a box whose extents along the reuse axes are multiples of 3 or the whole
    axis (default :func:`choose_box` with those windows).
    """
    _check_cfg(cfg)
    grid = as_grid(grid)
    c_in, c_out = _positive("c_in", c_in), _positive("c_out", c_out)
    if window not in (2, 3) or isinstance(window, bool):
        raise ValueError(f"window must be 2 or 3, got {window!r}")
    if window == 3:
        if not cfg.engine_window3:
            raise ValueError("window = 3 needs a core built with engine_window3 = true")
        if variant is None:
            variant = "pe"
        if variant not in ("dense", "pe"):
            raise ValueError(f"variant must be 'dense' or 'pe' with window = 3 (natural order, "
                             f"no pass 3 to match), got {variant!r}")
    groups = _linear_groups(c_in) if groups is None else _as_groups(groups)
    if groups.head_dim != c_in:
        raise ValueError(f"c_in {c_in} does not match the channel groups {groups.name!r} "
                         f"({groups.head_dim} channels); pass groups= with {c_in} channels")
    n_s, head_dim = linear_slices(c_in, cfg.engine_max_head_dim)
    core_groups = _slice_groups(groups, n_s, head_dim)
    limits, variant, fb, hb = _core(cfg, head_dim, "head_dim", banks, variant, full_bits,
                                    half_bits)
    _check_exact(cfg, limits, core_groups, n_s, c_in)
    box = _plan_box(grid, core_groups, box, limits, "windows", window=window, c_out=c_out)
    boxes = box_counts(grid, box)
    n_q, n_k = int(np.prod(boxes)), -(-c_out // box_tokens(box))
    c_padded = n_s * head_dim
    if addrs is None:
        addrs = LinearAddrs.packed(grid, c_padded, n_k * box_tokens(box), base)
    for name in ("token_stride", "w_stride"):
        if getattr(addrs, name) < c_padded:
            raise ValueError(f"addrs.{name} must be at least the {c_padded} channels of a "
                             f"token or weight row ({n_s} slices of head_dim = {head_dim}), "
                             f"got {getattr(addrs, name)}")
    steps = command_order(n_q, limits.banks, n_k, n_s)
    plan = LinearPlan(grid, groups, box, boxes, c_in, c_out, steps, addrs, limits, variant,
                      fb, hb, [], core_groups if n_s > 1 else None, window)
    plan.commands = _commands(plan)
    return plan


def _commands(plan: _BlockPlan) -> list:
    """CONFIG, GROUPS, the plan's preamble, its STRIDES; per step its LOADs (the next step's
    new operands first, into the other bank, when the core has two), its COMPUTE and STORE
    (:meth:`_BlockPlan._compute_store`); FENCE."""
    reuse, sched, match = variant_flags(plan.variant)
    g = plan.grid
    groups = plan._core_groups
    out = [Config(*plan.box, groups.head_dim, *groups.directions, plan.full_bits,
                  plan.half_bits, int(reuse), int(sched), int(match), g.t, g.h, g.w)]
    out += groups_commands(groups.group_of)
    out += plan._preamble()
    out += plan._strides()

    def loads(step):
        cmds = []
        if step.load_q:
            cmds.append(plan._load(SIDE_Q, step.q_bank, step.qi, step.slice))
        if step.load_k:
            cmds += plan._k_loads(step)
        return cmds

    prefetch = plan.limits.banks >= 2
    steps = plan.steps
    out += loads(steps[0])
    for i, step in enumerate(steps):
        if not prefetch and i:
            out += loads(step)
        if prefetch and i + 1 < len(steps):
            # The next step's new operand goes to the other bank, so it can load while this
            # step computes (issued first so an in-order core starts the DMA early).
            nxt = steps[i + 1]
            assert not (nxt.load_q and nxt.q_bank == step.q_bank)
            assert not (nxt.load_k and nxt.k_bank == step.k_bank)
            out += loads(nxt)
        out += plan._compute_store(i)
    out.append(Fence())
    return out


def plan_counts(plan) -> dict:
    """What a :class:`HeadPlan`'s or :class:`LinearPlan`'s program does, without running it:
    ``commands`` (total) and ``per_opcode``, ``loads`` per side, ``loads_saved`` (loads the
    serpentine order saves over an order that loads every COMPUTE's K operand and its Q
    operand unless the COMPUTE before read the same one: K loads at the row turns, and with
    slices one load per block border), ``bytes_loaded`` (tokens read x channels of a slice:
    a box's grid tokens, its padding is not read; a weight block's every row),
    ``bytes_stored``, ``bytes_moved`` (both), ``blocks`` (stored)."""
    per = {}
    for c in plan.commands:
        per[c.NAME] = per.get(c.NAME, 0) + 1
    lq = [s.qi for s in plan.steps if s.load_q]
    lk = [s.ki for s in plan.steps if s.load_k]
    tokens = sum(plan._loaded_tokens(SIDE_Q, i) for i in lq) \
        + sum(plan._loaded_tokens(SIDE_K, i) for i in lk)
    loaded = tokens * plan._core_groups.head_dim
    blocks = len(plan.block_steps)
    computes = len(plan.steps)
    plain_q = plan.n_q if computes == blocks else computes
    stored = blocks * plan.block_bytes
    return {"commands": len(plan.commands), "per_opcode": per,
            "loads": {"Q": len(lq), "K": len(lk), "V": 0},
            "loads_saved": plain_q + computes - len(lq) - len(lk),
            "bytes_loaded": loaded, "bytes_stored": stored, "bytes_moved": loaded + stored,
            "blocks": blocks}


def _check_tensor(name: str, x, grid: VideoGrid, channels: str, token_stride: int):
    x = np.asarray(x)
    if x.dtype != np.int8 or x.ndim != 2 or x.shape[0] != grid.n:
        raise ValueError(f"{name} must be an int8 array of shape ({grid.n}, {channels}) for "
                         f"grid {grid}, got {x.dtype} {x.shape}")
    if x.shape[1] > token_stride:
        raise ValueError(f"{name} has {x.shape[1]} channels; token_stride is "
                         f"{token_stride} bytes")
    return x


def write_operands(memory: Memory, q, k, addrs: HeadAddrs, grid) -> None:
    """Write the (N, d) int8 Q and K of ``grid`` into ``memory`` at ``addrs``."""
    grid = as_grid(grid)
    for name, x, at in (("q", q, addrs.q), ("k", k, addrs.k)):
        x = _check_tensor(name, x, grid, "d", addrs.token_stride)
        memory.write_tensor(at, x, grid, addrs.strides)


def write_linear_operands(memory: Memory, x, w, addrs: LinearAddrs, grid,
                          rows: int | None = None, channels: int | None = None) -> None:
    """Write a linear layer's operands into ``memory`` at ``addrs``: the (N, c_in) int8
    activation ``x`` of ``grid`` as a tensor, and the (c_in, c_out) int8 weights ``w`` as
    rows of W^T (row f = ``w[:, f]``, ``c_in`` bytes, ``w_stride`` apart; the bytes between
    rows untouched), then zero rows up to ``rows`` (default c_out; a plan reads
    :attr:`LinearPlan.w_rows`, which :func:`run_linear` passes). ``channels`` (default
    c_in): the bytes written per token and row, zeros past c_in (a plan in slices reads
    :attr:`LinearPlan.c_padded`, which :func:`run_linear` passes)."""
    grid = as_grid(grid)
    x = _check_tensor("x", x, grid, "c_in", addrs.token_stride)
    c_in = x.shape[1]
    w = np.asarray(w)
    if w.dtype != np.int8 or w.ndim != 2 or w.shape[0] != c_in or w.shape[1] < 1:
        raise ValueError(f"w must be an int8 array of shape (c_in, c_out) = ({c_in}, c_out) "
                         f"(c_in the channels of x), got {w.dtype} {w.shape}")
    if c_in > addrs.w_stride:
        raise ValueError(f"w has {c_in} input channels; w_stride is {addrs.w_stride} bytes")
    c_out = w.shape[1]
    rows = c_out if rows is None else int(rows)
    if rows < c_out:
        raise ValueError(f"rows must be at least c_out = {c_out}, got {rows}")
    channels = c_in if channels is None else int(channels)
    if not c_in <= channels <= min(addrs.token_stride, addrs.w_stride):
        raise ValueError(f"channels must be in [c_in, min(token_stride, w_stride)] = [{c_in}, "
                         f"{min(addrs.token_stride, addrs.w_stride)}], got {channels}")
    if channels > c_in:
        x = np.concatenate([x, np.zeros((x.shape[0], channels - c_in), np.int8)], axis=1)
    wt = np.zeros((rows, channels), np.int8)
    wt[:c_out, :c_in] = w.T
    memory.write_tensor(addrs.x, x, grid, addrs.strides)
    # The rows as tokens of a 1 x 1 x rows grid: row f at w + f * w_stride.
    ws = addrs.w_stride
    memory.write_tensor(addrs.w, wt, VideoGrid(1, 1, rows), (ws, rows * ws, rows * ws))


def _place(blocks, shape: tuple, what: str) -> np.ndarray:
    """A ``shape`` int64 matrix from ``[((rows, keep_r), (cols, keep_c), block)]``: the kept
    block entries at (rows, cols); every entry covered exactly once (else ``ValueError``
    naming ``what`` the entries are)."""
    out = np.zeros(shape, np.int64)
    hits = np.zeros(shape, np.int16)
    for (gr, kr), (gc, kc), blk in blocks:
        out[np.ix_(gr, gc)] = blk[np.ix_(kr, kc)]
        hits[np.ix_(gr, gc)] += 1
    if hits.min() != 1 or hits.max() != 1:
        raise ValueError(f"the blocks cover {int((hits == 0).sum())} {what} never and "
                         f"{int((hits > 1).sum())} more than once")
    return out


def _assemble(blocks, grid: VideoGrid, box) -> np.ndarray:
    """S (N, N) int64 from ``[(q_origin, k_origin, block)]``; every grid pair exactly once."""
    return _place([(box_on_grid(qo, box, grid), box_on_grid(ko, box, grid), blk)
                   for qo, ko, blk in blocks], (grid.n, grid.n), f"token pairs of grid {grid}")


def assemble_s(result: ProgramResult) -> np.ndarray:
    """The (N, N) int64 S of the grid from a program's blocks (as computed, before STORE):
    each block's rows and columns on grid tokens, padding dropped; every token pair must be
    covered exactly once (else ``ValueError``)."""
    return _assemble([(b.q_origin, b.k_origin, b.s) for b in result.blocks], result.grid,
                     result.box)


def _read_blocks(memory: Memory, plan: _BlockPlan):
    """``(step, block)`` of every block (its last step): the stored int32 block as
    (box_tokens, box_tokens) int64."""
    n = plan.box_tokens
    for st in plan.block_steps:
        blk = memory.read(plan.block_address(st.qi, st.ki), n * n, np.int32)
        yield st, blk.reshape(n, n).astype(np.int64)


def read_s(memory: Memory, plan: HeadPlan) -> np.ndarray:
    """The (N, N) int64 S as the host sees it: the plan's stored int32 blocks read back from
    ``memory`` and assembled."""
    return _assemble([(plan.origin(st.qi), plan.origin(st.ki), blk)
                      for st, blk in _read_blocks(memory, plan)], plan.grid, plan.box)


def read_y(memory: Memory, plan: LinearPlan) -> np.ndarray:
    """The (N, c_out) int64 Y as the host sees it: every stored block read back from
    ``memory``, its rows on the grid tokens of its Q box (padding rows dropped), its column
    j on feature ``ki * box_tokens + j`` (features past c_out, from the zero weight rows,
    dropped); every (token, feature) covered exactly once (else ``ValueError``)."""
    n = plan.box_tokens
    blocks = []
    for st, blk in _read_blocks(memory, plan):
        feats = st.ki * n + np.arange(n)
        keep = feats < plan.c_out
        blocks.append((box_on_grid(plan.origin(st.qi), plan.box, plan.grid), (feats[keep], keep),
                       blk))
    return _place(blocks, (plan.grid.n, plan.c_out),
                  f"(token, feature) pairs of grid {plan.grid} x {plan.c_out} features")


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


@dataclass
class LinearRun:
    """One linear layer run end to end: Y read back from memory, the plan, the program's
    result (blocks and counters) and the memory."""
    y: np.ndarray
    plan: LinearPlan
    result: ProgramResult
    memory: Memory


def run_linear(cfg: KaleidoConfig, x, w, grid, groups=None, engine: bool = False,
               **plan_args) -> LinearRun:
    """Plan the linear layer ``Y = X_eff W`` (:func:`plan_linear`, ``plan_args`` passed on;
    ``c_in`` in slices if above ``engine_max_head_dim``), write X and the weight rows (zeros
    up to :attr:`LinearPlan.c_padded` channels) to a fresh memory, run the program
    (``engine=True``: every block through the engine model, with its counters) and read Y
    back (:func:`read_y`)."""
    grid = as_grid(grid)
    x, w = np.asarray(x), np.asarray(w)
    if x.ndim != 2:
        raise ValueError(f"x must be an (N, c_in) int8 array, got shape {x.shape}")
    if w.ndim != 2:
        raise ValueError(f"w must be a (c_in, c_out) int8 array, got shape {w.shape}")
    plan = plan_linear(cfg, grid, x.shape[1], w.shape[1], groups, **plan_args)
    memory = Memory(plan.memory_size)
    write_linear_operands(memory, x, w, plan.addrs, grid, plan.w_rows, plan.c_padded)
    result = run_program(plan.commands, memory, plan.limits, engine=engine)
    return LinearRun(read_y(memory, plan), plan, result, memory)


def linear_counters(cfg: KaleidoConfig, x, c_out: int, grid, groups=None,
                    **plan_args) -> dict:
    """The counters of the linear layer ``Y = X_eff W`` (``x`` (N, c_in) on ``grid``,
    ``c_out`` features) run on the core of ``cfg`` by the program of :func:`plan_linear`
    (``plan_args`` passed on), without running it: the counters ``golden.engine.core_model.
    core_counters`` gives for :func:`run_linear` ``(..., engine=True)`` (``compute``: the
    cycles the core spends in COMPUTEs), from ``golden.engine.linear_layer.
    linear_layer_counters`` (the weights change no counter), plus ``commands`` and the
    ``plan``. Fast enough for report-scale layers."""
    grid = as_grid(grid)
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"x must be an (N, c_in) int8 array, got shape {x.shape}")
    plan = plan_linear(cfg, grid, x.shape[1], c_out, groups, **plan_args)
    out = linear_layer_counters(x, grid, c_out, plan.box, plan._core_groups,
                                plan.limits.params, plan.variant, plan.full_bits,
                                plan.half_bits, plan.window, plan.limits.plain)
    out["commands"] = len(plan.commands)
    out["plan"] = plan
    return out


def whole_grid_s(q, k, grid, groups, full_bits: int, half_bits: int, variant: str):
    """The whole-grid golden S a head run must equal (dense: ``q @ k.T``)."""
    if not variant_flags(variant)[0]:
        return np.asarray(q, np.int64) @ np.asarray(k, np.int64).T
    return attention_scores(q, k, grid, groups, full_bits, half_bits)


def whole_grid_y(x, w, grid, groups, full_bits: int, half_bits: int, variant: str,
                 window: int = 2):
    """The whole-grid golden Y a linear run must equal: ``golden.window.linear`` with windows
    of ``window`` along each channel's group direction (``groups`` None: every channel
    along t), or ``x @ w`` for the dense variant."""
    if not variant_flags(variant)[0]:
        return np.asarray(x, np.int64) @ np.asarray(w, np.int64)
    groups = _linear_groups(np.shape(x)[1]) if groups is None else _as_groups(groups)
    return linear(x, w, grid, groups.channel_directions(), window, full_bits, half_bits)
