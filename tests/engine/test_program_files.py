"""``kaleido-hw program`` (``kaleido_hw/flow/program.py``): the engine core's files for an SoC
bench. The command stream and the memory image it writes, replayed at their base address,
give the memory image it says the core must leave: in the golden interpreter, and in the
core's RTL (Amaranth simulator, the behavioural DMA of ``core_harness``) with every counter
and, against the memory ``program.json`` names, the cycles it gives; the ``.hex`` files hold
the ``.bin`` files' bytes; every kind of work (S, whole attention heads, linear layers);
bad input ends with exit 2, one line naming the option, and no file written."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
from core_harness import run_words

from golden.engine.commands import Compute
from golden.engine.program import CoreLimits, Memory, run_program
from kaleido_hw.cli import main
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.engine.core import CoreController
from kaleido_hw.flow.program import hex_words
from token_data import smooth_tensors

#: A small core (two 2 x 2 arrays, 16-token boxes, 16 channels) and its TOML.
SMALL = dict(rows=2, cols=2, engine_arrays=2, engine_max_tokens=16, engine_max_head_dim=16,
             engine_dispatcher="full", sched_pattern_width=4, matcher_channels=4,
             sched_entries=4)
GRID = (2, 3, 4)


def _toml(path, keys: dict):
    path.write_text(KaleidoConfig(**keys).to_toml())
    return str(path)


def _workload(path, grid, d=16, seed=0):
    q, k, v = smooth_tensors(grid, d, seed, 3)
    np.savez(path, q=q, k=k, v=v)
    return str(path)


def _files(out):
    info = json.loads((out / "program.json").read_text())
    words = [int(line, 16) for line in (out / "commands.hex").read_text().split()]
    images = [np.frombuffer((out / f"memory_{w}.bin").read_bytes(), np.uint8)
              for w in ("in", "out")]
    return info, words, images


def _at_base(image, base):
    """A Memory holding ``image`` from byte ``base`` on."""
    mem = Memory(base + image.size)
    mem.data[base:] = image
    return mem


def test_head_files_replay_on_the_rtl(tmp_path):
    """S of a padded head on the small core, at base 0x100: the interpreter and the RTL both
    turn memory_in + commands into memory_out, with program.json's counters and cycles."""
    cfg = KaleidoConfig(**SMALL)
    out = tmp_path / "prog"
    assert main(["program", "--out", str(out), "--config", _toml(tmp_path / "c.toml", SMALL),
                 "--groups", "4,6,6", "--workload", _workload(tmp_path / "h.npz", GRID),
                 "--grid", "2x3x4", "--base", "0x100"]) == 0
    info, words, (img_in, img_out) = _files(out)
    base = info["base"]
    assert base == 0x100 and info["memory_bytes"] == img_in.size == img_out.size
    assert info["commands"] == len(words) and info["variant"] == "full"
    s = info["regions"]["s"]
    assert s["address"] + s["bytes"] == base + img_out.size
    # The stores are the only difference, and they land in the S region.
    changed = np.flatnonzero(img_in != img_out) + base
    assert changed.size and changed.min() >= s["address"]
    # The interpreter, from the files alone.
    mem = _at_base(img_in, base)
    result = run_program(words, mem, CoreLimits.from_config(cfg), engine=True)
    assert np.array_equal(mem.data[base:], img_out)
    # The RTL, against the memory program.json's cycles are for (no gaps or stalls).
    run, data = run_words(CoreController(cfg), words, _at_base(img_in, base), latency=2,
                          outstanding=cfg.axi_max_outstanding)
    assert run.error == 0 and run.accepted == len(words)
    assert np.array_equal(data[base:], img_out)
    assert {n: run.counters[n] for n in info["counters"]} == info["counters"]
    assert {n: run.counters[n] for n in info["cycles_axi_ram"]} == info["cycles_axi_ram"]
    assert len(result.blocks) == sum((w & 0xF) == 5 for w in words)   # COMPUTE: opcode 5


@pytest.mark.parametrize("kind, extra", [
    ("attention", ["--v-dir", "x"]),
    ("linear", ["--c-out", "24"]),
], ids=["attention", "linear"])
def test_every_kind_replays_in_the_interpreter(tmp_path, kind, extra):
    keys = dict(SMALL, vector_lanes=4, vector_max_row=16, core_attention=True)
    cfg = KaleidoConfig(**keys)
    out = tmp_path / kind
    assert main(["program", "--out", str(out), "--config", _toml(tmp_path / "c.toml", keys),
                 "--groups", "4,6,6", "--workload", _workload(tmp_path / "h.npz", GRID),
                 "--grid", "2x3x4", "--kind", kind, "--base", "4096", *extra]) == 0
    info, words, (img_in, img_out) = _files(out)
    result_name = {"attention": "o", "linear": "y"}[kind]
    assert set(info["regions"]) == ({"q", "k", "v", "o"} if kind == "attention"
                                    else {"x", "w", "y"})
    mem = _at_base(img_in, 4096)
    run_program(words, mem, CoreLimits.from_config(cfg))
    assert np.array_equal(mem.data[4096:], img_out)
    r = info["regions"][result_name]
    assert np.any(img_out[r["address"] - 4096:][:r["bytes"]])
    # Every kind has its cycles (attention blocks with the block datapath's model).
    assert set(info["cycles_axi_ram"]) == {"cycles", "compute", "mem_wait"}
    assert "pv_blocks" in info["counters"] if kind == "attention" else True


def test_linear_window3_program(tmp_path):
    """``--kind linear --window 3`` on a core built with ``engine_window3``: every COMPUTE
    carries ``window3``, and the files replay in the interpreter."""
    keys = dict(SMALL, engine_window3=True, engine_dispatcher="none")
    cfg = KaleidoConfig(**keys)
    out = tmp_path / "lin3"
    # one group, reused along x: windows of 3 along x only (boxes of 3 or 6 there)
    assert main(["program", "--out", str(out), "--config", _toml(tmp_path / "c.toml", keys),
                 "--groups", "16,0,0", "--workload", _workload(tmp_path / "h.npz", (2, 2, 7)),
                 "--grid", "2x2x7", "--kind", "linear", "--window", "3", "--c-out", "20"]) == 0
    info, words, (img_in, img_out) = _files(out)
    computes = [Compute.decode(w) for w in words if (w & 0xF) == 5]
    assert computes and all(c.window3 == 1 and c.kind == 1 for c in computes)
    assert "--window 3" in info["reproduce"] and info["variant"] == "pe"
    mem = _at_base(img_in, 0)
    run_program(words, mem, CoreLimits.from_config(cfg))
    assert np.array_equal(mem.data, img_out)


def test_hex_files_hold_the_bin_files_bytes(tmp_path):
    out = tmp_path / "prog"
    assert main(["program", "--out", str(out), "--grid", "1x2x16", "--no-model"]) == 0
    info, words, (img_in, img_out) = _files(out)
    assert "counters" not in info and info["word_bits"] == 64
    for name, img in (("in", img_in), ("out", img_out)):
        lines = (out / f"memory_{name}.hex").read_text().split()
        assert len(lines) == -(-img.size // 8) and all(len(x) == 16 for x in lines)
        back = b"".join(bytes.fromhex(x)[::-1] for x in lines)[:img.size]
        assert back == img.tobytes()
    assert hex_words(bytes(range(1, 10)), 64) == "0807060504030201\n0000000000000009\n"
    cmd_lines = (out / "commands.hex").read_text().split()
    assert all(len(x) == 32 for x in cmd_lines) and len(cmd_lines) == info["commands"]


@pytest.mark.parametrize("args, message", [
    (["--base", "0x8"], "--base must be a multiple of 16"),
    (["--base", "banana"], "--base must be an integer"),
    (["--grid", "2x4"], "--grid must be TxHxW"),
    (["--preset", "foo"], "--preset must be one of"),
    (["--groups", "4,6"], "--groups must be three channel counts"),
    (["--groups", "4,6,6"], "--groups needs --workload"),
    (["--kind", "attention"], "--kind attention needs a core built with the attention path"),
    (["--workload", "/nonexistent.npz"], "--workload must be an .npz file"),
    (["--variant", "fastest"], "variant must be one of"),
    (["--banks", "3"], "banks must be in [1, core_banks] = [1, 2]"),
    (["--seed", "-1"], "--seed must be a non-negative integer"),
    (["--v-window", "3"], "--v-window: for --kind attention only"),
    (["--kind", "linear", "--v-dir", "x"], "--v-dir: for --kind attention only"),
    (["--c-out", "8"], "--c-out: for --kind linear only"),
    (["--kind", "linear", "--c-out", "0"], "--c-out must be in [1, 65536]"),
    (["--window", "3"], "--window: for --kind linear only"),
    (["--kind", "linear", "--window", "4"], "--window must be 2 or 3"),
    (["--kind", "linear", "--window", "3"], "window = 3 needs a core built with engine_window3"),
], ids=["base-align", "base-text", "grid", "preset", "groups", "groups-no-data", "attention",
        "workload", "variant", "banks", "seed", "v-window", "v-dir", "c-out", "c-out-0",
        "window", "window-4", "window-3-not-built"])
def test_bad_input_writes_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "prog"
    assert main(["program", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="iverilog not on PATH")
def test_plain_verilog_testbench(tmp_path):
    """tb_kaleido_core.v, with no Python in the loop: Icarus runs the folder's program on the
    small core's Verilog (generated for program.json's configuration) and prints PASS; a
    word of memory_out.hex changed, or a command word that the core rejects, makes it print
    FAIL naming what differs."""
    keys = dict(SMALL, engine_dispatcher="none", engine_arrays=1)
    toml = _toml(tmp_path / "c.toml", keys)
    rtl = tmp_path / "rtl"
    assert main(["generate", "--config", toml, "--top", "kaleido_core", "--out", str(rtl)]) == 0
    out = tmp_path / "prog"
    assert main(["program", "--out", str(out), "--config", toml, "--groups", "4,6,6",
                 "--workload", _workload(tmp_path / "h.npz", GRID), "--grid", "2x3x4",
                 "--base", "0x20000000"]) == 0

    def run():
        build = subprocess.run(["iverilog", "-g2012", "-o", "tb", "tb_kaleido_core.v",
                                str(rtl / "kaleido_core.v")], cwd=out, capture_output=True,
                               text=True)
        assert build.returncode == 0, build.stderr
        sim = subprocess.run(["vvp", "-n", "tb"], cwd=out, capture_output=True, text=True,
                             timeout=600)
        lines = [x for x in sim.stdout.splitlines() if x.startswith(("PASS", "FAIL"))]
        assert len(lines) == 1, sim.stdout[-2000:]
        return lines[0]

    info = json.loads((out / "program.json").read_text())
    line = run()
    # Every counter, cycles and mem_wait included: the memory model has the timing of the
    # exact cycle model's memory.
    cycles = info["cycles_axi_ram"]
    n = len(set(info["counters"]) | set(cycles))
    assert line == (f"PASS: {info['commands']} commands, memory equal to memory_out.hex, {n} "
                    f"counters equal to program.json; cycles {cycles['cycles']}, mem_wait "
                    f"{cycles['mem_wait']}"), line
    # A result word the core does not write that way: the check fails and names the byte.
    hex_out = (out / "memory_out.hex").read_text().split()
    s = info["regions"]["s"]
    index = (s["address"] - info["base"]) // 8 + 3
    hex_out[index] = f"{int(hex_out[index], 16) ^ 1:016x}"
    (out / "memory_out.hex").write_text("\n".join(hex_out) + "\n")
    line = run()
    assert line == (f"FAIL: 1 of {len(hex_out)} memory words differ from memory_out.hex, the "
                    f"first at byte 0x{info['base'] + index * 8:x}"), line
    # A malformed command (opcode 0) as the third word: the core stops with error 1 there.
    cmds = (out / "commands.hex").read_text().split()
    cmds[2] = "0" * 32
    (out / "commands.hex").write_text("\n".join(cmds) + "\n")
    assert run() == "FAIL: error 1 at command 2"
