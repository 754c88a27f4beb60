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

_ABSOLUTE = re.compile(r"^[ \t]*import ((?:kaleido_hw|golden)(?:\.\w+)*)", re.M)
# ``from X import a, b as c``: X and, for a package X, its submodules a and b.
_FROM = re.compile(r"^[ \t]*from (\.*)((?:kaleido_hw|golden)?(?:\.?\w+)*) import "
                   r"(?:\(([^)]*)\)|([\w \t,]+))", re.M)


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
        targets = [(REPO, dotted.split("."), ()) for dotted in _ABSOLUTE.findall(text)]
        for dots, dotted, wrapped, names in _FROM.findall(text):
            names = wrapped or names
            if not dots and not dotted.startswith(("kaleido_hw", "golden")):
                continue                     # another package's import
            root = REPO
            if dots:
                root = f.parent
                for _ in range(len(dots) - 1):
                    root = root.parent
            names = [n.split()[0] for n in names.split(",") if n.strip()]
            targets.append((root, dotted.split(".") if dotted else [], names))
        for root, parts, names in targets:
            base = root.joinpath(*parts)
            # the module, the packages it runs on the way, and imported names that are modules
            todo += [base.with_suffix(".py"), base / "__init__.py"]
            todo += [root.joinpath(*parts[:k], "__init__.py") for k in range(1, len(parts))]
            todo += [base / f"{n}.py" for n in names]
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
