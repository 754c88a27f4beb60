"""Every public function, class, method and property of ``kaleido_hw`` and ``golden`` has a
docstring (issue 7: every public Python function has help text).

Public: defined in the module itself, name not starting with ``_``. Methods named
``elaborate`` are Amaranth's elaboration protocol, explained by their class's docstring, and
are not listed; ``kaleido_hw.__main__`` is not imported (it runs the CLI).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

import golden
import kaleido_hw


EXCLUDED_MODULES = {"kaleido_hw.__main__"}            # runs the CLI on import
EXCLUDED_PREFIXES: tuple = ()
PROTOCOL_METHODS = {"elaborate"}

def _excluded(module: str) -> bool:
    return module in EXCLUDED_MODULES or module.startswith(EXCLUDED_PREFIXES)


def _own_doc(obj) -> str:
    """The docstring written for ``obj`` itself (not inherited, not dataclass-generated)."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__") or ""
        if dataclasses.is_dataclass(obj) and doc.startswith(obj.__name__ + "("):
            return ""   # the signature text dataclasses put there when there is no docstring
        return doc.strip()
    return (getattr(obj, "__doc__", None) or "").strip()


def _members(cls):
    """Public methods and properties defined in ``cls`` itself: (name, function)."""
    for name, attr in vars(cls).items():
        if name.startswith("_") or name in PROTOCOL_METHODS:
            continue
        if isinstance(attr, property):
            yield name, attr
        elif isinstance(attr, (staticmethod, classmethod)):
            yield name, attr.__func__
        elif inspect.isfunction(attr):
            yield name, attr


def undocumented(module) -> list[str]:
    """Qualified names of the public callables of ``module`` that lack a docstring."""
    name = module.__name__
    missing = [] if (module.__doc__ or "").strip() else [name]
    for attr, obj in vars(module).items():
        if attr.startswith("_") or getattr(obj, "__module__", None) != name:
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if not _own_doc(obj):
            missing.append(f"{name}.{attr}")
        if inspect.isclass(obj):
            missing += [f"{name}.{attr}.{m}" for m, f in _members(obj) if not _own_doc(f)]
    return missing


def public_modules():
    """Every module of the two packages, except the excluded ones."""
    for pkg in (kaleido_hw, golden):
        for info in pkgutil.iter_modules(pkg.__path__):
            name = f"{pkg.__name__}.{info.name}"
            if not _excluded(name):
                yield importlib.import_module(name)


def test_every_public_callable_has_a_docstring():
    missing = sorted({m for mod in public_modules() for m in undocumented(mod)})
    assert not missing, "public callables without a docstring:\n  " + "\n  ".join(missing)


def test_the_scan_sees_a_missing_docstring():
    """The scan can fail: undocumented functions, classes, methods and properties are found."""
    import types

    mod = types.ModuleType("fake_mod")
    mod.__doc__ = "A module."

    def f():
        pass

    @dataclasses.dataclass
    class D:
        x: int = 0

        @property
        def p(self):
            return 1

        def elaborate(self, platform):
            return None

    class Documented:
        """Has one."""

        def method(self):
            """Also has one."""

    for obj in (f, D, Documented):
        obj.__module__ = "fake_mod"
        setattr(mod, obj.__name__, obj)
    assert undocumented(mod) == ["fake_mod.f", "fake_mod.D", "fake_mod.D.p"]
