"""The source hash of the synthesis caches (``kaleido_hw/flow/sources.py``): it follows
absolute and relative imports, changes when any reached file changes, and covers the real
tops' RTL sources (a key that hashed nothing would keep stale areas forever)."""

from __future__ import annotations

import pytest

from kaleido_hw.flow import sources
from kaleido_hw.reports import iso_area


def _tree(root):
    pkg = root / "kaleido_hw"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "top.py").write_text("from kaleido_hw.sub.leaf import x\nfrom .helper import y\n"
                                "from kaleido_hw import named as n\n"
                                "from kaleido_hw.sub import (\n    other,\n    leaf,\n)\n")
    (pkg / "helper.py").write_text("y = 1\n")
    (pkg / "named.py").write_text("n = 1\n")
    (pkg / "sub" / "other.py").write_text("o = 1\n")
    (pkg / "sub" / "leaf.py").write_text("from ..helper import y\nx = 2\n")
    (pkg / "unrelated.py").write_text("z = 3\n")
    return pkg


def test_follows_imports_and_changes_with_any_reached_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "REPO", tmp_path)
    pkg = _tree(tmp_path)
    names = {p.relative_to(tmp_path).as_posix()
             for p in sources.reachable_sources([pkg / "top.py"])}
    assert {"kaleido_hw/top.py", "kaleido_hw/helper.py", "kaleido_hw/sub/leaf.py",
            "kaleido_hw/sub/__init__.py", "kaleido_hw/named.py",     # a module imported by name
            "kaleido_hw/sub/other.py"} <= names                       # ... in parentheses
    assert "kaleido_hw/unrelated.py" not in names
    before = sources.sources_hash([pkg / "top.py"])
    (pkg / "unrelated.py").write_text("z = 4\n")
    assert sources.sources_hash([pkg / "top.py"]) == before
    (pkg / "sub" / "leaf.py").write_text("from ..helper import y\nx = 3\n")
    assert sources.sources_hash([pkg / "top.py"]) != before
    with pytest.raises(RuntimeError, match="none of"):
        sources.sources_hash([tmp_path / "missing.py"])


def test_iso_area_key_covers_the_tops_rtl():
    """The level-1 cache key of merged_array covers its cells, the PE and the flow."""
    from kaleido_hw.flow.generate import TOPS

    target = {t.module: t.python_module for t in TOPS}["merged_array"]
    files = {p.relative_to(sources.REPO).as_posix() for p in sources.reachable_sources(
        sources.module_file(target) + sources.module_file("kaleido_hw.flow.stdcell"))}
    assert {"kaleido_hw/dispatch/merged_cell.py", "kaleido_hw/pe/pe.py",
            "kaleido_hw/pe/datapath.py", "kaleido_hw/flow/stdcell.py",
            "kaleido_hw/flow/buffer_tree.py", "kaleido_hw/flow/sram_macros.py"} <= files
    assert iso_area.source_hash(["merged_array"]) != iso_area.source_hash(["cluster_scheduler"])
