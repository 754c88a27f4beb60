"""docs/architecture.md agrees with the generated manifest and the generator.

Every top of ``rtl_out/manifest.json`` and of ``kaleido_hw.flow.generate.TOPS`` needs a section
``### `<module>`...`` in docs/architecture.md whose port table lists exactly its ports, with
the same direction, width (default configuration), signedness and meaning as the manifest and
as a freshly built component. The "width rule" column (an expression over KaleidoConfig keys;
empty = fixed width) is checked against components built for several non-default
configurations, so the rules cannot drift either. A row whose port name contains ``<k>``
stands for one port per array, k = 0 .. engine_arrays - 1 (``<k>`` in its meaning is replaced
by k as well).

When a new top lands, print a table to paste (then fill in its width rules) with::

    .venv/bin/python tests/test_architecture_doc.py MODULE
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from kaleido_hw.flow.generate import TOPS


ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
MANIFEST = ROOT / "rtl_out" / "manifest.json"

TABLE_HEADER = "| port | dir | width | width rule | meaning |"
SECTION = re.compile(r"^### `(\w+)`", re.M)
ANY_HEADING = re.compile(r"^#{1,3} ", re.M)
REPO_PATH = re.compile(r"`((?:kaleido_hw|golden|sim|docs|tests|rtl_out)/[\w./-]*)`")
LINK = re.compile(r"\]\(([^)#\s]+)")


def bits(n: int) -> int:
    """Bits of an unsigned field that holds ``0..n`` (at least 1), as the width rules use it."""
    return max(1, int(n).bit_length())


def load_manifest() -> dict:
    """The committed manifest of rtl_out/."""
    return json.loads(MANIFEST.read_text())


def doc_sections(text: str) -> dict[str, str]:
    """Map module name -> text of its ``### `module``` section (up to the next heading)."""
    sections = {}
    for m in SECTION.finditer(text):
        nxt = ANY_HEADING.search(text, m.end())
        sections[m.group(1)] = text[m.end():nxt.start() if nxt else len(text)]
    return sections


def port_rows(section: str) -> list[dict]:
    """Rows of the section's port table: name, direction, width, signed, rule, meaning."""
    lines = section.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == TABLE_HEADER)
    except StopIteration:
        return []
    rows = []
    for line in lines[start + 2:]:   # skip header and separator
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name, direction, width, rule = cells[:4]
        meaning = "|".join(cells[4:]).strip()
        m = re.fullmatch(r"(\d+)( s)?", width)
        assert m, f"width cell {width!r} of port {name} is not 'N' or 'N s'"
        rows.append({"name": name.strip("`"), "direction": direction, "width": int(m.group(1)),
                     "signed": bool(m.group(2)), "rule": rule.strip("`"), "meaning": meaning})
    return rows


def expand(rows: list[dict], config) -> dict[str, dict]:
    """Port name -> row, with ``<k>`` rows repeated for every array of ``config``."""
    out = {}
    for r in rows:
        ks = range(config.engine_arrays) if "<k>" in r["name"] else [None]
        for k in ks:
            sub = (lambda s: s) if k is None else (lambda s, k=k: s.replace("<k>", str(k)))
            out[sub(r["name"])] = {**r, "name": sub(r["name"]), "meaning": sub(r["meaning"])}
    return out


def eval_rule(rule: str, config) -> int:
    """Width given by ``rule`` (KaleidoConfig keys, ``bits``, integer arithmetic)."""
    return eval(rule, {"__builtins__": {}}, {"bits": bits, **config.to_dict()})  # noqa: S307


def variant_configs():
    """Non-default configurations that move every width rule (small, odd and large values)."""
    from kaleido_hw.config import KaleidoConfig
    return [
        KaleidoConfig(rows=2, cols=8, acc_width=30, engine_max_tokens=200, engine_max_head_dim=40,
                      sched_entries=24, sched_pattern_width=12, sched_clusters=3,
                      matcher_channels=6, token_id_width=10, matcher_lookahead=2,
                      engine_arrays=2, axi_addr_width=40, vector_lanes=5, vector_max_row=20,
                      vector_score_bits=32),
        KaleidoConfig(rows=1, cols=2, acc_width=48, engine_max_tokens=16, engine_max_head_dim=8,
                      sched_entries=4, sched_pattern_width=4, sched_clusters=2,
                      matcher_channels=1, token_id_width=1, engine_arrays=1,
                      axi_addr_width=64, axi_data_width=32, vector_lanes=1, vector_max_row=1,
                      vector_score_bits=16),
        KaleidoConfig(rows=16, cols=16, engine_max_tokens=1024, engine_max_head_dim=256,
                      sched_entries=256, sched_pattern_width=64, sched_clusters=16,
                      matcher_channels=64, token_id_width=32, engine_arrays=8,
                      axi_data_width=128, vector_lanes=64, vector_max_row=256),
        # Rows of S that fit the vector unit (the attention path needs vector_max_row >=
        # engine_max_tokens).
        KaleidoConfig(rows=2, cols=4, acc_width=28, engine_max_tokens=24, engine_max_head_dim=24,
                      sched_entries=8, sched_pattern_width=8, matcher_channels=8, engine_arrays=3,
                      vector_lanes=3, vector_max_row=24, vector_score_bits=20),
        # vector_lanes = engine_arrays * cols (block_attention's beats).
        KaleidoConfig(rows=2, cols=3, acc_width=26, engine_max_tokens=12, engine_max_head_dim=24,
                      sched_entries=8, sched_pattern_width=4, matcher_channels=4, engine_arrays=2,
                      vector_lanes=6, vector_max_row=12, vector_score_bits=18),
    ]


MANIFEST_TOPS = [t["module"] for t in load_manifest()["tops"]]
#: Tops the generator builds now (a top joins TOPS before rtl_out/ is regenerated).
GENERATED_TOPS = [t.module for t in TOPS]


@pytest.fixture(scope="module")
def sections():
    return doc_sections(DOC.read_text())


def test_manifest_is_the_default_configuration():
    from kaleido_hw.config import KaleidoConfig
    assert load_manifest()["config"] == KaleidoConfig().to_dict(), \
        "rtl_out/manifest.json is not the default generation: run make verilog"


def test_every_section_is_a_generated_top(sections):
    extra = sorted(set(sections) - set(MANIFEST_TOPS) - set(GENERATED_TOPS))
    assert not extra, f"docs/architecture.md has sections for tops nobody generates: {extra}"


@pytest.mark.parametrize("module", MANIFEST_TOPS)
def test_port_table_matches_manifest(module, sections):
    assert module in sections, (
        f"docs/architecture.md has no section '### `{module}`: ...' (print a port table with "
        f"`.venv/bin/python tests/test_architecture_doc.py {module}`)")
    from kaleido_hw.config import KaleidoConfig
    top = next(t for t in load_manifest()["tops"] if t["module"] == module)
    rows = expand(port_rows(sections[module]), KaleidoConfig())
    assert rows, f"section {module} has no port table with header {TABLE_HEADER!r}"
    ports = {p["name"]: p for p in top["ports"]}
    assert not sorted(set(ports) - set(rows)), f"{module}: ports missing in the doc"
    assert not sorted(set(rows) - set(ports)), f"{module}: doc lists ports not in the manifest"
    for name, p in ports.items():
        r = rows[name]
        for key in ("direction", "width", "signed"):
            assert r[key] == p[key], f"{module}.{name}: doc {key} {r[key]!r}, manifest {p[key]!r}"
        assert " ".join(r["meaning"].split()) == " ".join(p["meaning"].replace("|", "/").split()), \
            f"{module}.{name}: meaning differs from the manifest's"


@pytest.mark.parametrize("module", GENERATED_TOPS)
def test_width_rules_hold_for_other_configurations(module, sections):
    """The table against freshly built components: the default configuration (names, widths,
    signedness) and the variants (names and width rules)."""
    from kaleido_hw.config import KaleidoConfig
    from kaleido_hw.flow.generate import build_top, port_table
    top = next(t for t in TOPS if t.module == module)
    rows = port_rows(sections.get(module, ""))
    assert rows, f"docs/architecture.md has no port table for {module}"
    for r in rows:
        if r["rule"]:
            assert eval_rule(r["rule"], KaleidoConfig()) == r["width"], \
                f"{module}.{r['name']}: rule {r['rule']!r} does not give the default width"
    default = {p["name"]: p for p in port_table(build_top(top, KaleidoConfig()))}
    expanded = expand(rows, KaleidoConfig())
    assert set(expanded) == set(default), (
        f"{module}: ports {sorted(set(default) ^ set(expanded))} are in only one of the doc's "
        f"table and the component")
    for name, r in expanded.items():
        assert (r["width"], r["signed"]) == (default[name]["width"], default[name]["signed"]), \
            f"{module}.{name}: doc and component differ in width or signedness"
        assert " ".join(r["meaning"].split()) == \
            " ".join(default[name]["meaning"].replace("|", "/").split()), \
            f"{module}.{name}: meaning differs from the component's PORT_DOCS"
    checked = 0
    for config in variant_configs():
        try:
            ports = {p["name"]: p["width"] for p in port_table(build_top(top, config))}
        except ValueError:   # a top may reject a variant (e.g. a size it cannot address)
            continue
        checked += 1
        expanded = expand(rows, config)
        assert set(expanded) == set(ports), (
            f"{module} for {config}: ports {sorted(set(ports) ^ set(expanded))} are in only one "
            f"of the doc's table and the generated component")
        for r in expanded.values():
            want = eval_rule(r["rule"], config) if r["rule"] else r["width"]
            assert ports[r["name"]] == want, (
                f"{module}.{r['name']}: {ports[r['name']]} bits for {config}, the doc's "
                f"{'rule ' + repr(r['rule']) if r['rule'] else 'fixed width'} gives {want}")
    assert checked, f"{module} accepted none of the variant configurations"


def test_repository_paths_and_links_exist():
    text = DOC.read_text()
    missing = sorted({p for p in REPO_PATH.findall(text) if not (ROOT / p).exists()})
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"
    links = LINK.findall(text)
    assert links, "no links found"
    broken = sorted({p for p in links if not (DOC.parent / p).exists()})
    assert not broken, f"docs/architecture.md has broken links: {broken}"


def test_table_parser_rejects_a_wrong_doc():
    """The checks above bite: a dropped port and a wrong width are both seen."""
    text = DOC.read_text()
    section = doc_sections(text)[MANIFEST_TOPS[0]]
    rows = port_rows(section)
    assert len(rows) == len(load_manifest()["tops"][0]["ports"])
    first = next(line for line in section.splitlines() if line.startswith("| `"))
    assert len(port_rows(section.replace(first + "\n", ""))) == len(rows) - 1
    changed = re.sub(r"\| (\d+)( s)? \|", lambda m: f"| {int(m.group(1)) + 1}{m.group(2) or ''} |",
                     first, count=1)
    broken = port_rows(section.replace(first, changed))
    assert broken[0]["width"] == rows[0]["width"] + 1


def test_per_array_rows_expand():
    from kaleido_hw.config import KaleidoConfig
    rows = [{"name": "cnt__a<k>__quads", "direction": "out", "width": 32, "signed": False,
             "rule": "", "meaning": "quads of array <k>"}]
    got = expand(rows, KaleidoConfig(engine_arrays=3))
    assert sorted(got) == ["cnt__a0__quads", "cnt__a1__quads", "cnt__a2__quads"]
    assert got["cnt__a2__quads"]["meaning"] == "quads of array 2"


def print_table(module: str) -> None:
    """Print a port table of top ``module`` for the default configuration (width rules left
    empty); per-array ports ``..__a<k>__..`` are printed once, as ``<k>`` rows."""
    from kaleido_hw.config import KaleidoConfig
    from kaleido_hw.flow.generate import build_top, port_table
    top = next(t for t in TOPS if t.module == module)
    print(TABLE_HEADER)
    print("|---|---|---|---|---|")
    for p in port_table(build_top(top, KaleidoConfig())):
        name, meaning = p["name"], p["meaning"].replace("|", "/")
        m = re.search(r"__a(\d+)__", name)
        if m:
            if m.group(1) != "0":
                continue
            name = name.replace("__a0__", "__a<k>__")
            meaning = meaning.replace("array 0", "array <k>")
        width = f"{p['width']}{' s' if p['signed'] else ''}"
        print(f"| `{name}` | {p['direction']} | {width} |  | {meaning} |")


if __name__ == "__main__":
    for name in sys.argv[1:] or GENERATED_TOPS:
        print(f"### `{name}`\n")
        print_table(name)
        print()
