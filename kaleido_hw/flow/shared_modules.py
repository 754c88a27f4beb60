"""Convert a design to RTLIL with its repeated blocks built once.

Amaranth builds one netlist for the whole design, every instance of a block in full: the
engine core's four sequencers and four PE arrays are about half of the core's netlist, and
building it is most of ``make verilog``'s time (about 80 of 95 s). Yet the Verilog we write
keeps one module per distinct block (:mod:`kaleido_hw.flow.dedup`), so all but one copy are
built only to be thrown away.

A component promises that two of its instances are the same hardware by returning equal,
non-``None`` keys from ``shared_module_key()`` (the key holds every constructor argument that
shapes its netlist). :func:`convert_shared` elaborates the design without elaborating the
copies (only the first component of each key), replaces every instance of such a component
by an :class:`~amaranth.hdl.Instance` of one module, converted once from the first
instance with the component's signature as its ports, and converts the rest as usual. The
module is named after the first instance's path, as Amaranth would have named it, so the
instance paths, the module names the dedup pass keeps and the logic are those of the
whole-design conversion; only the shared modules' port names differ (the signature's member
names rather than the names of the signals that happen to drive them).

Why it is exact: the module has the component's ports, the instance connects each of them
to the very signal the parent uses, and :func:`convert_shared` checks that the parent reads
nothing else the component drives (an internal signal read across the boundary would
otherwise become an undriven, constant net; of a copy, which is never elaborated, only the
signals its constructor made can be held, and those that are not ports are checked). Equal
keys meaning equal hardware is the component's promise; ``tests/flow/test_shared_modules.py``
holds each key to it.
"""

from __future__ import annotations

from contextlib import contextmanager

from amaranth.back import rtlil
from amaranth.hdl import ClockSignal, Fragment, Instance, ResetSignal, Value, ValueCastable
from amaranth.hdl._ast import (Assign, Concat, Operator, Part, SignalSet, Slice, Switch,
                               SwitchValue)
from amaranth.hdl._ir import PortDirection
from amaranth.hdl._mem import MemoryInstance
from amaranth.lib import wiring


__all__ = ["convert_shared", "signature_ports", "shared_key"]


def shared_key(obj):
    """``obj``'s sharing key, or ``None`` if it is not a shareable component."""
    key = getattr(obj, "shared_module_key", None)
    return key() if callable(key) else None


def signature_ports(component) -> dict:
    """``{port name: (value, flow)}`` of a component's signature (members joined by ``__``)."""
    ports = {}
    for path, member, value in component.signature.flatten(component):
        if isinstance(value, ValueCastable):
            value = value.as_value()
        ports["__".join(map(str, path))] = (Value.cast(value), member.flow)
    return ports


def _port_directions(component) -> dict:
    """The ports of :func:`signature_ports` as RTLIL conversion takes them."""
    return {n: (v, PortDirection.Input if f == wiring.In else PortDirection.Output)
            for n, (v, f) in signature_ports(component).items()}


class _Copy(Fragment):
    """Stands, in the elaborated design, for a shareable component whose key was seen
    before: it is never elaborated, :func:`_replace` puts the instance in its place."""


@contextmanager
def _copies_not_elaborated():
    """While active, ``Fragment.get`` elaborates only the first component of every sharing
    key and returns a :class:`_Copy` for the others (Amaranth elaborates submodules through
    ``Fragment.get``, parents before children, so the copies are found in tree order)."""
    original = Fragment.__dict__["get"]
    seen = set()

    def get(obj, platform):
        key = shared_key(obj) if isinstance(obj, wiring.Component) else None
        if key is not None:
            if (type(obj), key) in seen:
                obj._MustUse__used = True      # it is used: as an instance of the first
                copy = _Copy()
                copy.origins = (obj,)
                return copy
            seen.add((type(obj), key))
        return original.__func__(obj, platform)

    Fragment.get = staticmethod(get)
    try:
        yield
    finally:
        Fragment.get = original


def convert_shared(component, name: str) -> str:
    """RTLIL of ``component`` as module ``name``, each shareable block converted once."""
    with _copies_not_elaborated():
        frag = Fragment.get(component, None)
    shared: dict = {}               # (class, key) -> (module name, its RTLIL)
    boundary = SignalSet()          # what the replaced blocks drive, ports excepted
    _replace(frag, [name], shared, boundary)
    if boundary:
        leaked = boundary & _used(frag)
        if leaked:
            names = ", ".join(sorted(s.name for s in leaked))
            raise ValueError(f"convert_shared: the design reads signals a shared block drives "
                             f"but does not export as ports: {names}")
    texts = [rtlil.convert_fragment(frag, _port_directions(component), name,
                                    emit_src=False)[0]]
    texts += [text for _, text in shared.values()]
    return "\n".join(texts)


def _replace(frag, path, shared, boundary):
    for i, (sub, subname, src_loc) in enumerate(frag.subfragments):
        origin = sub.origins[0] if sub.origins else None
        key = shared_key(origin) if isinstance(origin, wiring.Component) else None
        if key is None:
            _replace(sub, path + [subname], shared, boundary)
            continue
        key = (type(origin), key)
        if key not in shared:
            assert not isinstance(sub, _Copy), "a copy met before its first instance"
            # The first instance's fragment, already elaborated with the design, becomes
            # the module (rtlil.convert(origin) would elaborate it a second time).
            module = ".".join(path + [subname])
            shared[key] = (module, rtlil.convert_fragment(sub, _port_directions(origin), module,
                                                          emit_src=False)[0])
        module, text = shared[key]
        ports = signature_ports(origin)
        # A member of no bits is no port of the converted module.
        kwargs = {("i_" if flow == wiring.In else "o_") + n: v
                  for n, (v, flow) in ports.items() if len(v)}
        if _has_input(text, module, "clk"):
            kwargs["i_clk"] = ClockSignal()
        if _has_input(text, module, "rst"):
            kwargs["i_rst"] = ResetSignal()
        # What the block drives besides its outputs. A copy was never elaborated, so the
        # only signals of it anyone can hold are those its constructor made (a signal made
        # in its elaborate does not exist); those that are no ports would be undriven.
        if isinstance(sub, _Copy):
            inside, exported = _attribute_signals(origin), ports.values()
        else:
            inside = _driven(sub)
            exported = [(v, flow) for v, flow in ports.values() if flow == wiring.Out]
        for v, _ in exported:
            inside -= _signals(v)
        boundary |= inside
        frag.subfragments[i] = (Instance(module, **kwargs), subname, src_loc)


def _has_input(text: str, module: str, port: str) -> bool:
    """Whether ``module`` in RTLIL ``text`` has the input port ``port``."""
    start = text.index(f"module \\{module}\n")
    body = text[start:text.index("\nend\n", start)]
    return any(line.split()[-1] == f"\\{port}" and " input " in line
               for line in body.splitlines() if line.startswith("  wire "))


def _signals(item) -> SignalSet:
    """Signals of a value or statement. A domain's clock or reset stands for none (it is a
    port); Amaranth's own ``_rhs_signals`` refuses them before the domains are lowered."""
    if isinstance(item, (ClockSignal, ResetSignal)):
        return SignalSet()
    if isinstance(item, Assign):
        return _signals(item.lhs) | _signals(item.rhs)
    if isinstance(item, Switch):
        out = _signals(item.test)
        for _, stmts, _ in item.cases:
            for stmt in stmts:
                out |= _signals(stmt)
        return out
    parts = (item.operands if isinstance(item, Operator) else
             (item.value,) if isinstance(item, Slice) else
             (item.value, item.offset) if isinstance(item, Part) else
             item.parts if isinstance(item, Concat) else
             (item.test, *(v for _, v in item.cases)) if isinstance(item, SwitchValue) else None)
    if parts is None:
        return item._rhs_signals()
    out = SignalSet()
    for part in parts:
        out |= _signals(part)
    return out


def _attribute_signals(obj) -> SignalSet:
    """Signals held by ``obj``'s attributes (directly, or in a list, tuple or dict)."""
    out = SignalSet()
    for value in vars(obj).values():
        items = (value.values() if isinstance(value, dict) else
                 value if isinstance(value, (list, tuple)) else (value,))
        for item in items:
            if isinstance(item, ValueCastable):
                item = item.as_value()
            if isinstance(item, Value):
                out |= _signals(item)
    return out


def _driven(frag) -> SignalSet:
    """Signals driven anywhere in ``frag``'s tree."""
    return _collect(frag, driven=True)


def _used(frag) -> SignalSet:
    """Signals read or written anywhere in ``frag``'s tree (instances: their inputs)."""
    return _collect(frag, driven=False)


def _collect(frag, driven: bool) -> SignalSet:
    out = SignalSet()
    for stmts in frag.statements.values():
        for stmt in stmts:
            out |= stmt._lhs_signals() if driven else _signals(stmt)
    if isinstance(frag, Instance):
        for value, kind in frag.ports.values():
            if kind == ("o" if driven else "i"):
                out |= _signals(value)
    if isinstance(frag, MemoryInstance):
        if driven:
            for port in frag._read_ports:
                out |= _signals(port._data)
        else:
            for port in (*frag._read_ports, *frag._write_ports):
                out |= _signals(port._addr) | _signals(port._data) | _signals(port._en)
    for sub, _, _ in frag.subfragments:
        out |= _collect(sub, driven)
    return out
