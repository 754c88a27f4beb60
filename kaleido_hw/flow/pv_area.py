"""Area and critical path of the PE arrays' extra modes (the P @ V mode; linear windows of 3)
against the PEs and arrays of ``make synth``, on the same standard-cell flow
(``docs/linear.md``, "P @ V on the PE arrays", "Area"; "Windows of 3 on the tile passes").

``python -m kaleido_hw.flow.pv_area [--json FILE] [--only pv|pv-pe]``: maps ``pv_cell`` (one
:class:`~kaleido_hw.array.pv_cell.PvCell`) and ``pv_array`` (the R x C
:class:`~kaleido_hw.array.pv_cell.PvArray` with its column decoders); the P @ V mode folded
into the engine's cells and arrays (``--only pv-pe`` below); and, unless ``--only``,
``baseline_pe``, ``kaleido_pe``, ``baseline_array`` and ``pe_array`` with the default
configuration, then prints the ratios (a few minutes on two cores). ``--only pv`` maps the
first two, ``--only pv-pe`` the tops of the folded mode: ``tile_cell``, ``pv_tile_cell``,
``pv_pe_array``, and the same for the engine's matcher array: ``merged_cell`` (the
:class:`~kaleido_hw.dispatch.merged_cell.MergedCell`), ``pv_merged_cell``, ``merged_array``
and ``pv_merged_array`` (:mod:`kaleido_hw.dispatch.pv_merged_cell`). ``--only window3`` maps
the TileCell and the PEArray with and without linear window-3 quads: ``tile_cell``,
``window3_tile_cell``, ``tile_pe_array`` (the PEArray, as ``pe_array``) and
``window3_pe_array`` (:class:`~kaleido_hw.array.array.Window3PEArray`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from kaleido_hw.array.array import PEArray, Window3PEArray
from kaleido_hw.array.pv_cell import PvArray, PvCell
from kaleido_hw.array.pv_tile_cell import PvPEArray, PvTileCell
from kaleido_hw.array.tile_cell import TileCell, Window3TileCell
from kaleido_hw.dispatch.merged_array import MergedArray
from kaleido_hw.dispatch.merged_cell import MergedCell
from kaleido_hw.dispatch.pv_merged_cell import PvMergedArray, PvMergedCell
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow.generate import emit_verilog
from kaleido_hw.flow.stdcell import synth_stdcell


__all__ = ["measure", "main"]

REFERENCES = ("baseline_pe", "kaleido_pe", "baseline_array", "pe_array")
#: The tops of each ``--only`` group: name -> component class.
GROUPS = {"pv": {"pv_cell": PvCell, "pv_array": PvArray},
          "pv-pe": {"tile_cell": TileCell, "pv_tile_cell": PvTileCell,
                    "pv_pe_array": PvPEArray, "merged_cell": MergedCell,
                    "pv_merged_cell": PvMergedCell, "merged_array": MergedArray,
                    "pv_merged_array": PvMergedArray},
          "window3": {"tile_cell": TileCell, "window3_tile_cell": Window3TileCell,
                      "tile_pe_array": PEArray, "window3_pe_array": Window3PEArray}}
#: Ratios printed: (top, reference).
RATIOS = (("pv_cell", "baseline_pe"), ("pv_cell", "kaleido_pe"),
          ("pv_array", "baseline_array"), ("pv_array", "pe_array"),
          ("pv_tile_cell", "tile_cell"), ("pv_tile_cell", "pv_cell"),
          ("pv_pe_array", "pe_array"), ("pv_pe_array", "pv_array"),
          ("pv_pe_array", "baseline_array"), ("pv_merged_cell", "merged_cell"),
          ("pv_merged_array", "merged_array"), ("pv_merged_array", "pv_array"),
          ("window3_tile_cell", "tile_cell"), ("window3_pe_array", "tile_pe_array"))


def measure(config: KaleidoConfig, references: bool = True, groups=tuple(GROUPS)) -> dict:
    """``{top: StdCellResult as a dict}`` for the tops of ``groups`` (and the references)."""
    out = {}
    for group in groups:
        for name, cls in GROUPS[group].items():
            out[name] = asdict(synth_stdcell(name, config,
                                             verilog=emit_verilog(cls(config), name)))
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
    parser.add_argument("--only", choices=tuple(GROUPS),
                        help="pv: only the P @ V cell and array; pv-pe: only the TileCell and "
                             "the cell and array with the P @ V mode folded in; window3: the "
                             "TileCell and PEArray with and without linear window-3 quads")
    args = parser.parse_args(argv)
    res = measure(KaleidoConfig(), references=args.only is None,
                  groups=(args.only,) if args.only else tuple(GROUPS))
    for name, r in res.items():
        print(f"{name:15s} area {r['area_um2']} um2  cells {r['cells']}  FFs {r['ffs']}  "
              f"path {r['path_ns']} ns  power {r['power_mw']} mW  notes {r['notes']}")
    for a, b in RATIOS:
        if a not in res or b not in res:
            continue
        print(f"{a} / {b}: area {_ratio(res, a, b, 'area_um2')}, "
              f"path {_ratio(res, a, b, 'path_ns')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
