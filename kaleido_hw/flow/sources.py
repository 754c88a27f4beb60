"""Content hash of the Python sources a generated design depends on, for the caches of the
synthesis flows (``build/engine_area.json``, ``build/iso_area_stdcell.json``): a cached
result is reused only while every source file it was built from is byte for byte the same.

The sources are the entry files and every file they reach by imports of ``kaleido_hw`` or
``golden`` modules (absolute, or relative within a package), followed transitively.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

__all__ = ["REPO", "module_file", "reachable_sources", "sources_hash"]

#: The repository root (the folder holding ``kaleido_hw/`` and ``golden/``).
REPO = Path(__file__).resolve().parents[2]

_ABSOLUTE = re.compile(r"^\s*(?:from|import) ((?:kaleido_hw|golden)(?:\.\w+)*)", re.M)
_RELATIVE = re.compile(r"^\s*from (\.+)(\w*(?:\.\w+)*) import", re.M)


def module_file(dotted: str) -> list[Path]:
    """The candidate files of module ``dotted`` ("kaleido_hw.flow.stdcell"): the ``.py`` file
    and the package's ``__init__.py`` (whichever exists is read)."""
    base = REPO.joinpath(*dotted.split("."))
    return [base.with_suffix(".py"), base / "__init__.py"]


def reachable_sources(entries) -> list[Path]:
    """Every existing source file reachable from ``entries`` (paths), sorted."""
    todo, seen = [Path(e).resolve() for e in entries], set()
    while todo:
        f = todo.pop()
        if f in seen or not f.exists():
            continue
        seen.add(f)
        text = f.read_text()
        for dotted in _ABSOLUTE.findall(text):
            parts = dotted.split(".")
            todo += module_file(dotted)     # and the packages it runs on the way:
            todo += [REPO.joinpath(*parts[:k], "__init__.py") for k in range(1, len(parts))]
        for dots, rest in _RELATIVE.findall(text):
            pkg = f.parent
            for _ in range(len(dots) - 1):
                pkg = pkg.parent
            base = pkg.joinpath(*rest.split(".")) if rest else pkg
            todo += [base.with_suffix(".py"), base / "__init__.py"]
    return sorted(seen)


def sources_hash(entries) -> str:
    """SHA-256 (16 hex digits) of the files :func:`reachable_sources` finds, names included;
    raises ``RuntimeError`` if none of ``entries`` exists."""
    files = reachable_sources(entries)
    if not files:
        raise RuntimeError(f"sources_hash: none of {[str(e) for e in entries]} exists")
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]
