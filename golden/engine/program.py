"""Functional interpreter of the streaming engine core's command stream (``docs/engine.md``,
"Command stream"): what a program computes, bit for bit, and which errors it raises.

:func:`run_program` executes commands in stream order against a byte-addressed
:class:`Memory`. The core is sequential in meaning: the hardware may overlap a LOAD with an
earlier COMPUTE on another bank (and interlocks a LOAD into a bank an earlier COMPUTE still
reads), but what every command sees is what the commands before it left.

A COMPUTE of kind S computes the block ``S = Q_eff,box K_eff,box^T`` of one (Q box, K box)
pair, each box being a grid of its own (``box_t x box_h x box_w`` tokens, zero-padded past
the grid's edge) with its own reuse codes (``golden.numerics``): exactly what the existing
engine computes for a whole grid of that size. A COMPUTE of kind linear computes the block
``Y = X_eff,box W_rows^T`` of a linear layer: the Q bank holds a box of the activation X,
whose codes follow the window rule with windows of 2 along each channel's group direction
(``golden.window_masks`` on the box grid), and the K bank holds ``box_tokens`` weight rows
(row j = output feature j's weights, loaded by a ``rows`` LOAD), never reused; dense: ``X
W_rows^T``. With ``engine=True`` the block and its cycle counters come from
``golden.engine.model.kaleido_engine`` / ``engine_counters`` on the box pair (slower;
bit-identical blocks, which the tests check).

A COMPUTE of kind 2 (an attention block, on a core with the attention path:
``CoreLimits.attention``) computes the S block of its Q and K boxes as kind S does, then
takes it into the running softmax of the query box (``docs/numerics.md`` section 15,
:func:`golden.vector.online.online_block`): the block's keys are the K box's grid tokens
(padding keys take no part), V is the V bank's box, effective under the window rule along
ATTENTION's ``v_dir`` on the box as a grid of its own when ``v_reuse``. ``first`` starts the
query box's state, ``last`` finishes it (:func:`~golden.vector.online.online_finish`): the
int16 output O of the box's ``box_tokens`` rows (padding rows included, as computed) is
then the result a STORE writes. With ``engine=True`` each attention block also gets the
exact P @ V counters of its P and V on the engine's arrays
(``golden.engine.pv.pv_counters``).

Plain numpy; no hardware imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golden.checks import check_int
from golden.array.schedule import side_codes
from golden.engine.commands import (ALIGN, ERROR_CODES, KIND_LINEAR, KIND_PV, KIND_S, KINDS,
                                    SIDE_K, SIDE_Q, SIDE_V, SIDES, Attention,
                                    Command, Compute, Config, DecodeError, FieldError, Groups,
                                    Load, Store, Strides, decode)
from golden.engine.model import (VARIANTS, EngineCounters, EngineParams, engine_counters,
                                 kaleido_engine, plain_walk)
from golden.engine.pv import PvCounters, pv_counters
from golden.engine.window3 import window3_block, window3_counters
from golden.numerics import (RESULT_CHANNELS, ChannelGroups, VideoGrid, _effective, as_grid,
                             code_counts, exact_matmul, group_channels, oracle_from_counts)
from golden.vector.online import OnlineState, block_max_partial, online_block, online_finish
from golden.vector.softmax import MULT_MAX, MULT_MIN, SHIFT_MAX, SHIFT_MIN
from golden.window import window_effective_operand, window_masks, window_operand


__all__ = ["Memory", "CoreLimits", "ProgramError", "BoxData", "BlockResult", "ProgramResult",
           "run_program", "variant_of", "box_tokens", "box_coords", "box_on_grid", "box_counts",
           "box_origin"]

#: (reuse, schedule, match) -> variant name; without reuse the dispatcher bits are ignored.
_VARIANT = {(0, 0, 0): "dense", (0, 1, 0): "dense", (0, 0, 1): "dense", (0, 1, 1): "dense",
            (1, 0, 0): "pe", (1, 1, 0): "pe-sh", (1, 0, 1): "pe-m", (1, 1, 1): "full"}


def variant_of(reuse: int, schedule: int, match: int) -> str:
    """The variant (``golden.engine.model.VARIANTS``) that CONFIG's three bits select."""
    return _VARIANT[(int(reuse), int(schedule), int(match))]


class ProgramError(ValueError):
    """A command the core rejects: ``code`` (:data:`ERROR_CODES`), ``index`` (position of the
    command in the program) and ``message``."""

    def __init__(self, code: int, index: int, message: str):
        self.code, self.index, self.message = code, index, message
        super().__init__(f"command {index}: error {code} ({ERROR_CODES[code][0]}): {message}")


class Memory:
    """Byte-addressed memory of ``size`` bytes (numpy ``uint8``), little-endian."""

    def __init__(self, size: int):
        self.data = np.zeros(check_int("memory size", size, 1, 1 << 36), np.uint8)

    @property
    def size(self) -> int:
        """Bytes of memory."""
        return self.data.size

    def _range(self, address: int, nbytes: int) -> slice:
        if address < 0 or address + nbytes > self.size:
            raise ValueError(f"bytes [{address}, {address + nbytes}) lie outside the memory "
                             f"[0, {self.size})")
        return slice(address, address + nbytes)

    def write(self, address: int, array) -> None:
        """Write the bytes of ``array`` (its dtype, little-endian) at ``address``."""
        a = np.ascontiguousarray(array)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        self.data[self._range(address, a.nbytes)] = a.view(np.uint8).ravel()

    def read(self, address: int, count: int, dtype) -> np.ndarray:
        """``count`` little-endian values of ``dtype`` from ``address`` (a copy)."""
        dt = np.dtype(dtype).newbyteorder("<")
        return self.data[self._range(address, count * dt.itemsize)].view(dt).astype(
            np.dtype(dtype))

    def write_tensor(self, address: int, x, grid, strides) -> None:
        """Write the (N, d) int8 tokens of ``grid`` at ``address`` with byte ``strides``
        ``(token, y, t)``: token (t, y, x) channel c at ``address + t*st + y*sy + x*sx + c``."""
        grid = grid if isinstance(grid, VideoGrid) else VideoGrid(*grid)
        x = np.asarray(x)
        if x.dtype != np.int8 or x.ndim != 2 or x.shape[0] != grid.n:
            raise ValueError(f"tensor must be an int8 array of shape ({grid.n}, d) for grid "
                             f"{grid}, got {x.dtype} {x.shape}")
        rows = address + _token_offsets(grid.coords(), strides)
        self._range(int(rows.min()), 0)
        self._range(int(rows.max()), x.shape[1])
        self.data[rows[:, None] + np.arange(x.shape[1])] = x.view(np.uint8)


def _token_offsets(coords: np.ndarray, strides) -> np.ndarray:
    sx, sy, st = (int(s) for s in strides)
    return coords[:, 0].astype(np.int64) * st + coords[:, 1] * sy + coords[:, 2] * sx


@dataclass(frozen=True)
class CoreLimits:
    """What one streaming engine core holds and runs.

    max_box_tokens : int   tokens of one box (``engine_max_tokens``)
    max_head_dim : int     channels per token (``engine_max_head_dim``)
    banks : int            scratchpad banks per side (2: double-buffered)
    variants : tuple       variants the core was built for (``built_variants``)
    params : EngineParams  the engine behind the core (arrays, dispatcher sizes)
    min_half_bits : int    smallest HALF threshold (3: the PEs' 4 x 8 half multipliers)
    plain : bool           a plain build (BaselinePEs): its engine walks all channels as one
                           group along x (``golden.engine.model.plain_walk``), which its
                           counters follow
    group_channels : int   most channels of one group whose products the accumulators sum
                           exactly (``acc_width``: 511 at 24 bits), over a COMPUTE and the
                           results it adds onto (``acc``)
    attention : bool       the attention path is built (ATTENTION, side V, COMPUTE kind 2);
                           without it those are error 11 (``from_config``: the config's
                           ``core_attention``; the host's attention plans set it)
    pv_keys : int          most keys of one attention block whose P @ V partial the
                           accumulators hold exactly (``255 * 128 * keys < 2**(acc_width-1)``:
                           257 at 24 bits)
    window3 : bool         linear blocks with windows of 3 are built (``engine_window3``);
                           without it a COMPUTE with window3 is error 11
    """
    max_box_tokens: int = 64
    max_head_dim: int = 128
    banks: int = 2
    variants: tuple = VARIANTS
    params: EngineParams = EngineParams()
    min_half_bits: int = 3
    plain: bool = False
    group_channels: int = 511
    attention: bool = False
    pv_keys: int = 257
    window3: bool = False

    def __post_init__(self):
        check_int("max_box_tokens", self.max_box_tokens, 1, 255 ** 3)
        check_int("max_head_dim", self.max_head_dim, 1, 511)
        check_int("banks", self.banks, 1, 4)
        check_int("min_half_bits", self.min_half_bits, 0, 6)
        check_int("group_channels", self.group_channels, 1, 1 << 40)
        check_int("pv_keys", self.pv_keys, 1, 1 << 40)
        if not isinstance(self.attention, (bool, np.bool_)):
            raise ValueError(f"attention must be True or False, got {self.attention!r}")
        bad = [v for v in self.variants if v not in VARIANTS]
        if bad or not self.variants:
            raise ValueError(f"variants must be a non-empty subset of {', '.join(VARIANTS)}, "
                             f"got {self.variants!r}")

    @classmethod
    def from_config(cls, config, banks: int | None = None) -> "CoreLimits":
        """From a ``KaleidoConfig`` (duck-typed: no hardware import): box tokens and head_dim
        from the engine's memories, banks from ``core_banks`` unless given, variants as
        ``kaleido_engine.built_variants``."""
        if banks is None:
            banks = config.core_banks
        if config.engine_pe == "plain":
            variants = ("dense",)
        else:
            d = config.engine_dispatcher
            variants = ("dense", "pe") + (("pe-sh",) if d in ("scheduler", "full") else ()) \
                + (("pe-m",) if d in ("matcher", "full") else ()) + (("full",) if d == "full" else ())
        return cls(config.engine_max_tokens, config.engine_max_head_dim, banks, variants,
                   EngineParams.from_config(config), plain=config.engine_pe == "plain",
                   group_channels=group_channels(config.acc_width),
                   pv_keys=pv_block_keys(config.acc_width),
                   attention=bool(getattr(config, "core_attention", False)),
                   window3=bool(getattr(config, "engine_window3", False)))


def pv_block_keys(acc_width: int) -> int:
    """Most keys of one attention block whose P @ V partial (``255 * 128`` per key at most)
    a signed ``acc_width``-bit accumulator holds exactly."""
    return ((1 << (check_int("acc_width", acc_width, 2, 64) - 1)) - 1) // block_max_partial(1)


def box_tokens(box) -> int:
    """Tokens of a box ``(bt, bh, bw)``."""
    return int(box[0]) * int(box[1]) * int(box[2])


def box_coords(origin, box) -> np.ndarray:
    """(box_tokens, 3) grid coordinates of a box's tokens in box-local (t, y, x) order."""
    return VideoGrid(*box).coords() + np.asarray(origin, np.int64)[None, :]


def box_counts(grid, box) -> tuple:
    """Boxes along t, y and x that tile ``grid``: ``ceil(grid / box)`` per axis (the last box
    of an axis may stick out)."""
    grid = as_grid(grid)
    return tuple(-(-g // b) for g, b in zip(grid.shape, box))


def box_origin(i: int, counts, box) -> tuple:
    """Grid origin of box ``i`` of the ``counts = box_counts(grid, box)`` boxes that tile a
    grid (t-major, x-fastest order)."""
    it, ih, iw = np.unravel_index(i, counts)
    return (int(it) * box[0], int(ih) * box[1], int(iw) * box[2])


def box_on_grid(origin, box, grid: VideoGrid) -> tuple:
    """``(tokens, real)``: the grid token indices of a box's tokens inside the grid, and
    which box-local tokens those are."""
    c = box_coords(origin, box)
    real = (c < np.asarray(grid.shape)[None, :]).all(axis=1)
    return np.ravel_multi_index(c[real].T, grid.shape), real


@dataclass
class BoxData:
    """One loaded bank: its side, box origin (``None`` for a ``rows`` LOAD), (box_tokens, d)
    int8 tokens (zeros where padded) and which tokens lie inside the grid (``real``; every
    row of a ``rows`` LOAD)."""
    side: int
    origin: tuple | None
    x: np.ndarray
    real: np.ndarray
    eff: np.ndarray = field(default=None, repr=False)      # effective operand (cached)
    counts: tuple = field(default=None, repr=False)         # code counts: all, real tokens
    groups_version: int = -1
    kind: int = -1                                          # COMPUTE kind of the cache


@dataclass
class BlockResult:
    """One COMPUTE: its command index, box origins of Q and K, its block (box_tokens^2,
    int64: with ``acc``, what it adds onto the result before it), the STORE address of the
    result (None until stored; with ``acc`` on its last COMPUTE), the oracle reuse counts of
    the pair over all box tokens (``reuse``) and over the grid's tokens only
    (``reuse_real``), both as ``golden.oracle_from_counts`` dicts, and the engine's counters
    (``engine=True``)."""
    index: int
    q_origin: tuple
    k_origin: tuple
    s: np.ndarray = field(repr=False)
    reuse: dict
    reuse_real: dict
    engine: EngineCounters | None = None
    address: int | None = None
    acc: bool = False
    kind: int = KIND_S
    p: np.ndarray | None = field(default=None, repr=False)   # kind 2: the block's P
    pv: PvCounters | None = None                              # kind 2, engine: P @ V's
    o: np.ndarray | None = field(default=None, repr=False)   # kind 2, last: the output


@dataclass
class ProgramResult:
    """What a program did: the blocks in COMPUTE order, the counters (``commands`` per
    opcode name, ``loads`` per side, ``bytes_loaded`` (grid tokens x head_dim: padding is
    not read), ``bytes_stored``, ``computes``, ``stores``, ``products`` (box_tokens^2 x d per
    block: what the engine multiplies, padding included), the oracle sums ``full``, ``half``,
    ``none``, ``cost`` over all products and ``real_*`` over grid tokens, and with
    ``engine=True`` ``cycles`` (the S, linear and attention blocks' S on the arrays) and
    ``pv_cycles`` (the attention blocks' P @ V, each as a run of its own)), the last CONFIG
    and the channel-group map. S figures (products, oracle sums) count an attention block's
    S; its P @ V is in ``pv_cycles``."""
    blocks: list
    counters: dict
    config: Config | None
    group_of: np.ndarray | None

    def _config(self) -> Config:
        if self.config is None:
            raise ValueError("the program ran no CONFIG, so it has no grid or box")
        return self.config

    @property
    def grid(self) -> VideoGrid:
        """The last CONFIG's grid."""
        return VideoGrid(*self._config().grid)

    @property
    def box(self) -> tuple:
        """The last CONFIG's box extents."""
        return self._config().box


class _Core:
    def __init__(self, memory: Memory, limits: CoreLimits, engine: bool):
        self.memory, self.limits, self.engine = memory, limits, engine
        self.config = None
        self.group_of = None
        self.groups_version = 0
        self.strides = {}
        self.banks = {}
        self.pending = None           # the last COMPUTE of the unstored result
        self.pending_sum = None       # the unstored result (its COMPUTEs' blocks summed)
        self.pending_groups = -1      # groups_version of its COMPUTEs
        self.acc_sizes = None         # channels per group summed over its COMPUTEs
        self.attention = None         # the last ATTENTION since CONFIG
        self.open = None              # the open query box: (first COMPUTE's index, state)
        self.blocks = []
        self.c = {"commands": {}, "loads": {s: 0 for s in SIDES}, "bytes_loaded": 0,
                  "bytes_stored": 0, "computes": 0, "stores": 0, "products": 0,
                  "real_products": 0}
        for prefix in ("", "real_"):
            for key in ("full", "half", "none", "cost"):
                self.c[prefix + key] = 0
        if engine:
            self.c["cycles"] = 0
            self.c["pv_cycles"] = 0

    # -- helpers ------------------------------------------------------------------------------

    def fail(self, code, message):
        raise ProgramError(code, self.index, message)

    def need_attention_path(self, what):
        if not self.limits.attention:
            self.fail(11, f"{what} needs the attention path, which this core is built without")

    def check_closed(self, what):
        if self.open is not None:
            self.fail(10, f"{what} while the attention of the query box opened at command "
                          f"{self.open[0]} is not finished (a COMPUTE kind 2 with last)")

    def need_config(self, name):
        if self.config is None:
            self.fail(3, f"{name} before CONFIG")
        return self.config

    def check_bank(self, name, bank):
        if bank >= self.limits.banks:
            self.fail(4, f"{name} bank must be in [0, {self.limits.banks - 1}] (banks of the "
                         f"core), got {bank}")

    def check_aligned(self, name, value):
        if value % ALIGN:
            self.fail(6, f"{name} must be a multiple of {ALIGN} bytes, got {value}")

    @property
    def groups(self) -> ChannelGroups:
        return ChannelGroups(tuple(int(g) for g in self.group_of), self.config.directions)

    # -- commands -----------------------------------------------------------------------------

    def CONFIG(self, c: Config):
        lim = self.limits
        if self.pending is not None:
            self.fail(10, "CONFIG while the result of the COMPUTE at command "
                          f"{self.pending.index} is not stored")
        self.check_closed("CONFIG")
        for name in ("box_t", "box_h", "box_w", "grid_t", "grid_h", "grid_w"):
            if getattr(c, name) < 1:
                self.fail(2, f"{name} must be at least 1, got 0")
        n = box_tokens(c.box)
        if n > lim.max_box_tokens:
            self.fail(2, f"box {c.box_t}x{c.box_h}x{c.box_w} has {n} tokens; the core holds "
                         f"at most max_box_tokens = {lim.max_box_tokens}")
        if not 1 <= c.head_dim <= lim.max_head_dim:
            self.fail(2, f"head_dim must be in [1, {lim.max_head_dim}], got {c.head_dim}")
        for name in ("dir_t", "dir_y", "dir_x"):
            if getattr(c, name) > 2:
                self.fail(2, f"{name} must be 0 (t), 1 (y) or 2 (x), got 3")
        if not 1 <= c.full_bits <= 7:
            self.fail(2, f"full_bits must be in [1, 7], got {c.full_bits}")
        if not lim.min_half_bits <= c.half_bits < c.full_bits:
            self.fail(2, f"half_bits must be in [{lim.min_half_bits}, {c.full_bits - 1}] "
                         f"(below full_bits = {c.full_bits}), got {c.half_bits}")
        variant = variant_of(c.reuse, c.schedule, c.match)
        if variant not in lim.variants:
            self.fail(2, f"reuse={c.reuse} schedule={c.schedule} match={c.match} selects "
                         f"variant {variant!r}; this core runs {', '.join(lim.variants)}")
        self.config, self.variant = c, variant
        self.group_of = np.full(c.head_dim, -1, np.int64)
        self.groups_version += 1
        self.strides, self.banks = {}, {}
        self.attention = None

    def ATTENTION(self, c: Attention):
        self.need_attention_path("ATTENTION")
        self.need_config("ATTENTION")
        self.check_closed("ATTENTION")
        if not MULT_MIN <= c.scale_mult <= MULT_MAX:
            self.fail(2, f"scale_mult must be in [{MULT_MIN}, {MULT_MAX}] (a normalised 16-bit "
                         f"multiplier), got {c.scale_mult}")
        if not SHIFT_MIN <= c.scale_shift <= SHIFT_MAX:
            self.fail(2, f"scale_shift must be in [{SHIFT_MIN}, {SHIFT_MAX}], got "
                         f"{c.scale_shift}")
        if c.v_dir > 2:
            self.fail(2, "v_dir must be 0 (t), 1 (y) or 2 (x), got 3")
        if c.v_reuse and self.limits.plain:
            self.fail(2, "v_reuse needs reuse PEs; this core is a plain build")
        self.attention = c

    def GROUPS(self, c: Groups):
        cfg = self.need_config("GROUPS")
        last = c.first + len(c.groups)
        if last > cfg.head_dim:
            self.fail(2, f"GROUPS names channels {c.first}..{last - 1}; head_dim is "
                         f"{cfg.head_dim} (channels 0..{cfg.head_dim - 1})")
        if 3 in c.groups:
            self.fail(2, f"GROUPS channel {c.first + c.groups.index(3)} has group 3; groups "
                         f"are 0 (t), 1 (y), 2 (x)")
        self.group_of[c.first:last] = c.groups
        self.groups_version += 1

    def STRIDES(self, c: Strides):
        if c.side == SIDE_V:
            self.need_attention_path("STRIDES of side V")
        cfg = self.need_config("STRIDES")
        for name in ("token_stride", "y_stride", "t_stride"):
            self.check_aligned(name, getattr(c, name))
        for name, value, need, why in (
                ("token_stride", c.token_stride, cfg.head_dim, "head_dim"),
                ("y_stride", c.y_stride, cfg.grid_w * c.token_stride,
                 f"grid_w * token_stride = {cfg.grid_w} * {c.token_stride}"),
                ("t_stride", c.t_stride, cfg.grid_h * c.y_stride,
                 f"grid_h * y_stride = {cfg.grid_h} * {c.y_stride}")):
            if value < need:
                self.fail(8, f"{SIDES[c.side]} {name} must be at least {why} = {need} (tokens "
                             f"must not overlap), got {value}")
        self.strides[c.side] = c

    def LOAD(self, c: Load):
        if c.side == SIDE_V:
            self.need_attention_path("LOAD of side V")
        cfg = self.need_config("LOAD")
        self.check_bank("LOAD", c.bank)
        if c.side not in self.strides:
            self.fail(3, f"LOAD of side {SIDES[c.side]} before its STRIDES")
        self.check_aligned("LOAD address", c.address)
        if c.rows and c.side == SIDE_V:
            self.fail(9, "a rows LOAD is for weight rows (side K); V loads boxes")
        if c.rows:
            if any(c.origin):
                self.fail(9, f"a rows LOAD takes no origin (origin_t, origin_h, origin_w must "
                             f"be 0), got {c.origin}")
        else:
            for axis, o, b, g in zip("thw", c.origin, cfg.box, cfg.grid):
                if o % b or o >= g:
                    self.fail(9, f"origin_{axis} must be a multiple of box_{axis} = {b} below "
                                 f"grid_{axis} = {g}, got {o}")
        st = self.strides[c.side]
        n = box_tokens(cfg.box)
        if c.rows:
            real = np.ones(n, bool)
            rows = c.address + np.arange(n, dtype=np.int64) * st.token_stride
            what = f"{n} rows at {c.address}"
        else:
            coords = box_coords(c.origin, cfg.box)
            real = (coords < np.asarray(cfg.grid)[None, :]).all(axis=1)
            rows = c.address + _token_offsets(coords[real], (st.token_stride, st.y_stride,
                                                             st.t_stride))
            what = f"box at {c.origin}"
        end = int(rows.max()) + cfg.head_dim
        if end > self.memory.size:
            self.fail(12, f"LOAD of the {SIDES[c.side]} {what} reads up to byte "
                          f"{end - 1}; memory has {self.memory.size} bytes")
        x = np.zeros((n, cfg.head_dim), np.int8)
        x[real] = self.memory.data[rows[:, None] + np.arange(cfg.head_dim)].view(np.int8)
        self.banks[(c.side, c.bank)] = BoxData(c.side, None if c.rows else c.origin, x, real)
        self.c["loads"][SIDES[c.side]] += 1
        self.c["bytes_loaded"] += int(real.sum()) * cfg.head_dim

    def _prepare(self, box: BoxData, kind: int, window3: bool = False):
        """Reuse codes and effective operand of a box as a grid of its own, for a COMPUTE of
        ``kind`` (cached): pairs for S; for a linear block the window rule on the Q box
        (windows of 2, or of 3 with ``window3``) and no codes on the K bank's weight rows
        (``golden.array.schedule.side_codes``)."""
        key = (kind, bool(window3))
        if box.groups_version != self.groups_version or box.kind != key:
            cfg, groups = self.config, self.groups
            grid = VideoGrid(*cfg.box)
            shape = cfg.box + (cfg.head_dim,)
            if window3 and box.side == SIDE_Q:
                dirs = groups.channel_directions()
                m = window_masks(box.x, grid, dirs, 3, cfg.full_bits, cfg.half_bits)
                effective = lambda: window_effective_operand(box.x, m, grid, dirs, 3)  # noqa
            else:
                m = side_codes(box.x, grid, groups, cfg.full_bits, cfg.half_bits,
                               linear=kind == KIND_LINEAR, k_side=box.side == SIDE_K)
                effective = lambda: _effective(box.x.reshape(shape), m.reshape(shape),  # noqa
                                               grid, groups).reshape(box.x.shape)
            if self.variant == "dense":
                box.eff = box.x
                m = np.full_like(m, 2)
            else:
                box.eff = effective()
            box.counts = (code_counts(m), code_counts(m[box.real]))
            box.groups_version, box.kind = self.groups_version, key
        return box

    def COMPUTE(self, c: Compute):
        cfg = self.need_config("COMPUTE")
        attention = c.kind == KIND_PV
        if attention:
            self.need_attention_path(f"COMPUTE kind {KIND_PV} ({KINDS[KIND_PV]})")
        operands = [("q_bank", c.q_bank, SIDE_Q), ("k_bank", c.k_bank, SIDE_K)]
        if attention:
            operands.append(("v_bank", c.v_bank, SIDE_V))
        for name, bank, side in operands:
            self.check_bank(f"COMPUTE {name}", bank)
            if (side, bank) not in self.banks:
                self.fail(5, f"COMPUTE {name} {bank} holds no {SIDES[side]} box since CONFIG")
        if (self.group_of < 0).any():
            missing = np.flatnonzero(self.group_of < 0)
            self.fail(3, f"COMPUTE before every channel has a group (GROUPS): channels "
                         f"{missing[:8].tolist()}{' ...' if missing.size > 8 else ''} have none")
        if attention:
            self._check_attention(c, cfg)
        else:
            self.check_closed(f"COMPUTE kind {c.kind}")
        if c.window3 and not self.limits.window3:
            self.fail(11, "COMPUTE with window3 on a core built without engine_window3")
        if c.acc and self.pending is None:
            self.fail(7, "COMPUTE with acc without an unstored result to add onto")
        if c.acc and self.pending.kind == KIND_PV:
            self.fail(7, f"COMPUTE with acc onto the attention output of the COMPUTE at "
                         f"command {self.pending.index}: only S and linear results add up")
        if not c.acc and self.pending is not None:
            self.fail(10, f"COMPUTE while the result of the COMPUTE at command "
                          f"{self.pending.index} is not stored (acc = 1 adds onto it)")
        if c.acc and self.groups_version != self.pending_groups:
            self.fail(10, f"COMPUTE with acc after GROUPS changed the channel groups of the "
                          f"result of the COMPUTE at command {self.pending.index}")
        # Exact sums: per group over the COMPUTEs of the result (the engine's planes), and
        # over all of them (the int32 result).
        walk = plain_walk(self.groups) if self.limits.plain else self.groups
        sizes = np.asarray(walk.sizes, np.int64) + (self.acc_sizes if c.acc else 0)
        lim = self.limits.group_channels
        if sizes.max() > lim:
            g = int(sizes.argmax())
            self.fail(2, f"channel group {'tyx'[g]} has {int(sizes[g])} channels summed over "
                         f"this COMPUTE and the results it adds onto; acc_width sums at most "
                         f"{lim} exactly (a wider acc_width holds more)")
        if sizes.sum() > RESULT_CHANNELS:
            self.fail(2, f"{int(sizes.sum())} channels summed over this COMPUTE and the results "
                         f"it adds onto may overflow the int32 result (at most "
                         f"{RESULT_CHANNELS})")
        if c.window3 and cfg.reuse and (cfg.schedule or cfg.match):
            self.fail(2, "COMPUTE with window3 under a CONFIG with schedule or match: a "
                         "window-3 block runs in natural order without pass 3")
        # A bank's codes follow the COMPUTE's kind (the same box may serve both kinds; an
        # attention block's S is a kind S block).
        s_kind = KIND_S if attention else c.kind
        qb = self._prepare(self.banks[(SIDE_Q, c.q_bank)], s_kind, c.window3)
        kb = self._prepare(self.banks[(SIDE_K, c.k_bank)], s_kind, c.window3)
        counters = None
        if self.engine:
            box = VideoGrid(*cfg.box)
            rest = (self.limits.params, self.variant, cfg.full_bits, cfg.half_bits)
            linear = c.kind == KIND_LINEAR
            if c.window3:
                s = window3_block(qb.x, kb.x, box, self.groups, *rest[1:])
                counters = window3_counters(qb.x, kb.x, box, self.groups, *rest)
            else:
                s = kaleido_engine(qb.x, kb.x, box, self.groups, *rest, linear=linear)
                # A plain core's engine walks all channels as one group along x (S is the
                # same).
                walk = plain_walk(self.groups) if self.limits.plain else self.groups
                counters = engine_counters(qb.x, kb.x, box, walk, *rest, linear=linear)
            self.c["cycles"] += int(counters.cycles)
        else:
            s = exact_matmul(qb.eff, kb.eff.T)
        reuse = oracle_from_counts(qb.counts[0], kb.counts[0])
        reuse_real = oracle_from_counts(qb.counts[1], kb.counts[1])
        block = BlockResult(self.index, qb.origin, kb.origin, s, reuse, reuse_real, counters,
                            acc=bool(c.acc), kind=c.kind)
        self.blocks.append(block)
        if attention:
            self._attention_block(c, block, kb, self.banks[(SIDE_V, c.v_bank)])
        else:
            self.pending = block
            self.pending_sum = s + self.pending_sum if c.acc else s
            self.pending_groups, self.acc_sizes = self.groups_version, sizes
        self.c["computes"] += 1
        self.c["products"] += reuse["dense"]
        self.c["real_products"] += reuse_real["dense"]
        for key in ("full", "half", "none", "cost"):
            self.c[key] += reuse[key]
            self.c["real_" + key] += reuse_real[key]

    def _check_attention(self, c: Compute, cfg: Config):
        """The checks of an attention block beyond those of every COMPUTE."""
        if self.attention is None:
            self.fail(3, f"COMPUTE kind {KIND_PV} before ATTENTION (after CONFIG)")
        if c.first:
            if self.pending is not None:
                self.fail(10, f"COMPUTE kind {KIND_PV} with first while the result of the "
                              f"COMPUTE at command {self.pending.index} is not stored")
            self.check_closed(f"COMPUTE kind {KIND_PV} with first")
        elif self.open is None:
            self.fail(7, f"COMPUTE kind {KIND_PV} without first, and no query box is open (its "
                         f"first key block starts it)")
        n = box_tokens(cfg.box)
        if n > self.limits.pv_keys:
            self.fail(2, f"an attention block of {n} keys may overflow the P @ V accumulators "
                         f"(acc_width holds at most {self.limits.pv_keys} keys exactly)")

    def _v_operand(self, vbox: BoxData) -> np.ndarray:
        """V of a V box as the P @ V arrays multiply it: effective under the window rule
        along ``v_dir`` on the box as a grid of its own (``v_reuse``), else as loaded."""
        a, cfg = self.attention, self.config
        if not a.v_reuse:
            return vbox.x
        return window_operand(vbox.x, VideoGrid(*cfg.box), a.v_dir, a.v_window, cfg.full_bits,
                              cfg.half_bits)

    def _attention_block(self, c: Compute, block: BlockResult, kb: BoxData, vbox: BoxData):
        """Take the block's S into the open query box's softmax and P @ V (module
        docstring); ``last`` makes its output the result."""
        a, cfg = self.attention, self.config
        if c.first:
            self.open = (self.index, OnlineState.empty(block.s.shape[0], cfg.head_dim))
        state = self.open[1]
        keys = kb.real
        v_eff = self._v_operand(vbox)
        step = online_block(state, block.s[:, keys], v_eff[keys], a.scale_mult,
                            a.scale_shift)
        p = np.zeros(block.s.shape, np.int64)
        p[:, keys] = step["p"]
        block.p = p
        if self.engine:
            lim = self.limits.params
            block.pv = pv_counters(p, vbox.x, VideoGrid(*cfg.box), a.v_dir, a.v_window,
                                   lim.rows, lim.cols, lim.arrays, cfg.full_bits,
                                   cfg.half_bits, bool(a.v_reuse))
            self.c["pv_cycles"] += int(block.pv.cycles)
        if c.last:
            block.o = online_finish(state)[1]
            self.open = None
            self.pending, self.pending_sum = block, block.o

    def STORE(self, c: Store):
        self.need_config("STORE")
        self.check_aligned("STORE address", c.address)
        if self.pending is None:
            if self.open is not None:
                self.fail(7, f"STORE while the attention of the query box opened at command "
                             f"{self.open[0]} is not finished (no COMPUTE kind 2 with last)")
            self.fail(7, "STORE without an unstored COMPUTE result")
        s = self.pending_sum
        o = self.pending.kind == KIND_PV           # int16 O, else int32 S or Y
        nbytes = s.size * (2 if o else 4)
        if c.address + nbytes > self.memory.size:
            self.fail(12, f"STORE of {nbytes} bytes at {c.address} ends past the memory "
                          f"({self.memory.size} bytes)")
        bound = 1 << (15 if o else 31)                # the bounds COMPUTE keeps
        assert -bound <= s.min(initial=0) and s.max(initial=0) < bound
        self.memory.write(c.address, s.astype(np.int16 if o else np.int32))
        self.pending.address = c.address
        self.pending = None
        self.c["stores"] += 1
        self.c["bytes_stored"] += nbytes

    def FENCE(self, c):
        pass       # sequential meaning: every earlier command has already completed


def run_program(commands, memory: Memory, limits: CoreLimits = CoreLimits(),
                engine: bool = False) -> ProgramResult:
    """Execute ``commands`` (command dataclasses or 128-bit words) in order on ``memory``.

    Every command goes through its 128-bit encoding (a dataclass is encoded, then decoded),
    so the program means what its words mean. Raises :class:`ProgramError` (code, index,
    message) at the first command the core rejects; the memory then holds the stores of the
    commands before it. ``engine=True`` computes each block with the engine model and adds
    its ``EngineCounters`` per block (and the sum of ``cycles``).
    """
    if not isinstance(memory, Memory):
        raise ValueError(f"memory must be a golden.engine.program.Memory, got {type(memory)}")
    core = _Core(memory, limits, engine)
    for i, cmd in enumerate(commands):
        core.index = i
        try:
            word = cmd.encode() if isinstance(cmd, Command) else cmd
            cmd = decode(word)
        except (DecodeError, FieldError) as e:
            raise ProgramError(1, i, str(e)) from None
        core.c["commands"][cmd.NAME] = core.c["commands"].get(cmd.NAME, 0) + 1
        getattr(core, cmd.NAME)(cmd)
    return ProgramResult(core.blocks, core.c, core.config, core.group_of)
