"""Area and critical path of the P @ V mode's cell and array against the PEs and arrays of
``make synth``, on the same standard-cell flow (``docs/linear.md``, "P @ V on the PE arrays",
"Area").

``python -m kaleido_hw.flow.pv_area [--json FILE] [--only pv]``: maps ``pv_cell`` (one
:class:`~kaleido_hw.array.pv_cell.PvCell`) and ``pv_array`` (the R x C
:class:`~kaleido_hw.array.pv_cell.PvArray` with its column decoders), and, unless ``--only
pv``, ``baseline_pe``, ``kaleido_pe``, ``baseline_array`` and ``pe_array`` with the default
configuration, then prints the ratios (a few minutes on two cores).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from kaleido_hw.array.pv_cell import PvArray, PvCell
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow.generate import emit_verilog
from kaleido_hw.flow.stdcell import synth_stdcell


__all__ = ["measure", "main"]

REFERENCES = ("baseline_pe", "kaleido_pe", "baseline_array", "pe_array")


def measure(config: KaleidoConfig, references: bool = True) -> dict:
    """``{top: StdCellResult as a dict}`` for the P @ V cell and array (and the references)."""
    out = {}
    for name, comp in (("pv_cell", PvCell(config)), ("pv_array", PvArray(config))):
        out[name] = asdict(synth_stdcell(name, config, verilog=emit_verilog(comp, name)))
    if references:
        for name in REFERENCES:
            out[name] = asdict(synth_stdcell(name, config))
    return out


def _ratio(res, a, b, key):
    x, y = res.get(a, {}).get(key), res.get(b, {}).get(key)
    return f"{x / y:.2f}x" if x and y else "-"


def main(argv=None) -> int:
    """Command line (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m kaleido_hw.flow.pv_area",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="write the results here")
    parser.add_argument("--only", choices=("pv",), help="only the P @ V cell and array")
    args = parser.parse_args(argv)
    res = measure(KaleidoConfig(), references=args.only is None)
    for name, r in res.items():
        print(f"{name:15s} area {r['area_um2']} um2  cells {r['cells']}  FFs {r['ffs']}  "
              f"path {r['path_ns']} ns  power {r['power_mw']} mW  notes {r['notes']}")
    for a, b in (("pv_cell", "baseline_pe"), ("pv_cell", "kaleido_pe"),
                 ("pv_array", "baseline_array"), ("pv_array", "pe_array")):
        print(f"{a} / {b}: area {_ratio(res, a, b, 'area_um2')}, "
              f"path {_ratio(res, a, b, 'path_ns')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
