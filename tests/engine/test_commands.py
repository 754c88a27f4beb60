"""Command words of the streaming engine core (``golden/engine/commands.py``, ``docs/engine.md``
"Command stream"): exact bit fields, encode/decode round trip, malformed words, field
overflow errors, and the docs' tables equal to the generated ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from golden.engine.commands import (ALIGN, COMMANDS, ERROR_CODES, FIELDS, GROUPS_PER_WORD,
                                    OPCODES, WORD_BITS, Attention, Compute, Config,
                                    DecodeError,
                                    FieldError, Groups, Load, Store, Strides, decode,
                                    encode_program, error_table, groups_commands,
                                    markdown_table)


DOC = Path(__file__).resolve().parents[2] / "docs" / "engine.md"


def test_fields_are_disjoint_and_inside_the_word():
    for name, fields in FIELDS.items():
        used = 0xF                                   # the opcode
        for field, lo, width, _ in fields:
            mask = ((1 << width) - 1) << lo
            assert lo >= 4 and lo + width <= WORD_BITS, (name, field)
            assert not used & mask, f"{name}.{field} overlaps another field"
            used |= mask
    assert set(OPCODES.values()) == set(FIELDS) == {c.NAME for c in COMMANDS.values()}


def test_fixed_layout_of_config_and_load():
    # The layout is a contract with the hardware: pin a few fields to their bits.
    c = Config(2, 4, 8, 128, 2, 0, 1, 5, 3, 1, 1, 0, 4, 16, 17)
    w = c.encode()
    assert w & 0xF == 1
    assert (w >> 4) & 0xFF == 2 and (w >> 20) & 0xFF == 8 and (w >> 28) & 0x1FF == 128
    assert (w >> 43) & 7 == 5 and (w >> 46) & 7 == 3 and (w >> 49) & 7 == 0b011
    assert (w >> 84) & 0xFFFF == 17
    ld = Load(1, 1, 2, 4, 8, 0x1234_5678_9ABC_DEF0).encode()
    assert ld >> 64 == 0x1234_5678_9ABC_DEF0 and (ld >> 4) & 0xF == 0b0101
    a = Attention(0xB8AA, 13, 2, 1, 1).encode()
    assert a & 0xF == 8 and (a >> 4) & 0xFFFF == 0xB8AA and (a >> 20) & 0x3F == 13
    assert (a >> 26) & 3 == 2 and (a >> 28) & 3 == 0b11 and a >> 30 == 0
    cp = Compute(1, 0, 2, 0, 3, 1, 1).encode()
    assert (cp >> 4) & 0x1FFF == 0b1_1_11_0_0010_00_01 and cp >> 17 == 0


def _compute_strategy():
    """Valid COMPUTEs: kinds 0 and 1 with v_bank, first, last 0; kind 2 without acc."""
    bank = st.integers(0, 3)
    s_or_linear = st.builds(Compute, bank, bank, st.integers(0, 1), st.integers(0, 1))
    attention = st.builds(Compute, bank, bank, st.just(2), st.just(0), bank,
                          st.integers(0, 1), st.integers(0, 1))
    return st.one_of(s_or_linear, attention)


def _command_strategy(cls):
    if cls is Compute:
        return _compute_strategy()
    if cls is Groups:
        return st.builds(Groups, st.integers(0, 511),
                         st.lists(st.integers(0, 3), min_size=1, max_size=GROUPS_PER_WORD)
                         .map(tuple))
    kw = {}
    for field, _, width, _ in FIELDS[cls.NAME]:
        hi = (1 << width) - 1
        if field == "side":
            hi = 2
        kw[field] = st.integers(0, hi)
    return st.builds(cls, **kw)


ANY_COMMAND = st.one_of(*[_command_strategy(c) for c in COMMANDS.values()])


@settings(max_examples=300, deadline=None)
@given(ANY_COMMAND)
def test_encode_decode_round_trip(cmd):
    w = cmd.encode()
    assert 0 <= w < 1 << WORD_BITS
    back = decode(w)
    assert back == cmd and type(back) is type(cmd)
    assert back.encode() == w


@settings(max_examples=200, deadline=None)
@given(ANY_COMMAND, st.integers(4, WORD_BITS - 1))
def test_every_reserved_bit_is_rejected(cmd, bit):
    w = cmd.encode()
    fields = FIELDS[cmd.NAME]
    if any(lo <= bit < lo + width for _, lo, width, _ in fields):
        return
    if cmd.NAME == "GROUPS" and bit >= 32:
        return      # group bits past count: checked below
    with pytest.raises(DecodeError, match="reserved bit"):
        decode(w | 1 << bit)


@pytest.mark.parametrize("op", [0, 9, 15])
def test_unknown_opcode(op):
    with pytest.raises(DecodeError, match=f"opcode {op} is not a command"):
        decode(op | 1 << 64)


@pytest.mark.parametrize("word, match", [
    (Strides(0, 16, 16, 16).encode() | 3 << 4,
     r"STRIDES.side must be 0 \(Q\), 1 \(K\) or 2 \(V\); 3"),
    (Load(0, 0, 0, 0, 0, 0).encode() | 3 << 4, r"LOAD.side .* 3 is reserved"),
    (Compute(0, 0).encode() | 7 << 8, r"COMPUTE.kind .* 7 is reserved"),
    (Compute(0, 0).encode() | 1 << 15, r"v_bank, first and last must be 0 with kind 0"),
    (Compute(0, 0, 1).encode() | 2 << 13, r"v_bank, first and last must be 0 with kind 1"),
    (Compute(0, 0, 2).encode() | 1 << 12, r"acc must be 0 with kind 2"),
    (2 | 0 << 13, r"GROUPS.count must be in \[1, 48\], got 0"),
    (2 | 49 << 13, r"GROUPS.count must be in \[1, 48\], got 49"),
    (2 | 1 << 13 | 1 << 34, "group bits set past its count 1"),
    (-1, r"in \[0, 2\*\*128\)"),
    (1 << 128, r"in \[0, 2\*\*128\)"),
    ("1", "must be an integer"),
])
def test_reserved_encodings_are_malformed(word, match):
    with pytest.raises(DecodeError, match=match):
        decode(word)


@pytest.mark.parametrize("cmd, match", [
    (Config(256, 1, 1, 8, 2, 0, 1, 5, 3, 1, 0, 0, 1, 1, 1), r"CONFIG.box_t must be in \[0, 255\] \(8 bits\), got 256"),
    (Config(1, 1, 1, 512, 2, 0, 1, 5, 3, 1, 0, 0, 1, 1, 1), r"CONFIG.head_dim must be in \[0, 511\] \(9 bits\)"),
    (Config(1, 1, 1, 8, 2, 0, 1, 5, 3, 1, 0, 0, 1, 1, 65536), r"CONFIG.grid_w must be in \[0, 65535\] \(16 bits\)"),
    (Config(1, 1, 1, 8, 2, 0, 1, 8, 3, 1, 0, 0, 1, 1, 1), r"CONFIG.full_bits must be in \[0, 7\] \(3 bits\)"),
    (Config(1, 1, 1, 8, 2, 0, 1, 5, 3, 2, 0, 0, 1, 1, 1), r"CONFIG.reuse must be in \[0, 1\] \(1 bits\)"),
    (Config(1, 1, 1, 8, True, 0, 1, 5, 3, 1, 0, 0, 1, 1, 1), r"CONFIG.dir_t must be an integer"),
    (Load(0, 4, 0, 0, 0, 0), r"LOAD.bank must be in \[0, 3\] \(2 bits\), got 4"),
    (Load(0, 0, 0, 0, 0, 1 << 64), r"LOAD.address must be in \[0, 18446744073709551615\]"),
    (Strides(0, 1 << 18, 0, 0), r"STRIDES.token_stride must be in \[0, 262143\] \(18 bits\)"),
    (Store(-16), r"STORE.address must be in \[0, 18446744073709551615\] \(64 bits\), got -16"),
    (Compute(0, 0, 16), r"COMPUTE.kind must be in \[0, 15\] \(4 bits\)"),
    (Groups(0, (0,) * 49), r"GROUPS.count must be in \[1, 48\]"),
    (Groups(0, (0, 4)), r"GROUPS.groups\[1\] must be in \[0, 3\] \(2 bits\), got 4"),
    (Groups(512, (0,)), r"GROUPS.first must be in \[0, 511\] \(9 bits\)"),
])
def test_field_overflow_names_field_and_range(cmd, match):
    with pytest.raises(FieldError, match=match):
        cmd.encode()


def test_groups_commands_cover_the_map():
    group_of = [0] * 16 + [1] * 56 + [2] * 56
    cmds = groups_commands(group_of)
    assert [c.first for c in cmds] == [0, 48, 96]
    assert [g for c in cmds for g in c.groups] == group_of
    assert [decode(w) for w in encode_program(cmds)] == cmds


def test_markdown_table_lists_every_field():
    text = markdown_table()
    for name, fields in FIELDS.items():
        assert f"**{name}** (opcode" in text
        for field, lo, width, _ in fields:
            bits = f"[{lo}]" if width == 1 else f"[{lo + width - 1}:{lo}]"
            assert f"| {bits} | {field} |" in text
    with pytest.raises(ValueError, match="command must be one of CONFIG"):
        markdown_table("NOP")
    assert error_table().count("\n") == len(ERROR_CODES) + 2
    assert ALIGN == 16


def test_docs_carry_the_generated_tables():
    text = DOC.read_text()
    m = re.search(r"^## Command stream\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, "docs/engine.md has no section '## Command stream'"
    section = m.group(1)
    assert markdown_table() in section, (
        "the command tables of docs/engine.md differ from golden.engine.commands."
        "markdown_table(); paste its output")
    assert error_table() in section, "the error table differs from error_table()"
