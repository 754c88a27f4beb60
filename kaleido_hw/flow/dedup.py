"""Share identical submodules in yosys-written Verilog: one module per distinct block.

Amaranth writes one Verilog module per *instance*: the four sequencers of the engine, the
sixteen PEs of an array, each come out as their own copy, differing only in names that
Amaranth and yosys invent (``\\port$2419$8``, ``\\$12``, ``\\$auto$...$8``). This pass
gives every invented name (an escaped identifier containing ``$``) a canonical name, module
by module from the leaves up, and keeps one module of each group of modules whose canonical
text is equal; the instances of the others are pointed at it.

Why it is exact: inside a module the renaming is a bijection on the invented names, applied
to every occurrence (declarations, statements, the port list); an instantiation's port
connections are renamed with the child's own map, so each connection still reaches the same
port. Two modules are merged only when their renamed texts are equal character for
character (declarations and ports put in canonical order, statements in yosys' order), so a
merge never changes what any instance computes; a pair the pass cannot prove equal simply
stays two modules. User names (ports of the top, named signals, instance names) are never
touched, so hierarchical paths (``dut.ctrl.engine.seq1.state``) are unchanged.
"""

from __future__ import annotations

import re


__all__ = ["share_identical_modules", "module_texts", "instance_modules"]

_MODULE = re.compile(r"^module (\\\S+ |[^\s(]+)\((.*?)\);\n(.*?)^endmodule\n", re.S | re.M)
_ESCAPED = re.compile(r"\\\S+(?= )")           # an escaped identifier ends at a space
_DECL = ("  input ", "  output ", "  inout ", "  wire ", "  reg ")
_INST = re.compile(r"^  (\\\S+ |[^\s(]+) +(\\\S+ |[^\s(]+) ?\($")   # module, instance
_CONN = re.compile(r"^    \.(\\\S+ |[^\s(]+)\((.*)\)(,?)$")


def share_identical_modules(text: str) -> str:
    """``text`` (Verilog from yosys' ``write_verilog``) with identical modules shared."""
    found = list(_MODULE.finditer(text))
    if not found:
        return text
    modules = {m.group(1).rstrip(): _Module(m.group(1).rstrip(), m.group(2), m.group(3))
               for m in found}
    shared, ports, keys, out = {}, {}, {}, {}
    for name in _leaves_first(modules):
        canonical, ports[name] = modules[name].canonical(shared, ports)
        key = canonical[len(f"module {_spaced(name)}"):]     # the text without the name
        if key in keys:
            shared[name] = keys[key]
        else:
            keys[key] = shared[name] = name
            out[name] = canonical
    # Modules in the order yosys wrote them (the top first), shared ones dropped.
    result = text[:found[0].start()] + "\n".join(out[n] for n in modules if n in out)
    dangling = [n for n in modules if n not in out and f" {_spaced(n)} " in result]
    if dangling:    # an instantiation this pass did not recognise: never drop its module
        raise ValueError(f"share_identical_modules: {dangling[0]} is still instantiated")
    return result


def module_texts(text: str) -> dict[str, str]:
    """{module name (without yosys' escaping backslash): the module's whole text} of
    yosys-written Verilog, in the order written."""
    return {m.group(1).rstrip().lstrip("\\"): m.group(0) for m in _MODULE.finditer(text)}


def instance_modules(text: str, top: str) -> dict[str, str]:
    """{hierarchical instance path below ``top`` ("" for the top): its module's name} of
    yosys-written Verilog (shared or not), in depth-first order of the instantiations."""
    found = module_texts(text)
    if top not in found:
        raise ValueError(f"instance_modules: no module {top}")
    out: dict[str, str] = {}

    def visit(path: str, module: str):
        out[path] = module
        for line in found[module].splitlines():
            m = _INST.match(line)
            child = m.group(1).rstrip().lstrip("\\") if m else None
            if child in found:
                inst = m.group(2).rstrip().lstrip("\\")
                visit(f"{path}.{inst}" if path else inst, child)

    visit("", top)
    return out


class _Module:
    """One module of yosys' output: its name, port names and lines."""

    def __init__(self, name: str, port_list: str, body: str):
        self.name = name
        self.ports = [p.strip() for p in port_list.split(",")] if port_list.strip() else []
        self.lines = body.splitlines()
        self.children = [m.group(1).rstrip() for line in self.lines if (m := _INST.match(line))]

    def canonical(self, shared: dict, ports: dict) -> tuple[str, dict]:
        """This module's text with canonical invented names, and the map from its port names
        to their canonical names."""
        lines = self._rewrite_instances(shared, ports)
        decls, stmts, attrs = [], [], []
        for line in lines:
            if line.startswith("  (* "):
                attrs.append(line)
            elif line.startswith(_DECL):
                decls.append(attrs + [line])
                attrs = []
            else:
                stmts.extend(attrs + [line])
                attrs = []
        stmts.extend(attrs)
        # Canonical names in the order of first use in the statements (yosys writes them in
        # the order of Amaranth's cells, the same in every copy); then the names used only in
        # declarations, in the order of their declarations with the name blanked out.
        order: dict[str, str] = {}
        for line in stmts:
            for token in _invented(line):
                order.setdefault(token, f"\\${len(order) + 1}")
        rest = {t for d in decls for line in d for t in _invented(line)} | {
            p for p in self.ports if "$" in p and p.startswith("\\")}
        for token in sorted(rest - order.keys(), key=lambda t: (_decl_key(t, decls), t)):
            order[token] = f"\\${len(order) + 1}"

        def rename(line: str) -> str:
            conn = _CONN.match(line)
            if conn:        # the port name is the child's (already canonical)
                return f"    .{conn.group(1)}({_rename(conn.group(2), order)}){conn.group(3)}"
            if _INST.match(line):
                return line
            return _rename(line, order)

        decls = sorted(([rename(x) for x in d] for d in decls), key=lambda d: _declared(d[-1]))
        port_list = sorted(order.get(p, p) for p in self.ports)
        header = f"module {_spaced(self.name)}({', '.join(_spaced(p) for p in port_list)});"
        body = [header] + [x for d in decls for x in d] + [rename(x) for x in stmts]
        return "\n".join(body) + "\nendmodule\n", {p: order[p] for p in self.ports if p in order}

    def _rewrite_instances(self, shared: dict, ports: dict) -> list[str]:
        """Lines with each instance pointed at its shared module and its connections renamed
        to the child's canonical port names, sorted (yosys sorts them by the old names)."""
        out, i = [], 0
        while i < len(self.lines):
            m = _INST.match(self.lines[i])
            if not m or m.group(1).rstrip() not in shared:
                out.append(self.lines[i])
                i += 1
                continue
            child, inst = m.group(1).rstrip(), m.group(2)
            conns, i = [], i + 1
            while self.lines[i] != "  );":
                c = _CONN.match(self.lines[i])
                if c is None:
                    raise ValueError(f"unexpected line in instance {inst} of {self.name}: "
                                     f"{self.lines[i]!r}")
                port = c.group(1).rstrip()
                conns.append((ports[child].get(port, port), c.group(2)))
                i += 1
            i += 1
            conns.sort()
            out.append(f"  {_spaced(shared[child])} {inst} (")
            out.extend(f"    .{_spaced(p)}({e})" + ("," if k < len(conns) - 1 else "")
                       for k, (p, e) in enumerate(conns))
            out.append("  );")
        return out


def _invented(line: str) -> list[str]:
    """Invented names (escaped identifiers with ``$``) in ``line``; in an instantiation only
    the connected expressions count (module, instance and port names are not renamed)."""
    if _INST.match(line):
        return []
    conn = _CONN.match(line)
    if conn:
        line = conn.group(2)
    return [t for t in _ESCAPED.findall(line + " ") if "$" in t]


def _rename(text: str, order: dict) -> str:
    return _ESCAPED.sub(lambda m: order.get(m.group(0), m.group(0)), text + " ")[:-1]


def _declared(line: str) -> str:
    """The name a declaration line declares."""
    core = line.split("=")[0].rstrip(" ;")
    core = re.sub(r"\s\[[^\]]*\]$", "", core)       # memories: reg [7:0] m [15:0]
    return core.split()[-1]


def _decl_key(token: str, decls: list) -> tuple:
    """Sort key of a name used in no statement: its declarations with the name blanked."""
    return tuple(x.replace(token + " ", "\0 ") for d in decls for x in d
                 if _declared(d[-1]) == token)


def _spaced(name: str) -> str:
    """An identifier as written: an escaped one needs its terminating space."""
    return name + " " if name.startswith("\\") else name


def _leaves_first(modules: dict) -> list[str]:
    """Module names, every module after all the modules it instantiates."""
    done, order = set(), []

    def visit(name: str):
        if name in done:
            return
        done.add(name)
        for child in modules[name].children:
            if child in modules:
                visit(child)
        order.append(name)

    for name in modules:
        visit(name)
    return order
