"""Per-access energy of the on-chip buffers and of DRAM, from published figures.

Neither memory is built by this repository's standard-cell flow (the SRAM macros of
``kaleido_hw.flow.sram_macros`` are area and timing models only), so their energy comes from
the literature, with the node it was stated for:

- :data:`HOROWITZ_SRAM_PJ`: M. Horowitz, "Computing's energy problem (and what we can do
  about it)", ISSCC 2014, Fig. 1.1.9 (45 nm, 0.9 V): one 64-bit read of an 8 KB SRAM costs
  about 10 pJ, of a 32 KB SRAM about 20 pJ, of a 1 MB SRAM about 100 pJ.
- :data:`HOROWITZ_DRAM_PJ_PER_BIT`: same source, a 64-bit DRAM access costs 1.3-2.6 nJ, i.e.
  20-40 pJ per bit; the low end is used (a modern DDR interface is nearer it; the paper uses
  DDR5-6400 with Micron's power calculator, which this repository does not have).

Node: the PE energies of ``golden/energy/data/pe_events.json`` are at 180 nm, 1.8 V. To put
the SRAM on the same node, :func:`sram_pj_per_byte` scales the 45 nm figure by
:data:`NODE_SCALE_45_TO_180` = 16 (dynamic energy ~ C V^2: capacitance x4 with the feature
size, V^2 x4 from 0.9 V to 1.8 V) - a first-order rule, stated as such. DRAM energy is
dominated by the DRAM die and the interface, not by the logic node, and is not scaled.

Plain Python; no hardware imports.
"""

from __future__ import annotations

__all__ = ["HOROWITZ_SRAM_PJ", "HOROWITZ_DRAM_PJ_PER_BIT", "NODE_SCALE_45_TO_180",
           "SRAM_SIZES", "sram_pj_per_byte", "dram_pj_per_byte", "CITATION"]

CITATION = ("M. Horowitz, 'Computing's energy problem (and what we can do about it)', "
            "ISSCC 2014, Fig. 1.1.9 (45 nm, 0.9 V)")
#: pJ per 64-bit read at 45 nm, by SRAM capacity.
HOROWITZ_SRAM_PJ = {"8KB": 10.0, "32KB": 20.0, "1MB": 100.0}
SRAM_SIZES = tuple(HOROWITZ_SRAM_PJ)
#: pJ per bit of a DRAM access (low end of 1.3-2.6 nJ per 64 bits).
HOROWITZ_DRAM_PJ_PER_BIT = 1300.0 / 64
#: First-order dynamic-energy factor from 45 nm / 0.9 V to 180 nm / 1.8 V.
NODE_SCALE_45_TO_180 = 16.0


def sram_pj_per_byte(size: str = "1MB", node_nm: int = 180) -> float:
    """pJ per byte read or written from an SRAM of ``size`` (a key of
    :data:`HOROWITZ_SRAM_PJ`), at ``node_nm`` = 45 (as published) or 180 (scaled)."""
    if size not in HOROWITZ_SRAM_PJ:
        raise ValueError(f"size must be one of {', '.join(SRAM_SIZES)}, got {size!r}")
    if node_nm not in (45, 180):
        raise ValueError(f"node_nm must be 45 or 180, got {node_nm!r}")
    scale = NODE_SCALE_45_TO_180 if node_nm == 180 else 1.0
    return HOROWITZ_SRAM_PJ[size] / 8 * scale


def dram_pj_per_byte() -> float:
    """pJ per byte moved to or from DRAM (node independent)."""
    return HOROWITZ_DRAM_PJ_PER_BIT * 8
