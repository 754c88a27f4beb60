"""Command stream of the streaming engine core (engine v2, ``docs/engine.md``, "Command
stream"): the 128-bit command words, their exact bit fields and the error codes.

A program is a sequence of 128-bit words, delivered on a valid/ready stream. The opcode is
bits [3:0]; every command's fields are listed in :data:`FIELDS` (``(name, lo, width,
meaning)``) and rendered for the docs by :func:`markdown_table`. Bits no field covers are
reserved and must be 0 (a word with a reserved bit set is malformed: error 1), so that later
revisions can give them a meaning without old programs changing behaviour.

Each command is a frozen dataclass with ``encode() -> int`` and ``decode(word)``; building a
dataclass checks nothing, :meth:`Command.encode` checks that every field fits its bits
(:class:`FieldError` names the command, the field and the allowed range). What a program
*means* is :func:`golden.engine.program.run_program`.

Plain Python and numpy; no hardware imports.
"""

from __future__ import annotations

from dataclasses import dataclass, fields as dc_fields

import numpy as np

__all__ = [
    "WORD_BITS", "ALIGN", "GROUPS_PER_WORD", "SIDE_Q", "SIDE_K", "SIDE_V", "SIDES", "KIND_S",
    "KIND_LINEAR", "KIND_PV", "KINDS", "OPCODES", "FIELDS", "ERROR_CODES", "FieldError",
    "DecodeError", "Command", "Config", "Groups", "Strides", "Load", "Compute", "Store",
    "Fence", "Attention", "COMMANDS", "decode", "encode_program", "groups_commands", "markdown_table",
    "error_table", "used_mask",
]

#: Bits of one command word.
WORD_BITS = 128
#: Byte alignment of every LOAD/STORE address and every stride: one 128-bit memory beat.
ALIGN = 16
#: Channels whose group one GROUPS word carries (2 bits each, bits [127:32]).
GROUPS_PER_WORD = 48

#: LOAD / STRIDES ``side``: 0 Q (rows of S), 1 K (columns of S), 2 V (the values of an
#: attention block, one token per key of the K box); 3 reserved.
SIDE_Q, SIDE_K, SIDE_V = 0, 1, 2
SIDES = ("Q", "K", "V")
#: COMPUTE ``kind``: 0 S = Q K^T; 1 a linear block Y = X_eff W (X in the Q bank, weight rows
#: in the K bank); 2 an attention block (S of the Q and K boxes, its softmax with a running
#: maximum and P @ V_eff of the V box into the query box's output; error 11 on a core built
#: without the attention path); 3..15 malformed.
KIND_S, KIND_LINEAR, KIND_PV = 0, 1, 2
KINDS = ("S", "linear", "PV")

#: opcode -> command name. 0 is not an opcode: an all-zero word is usually unwritten memory.
OPCODES = {1: "CONFIG", 2: "GROUPS", 3: "STRIDES", 4: "LOAD", 5: "COMPUTE", 6: "STORE",
           7: "FENCE", 8: "ATTENTION"}

#: Per command: ``(field, lo, width, meaning)``; the field holds bits ``[lo + width - 1 : lo]``.
FIELDS: dict[str, tuple] = {
    "CONFIG": (
        ("box_t", 4, 8, "box extent along t (frames), 1..255"),
        ("box_h", 12, 8, "box extent along y (rows), 1..255"),
        ("box_w", 20, 8, "box extent along x (columns), 1..255"),
        ("head_dim", 28, 9, "channels per token d, 1..max head_dim of the core"),
        ("dir_t", 37, 2, "reuse axis of the t-group (0 t, 1 y, 2 x)"),
        ("dir_y", 39, 2, "reuse axis of the y-group"),
        ("dir_x", 41, 2, "reuse axis of the x-group"),
        ("full_bits", 43, 3, "FULL threshold (`docs/numerics.md` section 6)"),
        ("half_bits", 46, 3, "HALF threshold, 3 <= half_bits < full_bits"),
        ("reuse", 49, 1, "1: reuse codes on; 0: dense (schedule, match ignored)"),
        ("schedule", 50, 1, "ClusterScheduler on (needs reuse and a built scheduler)"),
        ("match", 51, 1, "MergeMatcher on (needs reuse and a built matcher)"),
        ("grid_t", 52, 16, "grid extent along t, 1..65535"),
        ("grid_h", 68, 16, "grid extent along y, 1..65535"),
        ("grid_w", 84, 16, "grid extent along x, 1..65535"),
    ),
    "GROUPS": (
        ("first", 4, 9, "first channel of this word"),
        ("count", 13, 6, f"channels in this word, 1..{GROUPS_PER_WORD}"),
        ("groups", 32, 2 * GROUPS_PER_WORD,
         "group of channel first + i in bits [33 + 2i : 32 + 2i] (0 t, 1 y, 2 x)"),
    ),
    "STRIDES": (
        ("side", 4, 2, "0 Q, 1 K, 2 V"),
        ("token_stride", 6, 18, f"bytes between x-neighbours, a multiple of {ALIGN}, >= head_dim"),
        ("y_stride", 24, 40, "bytes between y-neighbours, >= grid_w * token_stride"),
        ("t_stride", 64, 64, "bytes between t-neighbours, >= grid_h * y_stride"),
    ),
    "LOAD": (
        ("side", 4, 2, "0 Q, 1 K, 2 V"),
        ("bank", 6, 2, "scratchpad bank of that side, 0..banks-1"),
        ("origin_t", 8, 16, "box origin in the grid along t, a multiple of box_t"),
        ("origin_h", 24, 16, "box origin along y, a multiple of box_h"),
        ("origin_w", 40, 16, "box origin along x, a multiple of box_w"),
        ("rows", 56, 1, "1: box_tokens rows at address + j * token_stride instead of a box "
                        "(weight rows of a linear block; origins 0, no padding; not for V)"),
        ("address", 64, 64, "byte address of the tensor's token (0, 0, 0), or of row 0"),
    ),
    "COMPUTE": (
        ("q_bank", 4, 2, "Q bank (rows of the block)"),
        ("k_bank", 6, 2, "K bank (columns)"),
        ("kind", 8, 4, "0 S = Q K^T; 1 linear Y = X_eff W (X in Q, rows of W^T in K); "
                       "2 attention block (S, softmax, P @ V_eff into the query box's O)"),
        ("acc", 12, 1, "1: add the block onto the unstored result (input channels in slices; "
                       "same channel groups); 0: a new result; 0 with kind 2"),
        ("v_bank", 13, 2, "kind 2: V bank (the values of the K box's keys); else 0"),
        ("first", 15, 1, "kind 2: the query box's first key block (starts its O); else 0"),
        ("last", 16, 1, "kind 2: its last key block (O is then the result); else 0"),
        ("window3", 17, 1, "kind 1: the activation's windows are 3 tokens long (a core built "
                           "with engine_window3; CONFIG without schedule and match); else 0"),
    ),
    "STORE": (
        ("address", 64, 64, "byte address of the result: an S or linear block (box_tokens^2 "
                            "int32) or an attention output (box_tokens x head_dim int16), "
                            "row-major"),
    ),
    "FENCE": (),
    "ATTENTION": (
        ("scale_mult", 4, 16, "softmax scale multiplier, 32768..65535 "
                              "(`golden.vector.softmax_scale`)"),
        ("scale_shift", 20, 6, "softmax scale shift, 1..47"),
        ("v_dir", 26, 2, "reuse axis of V (0 t, 1 y, 2 x), all channels"),
        ("v_window3", 28, 1, "0: V windows of 2 keys; 1: of 3"),
        ("v_reuse", 29, 1, "1: V reuse by the window rule (FULL/HALF at CONFIG's thresholds); "
                           "0: V as loaded"),
    ),
}

#: Error code -> (name, when). ``ProgramError.code`` is one of these.
ERROR_CODES: dict[int, tuple[str, str]] = {
    1: ("malformed", "unknown opcode (0, 9..15), a reserved bit set, or a reserved encoding "
                     "(side 3, kind 3-15, v_bank/first/last set outside kind 2, acc with kind "
                     "2, window3 outside kind 1, GROUPS count 0 or > 48)"),
    2: ("bad_config", "CONFIG outside the core: zero extent, box tokens or head_dim over the "
                      "limit, thresholds, direction 3, reuse/schedule/match not built; GROUPS "
                      "group 3 or channels past head_dim; COMPUTE of a channel group larger, "
                      "summed over the results it adds onto, than acc_width sums exactly; "
                      "ATTENTION scale outside its range, v_dir 3, v_reuse on a plain core; "
                      "COMPUTE kind 2 of more keys than acc_width holds P @ V of; COMPUTE with "
                      "window3 under a CONFIG with reuse and schedule or match"),
    3: ("not_configured", "GROUPS, STRIDES, LOAD, COMPUTE, STORE or ATTENTION before CONFIG; "
                          "LOAD of a side before its STRIDES; COMPUTE before every channel has "
                          "a group; COMPUTE kind 2 before ATTENTION"),
    4: ("bad_bank", "LOAD or COMPUTE names a bank >= banks"),
    5: ("bank_empty", "COMPUTE reads a bank that holds no box of its side since CONFIG"),
    6: ("misaligned", f"LOAD/STORE address or a stride not a multiple of {ALIGN} bytes"),
    7: ("no_result", "STORE, or COMPUTE with acc, without an unstored COMPUTE result (an "
                     "attention output is not one to add onto; a query box whose last key "
                     "block has not run has none); COMPUTE kind 2 without first when no query "
                     "box is open"),
    8: ("bad_strides", "strides that overlap tokens: token_stride < head_dim, y_stride < "
                       "grid_w * token_stride or t_stride < grid_h * y_stride"),
    9: ("bad_origin", "LOAD origin not a multiple of the box extent, or outside the grid; a "
                      "rows LOAD with an origin other than 0, or of side V"),
    10: ("result_pending", "COMPUTE without acc, or CONFIG, while the last result is not "
                           "stored; COMPUTE with acc after GROUPS changed the channel groups; "
                           "CONFIG, ATTENTION, COMPUTE kind 0/1 or kind 2 with first while a "
                           "query box is open (first run, last not yet)"),
    11: ("unsupported", "on a core built without the attention path: ATTENTION, STRIDES or "
                        "LOAD of side V, COMPUTE kind 2; on a core built without "
                        "engine_window3: COMPUTE with window3"),
    12: ("out_of_range", "LOAD reads or STORE writes past the end of memory"),
}


class FieldError(ValueError):
    """A field value that does not fit its bits; the message names command, field, range."""


class DecodeError(ValueError):
    """A word that is no command (error 1, malformed); the message says why."""


def _check_field(cmd: str, name: str, value, width: int) -> int:
    hi = (1 << width) - 1
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise FieldError(f"{cmd}.{name} must be an integer in [0, {hi}] ({width} bits), "
                         f"got {value!r}")
    if not 0 <= value <= hi:
        raise FieldError(f"{cmd}.{name} must be in [0, {hi}] ({width} bits), got {value}")
    return int(value)


def used_mask(name: str) -> int:
    """Bits of command ``name``'s word that the opcode or a field covers (the rest are
    reserved and must be 0)."""
    mask = 0xF
    for _, lo, width, _ in FIELDS[name]:
        mask |= ((1 << width) - 1) << lo
    return mask


class Command:
    """Base of the command dataclasses: ``NAME``, ``OPCODE``, bit-exact encode/decode."""
    NAME = ""
    OPCODE = 0

    def field_values(self) -> dict:
        """The raw value of every bit field of :data:`FIELDS` (before range checks)."""
        return {f.name: getattr(self, f.name) for f in dc_fields(self)}

    def encode(self) -> int:
        """The 128-bit word; raises :class:`FieldError` for a value that does not fit."""
        values = self.field_values()
        word = self.OPCODE
        for name, lo, width, _ in FIELDS[self.NAME]:
            word |= _check_field(self.NAME, name, values[name], width) << lo
        return word

    @classmethod
    def from_fields(cls, values: dict) -> "Command":
        """The command from raw field values (the inverse of :meth:`field_values`)."""
        return cls(**values)

    @classmethod
    def decode(cls, word: int) -> "Command":
        """The command of a word of this opcode; :class:`DecodeError` if it is not one."""
        word = _check_word(word)
        if word & 0xF != cls.OPCODE:
            raise DecodeError(f"opcode {word & 0xF} is not {cls.NAME} ({cls.OPCODE})")
        reserved = word & ~used_mask(cls.NAME) & ((1 << WORD_BITS) - 1)
        if reserved:
            bits = [i for i in range(WORD_BITS) if reserved >> i & 1]
            raise DecodeError(f"{cls.NAME} has reserved bit(s) {bits} set; they must be 0")
        values = {name: (word >> lo) & ((1 << width) - 1)
                  for name, lo, width, _ in FIELDS[cls.NAME]}
        cmd = cls.from_fields(values)
        cmd.check_encoding()
        return cmd

    def check_encoding(self) -> None:
        """Reject reserved encodings of enumerated fields (:class:`DecodeError`)."""


def _check_side(cmd, side):
    if side not in (SIDE_Q, SIDE_K, SIDE_V):
        raise DecodeError(f"{cmd}.side must be 0 (Q), 1 (K) or 2 (V); {side} is reserved")


@dataclass(frozen=True)
class Config(Command):
    """CONFIG (opcode 1): box and grid extents, head_dim, per-group reuse directions,
    thresholds and the reuse/schedule/match bits. Invalidates both sides' banks and strides
    and the channel-group map."""
    NAME, OPCODE = "CONFIG", 1
    box_t: int
    box_h: int
    box_w: int
    head_dim: int
    dir_t: int
    dir_y: int
    dir_x: int
    full_bits: int
    half_bits: int
    reuse: int
    schedule: int
    match: int
    grid_t: int
    grid_h: int
    grid_w: int

    @property
    def box(self) -> tuple[int, int, int]:
        """``(box_t, box_h, box_w)``."""
        return (self.box_t, self.box_h, self.box_w)

    @property
    def grid(self) -> tuple[int, int, int]:
        """``(grid_t, grid_h, grid_w)``."""
        return (self.grid_t, self.grid_h, self.grid_w)

    @property
    def directions(self) -> tuple[int, int, int]:
        """Reuse axis of the t-, y- and x-group."""
        return (self.dir_t, self.dir_y, self.dir_x)


@dataclass(frozen=True)
class Groups(Command):
    """GROUPS (opcode 2): the group (0 t, 1 y, 2 x) of channels ``first .. first +
    len(groups) - 1``, at most 48 per word; a head needs ``ceil(d / 48)`` of them."""
    NAME, OPCODE = "GROUPS", 2
    first: int
    groups: tuple

    def field_values(self) -> dict:
        """``first``, ``count`` = number of channels and the packed 2-bit ``groups``."""
        gs = tuple(self.groups)
        if not 1 <= len(gs) <= GROUPS_PER_WORD:
            raise FieldError(f"GROUPS.count must be in [1, {GROUPS_PER_WORD}] (channels per "
                             f"word), got {len(gs)}")
        packed = 0
        for i, g in enumerate(gs):
            packed |= _check_field("GROUPS", f"groups[{i}]", g, 2) << (2 * i)
        return {"first": self.first, "count": len(gs), "groups": packed}

    @classmethod
    def from_fields(cls, values: dict) -> "Groups":
        """Unpack ``count`` 2-bit groups; packed bits past ``count`` must be 0."""
        n = values["count"]
        if not 1 <= n <= GROUPS_PER_WORD:
            raise DecodeError(f"GROUPS.count must be in [1, {GROUPS_PER_WORD}], got {n}")
        if values["groups"] >> (2 * n):
            raise DecodeError(f"GROUPS has group bits set past its count {n}; they must be 0")
        return cls(values["first"], tuple((values["groups"] >> (2 * i)) & 3 for i in range(n)))


@dataclass(frozen=True)
class Strides(Command):
    """STRIDES (opcode 3): byte strides of one side's tensor; token (t, y, x) channel c is at
    ``address + t*t_stride + y*y_stride + x*token_stride + c``."""
    NAME, OPCODE = "STRIDES", 3
    side: int
    token_stride: int
    y_stride: int
    t_stride: int

    def check_encoding(self) -> None:
        """Side must be Q, K or V."""
        _check_side("STRIDES", self.side)


@dataclass(frozen=True)
class Load(Command):
    """LOAD (opcode 4): the box of ``side`` at grid origin (t, y, x) into scratchpad ``bank``
    from the tensor at ``address``; tokens outside the grid are zeros (padding). With
    ``rows``: the bank's ``box_tokens`` tokens, in box-local order, are the rows at ``address
    + j * token_stride`` (the weight rows of a linear block), every one read."""
    NAME, OPCODE = "LOAD", 4
    side: int
    bank: int
    origin_t: int
    origin_h: int
    origin_w: int
    address: int
    rows: int = 0

    @property
    def origin(self) -> tuple[int, int, int]:
        """``(origin_t, origin_h, origin_w)``."""
        return (self.origin_t, self.origin_h, self.origin_w)

    def check_encoding(self) -> None:
        """Side must be Q, K or V."""
        _check_side("LOAD", self.side)


@dataclass(frozen=True)
class Compute(Command):
    """COMPUTE (opcode 5): the block of ``kind`` (0: S = Q K^T, each box with its own reuse
    codes; 1: a linear block X_eff W^T-rows, window codes on the Q box; 2: an attention
    block, S of the boxes, the softmax with a running maximum and P @ V_eff of ``v_bank``
    into the query box's output, ``first`` / ``last`` key block) of the banks ``q_bank`` and
    ``k_bank``; the result waits for a STORE. With ``acc`` the block is added onto the
    unstored result (a layer's input channels in slices of head_dim). ``window3``: a linear
    block whose activation windows are 3 tokens long (``docs/engine.md``, "Linear blocks with
    windows of 3")."""
    NAME, OPCODE = "COMPUTE", 5
    q_bank: int
    k_bank: int
    kind: int = KIND_S
    acc: int = 0
    v_bank: int = 0
    first: int = 0
    last: int = 0
    window3: int = 0

    def check_encoding(self) -> None:
        """Kinds 3..15 are malformed; so are ``v_bank``, ``first``, ``last`` other than 0
        outside kind 2, and ``acc`` with kind 2 (an attention block adds into its own O)."""
        if self.kind >= len(KINDS):
            raise DecodeError(f"COMPUTE.kind must be 0 (S), 1 (linear) or 2 (PV); "
                              f"{self.kind} is reserved")
        if self.kind != KIND_PV and (self.v_bank or self.first or self.last):
            raise DecodeError(f"COMPUTE v_bank, first and last must be 0 with kind "
                              f"{self.kind} ({KINDS[self.kind]}); they belong to kind 2")
        if self.window3 and self.kind != KIND_LINEAR:
            raise DecodeError(f"COMPUTE window3 must be 0 with kind {self.kind} "
                              f"({KINDS[self.kind]}); it belongs to kind 1 (linear)")
        if self.kind == KIND_PV and self.acc:
            raise DecodeError("COMPUTE acc must be 0 with kind 2 (attention blocks of a query "
                              "box add into its output themselves, first to last)")


@dataclass(frozen=True)
class Store(Command):
    """STORE (opcode 6): the last COMPUTE's block to ``address``: box_tokens^2 int32
    little-endian, row-major, rows and columns in box-local (t, y, x) token order."""
    NAME, OPCODE = "STORE", 6
    address: int


@dataclass(frozen=True)
class Fence(Command):
    """FENCE (opcode 7): every earlier command has completed and its stores are visible in
    memory before any later command starts (the host waits for it before reading S)."""
    NAME, OPCODE = "FENCE", 7


@dataclass(frozen=True)
class Attention(Command):
    """ATTENTION (opcode 8): what the attention blocks (COMPUTE kind 2) after it use besides
    CONFIG: the softmax scale as the fixed-point pair of ``golden.vector.softmax_scale``
    (``docs/numerics.md`` section 14) and V's reuse: one axis for all of V's channels, windows
    of 2 or 3 keys, on or off (CONFIG's thresholds). CONFIG clears it."""
    NAME, OPCODE = "ATTENTION", 8
    scale_mult: int
    scale_shift: int
    v_dir: int = 0
    v_window3: int = 0
    v_reuse: int = 1

    @property
    def v_window(self) -> int:
        """Keys per V window (2 or 3)."""
        return 3 if self.v_window3 else 2


#: opcode -> command class.
COMMANDS = {cls.OPCODE: cls for cls in (Config, Groups, Strides, Load, Compute, Store, Fence,
                                        Attention)}


def _check_word(word) -> int:
    if isinstance(word, np.integer):
        word = int(word)
    if isinstance(word, bool) or not isinstance(word, int):
        raise DecodeError(f"a command word must be an integer in [0, 2**{WORD_BITS}), "
                          f"got {word!r}")
    if not 0 <= word < 1 << WORD_BITS:
        raise DecodeError(f"a command word must be in [0, 2**{WORD_BITS}), got {word:#x}")
    return word


def decode(word: int) -> Command:
    """The command of a 128-bit word; :class:`DecodeError` (error 1) if it is none."""
    word = _check_word(word)
    op = word & 0xF
    if op not in COMMANDS:
        raise DecodeError(f"opcode {op} is not a command (1..8: "
                          + ", ".join(f"{k} {v}" for k, v in OPCODES.items()) + ")")
    return COMMANDS[op].decode(word)


def encode_program(commands) -> list[int]:
    """The words of a list of commands (words pass through unchanged)."""
    return [c if isinstance(c, int) else c.encode() for c in commands]


def groups_commands(group_of) -> list[Groups]:
    """The GROUPS words of a channel-to-group map (48 channels per word)."""
    g = [int(x) for x in group_of]
    return [Groups(i, tuple(g[i:i + GROUPS_PER_WORD])) for i in range(0, len(g), GROUPS_PER_WORD)]


def markdown_table(name: str | None = None) -> str:
    """The field table of one command (``name``), or of all of them in opcode order, as
    Markdown; ``docs/engine.md`` carries exactly this text (a test checks it)."""
    names = [name] if name is not None else list(OPCODES.values())
    out = []
    for n in names:
        if n not in FIELDS:
            raise ValueError(f"command must be one of {', '.join(OPCODES.values())}, got {n!r}")
        op = next(k for k, v in OPCODES.items() if v == n)
        out.append(f"**{n}** (opcode {op})\n")
        out.append("| bits | field | meaning |")
        out.append("|---|---|---|")
        out.append(f"| [3:0] | opcode | {op} |")
        for field, lo, width, meaning in FIELDS[n]:
            bits = f"[{lo}]" if width == 1 else f"[{lo + width - 1}:{lo}]"
            out.append(f"| {bits} | {field} | {meaning} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def error_table() -> str:
    """The error codes as a Markdown table (``docs/engine.md``)."""
    rows = ["| code | name | raised when |", "|---|---|---|"]
    rows += [f"| {c} | {n} | {w} |" for c, (n, w) in ERROR_CODES.items()]
    return "\n".join(rows) + "\n"
