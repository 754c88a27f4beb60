"""``kaleido-hw program``: the files an SoC bench needs to run one head (or one linear layer)
on the engine core, without Python on the bench's side.

The host library (``kaleido_hw.engine.host``, ``host_attention``) plans the work at the
chosen base address and the golden interpreter (``golden.engine.program``) runs it; this
command writes what both produced, in formats a Verilog, SystemVerilog or C bench reads
directly:

``commands.hex``
    The command stream: one 128-bit word per line, 32 hex digits, most significant first
    (``$readmemh`` into ``reg [127:0] cmds[0:N-1]``; the words for ``cmd__payload`` in
    order; ``docs/engine.md``, "Command stream").
``memory_in.bin`` / ``memory_in.hex``
    The memory before the program: byte 0 is at ``--base``. The ``.hex`` holds one word of
    ``axi_data_width`` bits per line, little-endian within the word as the AXI bus carries
    it (``$readmemh`` into ``reg [63:0] mem[0:M-1]`` at the default width).
``memory_out.bin`` / ``memory_out.hex``
    The memory the core must leave: the same bytes plus every S block, O or Y block the
    program stores (the interpreter's result, bit-exact to the whole-grid golden model).
``program.json``
    What the files hold: the configuration, the work (kind, grid, channel groups, variant),
    the regions (address and bytes of Q, K, V, X, W and of the results), the command count,
    and, unless ``--no-model``, the counters the core must report (``core_counters``) and
    its cycles against a memory of fixed latency that returns a beat per cycle
    (``core_cycles`` with ``BenchMemory.axi_ram``: what cocotbext-axi's AxiRam without pauses
    gives; with attention blocks the block datapath's model too, ``BlockDatapath``;
    ``docs/engine.md``, "Engine core" and "Cycle model of the attention blocks").
``tb_kaleido_core.v``
    A plain Verilog testbench that runs the program on ``kaleido_core`` with an AXI4 memory of
    the model's timing and checks the memory and every counter
    (:mod:`kaleido_hw.flow.program_tb`).

Every input is checked before a file is written; a bad one ends the command with exit 2 and
one line naming the option and what it allows.
"""

from __future__ import annotations

import gc
import json
import math
import shlex
import warnings
from pathlib import Path

import numpy as np
from amaranth.hdl import UnusedElaboratable

from golden import ChannelGroups, PRESETS
from golden.checks import as_int8, check_tokens
from golden.engine.block_timing import BlockDatapath
from golden.engine.core_model import BenchMemory, core_counters, core_cycles
from golden.engine.program import Memory, run_program
from golden.workloads import grid_named, make_qkv
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.host import (plan_head, plan_linear, write_linear_operands,
                                    write_operands)
from kaleido_hw.engine.host_attention import plan_attention, write_attention_operands
from kaleido_hw.flow.generate import TOPS, build_top, port_table
from kaleido_hw.flow.program_tb import TB_FILE, testbench


__all__ = ["KINDS", "add_arguments", "run", "hex_words", "write_program"]

#: What a program computes: S blocks of a head, a whole attention head (O), a linear layer.
KINDS = ("s", "attention", "linear")
#: Byte alignment of ``--base``: a STORE's address (``docs/engine.md``, "Words").
BASE_ALIGN = 16
_AXES = {"t": 0, "y": 1, "x": 2}
#: Defaults of the options that have one (left out of ``program.json``'s ``reproduce``).
DEFAULTS = {"kind": "s", "grid": "2x4x16", "seed": 0, "base": "0", "v_dir": "t",
            "v_window": 2, "window": 2}


def hex_words(data: bytes, width_bits: int) -> str:
    """``data`` as ``$readmemh`` lines of ``width_bits``-bit little-endian words (the last one
    padded with zeros), most significant hex digit first."""
    nbytes = width_bits // 8
    pad = -len(data) % nbytes
    words = np.frombuffer(bytes(data) + bytes(pad), np.uint8).reshape(-1, nbytes)[:, ::-1]
    return "".join(w.tobytes().hex() + "\n" for w in words)


def _int(text: str, name: str, lo: int, hi: int) -> int:
    try:
        value = int(str(text), 0)
    except ValueError:
        raise ValueError(f"{name} must be an integer (decimal or 0x hex), got {text!r}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _groups(args, cfg: KaleidoConfig) -> ChannelGroups:
    if args.groups is None:
        preset = args.preset or cfg.preset
        if preset not in PRESETS:
            raise ValueError(f"--preset must be one of {', '.join(sorted(PRESETS))}, "
                             f"got {preset!r}")
        return ChannelGroups.from_preset(preset)
    parts = args.groups.split(",")
    if len(parts) != 3:
        raise ValueError(f"--groups must be three channel counts T,Y,X (e.g. 16,56,56), got "
                         f"{args.groups!r}")
    sizes = [_int(p, "--groups", 0, 1 << 16) for p in parts]
    if sum(sizes) == 0:
        raise ValueError(f"--groups must have at least one channel, got {args.groups!r}")
    return ChannelGroups.from_sizes(*sizes)


def _operands(args, grid, groups: ChannelGroups) -> dict:
    """``q``, ``k``, ``v`` (and ``scale``, ``w`` when given) from ``--workload``, or the
    synthetic head of ``--preset`` with its softmax scale (``golden.workloads.make_qkv``)."""
    d = groups.head_dim
    if args.workload is None:
        preset = args.preset or groups.name
        if preset not in PRESETS or PRESETS[preset].head_dim != d:
            raise ValueError(f"--groups {args.groups} has no synthetic head: pass --workload "
                             f"FILE.npz with int8 q and k of shape ({grid.n}, {d})")
        h = make_qkv(preset, grid, seed=args.seed)
        return {"q": h.q, "k": h.k, "v": h.v, "scale": h.scale}
    what = f"an .npz file with int8 arrays q and k of shape ({grid.n}, {d})"
    try:
        with np.load(args.workload, allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
    except (OSError, ValueError, AttributeError) as e:
        raise ValueError(f"--workload must be {what}; cannot read {args.workload}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if not {"q", "k"} <= set(arrays):
        raise ValueError(f"--workload must be {what}; {args.workload} has "
                         f"{', '.join(sorted(arrays)) or 'nothing'}")
    out = {}
    try:
        for name in ("q", "k", "v"):
            if name in arrays:
                out[name] = as_int8(arrays[name], name)
                check_tokens(out[name], name, grid.n, str(grid), d)
        if "w" in arrays:
            out["w"] = as_int8(arrays["w"], "w")
        if "scale" in arrays:
            scale = np.asarray(arrays["scale"], float).ravel()
            if scale.size != 1 or not math.isfinite(scale[0]) or scale[0] <= 0:
                raise ValueError(f"scale must be one positive number, got {arrays['scale']!r}")
            out["scale"] = float(scale[0])
    except ValueError as e:
        raise ValueError(f"--workload {args.workload}: {e}") from None
    return out


def _weights(args, ops: dict, d: int) -> np.ndarray:
    """A linear layer's W (c_in = ``d``, c_out): the workload's ``w``, else random int8 of
    ``--seed`` with ``--c-out`` columns (default ``d``)."""
    w = ops.get("w")
    if w is None:
        c_out = d if args.c_out is None else _int(args.c_out, "--c-out", 1, 1 << 16)
        return np.random.default_rng([args.seed, 7]).integers(-128, 128, (d, c_out), np.int8)
    if args.c_out is not None:
        raise ValueError("--c-out and a workload's w exclude each other: w's columns are "
                         "c_out")
    if w.ndim != 2 or w.shape[0] != d:
        raise ValueError(f"w must have shape (c_in, c_out) = ({d}, c_out), got {w.shape}")
    return w


def _plan(args, cfg: KaleidoConfig, grid, groups: ChannelGroups, ops: dict, base: int):
    """The plan of the work at ``base``, and a function writing its operands into a Memory."""
    d = groups.head_dim
    common = dict(variant=args.variant, banks=args.banks, base=base)
    if args.kind == "s":
        plan = plan_head(cfg, grid, d, groups, **common)
        return plan, lambda mem: write_operands(mem, ops["q"], ops["k"], plan.addrs, grid)
    if args.kind == "attention":
        if not cfg.core_attention:
            raise ValueError("--kind attention needs a core built with the attention path: "
                             "--config FILE with core_attention = true")
        if "v" not in ops:
            raise ValueError(f"--kind attention needs v: {args.workload} has no array v")
        if args.v_dir not in _AXES:
            raise ValueError(f"--v-dir must be one of t, y, x, got {args.v_dir!r}")
        plan = plan_attention(cfg, grid, d, groups, scale=ops.get("scale"),
                              v_dir=_AXES[args.v_dir], v_window=args.v_window,
                              v_reuse=not args.no_v_reuse, **common)
        return plan, lambda mem: write_attention_operands(mem, ops["q"], ops["k"], ops["v"],
                                                          plan.addrs, grid)
    # linear: X = q, W = ops["w"] (_weights)
    w = ops["w"]
    plan = plan_linear(cfg, grid, d, w.shape[1], groups, window=args.window, **common)

    def write(mem):
        write_linear_operands(mem, ops["q"], w, plan.addrs, grid, rows=plan.w_rows,
                              channels=plan.c_padded)
    return plan, write


def write_program(out_dir, plan_base, plan0, memory_in: Memory, memory_out: Memory,
                  width_bits: int, info: dict) -> dict:
    """Write the files of the module docstring into ``out_dir``: commands of ``plan_base``
    (addresses from the base), images of the memories (byte 0 = the base) and
    ``program.json`` (``info`` plus the file names). Returns what was written to the JSON."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    words = [c.encode() for c in plan_base.commands]
    (out / "commands.hex").write_text("".join(f"{w:032x}\n" for w in words))
    for name, mem in (("memory_in", memory_in), ("memory_out", memory_out)):
        raw = mem.data[:plan0.memory_size].tobytes()
        (out / f"{name}.bin").write_bytes(raw)
        (out / f"{name}.hex").write_text(hex_words(raw, width_bits))
    info = dict(info, commands=len(words),
                files={"commands": "commands.hex", "memory_in": ["memory_in.bin", "memory_in.hex"],
                       "memory_out": ["memory_out.bin", "memory_out.hex"],
                       "testbench": TB_FILE})
    (out / "program.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def _reproduce(args) -> str:
    """The command line that writes these files again (the options given)."""
    words = ["kaleido-hw", "program"]
    for name, value in sorted(vars(args).items()):
        if (name.startswith("_") or name == "command" or value in (None, False)
                or DEFAULTS.get(name, object()) == value):
            continue
        flag = "--" + name.replace("_", "-")
        words += [flag] if value is True else [flag, str(value)]
    return shlex.join(words)


def add_arguments(parser):
    """Options of ``kaleido-hw program``."""
    parser.add_argument("--out", metavar="DIR", required=True, help="folder for the files")
    parser.add_argument("--config", metavar="FILE",
                        help="TOML file with KaleidoConfig keys: the core the files are for "
                             "(default: built-in defaults, the core of rtl_out)")
    parser.add_argument("--kind", default=DEFAULTS["kind"], choices=KINDS,
                        help="s: the S blocks of a head (STOREd as int32); attention: O of a "
                             "whole head (needs core_attention = true); linear: Y = X_eff W "
                             "with X the head's q (default: s)")
    parser.add_argument("--grid", default=DEFAULTS["grid"], metavar="TxHxW",
                        help="latent grid of the head (default: 2x4x16)")
    parser.add_argument("--preset", metavar="NAME",
                        help=f"channel groups and synthetic head: one of "
                             f"{', '.join(sorted(PRESETS))} (default: the config's preset)")
    parser.add_argument("--groups", metavar="T,Y,X",
                        help="channel groups by size instead of a preset (needs --workload)")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"],
                        help="seed of the synthetic head (and of W for --kind linear)")
    parser.add_argument("--workload", metavar="FILE.npz",
                        help="the head's int8 q, k (and v; scale; w (c_in, c_out) for linear) "
                             "instead of a synthetic one")
    parser.add_argument("--variant", help="dense, pe, pe-sh, pe-m or full (default: the "
                                          "most the core was built for)")
    parser.add_argument("--banks", type=int, help="scratchpad banks per side the program uses "
                                                  "(default: core_banks; 1: no prefetch)")
    parser.add_argument("--base", default=DEFAULTS["base"], metavar="ADDR",
                        help=f"byte address of the memory image's first byte, a multiple of "
                             f"{BASE_ALIGN} (decimal or 0x hex; default 0)")
    parser.add_argument("--v-dir", default=DEFAULTS["v_dir"],
                        help="attention: V's reuse axis, t, y or x (default: t)")
    parser.add_argument("--v-window", type=int, default=DEFAULTS["v_window"],
                        help="attention: V's windows, 2 or 3 (default: 2)")
    parser.add_argument("--no-v-reuse", action="store_true", help="attention: V as loaded")
    parser.add_argument("--c-out", metavar="N", help="linear: output features of the random W "
                                                     "(default: c_in)")
    parser.add_argument("--window", type=int, default=DEFAULTS["window"],
                        help="linear: X's windows, 2 or 3 (3 needs a core built with "
                             "engine_window3 = true; default: 2)")
    parser.add_argument("--no-model", action="store_true",
                        help="skip the engine's cycle model: no counters or cycles in "
                             "program.json (the memory images are computed either way)")


def run(args) -> int:
    """``kaleido-hw program``: plan, run the interpreter, write the files."""
    cfg = KaleidoConfig.from_toml(args.config) if args.config else KaleidoConfig()
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out must be a folder, got the file {args.out}")
    try:
        grid = grid_named(args.grid)
    except ValueError as e:
        raise ValueError(f"--{e}") from None
    base = _int(args.base, "--base", 0, (1 << cfg.axi_addr_width) - 1)
    if base % BASE_ALIGN:
        raise ValueError(f"--base must be a multiple of {BASE_ALIGN} (a STORE's alignment), "
                         f"got {base:#x}")
    if args.seed < 0:
        raise ValueError(f"--seed must be a non-negative integer, got {args.seed}")
    if args.v_window not in (2, 3):
        raise ValueError(f"--v-window must be 2 or 3, got {args.v_window}")
    given = [f"--{name.replace('_', '-')}" for name in ("v_dir", "v_window", "no_v_reuse")
             if getattr(args, name) not in (DEFAULTS.get(name), False)]
    if args.kind != "attention" and given:
        raise ValueError(f"{', '.join(given)}: for --kind attention only (V's reuse)")
    if args.kind != "linear" and args.c_out is not None:
        raise ValueError("--c-out: for --kind linear only (the output features of W)")
    if args.window not in (2, 3):
        raise ValueError(f"--window must be 2 or 3, got {args.window}")
    if args.kind != "linear" and args.window != DEFAULTS["window"]:
        raise ValueError("--window: for --kind linear only (X's reuse windows)")
    groups = _groups(args, cfg)
    if args.groups is not None and args.workload is None:
        raise ValueError("--groups needs --workload: the synthetic heads are the presets'")
    ops = _operands(args, grid, groups)
    if args.kind == "linear":
        ops["w"] = _weights(args, ops, groups.head_dim)
    plan0, write = _plan(args, cfg, grid, groups, ops, 0)
    plan_base, _ = _plan(args, cfg, grid, groups, ops, base)
    end = base + plan0.memory_size
    if end > 1 << cfg.axi_addr_width:
        raise ValueError(f"--base {base:#x}: the program's {plan0.memory_size} bytes end at "
                         f"{end:#x}, past the core's {cfg.axi_addr_width}-bit addresses")
    memory = Memory(plan0.memory_size)
    write(memory)
    memory_in = Memory(plan0.memory_size)
    memory_in.data[:] = memory.data
    engine = not args.no_model
    result = run_program(plan0.commands, memory, plan0.limits, engine=engine)

    regions = {name: {"address": base + at, "bytes": n}
               for name, (at, n) in plan0.regions().items()}
    info = {
        "reproduce": _reproduce(args),
        "config": cfg.changed(),
        "kind": args.kind, "grid": list(grid.shape), "groups": list(groups.sizes),
        "variant": plan0.variant, "banks": plan0.limits.banks, "box": list(plan0.box),
        "base": base, "memory_bytes": plan0.memory_size,
        "word_bits": cfg.axi_data_width, "regions": regions,
    }
    if engine:
        counters = core_counters(result)
        info["counters"] = counters
        datapath = BlockDatapath.from_config(cfg) if cfg.core_attention else None
        info["cycles_axi_ram"] = core_cycles(plan0.commands, result, BenchMemory.axi_ram(cfg),
                                             datapath)
    info = write_program(args.out, plan_base, plan0, memory_in, memory, cfg.axi_data_width,
                         info)
    core = next(t for t in TOPS if t.module == "kaleido_core")
    with warnings.catch_warnings():
        # Built for its ports only: its blocks are never elaborated, and Amaranth warns when
        # they are collected, so they are collected here.
        warnings.simplefilter("ignore", UnusedElaboratable)
        ports = port_table(build_top(core, cfg))
        gc.collect()
    words = -(-plan0.memory_size // (cfg.axi_data_width // 8))
    (Path(args.out) / TB_FILE).write_text(testbench(ports, info, words, info["reproduce"]))
    result_at = regions[plan0.RESULT]["address"]
    print(f"wrote {args.out}: {info['commands']} commands, {plan0.memory_size} bytes of "
          f"memory from {base:#x}, {plan0.RESULT.upper()} at {result_at:#x}")
    if "cycles_axi_ram" in info:
        c = info["cycles_axi_ram"]
        print(f"cycles {c['cycles']:,} (compute {c['compute']:,}, mem_wait {c['mem_wait']:,}) "
              f"against a memory of latency {BenchMemory.axi_ram(cfg).latency}, a beat per cycle")
    return 0
